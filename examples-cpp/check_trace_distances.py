#!/usr/bin/env python3
"""Runs examples-cpp/trace_distances on a store and compares its output with the same
statistics computed here, independently, from an expected table (a CSV of the spots of
that chromosome with columns trace_id, x, y, z -- e.g. the pandas answer written by
tests/chromdata/expected_csv.py):

    check_trace_distances.py EXE STORE CHROM EXPECTED.csv

Exit status 0 when every trace, its spot counts and its mean pairwise distance (to 1e-9
relative, or 1e-6 absolute: the program prints 6 decimals) agree.
"""
import csv
import math
import subprocess
import sys


def expected(path):
    order, traces = [], {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            t = row["trace_id"]
            if t not in traces:
                order.append(t)
                traces[t] = [0, []]
            traces[t][0] += 1
            xyz = [row[k] for k in ("x", "y", "z")]
            if all(v not in ("", "NA", "nan", "NaN") for v in xyz):
                traces[t][1].append(tuple(float(v) for v in xyz))
    out = []
    for t in order:
        n, pts = traces[t]
        d = [math.dist(a, b) for i, a in enumerate(pts) for b in pts[i + 1:]]
        out.append((t, n, len(pts), sum(d) / len(d) if d else None))
    return out


def main(exe, store, chrom, csv_path):
    got = subprocess.run([exe, store, chrom], check=True, capture_output=True, text=True).stdout
    lines = [l.split("\t") for l in got.splitlines()]
    want = expected(csv_path)
    if len(lines) != len(want):
        raise SystemExit(f"{exe}: {len(lines)} traces, expected {len(want)}")
    for (t, n, k, mean), line in zip(want, lines):
        if line[:3] != [t, str(n), str(k)]:
            raise SystemExit(f"{exe}: line {line}, expected trace {t} with {n} spots ({k} located)")
        if (mean is None) != (line[3] == "NA") or (
                mean is not None and not math.isclose(float(line[3]), mean, rel_tol=1e-9, abs_tol=1e-6)):
            raise SystemExit(f"{exe}: trace {t}: mean distance {line[3]}, expected {mean}")
    print(f"trace_distances {store} {chrom}: {len(want)} traces, each as computed from {csv_path}")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    main(*sys.argv[1:])
