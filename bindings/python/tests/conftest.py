"""Fixtures of the Python package's tests.

Expectations are independent of the library: matrices read by scipy from the bundled
Matrix Market files, AnnData files written and read by anndata (tests/data/make_h5ad.py),
ChromData stores and their pandas answers written by tests/chromdata/make_stores.py, and
stores read back by tests/chromdata/read_store.py (pyarrow + zarr-python only).
"""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRNA = ROOT / "tests" / "data" / "scrna"

import deltacells as dc  # noqa: E402


if os.environ.get("DELTACELLS_EXPECT_BUNDLED") == "1":  # scripts/test-python.sh: the wheel
    assert "site-packages" in str(dc.LIBRARY_PATH), f"testing {dc.LIBRARY_PATH}, not the installed wheel"


def pytest_report_header(config):
    return [f"deltacells {dc.__version__}, library {dc.LIBRARY_PATH}"]


def read_mtx(folder: Path):
    """(cells x genes CSR int32, gene names) of a 10x folder, read by scipy alone."""
    import scipy.io
    import scipy.sparse as sp

    m = sp.csr_matrix(scipy.io.mmread(str(folder / "matrix.mtx.gz")).T).astype(np.int32)
    m.sort_indices()
    with gzip.open(folder / "features.tsv.gz", "rt") as f:
        ids = [line.split("\t")[0] for line in f.read().splitlines()]
    return m, ids


@pytest.fixture(scope="session")
def mouse():
    """10,000 cells x 1,000 genes, 691,914 nonzeros (real counts)."""
    return read_mtx(SCRNA / "mouse-10k-cells-1k-genes")


@pytest.fixture(scope="session")
def chr21():
    """1,107 cells x 507 genes (real counts)."""
    return read_mtx(SCRNA / "10x-v3-1107-cells-chr21")


@pytest.fixture(scope="session")
def mouse_dataset(tmp_path_factory, mouse):
    """The mouse matrix written by the package with small tiles (1,000 cells, 4 chunks), gene
    ids as var names, and an obs table; returns its path."""
    import pandas as pd

    m, ids = mouse
    path = tmp_path_factory.mktemp("ds") / "mouse.dc"
    obs = pd.DataFrame({"n_counts": np.asarray(m.sum(axis=1)).ravel().astype(np.int64),
                        "group": pd.Categorical(np.array(["a", "b", "c"])[np.arange(m.shape[0]) % 3])},
                       index=pd.Index([f"cell{i}" for i in range(m.shape[0])]))
    dc.write_matrix(path, m, var_names=ids, obs=obs, tile_size=1000, n_chunks=4, zstd_level=3)
    return path


@pytest.fixture(scope="session")
def h5ad_dir(tmp_path_factory):
    """AnnData files written by anndata (make_h5ad.py): csr, csc, dense, float, csr64."""
    out = tmp_path_factory.mktemp("h5ad")
    subprocess.run([sys.executable, str(ROOT / "tests" / "data" / "make_h5ad.py"),
                    str(SCRNA / "10x-v3-1107-cells-chr21"), str(out)], check=True, stdout=subprocess.DEVNULL)
    return out


@pytest.fixture(scope="session")
def stores(tmp_path_factory):
    """ChromData stores of every layout, directory and .cdz, with their pandas answers."""
    out = tmp_path_factory.mktemp("stores")
    subprocess.run([sys.executable, str(ROOT / "tests" / "chromdata" / "make_stores.py"), str(out)],
                   check=True, stdout=subprocess.DEVNULL)
    return out


@pytest.fixture(scope="session")
def stores_manifest(stores):
    return json.loads((stores / "manifest.json").read_text())


def read_expected(path: Path) -> pa.Table:
    return pq.read_table(path).replace_schema_metadata(None)


def assert_same_table(got: pa.Table, want: pa.Table, what: str = "") -> None:
    """Equal names, types and values (row order significant, chunking not); floats by bit
    pattern (NaN equals NaN, -0 differs from 0)."""
    assert got.column_names == want.column_names, f"{what}: columns {got.column_names} != {want.column_names}"
    assert got.num_rows == want.num_rows, f"{what}: {got.num_rows} rows, want {want.num_rows}"
    for name in got.column_names:
        g, w = got.column(name).combine_chunks(), want.column(name).combine_chunks()
        assert g.type == w.type, f"{what}: type of {name}: {g.type} != {w.type}"
        gn = g.is_null().to_numpy(zero_copy_only=False)
        assert np.array_equal(gn, w.is_null().to_numpy(zero_copy_only=False)), f"{what}: nulls of {name}"
        if pa.types.is_floating(g.type):
            bits = np.uint32 if g.type == pa.float32() else np.uint64
            ga = g.to_numpy(zero_copy_only=False)[~gn].view(bits)
            wa = w.to_numpy(zero_copy_only=False)[~gn].view(bits)
            assert np.array_equal(ga, wa), f"{what}: values of {name}"
        else:
            assert g.to_pylist() == w.to_pylist(), f"{what}: values of {name}"
