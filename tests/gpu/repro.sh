#!/usr/bin/env bash
# repro.sh — whether `kt run`'s logits are the same run to run when runs share the GPU (seedkv.sh's warm part found
# position-0 dumps of one binary differing between side-by-side starts, while sequential runs matched byte for byte).
# Groups of 3 identical 4-layer V4-Flash --synthetic --tp-shapes 4 runs (context 8192, --steps 4, --dump) side by
# side, in settings that remove one suspect each: default; KT_STEP_ONE_STREAM=1 (no side chains: a missing edge
# between chains would show as a race); KT_STEP_GEMV_LT=0 (no cuBLASLt); B = 1, 16, 64; and V3.2 (4 layers, B = 2).
# Each group: ok when its 3 dumps are byte-identical, else FAIL with the first step that differs and the largest
# difference (rel L2 of that step's logits). One H200, <= 110 s (KT_REPRO_BUDGET); logs under $OUT/repro.
# Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.." || exit 2
L=${OUT:+$OUT/repro}
L=${L:-/tmp/kt-repro}
rm -rf "$L" && mkdir -p "$L"
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/kt-rt-cache}
MODELS=${KT_RT_MODELS:-/tmp/kt-rt-models}
KT=./bin/kt PY=${PYTHON:-python3} F=$MODELS/flash F32=$MODELS/v32flash X=/tmp/kt-repro-dumps
rm -rf "$X" && mkdir -p "$X"
BUDGET=${KT_REPRO_BUDGET:-110}
T0=$SECONDS
source tests/gpu/budget.sh # check, say, lim
[ -s "$F/config.json" ] || timeout 30 $PY tests/gpu/runtime_ref.py flash "$F" >"$L/flash_make.log" 2>&1
[ -s "$F32/config.json" ] || timeout 30 $PY tests/gpu/runtime_ref.py flash "$F32" --arch v32 >"$L/v32_make.log" 2>&1

# group NAME ENV MODEL ARGS...: 3 identical runs side by side (ENV: VAR=VALUE words, or -), their dumps compared
group() {
    local n=$1 envs=$2 model=$3 t i pids=""
    shift 3
    t=$(lim 40)
    [ "$t" -gt 0 ] || { say "skip $n"; return; }
    [ "$envs" = - ] && envs=""
    for i in 1 2 3; do
        env $envs timeout "$t" "$KT" run --model "$model" --synthetic --steps 4 --dump "$X/${n}_$i.bin" "$@" \
            >"$L/${n}_$i.log" 2>"$L/${n}_$i.err" &
        pids="$pids $!"
    done
    for i in $pids; do wait "$i"; done
    $PY - "$X" "$n" "$@" >"$L/$n.cmp" 2>&1 <<'EOF'
import sys, numpy as np
X, n = sys.argv[1:3]
runs = [np.fromfile(f"{X}/{n}_{i}.bin", dtype=np.float32) for i in (1, 2, 3)]
if any(r.size == 0 or r.size != runs[0].size for r in runs):
    print(f"sizes {[r.size for r in runs]}"); sys.exit(2)
steps = 4
msg, rc = [], 0
for i in (1, 2):
    a, b = runs[0].reshape(steps, -1), runs[i].reshape(steps, -1)
    bad = [s for s in range(steps) if not np.array_equal(a[s], b[s])]
    if bad:
        rc = 1
        d = max(np.linalg.norm(a[s] - b[s]) / max(np.linalg.norm(a[s]), 1e-30) for s in bad)
        msg.append(f"run {i + 1} differs from run 1 at steps {bad} (max rel L2 {d:.2e})")
print("; ".join(msg) if msg else "3 runs byte-identical over 4 steps")
sys.exit(rc)
EOF
    check $? "$n ($envs${envs:+, }$*): $(cat "$L/$n.cmp")"
}

FL="--tp-shapes 4 --layers 4 --context 8192"
group b16 - "$F" $FL --batch 16
group b16_one KT_STEP_ONE_STREAM=1 "$F" $FL --batch 16
group b16_nolt KT_STEP_GEMV_LT=0 "$F" $FL --batch 16
group b1 - "$F" $FL --batch 1
group b1_one KT_STEP_ONE_STREAM=1 "$F" $FL --batch 1
group b64 - "$F" $FL --batch 64
group b64_one KT_STEP_ONE_STREAM=1 "$F" $FL --batch 64
group v32 - "$F32" --layers 4 --context 4096 --batch 2
group v32_one KT_STEP_ONE_STREAM=1 "$F32" --layers 4 --context 4096 --batch 2
say "done"
tar czf "${OUT:-/tmp}/repro_logs.tgz" -C "$L" . 2>/dev/null
rm -rf "$X"
echo "$passed passed, $failed failed"
