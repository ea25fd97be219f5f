#!/usr/bin/env bash
# gpu_ckpt.sh "NAME:CMD" ... — on the GPU machine: unpacks .gpu/stage.tgz (tools/gpu_stage.sh) to /tmp/w,
# runs each CMD from /tmp/w/NAME, one after another (timings do not share the GPU), with OUT=$OUT/NAME,
# KT_MAIN=/tmp/w/main/bin/kt and MAIN_TREE=/tmp/w/main set, under timeout CKPT_LIMIT (160 s); prints
# each log's tail and packs $OUT/NAME.tgz (the device returns at most 8 files).
set -u
cd "$(dirname "$0")/.."
rm -rf /tmp/w && mkdir -p /tmp/w && tar xzf .gpu/stage.tgz -C /tmp/w
export KT_MAIN=/tmp/w/main/bin/kt MAIN_TREE=/tmp/w/main
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
for spec in "$@"; do
  name=${spec%%:*}; cmd=${spec#*:}
  mkdir -p "$OUT/$name"
  t0=$SECONDS
  (cd "/tmp/w/$name" && export OUT="$OUT/$name" && timeout "${CKPT_LIMIT:-160}" bash -c "$cmd") >"$OUT/$name/log.txt" 2>&1
  rc=$?
  echo "=== $name rc=$rc $((SECONDS - t0))s"
  tail -n "${CKPT_TAIL:-40}" "$OUT/$name/log.txt"
  tar czf "$OUT/$name.tgz" -C "$OUT" "$name" && rm -rf "${OUT:?}/$name"
done
