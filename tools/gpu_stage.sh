#!/usr/bin/env bash
# gpu_stage.sh NAME=DIR ... — for one device call over several trees (worktrees of parallel work):
# packs each tree (tracked + untracked-not-ignored files, and its built bin/ and lib/) as NAME/ into
# .gpu/stage.tgz, which tools/gpu_ckpt.sh unpacks and runs on the GPU machine (carry bin lib .gpu).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)/.gpu; mkdir -p "$here"
tmp=$(mktemp -d)
for spec in "$@"; do
  name=${spec%%=*}; dir=${spec#*=}
  mkdir -p "$tmp/$name"
  (cd "$dir" && { git ls-files -co --exclude-standard; find bin lib -type f 2>/dev/null; } | sort -u | while read -r f; do [ -f "$f" ] && echo "$f"; done | tar cf - -T -) | tar xf - -C "$tmp/$name"
  echo "staged $name from $dir ($(cd "$dir" && git log --oneline -1 | cut -c1-60))"
done
tar czf "$here/stage.tgz" -C "$tmp" .
rm -rf "$tmp"
ls -la "$here/stage.tgz"
