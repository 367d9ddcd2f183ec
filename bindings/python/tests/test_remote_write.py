"""Writers to object stores (contract §7): ``ChromDataWriter(url, options=...)`` against the S3
test server (scripts/remote_servers.py, moto). The uploaded objects, downloaded with boto3
(independent of the library), are byte for byte the files of a local write of the same spots;
an existing store needs ``overwrite``; bad options are refused."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import deltacells as dc
from conftest import ROOT

CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


@pytest.fixture(scope="module")
def s3():
    """(boto3 client, options for the library) of an S3 server with the bucket "stores"."""
    if not hasattr(dc._capi, "dc_chromdata_writer_create_opts"):
        pytest.skip("this libdeltacells has no dc_chromdata_writer_create_opts")
    boto3 = pytest.importorskip("boto3")  # moto[server] brings it: scripts/setup.sh
    server = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "remote_servers.py"), "--bucket", "stores"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        line = server.stdout.readline()
        assert line, "scripts/remote_servers.py ended before listening (is moto[server] installed?)"
        endpoint = json.loads(line)["s3"]
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **CREDENTIALS)
        yield client, {"aws_endpoint": endpoint, "aws_region": "us-east-1", "allow_http": True, **CREDENTIALS}
    finally:
        server.stdin.close()  # the servers end when their stdin closes
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _spots(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(5)
    df = pd.DataFrame({
        "chrom": np.array(["chr1", "chr2", "chrX"])[rng.integers(0, 3, n)],
        "start": rng.integers(0, 10, n) * 1000,
        "trace_id": [f"t{k}" for k in rng.integers(0, 7, n)],
        "cell_id": [f"c{k}" for k in rng.integers(0, 3, n)],
        "x": rng.normal(size=n), "y": rng.normal(size=n), "z": rng.normal(size=n),
    })
    df["end"] = df["start"] + 1000
    return df


def _files(path) -> dict:
    if path.is_file():
        return {"": path.read_bytes()}
    return {f.relative_to(path).as_posix(): f.read_bytes() for f in path.rglob("*") if f.is_file()}


def _download(client, key: str, dest) -> None:
    listed = client.list_objects_v2(Bucket="stores", Prefix=key).get("Contents", [])
    for obj in listed:
        rel = obj["Key"][len(key):].lstrip("/")
        target = dest / rel if rel else dest
        target.parent.mkdir(parents=True, exist_ok=True)
        client.download_file("stores", obj["Key"], str(target))


@pytest.mark.parametrize("name,layout", [("a.cdz", "primary_coords"), ("b.chromdata.zarr", "partitioned")])
def test_writer_to_s3_uploads_the_local_store(s3, tmp_path, name, layout):
    client, options = s3
    df = _spots(2000)
    with dc.ChromDataWriter(f"s3://stores/{name}", options=options, layout=layout) as w:
        w.append(df.iloc[:700])
        w.append(df.iloc[700:])
    with dc.ChromDataWriter(tmp_path / f"local-{name}", layout=layout) as w:
        w.append(df.iloc[:700])
        w.append(df.iloc[700:])
    got = tmp_path / name
    _download(client, name, got)
    assert _files(got) == _files(tmp_path / f"local-{name}")
    assert dc.ChromData(got).info.n_spots == 2000
    # Existing: refused without overwrite, replaced with it.
    with pytest.raises(dc.ExistsError, match=f"s3://stores/{name}"):
        with dc.ChromDataWriter(f"s3://stores/{name}", options=options) as w:
            w.append(df.iloc[:10])
    with dc.ChromDataWriter(f"s3://stores/{name}", options=options, overwrite=True) as w:
        w.append(df.iloc[:10])
    fresh = tmp_path / f"fresh-{name}"
    _download(client, name, fresh)
    assert dc.ChromData(fresh).info.n_spots == 10


def test_writer_options_are_checked(s3):
    _, options = s3
    with pytest.raises(dc.InvalidArgumentError, match="no_such_option"):
        dc.ChromDataWriter("s3://stores/x.cdz", options={**options, "no_such_option": 1})
    with pytest.raises(dc.UnsupportedError):
        dc.ChromDataWriter("https://127.0.0.1:9/x.cdz", options={"retries": 0})
