#!/usr/bin/env bash
# rt21.sh — the twenty-first session's GPU call for issue 23's B = 1 levers (bench/NOTES.md, twenty-first
# session, rt21), through tests/gpu/rtb1.sh's parts with a private JIT cache and a 90 s budget
# (KT_RTB1_BUDGET): every lever on (LEVERS_ON, exported, so parts b1 / b16 / b64 / tiny / short / one run them)
# against main's kt ($KT_MAIN) in the same call, then part levers: this build at B = 1 with every lever off
# (main's path: byte-identical to main's) and each one alone, the TPOT of each against the all-off run;
# B = 16 / 64 (rt_comp_emit_early at every B) byte-identical to main's and within 2% of its TPOT; the graph
# against one stream byte for byte; the planted KV-join build (bin/kt_plant_kv, tests/gpu/rtb1_plant.sh) failing
# the tiny check. Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.." || exit 2
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/kt-rt21-cache} KT_RTB1_BUDGET=${KT_RTB1_BUDGET:-90}
# a: gate_y's blocks; b: rt_comp_emit's window before its PDL wait; c: a CSA layer's indexer GEMV apart, the
# KV compressor after q_b (1) or after the indexer's GEMV (2)
OFF="KT_STEP_GATE_Y_BLOCKS=256,KT_STEP_COMP_EARLY=0,KT_STEP_CSA_SPLIT=0"
export ${LEVERS_ON:-KT_STEP_GATE_Y_BLOCKS=128 KT_STEP_COMP_EARLY=1 KT_STEP_CSA_SPLIT=1}
export KT_RTB1_LEVERS=${KT_RTB1_LEVERS:-"off:$OFF:exact b:${OFF/EARLY=0/EARLY=1}:exact c1:${OFF/SPLIT=0/SPLIT=1}:exact a128:${OFF/=256/=128}:close c2:${OFF/SPLIT=0/SPLIT=2}:exact a64:${OFF/=256/=64}:close"}
env | grep '^KT_STEP_\|^KT_RTB1_' | sort
exec bash tests/gpu/rtb1.sh ${RT21_PARTS:-warm tiny b1 levers b16 b64 one plantkv short plant ncu}
