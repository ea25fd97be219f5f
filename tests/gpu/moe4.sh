#!/usr/bin/env bash
# moe4.sh — the GPU check of the moe4 work (MXFP4 routed experts and the hash-routed layers in
# `kt run`'s step), in one bounded call (~120 s on an H200 with a cold JIT cache):
#  1. runtime_v32.sh mxfp4-gpu: the tiny transformers-made V4 with MXFP4 experts (its first layer
#     hash-routed) on the GPU step against transformers and the host reference (its limits);
#  2. kt verify of moe_route ROUTER=HASH (V4-Flash's E 256, top-6; uniform, Zipf, hot; M 1, 16,
#     64, 256; the default config and 2 seeded ones) against its float64 reference, and of
#     moe_gemm FORMAT=mxfp4 at the tiny model's shapes;
#  3. V4-Flash synthetic, --tp-shapes 4, 43 layers, context 8192, B = 1 and 64, FP8 and MXFP4
#     experts (--experts): TPOT, floor and the per-op ms of one eager step (--json).
# Every part under `timeout`, one PASS/FAIL line each; logs under $OUT/moe4 (or $LOGS).
# MOE4_PARTS picks parts (default "tiny verify tpot"), MOE4_EXPERTS the TPOT runs' formats
# (default "fp8 mxfp4"). Ends with "N passed, N failed".
#   usage: OUT=DIR [MOE4_PARTS="verify tpot"] [MOE4_EXPERTS=mxfp4] bash tests/gpu/moe4.sh
set -u
cd "$(dirname "$0")/../.."
LOGS=${LOGS:-${OUT:+$OUT/moe4}}
LOGS=${LOGS:-/tmp/kt-moe4}
MODELS=${KT_MOE4_MODELS:-/tmp/kt-moe4-models} # weights stay out of $OUT
rm -rf "$LOGS" "$MODELS" && mkdir -p "$LOGS" "$MODELS"
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/kt-moe4-cache} # the four TPOT runs share their compiles
KT=./bin/kt PY=${PYTHON:-python3} PARTS=${MOE4_PARTS:-tiny verify tpot}
part() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
passed=0 failed=0
check() {
    if [ "$1" = 0 ]; then passed=$((passed + 1)); echo "PASS $2"; else failed=$((failed + 1)); echo "FAIL $2$([ "$1" = 124 ] && echo " (timed out)")"; fi
}

# 1. the tiny MXFP4 model against transformers (its own PASS/FAIL lines, then one for the part)
if part tiny; then
    LOGS=$LOGS/mxfp4 KT_V32_TIMEOUT=60 timeout 110 bash tests/gpu/runtime_v32.sh mxfp4-gpu 2>&1 | tee "$LOGS/mxfp4.log" | sed 's/^/  /'
    check "${PIPESTATUS[0]}" "tiny V4 with MXFP4 experts: GPU step vs transformers and the host reference"
fi

# 2. moe_route's hash router
if part verify; then
    shapes=""
    for d in uniform zipf hot; do shapes="$shapes --shape ROUTER=HASH,E=256,TOPK=6,TM=8,NTM=4,DIST=$d"; done
    # shellcheck disable=SC2086
    timeout 60 $KT verify --family moe_route $shapes --m 1,16,64,256 --sample 2 --seed $RANDOM >"$LOGS/verify_hash.log" 2>&1
    check $? "kt verify moe_route ROUTER=HASH (uniform, zipf, hot; M 1-256; default + 2 sampled configs)"
    tail -n 3 "$LOGS/verify_hash.log" | sed 's/^/  /'
    # the MXFP4 GEMMs at the tiny model's shapes (E 32, hidden 256, expert width 128, top-2), so a
    # failure of part 1 says whether the kernel or the step's wiring is at fault
    timeout 60 $KT verify --family moe_gemm --shape FORMAT=mxfp4,STAGE=gateup,E=32,N=256,K=256,TOPK=2,DIST=uniform \
        --shape FORMAT=mxfp4,STAGE=down,E=32,N=256,K=128,TOPK=2,DIST=uniform --m 1,2,16 --seed $RANDOM \
        >"$LOGS/verify_tiny_mxfp4.log" 2>&1
    check $? "kt verify moe_gemm FORMAT=mxfp4 at the tiny model's shapes (M 1, 2, 16)"
    tail -n 2 "$LOGS/verify_tiny_mxfp4.log" | sed 's/^/  /'
fi

# 3. V4-Flash TPOT, FP8 and MXFP4 experts
part tpot || { echo "$passed passed, $failed failed"; [ "$failed" = 0 ]; exit; }
F=$MODELS/flash
timeout 60 $PY tests/gpu/runtime_ref.py flash "$F" >"$LOGS/flash.log" 2>&1
check $? "V4-Flash config.json (transformers' DeepseekV4Config defaults)"
for b in 1 64; do
    for e in ${MOE4_EXPERTS:-fp8 mxfp4}; do
        n=flash_${e}_b$b
        timeout 90 $KT run --model "$F" --synthetic --tp-shapes 4 --experts $e --batch $b --context 8192 --steps 1 \
            --json "$LOGS/$n.json" >"$LOGS/$n.log" 2>"$LOGS/$n.err"
        rc=$?
        [ $rc = 0 ] && grep -q "moe_gemm ($e)" "$LOGS/$n.err"
        check $? "V4-Flash --synthetic --tp-shapes 4 --experts $e, B=$b, context 8192 (moe on moe_gemm $e)"
        [ $rc = 0 ] || tail -n 5 "$LOGS/$n.err" | sed 's/^/  /'
        grep "TPOT\|^kt run: moe \|weights on" "$LOGS/$n.log" "$LOGS/$n.err" | sed 's/^/  /'
    done
    $PY - "$LOGS/flash_fp8_b$b.json" "$LOGS/flash_mxfp4_b$b.json" <<'EOF' || true
import json, sys
for path in sys.argv[1:]:
    try:
        d = json.load(open(path))
    except (OSError, ValueError):
        continue
    ops = sorted(d["per_op_ms"].items(), key=lambda kv: -kv[1])
    print(f"  {d['experts']:5s} B={d['batch']}: TPOT {d['tpot_ms']:.2f} ms, floor {d['floor_ms']:.2f} ms "
          f"({d['floor_ratio']:.2f}x), {d['tokens_per_s']:.0f} tokens/s; per op: "
          + ", ".join(f"{k} {v:.2f}" for k, v in ops[:12]))
EOF
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
