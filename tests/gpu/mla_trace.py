#!/usr/bin/env python3
"""mla_trace.py — reduces the `mla_tr` lines that bin/kt_trace (kernels/mla_decode.cu built with
KT_MLA_TRACE 1, tests/gpu/mla21_builds.sh) prints: per traced launch and phase, the min / median /
max over the split kernel's CTAs of the stamp (ns from the launch's first split CTA start) and the
median of its cycles from each CTA's own start; then the median of those over the launches; the
combine kernel's four stamps likewise, the previous launch's last combine end and the next launch's
first split start. Usage: mla_trace.py LOG [TITLE]."""
import statistics
import sys

PHASES = ["start", "waited", "listed"]
for c in range(4):
    PHASES += [f"c{c}.landed", f"c{c}.qk", f"c{c}.softmax", f"c{c}.pv"]
PHASES += ["written", "fenced", "arrived", "merged", "end(last warp)"]
COMB = ["comb.start", "comb.waited", "comb.weights", "comb.end"]


def stats(v):
    return (min(v), statistics.median(v), max(v)) if v else None


def main():
    log, title = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else sys.argv[1])
    split, cyc, comb, head = {}, {}, {}, {}
    for line in open(log, errors="replace"):
        f = line.split()
        if len(f) < 3 or f[0] != "mla_tr":
            continue
        try:
            m = int(f[2])
            if f[1] == "L":
                head[m] = (int(f[4]), int(f[6]), int(f[8]), int(f[10]))
            elif f[1] == "S":
                split.setdefault(m, []).append([int(x) for x in f[4:]])
            elif f[1] == "K":
                cyc.setdefault(m, []).append([int(x) for x in f[4:]])
            elif f[1] == "C":
                comb.setdefault(m, []).append([int(x) for x in f[4:]])
        except (ValueError, IndexError):
            continue  # a line cut by the printf buffer
    launches = sorted(m for m in split if m in head)
    print(f"mla_trace {title}: {len(launches)} launches traced"
          + (f", {head[launches[0]][0]} split CTAs, {head[launches[0]][1]} combine CTAs" if launches else ""))
    if not launches:
        return 1
    med = statistics.median

    def row(name, per_launch, cycles=None):
        got = [s for s in per_launch if s]
        if not got:
            return
        lo, md, hi = (med([s[i] for s in got]) for i in range(3))
        c = f"  cycles from CTA start, median {med(cycles):8.0f}" if cycles else ""
        print(f"  {name:16s} ns min {lo:8.0f} med {md:8.0f} max {hi:8.0f}  (of {len(got)} launches){c}")

    for i, name in enumerate(PHASES):
        per = [stats([r[i] for r in split[m] if r[i] >= 0]) for m in launches]
        cs = [med(v) for m in launches for v in [[r[i] for r in cyc.get(m, []) if i < len(r) and r[i] >= 0]] if v]
        row(name, per, cs if i else None)
    for i, name in enumerate(COMB):
        row(name, [stats([r[i] for r in comb.get(m, []) if r[i] >= 0]) for m in launches])
    prev = [head[m][2] for m in launches if head[m][2] != -1 and head[m][1]]
    nxt = [head[m][3] for m in launches if head[m][3] >= 0]
    if prev:
        print(f"  previous launch's last combine end: {med(prev):8.0f} ns (median)")
    if nxt:
        print(f"  next launch's first split start:    {med(nxt):8.0f} ns (median: the traced launch-to-launch time)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
