#!/usr/bin/env bash
# ncu_variant.sh — profiles one kt variant with Nsight Compute (hardware counters, clocks
# left alone): the first checked launch of the kernel on fresh random inputs.
#   usage: profiles/ncu_variant.sh FAMILY SHAPE M CONFIG [extra ncu args...]
#   e.g.   profiles/ncu_variant.sh fp8_gemm N=1536,K=4096 256 TILE_N=128,TILE_M=64
set -eu
family=$1 shape=$2 m=$3 config=$4
shift 4
cd "$(dirname "$0")/.."
exec ncu --clock-control none -k "$family" -c 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats "$@" \
    ./bin/kt verify --family "$family" --shape "$shape" --m "$m" --config "$config"
