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


def test_shares_are_disjoint_and_complete(mouse_dataset, mouse):
    m, _ = mouse
    ds = dc.Dataset(mouse_dataset)
    order = np.random.default_rng(2).permutation(ds.n_cells)[:2345]
    cb = CellBatches(ds, order, batch_size=100, dtype=np.int32)
    assert len(cb) == 24
    for workers in (1, 2, 3, 5):
        seen = []
        for w in range(workers):
            batches = list(cb.share(w, workers))
            assert [len(b.cells) for b in batches][:-1] == [100] * (len(batches) - 1)
            for b in batches:
                assert isinstance(b, Batch) and isinstance(b.X, sp.csr_matrix)
                assert (b.X != m[b.cells.astype(np.int64)]).nnz == 0
            seen.extend(np.concatenate([b.cells for b in batches]).tolist() if batches else [])
        assert sorted(seen) == sorted(order.tolist())
    assert worker_share() == (0, 1)  # outside a DataLoader worker
    with pytest.raises(ValueError):
        list(cb.share(3, 3))


def test_drop_last_obs_and_outputs(mouse_dataset, mouse):
    m, _ = mouse
    ds = dc.Dataset(mouse_dataset)
    cb = CellBatches(ds, range(250), batch_size=100, drop_last=True, obs_columns=["n_counts"], output="arrays")
    batches = list(cb)
    assert len(cb) == len(batches) == 2
    for b in batches:
        assert isinstance(b.X, dc.Csr) and b.X.values.dtype == np.float32
        want = np.asarray(m[b.cells.astype(np.int64)].sum(axis=1)).ravel()
        assert b.obs.column("n_counts").to_pylist() == want.tolist()
    with pytest.raises(ValueError):
        CellBatches(ds, output="dense")


def _collect(args):
    cb, w, n = args
    return [(b.cells, b.X) for b in cb.share(w, n)]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_worker_processes(mouse_dataset, mouse, method):
    m, _ = mouse
    # threads=1 keeps forked children off the library pool until it is fork-safe
    # (hardening issue); spawned children re-open the pickled handle.
    ds = dc.Dataset(mouse_dataset, threads=1)
    cb = CellBatches(ds, batch_size=512, dtype=np.int32)
    clone = pickle.loads(pickle.dumps(cb))
    assert clone.dataset.source == ds.source and clone.dataset is not ds
    with mp.get_context(method).Pool(2) as pool:
        shares = pool.map_async(_collect, [(cb, w, 3) for w in range(3)]).get(120)
    cells = np.concatenate([c for share in shares for c, _ in share]).astype(np.int64)
    assert sorted(cells.tolist()) == list(range(ds.n_cells))
    x = sp.vstack([x for share in shares for _, x in share]).tocsr()
    assert (x != m[cells]).nnz == 0


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
