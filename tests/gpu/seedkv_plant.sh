#!/usr/bin/env bash
# seedkv_plant.sh — makes the planted build tests/gpu/seedkv.sh's check d runs, on this (CPU) machine:
# bin/kt_plant_seed, this tree's kt with KT_RUN_SEED_KV's fill cut to entry 0 of every cache (runtime/step.c's
# seed_cache launches rt_seed_kv on one entry a sequence, not n), so the history past entry 0 stays zeros and the
# indexer's top-k falls back to the ties of all-zero logits: seedkv.sh's selection check must fail on it. Built from a
# copy of the tree (its build/ kept, so only step.c rebuilds) under a temporary folder.
#   usage: bash tests/gpu/seedkv_plant.sh (after make)
set -eu
cd "$(dirname "$0")/../.."
T=$(mktemp -d /tmp/kt-plant.XXXXXX)
trap 'rm -rf "$T"' EXIT
f=runtime/step.c
want='kt_launch_kernel(&s->rt[K_SEED_KV], 0, (unsigned)n, '
n=$(grep -cF "$want" $f || true)
[ "$n" = 1 ] || { echo "seedkv_plant.sh: rt_seed_kv's launch is not in $f once ($n), where the plant goes" >&2; exit 1; }
cp -a . "$T/tree"
sed -i 's/kt_launch_kernel(&s->rt\[K_SEED_KV\], 0, (unsigned)n, /kt_launch_kernel(\&s->rt[K_SEED_KV], 0, 1u, /' "$T/tree/$f"
[ "$(grep -cF 'kt_launch_kernel(&s->rt[K_SEED_KV], 0, 1u, ' "$T/tree/$f")" = 1 ] ||
    { echo "seedkv_plant.sh: the plant did not take" >&2; exit 1; }
make -C "$T/tree" -j2 bin/kt >"$T/make.log" 2>&1 || { tail -n 20 "$T/make.log" >&2; exit 1; }
cp "$T/tree/bin/kt" bin/kt_plant_seed
echo "bin/kt_plant_seed: KT_RUN_SEED_KV's fill cut to entry 0 of every cache ($(diff "$f" "$T/tree/$f" | grep -c '^>') line changed)"
