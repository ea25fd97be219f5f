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
#  - kt run without --reference refuses V3.2 (no GPU step) and, on a GPU, MXFP4 experts (the
#    step's experts are FP8 until it calls moe_gemm), each with a message naming what is missing.
# Every part under `timeout`; logs under $OUT/v32 (or $LOGS). Ends with "N passed, N failed".
#   usage: tests/gpu/runtime_v32.sh
set -u
cd "$(dirname "$0")/../.."
LOGS=${LOGS:-${OUT:+$OUT/v32}}
LOGS=${LOGS:-/tmp/kt-v32}
rm -rf "$LOGS" && mkdir -p "$LOGS"
KT=./bin/kt PY=${PYTHON:-python3} T=${KT_V32_TIMEOUT:-300}
passed=0 failed=0
check() {
    if [ "$1" = 0 ]; then passed=$((passed + 1)); echo "PASS $2"; else failed=$((failed + 1)); echo "FAIL $2$([ "$1" = 124 ] && echo " (timed out after $T s)")"; fi
}
# a transformers run in float32 against the same math in double: ~1e-6 where no discrete choice flips
close='the same math in double against float32'

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

M=$LOGS/v4 X=$LOGS/v4mx
timeout $T $PY tests/gpu/runtime_ref.py make "$M" --prompt 24 --mxfp4 "$X" >"$LOGS/v4.make.log" 2>&1
check $? "mxfp4: tiny DeepseekV4 saved, its routed experts written as MXFP4"
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
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    timeout $T $KT run --model "$X" --batch 1 --context 8 --steps 1 >"$LOGS/v4.gpu.log" 2>&1
    [ $? != 0 ] && grep -q "routed experts are MXFP4" "$LOGS/v4.gpu.log"
    check $? "mxfp4: the GPU step refuses MXFP4 experts, naming moe_gemm"
fi
find "$LOGS" -name '*.safetensors' -delete
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
