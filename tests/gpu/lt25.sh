#!/usr/bin/env bash
# lt25.sh — GPU checks of KT_STEP_GEMV_LT=1 (bench/NOTES.md, twenty-fifth session lt25: the step's gemv() GEMVs as
# cuBLASLt TF32 matmuls at B >= KT_STEP_GEMV_LT_MIN_B, 16). One H200, <= 115 s (KT_LT25_BUDGET; a part that would start
# past it is skipped, a FAIL), every run under its own timeout; from the tree's root with bin/kt (and bin/kt_plant_lt,
# from tests/gpu/lt25_plant.sh) built here. Parts, in order:
#   warm   the JIT cache filled (a cold one compiles model.cu and the families, ~40 s) by four 4-layer V4-Flash starts
#          side by side: B = 1 with the lever off and on (their dumps: check 2), B = 16 and 64 with it on;
#   2      B = 1 with KT_STEP_GEMV_LT=1: logits byte-identical to the lever off (it does not act below its B), and no
#          cuBLASLt GEMV set up;
#   1      V4-Flash synthetic `--tp-shapes 4 --context 8192 --steps 1 --json --dump` at B = 64, then 16, the lever
#          off, on, off, on: TPOT each, the per-op ms of the rt_gemv ops off against on; the lever's runs set up their
#          cuBLASLt GEMVs (the heuristic's algorithm printed) and captured with side chains; off byte-identical between
#          its runs, on too (one algorithm, no atomics: the same logits every replay); the lever's TPOT below off's
#          (the better of two runs each); on against off printed, not checked: the synthetic model amplifies any
#          rounding (the first call: median row 0.42 for TF32, 0.55 for the plant), so checks 3 and 4 judge on the
#          tiny V4 against its host reference;
#   3      the routed tiny V4 (runtime.sh's, made by transformers; teacher-forced on its prompt): at B = 16 (the prompt's
#          2 sequences 8 times) with the families and with --plain-kernels (rt_router reads the router's one split),
#          the lever on against off: the median per-step rel L2 (max over the batch) within 0.15 (its flip floor:
#          runtime.sh's gpu:ktref limit); at B = 2 with KT_STEP_GEMV_LT_MIN_B=2 against the float64 host reference in
#          kt's formats (kt run --reference kt, on the CPU from the start): within 0.15 (the lever off's distance
#          printed beside it);
#   4      bin/kt_plant_lt (the matmul's K in its layouts 128 short: every GEMV drops its last 128 products) on the
#          tiny V4 at B = 2 with KT_STEP_GEMV_LT_MIN_B=2: must fail check 3's host-reference limit, its median over
#          twice the lever's;
#   main   with $KT_MAIN (main's bin/kt) and 15 s left: main's step at B = 16 byte-identical to this build's lever off.
# Logs under $OUT/lt25 (or /tmp/kt-lt25), packed into $OUT/lt25_logs.tgz; dumps under /tmp/kt-lt25-dumps (removed).
# Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.." || exit 2
L=${OUT:+$OUT/lt25}
L=${L:-/tmp/kt-lt25}
rm -rf "$L" && mkdir -p "$L"
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/kt-rt-cache} # speed.sh's and runtime.sh's: warm after either
MODELS=${KT_RT_MODELS:-/tmp/kt-rt-models}
KT=./bin/kt PLANT=./bin/kt_plant_lt MAIN=${KT_MAIN:-} PY=${PYTHON:-python3}
F=$MODELS/flash D=$MODELS/routed X=/tmp/kt-lt25-dumps
rm -rf "$X" && mkdir -p "$X"
BUDGET=${KT_LT25_BUDGET:-115}
T0=$SECONDS
source tests/gpu/budget.sh # check, say, lim
FL="--model $F --synthetic --tp-shapes 4 --context 8192"
V=32320 # V4-Flash's LM head rows at --tp-shapes 4 (the dumps' row length)

# close A B V TOL: the f32 logit dumps A and B (rows of V) within TOL relative L2 every row, every value finite, the
# same argmax in more than half the rows
close() {
    $PY - "$@" <<'EOF'
import sys
import numpy as np
a, b = (np.fromfile(p, dtype=np.float32) for p in sys.argv[1:3])
V, tol = int(sys.argv[3]), float(sys.argv[4])
if a.size != b.size or a.size % V or not a.size:
    sys.exit(f"sizes {a.size} and {b.size} (rows of {V})")
a, b = a.reshape(-1, V), b.reshape(-1, V)
rel = np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)
same = int((a.argmax(1) == b.argmax(1)).sum())
print(f"{a.shape[0]} rows: rel L2 median {np.median(rel):.2e}, 90th pct {np.percentile(rel, 90):.2e}, max "
      f"{rel.max():.2e}; argmax the same in {same}")
sys.exit(0 if rel.max() < tol and 2 * same > a.shape[0] and np.isfinite(a).all() else 1)
EOF
}

# steps A B V BATCH LIMIT: two teacher-forced dumps (steps of BATCH rows of V): each step's rel L2, the max over the
# batch; the median over the steps within LIMIT, every value finite
steps() {
    $PY - "$@" <<'EOF'
import sys
import numpy as np
V, B, lim = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
a, b = (np.fromfile(p, dtype=np.float32).reshape(-1, B, V) for p in sys.argv[1:3])
if a.shape != b.shape:
    sys.exit(f"shapes {a.shape} and {b.shape}")
r = (np.linalg.norm(a - b, axis=2) / np.linalg.norm(b, axis=2)).max(axis=1)
same = int((a.argmax(2) == b.argmax(2)).sum())
print(f"{a.shape[0]} steps x {B}: per-step rel L2 median {np.median(r):.2e}, max {r.max():.2e}; argmax the same in "
      f"{same} of {a.shape[0] * B}")
sys.exit(0 if np.median(r) <= lim and np.isfinite(a).all() else 1)
EOF
}

# the tiny model (transformers, CPU) and then its host reference at B = 2, in the background from the start
tiny_bg() {
    [ -s "$D/prompt.txt" ] || timeout "$(lim 60)" $PY tests/gpu/runtime_ref.py make "$D" >"$L/tiny_make.log" 2>&1
    [ -s "$D/prompt.txt" ] || return 1
    touch "$X/tiny_made"
    timeout "$(lim 90)" $KT run --model "$D" --batch 2 --context 64 --steps 0 --prompt "$D/prompt.txt" --reference kt \
        --dump "$X/tiny_ktref.bin" >"$L/tiny_ktref.log" 2>&1
}
tiny_bg &
TINY=$!

[ -s "$F/config.json" ] || timeout 30 $PY tests/gpu/runtime_ref.py flash "$F" >"$L/flash_make.log" 2>&1
[ -s "$F/config.json" ] || check 1 "V4-Flash model folder: $(tail -n 1 "$L/flash_make.log")"

# warm + check 2: four 4-layer starts side by side (a cold JIT cache compiles once for all)
part_warm() {
    local t p rc=0 pids=""
    t=$(lim 60)
    [ "$t" -gt 0 ] || { check 1 "warm: skipped"; return; }
    KT_STEP_GEMV_LT=0 timeout "$t" $KT run $FL --steps 1 --layers 4 --batch 1 --dump "$X/b1_off.bin" >"$L/b1_off.log" 2>&1 &
    pids="$pids $!"
    KT_STEP_GEMV_LT=1 timeout "$t" $KT run $FL --steps 1 --layers 4 --batch 1 --dump "$X/b1_on.bin" >"$L/b1_on.log" 2>&1 &
    pids="$pids $!"
    for b in 16 64; do
        KT_STEP_GEMV_LT=1 timeout "$t" $KT run $FL --layers 4 --batch $b --steps 0 >"$L/warm_b$b.log" 2>&1 &
        pids="$pids $!"
    done
    for p in $pids; do wait "$p" || rc=1; done
    check $rc "warm: 4-layer V4-Flash starts at B = 1 (lever off, on), 16 and 64 (on) ($(grep -h -m1 'kernel part' "$L"/b1_off.log "$L"/warm_b64.log | tr '\n' ';'))"
    grep -h "cuBLASLt TF32 GEMV" "$L/warm_b64.log"
    if [ -s "$X/b1_off.bin" ] && [ -s "$X/b1_on.bin" ]; then
        cmp "$X/b1_off.bin" "$X/b1_on.bin" >"$L/cmp_b1.txt" 2>&1 && ! grep -q "cuBLASLt" "$L/b1_on.log"
        check $? "2: B = 1 with KT_STEP_GEMV_LT=1 (4 layers): logits byte-identical to the lever off, no cuBLASLt GEMV set up $(head -c 100 "$L/cmp_b1.txt")"
    else
        check 1 "2: B = 1 runs: $(tail -n 1 "$L/b1_off.log") / $(tail -n 1 "$L/b1_on.log")"
    fi
}

# flash NAME B VAR=VALUE [KT]: one V4-Flash run at B with the setting, into $L/NAME.{json,log,err} and $X/NAME.bin
flash() {
    local n=$1 b=$2 set=$3 kt=${4:-$KT} t rc
    t=$(lim 40)
    [ "$t" -gt 0 ] || { say "skip $n: $((SECONDS - T0)) s spent"; return 1; }
    env "$set" timeout "$t" $kt run $FL --steps 1 --batch "$b" --json "$L/$n.json" --dump "$X/$n.bin" >"$L/$n.log" 2>"$L/$n.err"
    rc=$?
    say "$n ($set) rc=$rc $(grep -h 'TPOT' "$L/$n.log")"
    [ $rc = 0 ] || tail -n 3 "$L/$n.err"
    return $rc
}

# check 1 at B = $1
part_flash() {
    local b=$1 i k n
    for i in 1 2; do
        for k in off on; do flash "${k}${i}_b$b" "$b" "KT_STEP_GEMV_LT=$([ $k = on ] && echo 1 || echo 0)"; done
    done
    for n in off1 on1 off2 on2; do
        [ -s "$L/${n}_b$b.json" ] && [ -s "$X/${n}_b$b.bin" ]
        check $? "1: V4-Flash B=$b $n ran ($({ grep -h TPOT "$L/${n}_b$b.log" || tail -n 1 "$L/${n}_b$b.err"; } 2>/dev/null | cut -c1-110))"
    done
    [ -s "$L/on1_b$b.json" ] || return
    echo "  the lever's GEMVs at B=$b (on1):"
    grep -h "cuBLASLt TF32 GEMV" "$L/on1_b$b.err" | sed 's/^/    /'
    [ "$(grep -c "cuBLASLt TF32 GEMV" "$L/on1_b$b.err")" -ge 4 ] && ! grep -q "did not capture" "$L/on1_b$b.err"
    check $? "1: B=$b with the lever: its 4 GEMV shapes set up (compressors, compressors + indexer, gate, head), the step captured with side chains"
    if [ -s "$X/off1_b$b.bin" ] && [ -s "$X/off2_b$b.bin" ]; then
        cmp "$X/off1_b$b.bin" "$X/off2_b$b.bin" >"$L/cmp_off_b$b.txt" 2>&1
        check $? "1: B=$b lever off: both runs' logits byte-identical $(head -c 100 "$L/cmp_off_b$b.txt")"
    fi
    if [ -s "$X/on1_b$b.bin" ] && [ -s "$X/on2_b$b.bin" ]; then
        cmp "$X/on1_b$b.bin" "$X/on2_b$b.bin" >"$L/cmp_on_b$b.txt" 2>&1
        check $? "1: B=$b lever on: both runs' logits byte-identical (deterministic matmuls) $(head -c 100 "$L/cmp_on_b$b.txt")"
    fi
    if [ -s "$X/on1_b$b.bin" ] && [ -s "$X/off1_b$b.bin" ]; then
        close "$X/on1_b$b.bin" "$X/off1_b$b.bin" $V 0.15 >"$L/close_b$b.txt" 2>&1
        # not a check: the synthetic V4-Flash amplifies any rounding (1e-7 moved B = 1 rows 0.08-0.12; TF32 here gave a
        # median 0.42 and the K-128 plant 0.55 in the first call); checks 3 and 4 judge on the tiny V4 and its reference
        echo "info 1: B=$b lever on against off ($(tail -n 1 "$L/close_b$b.txt"))"
    fi
    $PY - "$L" "$b" <<'EOF'
import json, os, sys
L, b = sys.argv[1:3]
runs = {n: json.load(open(p)) for n in ("off1", "on1", "off2", "on2") if os.path.exists(p := f"{L}/{n}_b{b}.json")}
if not all(k in runs for k in ("off1", "on1")):
    sys.exit("no pair of runs")
tp = {n: j["tpot_ms"] for n, j in runs.items()}
off = min(v for n, v in tp.items() if n.startswith("off"))
on = min(v for n, v in tp.items() if n.startswith("on"))
fl = runs["off1"]["floor_ms"]
print(f"V4-Flash B={b}: TPOT " + ", ".join(f"{n} {v:.3f}" for n, v in tp.items()) +
      f" ms; best off {off:.3f}, on {on:.3f} ({100 * (on / off - 1):+.1f}%); floor {fl:.3f} ms: {off / fl:.2f}x -> "
      f"{on / fl:.2f}x; kernels {runs['off1']['kernels']} -> {runs['on1']['kernels']}")
o, n = runs.get("off2", runs["off1"]), runs.get("on2", runs["on1"])
keys = sorted(set(o["per_op_ms"]) | set(n["per_op_ms"]), key=lambda k: -o["per_op_ms"].get(k, 0))
print(f"  {'op (eager, events between ops)':30s} {'off ms':>8s} {'on ms':>8s} {'calls':>5s} {'off us':>8s} {'on us':>8s}")
tot = [0.0, 0.0]
for k in keys:
    a, c = o["per_op_ms"].get(k, 0), n["per_op_ms"].get(k, 0)
    calls = max(o["per_op_calls"].get(k, 0), n["per_op_calls"].get(k, 0), 1)
    if k.startswith("rt_gemv"):
        tot[0] += a; tot[1] += c
    if k.startswith("rt_gemv") or abs(a - c) > 0.05:
        print(f"  {k:30s} {a:8.3f} {c:8.3f} {calls:5d} {1e3 * a / calls:8.2f} {1e3 * c / calls:8.2f}")
print(f"  {'rt_gemv/* together':30s} {tot[0]:8.3f} {tot[1]:8.3f}")
sys.exit(0 if on < off else 1)
EOF
    check $? "1: B=$b the lever's TPOT below off's (the better of two runs each)"
}

# check 4 (after part_tiny): the planted build at B = 2 with KT_STEP_GEMV_LT_MIN_B=2 on the tiny V4 must fail check
# 3's host-reference limit (0.15), its median over twice the lever's own distance there
part_plant() {
    [ -x "$PLANT" ] || { check 1 "4: no $PLANT (tests/gpu/lt25_plant.sh makes it)"; return; }
    [ -s "$X/tiny_ktref.bin" ] && [ -s "$X/tiny_b2_on.bin" ] || { check 1 "4: no host reference or lever dump (part 3 first)"; return; }
    KTBIN=$PLANT tiny_run plant_b2 2 "" KT_STEP_GEMV_LT=1 KT_STEP_GEMV_LT_MIN_B=2 || { check 1 "4: the planted build's run failed"; return; }
    steps "$X/tiny_plant_b2.bin" "$X/tiny_ktref.bin" 512 2 0.15 >"$L/tiny_plant.txt" 2>&1
    check $((!$?)) "4: the planted build (K 128 short) fails the host-reference limit ($(tail -n 1 "$L/tiny_plant.txt"))"
    $PY - "$X/tiny_plant_b2.bin" "$X/tiny_b2_on.bin" "$X/tiny_ktref.bin" <<'PYEOF'
import sys
import numpy as np
p, on, ref = (np.fromfile(f, dtype=np.float32).reshape(-1, 2, 512) for f in sys.argv[1:4])
med = lambda a: float(np.median((np.linalg.norm(a - ref, axis=2) / np.linalg.norm(ref, axis=2)).max(axis=1)))
print(f"median per-step rel L2 against the host reference: the plant {med(p):.2e}, the lever {med(on):.2e}")
sys.exit(0 if med(p) > 2 * med(on) else 1)
PYEOF
    check $? "4: the planted build's median over twice the lever's (against the host reference, B=2)"
}

# check 3: the routed tiny V4
# tiny_run NAME B OPTION VAR=VALUE...: the tiny V4 teacher-forced at B (OPTION: "" or --plain-kernels) into $X/tiny_NAME.bin
tiny_run() {
    local n=$1 b=$2 opt=$3 t
    shift 3
    t=$(lim 30)
    [ "$t" -gt 0 ] || return 1
    env "$@" timeout "$t" ${KTBIN:-$KT} run --model "$D" --batch "$b" --context 64 --steps 0 --prompt "$L/prompt_b$b.txt" \
        --dump "$X/tiny_$n.bin" $opt >"$L/tiny_$n.log" 2>&1
}
# wait_for WHAT: until WHAT (a test expression's words) holds or the budget's last 10 s
wait_for() { while ! test "$@" && [ "$(lim 10)" -ge 10 ]; do sleep 1; done; test "$@"; }
part_tiny() {
    local p pids="" n
    wait_for -e "$X/tiny_made" || { check 1 "3: the routed tiny V4: $(tail -n 1 "$L/tiny_make.log" 2>/dev/null)"; return; }
    cp "$D/prompt.txt" "$L/prompt_b2.txt"
    for _ in 1 2 3 4 5 6 7 8; do cat "$D/prompt.txt"; done >"$L/prompt_b16.txt"
    tiny_run fam_off 16 "" KT_STEP_GEMV_LT=0 &
    pids="$pids $!"
    tiny_run fam_on 16 "" KT_STEP_GEMV_LT=1 &
    pids="$pids $!"
    tiny_run plain_off 16 --plain-kernels KT_STEP_GEMV_LT=0 &
    pids="$pids $!"
    tiny_run plain_on 16 --plain-kernels KT_STEP_GEMV_LT=1 &
    pids="$pids $!"
    tiny_run b2_off 2 "" KT_STEP_GEMV_LT=0 &
    pids="$pids $!"
    tiny_run b2_on 2 "" KT_STEP_GEMV_LT=1 KT_STEP_GEMV_LT_MIN_B=2 &
    pids="$pids $!"
    for p in $pids; do wait "$p"; done
    wait "$TINY" # the host reference (bounded by the budget)
    for n in fam plain; do
        if [ -s "$X/tiny_${n}_on.bin" ] && [ -s "$X/tiny_${n}_off.bin" ] && grep -q "cuBLASLt TF32 GEMV" "$L/tiny_${n}_on.log"; then
            steps "$X/tiny_${n}_on.bin" "$X/tiny_${n}_off.bin" 512 16 0.15 >"$L/tiny_${n}.txt" 2>&1
            check $? "3: routed tiny V4 B=16 ($n), teacher-forced: the lever within the model's flip floor of off (0.15, runtime.sh's gpu:ktref; the first call: median 6e-2) ($(tail -n 1 "$L/tiny_${n}.txt"))"
        else
            check 1 "3: routed tiny V4 B=16 ($n): a run failed or set up no cuBLASLt GEMV: $(tail -n 1 "$L/tiny_${n}_on.log")"
        fi
    done
    if [ -s "$X/tiny_ktref.bin" ] && [ -s "$X/tiny_b2_on.bin" ] && grep -q "cuBLASLt TF32 GEMV" "$L/tiny_b2_on.log"; then
        [ -s "$X/tiny_b2_off.bin" ] && steps "$X/tiny_b2_off.bin" "$X/tiny_ktref.bin" 512 2 0.15 >"$L/tiny_b2_off.txt" 2>&1
        steps "$X/tiny_b2_on.bin" "$X/tiny_ktref.bin" 512 2 0.15 >"$L/tiny_b2_on.txt" 2>&1
        check $? "3: routed tiny V4 B=2 with KT_STEP_GEMV_LT_MIN_B=2 against the host reference (kt's formats): within runtime.sh's 0.15 ($(tail -n 1 "$L/tiny_b2_on.txt"); the lever off: $(tail -n 1 "$L/tiny_b2_off.txt" 2>/dev/null))"
    else
        check 1 "3: routed tiny V4 B=2 against the host reference: no reference dump ($(tail -n 1 "$L/tiny_ktref.log" 2>/dev/null)) or the run failed ($(tail -n 1 "$L/tiny_b2_on.log"))"
    fi
}

# main's step at B = 16 against this build's lever off (the default is main's code path)
part_main() {
    [ -n "$MAIN" ] && [ -x "$MAIN" ] || { say "main: no \$KT_MAIN, skipped"; return; }
    [ "$(lim 15)" -ge 15 ] || { say "main: under 15 s left, skipped"; return; }
    [ -s "$X/off1_b16.bin" ] || return
    flash main_b16 16 KT_LT25_MAIN=1 "$MAIN" || { check 1 "main: main's run failed"; return; }
    cmp "$X/main_b16.bin" "$X/off1_b16.bin" >"$L/cmp_main.txt" 2>&1
    check $? "main: main's step at B=16 byte-identical to this build's lever off $(head -c 100 "$L/cmp_main.txt")"
}

part_warm
say "warm done"
part_flash 64
part_flash 16
say "check 1 done"
part_tiny
say "check 3 done"
part_plant
part_main
wait
rm -rf "$X"
[ -z "${OUT:-}" ] || { tar czf "$OUT/lt25_logs.tgz" -C "$L" . && rm -rf "$L"; }
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
