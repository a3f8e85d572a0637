#!/usr/bin/env python3
"""Sums `ncu --metrics gpu__time_duration.sum --csv` output per kernel.

    ncu_summary.py NCU.csv [WALL_MS]

Prints each kernel's launches, total and mean time and share of the
whole, largest first, and the sum of all kernels; with WALL_MS (the
program's own time for the same work) also how much of it the GPU was
busy, which says whether kernels or the host between them cost the time.
"""
import csv
import sys
from collections import defaultdict

SCALE = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    lines = [l for l in open(sys.argv[1], errors="replace") if l.startswith('"')]
    total, count = defaultdict(float), defaultdict(int)
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = row["Kernel Name"].split("(")[0][:70]
        value = float(row["Metric Value"].replace(",", ""))
        total[name] += value * SCALE.get(row["Metric Unit"], 1e-6)
        count[name] += 1
    whole = sum(total.values())
    if not whole:
        raise SystemExit("no gpu__time_duration.sum rows in " + sys.argv[1])
    print("%-70s %7s %10s %9s %6s" % ("kernel", "calls", "total ms", "mean us", "share"))
    for name in sorted(total, key=total.get, reverse=True):
        print("%-70s %7d %10.3f %9.2f %5.1f%%" % (name, count[name], total[name],
                                                  total[name] / count[name] * 1e3,
                                                  100 * total[name] / whole))
    print("all kernels: %d launches, %.3f ms" % (sum(count.values()), whole))
    if len(sys.argv) > 2:
        wall = float(sys.argv[2])
        print("GPU busy %.1f%% of %.3f ms" % (100 * whole / wall, wall))


if __name__ == "__main__":
    main()
