#!/usr/bin/env bash
# rt21.sh — the twenty-first session's GPU call for issue 23's B = 1 levers (bench/NOTES.md, twenty-first
# session, rt21), through tests/gpu/rtb1.sh's parts with a private JIT cache and a 90 s budget
# (KT_RTB1_BUDGET): this build's defaults (gate_y in 128 blocks, a CSA layer's compressors split) against main's
# kt ($KT_MAIN) in the same call at B = 1, 16 and 64 (B > 1: main's path, byte-identical logits, within 2%), then
# part levers: this build at B = 1 with both levers off (main's path: byte-identical to main's) and with each
# alone, each TPOT against the all-off run; the graph against one stream byte for byte; 2 layers within 1e-2; the
# routed tiny V4. The planted builds (bin/kt_plant_kv: the CSA split's KV join lost; bin/kt_plant_pc), made by
# `bash tests/gpu/rtb1_plant.sh` on the CPU side first, run with RT21_PARTS="... plantkv plant". Ends with
# "N passed, N failed".
set -u
cd "$(dirname "$0")/../.." || exit 2
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/kt-rt21-cache} KT_RTB1_BUDGET=${KT_RTB1_BUDGET:-90}
# a: gate_y's blocks (128; main's 256); c: a CSA layer's indexer GEMV apart, its KV compressor after q_b (1; main's 0)
OFF="KT_STEP_GATE_Y_BLOCKS=256,KT_STEP_CSA_SPLIT=0"
export KT_RTB1_LEVERS=${KT_RTB1_LEVERS:-"off:$OFF:exact a:${OFF/=256/=128}:close c:${OFF/SPLIT=0/SPLIT=1}:exact"}
env | grep '^KT_STEP_\|^KT_RTB1_' | sort
exec bash tests/gpu/rtb1.sh ${RT21_PARTS:-warm tiny b1 levers b16 b64 one short ncu}
