"""Scale-out on dask.distributed (a LocalCluster of two worker processes): the example's
per-gene totals and per-trace statistics equal a local single-process computation (and the
totals equal scipy's). Handles reach the workers pickled as (source, options).

The sources are local paths; with the object-storage issue they become s3:// URLs of the
moto test server plus ``options`` -- the one parameter pair every function here takes."""
from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT

distributed = pytest.importorskip("dask.distributed")
sys.path.insert(0, str(ROOT / "bindings" / "python" / "examples"))
import dask_scale_out as ex  # noqa: E402

OPTIONS = None  # object-store settings once sources are URLs (contract §7)


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as c:
        yield c


def test_gene_totals_equal_local_and_scipy(client, mouse_dataset, mouse):
    m, _ = mouse
    got = ex.gene_totals_distributed(client, str(mouse_dataset), OPTIONS, n_partitions=5)
    assert np.array_equal(got, ex.gene_totals_local(str(mouse_dataset), OPTIONS))
    assert np.array_equal(got, np.asarray(m.sum(axis=0)).ravel())
    # Both workers took part.
    assert len(client.scheduler_info()["workers"]) == 2


@pytest.mark.parametrize("path,by", [("main_22.cdz", "chrom"), ("main_21.chromdata.zarr", "cell"),
                                     ("nocell_20.cdz", "chrom")])
def test_trace_stats_equal_local(client, stores, path, by):
    source = str(stores / path)
    got = ex.trace_stats_distributed(client, source, OPTIONS, by=by, n_partitions=3)
    want = ex.trace_stats_local(source, OPTIONS)
    assert len(want) > 3
    pd.testing.assert_frame_equal(got, want, rtol=1e-12)
