#!/usr/bin/env bash
# runtime_v32.sh — kt's second model and the MXFP4 experts against Hugging Face transformers, on
# the float64 host reference (no GPU kernel runs; a GPU only adds the last check):
#  - DeepSeek-V3.2: a tiny random DeepseekV32 saved with save_pretrained (3 layers, the first
#    dense; the indexer picks 8 of up to 24 tokens; 2 of 8 experts in 1 of 2 groups; YaRN), the
#    host reference teacher-forced on its 24-token prompt (B = 2), exact and in kt's formats,
#    against transformers' fp32 forward on the same tokens;
#  - DeepSeek-V4 with MXFP4 routed experts: the tiny routed V4 of runtime.sh, its experts written
#    as the release ships them (I8 e2m1 pairs + F8_E8M0 `scale`) in one folder and as their
#    exact bf16 values in another: the reference on the MXFP4 folder must equal it on the bf16
#    folder bit for bit and match transformers on the bf16 one;
#  - kt run without --reference refuses V3.2 (no GPU step);
#  - on a GPU, the step on the MXFP4 folder (moe_gemm FORMAT=mxfp4; its hash-routed first layer
#    by moe_route HASH): B = 2, the 24-token prompt and 8 greedy steps; both host references
#    teacher-forced on its tokens; runtime_ref.py compare against transformers on the bf16 twin
#    (the same numbers), with runtime.sh's limits: the GPU within 0.15 (median per-step rel L2)
#    of the host reference in kt's formats (MXFP4 experts exact, the other GEMMs FP8), within
#    what those formats explain of transformers fp32, and the same greedy tokens.
# Every part under `timeout`; logs under $OUT/v32 (or $LOGS). Ends with "N passed, N failed".
# MODE v32 or mxfp4 runs one model's part; mxfp4-gpu only the MXFP4 model's GPU comparison
# (tests/gpu/moe4.sh: the host-reference checks are the CPU's).
#   usage: tests/gpu/runtime_v32.sh [v32|mxfp4|mxfp4-gpu|all]
set -u
cd "$(dirname "$0")/../.."
LOGS=${LOGS:-${OUT:+$OUT/v32}}
LOGS=${LOGS:-/tmp/kt-v32}
rm -rf "$LOGS" && mkdir -p "$LOGS"
KT=./bin/kt PY=${PYTHON:-python3} T=${KT_V32_TIMEOUT:-300} MODE=${1:-all}
passed=0 failed=0
check() {
    if [ "$1" = 0 ]; then passed=$((passed + 1)); echo "PASS $2"; else failed=$((failed + 1)); echo "FAIL $2$([ "$1" = 124 ] && echo " (timed out after $T s)")"; fi
}
# a transformers run in float32 against the same math in double: ~1e-6 where no discrete choice flips
close='the same math in double against float32'

if [ "${MODE#mxfp4}" = "$MODE" ]; then
D=$LOGS/v32
timeout $T $PY tests/gpu/runtime_ref.py make "$D" --arch v32 --prompt 24 >"$LOGS/v32.make.log" 2>&1
check $? "v32: tiny DeepseekV32 saved by transformers"
for r in exact kt; do
    timeout $T $KT run --model "$D" --batch 2 --context 32 --steps 0 --prompt "$D/prompt.txt" --reference $r \
        --dump "$D/$r.bin" >"$LOGS/v32.$r.log" 2>&1
    check $? "v32: host reference ($r) on the prompt"
done
timeout $T $PY tests/gpu/runtime_ref.py hostcheck "$D" --dump exact="$D/exact.bin" --dump kt="$D/kt.bin" \
    --limits "{\"exact:hf_fp32\": [1e-5, \"$close\"]}" >"$LOGS/v32.check.log" 2>&1
check $? "v32: host reference exact vs transformers DeepseekV32ForCausalLM fp32"
grep -v "^Loading\|Writing" "$LOGS/v32.check.log" | tail -n 4
timeout $T $KT run --model "$D" --batch 1 --context 8 --steps 1 >"$LOGS/v32.gpu.log" 2>&1
[ $? != 0 ] && grep -q "deepseek_v32: kt's GPU step runs deepseek_v4 only" "$LOGS/v32.gpu.log"
check $? "v32: kt run without --reference says the GPU step is missing"
fi
[ "$MODE" = v32 ] && { echo "$passed passed, $failed failed"; [ "$failed" = 0 ]; exit; }

M=$LOGS/v4 X=$LOGS/v4mx
timeout $T $PY tests/gpu/runtime_ref.py make "$M" --prompt 24 --mxfp4 "$X" >"$LOGS/v4.make.log" 2>&1
check $? "mxfp4: tiny DeepseekV4 saved, its routed experts written as MXFP4"
if [ "$MODE" != mxfp4-gpu ]; then
for run in "exact $X mx" "exact $M bf" "kt $X mxkt"; do
    set -- $run
    timeout $T $KT run --model "$2" --batch 2 --context 32 --steps 0 --prompt "$M/prompt.txt" --reference $1 \
        --dump "$M/$3.bin" >"$LOGS/v4.$3.log" 2>&1
    check $? "mxfp4: host reference ($1) on $(basename "$2")"
done
timeout $T $PY tests/gpu/runtime_ref.py hostcheck "$M" --dump mx="$M/mx.bin" --dump bf="$M/bf.bin" --dump mxkt="$M/mxkt.bin" \
    --limits "{\"mx:bf\": [0, \"MXFP4 decoded exactly: the same numbers\"], \"mx:hf_fp32\": [1e-5, \"$close\"]}" \
    >"$LOGS/v4.check.log" 2>&1
check $? "mxfp4: host reference on MXFP4 experts vs bf16 (bit-equal) and vs transformers fp32"
grep -v "^Loading\|Writing" "$LOGS/v4.check.log" | tail -n 5
fi
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    G=$LOGS/v4gpu
    mkdir -p "$G"
    timeout $T $KT run --model "$X" --batch 2 --context 32 --steps 8 --prompt "$M/prompt.txt" --dump "$G/gpu.bin" \
        >"$G/gpu.log" 2>"$G/gpu.err"
    rc=$?; check $rc "mxfp4: kt run on the GPU with the MXFP4 experts"
    grep "^kt run: moe " "$G/gpu.err"
    [ $rc = 0 ] || tail -n 8 "$G/gpu.err"
    grep -q "^kt run: moe .*kt family moe_route (V4, HASH for the hash-routed layers) + moe_gemm (mxfp4)" "$G/gpu.err"
    check $? "mxfp4: the MoE ran moe_route V4 + HASH and moe_gemm FORMAT=mxfp4 (the startup log above)"
    $PY tests/gpu/runtime_ref.py fed "$G/gpu.log" >"$G/fed.txt"
    for r in kt exact; do
        timeout $T $KT run --model "$X" --batch 2 --context 32 --steps 0 --prompt "$G/fed.txt" --reference $r \
            --dump "$G/$r.bin" >"$G/$r.log" 2>&1
        check $? "mxfp4: host reference ($r) on the GPU run's tokens"
    done
    # runtime.sh's limits (its comments say why): the GPU step against the host reference in
    # kt's formats, and the host reference's exact math against transformers
    lim='{"exact:hf_fp32": [0.001, "the host reference is the transformers math in double"],
          "gpu:ktref": [0.15, "the families: the flip floor plus their bf16/e4m3 roundings"]}'
    timeout $T $PY tests/gpu/runtime_ref.py compare "$M" --prompt 24 --kt-log "$G/gpu.log" --dump gpu="$G/gpu.bin" \
        --dump ktref="$G/kt.bin" --dump exact="$G/exact.bin" --limits "$lim" --require-greedy >"$G/compare.log" 2>&1
    check $? "mxfp4: GPU logits and greedy tokens against transformers (bf16 twin) and the host reference"
    grep -v "^Loading\|Writing" "$G/compare.log" | tail -n 20
fi
find "$LOGS" -name '*.safetensors' -delete
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
