#!/usr/bin/env bash
# moe64.sh — moe_gemm under the synthetic step's routing (bench/NOTES.md, twenty-sixth session moe64). DIST=gate draws
# the routing of kt run --synthetic's seeded gate (kernels/moe_gemm.h: ~58 of 256 experts at M = 16, ~103 at M = 64,
# the busiest ~13 slots there), where the tuner's uniform routing touches ~81 / ~200. One H200, <= 118 s
# (KT_MOE64_BUDGET; a part that would start past it is skipped), every run under its own timeout; from the tree's
# root with bin/kt built here. JIT cache: $KT_CACHE_DIR or speed.sh's /tmp/kt-rt-cache (warm after speed.sh or
# seedkv.sh: the step's kernels then need no compile). Parts, in order:
#   plan   kt run --plan sm_90 at B = 16 and 64: the moe_gemm configs the step runs (DIST=uniform: the family
#          defaults), the same at both;
#   sweep  kt tune --strategy exhaustive over a listed set (--where parts, ';'-separated) of FP8 gate+up (N 1024, K
#          4096) and down (N 4096, K 512) configs at M 16 and 64, DIST=gate, into $L/moe64.db: the step's configs
#          and 7 others a stage (tile rows, warps, ring, split-K, 16-slot tiles); each verified against the float64
#          reference before it is timed (a failing one is recorded, never a winner). Checks: every config measured
#          and ok. Prints per (stage, M) each config's us, the best against the step's config;
#   step   V4-Flash synthetic --tp-shapes 4, 43 layers, 8K, --steps 1, B = 64 and 16 as the step runs. Checks: each
#          ran; the step's routed layers' occupancy (kt run --json's moe_occupancy) within the gate model's range
#          (what DIST=gate claims). Prints the TPOTs and moe_gemm's eager ms.
# Logs under $OUT/moe64 (or /tmp/kt-moe64), packed into $OUT/moe64_logs.tgz. Ends with "N passed, N failed".
#   usage: OUT=dir bash tests/gpu/moe64.sh
set -u
cd "$(dirname "$0")/../.." || exit 2
L=${OUT:+$OUT/moe64}
L=${L:-/tmp/kt-moe64}
rm -rf "$L" && mkdir -p "$L"
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/kt-rt-cache}
export LD_LIBRARY_PATH=$PWD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
MODELS=${KT_RT_MODELS:-/tmp/kt-rt-models}
KT=./bin/kt PY=${PYTHON:-python3} F=$MODELS/flash
BUDGET=${KT_MOE64_BUDGET:-118}
T0=$SECONDS
source tests/gpu/budget.sh # check, say, lim

V4="E=256,TOPK=6,DIST=gate"
GU="FORMAT=fp8,STAGE=gateup,N=1024,K=4096,$V4" DN="FORMAT=fp8,STAGE=down,N=4096,K=512,$V4"
REST="NATIVE=0,WIDE=1,BF16=0,GATHER=0,EARLY=0,CLUSTER=0"
# the others a stage: gate+up 16-slot tiles at the step's other params (the ring cut to 3: 4 needs ~276 registers)
# and as 4 warps of one fragment, one fragment a warp at 8, split-K 2 (more, shorter CTAs over fewer experts), 128 and
# 32 rows a CTA, 4 warp groups along K; down 16-slot tiles at the step's other params, 128 and 32 rows at 8 and 16
# slots, one fragment a warp, a ring of 2
GU_LIST="TM=16,TN=64,WARPS_N=2,WARPS_K=2,STAGES=3,SPLIT=1 TM=16,TN=64,WARPS_N=4,WARPS_K=2,STAGES=4,SPLIT=1
TM=8,TN=64,WARPS_N=4,WARPS_K=2,STAGES=4,SPLIT=1 TM=8,TN=64,WARPS_N=2,WARPS_K=2,STAGES=4,SPLIT=2
TM=8,TN=128,WARPS_N=4,WARPS_K=2,STAGES=4,SPLIT=1 TM=8,TN=32,WARPS_N=2,WARPS_K=2,STAGES=4,SPLIT=1
TM=8,TN=64,WARPS_N=2,WARPS_K=4,STAGES=4,SPLIT=1"
DN_LIST="TM=16,TN=64,WARPS_N=2,WARPS_K=1,STAGES=1,SPLIT=1
TM=8,TN=128,WARPS_N=4,WARPS_K=1,STAGES=1,SPLIT=1 TM=16,TN=128,WARPS_N=4,WARPS_K=1,STAGES=1,SPLIT=1
TM=8,TN=32,WARPS_N=2,WARPS_K=1,STAGES=1,SPLIT=1 TM=16,TN=32,WARPS_N=2,WARPS_K=1,STAGES=1,SPLIT=1
TM=8,TN=64,WARPS_N=4,WARPS_K=1,STAGES=1,SPLIT=1 TM=8,TN=64,WARPS_N=2,WARPS_K=1,STAGES=2,SPLIT=1"

[ -s "$F/config.json" ] || timeout 30 $PY tests/gpu/runtime_ref.py flash "$F" >"$L/flash_make.log" 2>&1
[ -s "$F/config.json" ] || check 1 "V4-Flash model folder: $(tail -n 1 "$L/flash_make.log" 2>/dev/null)"

# plan_cfg NAME STAGE: the moe_gemm config plan NAME's log lists for STAGE
plan_cfg() { sed -n "s/^plan: moe_gemm FORMAT=fp8,STAGE=$2,.* B=[0-9]* //p" "$L/plan_$1.log" | head -n 1; }

part_plan() {
    local b
    for b in 16 64; do
        timeout 20 $KT run --model "$F" --synthetic --tp-shapes 4 --batch $b --context 8192 --plan sm_90 \
            >"$L/plan_b$b.log" 2>&1
    done
    NOW_GU=$(plan_cfg b64 gateup) NOW_DN=$(plan_cfg b64 down)
    [ -n "$NOW_GU" ] && [ -n "$NOW_DN" ] && [ "$(plan_cfg b16 gateup)" = "$NOW_GU" ] &&
        [ "$(plan_cfg b16 down)" = "$NOW_DN" ]
    check $? "plan: the step's moe_gemm configs the same at B 16 and 64 (gate+up $NOW_GU; down $NOW_DN)"
}

# tune NAME SHAPE CONFIGS...: the listed configs (each a --where part naming every param) at M 16, 64 into moe64.db
tune() {
    local n=$1 shape=$2 where="" c t
    shift 2
    for c in "$@"; do
        case ";$where;" in *";$c;"*) ;; *) where="$where${where:+;}$c" ;; esac
    done
    t=$(lim 50)
    [ "$t" -gt 0 ] || { check 1 "sweep $n: skipped, $((SECONDS - T0)) s spent"; return; }
    timeout "$t" $KT tune --family moe_gemm --shape "$shape" --m 16,64 --strategy exhaustive --where "$where" \
        --db "$L/moe64.db" >"$L/tune_$n.log" 2>&1
    check $? "sweep $n ($(echo "$where" | tr ';' '\n' | wc -l) configs x M 16, 64, DIST=gate): $(grep -h 'sweep done' "$L/tune_$n.log" | cut -c1-110)"
}

part_sweep() {
    local list=() c
    for c in $GU_LIST; do list+=("$c,$REST"); done
    # down's variants compile on the CPU while gate+up's are timed (the same JIT cache)
    local dn_where="$NOW_DN" pre
    for c in $DN_LIST; do dn_where="$dn_where;$c,$REST"; done
    timeout 60 $KT compile --family moe_gemm --arch sm_90 --where "$dn_where" >"$L/precompile_down.log" 2>&1 &
    pre=$!
    tune gateup "$GU" "$NOW_GU" "${list[@]}"
    wait $pre
    list=()
    for c in $DN_LIST; do list+=("$c,$REST"); done
    tune down "$DN" "$NOW_DN" "${list[@]}"
    $KT db export --format json --db "$L/moe64.db" >"$L/sweep.json" 2>"$L/export.err"
    $PY - "$L/sweep.json" "$NOW_GU" "$NOW_DN" "$(echo "$GU_LIST" | wc -w)" "$(echo "$DN_LIST" | wc -w)" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))
now = {"gateup": sys.argv[2], "down": sys.argv[3]}
others = {"gateup": int(sys.argv[4]), "down": int(sys.argv[5])}
short = lambda c: ",".join(p for p in c.split(",") if p.split("=")[0] in ("TM", "TN", "WARPS_N", "WARPS_K", "STAGES", "SPLIT"))
bad = 0
for stage in ("gateup", "down"):
    want = 1 + others[stage]  # the lists hold none of the step's configs
    for m in (16, 64):
        got = [r for r in rows if f"STAGE={stage}," in r["shape"] and r["m"] == m]
        ok = [r for r in got if r["status"] == "ok" and r["median_us"] is not None]
        byc = {r["config"]: r for r in ok}
        bad += len(ok) != want or len(got) != want
        print(f"sweep {stage} M={m}: {len(ok)} of {want} configs verified and timed" +
              "".join(f"; {r['config']}: {r['status']} {r['error']}" for r in got if r["status"] != "ok"))
        for r in sorted(ok, key=lambda r: r["median_us"]):
            tag = " <- the step's" if r["config"] == now[stage] else ""
            print(f"  {r['median_us']:8.2f} us  {r['registers']:3d} regs  {short(r['config'])}{tag}")
        if ok and now[stage] in byc:
            best, cur = min(ok, key=lambda r: r["median_us"]), byc[now[stage]]
            print(f"  best {short(best['config'])} {best['median_us']:.2f} us against the step's "
                  f"{cur['median_us']:.2f} ({100 * (best['median_us'] / cur['median_us'] - 1):+.1f}%)")
sys.exit(1 if bad else 0)
EOF
    check $? "sweep: every listed config verified (float64 reference) and timed at M 16 and 64, each stage"
}

# run NAME BATCH: one 43-layer V4-Flash step as it runs (no DB) into $L/NAME.{log,err,json}
run() {
    local n=$1 b=$2 t
    t=$(lim 45)
    [ "$t" -gt 0 ] || { say "skip $n: $((SECONDS - T0)) s spent"; return 1; }
    timeout "$t" $KT run --model "$F" --synthetic --tp-shapes 4 --batch "$b" --context 8192 --steps 1 \
        --json "$L/$n.json" >"$L/$n.log" 2>"$L/$n.err"
}

# occupancy NAME LO HI: the step's routed layers' touched experts within [LO, HI] (the gate model's range); prints
# them, the hash-routed layers', the TPOT and moe_gemm's eager ms
occupancy() {
    $PY - "$L/$1.json" "$2" "$3" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
r, h = d["moe_occupancy"]["routed"], d["moe_occupancy"]["hash"]
lo, hi = float(sys.argv[2]), float(sys.argv[3])
print(f"B={d['batch']}: routed layers ({r['layers']}) {r['touched']:.1f} experts, busiest {r['busiest']:.1f} slots, "
      f"{r['tiles8']:.1f} tiles of 8; hash-routed ({h['layers']}) {h['touched']:.1f} / {h['busiest']:.1f} / "
      f"{h['tiles8']:.1f}; all {d['experts_touched']:.1f} (the gate model: {lo:.0f}-{hi:.0f}); TPOT "
      f"{d['tpot_ms']:.3f} ms, moe_gemm eager {d['per_op_ms'].get('moe_gemm', 0):.3f} ms")
sys.exit(0 if lo <= r["touched"] <= hi else 1)
EOF
}

part_step() {
    local b rc lo hi
    for b in 64 16; do
        run step$b $b
        rc=$?
        check $rc "step B=$b ran: $(grep -h -o 'TPOT [0-9.]* ms' "$L/step$b.log")$( [ $rc = 0 ] || tail -n 1 "$L/step$b.err")"
        [ $rc = 0 ] || continue
        if [ $b = 64 ]; then lo=95 hi=110; else lo=53 hi=63; fi
        occupancy step$b $lo $hi >"$L/occ$b.txt"
        check $? "step B=$b occupancy like DIST=gate's: $(cat "$L/occ$b.txt")"
    done
}

part_plan
say "plan done"
part_sweep
say "sweep done"
part_step
say "step done"
[ -z "${OUT:-}" ] || { tar czf "$OUT/moe64_logs.tgz" -C "$L" . && rm -rf "$L"; }
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
