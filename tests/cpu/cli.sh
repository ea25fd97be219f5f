#!/usr/bin/env bash
# cli.sh — the CLI's answers to bad input on a machine without a GPU: one clear line on
# stderr and a non-zero exit, never a crash. Ends with "N passed, N failed".
set -u
KT=${1:?usage: cli.sh path/to/kt}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0

# expect_fail "what" "stderr pattern" kt-args...: exit status 1..125 (not a crash) and the pattern on stderr.
expect_fail() {
    local what=$1 pattern=$2; shift 2
    "$KT" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ $rc -ge 1 ] && [ $rc -lt 126 ] && grep -q -- "$pattern" "$tmp/err"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL cli: $what (exit $rc): $(head -c 300 "$tmp/err")"
    fi
}

expect_ok() {
    local what=$1 pattern=$2; shift 2
    if "$KT" "$@" >"$tmp/out" 2>"$tmp/err" && grep -q -- "$pattern" "$tmp/out"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL cli: $what: $(head -c 300 "$tmp/err")"
    fi
}

expect_fail "unknown command" "unknown command 'frobnicate'" frobnicate
expect_fail "unknown family" "unknown family 'nope'" compile --family nope --arch sm_120
expect_fail "unknown option" "unknown or incomplete option" compile --family fp8_gemm --bogus
expect_fail "unknown arch" "unknown --arch 'sm_42'" compile --family fp8_gemm --arch sm_42
expect_fail "malformed shape" "bad shape" bench --family fp8_gemm --shape N=12x --m 1 --config TILE_N=64
expect_fail "shape missing a dim" "K missing" tune --family fp8_gemm --shape N=1024 --m 1
expect_fail "shape not a multiple of 128" "multiples of 128" tune --family fp8_gemm --shape N=1000,K=4096 --m 1
expect_fail "bad M list" "bad integer list" tune --family fp8_gemm --shape N=1024,K=4096 --m 1,x
expect_fail "M out of range" "M=0\|bad integer list" tune --family fp8_gemm --shape N=1024,K=4096 --m 0
expect_fail "bad strategy" "--strategy must be" tune --family fp8_gemm --shape N=1024,K=4096 --m 1 --strategy magic
expect_fail "bad config name" "unknown name 'TILES'" bench --family fp8_gemm --shape N=1024,K=4096 --m 1 --config TILES=3
expect_fail "config rejected by constraints" "config rejected" compile --family fp8_gemm --arch sm_120 --config TILE_N=128,TILE_M=128,TILE_K=256,STAGES=6,WARPS=8
expect_fail "missing db" "cannot read database" db show --db "$tmp/none.db"
printf 'this is not a database, just text that is long enough to look like a header......' >"$tmp/junk.db"
expect_fail "corrupt db" "not a database\|not a kt database" db show --db "$tmp/junk.db"
expect_fail "export without format" "needs --format" db export --db "$tmp/junk.db"
expect_fail "bench needs a db or config" "cannot read database" bench --family fp8_gemm --shape N=1024,K=4096 --m 1 --db "$tmp/none.db"
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda.so.1'; then
    expect_fail "tune without a GPU" "needs an NVIDIA GPU" tune --family fp8_gemm --shape N=1024,K=4096 --m 1 --db "$tmp/x.db"
    expect_fail "devices without a GPU" "needs an NVIDIA GPU" devices
fi
# A random sweep measures --budget configs per (shape, M) after pruning (fake GPU: real
# compiles, made-up times).
KT_FAKE_GPU=1 KT_CACHE_DIR="$tmp/cache" "$KT" tune --family fp8_gemm --shape N=1024,K=4096 --m 1,64 \
    --strategy random --budget 5 --db "$tmp/random.db" >"$tmp/out" 2>"$tmp/err"
rows=$("$KT" db export --format csv --db "$tmp/random.db" 2>/dev/null | tail -n +2 | wc -l)
if [ "$rows" -eq 10 ]; then passed=$((passed + 1)); else
    failed=$((failed + 1)); echo "FAIL cli: random budget: $rows rows, expected 10: $(tail -c 300 "$tmp/err")"; fi

# kt run: bad input, and the float64 host reference on a tiny synthetic model (no GPU needed)
mkdir -p "$tmp/m" "$tmp/bad"
cat >"$tmp/m/config.json" <<'JSON'
{"model_type": "deepseek_v4", "vocab_size": 256, "hidden_size": 128, "num_hidden_layers": 3,
 "num_attention_heads": 1, "head_dim": 512, "q_lora_rank": 128, "o_groups": 1, "o_lora_rank": 128,
 "sliding_window": 8, "index_n_heads": 2, "index_head_dim": 128, "index_topk": 2, "n_routed_experts": 4,
 "num_experts_per_tok": 2, "moe_intermediate_size": 128, "partial_rotary_factor": 0.125,
 "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
 "layer_types": ["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"],
 "mlp_layer_types": ["hash_moe", "moe", "moe"]}
JSON
printf '{"model_type": "deepseek_v4", "hidden_size": 128}' >"$tmp/bad/config.json"
printf '1 2 3\n4 5\n' >"$tmp/m/ragged.txt"
expect_fail "run without --model" "needs --model" run
expect_fail "run: no config.json" "cannot read $tmp/none/config.json" run --model "$tmp/none" --reference kt
expect_fail "run: config missing a field" "config.json: missing field vocab_size" run --model "$tmp/bad" --reference kt
expect_fail "run: no safetensors" "no .safetensors files" run --model "$tmp/m" --reference kt
expect_fail "run: bad batch" "--batch: expected 1 to 4096" run --model "$tmp/m" --batch 0
expect_fail "run: tp 2" "only world size 1" run --model "$tmp/m" --tp 2
expect_fail "run: ragged prompt" "line 2 has 2 tokens" run --model "$tmp/m" --synthetic --reference kt --batch 2 --prompt "$tmp/m/ragged.txt"
expect_fail "run: context too short" "exceed --context 4" run --model "$tmp/m" --synthetic --reference kt --steps 8 --context 4
expect_ok "run: host reference, synthetic weights" "step 11:" run --model "$tmp/m" --synthetic --reference kt --batch 2 --steps 11 --context 16
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda.so.1'; then
    expect_fail "run without a GPU" "needs an NVIDIA GPU" run --model "$tmp/m" --synthetic
    # the embedding API through ctypes: the library loads, its calls bind, errors come back
    if python3 -c "import sys; sys.path.insert(0, 'python'); import kt_embed
try:
    kt_embed.Session()
except kt_embed.KtError as e:
    sys.exit(0 if 'needs an NVIDIA GPU' in str(e) else 1)
sys.exit(1)" 2>"$tmp/py.err"; then passed=$((passed + 1)); else
        failed=$((failed + 1)); echo "FAIL cli: kt_embed without a GPU: $(tail -c 300 "$tmp/py.err")"; fi
fi

expect_ok "help" "usage: kt COMMAND" --help
expect_ok "list" "fp8_gemm" list
expect_ok "list family" "TILE_N" list fp8_gemm
expect_ok "list family: untuned problems get a default of their own" "untuned problem gets one chosen for its M" list quant_fp8_gemm
expect_ok "compile one config" "1 compiled, 0 failed" compile --family act_quant --arch sm_90 --config VEC=8

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
