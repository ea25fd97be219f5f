#!/usr/bin/env bash
# relb.sh — the GPU check of the all-reduce settings in the DB (schema 4; issue 24 prep) on one
# GPU: kt bench allreduce --db times every NCCL protocol/algorithm for two message sizes and
# stores the best per size bucket; kt db show lists them; kt run --tp 1 --db on a tiny synthetic
# model reads the setting of its own message size at start and logs the lookup. Each part under
# `timeout`; logs under $OUT/relb (or /tmp/kt-relb). About 2 minutes (7 NCCL child processes).
# Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
LOGS=${OUT:-/tmp/kt-relb}/relb
rm -rf "$LOGS" && mkdir -p "$LOGS"
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/kt-relb-cache} NCCL_NVLS_ENABLE=0
KT=./bin/kt PY=${PYTHON:-python3}
passed=0 failed=0
check() { if [ "$1" = 0 ]; then passed=$((passed + 1)); echo "PASS $2"; else failed=$((failed + 1)); echo "FAIL $2"; fi; }
# NCCL: the pip wheel's (as tests/gpu/runtime.sh), on the loader path for kt bench allreduce too
export KT_NCCL=${KT_NCCL:-$($PY -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib', 'libnccl.so.2'))" 2>/dev/null)}
[ -n "$KT_NCCL" ] && export LD_LIBRARY_PATH="$(dirname "$KT_NCCL")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# hidden 128 x B in {2, 64} bf16: 512 and 16384 bytes (the tiny model's B=2 message is 512)
timeout 300 $KT bench allreduce --gpus 1 --hidden 128 --batch 2,64 --db "$LOGS/ar.db" >"$LOGS/bench.log" 2>"$LOGS/bench.err"
rc=$?; check $rc "bench allreduce --db on 1 GPU"
[ $rc = 0 ] || tail -n 5 "$LOGS/bench.err"
cat "$LOGS/bench.log"
timeout 30 $KT db show --db "$LOGS/ar.db" >"$LOGS/show.log" 2>&1 &&
    grep -A4 "^all-reduce settings" "$LOGS/show.log" | tee "$LOGS/show.ar" | grep -q " 512 " && grep -q " 16384 " "$LOGS/show.ar"
check $? "db show lists the settings of buckets 512 and 16384"

mkdir -p "$LOGS/m"
cp tests/fixtures/tiny_v4/config.json "$LOGS/m/config.json" # one layer of each attention kind, hash layer first
timeout 300 $KT run --model "$LOGS/m" --synthetic --batch 2 --steps 2 --context 16 --tp 1 --db "$LOGS/ar.db" \
    >"$LOGS/run.log" 2>"$LOGS/run.err"
rc=$?; check $rc "kt run --tp 1 --db on a tiny synthetic model"
[ $rc = 0 ] || tail -n 5 "$LOGS/run.err"
grep "all-reduce" "$LOGS/run.err"
grep -q "kt: all-reduce 512 B x 1 GPUs -> .*(exact: bucket 512" "$LOGS/run.err"
check $? "kt run logs the exact lookup of its 512-byte all-reduce"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
