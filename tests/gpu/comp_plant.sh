#!/usr/bin/env bash
# comp_plant.sh — the planted build that must fail tests/gpu/runtime.sh correct: bin/kt_plant_comp, this tree's kt with
# rt_comp_fold's slot-0 restart cut (runtime/model.cu: a window's running softmax carries on from the previous window's
# state, so every compressed entry after the first mixes in earlier windows' tokens).
#   usage: bash tests/gpu/comp_plant.sh (after make); then on the GPU: KT=./bin/kt_plant_comp bash tests/gpu/runtime.sh correct
exec bash "$(dirname "$0")/plant.sh" kt_plant_comp runtime/model.cu \
    'rt_comp_acc A = slot ? rt_comp_acc{st[a0], st[N + a0], st[2 * N + a0]} : none;' \
    'rt_comp_acc A = rt_comp_acc{st[a0], st[N + a0], st[2 * N + a0]};' "rt_comp_fold's slot-0 restart cut"
