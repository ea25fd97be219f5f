# idx_trace.sh — sourced by the indexer's GPU scripts (idx_speed.sh) once step.sh
# is: trace NAME CONFIG SHAPES... runs a traced build's verify (KTT, default bin/kt_trace: a build
# with tests/gpu/idx_trace.patch, whose selection's CTA 0 prints its
# phase stamps each launch) and counts it as a step; per problem (B, L of request 0) the medians
# of its launches' stamps (ns from the scan's first CTA; clk: the selection CTA's cycles from its
# entry) go to $LOG/NAME.txt and the output.
trace() {
    local name=$1 cfg=$2
    shift 2
    KT_REPEATS=3 timeout "${TT:-14}" "${KTT:-bin/kt_trace}" verify --family mla_indexer --seed "$SEED" "$@" --config "$cfg" \
        >"$LOG/$name.log" 2>&1
    local rc=$?
    awk '/^idx_trace/ { k = $3 " " $5; if (!(k in n)) keys[++nk] = k; c = ++n[k]
             for (i = 6; i <= NF; i++) if ($i ~ /^-?[0-9]+$/) v[k, c, i] = $i; nf = NF; h = $0 }
         END { print "fields: " h
             for (q = 1; q <= nk; q++) { k = keys[q]; printf "B L0 %s: medians of %d launches:", k, n[k]
                 for (i = 6; i <= nf; i++) if ((k, 1, i) in v) { for (j = 1; j <= n[k]; j++) { x = v[k, j, i] + 0
                         for (m = j - 1; m >= 1 && a[m] > x; m--) a[m + 1] = a[m]; a[m + 1] = x }
                     printf " %s", a[int((n[k] + 1) / 2)] }
                 printf "\n" } }' "$LOG/$name.log" >"$LOG/$name.txt"
    if [ "$rc" -eq 0 ]; then passed=$((passed + 1)); echo "PASS $name"; else
        failed=$((failed + 1)); echo "FAIL $name (rc $rc; $LOG/$name.log)"; tail -3 "$LOG/$name.log"; fi
    grep -h "^ok\|^FAIL" "$LOG/$name.log" | cut -c1-200
    cat "$LOG/$name.txt"
}
