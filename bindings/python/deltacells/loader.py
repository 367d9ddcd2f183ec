"""A PyTorch-style iterable dataset over a Dataset's batches: ``CellBatches``.

It yields whole batches (``DataLoader(CellBatches(...), batch_size=None, num_workers=k)``)
read by the library's batch iterator (``Dataset.batches``: each batch one call, the next
ones decoded ahead on the library's pool). The order is declared up front: given cells, all
cells in order, or the library's block shuffle (``shuffle=True``; ``set_epoch(e)`` reseeds
it with ``seed + e``, so every epoch differs and every worker agrees on it). With
``num_workers > 0`` every DataLoader worker reads its own share: worker w of W takes a
contiguous run of about 1/W of the batches (so that a shuffled order's tiles stay with
one worker). Forked workers keep using the handle opened before the fork; spawned ones
receive it pickled (source, options, settings) and re-open it.

PyTorch is optional: when it is installed ``CellBatches`` is a
``torch.utils.data.IterableDataset`` and reads the worker from
``torch.utils.data.get_worker_info()``; without it the class is a plain iterable and
``share(worker_id, num_workers)`` is the same protocol for any other process pool.
"""
from __future__ import annotations

from typing import Any, Iterator, Literal, NamedTuple, Optional, Sequence

import numpy as np
import pyarrow as pa

from .dataset import Cells, Dataset, cells_array

try:  # PyTorch is optional; import it only if present
    from torch.utils.data import IterableDataset as _Base
    from torch.utils.data import get_worker_info as _torch_worker_info
except ImportError:  # pragma: no cover - exercised where torch is absent
    _Base = object  # type: ignore[assignment,misc]
    _torch_worker_info = None

Output = Literal["csr_matrix", "arrays", "torch_dense", "torch_csr"]


class Batch(NamedTuple):
    """One batch: ``cells`` (the global cell indices, uint64), ``X`` (rows = those cells, in
    the requested format), ``obs`` (the requested obs columns for those cells, or None)."""

    cells: np.ndarray
    X: Any
    obs: Optional[pa.Table]


def worker_share() -> tuple[int, int]:
    """(worker id, number of workers) of the calling DataLoader worker; (0, 1) outside one
    or without torch."""
    info = _torch_worker_info() if _torch_worker_info is not None else None
    return (0, 1) if info is None else (info.id, info.num_workers)


class CellBatches(_Base):  # type: ignore[misc]
    """Batches of ``batch_size`` cells of ``dataset`` in a declared order.

    ``cells``: the cells to visit, in order (None = all cells, ascending or, with
    ``shuffle=True``, in the library's block-shuffled order of ``seed`` + epoch and
    ``window_tiles``). ``X`` arrives as a ``scipy.sparse.csr_matrix``
    (``output="csr_matrix"``), numpy CSR arrays (``"arrays"``), or a torch dense /
    sparse-CSR tensor (``"torch_dense"``, ``"torch_csr"``) of ``dtype``. ``obs_columns``:
    obs columns to deliver with each batch (read once per process). ``drop_last``: leave out
    a last, shorter batch. ``read_ahead``: batches decoded ahead (0 = the library's 2).
    """

    def __init__(self, dataset: Dataset, cells: Optional[Cells] = None, *, batch_size: int = 256,
                 shuffle: bool = False, seed: int = 0, window_tiles: int = 1, read_ahead: int = 0,
                 dtype: Any = np.float32, output: Output = "csr_matrix",
                 obs_columns: Optional[Sequence[str]] = None, drop_last: bool = False):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, not {batch_size}")
        if output not in ("csr_matrix", "arrays", "torch_dense", "torch_csr"):
            raise ValueError(f"output: csr_matrix, arrays, torch_dense or torch_csr, not {output!r}")
        if shuffle and cells is not None:
            raise ValueError("shuffle=True shuffles every cell of the dataset: pass cells=None "
                             "(or shuffle your own cells and pass them)")
        self.dataset = dataset
        self._cells = None if cells is None else cells_array(cells)
        self.n_cells = dataset.n_cells if cells is None else self._cells.size
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.window_tiles = int(window_tiles)
        self.read_ahead = int(read_ahead)
        self.epoch = 0
        self.dtype = np.dtype(dtype)
        self.output = output
        self.obs_columns = list(obs_columns) if obs_columns is not None else None
        self.drop_last = drop_last
        self._obs: Optional[pa.Table] = None

    def set_epoch(self, epoch: int) -> None:
        """The epoch of the next pass: a shuffled order uses the seed ``seed + epoch``. Call it
        before creating the DataLoader's iterator (workers receive the state then)."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        """Batches in one pass over all workers together."""
        n = self.n_cells
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def order(self) -> np.ndarray:
        """The cells of one pass (this epoch), in order, before ``drop_last``."""
        if self._cells is not None:
            return self._cells
        if self.shuffle:
            return self.dataset.shuffled_order(self.seed + self.epoch, self.window_tiles)
        return np.arange(self.n_cells, dtype=np.uint64)

    def share_batches(self, worker_id: int, num_workers: int) -> range:
        """The batch numbers of worker ``worker_id`` of ``num_workers``: a contiguous run,
        the runs disjoint and together every batch of the pass once."""
        if not 0 <= worker_id < num_workers:
            raise ValueError(f"worker {worker_id} of {num_workers}")
        n = len(self)
        return range(n * worker_id // num_workers, n * (worker_id + 1) // num_workers)

    def share(self, worker_id: int, num_workers: int) -> Iterator[Batch]:
        """The batches of worker ``worker_id`` of ``num_workers`` (``share_batches``), read by
        one library batch iterator over that run of the order."""
        mine = self.share_batches(worker_id, num_workers)
        if not mine:
            return
        order = self.order()
        cells = order[mine.start * self.batch_size:min(mine.stop * self.batch_size, order.size)]
        # The run starts on a batch boundary and only the pass's last batch can be short, so
        # the iterator's batches are the pass's batches.
        with self.dataset.batches(cells, self.batch_size, read_ahead=self.read_ahead, dtype=self.dtype,
                                  format="arrays") as batches:
            for part, x in batches:
                yield Batch(part, self._convert(x), self._obs_of(part))

    def __iter__(self) -> Iterator[Batch]:
        return self.share(*worker_share())

    def _obs_of(self, cells: np.ndarray) -> Optional[pa.Table]:
        if self.obs_columns is None:
            return None
        if self._obs is None:
            self._obs = self.dataset.obs(self.obs_columns)
        return self._obs.take(pa.array(cells.astype(np.int64)))

    def _convert(self, x: Any) -> Any:
        if self.output == "arrays":
            return x
        if self.output == "csr_matrix":
            import scipy.sparse as sp

            return sp.csr_matrix((x.values, x.indices, x.indptr), shape=x.shape, copy=False)
        import torch

        if self.output == "torch_csr":
            return torch.sparse_csr_tensor(torch.from_numpy(x.indptr), torch.from_numpy(x.indices.astype(np.int64)),
                                           torch.from_numpy(x.values), size=x.shape,
                                           check_invariants=False)  # the library's CSR is valid
        dense = np.zeros(x.shape, dtype=x.values.dtype)
        rows = np.repeat(np.arange(x.shape[0]), np.diff(x.indptr))
        dense[rows, x.indices] = x.values
        return torch.from_numpy(dense)
