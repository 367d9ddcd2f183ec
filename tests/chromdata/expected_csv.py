#!/usr/bin/env python3
"""Writes some pandas answers of tests/chromdata/make_stores.py as CSV files, for the test
suites that cannot read Parquet (R without the arrow package, C++ without Arrow C++):

    expected_csv.py STORES_DIR OUT_DIR

STORES_DIR is the output of make_stores.py. Written (answers for the main dataset, equal in
every layout): trace_t0_coords.csv, trace_t0_all.csv, cell_cell0_coords.csv,
chrom_chr2_coords.csv. Missing values are "NA", booleans TRUE / FALSE (as R's read.csv
reads them), floats with full precision.
"""
import json
import os
import sys

import pyarrow.parquet as pq

WANT = {("get_trace", "t0", "coords"): "trace_t0_coords.csv",
        ("get_trace", "t0", "all"): "trace_t0_all.csv",
        ("get_cell", "cell0", "coords"): "cell_cell0_coords.csv",
        ("get_chrom", "chr2", "coords"): "chrom_chr2_coords.csv"}


def main(root, out):
    m = json.load(open(os.path.join(root, "manifest.json")))
    store = next(s for s in m["stores"] if s["path"] == "main_20.chromdata.zarr")
    want = dict(WANT)
    os.makedirs(out, exist_ok=True)
    for q in store["queries"]:
        cols = q.get("columns")
        key = (q["kind"], q.get("id"), cols if isinstance(cols, str) else None)
        if key in want and "file" in q:
            t = pq.read_table(os.path.join(root, store["expected_dir"], q["file"]))
            df = t.to_pandas()
            for f in t.schema:
                if str(f.type) == "bool":
                    df[f.name] = df[f.name].map({True: "TRUE", False: "FALSE"})
            df.to_csv(os.path.join(out, want.pop(key)), index=False, na_rep="NA",
                      float_format="%.17g")
    assert not want, f"expected answers not found: {want}"


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2])
