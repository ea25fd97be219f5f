# mla_prep_lib.sh — sourced by the mla GPU scripts' prep scripts (mla_fuse_prep.sh, mla19_prep.sh),
# run from the repository root on the build machine (no GPU), with SRC (the kernel source) and
# SRC_COPY (its pristine copy) set.
# plant NAME 'text as it is' 'text planted': bin/kt_plant_NAME, bin/kt built with the text replaced
# once in SRC (a planted bug the GPU call's kt verify must fail on); SRC restored from SRC_COPY after.
plant() {
    python3 - "$SRC" "$2" "$3" <<'PY'
import sys
p, a, b = sys.argv[1:]
s = open(p).read()
assert s.count(a) == 1, "the text to plant is not in the source once: " + a
open(p, "w").write(s.replace(a, b))
PY
    make -j2 bin/kt >/dev/null && cp bin/kt "bin/kt_plant_$1" && strip "bin/kt_plant_$1"
    cp "$SRC_COPY" "$SRC"
    echo "planted $1"
}

# cache_configs SCRIPT: sm_90 compiles by bin/kt, into KT_CACHE_DIR, of every config SCRIPT passes
# (--config C, or cfg NAME C; its NAME=HPC=... variables expanded, and left set here for the
# planted binaries' compiles); a "SPILLS:" line for a variant that spills.
cache_configs() {
    eval "$(grep -E '^[A-Z0-9_]+=HPC=' "$1" | sed 's/ *#.*//')"
    local c
    for c in $(grep -oE -- '(--config|cfg [a-z0-9_]+) [^ ]+' "$1" | awk '{print $NF}' | grep -v '^"' | sort -u); do
        c=$(eval echo "$c")
        ./bin/kt compile --family mla_decode --arch sm_90 --config "$c" |
            awk '$2 ~ /^[0-9]+$/ && $3 != 0 {print "SPILLS: " $0}'
    done
}
