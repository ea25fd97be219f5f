#!/usr/bin/env bash
# rt25.sh — the twenty-fourth session's rt25 GPU call (bench/NOTES.md, twenty-fourth session, rt25): the HC module
# over rt_gemv_hc1's blocks in one grid barrier at B = 1 (KT_STEP_HC_GRAM=1: rt_gemv_hc1_gram, h's rms from the
# blocks' Gram matrices), through tests/gpu/rtb1.sh's parts with a private JIT cache and a 115 s budget
# (KT_RTB1_BUDGET), the lever on for the whole script but where a part sets it. Parts: warm; tiny (the routed tiny
# V4 against main's build: B = 2 byte-identical, B = 1 within 1e-4 and the same argmax, with side chains and on one
# stream); b1 (V4-Flash --tp-shapes 4 8K B = 1 against main's kt $KT_MAIN in the same call: TPOT under main's,
# logits within 0.15); levers (this build at B = 1 off, on, off, on: TPOT twice each against the first, off
# byte-identical to main's, on within 0.15); b64 (main's path: byte-identical to main's, within 2% of its TPOT);
# tinyoff (the tiny V4 at B = 1 with the lever off: byte-identical to main's); plantgram (bin/kt_plant_gram, made
# by `bash tests/gpu/rt25_plant.sh` on the CPU side first: must fail the tiny B = 1 check); short (2 layers within
# 1e-2, the same argmax); one (the graph on one stream byte-identical to part b1's: no race). Parts past the
# budget are skipped (FAILs); RT25_PARTS picks parts. Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.." || exit 2
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/kt-rt25-cache} KT_RTB1_BUDGET=${KT_RTB1_BUDGET:-115}
export KT_STEP_HC_GRAM=1 KT_RTB1_OFF=KT_STEP_HC_GRAM=0
export KT_RTB1_LEVERS=${KT_RTB1_LEVERS:-"off:KT_STEP_HC_GRAM=0:exact gram:KT_STEP_HC_GRAM=1:close \
off2:KT_STEP_HC_GRAM=0:exact gram2:KT_STEP_HC_GRAM=1:close"}
env | grep '^KT_STEP_\|^KT_RTB1_' | sort
# shellcheck disable=SC2086 # the parts, one word each
exec bash tests/gpu/rtb1.sh ${RT25_PARTS:-warm tiny b1 levers b64 tinyoff plantgram short one}
