#!/usr/bin/env bash
# mla_speed_prep.sh — builds, on the build machine (no GPU), what tests/gpu/mla_speed.sh takes
# from .gpu/ (git-ignored; carry it to the GPU beside bin/ and lib/):
#   untuned_db     a database with a fake GPU's act_quant row only (kt bench needs a DB; on the
#                  H200 every mla_decode case falls back to its family default);
#   cache.tar.xz   the JIT cache (sm_90 and sm_120 cubins) of every config the GPU call compiles
#                  (NVRTC the same there: a hit; else they compile, slower).
# Run after `make`, from the repository root:  bash tests/gpu/mla_speed_prep.sh
set -eu
cd "$(dirname "$0")/../.."
mkdir -p .gpu
rm -rf .gpu/kt_plant_* .gpu/kt_main .gpu/cache
make -j2 bin/kt >/dev/null
rm -f .gpu/untuned_db*
KT_FAKE_GPU=1 KT_CACHE_DIR=/tmp/kt_prep_fake ./bin/kt tune --family act_quant --shape K=128 --m 1 --budget 1 \
    --db .gpu/untuned_db --quiet >/dev/null 2>&1
rm -f .gpu/untuned_db-*
# the cache: every --config of mla_speed.sh, the per-problem defaults of the target cases, the
# static default (the reference module)
export KT_CACHE_DIR=$PWD/.gpu/cache
configs=$(grep -oE -- '(--config|cfg [a-z0-9_]+) [^ ]+' tests/gpu/mla_speed.sh | awk '{print $NF}' | grep -v '^"' |
    sort -u)
expand() { sed -e 's/\$W8/HPC=16,CHUNK=32,SPLIT=160,STAGES=2,PATH=2,WPM=8,MPW=1,FUSE=0/'; }
# helper LIBDIR OUT: a program over that build's libkt that prints the target cases' default
# configs at B 1 and 64 for 132 SMs (the H200's) and compiles bench's and verify's own sources
# (the GPU compare, the probes) for sm_90 into the cache
helper() {
    cat >/tmp/kt_prep_helper.c <<'EOF2'
#include "kt.h"
#include <stdio.h>
int main(void) {
    const kt_family *f = kt_family_find("mla_decode");
    const char *shapes[] = {"LAYOUT=V4,HQ=16,TOPK=512,SQ=1", "LAYOUT=V4,HQ=64,TOPK=512,SQ=1",
                            "LAYOUT=V32,HQ=128,TOPK=2048,SQ=1", "LAYOUT=V32,HQ=16,TOPK=2048,SQ=1"};
    const long ms[] = {1, 64};
    for (int s = 0; s < 4; s++)
        for (int j = 0; j < 2; j++) {
            kt_problem p;
            if (kt_parse_shape(f, shapes[s], &p)) return 1;
            p.m = ms[j];
            kt_config c = f->default_config;
            f->default_for(&p, 132, &c);
            char buf[256];
            kt_format_config(f, &c, buf, sizeof buf);
            printf("%s\n", buf);
        }
    const char *sources[] = {"check.cu", "ceiling.cu", "memory.cu"};
    for (int i = 0; i < 3; i++) {
        kt_cubin cubin;
        if (kt_compile_source(sources[i], 90, &cubin)) fprintf(stderr, "%s: %s\n", sources[i], kt_error());
        else kt_cubin_free(&cubin);
    }
    return 0;
}
EOF2
    cc -std=c11 -D_GNU_SOURCE -I"$1/../runtime" -I/usr/local/cuda/include -o "$2" /tmp/kt_prep_helper.c "$1/libkt.a" \
        -L/usr/local/cuda/lib64 -lnvrtc -Wl,-Bstatic -lsqlite3 -Wl,-Bdynamic -L"$1" -l:libcjson.so.1 -ldl -lm -pthread \
        -Wl,-rpath,"$1" -Wl,-rpath,/usr/local/cuda/lib64
}
helper "$PWD/lib" /tmp/kt_prep_new
compile() { # binary config: says so where ptxas spills (sm_90, or sm_120 built beside it)
    "$1" compile --family mla_decode --arch sm_90 --config "$2" >/tmp/kt_prep_compile.log 2>&1 ||
        echo "no compile: $1 $2"
    awk '$2 ~ /^[0-9]+$/ && $3 != 0 {print "SPILLS: " $0}' /tmp/kt_prep_compile.log
    "$1" compile --family mla_decode --arch sm_120 --config "$2" 2>&1 | awk '$2 ~ /^[0-9]+$/ && $3 != 0 {print "SPILLS sm_120: " $0}'
}
for c in $(echo "$configs" | expand) $(/tmp/kt_prep_new); do compile ./bin/kt "$c"; done
compile ./bin/kt HPC=16
echo "cache: $(find .gpu/cache -type f | wc -l) files, $(du -sh .gpu/cache | cut -f1)"
tar -cJf .gpu/cache.tar.xz -C .gpu cache && rm -rf .gpu/cache # ~25x smaller (cubins of 1 MB)
echo ".gpu: $(du -sh .gpu | cut -f1)"
