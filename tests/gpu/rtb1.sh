#!/usr/bin/env bash
# rtb1.sh [PART...] — GPU checks of issue 23's B = 1 TPOT work on `kt run`'s step (bench/NOTES.md,
# fifteenth session rtb1 and sixteenth session rt). Parts, in the order given (default: warm b1
# b64 correct b1b2), each under its own timeout inside a 100 s budget (KT_RTB1_BUDGET; a part that
# would start past it is skipped, a FAIL):
#   warm     the JIT cache filled for the parts after: 4-layer starts of this build and main's at
#            B = 1, 16 and 64 side by side (a cold start compiles model.cu and the families: ~40 s);
#   b1, b16, b64  V4-Flash `--synthetic --tp-shapes 4 --context 8192 --steps 1 --json --dump` at B = 1 /
#            16 / 64 with this build and main's ($KT_MAIN, else .gpu/kt_main; without one, main's
#            recorded run bench/recordings/h200_run_v4flash_tp4_b*_c8192_merged15.json): TPOT, the
#            floor, the kernel count, the per-op ms against main's; B = 1 must beat main's TPOT,
#            B = 16 and 64 stay within 2%; and the logits byte-identical to main's build (the glue's sums
#            keep their order, so a change that moves one bit is a change of the math), but at B = 1,
#            where rt19's two levers reassociate sums (the MoE gate's logits from projections made beside
#            the chain, rt_gate_comb; the HC module over rt_gemv_hc1's blocks, rt_hc_spread): there within
#            0.15 relative L2 a step, tests/gpu/runtime.sh's floor for two correct implementations of kt's
#            formats (FP8 codes and top-k choices flip: 0.095 median from a 1e-6 change), every value
#            finite (part short and the tiny V4 hold the levers to 1e-2 / 1e-4);
#   short    V4-Flash B = 1 with 2 layers, this build and main's: logits within 1e-2 a step, the same argmax
#            (two layers leave a reassociation's rounding too little room to flip a choice);
#   gate     this build at B = 1 with the MoE gate's GEMV in line (KT_STEP_GATE_INLINE=1), against part
#            b1's run: what the gate's projections buy alone; logits within 0.15 of main's;
#   one      this build at B = 1 on one stream (KT_STEP_ONE_STREAM=1), against part b1's run: what the
#            side chains buy; its logits byte-identical to part b1's (the side chains' order gives the
#            serialised step's values: no race);
#   ncu      this build's step under Nsight Compute (`--profile-from-start off`: the report's eager
#            step at the context's last position, which kt run brackets with cuProfilerStart/Stop),
#            4 layers (3 HCA, 1 CSA; 3 hash-routed, 1 routed), B = 1 (KT_NCU_BATCH): each kernel's device time
#            (gpu__time_duration, caches and clocks left alone), summed per kernel name; ncuspread the same
#            with KT_STEP_HC_SPREAD=0, ncuoff with $KT_RTB1_OFF's first setting;
#   tiny     (in the background from the start) the routed tiny V4 made by transformers, teacher-
#            forced at B = 2 and 1 on this build and main's: logits byte-identical at B = 2; at B = 1
#            (the gate's projections, with side chains and on one stream) within 1e-4 and the same argmax
#            every step;
#   spread   this build at B = 1 with rt_gemv_hc1's HC module in its last block (KT_STEP_HC_SPREAD=0): part b1's
#            TPOT against it (what rt_hc_spread buys), logits within 0.15 of main's; the tiny V4 at B = 1
#            with it (within 1e-4 of main's) and with both levers off (byte-identical) (after tiny and b1);
#   plant    bin/kt_plant_pc (this build with postcomb single-buffered, made by tests/gpu/rtb1_plant.sh
#            here) on the tiny V4 at B = 1 on one stream, where the MoE module's rt_gemv_hc1 writes its
#            post | comb before rt_gate_comb reads the post step's (the race's worst order): part tiny's
#            tolerance check must FAIL on it; then with side chains (the race as it may fall: reported,
#            not checked) (run after tiny);
#   plantkv  the same with bin/kt_plant_kv (the CSA split's KV compressor, side chain 6, enqueued after
#            mla_decode, unjoined: what a lost join allows at worst);
#   tinyoff  this build's tiny V4 at B = 1 with $KT_RTB1_OFF in its environment (the levers off): byte-identical
#            to main's (after tiny);
#   levers   this build at B = 1 with each setting of $KT_RTB1_LEVERS (NAME:VAR=V,VAR=V:exact|close ...): TPOT
#            against part b1's and main's, logits byte-identical to main's (exact) or within 0.15 (close);
#   correct  runtime.sh's routed tiny V4 (sliding, CSA, HCA, hash and routed layers; the families
#            and --plain-kernels) against transformers and the host reference;
#   b1b2     the routed tiny V4 at B = 1 (its HC modules in rt_gemv_hc1's last block) against
#            B = 2, teacher-forced, and the B = 2 run of `correct` again: the same logits byte for
#            byte (deterministic sums; the last-block counters left at 0). Needs `correct` first.
#   v32      DeepSeek-V3.2's step (release config, synthetic, 4 layers, B = 2) on this build and
#            main's: logits byte-identical.
# Logs under $OUT/rtb1 (or /tmp/kt-rtb1), with OUT packed into $OUT/rtb1_logs.tgz at the end. Ends with
# "N passed, N failed".
set -u
cd "$(dirname "$0")/../.." || exit 2
L=${OUT:+$OUT/rtb1}
L=${L:-/tmp/kt-rtb1}
rm -rf "$L" && mkdir -p "$L"
export KT_RT_MODELS=${KT_RT_MODELS:-/tmp/kt-rt-models}
KT=./bin/kt MAIN=${KT_MAIN:-.gpu/kt_main} PY=${PYTHON:-python3} F=${KT_FLASH:-/tmp/flash} D=$KT_RT_MODELS/routed
BUDGET=${KT_RTB1_BUDGET:-100}
T0=$SECONDS
passed=0 failed=0
check() { if [ "$1" = 0 ]; then passed=$((passed + 1)); echo "PASS $2"; else failed=$((failed + 1)); echo "FAIL $2"; fi; }
say() { echo "[$((SECONDS - T0))s] $*"; }
left() { echo $((BUDGET - 3 - (SECONDS - T0))); }
# lim WANT: the timeout a part gets (WANT, or what is left); 0 when under 5 s are left
lim() { local l; l=$(left); [ "$l" -lt "$1" ] || l=$1; [ "$l" -ge 5 ] && echo "$l" || echo 0; }
flash_folder() {
    [ -s "$F/config.json" ] || timeout "$(lim 30)" $PY tests/gpu/runtime_ref.py flash "$F" >"$L/flash_make.log" 2>&1
    [ -s "$F/config.json" ] || { check 1 "V4-Flash model folder: $(tail -n 1 "$L/flash_make.log")"; return 1; }
}
FL="--model $F --synthetic --tp-shapes 4 --context 8192 --steps 1"

# close A B V TOL [any]: the f32 logit dumps A and B (rows of V) within TOL relative L2 a row, every value
# finite, and the same argmax in every row (not with `any`)
close() {
    $PY - "$@" <<'EOF'
import sys
import numpy as np
a, b = (np.fromfile(p, dtype=np.float32) for p in sys.argv[1:3])
V, tol, anymax = int(sys.argv[3]), float(sys.argv[4]), sys.argv[5:] == ["any"]
if a.size != b.size or a.size % V or not a.size:
    sys.exit(f"sizes {a.size} and {b.size} (rows of {V})")
a, b = a.reshape(-1, V), b.reshape(-1, V)
rel = np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)
same = int((a.argmax(1) == b.argmax(1)).sum())
print(f"{a.shape[0]} rows: rel L2 max {rel.max():.2e}, median {np.median(rel):.2e}; argmax the same in {same}")
sys.exit(0 if rel.max() < tol and (anymax or same == a.shape[0]) and np.isfinite(a).all() else 1)
EOF
}

# the JIT cache filled for the parts after (this build's and main's model.cu, the families of B = 1,
# 16 and 64) by six 4-layer starts side by side (4 layers hold every problem the step dispatches: HCA
# and CSA attention, hash-routed and routed MoE), so the timed runs after start warm
part_warm() {
    flash_folder || return
    local t k b kt p pids=""
    t=$(lim 50)
    [ "$t" -gt 0 ] || { check 1 "warm: skipped, $((SECONDS - T0)) s spent"; return; }
    for k in new main; do
        kt=$KT
        [ $k = main ] && { [ -x "$MAIN" ] || continue; kt=$MAIN; }
        for b in 1 16 64; do
            timeout "$t" $kt run --model "$F" --synthetic --tp-shapes 4 --context 8192 --steps 0 --layers 4 --batch $b \
                >"$L/warm_${k}_b$b.log" 2>&1 &
            pids="$pids $!"
        done
    done
    local rc=0
    for p in $pids; do wait "$p" || rc=1; done
    check $rc "warm: 4-layer starts of this build and main's at B = 1, 16 and 64 ($(grep -h 'kernel part' "$L"/warm_*.log | head -n 4 | tr '\n' ';'))"
}

# V4-Flash at B = $1: this build, then main's (warm after part warm; cold, a first run compiles the step's kernels into
# an empty JIT cache, ~40 s; main's shares the families' cubins), TPOT and logits against main's
# the timed parts have the GPU alone: part tiny's background runs finished first
quiet_gpu() { [ -z "${TINY:-}" ] || { wait "$TINY"; TINY_RC=$?; TINY_DONE=1; }; TINY=; }
part_flash() {
    local b=$1 k kt t
    flash_folder || return
    quiet_gpu
    for k in new main; do
        kt=$KT
        if [ $k = main ]; then # without main's build, or the time for its run: its recorded run (no logits)
            if [ ! -x "$MAIN" ] || [ "$(left)" -lt 18 ]; then
                say "main B=$b: the recorded run (merged15), $([ -x "$MAIN" ] && echo "$(left) s left" || echo "no $MAIN")"
                cp bench/recordings/h200_run_v4flash_tp4_b${b}_c8192_merged15.json "$L/main_b$b.json"
                continue
            fi
            kt=$MAIN
        fi
        t=$(lim 45)
        [ "$t" -gt 0 ] || { say "skip $k B=$b: $((SECONDS - T0)) s spent"; continue; }
        timeout "$t" $kt run $FL --batch $b --json "$L/${k}_b$b.json" --dump "/tmp/kt-rtb1-${k}_b$b.bin" \
            >"$L/${k}_b$b.log" 2>"$L/${k}_b$b.err"
        say "$k B=$b rc=$? $(grep 'TPOT\|graph:' "$L/${k}_b$b.log" | tr '\n' ' ')"
    done
    [ -s "$L/new_b$b.json" ] || { check 1 "V4-Flash B=$b: this build's kt run failed ($(tail -n 1 "$L/new_b$b.err"))"; return; }
    [ -s "$L/main_b$b.json" ] || { check 1 "V4-Flash B=$b: main's run did not finish"; return; }
    $PY - "$L/new_b$b.json" "$L/main_b$b.json" <<'EOF'
import json, sys
new, main = (json.load(open(p)) for p in sys.argv[1:3])
calls = lambda j: sum(j["per_op_calls"].values())
B = new["batch"]
print(f"V4-Flash B={B}: TPOT {new['tpot_ms']:.3f} ms (main {main['tpot_ms']:.3f}, {100 * (new['tpot_ms'] / main['tpot_ms'] - 1):+.1f}%), "
      f"floor {new['floor_ms']:.3f} ms, {new['floor_ratio']:.2f}x (main {main['floor_ratio']:.2f}x); {new['kernels']} kernels "
      f"in the graph, {new['tpot_ms'] * 1e3 / new['kernels']:.2f} us a kernel; eager ops {calls(new)} (main {calls(main)})")
ops = sorted(set(new["per_op_ms"]) | set(main["per_op_ms"]),
             key=lambda k: -max(new["per_op_ms"].get(k, 0), main["per_op_ms"].get(k, 0)))
for k in ops:
    n, m, c = new["per_op_ms"].get(k, 0), main["per_op_ms"].get(k, 0), max(new["per_op_calls"].get(k, 0), 1)
    print(f"  {k:22s} new {n:8.3f} ms {new['per_op_calls'].get(k, 0):5d} calls {1e3 * n / c:7.2f} us   "
          f"main {m:8.3f} ms {main['per_op_calls'].get(k, 0):5d}")
sys.exit(0 if new["tpot_ms"] < (1.0 if B == 1 else 1.02) * main["tpot_ms"] else 1)
EOF
    check $? "V4-Flash synthetic --tp-shapes 4 B=$b 8K: TPOT $([ $b = 1 ] && echo "under main's" || echo "at most 2% over main's")"
    if [ -s "/tmp/kt-rtb1-main_b$b.bin" ] && [ $b = 1 ]; then
        close "/tmp/kt-rtb1-new_b$b.bin" "/tmp/kt-rtb1-main_b$b.bin" 129280 0.15 any >"$L/cmp_b$b.txt" 2>&1
        check $? "V4-Flash B=1 (rt19's reassociated sums): logits within 0.15 of main's build, runtime.sh's flip floor ($(tail -n 1 "$L/cmp_b$b.txt"))"
    elif [ -s "/tmp/kt-rtb1-main_b$b.bin" ]; then
        cmp "/tmp/kt-rtb1-new_b$b.bin" "/tmp/kt-rtb1-main_b$b.bin" >"$L/cmp_b$b.txt" 2>&1
        check $? "V4-Flash B=$b: logits of both steps byte-identical to main's build ($(head -c 120 "$L/cmp_b$b.txt"))"
    fi
    [ $b = 1 ] || rm -f /tmp/kt-rtb1-*_b$b.bin # both B = 1 dumps: the references of the parts after
}

# b1_run NAME VAR=VALUE...: this build's V4-Flash B = 1 step with those settings in its environment, into
# $L/NAME_b1.json and /tmp/kt-rtb1-NAME_b1.bin (1 when it could not run)
b1_run() {
    local t n=$1
    shift
    flash_folder || return 1
    quiet_gpu
    t=$(lim 30)
    [ "$t" -gt 0 ] || { check 1 "$n: skipped, $((SECONDS - T0)) s spent"; return 1; }
    env "$@" timeout "$t" $KT run $FL --batch 1 --json "$L/${n}_b1.json" --dump "/tmp/kt-rtb1-${n}_b1.bin" \
        >"$L/${n}_b1.log" 2>"$L/${n}_b1.err"
    say "$n B=1 rc=$? $(grep 'TPOT' "$L/${n}_b1.log")"
}

# this build at B = 1 on one stream (KT_STEP_ONE_STREAM=1): what the side chains buy (after part b1)
part_one() {
    b1_run one KT_STEP_ONE_STREAM=1 || return
    [ -s "$L/one_b1.json" ] && [ -s "$L/new_b1.json" ] && $PY -c "
import json; o, n = (json.load(open(p)) for p in ('$L/one_b1.json', '$L/new_b1.json'))
print(f\"the side chains at B=1: {n['tpot_ms']:.3f} ms with, {o['tpot_ms']:.3f} ms on one stream ({100 * (n['tpot_ms'] / o['tpot_ms'] - 1):+.1f}%)\")"
    check $? "V4-Flash B=1 on one stream (KT_STEP_ONE_STREAM=1), against part b1's run"
    if [ -s /tmp/kt-rtb1-new_b1.bin ] && [ -s /tmp/kt-rtb1-one_b1.bin ]; then
        cmp /tmp/kt-rtb1-one_b1.bin /tmp/kt-rtb1-new_b1.bin >"$L/cmp_one.txt" 2>&1
        check $? "V4-Flash B=1 on one stream: logits byte-identical to part b1's (side chains) $(head -c 100 "$L/cmp_one.txt")"
    fi
    rm -f /tmp/kt-rtb1-one_b1.bin
}

# lever_off NAME WHAT VAR=VALUE: this build at B = 1 with one of rt19's levers off, against part b1's run: what
# the lever buys (part b1 must be faster); its logits within 0.15 of main's
lever_off() {
    local n=$1 what=$2
    b1_run "$n" "$3" || return 1
    [ -s "$L/${n}_b1.json" ] && [ -s "$L/new_b1.json" ] && $PY -c "
import json, sys; o, n = (json.load(open(p)) for p in ('$L/${n}_b1.json', '$L/new_b1.json'))
print(f\"$what at B=1: {n['tpot_ms']:.3f} ms, {o['tpot_ms']:.3f} ms with $3 ({100 * (n['tpot_ms'] / o['tpot_ms'] - 1):+.1f}%)\")
print('  eager rows with it:', {k: round(v, 3) for k, v in n['per_op_ms'].items() if 'gate' in k or 'hc' in k})
print('  eager rows without:', {k: round(v, 3) for k, v in o['per_op_ms'].items() if 'gate' in k or 'hc' in k})
sys.exit(0 if n['tpot_ms'] < o['tpot_ms'] else 1)"
    check $? "V4-Flash B=1: $what faster than without it ($3)"
    if [ -s /tmp/kt-rtb1-main_b1.bin ] && [ -s "/tmp/kt-rtb1-${n}_b1.bin" ]; then
        close "/tmp/kt-rtb1-${n}_b1.bin" /tmp/kt-rtb1-main_b1.bin 129280 0.15 any >"$L/cmp_$n.txt" 2>&1
        check $? "V4-Flash B=1 with $3: logits within 0.15 of main's ($(tail -n 1 "$L/cmp_$n.txt"))"
    fi
    rm -f "/tmp/kt-rtb1-${n}_b1.bin"
}

# the MoE gate's projections (rt_gate_comb) against its GEMV in line
part_gate() { lever_off gate "the gate's projections beside the chain" KT_STEP_GATE_INLINE=1; }

# rt_hc_spread against rt_gemv_hc1's HC module in its last block; then the routed tiny V4 at B = 1 with it (the
# gate's projections alone: within 1e-4 of main's, the same argmax) and with both levers off (byte-identical)
part_spread() {
    local t m
    lever_off last "the HC module over rt_gemv_hc1's blocks (rt_hc_spread)" KT_STEP_HC_SPREAD=0 || return
    [ -s "$L/tiny_main_b1.bin" ] || { check 1 "spread: no tiny B=1 logits of main's build (part tiny first)"; return; }
    for m in 0 1; do
        t=$(lim 20)
        [ "$t" -gt 0 ] || { check 1 "spread tiny: skipped, $((SECONDS - T0)) s spent"; return; }
        KT_STEP_HC_SPREAD=0 KT_STEP_GATE_INLINE=$m timeout "$t" $KT run --model "$D" --batch 1 --context 64 --steps 0 \
            --prompt "$L/prompt_b1.txt" --dump "$L/tiny_last$m.bin" >"$L/tiny_last$m.log" 2>&1 ||
            { check 1 "spread tiny (gate inline $m): the run failed: $(tail -n 1 "$L/tiny_last$m.log")"; continue; }
        if [ $m = 1 ]; then
            cmp "$L/tiny_last$m.bin" "$L/tiny_main_b1.bin" >"$L/tiny_cmp_last$m.txt" 2>&1
            check $? "routed tiny V4 B=1 with both levers off: byte-identical to main's $(head -c 100 "$L/tiny_cmp_last$m.txt")"
        else
            close "$L/tiny_last$m.bin" "$L/tiny_main_b1.bin" 512 1e-4 >"$L/tiny_cmp_last$m.txt" 2>&1
            check $? "routed tiny V4 B=1 with the gate's projections alone (KT_STEP_HC_SPREAD=0): within 1e-4 of main's, the same argmax ($(tail -n 1 "$L/tiny_cmp_last$m.txt"))"
        fi
    done
}

# V4-Flash B = 1 with 2 layers on both builds: the levers' sums within 1e-2 (a flip's floor ~0.1), the same argmax
part_short() {
    local t k kt
    flash_folder || return
    quiet_gpu
    for k in new main; do
        kt=$KT
        [ $k = main ] && kt=$MAIN
        t=$(lim 20)
        [ "$t" -gt 0 ] || { check 1 "short: skipped, $((SECONDS - T0)) s spent"; return; }
        timeout "$t" $kt run $FL --batch 1 --layers 2 --dump "/tmp/kt-rtb1-short_$k.bin" >"$L/short_$k.log" 2>&1 ||
            { check 1 "short: $k's run failed: $(tail -n 1 "$L/short_$k.log")"; return; }
    done
    close /tmp/kt-rtb1-short_new.bin /tmp/kt-rtb1-short_main.bin 129280 1e-2 >"$L/cmp_short.txt" 2>&1
    check $? "V4-Flash B=1, 2 layers: logits within 1e-2 of main's, the same argmax ($(tail -n 1 "$L/cmp_short.txt"))"
}

# the step's kernels under ncu, one device time each, summed per name
part_ncu() { # [TAG VAR=VALUE]: the step with one setting in its environment, into ncu_TAG.csv
    flash_folder || return
    quiet_gpu
    local t ncu=${KT_NCU:-ncu} tag=${1:-b1} setting=${2:-KT_RTB1_NCU=1}
    command -v "$ncu" >/dev/null || { check 1 "ncu: no $ncu on this machine"; return; }
    t=$(lim 40)
    [ "$t" -gt 0 ] || { check 1 "ncu: skipped, $((SECONDS - T0)) s spent"; return; }
    env "$setting" timeout "$t" "$ncu" --profile-from-start off --metrics gpu__time_duration.sum --cache-control none \
        --clock-control none --csv --page raw --print-units base $KT run --model "$F" --synthetic --tp-shapes 4 \
        --context 8192 --steps 0 --layers 4 --batch ${KT_NCU_BATCH:-1} >"$L/ncu_$tag.csv" 2>"$L/ncu_$tag.err"
    say "ncu $tag ($setting) rc=$?"
    $PY - "$L/ncu_$tag.csv" "${KT_NCU_BATCH:-1}" <<'EOF'
import csv, sys
rows = list(csv.reader(l for l in open(sys.argv[1]) if l.startswith('"')))
head = next((i for i, r in enumerate(rows) if "Kernel Name" in r and "gpu__time_duration.sum" in r), None)
if head is None:
    sys.exit("ncu: no CSV with gpu__time_duration.sum in its output")
h = rows[head]
kn, tv, gs, bs = (h.index(c) for c in ("Kernel Name", "gpu__time_duration.sum", "Grid Size", "Block Size"))
seq, agg = [], {}
for r in rows[head + 1:]:
    try:
        ns = float(r[tv].replace(",", ""))
    except ValueError:
        continue  # the units row
    seq.append((r[kn], ns / 1e3, r[gs], r[bs]))
    a = agg.setdefault(r[kn], [0, 0.0, 0.0])
    a[0] += 1; a[1] += ns / 1e3; a[2] = max(a[2], ns / 1e3)
tot = sum(a[1] for a in agg.values())
print(f"ncu: {len(seq)} kernels of the eager step (4 layers, B = {sys.argv[2]}), device time {tot:.1f} us in all")
for k, a in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print(f"  {k[:60]:60s} {a[0]:4d} calls {a[1]:8.1f} us  {a[1] / a[0]:7.2f} us a call (max {a[2]:.2f})")
print("ncu: the sequence (kernel, us, grid, block):")
for k, us, g, b in seq:
    print(f"    {k[:60]:60s} {us:8.2f}  {g} {b}")
sys.exit(0 if seq else 1)
EOF
    check $? "ncu: the step's kernels' device times (4 layers, B = ${KT_NCU_BATCH:-1}, $setting)" || true
    grep -v "^==PROF==" "$L/ncu_$tag.err" | tail -n 3
}

# the routed tiny V4 (made by transformers) on both builds, teacher-forced on its prompt at B = 2
# (rt_hc_pre's blocks: by-stream collapse, D / 4 = 64 columns under 512 threads) and B = 1
# (rt_gemv_hc1's last block, 256 threads): logits byte-identical to main's build. Correctness
# only, no timing: it runs in the background, beside part warm.
part_tiny() {
    local t k b kt rc
    [ -s "$D/prompt.txt" ] || timeout "$(lim 45)" $PY tests/gpu/runtime_ref.py make "$D" >"$L/tiny_make.log" 2>&1
    [ -s "$D/prompt.txt" ] || { check 1 "tiny: the routed model: $(tail -n 1 "$L/tiny_make.log")"; return; }
    head -n 1 "$D/prompt.txt" >"$L/prompt_b1.txt"
    cp "$D/prompt.txt" "$L/prompt_b2.txt"
    [ -x "$MAIN" ] || { check 1 "tiny: no main build $MAIN to compare with"; return; }
    for b in 2 1 one; do
        for k in new main; do
            kt=$KT n=$b
            [ $k = main ] && kt=$MAIN
            [ $b = one ] && { [ $k = main ] && continue; n=1; }
            t=$(lim 40)
            [ "$t" -gt 0 ] || break
            KT_STEP_ONE_STREAM=$([ $b = one ] && echo 1 || echo 0) timeout "$t" $kt run --model "$D" --batch $n \
                --context 64 --steps 0 --prompt "$L/prompt_b$n.txt" --dump "$L/tiny_${k}_b$b.bin" \
                >"$L/tiny_${k}_b$b.log" 2>&1
            rc=$?
            [ $rc = 0 ] || { check 1 "tiny B=$b: $k's kt run failed (rc $rc): $(tail -n 1 "$L/tiny_${k}_b$b.log")"; continue 2; }
        done
        if [ $b != 2 ]; then
            close "$L/tiny_new_b$b.bin" "$L/tiny_main_b1.bin" 512 1e-4 >"$L/tiny_cmp_b$b.txt" 2>&1
            check $? "routed tiny V4 B=$b, teacher-forced ($(grep -c '^step' "$L/tiny_new_b$b.log") steps), rt19's levers: logits within 1e-4 of main's build, the same argmax ($(tail -n 1 "$L/tiny_cmp_b$b.txt"))"
        else
            cmp "$L/tiny_new_b$b.bin" "$L/tiny_main_b$([ $b = one ] && echo 1 || echo $b).bin" >"$L/tiny_cmp_b$b.txt" 2>&1
            check $? "routed tiny V4 B=$b, teacher-forced ($(grep -c '^step' "$L/tiny_new_b$b.log") steps): logits byte-identical to main's build $(head -c 100 "$L/tiny_cmp_b$b.txt")"
        fi
    done
}

# plant_run P WHAT [VAR=VALUE...]: the planted build P (tests/gpu/rtb1_plant.sh) on the tiny V4 at B = 1 on one
# stream with those settings must fail part tiny's B = 1 check; then with side chains (the race as it may fall:
# reported, not checked) (run after tiny)
plant_run() {
    local P=$1 what=$2 t n
    shift 2
    n=$(basename "$P")
    quiet_gpu
    [ -x "$P" ] || { check 1 "plant: no $P (tests/gpu/rtb1_plant.sh makes it)"; return; }
    [ -s "$L/tiny_main_b1.bin" ] || { check 1 "plant: no tiny B=1 logits of main's build (part tiny first)"; return; }
    t=$(lim 20)
    [ "$t" -gt 0 ] || { check 1 "plant $n: skipped, $((SECONDS - T0)) s spent"; return; }
    env KT_STEP_ONE_STREAM=1 "$@" timeout "$t" $P run --model "$D" --batch 1 --context 64 --steps 0 \
        --prompt "$L/prompt_b1.txt" --dump "$L/tiny_${n}_b1.bin" >"$L/tiny_${n}_b1.log" 2>&1 ||
        { check 1 "plant: the planted build's run failed: $(tail -n 1 "$L/tiny_${n}_b1.log")"; return; }
    close "$L/tiny_${n}_b1.bin" "$L/tiny_main_b1.bin" 512 1e-4 >"$L/${n}_cmp.txt" 2>&1
    check $((!$?)) "plant: the tiny B=1 check (one stream) fails with $what ($(tail -n 1 "$L/${n}_cmp.txt"))"
    t=$(lim 20)
    [ "$t" -gt 0 ] || return
    env "$@" timeout "$t" $P run --model "$D" --batch 1 --context 64 --steps 0 --prompt "$L/prompt_b1.txt" \
        --dump "$L/tiny_${n}2_b1.bin" >"$L/tiny_${n}2_b1.log" 2>&1 &&
        say "plant $n with side chains (the race as it falls, not checked): $(close "$L/tiny_${n}2_b1.bin" "$L/tiny_main_b1.bin" 512 1e-4 2>&1 | tail -n 1)"
}
# postcomb single-buffered (rt19's double buffer); the CSA split's KV compressor after mla_decode, unjoined
part_plant() { plant_run ./bin/kt_plant_pc "postcomb single-buffered"; }
part_plantkv() { plant_run ./bin/kt_plant_kv "the KV compressor after mla_decode (the CSA split)" KT_STEP_CSA_SPLIT=1; }

# this build's tiny V4 at B = 1 with the settings $KT_RTB1_OFF (VAR=VALUE,...: the levers off), byte-identical to
# main's (after tiny)
part_tinyoff() {
    local t
    quiet_gpu
    [ -s "$L/tiny_main_b1.bin" ] || { check 1 "tinyoff: no tiny B=1 logits of main's build (part tiny first)"; return; }
    t=$(lim 20)
    [ "$t" -gt 0 ] || { check 1 "tinyoff: skipped, $((SECONDS - T0)) s spent"; return; }
    # shellcheck disable=SC2046 # the settings, one word each
    env $(echo "${KT_RTB1_OFF:-KT_RTB1_OFF=}" | tr ',' ' ') timeout "$t" $KT run --model "$D" --batch 1 --context 64 \
        --steps 0 --prompt "$L/prompt_b1.txt" --dump "$L/tiny_off_b1.bin" >"$L/tiny_off_b1.log" 2>&1 ||
        { check 1 "tinyoff: the run failed: $(tail -n 1 "$L/tiny_off_b1.log")"; return; }
    cmp "$L/tiny_off_b1.bin" "$L/tiny_main_b1.bin" >"$L/tiny_cmp_off.txt" 2>&1
    check $? "routed tiny V4 B=1 with ${KT_RTB1_OFF:-nothing} (the levers off): byte-identical to main's $(head -c 100 "$L/tiny_cmp_off.txt")"
}

# this build at B = 1 with each of $KT_RTB1_LEVERS' settings ("NAME:VAR=VALUE,VAR=VALUE:exact|close", space
# separated), against the first setting's run (the levers' base), part b1's and main's: the TPOT of each (what a
# lever buys), its logits byte-identical to main's (exact) or within 0.15 (close)
part_levers() {
    local spec n set how rc base=
    for spec in ${KT_RTB1_LEVERS:-}; do
        n=${spec%%:*} set=${spec#*:} how=${spec##*:}
        set=${set%:*}
        # shellcheck disable=SC2046 # the settings, one word each
        b1_run "lever_$n" $(echo "$set" | tr ',' ' ') || continue
        [ -s "$L/lever_${n}_b1.json" ] || { check 1 "lever $n ($set): the run failed ($(tail -n 1 "$L/lever_${n}_b1.err"))"; continue; }
        base=${base:-$n}
        $PY - "$L/lever_${n}_b1.json" "$L/new_b1.json" "$L/main_b1.json" "$L/lever_${base}_b1.json" "$n ($set)" <<'PYEOF'
import json, os, sys
lv, new, main, base = (json.load(open(p)) if os.path.exists(p) else None for p in sys.argv[1:5])
t = lv["tpot_ms"]
rel = lambda j: f"{j['tpot_ms']:.3f} ms ({100 * (t / j['tpot_ms'] - 1):+.1f}%)" if j else "none"
print(f"lever {sys.argv[5]}: B=1 TPOT {t:.3f} ms, {lv['floor_ratio']:.2f}x the floor, {lv['kernels']} kernels; "
      f"against the first setting {rel(base)}, part b1 {rel(new)}, main {rel(main)}")
rows = {k: round(v, 3) for k, v in lv["per_op_ms"].items() if any(w in k for w in ("comp", "gate", "index", "rt_gemv"))}
print("  eager rows:", rows)
PYEOF
        check $? "lever $n ($set): V4-Flash B=1 ran"
        [ -s /tmp/kt-rtb1-main_b1.bin ] || continue
        if [ "$how" = exact ]; then
            cmp "/tmp/kt-rtb1-lever_${n}_b1.bin" /tmp/kt-rtb1-main_b1.bin >"$L/cmp_lever_$n.txt" 2>&1
            rc=$? # where not, how far: within 0.15?
            [ $rc = 0 ] || close "/tmp/kt-rtb1-lever_${n}_b1.bin" /tmp/kt-rtb1-main_b1.bin 129280 0.15 any >>"$L/cmp_lever_$n.txt" 2>&1
            check $rc "lever $n ($set): V4-Flash B=1 logits byte-identical to main's $(head -c 100 "$L/cmp_lever_$n.txt" | tr '\n' ' ')$(tail -n 1 "$L/cmp_lever_$n.txt")"
        else
            close "/tmp/kt-rtb1-lever_${n}_b1.bin" /tmp/kt-rtb1-main_b1.bin 129280 0.15 any >"$L/cmp_lever_$n.txt" 2>&1
            check $? "lever $n ($set): V4-Flash B=1 logits within 0.15 of main's ($(tail -n 1 "$L/cmp_lever_$n.txt"))"
        fi
        rm -f "/tmp/kt-rtb1-lever_${n}_b1.bin"
    done
}

# DeepSeek-V3.2's step (release config, synthetic, 4 layers, B = 2) on both builds: the same logits
# byte for byte (this session changed kernels V3.2 runs too: rt_embed's grid, rt_argmax's block,
# rt_rmsnorm's weight loads)
part_v32() {
    local t k kt F32=/tmp/kt-rtb1-v32
    [ -s "$F32/config.json" ] || timeout "$(lim 30)" $PY tests/gpu/runtime_ref.py flash "$F32" --arch v32 >"$L/v32_make.log" 2>&1
    [ -s "$F32/config.json" ] || { check 1 "v32: the config folder: $(tail -n 1 "$L/v32_make.log")"; return; }
    [ -x "$MAIN" ] || { check 1 "v32: no main build $MAIN to compare with"; return; }
    quiet_gpu
    for k in new main; do
        kt=$KT
        [ $k = main ] && kt=$MAIN
        t=$(lim 40)
        [ "$t" -gt 0 ] || { check 1 "v32: skipped, $((SECONDS - T0)) s spent"; return; }
        timeout "$t" $kt run --model "$F32" --synthetic --layers 4 --batch 2 --context 4096 --steps 2 \
            --dump "/tmp/kt-rtb1-v32_$k.bin" >"$L/v32_$k.log" 2>&1 ||
            { check 1 "v32: $k's kt run failed: $(tail -n 1 "$L/v32_$k.log")"; return; }
    done
    cmp "/tmp/kt-rtb1-v32_new.bin" "/tmp/kt-rtb1-v32_main.bin" >"$L/v32_cmp.txt" 2>&1
    check $? "DeepSeek-V3.2 synthetic, 4 layers, B=2, 3 steps: logits byte-identical to main's build $(head -c 100 "$L/v32_cmp.txt")"
    rm -f /tmp/kt-rtb1-v32_*.bin
}

part_correct() {
    local t
    t=$(lim 95)
    [ "$t" -ge 62 ] || { check 1 "runtime.sh routed: skipped, $((SECONDS - T0)) s spent"; return; } # it wants 60
    KT_RT_CONFIGS=routed KT_RT_BUDGET=$t LOGS=$L/runtime timeout "$t" bash tests/gpu/runtime.sh correct \
        >"$L/runtime.log" 2>&1
    check $? "routed tiny V4 against transformers and the host reference (tests/gpu/runtime.sh correct)"
    grep "^ok\|^FAIL\|^PASS\|passed, \|gpu vs ktref \|gpu vs plain \|gpu vs hf_fp32 " "$L/runtime.log"
}

part_b1b2() {
    if [ -s "$D/prompt.txt" ] && [ -s "$L/runtime/routed/gpu.bin" ] && [ "$(lim 20)" -gt 0 ]; then
        head -n 1 "$D/prompt.txt" >"$L/prompt1.txt"
        timeout 6 $KT run --model "$D" --batch 2 --context 64 --steps 0 --prompt "$D/prompt.txt" --dump "$L/b2.bin" \
            >"$L/b2.log" 2>&1 &&
            timeout 6 $KT run --model "$D" --batch 1 --context 64 --steps 0 --prompt "$L/prompt1.txt" \
                --dump "$L/b1.bin" >"$L/b1.log" 2>&1 &&
            $PY - "$L/b1.bin" "$L/b2.bin" <<'EOF'
import sys
import numpy as np
b = np.fromfile(sys.argv[2], dtype=np.float32).reshape(-1, 2, 512)
a = np.fromfile(sys.argv[1], dtype=np.float32).reshape(b.shape[0], 1, 512)
rel = np.linalg.norm(a[:, 0] - b[:, 0], axis=1) / np.linalg.norm(b[:, 0], axis=1)
print(f"B=1 against B=2's first sequence: median per-step rel L2 {np.median(rel):.2e}, max {rel.max():.2e}")
sys.exit(0 if np.median(rel) < 1e-2 else 1)
EOF
        check $? "routed tiny V4 at B=1 (the HC modules in rt_gemv_hc1's last block) against B=2, teacher-forced"
        timeout 6 $KT run --model "$D" --batch 2 --context 64 --steps 8 --prompt "$D/prompt.txt" \
            --dump "$L/again.bin" >"$L/again.log" 2>&1 && cmp -s "$L/again.bin" "$L/runtime/routed/gpu.bin"
        check $? "routed tiny V4, B=2 run again: the same logits byte for byte"
    else
        check 1 "routed tiny V4 at B=1 and again: no model, no families' dump from part correct, or no time"
    fi
}

PARTS=${*:-warm b1 b64 correct b1b2}
# part tiny runs in the background from the start (its checks collected at the end)
TINY= TINY_DONE=
case " $PARTS " in *" tiny "*) (part_tiny >"$L/tiny.out" 2>&1) & TINY=$! ;; esac
for p in $PARTS; do
    case $p in
    tiny) continue ;;
    warm) part_warm ;;
    b1) part_flash 1 ;;
    b16) part_flash 16 ;;
    b64) part_flash 64 ;;
    one) part_one ;;
    ncu) part_ncu ;;
    ncuspread) part_ncu last KT_STEP_HC_SPREAD=0 ;;
    ncuoff) off=${KT_RTB1_OFF:-KT_RTB1_NCU=1} && part_ncu off "${off%%,*}" ;;
    short) part_short ;;
    correct) part_correct ;;
    v32) part_v32 ;;
    b1b2) part_b1b2 ;;
    plant) part_plant ;;
    plantkv) part_plantkv ;;
    tinyoff) part_tinyoff ;;
    levers) part_levers ;;
    gate) part_gate ;;
    spread) part_spread ;;
    *) check 1 "unknown part $p (warm, b1, b16, b64, short, one, gate, spread, levers, ncu, ncuspread, ncuoff, tiny, plant, plantkv, tinyoff, correct, b1b2, v32)" ;;
    esac
    say "$p done"
done
quiet_gpu
if [ -n "$TINY_DONE" ]; then
    cat "$L/tiny.out"
    passed=$((passed + $(grep -c '^PASS' "$L/tiny.out"))) failed=$((failed + $(grep -c '^FAIL' "$L/tiny.out")))
fi
rm -f /tmp/kt-rtb1-*.bin
find "$L" -name '*.safetensors' -delete
find "$L" -name '*.bin' -size +20M -delete
# the logs as one file (the device returns a bounded count of files)
[ -z "${OUT:-}" ] || { tar czf "$OUT/rtb1_logs.tgz" -C "$L" . && rm -rf "$L"; }
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
