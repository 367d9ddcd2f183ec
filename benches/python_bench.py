#!/usr/bin/env python3
"""Python benchmark of the deltacells package (not a test): what a Python user gets from
this library against what Python users have today, measured in the same run.

    python3 benches/python_bench.py prepare DIR [--replicas 40] [--spots 2000000]
    python3 benches/python_bench.py gather DIR [--batches 30]
    python3 benches/python_bench.py chromdata DIR [--queries 50]

`prepare` (heavy; run it under /work/team/bin/run) writes, into DIR:
  * matrix.h5ad: the bundled human whole-transcriptome sample (559 cells x 32,786 genes,
    real counts) stacked --replicas times, each replica thinned binomially (p = 0.9) so that
    no cell repeats, written by anndata (uncompressed, CSR int32: the
    fastest .h5ad for backed reads), and the same matrix as a deltacells dataset written by
    this package from the AnnData object (writer defaults: 10,000-cell tiles, zstd 19);
  * spots: a synthetic chromatin-tracing table (--spots rows, 20 chromosomes, 100 cells,
    20 traces per cell, x/y/z and 4 float tracks) written as a ChromData store (2.0 flat,
    whose spot table is one Parquet file pyarrow can read) by this package, and as a plain
    Parquet file in the store's canonical order with loci as chrom/start/end (what a Python
    user keeps), by pyarrow (zstd, 65,536-row row groups).

`gather` and `chromdata` time reads on the warm page cache and print markdown tables
(run them under /work/team/bin/quiet):
  * gather: random batches of 256 and 5,000 cells (sorted, no repeats: what anndata's
    backed mode takes) and one contiguous block of 10,000 cells; cells/s for
    Dataset.gather (all threads and 1 thread), anndata backed mode (X[cells] on the
    h5py-backed CSR), and scipy on the matrix loaded into memory (the floor; its load time
    is reported separately).
  * chromdata: get_trace / get_cell / get_chrom / read_spots through this package (a
    pyarrow.Table with decoded categories) against pyarrow reading the same rows with
    filters (row-group pruning on statistics) from (a) the store's own spots.parquet
    (coded ids, as stored) and (b) the user's plain Parquet file.
"""
from __future__ import annotations

import argparse
import gzip
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bindings" / "python"))
import deltacells as dc  # noqa: E402


def median_time(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# ----------------------------------------------------------------------------------------
def prepare(out: Path, replicas: int, n_spots: int) -> None:
    import anndata as ad
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq
    import scipy.io
    import scipy.sparse as sp

    out.mkdir(parents=True, exist_ok=True)
    src = ROOT / "tests" / "data" / "scrna" / "human-559-cells-whole-transcriptome"
    one = sp.csr_matrix(scipy.io.mmread(str(src / "matrix.mtx.gz")).T).astype(np.int32)
    one.sort_indices()
    with gzip.open(src / "features.tsv.gz", "rt") as f:
        genes = [line.split("\t")[0] for line in f.read().splitlines()]
    # Replicas thinned binomially (each count kept with p = 0.9), so that no two are equal and
    # no compressor sees repeated cells.
    rng = np.random.default_rng(0)
    parts = []
    for _ in range(replicas):
        r = one.copy()
        r.data = rng.binomial(one.data, 0.9).astype(np.int32)
        r.eliminate_zeros()
        parts.append(r)
    x = sp.vstack(parts, format="csr").astype(np.int32)
    obs = pd.DataFrame({"replica": pd.Categorical(np.repeat([f"r{k}" for k in range(replicas)], one.shape[0]))},
                       index=pd.Index([f"c{i}" for i in range(x.shape[0])]))
    a = ad.AnnData(X=x, obs=obs, var=pd.DataFrame(index=pd.Index(genes)))
    t = time.perf_counter()
    a.write_h5ad(out / "matrix.h5ad")
    print(f"matrix.h5ad: {x.shape[0]} x {x.shape[1]}, nnz {x.nnz}, {time.perf_counter() - t:.1f} s")
    t = time.perf_counter()
    dc.write_anndata(a, out / "matrix.dc", overwrite=1)
    print(f"matrix.dc written by deltacells.write_anndata in {time.perf_counter() - t:.1f} s")

    rng = np.random.default_rng(1)
    chroms = [f"chr{k + 1}" for k in range(20)]
    n_bins_per_chrom = 500
    cell = rng.integers(0, 100, n_spots)
    trace = cell * 20 + rng.integers(0, 20, n_spots)
    spots = pd.DataFrame({
        "chrom": pd.Categorical(np.array(chroms)[rng.integers(0, 20, n_spots)], categories=chroms),
        "start": rng.integers(0, n_bins_per_chrom, n_spots) * 10_000,
        "trace_id": pd.Categorical([f"t{k}" for k in trace]),
        "cell_id": pd.Categorical([f"c{k}" for k in cell]),
        "x": rng.normal(size=n_spots), "y": rng.normal(size=n_spots), "z": rng.normal(size=n_spots),
    })
    spots["end"] = spots["start"] + 10_000
    for k in range(4):
        spots[f"track{k}"] = rng.random(n_spots).astype(np.float32)
    t = time.perf_counter()
    with dc.ChromDataWriter(out / "spots.chromdata.zarr", layout="flat", overwrite=1) as w:
        for start in range(0, n_spots, 500_000):
            w.append(spots.iloc[start:start + 500_000])
    print(f"spots.chromdata.zarr: {n_spots} spots written by deltacells in {time.perf_counter() - t:.1f} s")
    # The user's Parquet file: the same rows in the store's canonical order (so that
    # row-group statistics prune as well as they can), decoded values.
    cd = dc.ChromData(out / "spots.chromdata.zarr")
    canonical = cd.read_spots()
    bins, bin_id = cd.table("bins"), canonical.column("bin_id")
    loci = {c: bins.column(c).take(bin_id) for c in ("chrom", "start", "end")}
    rest = {c: canonical.column(c) for c in canonical.column_names if c != "bin_id"}
    canonical = pa.table({**loci, **rest})
    pq.write_table(canonical, out / "spots.parquet", compression="zstd", row_group_size=65_536)
    groups = pq.ParquetFile(out / "spots.parquet").num_row_groups
    print(f"spots.parquet: {canonical.num_rows} rows, {groups} row groups")


# ----------------------------------------------------------------------------------------
def gather(out: Path, n_batches: int) -> None:
    import anndata as ad
    import scipy.sparse as sp

    ds = dc.Dataset(out / "matrix.dc")
    ds1 = dc.Dataset(out / "matrix.dc", threads=1)
    backed = ad.read_h5ad(out / "matrix.h5ad", backed="r")
    t = time.perf_counter()
    mem = ad.read_h5ad(out / "matrix.h5ad").X
    load = time.perf_counter() - t
    assert sp.isspmatrix_csr(mem) or isinstance(mem, sp.csr_array)
    n = ds.n_cells
    rng = np.random.default_rng(5)
    print(f"gather: {n} cells x {ds.n_genes} genes, nnz {ds.info.nnz}, {ds.info.n_tiles} tiles; "
          f"load average {load_avg()}; scipy load of the whole .h5ad: {load:.2f} s")
    print()
    print("| batch | reader | cells/s | time vs deltacells |")
    print("|---|---|---|---|")
    def sample(size: int, count: int) -> list[np.ndarray]:
        return [np.sort(rng.choice(n, min(size, n // 2), replace=False)) for _ in range(count)]

    cases = [("256 random", sample(256, n_batches)),
             ("5,000 random", sample(5000, max(3, n_batches // 5))),
             ("10,000 contiguous", [np.arange(min(1000, n // 4), min(11000, n))])]
    for label, batches in cases:
        # Check the readers agree before timing them.
        ref = mem[batches[0]]
        assert (ds.gather(batches[0]) != ref).nnz == 0
        assert (sp.csr_matrix(backed.X[batches[0]]) != ref).nnz == 0
        readers = [("deltacells Dataset.gather (2 threads)", lambda b: ds.gather(b)),
                   ("deltacells Dataset.gather (1 thread)", lambda b: ds1.gather(b)),
                   ("anndata backed (h5py) X[cells]", lambda b: backed.X[b]),
                   ("scipy, matrix in memory X[cells]", lambda b: mem[b])]
        cells = sum(len(b) for b in batches)
        secs = {}
        for name, fn in readers:
            fn(batches[0])  # warm: page cache, tile cache, h5py
            secs[name] = median_time(lambda fn=fn, batches=batches: [fn(b) for b in batches], 3)
        base = secs[readers[0][0]]
        for name, _ in readers:
            print(f"| {label} | {name} | {cells / secs[name]:,.0f} | {secs[name] / base:.2f}x |")
    sizes = {p: sum(f.stat().st_size for f in Path(out / p).rglob("*") if f.is_file()) if (out / p).is_dir()
             else (out / p).stat().st_size for p in ("matrix.dc", "matrix.h5ad")}
    print()
    print(f"size on disk: matrix.dc {sizes['matrix.dc'] / 1e6:.1f} MB, matrix.h5ad (uncompressed) "
          f"{sizes['matrix.h5ad'] / 1e6:.1f} MB ({sizes['matrix.dc'] / sizes['matrix.h5ad']:.2f}x)")


# ----------------------------------------------------------------------------------------
def chromdata(out: Path, n_queries: int) -> None:
    import pyarrow.parquet as pq

    store = out / "spots.chromdata.zarr"
    cd = dc.ChromData(store)
    own = pq.ParquetFile(store / "tables" / "spots.parquet")
    user = out / "spots.parquet"
    trace_cats = cd.categories("spots", "trace_id").to_pylist()
    cell_cats = cd.categories("spots", "cell_id").to_pylist()
    bins = cd.table("bins")
    rng = np.random.default_rng(9)
    traces = [int(i) for i in rng.choice(len(trace_cats), n_queries, replace=False)]
    cells = [int(i) for i in rng.choice(len(cell_cats), min(20, len(cell_cats)), replace=False)]
    chroms = cd.chroms()[:5]
    print(f"chromdata: {cd.info.n_spots} spots, {cd.info.n_traces} traces, {cd.info.n_cells} cells, "
          f"{cd.info.n_chroms} chromosomes, {own.metadata.num_row_groups} row groups (store), "
          f"{pq.ParquetFile(user).num_row_groups} (user file); load average {load_avg()}")
    bin_chrom = bins.column("chrom").to_pylist()

    def bin_range(c: str) -> tuple[int, int]:
        ids = [i for i, v in enumerate(bin_chrom) if v == c]
        return min(ids), max(ids)

    def own_read(filters):
        return pq.read_table(store / "tables" / "spots.parquet", filters=filters)

    def user_read(filters):
        return pq.read_table(user, filters=filters)

    # Agreement first: the same rows (by count) from each reader.
    assert cd.get_trace(trace_cats[traces[0]]).num_rows == own_read([("trace_id", "==", traces[0])]).num_rows \
        == user_read([("trace_id", "==", trace_cats[traces[0]])]).num_rows
    lo, hi = bin_range(chroms[0])
    assert cd.get_chrom(chroms[0]).num_rows == own_read([("bin_id", ">=", lo), ("bin_id", "<=", hi)]).num_rows \
        == user_read([("chrom", "==", chroms[0])]).num_rows
    queries = [
        ("get_trace", len(traces),
         lambda: [cd.get_trace(trace_cats[t]) for t in traces],
         lambda: [own_read([("trace_id", "==", t)]) for t in traces],
         lambda: [user_read([("trace_id", "==", trace_cats[t])]) for t in traces]),
        ("get_cell", len(cells),
         lambda: [cd.get_cell(cell_cats[c]) for c in cells],
         lambda: [own_read([("cell_id", "==", c)]) for c in cells],
         lambda: [user_read([("cell_id", "==", cell_cats[c])]) for c in cells]),
        ("get_chrom", len(chroms),
         lambda: [cd.get_chrom(c) for c in chroms],
         lambda: [own_read([("bin_id", ">=", bin_range(c)[0]), ("bin_id", "<=", bin_range(c)[1])]) for c in chroms],
         lambda: [user_read([("chrom", "==", c)]) for c in chroms]),
        ("get_chrom coords", len(chroms),
         lambda: [cd.get_chrom(c, "coords") for c in chroms],
         None,
         lambda: [pq.read_table(user, columns=["chrom", "start", "end", "trace_id", "cell_id", "x", "y", "z"],
                                filters=[("chrom", "==", c)]) for c in chroms]),
        ("read_spots (all)", 1, lambda: cd.read_spots(), lambda: pq.read_table(store / "tables" / "spots.parquet"),
         lambda: pq.read_table(user)),
    ]
    print()
    print("| query | n | deltacells (Table, decoded) | pyarrow, store's spots.parquet + filters | ratio | "
          "pyarrow, user's Parquet + filters | ratio |")
    print("|---|---|---|---|---|---|---|")
    for name, count, ours, theirs_own, theirs_user in queries:
        reps = 5 if count > 1 else 3
        a = median_time(ours, reps)
        b = median_time(theirs_own, reps) if theirs_own else None
        c = median_time(theirs_user, reps)
        def fmt(s: float, count: int = count) -> str:
            return f"{s / count * 1e3:.2f} ms"

        print(f"| {name} | {count} | {fmt(a)} | {fmt(b) if b else 'n/a'} | "
              f"{f'{a / b:.2f}x' if b else 'n/a'} | {fmt(c)} | {a / c:.2f}x |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["prepare", "gather", "chromdata"])
    p.add_argument("dir", type=Path)
    p.add_argument("--replicas", type=int, default=40)
    p.add_argument("--spots", type=int, default=2_000_000)
    p.add_argument("--batches", type=int, default=30)
    p.add_argument("--queries", type=int, default=50)
    a = p.parse_args()
    print(f"deltacells {dc.__version__} ({dc.LIBRARY_PATH})")
    if a.command == "prepare":
        prepare(a.dir, a.replicas, a.spots)
    elif a.command == "gather":
        gather(a.dir, a.batches)
    else:
        chromdata(a.dir, a.queries)


if __name__ == "__main__":
    main()
