#!/usr/bin/env bash
# demo.sh — the main job (`make demo`): sweep the five target shapes of fp8_gemm at the 18
# batch sizes of the reference tuners into kt.db (kt tune's default fast search), and the
# fused act_quant + GEMM (quant_fp8_gemm) and the MoE grouped GEMMs (moe_gemm) at the decode
# batch sizes, sparse MLA decode's target cases (mla_decode) and the lightning indexer's
# (mla_indexer), then bench the winners (kt_bench*.json) and judge the GEMMs against the
# targets; then the MoE router + alignment (moe_route) for V4 (top-6 of 256) and V3 (top-8 of
# 256) under uniform and Zipf routing at the decode batch sizes (kt_bench_moe_route.json), and
# the whole MoE step from the winners (moe_step, kt_bench_moe_step.json). Extra arguments go to
# `kt tune`.
# Without a GPU it runs the compile-only sweep for sm_120 instead, and says so.
set -eu
cd "$(dirname "$0")/.."
KT=./bin/kt
MS=${KT_DEMO_M:-1,2,4,8,16,24,32,48,64,96,128,256,512,1024,1536,2048,3072,4096}
if $KT devices >/dev/null 2>&1; then
    $KT devices
    $KT tune --family fp8_gemm --shape targets --m "$MS" --db "${KT_DB:-kt.db}" "$@"
    $KT tune --family quant_fp8_gemm --shape targets --m 1,16,64,256 --db "${KT_DB:-kt.db}" "$@"
    # sparse MLA decode: TARGETS.md's cases (V3.2 HQ 128 and 16, top-k 2048; V4 HQ 64 and 16,
    # top-k 512 + the window of 128), B 1 to 64
    $KT tune --family mla_decode --shape targets --m 1,8,64 --db "${KT_DB:-kt.db}" "$@"
    # MoE: V4-Flash TP4 per rank (E 256, top-6; gate+up N 1024 K 4096, down N 4096 K 512), FP8
    # and MXFP4, uniform and Zipf routing
    $KT tune --family moe_gemm --shape targets --m 1,16,64,256 --db "${KT_DB:-kt.db}" "$@"
    $KT bench --family fp8_gemm --shape targets --m 1,16,64,256 --db "${KT_DB:-kt.db}" --json kt_bench.json
    $KT bench --family mla_decode --shape targets --m 1,4,8,16,64 --db "${KT_DB:-kt.db}" --json kt_bench_mla.json
    $KT bench --family moe_gemm --shape targets --m 1,16,64,256 --db "${KT_DB:-kt.db}" --json kt_bench_moe.json
    # the verdict on TARGETS.md's GEMM targets: a report, so a missed target does not fail the job
    bash tools/targets.sh kt_bench.json || true
    MOE_ROUTE="--shape ROUTER=V4,E=256,TOPK=6,TM=8,NTM=4,DIST=uniform --shape ROUTER=V4,E=256,TOPK=6,TM=8,NTM=4,DIST=zipf
        --shape ROUTER=V3,E=256,TOPK=8,TM=8,NTM=4,DIST=uniform --shape ROUTER=V3,E=256,TOPK=8,TM=8,NTM=4,DIST=zipf"
    # shellcheck disable=SC2086
    $KT tune --family moe_route $MOE_ROUTE --m 1,16,64,256 --db "${KT_DB:-kt.db}" "$@"
    # shellcheck disable=SC2086
    $KT bench --family moe_route $MOE_ROUTE --m 1,16,64,256 --db "${KT_DB:-kt.db}" --json kt_bench_moe_route.json
    # the whole MoE step (route, align, gate+up, down + shared) in one graph, from the DB's winners
    $KT bench --family moe_step --shape ROUTER=V4,FORMAT=fp8,E=256,HIDDEN=4096,INTER=512,DIST=uniform \
        --shape ROUTER=V4,FORMAT=fp8,E=256,HIDDEN=4096,INTER=512,DIST=zipf --m 1,16,64,256 --db "${KT_DB:-kt.db}" \
        --json kt_bench_moe_step.json
    # the lightning indexer: V3.2 (top-k 2048) and V4 (512) at 8K, 32K and 128K tokens, and a
    # ragged batch of the same sum as the equal one (total time linear in sum(L_b))
    $KT tune --family mla_indexer --shape targets --m 1,16,64 --db "${KT_DB:-kt.db}" "$@"
    $KT bench --family mla_indexer --shape targets --m 1,16,64 --db "${KT_DB:-kt.db}" --json kt_bench_indexer.json
else
    echo "kt demo: no NVIDIA GPU here, so this is the compile-only sweep for sm_120:"
    echo "every variant is NVRTC-compiled and ptxas-checked; timing and winners need a GPU."
    $KT compile --family fp8_gemm --arch sm_120 --sample "${KT_DEMO_SAMPLE:-48}"
    $KT compile --family quant_fp8_gemm --arch sm_120 --sample "${KT_DEMO_SAMPLE:-48}"
    $KT compile --family act_quant --arch sm_120 --sample "${KT_DEMO_SAMPLE_NEW:-8}"
    $KT compile --family mla_decode --arch sm_120 --sample "${KT_DEMO_SAMPLE_NEW:-8}"
    $KT compile --family moe_route --arch sm_120 --sample "${KT_DEMO_SAMPLE_NEW:-8}"
    $KT compile --family moe_gemm --arch sm_120 --sample "${KT_DEMO_SAMPLE_NEW:-8}"
    $KT compile --family moe_gemm --arch sm_120a --where NATIVE=1 --sample 8
    $KT compile --family mla_indexer --arch sm_120 --sample "${KT_DEMO_SAMPLE_NEW:-8}"
fi
