#!/usr/bin/env bash
# cuobjdump.sh — prints the path of a cuobjdump: $KT_CUOBJDUMP, the one on PATH, the CUDA
# toolkit's, or the one the PyPI package nvidia-cuda-cuobjdump installs (.ci/run installs it
# where none is found); exits 1 if there is none. The CPU tests read kernels' SASS with it.
set -u
for c in "${KT_CUOBJDUMP:-}" "$(command -v cuobjdump 2>/dev/null)" /usr/local/cuda/bin/cuobjdump; do
    [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; exit 0; }
done
for py in python3 python; do
    command -v "$py" >/dev/null || continue
    dirs=$("$py" -c 'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null)
    for d in $dirs; do
        for c in "$d"/nvidia/cu*/bin/cuobjdump; do [ -x "$c" ] && { echo "$c"; exit 0; }; done
    done
done
exit 1
