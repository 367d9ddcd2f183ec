"""Dataset reading and writing against scipy's reading of the same Matrix Market files."""
from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import scipy.sparse as sp

import deltacells as dc
from conftest import ROOT


def test_info_and_shape(mouse_dataset, mouse):
    m, ids = mouse
    ds = dc.Dataset(mouse_dataset)
    assert ds.shape == m.shape == (10_000, 1_000)
    assert len(ds) == m.shape[0]
    i = ds.info
    assert (i.n_cells, i.n_genes, i.nnz, i.n_tiles, i.tile_size) == (10_000, 1_000, m.nnz, 10, 1000)
    assert i.version == 2
    assert i.has_var_names and i.has_obs and not i.has_gene_order and not i.has_var_table
    assert "10000 cells x 1000 genes" in repr(ds)


def test_gather_any_cells_equals_scipy(mouse_dataset, mouse):
    m, _ = mouse
    ds = dc.Dataset(mouse_dataset)
    rng = np.random.default_rng(7)
    for cells in (rng.integers(0, m.shape[0], 3000),       # random, with repeats, across tiles
                  np.arange(m.shape[0])[::-1],               # every cell, reversed
                  [999, 1000, 0, 9999, 999],                 # tile edges, repeats
                  np.array([5], dtype=np.int32), 42):        # small ints, one int
        x = ds.gather(cells)
        want = m[np.atleast_1d(np.asarray(cells))]
        assert isinstance(x, sp.csr_matrix)
        assert x.shape == want.shape
        assert x.dtype == np.int32
        assert (x != want).nnz == 0
        assert ds.batch_nnz(cells) == want.nnz


def _reference_shuffle(seed: int, window: int, tile_cells: list[int]) -> list[int]:
    """tests/shuffled_order.py: the independent reference of the library's block shuffle."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("shuffled_order", ROOT / "tests" / "shuffled_order.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.shuffled_order(seed, window, tile_cells)


def test_batches_every_cell_in_order(mouse_dataset, mouse):
    m, _ = mouse
    ds = dc.Dataset(mouse_dataset, cache_bytes=8 << 20)
    with ds.batches(batch_size=768, read_ahead=4) as it:
        assert len(it) == 14
        assert it.peek()[0] == 768
        got = list(it)
        assert it.peek() == (0, 0)
    assert it.closed
    assert [x.shape for _, x in got] == [(768, 1000)] * 13 + [(10_000 - 13 * 768, 1000)]
    cells = np.concatenate([c for c, _ in got])
    assert cells.dtype == np.uint64 and np.array_equal(cells, np.arange(10_000))
    assert (sp.vstack([x for _, x in got]) != m).nnz == 0


def test_batches_declared_and_shuffled_orders(mouse_dataset, mouse):
    m, _ = mouse
    ds = dc.Dataset(mouse_dataset)
    rng = np.random.default_rng(3)
    cells = rng.integers(0, m.shape[0], 2500)  # any order, repeats
    got = list(ds.batches(cells, 1000, read_ahead=3, dtype=np.float32, format="arrays"))
    assert [len(c) for c, _ in got] == [1000, 1000, 500]
    for part, x in got:
        assert isinstance(x, dc.Csr) and x.values.dtype == np.float32
        want = m[part.astype(np.int64)]
        assert np.array_equal(x.indptr, want.indptr) and np.array_equal(x.indices, want.indices)
        assert np.array_equal(x.values, want.data.astype(np.float32))
    tile_cells = [t.n_cells for t in ds.tiles()]
    for seed, window in ((42, 2), (7, 1), (2**64 - 1, 4)):
        order = ds.shuffled_order(seed, window)
        assert order.tolist() == _reference_shuffle(seed, window, tile_cells)
        shuffled = list(ds.batches(batch_size=999, shuffle=True, seed=seed, window_tiles=window))
        assert np.array_equal(np.concatenate([c for c, _ in shuffled]), order)
        assert (sp.vstack([x for _, x in shuffled]) != m[order.astype(np.int64)]).nnz == 0
    assert not np.array_equal(ds.shuffled_order(1), ds.shuffled_order(2))


def test_batches_outlive_the_dataset_and_refuse_bad_arguments(mouse_dataset, mouse):
    m, _ = mouse
    ds = dc.Dataset(mouse_dataset)
    it = ds.batches(range(5000, 6000), 300)
    ds.close()  # the iterator keeps what it needs
    assert (sp.vstack([x for _, x in it]) != m[5000:6000]).nnz == 0
    ds = dc.Dataset(mouse_dataset)
    with pytest.raises(dc.OutOfRangeError) as e:
        ds.batches([1, 10_000], 1)
    assert e.value.status_name == "DC_ERR_OUT_OF_RANGE" and "cells[1] = 10000" in e.value.message
    with pytest.raises(ValueError):
        ds.batches(batch_size=0)
    with pytest.raises(ValueError):
        ds.batches([1, 2], shuffle=True)
    with pytest.raises(TypeError):
        ds.batches(dtype=np.float64)
    it = ds.batches(batch_size=10)
    next(it)
    it.close()  # stops the read-ahead; the handle is gone
    with pytest.raises(ValueError):
        next(it)


def test_cache_bytes_setting(mouse_dataset):
    lo, hi = dc.Dataset.param_bounds("cache_bytes")
    assert lo == 0 and hi >= 1 << 40
    ds = dc.Dataset(mouse_dataset, cache_bytes=0)
    assert ds.gather([1, 2]).shape == (2, 1000)
    with pytest.raises(dc.InvalidArgumentError):
        ds.set(cache_bytes=-1)
    assert pickle.loads(pickle.dumps(ds))._settings == {"cache_bytes": 0}


def test_gather_formats_and_dtypes(mouse_dataset, mouse):
    m, _ = mouse
    ds = dc.Dataset(mouse_dataset)
    cells = [3, 1500, 3, 8000]
    arrays = ds.gather(cells, format="arrays")
    want = m[cells]
    assert isinstance(arrays, dc.Csr)
    assert arrays.indptr.dtype == np.int64 and arrays.indices.dtype == np.int32
    assert np.array_equal(arrays.indptr, want.indptr)
    assert np.array_equal(arrays.indices, want.indices)
    assert np.array_equal(arrays.values, want.data)
    assert arrays.shape == want.shape
    f = ds.gather(cells, dtype=np.float32, format="csr_array")
    assert isinstance(f, sp.csr_array) and f.dtype == np.float32
    assert np.array_equal(f.toarray(), want.toarray().astype(np.float32))
    empty = ds.gather([])
    assert empty.shape == (0, 1000) and empty.nnz == 0
    assert (ds[10:20] != m[10:20]).nnz == 0
    with pytest.raises(TypeError):
        ds.gather(cells, dtype=np.float64)
    with pytest.raises(ValueError):
        ds.gather(cells, format="dense")


def test_read_tile_and_bounds(mouse_dataset, mouse):
    m, _ = mouse
    ds = dc.Dataset(mouse_dataset)
    tiles = ds.tiles()
    assert len(tiles) == 10
    assert sum(t.nnz for t in tiles) == m.nnz
    for t, b in enumerate(tiles):
        assert b.cells == range(1000 * t, 1000 * (t + 1))
        x = ds.read_tile(t)
        assert (x != m[b.first_cell:b.first_cell + b.n_cells]).nnz == 0
        assert x.nnz == b.nnz


def test_var_names_and_obs(mouse_dataset, mouse):
    m, ids = mouse
    ds = dc.Dataset(mouse_dataset)
    assert ds.var_names() == ids
    assert ds.var_name(999) == ids[999]
    obs = ds.obs()
    assert isinstance(obs, pa.Table)
    assert obs.column_names == ["_index", "n_counts", "group"]
    assert obs.column("n_counts").to_numpy().tolist() == np.asarray(m.sum(axis=1)).ravel().tolist()
    assert pa.types.is_dictionary(obs.schema.field("group").type)
    reader = ds.obs_reader(["group"])
    batches = list(reader)
    assert [b.num_rows for b in batches] == [1000] * 10  # one record batch per tile
    df = ds.obs(["_index", "group"], pandas=True)
    assert list(df.index[:2]) == ["cell0", "cell1"] and df.index.name is None
    assert isinstance(df["group"].dtype, pd.CategoricalDtype)
    with pytest.raises(dc.NotFoundError, match="no_such_column"):
        ds.obs(["no_such_column"])
    with pytest.raises(dc.NotFoundError):
        ds.var()
    with pytest.raises(dc.NotFoundError):
        ds.gene_order()


def test_gene_order_and_var_table(tmp_path, chr21):
    m, ids = chr21
    order = np.argsort(-np.asarray(m.sum(axis=0)).ravel(), kind="stable").astype(np.int32)
    var = pd.DataFrame({"gene_ids": ids, "total": np.asarray(m.sum(axis=0)).ravel().astype(np.int64)},
                       index=pd.Index([f"sym{i}" for i in range(m.shape[1])], name="symbol"))
    path = tmp_path / "ordered.dc"
    dc.write_matrix(path, m, var_names=ids, gene_order=order, var=var, tile_size=300)
    ds = dc.Dataset(path)
    assert np.array_equal(ds.gene_order(), order)
    # Output column j is input column order[j].
    assert (ds.gather(range(m.shape[0])) != m[:, order]).nnz == 0
    assert ds.var_names() == [ids[j] for j in order]
    got = ds.var(pandas=True)
    pd.testing.assert_frame_equal(got, var.iloc[order])
    assert ds.var().column_names[0] == "symbol"


def test_partitions_are_tile_aligned_and_cover_every_cell(mouse_dataset, mouse):
    m, _ = mouse
    ds = dc.Dataset(mouse_dataset)
    starts = {b.first_cell for b in ds.tiles()} | {ds.n_cells}
    for n in (1, 2, 3, 7, 10, 50):
        parts = ds.partitions(n)
        assert 1 <= len(parts) <= min(n, 10)
        assert [c for p in parts for c in p] == list(range(ds.n_cells))
        assert all(p.start in starts and p.stop in starts for p in parts)
    nnz = [ds.batch_nnz(p) for p in ds.partitions(2)]
    assert sum(nnz) == m.nnz and min(nnz) > 0.3 * m.nnz
    with pytest.raises(ValueError):
        ds.partitions(0)


def test_pickle_reopens_with_settings(mouse_dataset, mouse):
    m, _ = mouse
    ds = dc.Dataset(mouse_dataset, threads=1, tile_cache=0)
    ds.set(verify_crc=0)
    clone = pickle.loads(pickle.dumps(ds))
    assert clone is not ds and clone.source == ds.source
    assert clone._settings == {"threads": 1, "tile_cache": 0, "verify_crc": 0}
    assert (clone.gather([1, 2, 9999]) != m[[1, 2, 9999]]).nnz == 0
    with pytest.raises(TypeError, match="unknown dataset setting"):
        ds.set(nonsense=1)
    with pytest.raises(dc.InvalidArgumentError):
        ds.set(threads=-1)


def test_pickle_carries_the_open_options(mouse_dataset, mouse, stores):
    """Handles pickle as (source, options): options given as a mapping travel as the
    ``key=value`` strings the C API takes, and the clone re-opens with them."""
    m, _ = mouse
    options = {"aws_region": "us-east-1", "allow_http": True}
    strings = ["aws_region=us-east-1", "allow_http=true"]
    for kind, source, opts_fn in ((dc.Dataset, mouse_dataset, "dc_dataset_open_opts"),
                                  (dc.ChromData, stores / "main_22.cdz", "dc_chromdata_open_opts")):
        if not hasattr(dc._capi, opts_fn):  # before the object-storage issue: refused, named
            with pytest.raises(dc.UnsupportedError) as e:
                kind(source, options=options)
            assert e.value.status_name == "DC_ERR_UNSUPPORTED" and opts_fn in str(e.value)
            continue
        h = kind(source, options=options)
        reopen, args = h.__reduce__()
        assert args[:2] == (str(source), strings)
        clone = pickle.loads(pickle.dumps(h))
        assert clone._options == strings and clone.source == h.source
        if kind is dc.Dataset:
            assert (clone.gather([0, 9999]) != m[[0, 9999]]).nnz == 0
        else:
            assert clone.read_spots(["spot_id"]).equals(h.read_spots(["spot_id"]))
    with pytest.raises(TypeError, match="mapping"):
        dc.Dataset(mouse_dataset, options="aws_region=us-east-1")


def test_parameter_bounds_are_what_set_accepts(mouse_dataset):
    ds = dc.Dataset(mouse_dataset)
    assert dc.Dataset.param_bounds("verify_crc") == (0, 1)
    lo, hi = dc.Dataset.param_bounds("tile_cache")
    ds.set(tile_cache=lo)
    with pytest.raises(dc.InvalidArgumentError):
        ds.set(tile_cache=lo - 1)
    assert dc.Writer.param_bounds("n_chunks") == (1, 65536)
    lo, hi = dc.Writer.param_bounds("zstd_level")
    assert lo < 0 and hi >= 19  # the bundled zstd's range
    with pytest.raises(TypeError, match="unknown writer setting"):
        dc.Writer.param_bounds("nonsense")


def test_closed_handle_and_context_manager(mouse_dataset):
    with dc.Dataset(mouse_dataset) as ds:
        obs = ds.obs_reader(["n_counts"])
    assert ds.closed
    assert obs.read_all().num_rows == 10_000  # streams outlive their handle
    with pytest.raises(ValueError, match="closed"):
        ds.gather([0])
    ds.close()  # idempotent


def test_negative_and_out_of_range_cells(mouse_dataset):
    ds = dc.Dataset(mouse_dataset)
    with pytest.raises(IndexError, match="-1"):
        ds.gather([0, -1])
    with pytest.raises(dc.OutOfRangeError, match="10000") as e:
        ds.gather([0, 10_000])
    assert e.value.status_name == "DC_ERR_OUT_OF_RANGE" and isinstance(e.value, IndexError)
    with pytest.raises(dc.OutOfRangeError):
        ds.read_tile(10)
    with pytest.raises(TypeError):
        ds.gather([0.5])


def test_writer_refuses_non_integer_counts_and_abandons(tmp_path, chr21):
    m, _ = chr21
    path = tmp_path / "bad.dc"
    norm = m.astype(np.float32)
    norm.data /= 3
    with pytest.raises(ValueError, match="not an integer"):
        with dc.Writer(path, m.shape[1]) as w:
            w.append(norm)
    assert not path.exists()  # abandoned: nothing at the target
    # Integral floats (a common AnnData X) convert exactly.
    dc.write_matrix(path, m.astype(np.float64), tile_size=500)
    assert (dc.Dataset(path).gather(range(m.shape[0])) != m).nnz == 0


def test_writer_exists_then_overwrite(tmp_path, chr21):
    m, _ = chr21
    path = tmp_path / "x.dc"
    dc.write_matrix(path, m[:10])
    w = dc.Writer(path, m.shape[1])
    with pytest.raises(dc.ExistsError) as e:  # checked by the first append (all or nothing)
        w.append(m[:20])
    assert isinstance(e.value, FileExistsError) and str(path) in e.value.message
    assert dc.Dataset(path).n_cells == 10
    w.set(overwrite=1)
    w.append(m[:20])
    w.finish()
    w.close()
    assert dc.Dataset(path).n_cells == 20


def test_writer_streams_blocks_and_dense_input(tmp_path, chr21, monkeypatch):
    import deltacells.writer as dw

    m, _ = chr21
    monkeypatch.setattr(dw, "ROWS_PER_APPEND", 100)  # many append_csr calls
    path = tmp_path / "blocks.dc"
    with dc.Writer(path, m.shape[1], tile_size=128) as w:
        w.append(m[:500])
        w.append(m[500:].toarray())  # dense rows
        w.append(sp.csr_matrix((0, m.shape[1]), dtype=np.int32))
        assert w.n_rows == m.shape[0]
    assert (dc.Dataset(path).gather(range(m.shape[0])) != m).nnz == 0
    with pytest.raises(ValueError, match="columns"):
        with dc.Writer(tmp_path / "w.dc", 10) as w:
            w.append(m)
