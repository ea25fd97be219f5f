#!/usr/bin/env bash
# mla_speed.sh — issue 20's B = 64 lever at h_q 16 for mla_decode on the GPU, one call under 100 s
# (the eighteenth session's, mla18; bench/NOTES.md): where HPC 16's grid is three CTAs of 128
# threads an SM, two of 256 (WPM 8) with a split that leaves the busiest SM fewer slots (V4 HQ 16
# B = 64: SPLIT 160, 256 CTAs, for SPLIT 128's 320).
# (a) kt verify on fresh seeds of that config over the issue's cases (-1 slots, empty requests, a
#     query with no slot, SQ 2, sinks; B 3-128) and of the defaults;
# (b) kt bench of this build's defaults (targets, B 1 and 64) and, at B = 64, of main's V4 HQ 16
#     config (and V4 HQ 64 B = 16's), two STAGES variants; a table against the roof and the
#     conversion floor.
# Every part runs under a timeout that ends it before $KT_MLA_END_S (92) seconds; a part with no
# time left is a FAIL that says so. Logs under $OUT/mla; a PASS/FAIL line per check; "N passed,
# N failed" last.
#   usage: OUT=DIR tests/gpu/mla_speed.sh
set -u
cd "$(dirname "$0")/../.."
KT=${KT:-./bin/kt}
LOGS=${OUT:-/tmp/kt-gpu}/mla
SEED=${KT_SEED:-$RANDOM}
END=${KT_MLA_END_S:-92}
source tests/gpu/step.sh # step NAME CMD...
echo "mla_speed.sh: seed $SEED, $KT"
use_jit_cache .gpu/cache.tar.xz /tmp/kt-mla-cache # this script's cubins, built ahead
v() { within 20 "$KT" verify --family mla_decode --seed "$SEED" "$@"; }
V4_16=LAYOUT=V4,HQ=16,TOPK=512,SQ=1 V4_64=LAYOUT=V4,HQ=64,TOPK=512,SQ=1
V32_128=LAYOUT=V32,HQ=128,TOPK=2048,SQ=1 V32_16=LAYOUT=V32,HQ=16,TOPK=2048,SQ=1
# (a) pinned configs (the JIT cache in .gpu/cache.tar.xz, where built for them, saves the compiles)
W8=HPC=16,CHUNK=32,SPLIT=160,STAGES=2,PATH=2,WPM=8,MPW=1,FUSE=0 # V4 HQ 16 B = 64's default
step verify_w8_s160 v --config $W8 --shape $V4_16 --shape LAYOUT=V4,HQ=16,TOPK=512,SQ=2 --m 3,8,64,128
step verify_w8_s384_v32 v --config HPC=16,CHUNK=32,SPLIT=384,STAGES=2,PATH=2,WPM=8,MPW=1,FUSE=0 \
    --shape LAYOUT=V32,HQ=16,TOPK=2048,SQ=2 --shape LAYOUT=V32,HQ=64,TOPK=100,SQ=2 --m 3,64
# (b) the defaults as dispatch serves them: a DB without mla_decode rows (kt bench needs one):
# .gpu/untuned_db (a fake GPU's act_quant row) or, without it, a one-config act_quant tune
rm -f "$LOGS/untuned.db"*
if [ -f .gpu/untuned_db ]; then
    cp .gpu/untuned_db "$LOGS/untuned.db"
else
    step untuned_db within 15 "$KT" tune --family act_quant --shape K=128 --m 1 --budget 1 --db "$LOGS/untuned.db"
fi
bench() { within 50 "$1" bench --family mla_decode --shape targets --m 1,64 --db "$LOGS/untuned.db" --json "$2"; }
step bench_new bench "$KT" "$LOGS/new.json"
grep -E "mma on e4m3|ceiling" "$LOGS/bench_new.log"
step verify_default v --shape $V4_16 --shape $V4_64 --shape $V32_16 --m 1,16,64
# main's V4 HQ 16 B = 64 config (WPM 4, SPLIT 128: 320 CTAs), the A/B of the new default
# (and the same geometry, 64 rows of 16 heads, at V4 HQ 64 B = 16: main's config, then the new default)
cfg() { within 12 "$KT" bench --family mla_decode --config "$2" --shape "$3" --m "${4:-64}" --json "$LOGS/$1.json"; }
step bench_v4_main cfg v4_main HPC=16,CHUNK=32,SPLIT=128,STAGES=2,PATH=2,WPM=4,MPW=1,FUSE=0 $V4_16
step bench_v4h64_b16_main cfg v4h64_b16_main HPC=16,CHUNK=32,SPLIT=128,STAGES=2,PATH=2,WPM=4,MPW=1,FUSE=0 $V4_64 16
step bench_v4h64_b16_new cfg v4h64_b16_new $W8 $V4_64 16
# for the next session (not defaults): the new default with a third raw buffer (the gather two chunks
# ahead), and V3.2 HQ 16 B = 64's default with two
step bench_v4_w8_s160_st3 cfg v4_w8_s160_st3 HPC=16,CHUNK=32,SPLIT=160,STAGES=3,PATH=2,WPM=8,MPW=1,FUSE=0 $V4_16
step bench_v32_st2 cfg v32_st2 HPC=16,CHUNK=32,SPLIT=512,STAGES=2,PATH=2,WPM=8,MPW=1,FUSE=0 $V32_16
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
