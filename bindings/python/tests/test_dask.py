"""Scale-out on dask.distributed (a LocalCluster of two worker processes): the example's
per-gene totals and per-trace statistics equal a local single-process computation (and the
totals equal scipy's). Handles reach the workers pickled as (source, options).

Sources are local paths and, where the library opens URLs (contract §7:
dc_dataset_open_opts, dc_chromdata_open_opts), s3:// URLs of the S3 test server
(scripts/remote_servers.py, moto) with ``options`` -- the one parameter pair every function
here takes; the URL results must equal the local ones."""
from __future__ import annotations

import json
import pickle
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import deltacells as dc
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


def _needs(function: str) -> None:
    if not hasattr(dc._capi, function):
        pytest.skip(f"this libdeltacells has no {function} (opens no URLs: contract §7, object-storage issue)")


S3_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


@pytest.fixture(scope="module")
def s3():
    """The S3 test server (scripts/remote_servers.py, moto) with a bucket "cells"; yields
    (boto3 client, options for the library). boto3 uploads: independent of the library."""
    _needs("dc_dataset_open_opts")
    boto3 = pytest.importorskip("boto3")  # moto[server] brings it: scripts/setup.sh
    server = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "remote_servers.py"), "--bucket", "cells"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        line = server.stdout.readline()
        assert line, "scripts/remote_servers.py ended before listening (is moto[server] installed?)"
        endpoint = json.loads(line)["s3"]
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **S3_CREDENTIALS)
        yield client, {"aws_endpoint": endpoint, "aws_region": "us-east-1", "allow_http": True, **S3_CREDENTIALS}
    finally:
        server.stdin.close()  # the servers end when their stdin closes
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _upload(client, local, key: str) -> str:
    """A file, or a directory's files under the prefix ``key``; returns the s3:// URL."""
    files = [local] if local.is_file() else sorted(f for f in local.rglob("*") if f.is_file())
    for f in files:
        client.upload_file(str(f), "cells", key if f == local else key + "/" + f.relative_to(local).as_posix())
    return f"s3://cells/{key}"


def test_gene_totals_from_s3_equal_local(client, s3, mouse_dataset, mouse):
    m, _ = mouse
    s3_client, options = s3
    url = _upload(s3_client, mouse_dataset, "mouse.dc")
    ds = dc.Dataset(url, options=options)
    assert ds.shape == m.shape
    assert pickle.loads(pickle.dumps(ds)).source == url  # what the workers receive
    got = ex.gene_totals_distributed(client, url, options, n_partitions=4)
    assert np.array_equal(got, np.asarray(m.sum(axis=0)).ravel())
    assert np.array_equal(got, ex.gene_totals_local(str(mouse_dataset)))


@pytest.mark.parametrize("path,by", [("main_22.cdz", "chrom"), ("main_21.chromdata.zarr", "cell")])
def test_trace_stats_from_s3_equal_local(client, s3, stores, path, by):
    _needs("dc_chromdata_open_opts")
    s3_client, options = s3
    url = _upload(s3_client, stores / path, path)
    got = ex.trace_stats_distributed(client, url, options, by=by, n_partitions=3)
    want = ex.trace_stats_local(str(stores / path))
    assert len(want) > 3
    pd.testing.assert_frame_equal(got, want, rtol=1e-12)


@pytest.mark.parametrize("path,by", [("main_22.cdz", "chrom"), ("main_21.chromdata.zarr", "cell"),
                                     ("nocell_20.cdz", "chrom")])
def test_trace_stats_equal_local(client, stores, path, by):
    source = str(stores / path)
    got = ex.trace_stats_distributed(client, source, OPTIONS, by=by, n_partitions=3)
    want = ex.trace_stats_local(source, OPTIONS)
    assert len(want) > 3
    pd.testing.assert_frame_equal(got, want, rtol=1e-12)
