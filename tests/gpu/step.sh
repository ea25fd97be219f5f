# step.sh — sourced by the GPU scripts (run.sh, mla.sh, moe_route.sh, moe_step.sh) from the
# repository root once they have set LOGS: makes that folder, zeroes the counts and defines
# their one way to run and count a step.
# step NAME CMD...: runs CMD with its output in $LOGS/NAME.log and counts it: "ok NAME (Ns):"
# and the log's last line, or "FAIL NAME" and the log's last 15 lines but its "ok" ones.
step() {
    local name=$1
    shift
    local t0=$SECONDS
    if "$@" >"$LOGS/$name.log" 2>&1; then
        passed=$((passed + 1))
        echo "ok   $name ($((SECONDS - t0))s): $(tail -n 1 "$LOGS/$name.log")"
    else
        failed=$((failed + 1))
        echo "FAIL $name ($((SECONDS - t0))s): see $name.log"
        grep -v '^ok ' "$LOGS/$name.log" | tail -n 15
    fi
}

mkdir -p "$LOGS"
passed=0 failed=0
