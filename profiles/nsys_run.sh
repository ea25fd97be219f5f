#!/usr/bin/env bash
# nsys_run.sh — an Nsight Systems timeline of one kt command (kt run, bench, tune, profile):
# CUDA API calls, kernels (CUDA-graph nodes one by one), kt's NVTX ranges
# (kt/<family>/<key>/<leaf>, profiles/README.md) and OS runtime calls into OUT.nsys-rep, then
# the time per NVTX range and per kernel as OUT_nvtx_sum.csv and OUT_cuda_gpu_kern_sum.csv.
#   usage: profiles/nsys_run.sh OUT COMMAND [ARGS...]    e.g. profiles/nsys_run.sh run1 bin/kt run ...
#   KT_NSYS: the nsys to use (default: nsys on PATH)
set -u
if [ $# -lt 2 ]; then
    echo "usage: profiles/nsys_run.sh OUT COMMAND [ARGS...]" >&2
    exit 2
fi
out=$1
shift
nsys=${KT_NSYS:-nsys}
if ! command -v "$nsys" >/dev/null; then
    echo "nsys_run.sh: '$nsys' not found: install Nsight Systems or set KT_NSYS" >&2
    exit 127
fi
"$nsys" profile --trace=cuda,nvtx,osrt --cuda-graph-trace=node --sample=none --cpuctxsw=none \
    --force-overwrite=true --output="$out" "$@" || exit
"$nsys" stats --report nvtx_sum,cuda_gpu_kern_sum --format csv --force-export=true --output="$out" "$out.nsys-rep"
