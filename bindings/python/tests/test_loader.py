"""The PyTorch-style adapter: worker shares, outputs, forked and spawned workers; with
torch's DataLoader when torch is installed (CI does not install it: see the README)."""
from __future__ import annotations

import multiprocessing as mp
import pickle

import numpy as np
import pytest
import scipy.sparse as sp

import deltacells as dc
from deltacells.loader import Batch, CellBatches, worker_share


def _rows(m, batches):
    cells = np.concatenate([b.cells for b in batches]).astype(np.int64)
    x = sp.vstack([b.X for b in batches]).tocsr()
    return cells, x


# A child forked after the parent used the pool gets its own pool (src/fork.rs); the timeout
# turns a regression (a child waiting for threads the fork did not copy) into a failure, not a hang.
FORK_TIMEOUT = 60


def test_shares_are_disjoint_and_complete(mouse_dataset, mouse):
    m, _ = mouse
    ds = dc.Dataset(mouse_dataset)
    order = np.random.default_rng(2).permutation(ds.n_cells)[:2345]
    cb = CellBatches(ds, order, batch_size=100, dtype=np.int32)
    assert len(cb) == 24
    for workers in (1, 2, 3, 5, 30):
        seen = []
        for w in range(workers):
            batches = list(cb.share(w, workers))
            assert len(batches) == len(cb.share_batches(w, workers))
            assert [len(b.cells) for b in batches][:-1] == [100] * (len(batches) - 1)
            for b in batches:
                assert isinstance(b, Batch) and isinstance(b.X, sp.csr_matrix)
                assert (b.X != m[b.cells.astype(np.int64)]).nnz == 0
            seen.extend(np.concatenate([b.cells for b in batches]).tolist() if batches else [])
        assert seen == order.tolist()  # contiguous shares: worker order is the declared order
    assert worker_share() == (0, 1)  # outside a DataLoader worker
    with pytest.raises(ValueError):
        list(cb.share(3, 3))


def test_shuffled_epochs(mouse_dataset, mouse):
    m, _ = mouse
    ds = dc.Dataset(mouse_dataset)
    cb = CellBatches(ds, batch_size=1000, shuffle=True, seed=5, window_tiles=2, read_ahead=2, output="arrays")
    passes = []
    for epoch in (0, 1):
        cb.set_epoch(epoch)
        want = ds.shuffled_order(5 + epoch, 2)
        assert np.array_equal(cb.order(), want)
        batches = list(cb)
        assert np.array_equal(np.concatenate([b.cells for b in batches]), want)
        for b in batches:
            got = sp.csr_matrix((b.X.values, b.X.indices, b.X.indptr), shape=b.X.shape)
            assert (got != m[b.cells.astype(np.int64)]).nnz == 0
        passes.append(want)
    assert not np.array_equal(passes[0], passes[1])
    with pytest.raises(ValueError):
        CellBatches(ds, [1, 2], shuffle=True)


def test_drop_last_obs_and_outputs(mouse_dataset, mouse):
    m, _ = mouse
    ds = dc.Dataset(mouse_dataset)
    cb = CellBatches(ds, range(250), batch_size=100, drop_last=True, obs_columns=["n_counts"], output="arrays")
    batches = list(cb)
    assert len(cb) == len(batches) == 2
    assert [len(cb.share_batches(w, 2)) for w in (0, 1)] == [1, 1]
    for b in batches:
        assert isinstance(b.X, dc.Csr) and b.X.values.dtype == np.float32
        want = np.asarray(m[b.cells.astype(np.int64)].sum(axis=1)).ravel()
        assert b.obs.column("n_counts").to_pylist() == want.tolist()
    with pytest.raises(ValueError):
        CellBatches(ds, output="dense")


def _collect(args):
    cb, w, n = args
    return [(b.cells, b.X) for b in cb.share(w, n)]


def _check_union(shares, m, n_cells):
    cells = np.concatenate([c for share in shares for c, _ in share]).astype(np.int64)
    assert sorted(cells.tolist()) == list(range(n_cells))
    x = sp.vstack([x for share in shares for _, x in share]).tocsr()
    assert (x != m[cells]).nnz == 0


def test_spawned_workers_reopen_the_pickled_handle(mouse_dataset, mouse):
    m, _ = mouse
    ds = dc.Dataset(mouse_dataset, threads=1, cache_bytes=1 << 20)
    cb = CellBatches(ds, batch_size=512, dtype=np.int32)
    clone = pickle.loads(pickle.dumps(cb))
    assert clone.dataset.source == ds.source and clone.dataset is not ds
    assert clone.dataset._settings == {"threads": 1, "cache_bytes": 1 << 20}
    with mp.get_context("spawn").Pool(2) as pool:
        shares = pool.map_async(_collect, [(cb, w, 3) for w in range(3)]).get(FORK_TIMEOUT)
    _check_union(shares, m, ds.n_cells)


_FORKED: dict = {}  # what forked children inherit (not pickled: fork copies memory)


class _WorkerInfo:
    """What torch.utils.data.get_worker_info() returns in a DataLoader worker."""

    def __init__(self, id: int, num_workers: int):
        self.id, self.num_workers = id, num_workers


def _forked_worker(worker: tuple[int, int]):
    # The DataLoader protocol without torch: in worker `id`, get_worker_info() names it and
    # the worker iterates the dataset object it inherited.
    import deltacells.loader as loader

    loader._torch_worker_info = lambda: _WorkerInfo(*worker)
    return [(b.cells, b.X) for b in iter(_FORKED["cb"])]


def test_forked_workers_use_the_handle_opened_before_the_fork(mouse_dataset, mouse):
    m, _ = mouse
    ds = dc.Dataset(mouse_dataset)  # the library's pool, default threads
    # Used in the parent first: its pool and cache exist when the children are forked.
    assert (sp.vstack([x for _, x in ds.batches(range(3000), 1000)]) != m[:3000]).nnz == 0
    cb = CellBatches(ds, batch_size=700, dtype=np.int32, shuffle=True, seed=11)
    _FORKED["cb"] = cb
    with mp.get_context("fork").Pool(3) as pool:
        shares = pool.map_async(_forked_worker, [(w, 3) for w in range(3)], chunksize=1).get(FORK_TIMEOUT)
    assert [len(s) for s in shares] == [len(cb.share_batches(w, 3)) for w in range(3)]
    got = np.concatenate([c for share in shares for c, _ in share])
    assert np.array_equal(got, ds.shuffled_order(11))  # contiguous shares in worker order
    _check_union(shares, m, ds.n_cells)
    # The parent's handle still works after its children ran.
    assert (ds.gather([9999, 0]) != m[[9999, 0]]).nnz == 0


def test_forked_workers_single_threaded_handle(mouse_dataset, mouse):
    m, _ = mouse
    ds = dc.Dataset(mouse_dataset, threads=1)
    ds.gather(range(0, 10_000, 7))  # used in the parent (single-threaded: no pool threads)
    cb = CellBatches(ds, batch_size=900, dtype=np.int32)
    _FORKED["cb"] = cb
    with mp.get_context("fork").Pool(2) as pool:
        shares = pool.map_async(_forked_worker, [(w, 2) for w in range(2)], chunksize=1).get(FORK_TIMEOUT)
    _check_union(shares, m, ds.n_cells)


def test_torch_dataloader(mouse_dataset, mouse):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, IterableDataset

    m, _ = mouse
    ds = dc.Dataset(mouse_dataset, threads=1)
    cb = CellBatches(ds, batch_size=256, output="torch_dense", obs_columns=["n_counts"])
    assert isinstance(cb, IterableDataset)
    got = []
    for cells, x, _obs in DataLoader(cb, batch_size=None, num_workers=2, multiprocessing_context="fork"):
        assert isinstance(x, torch.Tensor) and x.dtype == torch.float32
        assert np.array_equal(x.numpy(), m[np.asarray(cells).astype(np.int64)].toarray())
        got.extend(np.asarray(cells).tolist())
    assert sorted(got) == list(range(ds.n_cells))
    b = next(iter(CellBatches(ds, batch_size=7, output="torch_csr")))
    assert b.X.layout == torch.sparse_csr and np.array_equal(b.X.to_dense().numpy(), m[:7].toarray())
