"""ChromData reading against the pandas answers of make_stores.py (every layout, directory
and .cdz), and writing checked by the independent reader read_store.py."""
from __future__ import annotations

import functools
import pickle
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import deltacells as dc
from conftest import ROOT, assert_same_table, read_expected

ERRORS = {"NotFound": dc.NotFoundError, "Format": dc.FormatError, "Unsupported": dc.UnsupportedError}


def _columns(q):
    c = q.get("columns", "all")
    return None if c == "all" else c


def run(cd: dc.ChromData, q: dict) -> pa.Table:
    kind = q["kind"]
    if kind == "get_trace":
        return cd.get_trace(q["id"], _columns(q))
    if kind == "get_cell":
        return cd.get_cell(q["id"], _columns(q))
    if kind == "get_chrom":
        return cd.get_chrom(q["id"], _columns(q))
    if kind == "read_spots":
        return cd.read_spots(_columns(q), original_order=q["original_order"])
    if kind == "by_spot_id":
        t = cd.read_spots()
        return t.take(pc.sort_indices(t, [("spot_id", "ascending")]))
    if kind == "table":
        return cd.table(q["name"])
    if kind == "categories":
        return pa.table({"category": cd.categories(q["table"], q["column"])})
    if kind == "keys":
        return pa.table({"key": pa.array(cd.keys(q["what"]), type=pa.string())})
    raise AssertionError(f"unknown query kind {kind}")


def test_every_store_answers_like_pandas(stores, stores_manifest):
    expected = functools.lru_cache(maxsize=None)(read_expected)
    checked = 0
    for s in stores_manifest["stores"]:
        cd = dc.ChromData(stores / s["path"])
        assert cd.info.n_spots == s["n_spots"]
        assert cd.info.has_cell_id == s["has_cell_id"]
        assert cd.info.layout == s["layout"].replace("primary+coords", "primary_coords")
        int_traces = pa.types.is_integer(cd.categories("spots", "trace_id").type)
        for q in s["queries"]:
            what = f"{s['path']} {q}"
            if q.get("error") and q["kind"] == "get_trace" and int_traces and isinstance(q["id"], str):
                # Ids cross the C API as text (an integer category as its decimal text), so
                # the text "100" names trace 100: the Rust API's type check has no C twin.
                assert_same_table(run(cd, q), cd.get_trace(int(q["id"])), what)
                continue
            if "error" in q:
                with pytest.raises(ERRORS[q["error"]]) as e:
                    run(cd, q)
                assert e.value.message, what
            else:
                got = run(cd, q)
                assert got.schema.metadata is None, what
                assert_same_table(got, expected(stores / s["expected_dir"] / q["file"]), what)
            checked += 1
    assert checked > 1000


ERRORS_ALL = dict(ERRORS, InvalidArgument=dc.InvalidArgumentError)


def _decoded(t: pa.Table) -> pa.Table:
    cols = [c.combine_chunks() for c in t.columns]
    cols = [c.dictionary_decode() if pa.types.is_dictionary(c.type) else c for c in cols]
    return pa.table(dict(zip(t.column_names, cols)))


def test_pass_through_content_like_the_manifest(stores, stores_manifest):
    """attrs / array / result_table (dc_chromdata_attrs / _array / _result_table) answer what
    make_stores.py wrote: the JSON documents, arrays of their full shape and dtype, tables."""
    checked = 0
    for s in stores_manifest["stores"]:
        if not s["path"].startswith(("main_", "nocell_")):
            continue
        cd = dc.ChromData(stores / s["path"])
        for q in s["components"]:
            what, path = f"{s['path']} {q}", q["path"]
            if q["kind"] == "attrs":
                call = functools.partial(cd.attrs, q["what"], path)
            elif q["kind"] == "array":
                call = functools.partial(cd.array, q["what"], path)
            else:
                call = functools.partial(cd.result_table, path)
            if "error" in q:
                with pytest.raises(ERRORS_ALL[q["error"]]) as e:
                    call()
                assert e.value.message, what
            elif q["kind"] == "attrs":
                assert call() == q["json"], what
            elif q["kind"] == "array":
                got = call()
                assert isinstance(got, np.ndarray) and list(got.shape) == q["shape"], what
                assert got.dtype == np.dtype(q["dtype"]), what
                assert got.reshape(-1).tolist() == q["values"], what
            else:
                got = call()
                assert isinstance(got, pa.Table), what
                assert_same_table(_decoded(got), read_expected(stores / s["expected_dir"] / q["file"]), what)
            checked += 1
    assert checked > 100


def test_query_results_are_not_copied(tmp_path):
    """Zero-copy: importing a query's Arrow stream allocates (almost) nothing in pyarrow's
    memory pool: the table's buffers are the library's."""
    path = tmp_path / "big.cdz"
    with dc.ChromDataWriter(path) as w:
        w.append(_spots(np.random.default_rng(3), 200_000, n_traces=50))
    cd = dc.ChromData(path)
    for query in (cd.read_spots, lambda: cd.get_chrom("chr1"), lambda: cd.get_trace("t7")):
        query()  # warm-up: pyarrow's one-off allocations
        before = pa.total_allocated_bytes()
        table = query()
        grew = pa.total_allocated_bytes() - before
        assert table.nbytes > 100_000
        assert grew < table.nbytes // 100, (grew, table.nbytes)
    copied = pa.concat_tables([table, table]).combine_chunks()  # the check can fail: a copy shows
    assert pa.total_allocated_bytes() - before >= table.nbytes
    del copied


def test_invalid_stores_raise_their_status(stores, stores_manifest):
    assert stores_manifest["invalid"]
    for case in stores_manifest["invalid"]:
        with pytest.raises(ERRORS[case["error"]]) as e:
            dc.ChromData(stores / case["path"])
        assert e.value.function == "dc_chromdata_open"
        assert e.value.status_name == "DC_ERR_" + {"NotFound": "NOT_FOUND", "Format": "FORMAT",
                                                   "Unsupported": "UNSUPPORTED"}[case["error"]]


def test_iterators_cover_every_spot_once(stores):
    cd = dc.ChromData(stores / "main_22.cdz")
    full = cd.read_spots(["spot_id"]).column("spot_id").to_numpy()
    for reader in (cd.iter_traces(2, ["spot_id"]), cd.iter_cells(1, ["spot_id"])):
        assert isinstance(reader, pa.RecordBatchReader)
        ids = np.concatenate([b.column("spot_id").to_numpy() for b in reader])
        assert np.array_equal(np.sort(ids), np.sort(full))
    with pytest.raises(dc.InvalidArgumentError):
        cd.iter_traces(0)
    nocell = dc.ChromData(stores / "nocell_21.chromdata.zarr")
    with pytest.raises(dc.NotFoundError):
        nocell.iter_cells(1)


def test_ids_columns_and_lifetime(stores):
    cd = dc.ChromData(stores / "nocell_20.chromdata.zarr")  # integer trace ids
    trace = cd.categories("spots", "trace_id").to_pylist()[0]
    assert isinstance(trace, int)
    by_int = cd.get_trace(trace, "coords")
    assert_same_table(by_int, cd.get_trace(str(trace), "coords"))
    assert_same_table(by_int, cd.get_trace(np.int64(trace), ["x", "y", "z"]))
    with pytest.raises(TypeError):
        cd.get_trace(1.5)
    with cd:
        t = cd.iter_traces(1)
    assert sum(b.num_rows for b in t) == cd.info.n_spots  # the stream outlives the handle
    with pytest.raises(ValueError, match="closed"):
        cd.get_chrom("chr1")


def test_pickle_and_partitions(stores):
    cd = dc.ChromData(stores / "main_21.cdz")
    clone = pickle.loads(pickle.dumps(cd))
    assert clone.info == cd.info
    everything = cd.read_spots(["spot_id"]).column("spot_id").to_numpy()
    for by in ("chrom", "cell"):
        for n in (1, 2, 3, 100):
            parts = cd.partitions(n, by)
            assert 1 <= len(parts) <= n
            ids = np.concatenate([p.read(clone, ["spot_id"]).column("spot_id").to_numpy() for p in parts])
            assert np.array_equal(np.sort(ids), np.sort(everything)), (by, n)
    assert [i for p in cd.partitions(2, "chrom") for i in p.ids] == cd.chroms()


def _spots(rng, n, n_traces=5, cells=True):
    chroms = np.array(["chr1", "chr2", "chrX"])
    df = pd.DataFrame({
        "chrom": chroms[rng.integers(0, 3, n)],
        "start": rng.integers(0, 10, n) * 1000,
        "trace_id": [f"t{k}" for k in rng.integers(0, n_traces, n)],
        "x": rng.normal(size=n), "y": rng.normal(size=n), "z": rng.normal(size=n),
        "intensity": rng.random(n).astype(np.float32),
    })
    df["end"] = df["start"] + 1000
    if cells:
        df["cell_id"] = [f"c{k}" for k in rng.integers(0, 3, n)]
    return df


@pytest.mark.parametrize("suffix,layout", [(".chromdata.zarr", "flat"), (".cdz", "partitioned"),
                                           (".cdz", "primary_coords")])
def test_writer_round_trip_read_by_the_independent_reader(tmp_path, suffix, layout):
    rng = np.random.default_rng(11)
    df = _spots(rng, 3000)
    path = tmp_path / f"w{suffix}"
    with dc.ChromDataWriter(path, layout=layout, memory_budget=4 << 20) as w:
        w.append(df.iloc[:1000])                                         # pandas
        w.append(pa.Table.from_pandas(df.iloc[1000:2500], preserve_index=False))  # pyarrow table
        w.append(pa.RecordBatch.from_pandas(df.iloc[2500:], preserve_index=False))
    cd = dc.ChromData(path)
    assert cd.info.n_spots == len(df) and cd.info.layout == layout
    dumped = tmp_path / "dump.parquet"
    subprocess.run([sys.executable, str(ROOT / "tests" / "chromdata" / "read_store.py"), str(path), str(dumped)],
                   check=True, stdout=subprocess.DEVNULL)
    back = pq.read_table(dumped).to_pandas()  # original order, loci as bin ids
    bins = cd.table("bins").to_pandas()
    loci = bins.iloc[back["bin_id"].to_numpy()]
    for col in ("chrom", "start", "end"):
        assert np.array_equal(loci[col].astype(df[col].dtype).to_numpy(), df[col].to_numpy()), col
    for col in ("trace_id", "cell_id", "x", "y", "z", "intensity"):
        assert np.array_equal(back[col].to_numpy(), df[col].to_numpy()), col
    orig = cd.read_spots(["x"], original_order=True).column("x").to_numpy()
    assert np.array_equal(orig, df["x"].to_numpy())


def test_writer_bins_tracks_tables_and_errors(tmp_path):
    rng = np.random.default_rng(5)
    bins = pa.table({"chrom": ["chr1"] * 4 + ["chr2"] * 2,
                     "start": [0, 1000, 2000, 3000, 0, 1000], "end": [1000, 2000, 3000, 4000, 1000, 2000]})
    spots = pa.table({"bin_id": rng.integers(0, 6, 500), "trace_id": [f"t{k}" for k in rng.integers(0, 4, 500)],
                      "x": rng.normal(size=500), "y": rng.normal(size=500), "z": rng.normal(size=500)})
    tracks = pd.DataFrame({"gc": np.linspace(0, 1, 6), "label": list("abcdef")})
    tads = pd.DataFrame({"chrom": ["chr1"], "start": [0], "end": [3000]})
    path = tmp_path / "bins.cdz"
    with dc.ChromDataWriter(path) as w:
        w.set_bins(bins)
        w.set_bin_tracks(tracks)
        w.add_table("intervals", "tads", tads, kind="domain")
        w.add_table("points", "anchors", pa.table({"chrom": ["chr2"], "pos": [1500]}))
        w.append(spots)
        with pytest.raises(dc.ExistsError):
            w.add_table("points", "anchors", pa.table({"chrom": ["chr2"], "pos": [1]}))
    cd = dc.ChromData(path)
    assert cd.table("bins").column("start").to_pylist() == bins.column("start").to_pylist()
    assert cd.table("bin_tracks").column("label").to_pylist() == list("abcdef")
    assert cd.keys("intervals") == ["tads"] and cd.keys("points") == ["anchors"]
    assert cd.table("intervals/tads").column("end").to_pylist() == [3000]
    assert cd.info.n_spots == 500
    with pytest.raises(dc.ExistsError):
        with dc.ChromDataWriter(path) as w:
            w.set_bins(bins)
            w.append(spots)
    with pytest.raises(ValueError, match="layout"):
        dc.ChromDataWriter(tmp_path / "x.cdz", layout="nope")
    assert dc.ChromDataWriter.param_bounds("layout") == (0, 2)
    assert dc.ChromDataWriter.param_bounds("overwrite") == (0, 1)
    lo, hi = dc.ChromDataWriter.param_bounds("threads")
    assert lo == 0 and hi > 1
    with pytest.raises(TypeError, match="unknown ChromData writer setting"):
        dc.ChromDataWriter.param_bounds("nonsense")
    bad = tmp_path / "bad.cdz"
    with pytest.raises(dc.InvalidArgumentError):
        with dc.ChromDataWriter(bad) as w:
            w.append(pa.table({"chrom": ["chr1"], "trace_id": ["t"]}))  # no start/end/bin_id
    assert not bad.exists()
