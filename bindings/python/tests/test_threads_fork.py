"""Thread safety as in C (one handle, many threads; errors thread-local), and handles opened
before a fork used in the forked children."""
from __future__ import annotations

import multiprocessing as mp
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import deltacells as dc
from conftest import assert_same_table

FORK_TIMEOUT = 30  # seconds: a child that hangs fails the test instead of blocking it


def test_one_dataset_many_threads(mouse_dataset, mouse):
    m, _ = mouse
    ds = dc.Dataset(mouse_dataset, tile_cache=3)
    rng = np.random.default_rng(1)
    jobs = [rng.integers(0, m.shape[0], 500) for _ in range(32)]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(ds.gather, jobs))
    for cells, x in zip(jobs, results):
        assert (x != m[cells]).nnz == 0


def test_errors_are_thread_local(mouse_dataset):
    ds = dc.Dataset(mouse_dataset)
    barrier = threading.Barrier(8)
    messages = {}

    def work(k: int) -> None:
        barrier.wait()
        for _ in range(20):
            if k % 2:
                ds.gather([1, 2, 3])  # successes interleaved with other threads' failures
            else:
                bad = 10_000 + k
                with pytest.raises(dc.OutOfRangeError) as e:
                    ds.gather([0, bad])
                messages.setdefault(k, set()).add(e.value.message)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(messages) == [0, 2, 4, 6]
    for k, msgs in messages.items():
        assert len(msgs) == 1 and str(10_000 + k) in next(iter(msgs))


def test_chromdata_many_threads(stores):
    cd = dc.ChromData(stores / "main_22.cdz")
    traces = cd.categories("spots", "trace_id").to_pylist()
    want = {t: cd.get_trace(t) for t in traces}
    with ThreadPoolExecutor(6) as pool:
        got = list(pool.map(cd.get_trace, traces * 8))
    for t, table in zip(traces * 8, got):
        assert_same_table(table, want[t], str(t))


_FORKED: dict = {}  # what the forked children inherit (not pickled: fork copies memory)


def _child_sum(_: int) -> int:
    ds = _FORKED["ds"]
    return int(ds.gather(range(ds.n_cells)).sum())


def _fork_sums(ds: dc.Dataset, n: int = 4, timeout: float = FORK_TIMEOUT) -> list[int]:
    _FORKED["ds"] = ds
    with mp.get_context("fork").Pool(2) as pool:
        return pool.map_async(_child_sum, range(n), chunksize=1).get(timeout)


def test_handle_opened_before_fork_single_threaded(mouse_dataset, mouse):
    m, _ = mouse
    ds = dc.Dataset(mouse_dataset, threads=1)
    ds.gather([0, 5000])  # used in the parent first
    assert _fork_sums(ds) == [int(m.sum())] * 4


def test_handle_opened_before_fork_with_the_pool(mouse_dataset, mouse):
    m, _ = mouse
    ds = dc.Dataset(mouse_dataset)
    ds.gather(range(3000))  # the parent's pool threads exist before the fork
    assert _fork_sums(ds, timeout=10) == [int(m.sum())] * 4
