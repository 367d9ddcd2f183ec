#!/usr/bin/env python3
"""Checks a ChromData store imported from a FOF-CT table against that table, and query
results (`deltacells chromdata get ... --format csv`) against the same table filtered
here. Independent of the library: the table is parsed with the csv module, the store is
read by read_store.py (pyarrow + zarr-python, per the spec), the query CSVs are compared
row by row with the table.

    check_fofct_store.py TABLE.csv STORE [--query trace|cell|chrom ID RESULT.csv]...

Checks:
* the store's spot table in written (original) order equals the table row by row: trace
  and cell ids, chromosome / start / end (through the store's bins), X, Y, Z (a missing
  coordinate is NaN), and every other column under its own name and value;
* each query result holds exactly the table's rows of that trace / cell / chromosome
  (matched by Spot_ID, every value compared), in canonical order (cell, trace,
  chromosome, locus).
Prints what it checked; exits non-zero on the first difference.
"""
import csv
import math
import os
import subprocess
import sys
import tempfile

import pyarrow.parquet as pq

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import read_store  # noqa: E402  (the independent reader, for the bins table)

KEYS = {"Trace_ID": "trace_id", "Cell_ID": "cell_id", "X": "x", "Y": "y", "Z": "z"}
LOCUS = ("Chrom", "Chrom_Start", "Chrom_End")


def fail(msg):
    raise SystemExit(f"check_fofct_store: {msg}")


def read_table(path):
    """The FOF-CT table: (column names, rows as lists of strings)."""
    names, rows = None, []
    with open(path, newline="") as f:
        for line in f:
            if line.startswith("#"):
                h = line.lstrip("#").strip()
                if h.startswith("columns="):
                    names = [c.strip() for c in h[len("columns="):].strip("()").split(",")]
                continue
            if line.strip():
                rows.append(next(csv.reader([line.rstrip("\r\n")])))
    if names is None:
        names, rows = rows[0], rows[1:]
    return names, rows


def typed(text):
    """A table field as the importer types it: int, float, or str ("" = missing)."""
    if text == "":
        return None
    for t in (int, float):
        try:
            return t(text)
        except ValueError:
            pass
    return text


def same(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return a == b


def expected_row(names, row):
    """Table row -> {store column: value}, plus the locus."""
    out = {}
    for n, v in zip(names, row):
        if n in LOCUS:
            continue
        col = KEYS.get(n, n)
        val = typed(v)
        if col in ("x", "y", "z") and val is None:
            val = float("nan")
        if col in ("x", "y", "z"):
            val = float(val)
        out[col] = val
    loc = dict(zip(names, row))
    out["_locus"] = (loc["Chrom"], int(loc["Chrom_Start"]), int(loc["Chrom_End"]))
    return out


def check_store(names, rows, store):
    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "spots.parquet")
        subprocess.run([sys.executable, os.path.join(HERE, "read_store.py"), store, dump], check=True)
        spots = pq.read_table(dump).to_pylist()
    s = read_store.Store(store)
    tables = s.json("tables/zarr.json")["attributes"]["tables"]
    bins = s.table(tables["bins"]["path"]).to_pylist()
    if len(spots) != len(rows):
        fail(f"{store}: {len(spots)} spots, the table {len(rows)} rows")
    for i, (got, row) in enumerate(zip(spots, rows)):
        want = expected_row(names, row)
        b = bins[got["bin_id"]]
        chrom = b["chrom"]
        if (chrom, b["start"], b["end"]) != want.pop("_locus"):
            fail(f"{store}: spot {i}: locus {chrom}:{b['start']}-{b['end']}, table row {row}")
        for col, val in want.items():
            if col not in got:
                fail(f"{store}: no column {col}")
            if not same(got[col], val):
                fail(f"{store}: spot {i}, column {col}: {got[col]!r}, the table {val!r}")
    return bins


def check_query(names, rows, kind, ident, result):
    with open(result, newline="") as f:
        got = list(csv.DictReader(f))
    col = {"trace": "Trace_ID", "cell": "Cell_ID", "chrom": "Chrom"}[kind]
    k = names.index(col)
    want = {}
    for row in rows:
        if row[k] == ident:
            w = expected_row(names, row)
            want[w["Spot_ID"]] = w
    if len(got) != len(want):
        fail(f"{result}: {len(got)} rows, the table has {len(want)} with {col} = {ident}")
    keys = []
    for r in got:
        w = want.pop(typed(r["Spot_ID"]), None)
        if w is None:
            fail(f"{result}: Spot_ID {r['Spot_ID']} is not a row of {kind} {ident}")
        keys.append((w["cell_id"], w["trace_id"], w["_locus"]))
        for c, val in w.items():
            if c == "_locus":
                continue
            g = typed(r[c])
            if c in ("x", "y", "z"):
                g = float("nan") if g in (None, "NaN") else float(g)
            if not same(g, val):
                fail(f"{result}: Spot_ID {r['Spot_ID']}, column {c}: {r[c]!r}, the table {val!r}")
    if keys != sorted(keys):
        fail(f"{result}: rows are not in canonical order (cell, trace, chromosome, locus)")
    return len(got)


def main(argv):
    if len(argv) < 3 or (len(argv) - 3) % 4:
        raise SystemExit(__doc__)
    table, store = argv[1], argv[2]
    names, rows = read_table(table)
    check_store(names, rows, store)
    print(f"  store {store}: all {len(rows)} rows of {os.path.basename(table)} read back by an "
          f"independent reader (read_store.py), in written order, every column equal")
    for i in range(3, len(argv), 4):
        if argv[i] != "--query":
            raise SystemExit(__doc__)
        kind, ident, result = argv[i + 1], argv[i + 2], argv[i + 3]
        n = check_query(names, rows, kind, ident, result)
        print(f"  query --{kind} {ident}: {n} spots, exactly the table's rows of that {kind}, "
              f"in canonical order")


if __name__ == "__main__":
    main(sys.argv)
