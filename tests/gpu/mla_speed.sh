#!/usr/bin/env bash
# mla_speed.sh — issue 20's B = 64 levers at h_q 16 for mla_decode on the GPU, one call under 100 s
# (the eighteenth session's, mla18; bench/NOTES.md): q's A fragments in shared memory (QS=1: 80
# registers at WPM 8, three CTAs of 256 threads an SM where two ran) and splits that size the grid
# to the resident CTAs (SPLIT 96, 160, 192, 384).
# (a) kt verify on fresh seeds of QS=1 over the issue's cases (-1 slots, empty rows, SQ 2, sinks;
#     HPC 16 and 32, WPM 4 and 8, CHUNK 16 and 32, the combine and the direct write) and of the
#     defaults;
# (b) a planted bug kt verify must catch (.gpu/kt_plant_qs_mf from tests/gpu/mla_speed_prep.sh:
#     every m-fragment reads the first one's q from shared memory);
# (c) kt bench of this build's defaults (targets, B 1 and 64; on the H200 QS=1 at V4 and V3.2 HQ 16
#     B = 64), at B = 64 of main's defaults there and of other QS / SPLIT configs, and, where time is
#     left, main's build; ncu of V4 HQ 16 B = 64's default and main's; a table against the roof and
#     the conversion floor.
# Every part runs under a timeout that ends it before $KT_MLA_END_S (92) seconds; a part with no
# time left is a FAIL that says so. Logs under $OUT/mla; a PASS/FAIL line per check; "N passed,
# N failed" last.
#   usage: OUT=DIR tests/gpu/mla_speed.sh
set -u
cd "$(dirname "$0")/../.."
KT=${KT:-./bin/kt}
OLD=${KT_MAIN:-.gpu/kt_main}
LOGS=${OUT:-/tmp/kt-gpu}/mla
SEED=${KT_SEED:-$RANDOM}
END=${KT_MLA_END_S:-92}
source tests/gpu/step.sh # step NAME CMD...
echo "mla_speed.sh: seed $SEED, new $KT, old $OLD"
if [ -f .gpu/cache.tar.xz ] && [ -z "${KT_CACHE_DIR:-}" ]; then # this script's cubins, built ahead
    rm -rf /tmp/kt-mla-cache && mkdir -p /tmp/kt-mla-cache &&
        tar -xJf .gpu/cache.tar.xz -C /tmp/kt-mla-cache --strip-components 1 && export KT_CACHE_DIR=/tmp/kt-mla-cache
    echo "JIT cache: .gpu/cache.tar.xz ($(find /tmp/kt-mla-cache -type f | wc -l) files) at ${KT_CACHE_DIR:-none}"
fi
# t CAP CMD...: CMD under a timeout of CAP seconds, or of what is left before END if less
t() {
    local cap=$1 left=$((END - SECONDS))
    shift
    [ "$left" -ge 3 ] || { echo "no time left (${SECONDS}s of $END)"; return 1; }
    timeout $((cap < left ? cap : left)) "$@"
}
v() { t 20 "$KT" verify --family mla_decode --seed "$SEED" "$@"; }
V4_16=LAYOUT=V4,HQ=16,TOPK=512,SQ=1 V4_64=LAYOUT=V4,HQ=64,TOPK=512,SQ=1
V32_128=LAYOUT=V32,HQ=128,TOPK=2048,SQ=1 V32_16=LAYOUT=V32,HQ=16,TOPK=2048,SQ=1
# (a) pinned configs (the JIT cache in .gpu/cache.tar.xz, built for them, saves the compiles)
QS8=HPC=16,CHUNK=32,STAGES=2,PATH=2,WPM=8,MPW=1,FUSE=0,QS=1 # + SPLIT
step verify_qs_wpm8 v --config $QS8,SPLIT=128 --shape LAYOUT=V4,HQ=16,TOPK=512,SQ=2 \
    --shape LAYOUT=V32,HQ=16,TOPK=2048,SQ=2 --m 3,8,64,128
step verify_qs_s384 v --config $QS8,SPLIT=384 --shape $V32_16 --m 64,128 # V3.2 HQ 16 B = 64's default
step verify_qs_mf2 v --config HPC=32,CHUNK=16,SPLIT=2048,STAGES=2,PATH=2,WPM=4,MPW=1,FUSE=1,QS=1 --shape $V4_64 \
    --shape LAYOUT=V32,HQ=64,TOPK=100,SQ=2 --m 8,64
# (b) each planted bug must fail kt verify on a result
planted() {
    local bin=.gpu/kt_plant_$1
    shift
    [ -x "$bin" ] || { echo "no planted build $bin"; return 1; }
    t 20 "$bin" verify --family mla_decode --seed "$SEED" "$@" >"$LOGS/planted.out" 2>&1
    local rc=$?
    cat "$LOGS/planted.out"
    [ $rc -ne 0 ] || { echo "the planted bug passed"; return 1; }
    # a variant's own FAIL line (a wrong or unwritten output), not a setup error
    grep -qE '^FAIL .* M=[0-9]+ ' "$LOGS/planted.out" || { echo "verify failed, but not on a result"; return 1; }
    echo "verify failed on a result, as it must"
}
step planted_qs_mf planted qs_mf --config HPC=32,CHUNK=16,SPLIT=2048,STAGES=2,PATH=2,WPM=4,MPW=1,FUSE=1,QS=1 \
    --shape $V4_64 --m 8
# the defaults as dispatch serves them: a DB without mla_decode rows (kt bench needs one):
# .gpu/untuned_db (a fake GPU's act_quant row) or, without it, a one-config act_quant tune
rm -f "$LOGS/untuned.db"*
if [ -f .gpu/untuned_db ]; then
    cp .gpu/untuned_db "$LOGS/untuned.db"
else
    step untuned_db t 15 "$KT" tune --family act_quant --shape K=128 --m 1 --budget 1 --db "$LOGS/untuned.db"
fi
bench() { t 25 "$1" bench --family mla_decode --shape targets --m 1,64 --db "$LOGS/untuned.db" --json "$2"; }
step bench_new bench "$KT" "$LOGS/new.json"
grep -E "mma on e4m3|ceiling" "$LOGS/bench_new.log"
step verify_default v --shape $V4_16 --shape $V32_16 --m 1,64
# (c) B = 64 benches of the new configs, one case each (--config: no DB)
cfg() { t 12 "$KT" bench --family mla_decode --config "$2" --shape "$3" --m 64 --json "$LOGS/$1.json"; }
OLD4=HPC=16,CHUNK=32,SPLIT=128,STAGES=2,PATH=2,WPM=4,MPW=1,FUSE=0,QS=0 # main's V4 HQ 16 B = 64 default
step bench_v4_old cfg v4_old $OLD4 $V4_16
step bench_v4_qs8_s160 cfg v4_qs8_s160 $QS8,SPLIT=160 $V4_16
step bench_v4_w8_s160 cfg v4_w8_s160 HPC=16,CHUNK=32,SPLIT=160,STAGES=2,PATH=2,WPM=8,MPW=1,FUSE=0,QS=0 $V4_16
step bench_v4_qs4_c16 cfg v4_qs4_c16 HPC=16,CHUNK=16,SPLIT=96,STAGES=2,PATH=2,WPM=4,MPW=1,FUSE=0,QS=1 $V4_16
step bench_v32_old cfg v32_old HPC=16,CHUNK=32,SPLIT=512,STAGES=3,PATH=2,WPM=8,MPW=1,FUSE=0,QS=0 $V32_16
step bench_v32_qs8_s512 cfg v32_qs8_s512 $QS8,SPLIT=512 $V32_16
# ncu of one launch of the split and the combine kernel (V4 HQ 16 B = 64): the default (QS=1 SPLIT
# 128 on the H200), then main's (WPM 4, QS=0)
NCU=${KT_NCU:-ncu}
ncu1() {
    command -v "$NCU" >/dev/null || { echo "no ncu ($NCU)"; return 1; }
    t 22 "$NCU" --clock-control none -k 'regex:mla_(split|combine)' -c 2 --section SpeedOfLight --section Occupancy \
        --section LaunchStats --section WarpStateStats --section SchedulerStats --section InstructionStats \
        --metrics 'regex:smsp__average_warps?_issue_stalled_.*_per_issue_active\.ratio' \
        "$KT" profile --family mla_decode --shape $V4_16 --m 64 --iters 1 "$@"
}
step ncu_v4_default ncu1 --db "$LOGS/untuned.db"
NCUPAT="mla_split|mla_combine|block limit|shared memory config|duration|registers per|achieved occ|theoretical occ|issued warp|eligible warps|active warps|no eligible|executed ipc|dram thr|memory thr|issue_stalled|warp cycles per issued"
grep -iE "$NCUPAT" "$LOGS/ncu_v4_default.log" | grep -vE " 0(\.0+)?$" | head -60
[ $((END - SECONDS)) -ge 30 ] && step ncu_v4_old ncu1 --config $OLD4 &&
    grep -iE "$NCUPAT" "$LOGS/ncu_v4_old.log" | grep -vE " 0(\.0+)?$" | head -60
[ $((END - SECONDS)) -ge 28 ] && [ -x "$OLD" ] && step bench_old bench "$OLD" "$LOGS/old.json"
# The table: per case and run, us (x roof); the roof the issue's (bytes / copy rate, flops / 650
# TFLOP/s); cvt1 / cvt2 / cvtH: the code dims' flops at the converted-operand mma rate with a
# conversion per 1, 2 or HQ / 16 head groups (the rope dims' at the bf16 rate), the floor of a
# kernel on sm_90's mma.sync that converts every code that often.
table() {
    python3 - "$LOGS" <<'EOF'
import glob, json, os, sys
d = sys.argv[1]
runs = {}
for f in sorted(glob.glob(os.path.join(d, "*.json"))):
    rows = [r for r in json.load(open(f)) if r.get("status") == "ok"]
    runs[os.path.basename(f)[:-5]] = {(r["shape"], r["M"]): r for r in rows}
def hq(shape): return int(shape.split("HQ=")[1].split(",")[0])
def floors(r):
    bf16 = r.get("bf16_mma_flops_per_s") or r["mma_flops_per_s"]
    flops = r["mma_floor_us"] * 1e-6 * bf16
    v4 = "V4" in r["shape"]
    code = flops * (448 / 512 if v4 else 1024 / 1088)  # q . k and p . v over the e4m3 dims
    rope = flops - code
    roof = max(r["floor_us"], flops / 650e12 * 1e6)
    def cvt(key):
        rate = r.get(key)
        return (code / rate + rope / bf16) * 1e6 if rate else float("nan")
    share = {1: "cvt_mma_r1_flops_per_s", 2: "cvt_mma_r2_flops_per_s", 4: "cvt_mma_r4_flops_per_s",
             8: "cvt_mma_r8_flops_per_s"}
    return roof, cvt(share[1]), cvt(share[2]), cvt(share[min(8, hq(r["shape"]) // 16)])
print("| case | B | roof | cvt1 | cvt2 | cvtH | run: us (x roof) [config] |")
for k in sorted({k for rs in runs.values() for k in rs}):
    r0 = next(rs[k] for rs in sorted(runs.values(), key=lambda rs: "cvt_mma_r1_flops_per_s" not in next(iter(rs.values()))) if k in rs)
    roof, c1, c2, ch = floors(r0)
    cells = [f"{n}: {rs[k]['kt_us']:.2f} ({rs[k]['kt_us'] / roof:.1f}) [{rs[k]['config']}]" for n, rs in runs.items() if k in rs]
    print(f"| {k[0]} | {k[1]} | {roof:.2f} | {c1:.2f} | {c2:.2f} | {ch:.2f} | " + "; ".join(cells) + " |")
r = next(iter(runs["new"].values()), None) if runs.get("new") else None
if r:
    print("rates TFLOP/s: bf16 %.0f, cvt r1 %.0f r2 %.0f r4 %.0f r8 %.0f, cvt16 r1 %.0f" % tuple(
        (r.get(k) or float("nan")) / 1e12 for k in ("bf16_mma_flops_per_s", "cvt_mma_r1_flops_per_s",
        "cvt_mma_r2_flops_per_s", "cvt_mma_r4_flops_per_s", "cvt_mma_r8_flops_per_s", "cvt16_mma_r1_flops_per_s")))
EOF
}
step table table
cat "$LOGS/table.log"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
