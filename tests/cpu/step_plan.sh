#!/usr/bin/env bash
# step_plan.sh — the family kernels `kt run` dispatches for V4-Flash at --tp-shapes 4 (B 1, 16,
# 64; context 8K and 32K; FP8 and MXFP4 experts, the hash-routed layers on moe_route HASH) and
# for DeepSeek-V3.2 (B 1, 64; context 8K) build: `kt run --plan ARCH` lists each problem with the
# default config a DB-less dispatch takes, and every distinct (family, config) is NVRTC-compiled
# with `kt compile --config` for sm_90 (the H200) and sm_120 (where kt ships), no spills. Minutes
# of NVRTC on a cold cache (make test-all runs it).
#   usage: tests/cpu/step_plan.sh [KT]
set -u
cd "$(dirname "$0")/../.."
KT=${1:-./bin/kt}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
check() { if [ "$1" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: $2"; fi; }
cat >"$tmp/config.json" <<'JSON'
{"model_type": "deepseek_v4", "vocab_size": 129280, "hidden_size": 4096, "num_hidden_layers": 43,
 "num_attention_heads": 64, "head_dim": 512, "q_lora_rank": 1024, "n_routed_experts": 256,
 "num_experts_per_tok": 6, "moe_intermediate_size": 2048, "qk_rope_head_dim": 64}
JSON
for arch in sm_90 sm_120; do
    for b in 1 16 64; do
        for ctx in 8192 32768; do
            for e in fp8 mxfp4; do
                $KT run --model "$tmp" --synthetic --tp-shapes 4 --batch $b --context $ctx --plan $arch --experts $e \
                    >"$tmp/plan" 2>"$tmp/err"
                check $? "kt run --plan $arch B=$b context $ctx experts $e: $(tail -n 1 "$tmp/err")"
                n=$(grep -c '^part: .* family$' "$tmp/plan")
                [ "$n" = 3 ] ; check $? "$arch B=$b context $ctx: every part runs its family ($(grep plain "$tmp/plan"))"
                grep -q "^plan: moe_gemm FORMAT=$e," "$tmp/plan" && grep -q '^plan: moe_route ROUTER=HASH,' "$tmp/plan"
                check $? "$arch B=$b context $ctx: moe_gemm FORMAT=$e and moe_route HASH (the hash-routed layers) planned"
                grep '^plan: ' "$tmp/plan" | awk -v a=$arch '{print a, $2, $5}' >>"$tmp/variants"
            done
        done
    done
done
# DeepSeek-V3.2 (the release's config.json fields: YaRN factor 40, mscale 1): its parts run on the
# families only (mla_indexer over every token, mla_decode LAYOUT=V32, moe_route ROUTER=V3)
mkdir -p "$tmp/v32"
cat >"$tmp/v32/config.json" <<'JSON'
{"model_type": "deepseek_v32", "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432,
 "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128, "n_routed_experts": 256,
 "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4, "first_k_dense_replace": 3,
 "rope_scaling": {"type": "yarn", "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                  "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1}}
JSON
for arch in sm_90 sm_120; do
    for b in 1 64; do
        $KT run --model "$tmp/v32" --synthetic --batch $b --context 8192 --plan $arch >"$tmp/plan" 2>"$tmp/err"
        check $? "V3.2 kt run --plan $arch B=$b: $(tail -n 1 "$tmp/err")"
        n=$(grep -c '^part: .* family$' "$tmp/plan")
        [ "$n" = 3 ] && grep -q 'plan: mla_decode LAYOUT=V32,HQ=128,TOPK=2048' "$tmp/plan" &&
            grep -q 'plan: moe_route ROUTER=V3,E=256,TOPK=8' "$tmp/plan"
        check $? "V3.2 $arch B=$b: every part runs its family ($(grep plain "$tmp/plan"))"
        grep '^plan: ' "$tmp/plan" | awk -v a=$arch '{print a, $2, $5}' >>"$tmp/variants"
    done
done
sort -u "$tmp/variants" >"$tmp/distinct"
echo "$(wc -l <"$tmp/distinct") distinct (arch, family, config) of $(wc -l <"$tmp/variants") problems"
while read -r arch family config; do
    out=$($KT compile --family "$family" --config "$config" --arch "$arch" 2>&1)
    rc=$?
    line=$(echo "$out" | grep -E "^[0-9a-f]{16} " | head -n 1)
    spill=$(echo "$line" | awk '{print $3}')
    [ $rc = 0 ] && [ "$spill" = 0 ]
    check $? "$family $config for $arch: rc $rc, spills '${spill}' $(echo "$out" | grep -i error | head -n 2)"
    echo "$arch $family $config: $(echo "$line" | awk '{print $2 " registers, " $3 " spill bytes"}')"
done <"$tmp/distinct"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
