"""A PyTorch-style iterable dataset over a Dataset's batches: ``CellBatches``.

It yields whole batches (``DataLoader(CellBatches(...), batch_size=None, num_workers=k)``),
so the library gathers each batch in one call. With ``num_workers > 0`` every DataLoader
worker reads its own share: worker w of W takes batches w, w + W, w + 2W, ... of the
declared order. Forked workers keep using the handle opened before the fork; spawned ones
receive it pickled (source + settings) and re-open it.

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

    ``cells``: the cells to visit, in order (None = all cells in order). ``X`` arrives as a
    ``scipy.sparse.csr_matrix`` (``output="csr_matrix"``), numpy CSR arrays (``"arrays"``),
    or a torch dense / sparse-CSR tensor (``"torch_dense"``, ``"torch_csr"``) of ``dtype``.
    ``obs_columns``: obs columns to deliver with each batch (read once per process).
    ``drop_last``: leave out a last, shorter batch.
    """

    def __init__(self, dataset: Dataset, cells: Optional[Cells] = None, *, batch_size: int = 256,
                 dtype: Any = np.float32, output: Output = "csr_matrix",
                 obs_columns: Optional[Sequence[str]] = None, drop_last: bool = False):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, not {batch_size}")
        if output not in ("csr_matrix", "arrays", "torch_dense", "torch_csr"):
            raise ValueError(f"output: csr_matrix, arrays, torch_dense or torch_csr, not {output!r}")
        self.dataset = dataset
        self.cells = np.arange(dataset.n_cells, dtype=np.uint64) if cells is None else cells_array(cells)
        self.batch_size = int(batch_size)
        self.dtype = np.dtype(dtype)
        self.output = output
        self.obs_columns = list(obs_columns) if obs_columns is not None else None
        self.drop_last = drop_last
        self._obs: Optional[pa.Table] = None

    def __len__(self) -> int:
        """Batches in one pass over all workers together."""
        n = self.cells.size
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def batch_cells(self, k: int) -> np.ndarray:
        """The cells of batch k of the declared order."""
        return self.cells[k * self.batch_size:(k + 1) * self.batch_size]

    def share(self, worker_id: int, num_workers: int) -> Iterator[Batch]:
        """The batches of worker ``worker_id`` of ``num_workers``: k = worker_id, worker_id +
        num_workers, ... -- disjoint shares that together are every batch once."""
        if not 0 <= worker_id < num_workers:
            raise ValueError(f"worker {worker_id} of {num_workers}")
        mine = range(worker_id, len(self), num_workers)
        if not mine:
            return
        cells = np.concatenate([self.batch_cells(k) for k in mine])
        # Read as one stream of batches of the declared size: the boundaries coincide with
        # the shares' batches because only the order's last batch can be short.
        for part, x in self.dataset.batches(cells, self.batch_size, dtype=self.dtype, format="arrays"):
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
