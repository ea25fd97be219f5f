#!/usr/bin/env bash
# runtime.sh — the GPU test of the bundled runtime (`kt run`) on both of its paths: the kt
# families (the default: mla_indexer, mla_decode, moe_route + moe_gemm beside the FP8 GEMMs) and
# the simple reference kernels (`--plain-kernels`). For a tiny random DeepseekV4 saved with
# save_pretrained (16 heads, 64 indexer heads: shapes the families take; "smooth": 2 of 2
# experts and every compressed entry kept, so no top-k choice can flip and the MoE stays plain;
# "routed": top-2 of 32 experts, the indexer's top 4, every part a family), kt run decodes B=2
# sequences (40-token prompt, 8 greedy steps) with the families; --plain-kernels and the float64
# host reference (exact and in kt's formats) run teacher-forced on the same tokens; transformers
# runs on them in fp32 and with kt's formats emulated; every pair of logits is compared and the
# greedy tokens checked. Then TPOT: V4-Flash's config, synthetic weights, --tp-shapes 4, all 43
# layers, B = 1 and 64 at context 8192, both paths, and a warm start of the first (its kernel
# part of start-up under 1 s). Each part under a hard `timeout`; about
# 150-190 s on an H200 with a cold JIT cache. Logs, dumps and JSON under $LOGS ($OUT/runtime when
# OUT is set). Ends with "N passed, N failed".
#   usage: tests/gpu/runtime.sh [correct|speed|all]
set -u
cd "$(dirname "$0")/../.."
LOGS=${LOGS:-${OUT:+$OUT/runtime}}
LOGS=${LOGS:-/tmp/kt-rt}
MODELS=${KT_RT_MODELS:-/tmp/kt-rt-models} # the tiny models' weights stay out of $OUT
rm -rf "$LOGS" "$MODELS" && mkdir -p "$LOGS" "$MODELS"
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/kt-rt-cache}
KT=${KT:-./bin/kt} PY=${PYTHON:-python3} MODE=${1:-all} # KT: a planted build (tests/gpu/comp_plant.sh)
T_RUN=${KT_RT_TIMEOUT:-90} # one kt run (start-up compiles included)
passed=0 failed=0
check() { if [ "$1" = 0 ]; then passed=$((passed + 1)); echo "ok   $2"; else failed=$((failed + 1)); echo "FAIL $2"; fi; }
# The tokens kt fed at each step ("step t: a->b* c->d*" lines), one line per sequence: the
# teacher-forced prompt of the runs that follow (runtime_ref.py fed does the same, in Python).
fed() { awk '/^step /{for (i = 3; i <= NF; i++) {split($i, a, "->"); row[i - 3] = row[i - 3] " " a[1]}; n = NF - 2}
            END {for (b = 0; b < n; b++) print substr(row[b], 2)}' "$1"; }
# The whole script stays within KT_RT_BUDGET seconds: a part that would start past it is skipped (a FAIL).
BUDGET=${KT_RT_BUDGET:-190}
in_budget() { [ $SECONDS -lt $((BUDGET - ${2:-15})) ] && return 0; check 1 "$1: skipped, $SECONDS s of the ${BUDGET} s budget spent"; return 1; }

if [ "$MODE" != speed ]; then
    # limits on the median per-step relative L2 of the logits (why). A quantised model is a
    # discontinuous function: on the routed model a 1e-6 relative change of every GEMM output of
    # the float64 reference moved its kt-format logits by 0.095 (median; FP8 codes and top-k
    # choices flip), so two correct implementations of kt's formats differ by that much. The
    # families add roundings of their own (mla_decode's bf16 q and output, the indexer's e4m3 q
    # and keys, moe_gemm's bf16 output), hence their wider limit. The GPU against transformers'
    # fp32 must stay within what the formats explain (compare's budget check).
    limits='{"exact:hf_fp32": [0.001, "the host reference is the transformers math in double"],
             "plain:ktref": [0.1, "the same formats in float32 kernels; the flip noise floor is 0.095"],
             "gpu:ktref": [0.15, "the families: the flip floor plus their bf16/e4m3 roundings"],
             "gpu:plain": [0.15, "families vs plain kernels on the same tokens: both within the floor of ktref"]}'
    for cfg in ${KT_RT_CONFIGS:-smooth routed}; do
        in_budget "$cfg model" 60 || continue
        D=$MODELS/$cfg L=$LOGS/$cfg
        mkdir -p "$L"
        flag=$([ $cfg = smooth ] && echo --smooth)
        timeout 120 $PY tests/gpu/runtime_ref.py make "$D" $flag >"$L/make.log" 2>&1
        check $? "$cfg: transformers model saved"
        # the families' run generates the tokens; if it fails, the plain kernels' run does (and
        # is still checked against the references), so one GPU call says which path broke
        lead=gpu lim=$limits
        timeout $T_RUN $KT run --model "$D" --batch 2 --context 64 --steps 8 --prompt "$D/prompt.txt" --dump "$L/gpu.bin" \
            --json "$L/run.json" >"$L/gpu.log" 2>"$L/gpu.err"
        rc=$?; check $rc "$cfg: kt run (families) on the GPU"
        grep "^kt run: \(indexer\|attention\|moe\) " "$L/gpu.err"
        if [ $rc = 0 ]; then
            want=$([ $cfg = smooth ] && echo 2 || echo 3) # smooth's 2 experts keep its MoE plain
            [ "$(grep -c "^kt run: \(indexer\|attention\|moe\) *kt family" "$L/gpu.err")" = $want ]
            check $? "$cfg: $want parts ran their kt family (the startup log above)"
            fed "$L/gpu.log" >"$L/fed.txt"
            plain_args=(--steps 0 --prompt "$L/fed.txt")
        else
            tail -n 20 "$L/gpu.err"
            lead=plain lim=$(echo "$limits" | grep -v '"gpu:')
            lim="${lim%,}}" # the limits without the families' pairs
            plain_args=(--steps 8 --prompt "$D/prompt.txt")
        fi
        timeout $T_RUN $KT run --model "$D" --batch 2 --context 64 "${plain_args[@]}" --plain-kernels \
            --dump "$L/plain.bin" >"$L/plain.log" 2>"$L/plain.err"
        rc=$?; check $rc "$cfg: kt run --plain-kernels on the GPU ($([ $lead = gpu ] && echo "on the families' tokens" || echo "generating"))"
        [ $rc = 0 ] || { tail -n 10 "$L/plain.err"; [ $lead = gpu ] || continue; }
        [ $lead = plain ] && fed "$L/plain.log" >"$L/fed.txt"
        for r in kt exact; do
            timeout 60 $KT run --model "$D" --batch 2 --context 64 --steps 0 --prompt "$L/fed.txt" --reference $r \
                --dump "$L/$r.bin" >"$L/$r.log" 2>&1
            check $? "$cfg: host reference ($r) on kt's tokens"
        done
        dumps=(--dump plain="$L/plain.bin" --dump ktref="$L/kt.bin" --dump exact="$L/exact.bin")
        [ $lead = gpu ] && dumps+=(--dump gpu="$L/gpu.bin")
        [ -s "$L/plain.bin" ] || { dumps=("${dumps[@]:2}"); lim=$(echo "$lim" | grep -v '"\(plain\|gpu:plain\)'); lim="${lim%,}}"; }
        timeout 150 $PY tests/gpu/runtime_ref.py compare "$D" --kt-log "$L/$lead.log" "${dumps[@]}" --limits "$lim" \
            --require-greedy >"$L/compare.log" 2>&1
        check $? "$cfg: logits ($lead generating) and greedy tokens against transformers and the host reference"
        grep -v "^Loading\|Writing" "$L/compare.log" | tail -n 30
        if [ $cfg = smooth ]; then # the tensor-parallel path at world size 1: same logits, bit for bit
            export KT_NCCL=${KT_NCCL:-$($PY -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib', 'libnccl.so.2'))" 2>/dev/null)}
            timeout $T_RUN $KT run --model "$D" --batch 2 --context 64 --steps 8 --prompt "$D/prompt.txt" --dump "$L/tp1.bin" --tp 1 \
                >"$L/tp1.log" 2>"$L/tp1.err" && cmp -s "$L/gpu.bin" "$L/tp1.bin"
            rc=$?; check $rc "$cfg: --tp 1 (NCCL all-reduces in the graph) gives the same logits"
            [ $rc = 0 ] || tail -n 3 "$L/tp1.err"
        fi
    done
fi

if [ "$MODE" != correct ]; then
    F=$MODELS/flash
    timeout 60 $PY tests/gpu/runtime_ref.py flash "$F" >/dev/null 2>&1
    for ctx in ${KT_RT_CONTEXTS:-8192}; do
        for b in ${KT_RT_BATCHES:-1 64}; do
            for path in family plain; do
                n=flash_${path}_b${b}_c${ctx} opt=$([ $path = plain ] && echo --plain-kernels)
                in_budget "V4-Flash B=$b, context $ctx, $path kernels" || continue
                timeout $T_RUN $KT run --model "$F" --synthetic --tp-shapes 4 --batch $b --context $ctx --steps 1 $opt \
                    --json "$LOGS/$n.json" >"$LOGS/$n.log" 2>"$LOGS/$n.err"
                rc=$?; check $rc "V4-Flash synthetic --tp-shapes 4, B=$b, context $ctx, $path kernels"
                grep "TPOT\|tuned\|kernel part\|weights on\|resolved\|^kt run: \(indexer\|attention\|moe\) " "$LOGS/$n.log" "$LOGS/$n.err" | head -9
                [ $rc = 0 ] || tail -n 5 "$LOGS/$n.err"
            done
            fj=$LOGS/flash_family_b${b}_c${ctx}.json pj=$LOGS/flash_plain_b${b}_c${ctx}.json
            [ -s "$fj" ] && [ -s "$pj" ] && $PY - "$fj" "$pj" <<'EOF'
import json, sys
f, p = (json.load(open(x)) for x in sys.argv[1:3])
print(f"B={f['batch']} context {f['context']}: families {f['tpot_ms']:.2f} ms vs plain kernels {p['tpot_ms']:.2f} ms "
      f"({p['tpot_ms'] / f['tpot_ms']:.1f}x); floor {f['floor_ms']:.2f} ms, families {f['floor_ratio']:.2f}x the floor; "
      f"kernel part of start-up {f['kernel_start_ms']:.0f} ms")
for name, d in (("families", f), ("plain", p)):
    top = sorted(d["per_op_ms"].items(), key=lambda kv: -kv[1])[:8]
    print(f"  {name:8s} " + ", ".join(f"{k} {v:.2f}" for k, v in top))
sys.exit(0 if f["tpot_ms"] < p["tpot_ms"] else 1)
EOF
            check $? "B=$b context $ctx: the families' TPOT below the plain kernels'"
        done
    done
    # a warm start: the first family run's kernels are all in the JIT cache now
    n=flash_family_warm
    if in_budget "V4-Flash warm start"; then
        b=$(echo ${KT_RT_BATCHES:-1 64} | cut -d' ' -f1) ctx=$(echo ${KT_RT_CONTEXTS:-8192} | cut -d' ' -f1)
        timeout $T_RUN $KT run --model "$F" --synthetic --tp-shapes 4 --batch $b --context $ctx --steps 1 \
            --json "$LOGS/$n.json" >"$LOGS/$n.log" 2>"$LOGS/$n.err" &&
            $PY -c "import json, sys; ms = json.load(open('$LOGS/$n.json'))['kernel_start_ms']; print(f'warm start, kernel part: {ms:.0f} ms'); sys.exit(ms >= 1000)"
        check $? "V4-Flash B=$b warm start: the kernel part of start-up under 1 s"
        grep "kernel part\|compiled ahead" "$LOGS/$n.err"
    fi
fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
