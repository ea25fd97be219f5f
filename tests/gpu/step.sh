# step.sh — sourced by the GPU scripts (run.sh, mla*.sh, moe_route.sh, moe_step.sh, idx_*.sh, arch.sh)
# from the repository root once they have set LOGS: makes that folder, zeroes the counts and
# defines their one way to run and count a step, to bound it by the script's time, and to use
# a JIT cache built ahead.
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

# within CAP CMD...: CMD under a timeout of CAP seconds, or of what is left before END (the
# script's own cap in seconds, if it sets one) where that is less; none when under 3 s are left.
within() {
    local cap=$1 end=${END:-100000}
    local left=$((end - SECONDS))
    shift
    [ "$left" -ge 3 ] || { echo "no time left (${SECONDS}s of $end)"; return 1; }
    timeout $((cap < left ? cap : left)) "$@"
}

# use_jit_cache FILE DIR: FILE (a KT_CACHE_DIR packed by tar -cJ, its top folder stripped) unpacked
# into DIR and used, so the script's cubins built ahead on the CPU are not compiled again; a
# KT_CACHE_DIR already set, or no FILE, is left as it is.
use_jit_cache() {
    [ -f "$1" ] && [ -z "${KT_CACHE_DIR:-}" ] || return 0
    rm -rf "$2" && mkdir -p "$2" && tar -xJf "$1" -C "$2" --strip-components 1 && export KT_CACHE_DIR=$2
    echo "JIT cache: $1 ($(find "$2" -type f | wc -l) files) at $2"
}

# vstep NAME KT ARGS...: `KT verify --family $VFAMILY --seed $SEED ARGS` in the background under a
# timeout of $VT seconds, its output and exit status kept in $LOGS/NAME.run and .rc (verifies time
# nothing, so they may run side by side); vcount counts them.
vnames=() vpids=()
vstep() {
    local name=$1 k=$2
    shift 2
    vnames+=("$name")
    (timeout "$VT" "$k" verify --family "$VFAMILY" --seed "$SEED" "$@" >"$LOGS/$name.run" 2>&1
        echo $? >"$LOGS/$name.rc") &
    vpids+=($!)
}

# vcount: waits for every vstep, then counts each as a step: a planted build's (NAME planted_*, but
# planted_*_inert) must fail on a result (exit 1, a wrong-result row, no compile or launch error),
# every other one must pass.
vcount() {
    local n
    wait "${vpids[@]}"
    for n in "${vnames[@]}"; do
        case $n in
            planted_*_inert | planted_inert) step "$n" sh -c 'cat "$1"; exit "$(cat "$2" 2>/dev/null || echo 99)"' _ \
                "$LOGS/$n.run" "$LOGS/$n.rc" ;;
            planted_*) step "$n" sh -c 'cat "$1"; [ "$(cat "$2" 2>/dev/null)" = 1 ] && grep -q "wrong-result" "$1" &&
                ! grep -q "compile error\|launch-error" "$1"' _ "$LOGS/$n.run" "$LOGS/$n.rc" ;;
            *) step "$n" sh -c 'cat "$1"; exit "$(cat "$2" 2>/dev/null || echo 99)"' _ "$LOGS/$n.run" "$LOGS/$n.rc" ;;
        esac
    done
}
