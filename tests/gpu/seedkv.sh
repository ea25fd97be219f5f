#!/usr/bin/env bash
# seedkv.sh — GPU checks of KT_RUN_SEED_KV=1 (bench/NOTES.md, twenty-fifth session seedkv: a --synthetic run's KV
# caches seeded at open for the timed step at P = context - 1, through the step's own stores, so TPOT is not timed on
# zeros). One H200, <= 118 s (KT_SEEDKV_BUDGET; a part that would start past it is skipped), every run under its own
# timeout; from the tree's root with bin/kt (and bin/kt_plant_seed, from tests/gpu/seedkv_plant.sh) built here, $KT_MAIN
# main's bin/kt. Every run sets KT_RUN_PROBE (the step at P's logits and every CSA layer's top-k lists, written after
# the report's profiled step at P; --dump holds only the decoded step at position 0). Parts, in order:
#   warm   4-layer V4-Flash starts side by side, context 8192, --steps 1, in two waves (first one start per set of
#          variants a cold JIT cache compiles: B = 16 off, main's build, B = 64 and 1 on, V3.2 off; then B = 16 off
#          again, on, the plant, V3.2 on). Checks: (c) main's position-0 logits
#          byte-identical to this build's off and the same graph kernel count; off twice: the step at P's logits byte
#          for byte (so a difference below is the history, not run-to-run noise); on: position-0 logits byte-identical
#          to off (the decoded steps read nothing seeded), the same graph kernels (the fill is outside the graph); (d)
#          on's top-k lists a real selection (more than k / 8 of each list past the first k entries; all-zero logits
#          tie every key, and ties go to the lowest positions: the first k), the plant's (the fill writes entry 0 of
#          every cache only) not: the selection check fails on it; DeepSeek-V3.2 (release config, synthetic, 4
#          layers, B = 2, context 4096) off and on: on logged, position 0 byte-identical, its selection real;
#   full   43 layers, --tp-shapes 4, context 8192, --steps 1 --json --dump at B = 1, 16, 64, off then on: (a) on ran
#          and logged the fill, its position-0 dump and its step-at-P logits finite; (b) TPOT off / on with the per-op
#          ms of mla_indexer and mla_decode (and any op that moved > 0.05 ms), the experts a MoE layer read; (d) the
#          step at P's logits differ from off's (attention over a non-zero history), on's selection real, off's
#          printed (info: expected the first k entries); position 0 byte-identical on against off;
#   main   with 20 s left: main's 43-layer B = 16 position-0 logits byte-identical to this build's off;
#   32k    with 30 s left: context 32768 B = 1 off and on (TPOT, per-op, the checks of full).
# Logs under $OUT/seedkv (or /tmp/kt-seedkv), packed into $OUT/seedkv_logs.tgz; dumps under /tmp/kt-seedkv-dumps
# (removed). Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.." || exit 2
L=${OUT:+$OUT/seedkv}
L=${L:-/tmp/kt-seedkv}
rm -rf "$L" && mkdir -p "$L"
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/kt-rt-cache} # speed.sh's and runtime.sh's: warm after either
MODELS=${KT_RT_MODELS:-/tmp/kt-rt-models}
KT=./bin/kt PLANT=./bin/kt_plant_seed MAIN=${KT_MAIN:-} PY=${PYTHON:-python3}
F=$MODELS/flash X=/tmp/kt-seedkv-dumps
rm -rf "$X" && mkdir -p "$X"
BUDGET=${KT_SEEDKV_BUDGET:-118}
T0=$SECONDS
source tests/gpu/budget.sh # check, say, lim
MODEL_ARGS="--model $F --tp-shapes 4" # run's model (V3.2's part: its own folder, whole shapes)
F32=$MODELS/v32flash

[ -s "$F/config.json" ] || timeout 30 $PY tests/gpu/runtime_ref.py flash "$F" >"$L/flash_make.log" 2>&1
[ -s "$F/config.json" ] || check 1 "V4-Flash model folder: $(tail -n 1 "$L/flash_make.log")"
[ -s "$F32/config.json" ] || timeout 30 $PY tests/gpu/runtime_ref.py flash "$F32" --arch v32 >"$L/v32_make.log" 2>&1

# run NAME KT SEED TIMEOUT ARGS...: one V4-Flash run (KT_RUN_SEED_KV=SEED) into $L/NAME.{log,err,json} and
# $X/NAME.{bin,probe}
run() {
    local n=$1 kt=$2 seed=$3 t=$4
    shift 4
    [ "$t" -gt 0 ] || { say "skip $n: $((SECONDS - T0)) s spent"; return 1; }
    [ -x "$kt" ] || { echo "no $kt" >"$L/$n.err"; return 1; }
    KT_RUN_SEED_KV=$seed KT_RUN_PROBE=$X/$n.probe timeout "$t" "$kt" run $MODEL_ARGS --synthetic --steps 1 --json "$L/$n.json" \
        --dump "$X/$n.bin" "$@" >"$L/$n.log" 2>"$L/$n.err"
}
kernels() { grep -ho "the step's graph: [0-9]* kernels" "$L/$1.log" 2>/dev/null; }
same() { [ -s "$X/$1.bin" ] && [ -s "$X/$2.bin" ] && cmp "$X/$1.bin" "$X/$2.bin" >"$L/cmp_$1_$2.txt" 2>&1; }

# probe A [B]: A's lists (every CSA layer, every sequence): how many of each list's entries lie past the first k;
# "real" when each list's count is over k / 8 (random keys: k (1 - k / n), 384 of 512 at n = 2048), "ties" when every
# count is at most 2 (all-zero logits: the first k; a seeded entry 0, or the entry the step writes at P, moves 1 or
# 2); with B, whether A's step-at-P logits differ from B's (and both are finite). Exit 0 real (and differing), 1
# ties, 2 neither, 3 bad input.
probe() {
    $PY - "$@" <<'EOF'
import sys
import numpy as np
def load(p):
    raw = np.fromfile(p, dtype=np.int32)
    B, V, K, n, seq = (int(v) for v in raw[:5])
    lg = raw[5:5 + B * V].view(np.float32).reshape(B, V)
    lists = raw[5 + B * V:].reshape(n, B, K)
    return B, K, seq, lg, lists
try:
    B, K, seq, lg, lists = load(sys.argv[1])
except Exception as e:
    print(f"unreadable probe {sys.argv[1]}: {e}")
    sys.exit(3)
if not np.isfinite(lg).all() or lists.shape[0] == 0:
    print(f"step-at-P logits finite: {bool(np.isfinite(lg).all())}, {lists.shape[0]} CSA lists")
    sys.exit(3)
past = np.zeros(lists.shape[:2], dtype=np.int64)
for l in range(lists.shape[0]):
    for b in range(B):
        ids = lists[l, b]
        e = ids[ids >= 0] - b * seq
        past[l, b] = int((e >= K).sum())
real, ties = bool((past > K // 8).all()), bool((past <= 2).all())
msg = (f"{lists.shape[0]} CSA layers x {B}: entries past the first {K} a list min {past.min()}, median "
       f"{int(np.median(past))}, max {past.max()} ({'real' if real else 'ties' if ties else 'mixed'}); layer 0 "
       f"sequence 0's first ids {lists[0, 0, :6].tolist()}")
rc = 0 if real else 1 if ties else 2
if len(sys.argv) > 2:
    _, _, _, lg2, _ = load(sys.argv[2])
    d = np.linalg.norm(lg - lg2) / max(np.linalg.norm(lg2), 1e-30)
    msg += f"; step-at-P logits against {sys.argv[2].split('/')[-1]}: rel L2 {d:.3e}"
    rc = rc if d > 0 else 2
print(msg)
sys.exit(rc)
EOF
}
# finite NAME: the position-0 dump holds no NaN / Inf
finite() { $PY -c "import sys, numpy as np; sys.exit(0 if np.isfinite(np.fromfile('$X/$1.bin', dtype=np.float32)).all() else 1)"; }

part_warm() {
    local t p rc=0 pids="" r v32=""
    # wave 1: one start per set of variants to compile (this build's model.cu and the families at B = 16, 64, 1;
    # main's model.cu; V3.2's shapes, at most 50 s: a slow start costs its own checks), side by side
    t=$(lim 70)
    run w_off "$KT" 0 "$t" --layers 4 --batch 16 --context 8192 &
    pids="$pids $!"
    [ -n "$MAIN" ] && { run w_main "$MAIN" 0 "$t" --layers 4 --batch 16 --context 8192 & pids="$pids $!"; }
    run w_on64 "$KT" 1 "$t" --layers 4 --batch 64 --context 8192 &
    pids="$pids $!"
    run w_on1 "$KT" 1 "$t" --layers 4 --batch 1 --context 8192 &
    pids="$pids $!"
    [ -s "$F32/config.json" ] && { MODEL_ARGS="--model $F32" run v32_off "$KT" 0 "$(lim 50)" --layers 4 --batch 2 --context 4096 & v32="$!"; }
    for p in $pids; do wait "$p" || rc=1; done
    [ -n "$v32" ] && { wait "$v32" || v32=fail; }
    # wave 2: the JIT cache warm, the other starts side by side
    pids="" t=$(lim 40)
    run w_off2 "$KT" 0 "$t" --layers 4 --batch 16 --context 8192 &
    pids="$pids $!"
    run w_on "$KT" 1 "$t" --layers 4 --batch 16 --context 8192 &
    pids="$pids $!"
    run w_plant "$PLANT" 1 "$t" --layers 4 --batch 16 --context 8192 &
    pids="$pids $!"
    [ -n "$v32" ] && { MODEL_ARGS="--model $F32" run v32_on "$KT" 1 "$t" --layers 4 --batch 2 --context 4096 & v32="$!"; }
    for p in $pids; do wait "$p" || rc=1; done
    [ -n "$v32" ] && { wait "$v32" || v32=fail; }
    check $rc "warm: 4-layer starts (B = 16 off x2, on, plant$([ -n "$MAIN" ] && echo ", main"); B = 64, 1 on) ($(grep -h -m1 'kernel part' "$L"/w_off.err | cut -c1-90))"
    for r in w_off w_off2 w_on w_plant w_main w_on64 w_on1 v32_off v32_on; do [ -s "$L/$r.err" ] && ! [ -s "$X/$r.bin" ] && echo "  $r: $(tail -n 2 "$L/$r.err" | tr '\n' ' ')"; done
    if [ -n "$MAIN" ]; then
        same w_main w_off && [ -n "$(kernels w_off)" ] && [ "$(kernels w_main)" = "$(kernels w_off)" ]
        check $? "c: main's build (4 layers, B = 16) byte-identical to this build's off, $(kernels w_main) / $(kernels w_off) $(head -c 100 "$L/cmp_w_main_w_off.txt" 2>/dev/null)"
    else
        say "c: no \$KT_MAIN: main's 4-layer check skipped"
    fi
    probe "$X/w_off.probe" >"$L/probe_w_off.txt" 2>&1
    [ -s "$X/w_off.probe" ] && cmp "$X/w_off.probe" "$X/w_off2.probe" >"$L/cmp_probe_off.txt" 2>&1
    check $? "off twice (4 layers, B = 16): the step at P's logits and lists byte for byte $(head -c 100 "$L/cmp_probe_off.txt" 2>/dev/null) (off: $(cat "$L/probe_w_off.txt"))"
    grep -q "KV caches seeded for positions 0..8190 (KT_RUN_SEED_KV=0: zeros)" "$L/w_on.err" && same w_on w_off &&
        [ "$(kernels w_on)" = "$(kernels w_off)" ]
    check $? "on (4 layers, B = 16): the fill logged, position-0 logits byte-identical to off, $(kernels w_on) / $(kernels w_off)"
    probe "$X/w_on.probe" "$X/w_off.probe" >"$L/probe_w_on.txt" 2>&1
    check $? "d: on (4 layers, B = 16): a real selection, the step at P's logits unlike off's ($(cat "$L/probe_w_on.txt"))"
    probe "$X/w_plant.probe" "$X/w_off.probe" >"$L/probe_w_plant.txt" 2>&1
    r=$?
    [ $r = 1 ] || [ $r = 2 ]
    check $? "d: the plant (entry 0 only) fails the selection check ($(cat "$L/probe_w_plant.txt"))"
    [ -n "$v32" ] || { check 1 "v32: no V3.2 config folder: $(tail -n 1 "$L/v32_make.log" 2>/dev/null)"; return; }
    grep -q "KV caches seeded for positions 0..4094 (KT_RUN_SEED_KV=0: zeros)" "$L/v32_on.err" &&
        same v32_on v32_off && finite v32_on
    check $? "v32 (4 layers, B = 2, 4K): off and on ran, on logged the fill, position-0 logits finite and byte-identical to off ($(tail -n 1 "$L/v32_on.err" | cut -c1-100))"
    probe "$X/v32_on.probe" "$X/v32_off.probe" >"$L/probe_v32_on.txt" 2>&1
    check $? "v32 d: on's selection real (MLA and indexer pages seeded), the step at P's logits unlike off's ($(cat "$L/probe_v32_on.txt"))"
    probe "$X/v32_off.probe" >"$L/probe_v32_off.txt" 2>&1
    echo "info v32: off (expected ties): $(cat "$L/probe_v32_off.txt")"
}

# part_full B CTX: 43 layers at B, context CTX, off then on
part_full() {
    local b=$1 c=$2 n=b${1}_c$2
    run "off_$n" "$KT" 0 "$(lim 60)" --batch "$b" --context "$c"
    say "off_$n rc=$? $(grep -h TPOT "$L/off_$n.log")"
    run "on_$n" "$KT" 1 "$(lim 60)" --batch "$b" --context "$c"
    say "on_$n rc=$? $(grep -h TPOT "$L/on_$n.log")"
    [ -s "$L/on_$n.json" ] && grep -q "KV caches seeded for positions 0..$((c - 2)) (KT_RUN_SEED_KV=0: zeros)" "$L/on_$n.err" &&
        finite "on_$n"
    check $? "a: on B=$b ctx $c ran, logged the fill, position-0 logits finite ($({ grep -h TPOT "$L/on_$n.log" || tail -n 1 "$L/on_$n.err"; } 2>/dev/null | cut -c1-100))"
    [ -s "$L/off_$n.json" ] || { check 1 "off B=$b ctx $c: $(tail -n 1 "$L/off_$n.err")"; return; }
    probe "$X/on_$n.probe" "$X/off_$n.probe" >"$L/probe_on_$n.txt" 2>&1
    check $? "d: on B=$b ctx $c: a real selection, the step at P's logits finite and unlike off's ($(cat "$L/probe_on_$n.txt"))"
    probe "$X/off_$n.probe" >"$L/probe_off_$n.txt" 2>&1
    echo "info d: off B=$b ctx $c (unseeded: expected ties, the first k entries): $(cat "$L/probe_off_$n.txt")"
    same "on_$n" "off_$n"
    check $? "on B=$b ctx $c: position-0 logits byte-identical to off (the decoded step reads nothing seeded)"
    [ -s "$L/on_$n.json" ] || return
    $PY - "$L" "$n" <<'EOF'
import json, sys
L, n = sys.argv[1:3]
off, on = (json.load(open(f"{L}/{k}_{n}.json")) for k in ("off", "on"))
print(f"b: V4-Flash {n}: TPOT off {off['tpot_ms']:.3f} on {on['tpot_ms']:.3f} ms ({100 * (on['tpot_ms'] / off['tpot_ms'] - 1):+.2f}%), "
      f"floor {off['floor_ms']:.3f} / {on['floor_ms']:.3f}, experts a MoE layer {off['experts_touched']:.1f} / {on['experts_touched']:.1f}")
po, pn = off["per_op_ms"], on["per_op_ms"]
calls = off["per_op_calls"]
print(f"  {'op (eager, events between ops)':30s} {'off ms':>8s} {'on ms':>8s} {'calls':>5s} {'off us':>8s} {'on us':>8s}")
for k in sorted(set(po) | set(pn), key=lambda k: -po.get(k, 0)):
    a, c, m = po.get(k, 0), pn.get(k, 0), max(calls.get(k, 1), 1)
    if k in ("mla_indexer", "mla_decode") or abs(a - c) > 0.05:
        print(f"  {k:30s} {a:8.3f} {c:8.3f} {m:5d} {1e3 * a / m:8.2f} {1e3 * c / m:8.2f}")
EOF
}

part_main() {
    [ -n "$MAIN" ] && [ -x "$MAIN" ] || { say "main: no \$KT_MAIN, skipped"; return; }
    [ "$(lim 20)" -ge 20 ] || { say "main: under 20 s left, skipped"; return; }
    [ -s "$X/off_b16_c8192.bin" ] || return
    run main_b16 "$MAIN" 0 "$(lim 40)" --batch 16 --context 8192
    same main_b16 off_b16_c8192 && [ "$(kernels main_b16)" = "$(kernels off_b16_c8192)" ]
    check $? "c: main's 43-layer B = 16 byte-identical to this build's off, $(kernels main_b16) / $(kernels off_b16_c8192) $(head -c 100 "$L/cmp_main_b16_off_b16_c8192.txt" 2>/dev/null)"
}

part_warm
say "warm done"
for b in 1 16 64; do part_full $b 8192; done
say "full done"
part_main
if [ "$(lim 30)" -ge 30 ]; then part_full 1 32768; else say "32k: under 30 s left, skipped"; fi
rm -rf "$X"
[ -z "${OUT:-}" ] || { tar czf "$OUT/seedkv_logs.tgz" -C "$L" . && rm -rf "$L"; }
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
