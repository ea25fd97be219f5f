#!/usr/bin/env bash
# seedkv_plant.sh — the planted build tests/gpu/seedkv.sh's check d runs: bin/kt_plant_seed, this tree's kt with
# KT_RUN_SEED_KV's fill cut to entry 0 of every cache (runtime/step.c's seed_cache launches rt_seed_kv on one entry a
# sequence, not n), so the history past entry 0 stays zeros and the indexer's top-k falls back to the ties of all-zero
# logits: seedkv.sh's selection check must fail on it.
#   usage: bash tests/gpu/seedkv_plant.sh (after make)
exec bash "$(dirname "$0")/plant.sh" kt_plant_seed runtime/step.c \
    'kt_launch_kernel(&s->rt[K_SEED_KV], 0, (unsigned)n, ' 'kt_launch_kernel(&s->rt[K_SEED_KV], 0, 1u, ' \
    "KT_RUN_SEED_KV's fill cut to entry 0 of every cache"
