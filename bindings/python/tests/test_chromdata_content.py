"""Everything a store holds through the package (C API 1.1 §5.1, §6.1): given category
lists, traces tables, cellm / binm arrays, results, uns, contacts; rewrite. Checked against
the input and against tests/chromdata/read_store.py where the store layout matters."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import deltacells as dc
from deltacells.chromdata import rewrite


def spots() -> pa.Table:
    return pa.table({
        "chrom": ["chr1", "chr2", "chr1", "chr1"],
        "start": [0, 0, 100, 0], "end": [100, 100, 200, 100],
        "trace_id": ["b", "a", "a", "b"],
        "cell_id": pa.array(["c1", "c1", "c0", "c0"]).dictionary_encode(),
    })


def test_components_round_trip(tmp_path):
    path = tmp_path / "s.chromdata.zarr"
    with dc.ChromDataWriter(path, layout="flat") as w:
        w.set_categories("trace_id", ["b", "a", "unused"])
        w.set_table("traces", pa.table({"trace_id": ["a", "b", "unused"], "n": [1, 2, 3]}))
        w.append(spots())
        w.add_array("binm", "m", np.arange(6, dtype="float32").reshape(3, 2))
        w.add_result(["r"], {"type": "mapping", "kind": "k"})
        w.add_result(["r", "t"], {"type": "table"}, pa.table({"x": [1.5]}))
        w.add_result(["r", "a"], {"type": "array"}, np.eye(2))
        w.set_json("uns", {"big": {"__uchrom_type__": "ndarray", "dtype": "<i8", "shape": [70],
                                   "data": list(range(70))}})
        w.set_json("contacts", [{"key": "h", "path": "/nowhere/h.mcool", "format": "mcool"}])
    cd = dc.ChromData(path)
    assert cd.categories("spots", "trace_id").to_pylist() == ["b", "a", "unused"]
    assert cd.categories("spots", "cell_id").to_pylist() == ["c1", "c0"]
    assert cd.table("traces").column("n").to_pylist() == [2, 1, 3]
    assert cd.attrs("results", ["r"]) == {"type": "mapping", "kind": "k", "keys": ["t", "a"]}
    np.testing.assert_array_equal(cd.array("results", ["r", "a"]), np.eye(2))
    np.testing.assert_array_equal(cd.array("binm", ["m"]), np.arange(6, dtype="float32").reshape(3, 2))
    assert cd.result_table(["r", "t"]).column("x").to_pylist() == [1.5]
    assert cd.attrs("uns")["big"] == {"__uchrom_type__": "array_ref", "path": "uns/_0"}
    np.testing.assert_array_equal(cd.array("uns", ["_0"]), np.arange(70))
    assert cd.attrs("contacts")[0]["resolved_path"] == "/nowhere/h.mcool"
    with pytest.raises(dc.DeltaCellsError):
        cd.attrs("results", ["nope"])
    out = tmp_path / "s.cdz"
    rewrite(path, out, layout="partitioned")
    re = dc.ChromData(out)
    assert re.categories("spots", "trace_id").to_pylist() == ["b", "a", "unused"]
    assert re.read_spots(original_order=True).equals(cd.read_spots(original_order=True))
    assert re.attrs("results", ["r", "t"]) == {"type": "table"}
