#!/usr/bin/env python3
"""Scale-out on dask.distributed: per-gene totals of a deltacells dataset and per-trace
statistics of a ChromData store, computed by many workers from one path or bucket, and the
same computed locally in one process.

    python3 examples/dask_scale_out.py DATASET STORE [--workers 2] [--option KEY=VALUE ...]

DATASET / STORE are local paths or URLs (s3://bucket/prefix, ...); ``--option`` passes
object-store settings (e.g. aws_endpoint=http://127.0.0.1:9000) to every open, on the
client and on each worker. The handles travel to the workers pickled as (URL, options) and
re-open there: no data goes through the scheduler, only partitions (cell ranges, chromosome
names) and small partial results.
"""
from __future__ import annotations

import argparse
from typing import Any, Optional

import numpy as np
import pandas as pd

import deltacells as dc

STATS = ["n_spots", "n_x", "sum_x", "n_y", "sum_y", "n_z", "sum_z"]


# ---- per-gene totals of a dataset
def gene_totals_of(ds: dc.Dataset, cells: range) -> np.ndarray:
    """Sum of each gene's counts over a (tile-aligned) cell range, tile by tile."""
    total = np.zeros(ds.n_genes, dtype=np.int64)
    for _, x in ds.batches(cells, batch_size=ds.info.tile_size, format="arrays"):
        np.add.at(total, x.indices, x.values)
    return total


def gene_totals_distributed(client, source: str, options: Any = None,
                            n_partitions: Optional[int] = None) -> np.ndarray:
    ds = dc.Dataset(source, options=options)
    parts = ds.partitions(n_partitions or 4 * len(client.scheduler_info()["workers"]))
    futures = client.map(gene_totals_of, [ds] * len(parts), parts)
    return client.submit(sum, futures).result()


def gene_totals_local(source: str, options: Any = None) -> np.ndarray:
    ds = dc.Dataset(source, options=options)
    return gene_totals_of(ds, range(ds.n_cells))


# ---- per-trace statistics of a ChromData store
def trace_partials(spots: pd.DataFrame) -> pd.DataFrame:
    """Per-trace partial sums (spots, and coordinates that are not NaN), in float64 so that
    float32 stores sum alike in any grouping."""
    spots = spots.astype({c: "float64" for c in "xyz"})
    g = spots.groupby("trace_id", sort=False, observed=True)
    out = pd.DataFrame({"n_spots": g.size()})
    for c in "xyz":
        out[f"n_{c}"] = g[c].count()
        out[f"sum_{c}"] = g[c].sum()
    return out


def partition_partials(cd: dc.ChromData, part: dc.ChromDataPartition) -> pd.DataFrame:
    return trace_partials(part.read(cd, ["trace_id", "x", "y", "z"]).to_pandas())


def finish_stats(partials: pd.DataFrame) -> pd.DataFrame:
    """Combines partial sums into per-trace counts and mean coordinates, sorted by trace."""
    total = partials.groupby(level=0).sum()
    out = pd.DataFrame({"n_spots": total["n_spots"]})
    for c in "xyz":
        out[f"mean_{c}"] = total[f"sum_{c}"] / total[f"n_{c}"]
    return out.sort_index()


def trace_stats_distributed(client, source: str, options: Any = None,
                            by: str = "chrom", n_partitions: int = 8) -> pd.DataFrame:
    cd = dc.ChromData(source, options=options)
    parts = cd.partitions(n_partitions, by)
    futures = client.map(partition_partials, [cd] * len(parts), parts)
    return finish_stats(pd.concat(client.gather(futures)))


def trace_stats_local(source: str, options: Any = None) -> pd.DataFrame:
    cd = dc.ChromData(source, options=options)
    return finish_stats(trace_partials(cd.read_spots(["trace_id", "x", "y", "z"]).to_pandas()))


def main() -> None:
    from dask.distributed import Client, LocalCluster

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset")
    p.add_argument("store")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--option", action="append", default=[], help="KEY=VALUE object-store setting")
    a = p.parse_args()
    with LocalCluster(n_workers=a.workers, threads_per_worker=1, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        totals = gene_totals_distributed(client, a.dataset, a.option)
        assert np.array_equal(totals, gene_totals_local(a.dataset, a.option))
        print(f"{a.dataset}: {totals.size} genes, {int(totals.sum())} counts; top genes: {np.argsort(-totals)[:5]}")
        stats = trace_stats_distributed(client, a.store, a.option)
        pd.testing.assert_frame_equal(stats, trace_stats_local(a.store, a.option), rtol=1e-12)
        print(f"{a.store}: {len(stats)} traces\n{stats.head()}")


if __name__ == "__main__":
    main()
