"""AnnData in, the same matrix / obs / var out: every X layout make_h5ad.py writes, read by
anndata in memory and in backed mode."""
from __future__ import annotations

import anndata as ad
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import deltacells as dc


def _x_csr(a: ad.AnnData) -> sp.csr_matrix:
    x = a.X[:] if a.isbacked else a.X
    return sp.csr_matrix(x).astype(np.int64)


@pytest.mark.parametrize("variant", ["csr", "csc", "dense", "float", "csr64"])
@pytest.mark.parametrize("backed", [False, True])
def test_write_anndata_round_trip(tmp_path, h5ad_dir, variant, backed):
    path = h5ad_dir / f"{variant}.h5ad"
    a = ad.read_h5ad(path, backed="r" if backed else None)
    out = tmp_path / f"{variant}.dc"
    dc.write_anndata(a, out, tile_size=400)
    ref = ad.read_h5ad(path)  # the independent expectation: anndata's own reading
    want = _x_csr(ref)
    ds = dc.Dataset(out)
    assert ds.shape == ref.shape
    got = ds.gather(range(ds.n_cells))
    assert (got.astype(np.int64) != want).nnz == 0
    assert ds.var_names() == list(ref.var_names)
    pd.testing.assert_frame_equal(ds.obs(pandas=True), ref.obs)
    pd.testing.assert_frame_equal(ds.var(pandas=True), ref.var)


def test_layer_and_gene_order(tmp_path, h5ad_dir):
    a = ad.read_h5ad(h5ad_dir / "csr.h5ad")
    a.layers["counts"] = a.X.copy()
    a.X = a.X.astype(np.float32)
    a.X.data = np.log1p(a.X.data)  # normalised X: refused, the counts layer is taken
    with pytest.raises(ValueError, match="counts layer"):
        dc.write_anndata(a, tmp_path / "x.dc")
    assert not (tmp_path / "x.dc").exists()
    order = np.arange(a.n_vars)[::-1].astype(np.int32)
    dc.write_anndata(a, tmp_path / "layer.dc", layer="counts", gene_order=order)
    ds = dc.Dataset(tmp_path / "layer.dc")
    assert (ds.gather(range(a.n_obs)) != a.layers["counts"][:, order]).nnz == 0
    assert ds.var_names() == list(a.var_names[order])


def test_gather_matches_anndata_backed_rows(tmp_path, h5ad_dir):
    path = h5ad_dir / "csr.h5ad"
    out = tmp_path / "csr.dc"
    dc.write_anndata(ad.read_h5ad(path), out, tile_size=200)
    ds = dc.Dataset(out)
    backed = ad.read_h5ad(path, backed="r")
    cells = np.sort(np.random.default_rng(3).choice(backed.n_obs, 100, replace=False))
    want = sp.csr_matrix(backed.X[cells])
    assert (ds.gather(cells) != want).nnz == 0
