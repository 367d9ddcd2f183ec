#!/usr/bin/env python3
"""Independent reader of a ChromData store (spec: shared/spec/chromdata-zarr.md), written
with pyarrow + zarr-python >= 3 only, sharing no code with the Rust library. Loads the
store per the spec (directory or .cdz), checks the §14 counts and the §7 invariants it can
check cheaply, and dumps the logical spot table in ORIGINAL (input) order as Parquet
(§15.1 full schema: categoricals decoded, derived / referenced columns gathered).

With a third argument it also checks the pass-through components (§5.3 traces / cells,
§5.4 categories, §12 cellm, binm, results, uns, contacts, links, interval attributes) and
dumps them as JSON: arrays as {shape, dtype, values (row-major)}, tables as {column: values}.

Usage: read_store.py STORE OUT.parquet [COMPONENTS.json]
"""
import io
import json
import os
import sys
import zipfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import zarr


PA_TYPES = {"bool": pa.bool_(), "int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(),
            "int64": pa.int64(), "uint8": pa.uint8(), "uint16": pa.uint16(), "uint32": pa.uint32(),
            "uint64": pa.uint64(), "float32": pa.float32(), "float64": pa.float64(), "string": pa.string()}


class Store:
    def __init__(self, path):
        self.path = path
        self.zip = None
        if os.path.isfile(path):
            self.zip = zipfile.ZipFile(path)
            names = self.zip.namelist()
            assert names[0] == "zarr.json", "zarr.json must be the first member"
            assert names[1:] == sorted(names[1:], key=lambda s: s.encode()), "member order"
            for i in self.zip.infolist():
                assert i.compress_type == zipfile.ZIP_STORED, f"{i.filename} not STORED"
                assert not i.filename.endswith("/"), "directory entry"

    def read(self, rel):
        if self.zip:
            return self.zip.read(rel)
        with open(os.path.join(self.path, rel), "rb") as f:
            return f.read()

    def exists(self, rel):
        if self.zip:
            return rel in self.zip.namelist()
        return os.path.isfile(os.path.join(self.path, rel))

    def json(self, rel):
        return json.loads(self.read(rel))

    def table(self, rel):
        return pq.read_table(io.BytesIO(self.read("tables/" + rel)))

    def groups(self, rel):
        md = pq.ParquetFile(io.BytesIO(self.read("tables/" + rel))).metadata
        return [md.row_group(i).num_rows for i in range(md.num_row_groups)]

    def root(self):
        if self.zip:
            return zarr.open_group(zarr.storage.ZipStore(self.path, mode="r"), mode="r")
        return zarr.open_group(self.path, mode="r")

    def nd(self, rel):
        """An N-D array of §12: codecs bytes + zstd, returned as {shape, dtype, values}."""
        meta = self.json(rel + "/zarr.json")
        assert meta["node_type"] == "array", rel
        assert [c["name"] for c in meta["codecs"]] == ["bytes", "zstd"], (rel, meta["codecs"])
        assert meta["fill_value"] in (0, False, 0.0), (rel, meta["fill_value"])
        a = np.asarray(self.root()[rel][...])
        assert list(a.shape) == meta["shape"] and str(a.dtype) == meta["data_type"], rel
        return {"shape": list(a.shape), "dtype": str(a.dtype), "values": a.reshape(-1).tolist()}

    def array(self, rel, dtype):
        a = self.root()[rel]
        assert str(a.dtype) == dtype, (rel, a.dtype, dtype)
        assert len(a.shape) == 1
        meta = self.json(rel + "/zarr.json")
        names = [c["name"] for c in meta["codecs"]]
        assert names == ["bytes", "zstd"], (rel, names)
        return np.asarray(a[:])


def main():
    path, out = sys.argv[1], sys.argv[2]
    s = Store(path)
    root = s.json("zarr.json")
    assert root["zarr_format"] == 3 and root["node_type"] == "group"
    attrs = root["attributes"]
    u = attrs["uchrom"]
    ver = attrs["uchrom_format_version"]
    assert u["format"] == "chromdata.zarr" and u["format_version"] == ver
    tables = s.json("tables/zarr.json")["attributes"]["tables"]
    sp = tables["spots"]
    layout = sp["layout"]
    assert {"2.0": "flat", "2.1": "partitioned", "2.2": "primary+coords"}[ver] == layout
    n = u["n_spots"]
    assert sp["n_rows"] == n

    def cats(desc):
        return s.table(desc["categories"]).column("category").combine_chunks()

    trace_cats = cats(sp["trace_id"])
    assert len(trace_cats) == u["n_traces"] == sp["trace_id"]["n_categories"]
    cell_cats = cats(sp["cell_id"]) if sp["cell_id"] else None
    assert u["has_cell_id"] == (cell_cats is not None)
    bins = s.table(tables["bins"]["path"])
    assert bins.num_rows == u["n_bins"]
    # §5.2, §12: bin tracks align with the bins; pass-through tables hold n_rows rows and
    # live under tables/<collection>/.
    if tables.get("bin_tracks"):
        bt = tables["bin_tracks"]
        t = s.table(bt["path"])
        assert t.num_rows == bt["n_rows"] == u["n_bins"], "bin_tracks rows"
        assert [c["name"] for c in bt["columns"]] == t.column_names, "bin_tracks columns"
    for coll in ("intervals", "points"):
        keys = [e["key"] for e in tables.get(coll, [])]
        assert len(set(keys)) == len(keys), f"{coll}: repeated keys"
        for e in tables.get(coll, []):
            assert e["path"].startswith(coll + "/"), e["path"]
            assert s.table(e["path"]).num_rows == e["n_rows"], f"{coll} {e['key']}: n_rows"
            if coll == "intervals":
                assert isinstance(e["kind"], str) and e["kind"], "intervals kind"
    chrom_cats = s.table("categories/bins.chrom.parquet").column("category").combine_chunks()
    assert len(chrom_cats) == u["n_chroms"]
    bchrom = bins.column("chrom").combine_chunks()
    if pa.types.is_dictionary(bchrom.type):
        bchrom = bchrom.dictionary_decode()
    lut = {v: i for i, v in enumerate(chrom_cats.to_pylist())}
    bin_chrom = np.array([lut[v] for v in bchrom.to_pylist()], dtype=np.int64)

    ix = lambda name, dt: s.array("index/" + name, dt)  # noqa: E731
    trace_offsets = ix("trace_offsets", "int64")
    trace_codes = ix("trace_codes", "int32")
    trace_cells = ix("trace_cells", "int32")
    chrom_trace = ix("chrom_trace", "int32")
    row_groups = ix("row_groups", "int64")
    assert len(trace_codes) == u["n_runs"] == len(trace_offsets) - 1
    assert trace_offsets[-1] == n and row_groups[-1] == n
    assert len(row_groups) - 1 == u["n_row_groups"]
    has_src = s.exists("index/source_row/zarr.json")
    assert has_src == u["has_source_row"]

    def concat_files(files, groups_out=None):
        ts = [s.table(f) for f in files]
        if groups_out is not None:
            for f in files:
                groups_out.extend(s.groups(f))
        return pa.concat_tables(ts) if ts else None

    # Key side and coords in "stored order" of the key files.
    extra_descs = sp["columns"]
    if layout == "flat":
        g = []
        keys = concat_files([sp["path"]], g)
        assert list(np.cumsum([0] + g)) == list(row_groups)
        primary = keys
        stored_rows = np.arange(n)  # global stored order = file order
    elif layout == "partitioned":
        g = []
        keys = concat_files(sp["files"], g) if sp["files"] else None
        assert list(np.cumsum([0] + g)) == list(row_groups)
        primary = keys
    else:
        g = []
        keys = concat_files(sp["coords_files"], g) if sp["coords_files"] else None
        crg = s.array("index/coords/row_groups", "int64")
        assert list(np.cumsum([0] + g)) == list(crg)
        assert len(crg) - 1 == u["n_coord_row_groups"]
        run_offsets = s.array("index/coords/run_offsets", "int64")
        primary_run = s.array("index/coords/primary_run", "int64")
        assert sorted(primary_run.tolist()) == list(range(len(primary_run)))
        # Gather coords rows into primary (canonical) order.
        inv = np.empty_like(primary_run)
        inv[primary_run] = np.arange(len(primary_run))
        order = []
        for r in range(len(primary_run)):
            k = inv[r]
            order.extend(range(run_offsets[k], run_offsets[k + 1]))
        keys = keys.take(pa.array(order, type=pa.int64())) if keys is not None else None
        primary = s.table(sp["primary_path"]) if sp["primary_path"] else None
        if primary is not None:
            assert list(np.cumsum([0] + s.groups(sp["primary_path"]))) == list(row_groups)

    def col_or_empty(t, name, typ):
        if t is None:
            return pa.array([], type=typ)
        return t.column(name).combine_chunks()

    def decode_codes(codes, cat):
        return pa.array(
            [None if c is None else cat[c].as_py() for c in codes.to_pylist()],
            type=pa.string() if pa.types.is_string(cat.type) else pa.int64(),
        )

    out_cols = {}
    bin_id = col_or_empty(keys, "bin_id", pa.int32())
    out_cols["bin_id"] = bin_id
    out_cols["trace_id"] = decode_codes(col_or_empty(keys, "trace_id", pa.int16()), trace_cats)
    if cell_cats is not None:
        out_cols["cell_id"] = decode_codes(col_or_empty(keys, "cell_id", pa.int16()), cell_cats)
    if sp["coords"]:
        ct = pa.float32() if sp["coords"]["type"] == "float32" else pa.float64()
        for a in "xyz":
            out_cols[a] = col_or_empty(keys, a, ct)
    bins_np = bin_id.to_numpy(zero_copy_only=False).astype(np.int64)
    trace_np = np.array(
        [trace_cats.to_pylist().index(v) for v in out_cols["trace_id"].to_pylist()], dtype=np.int64)
    derived = {d["key"]: s.table(d["path"]) for d in tables.get("derived", [])}
    for d in extra_descs:
        name = d["name"]
        st = d["storage"]
        if st in ("spots", "primary"):
            typ = pa.int16() if d["type"] == "categorical" else PA_TYPES[d["type"]]
            v = col_or_empty(primary, name, typ)
        elif st == "bins":
            v = bins.column(d["source"]).combine_chunks().take(pa.array(bins_np))
        else:
            key = d["key"]
            if key == "bin":
                codes = bins_np
            elif key == "trace":
                codes = trace_np
            else:
                codes = np.array([cell_cats.to_pylist().index(x) for x in out_cols["cell_id"].to_pylist()], dtype=np.int64)
            v = derived[key].column(name).combine_chunks().take(pa.array(codes))
        if d["type"] == "categorical":
            v = decode_codes(v, cats(d))
        out_cols[name] = v
    if tables.get("spot_tracks"):
        stt = tables["spot_tracks"]
        t = s.table(stt["path"]) if "path" in stt else concat_files(stt["files"])
        for c in stt["columns"]:
            out_cols["spot_tracks/" + c["name"]] = col_or_empty(t, c["name"], PA_TYPES[c["type"]])
    for L in tables.get("layers", []):
        t = s.table(L["path"]) if "path" in L else concat_files(L["files"])
        for a in "xyz":
            out_cols[f"layers/{L['key']}/{a}"] = col_or_empty(t, a, PA_TYPES[L["type"]])
    # Stored -> canonical: partitioned files are chromosome-major.
    tbl = pa.table(out_cols)
    if layout == "partitioned" and n:
        # The index's runs give, for each stored run, (cell, trace, chrom): canonical
        # order sorts runs by (cell, trace, chrom).
        runs = sorted(range(len(trace_codes)), key=lambda r: (trace_cells[r], trace_codes[r], chrom_trace[r]))
        order = [i for r in runs for i in range(trace_offsets[r], trace_offsets[r + 1])]
        canon = tbl.take(pa.array(order, type=pa.int64()))
        if has_src:
            src = s.array("index/source_row", "int64")[order]
    else:
        canon = tbl
        if has_src:
            src = s.array("index/source_row", "int64")
    # Canonical order check: (cell, trace, chrom, bin) non-decreasing.
    if n:
        cell_np = (np.array([cell_cats.to_pylist().index(x) for x in canon.column("cell_id").to_pylist()])
                   if cell_cats is not None else np.zeros(n, dtype=np.int64))
        tr = np.array([trace_cats.to_pylist().index(x) for x in canon.column("trace_id").to_pylist()])
        b = canon.column("bin_id").to_numpy().astype(np.int64)
        keys_sorted = list(zip(cell_np, tr, bin_chrom[b], b))
        assert keys_sorted == sorted(keys_sorted), "not in canonical order"
    if has_src:
        assert sorted(src.tolist()) == list(range(n))
        canon = canon.take(pa.array(np.argsort(src, kind="stable")))
    pq.write_table(canon, out)
    if len(sys.argv) > 3:
        with open(sys.argv[3], "w") as f:
            json.dump(components(s, u, tables), f, indent=1, allow_nan=True)


def portable(names):
    """§6.3 stored names of a collection (original order)."""
    import re
    out, seen = [], set()
    dev = {"CON", "PRN", "AUX", "NUL"} | {f"COM{i}" for i in range(1, 10)} | {f"LPT{i}" for i in range(1, 10)}
    for i, n in enumerate(names):
        ok = (re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", n) is not None and len(n) <= 64
              and not n.endswith(".") and n.upper().split(".")[0] not in dev and n.lower() not in seen)
        seen.add(n.lower())
        out.append(n if ok else f"_{i}")
    return out


def table_dict(t):
    cols = {}
    for name in t.column_names:
        c = t.column(name).combine_chunks()
        if pa.types.is_dictionary(c.type):
            c = c.dictionary_decode()
        cols[name] = c.to_pylist()
    return cols


def components(s, u, tables):
    """§5.3, §5.4 and §12 content, checked and dumped."""
    out = {}
    # Categories of every categorical descriptor; traces / cells first column = categories.
    cats = {}
    sp = tables["spots"]
    for tname, descs in [("spots", [sp["trace_id"]] + ([sp["cell_id"]] if sp["cell_id"] else []) + sp["columns"]),
                         ("bins", tables["bins"]["columns"]), ("traces", tables["traces"]["columns"]),
                         ("cells", (tables.get("cells") or {}).get("columns", []))]:
        for d in descs:
            if d["type"] == "categorical":
                c = s.table(d["categories"]).column("category").combine_chunks().to_pylist()
                assert len(c) == d["n_categories"] == len(set(c)), d
                cats[f"{tname}.{d['name']}"] = c
    out["categories"] = cats
    for name, key in (("traces", "trace_id"), ("cells", "cell_id")):
        m = tables.get(name)
        if not m:
            continue
        t = s.table(m["path"])
        assert t.column_names[0] == key and m.get("index", key) == key, (name, t.column_names)
        assert [c["name"] for c in m["columns"]] == t.column_names, (name, m["columns"])
        d = table_dict(t)
        assert d[key] == cats[f"spots.{key}"], f"{name}: first column differs from the categories"
        for c in m["columns"][1:]:
            if c["type"] == "categorical":
                assert set(v for v in d[c["name"]] if v is not None) <= set(cats[f"{name}.{c['name']}"])
        out[name] = d
    out["intervals"] = {e["key"]: {"kind": e["kind"], "source_result": e.get("source_result")}
                        for e in tables.get("intervals", [])}

    def group(name):
        rel = name + "/zarr.json"
        if not s.exists(rel):
            return {}
        g = s.json(rel)
        assert g["zarr_format"] == 3 and g["node_type"] == "group", rel
        return g.get("attributes", {})

    def keyed(attrs, where):
        keys = attrs.get("keys", [])
        names = [k["name"] for k in keys]
        assert names == portable([k["key"] for k in keys]), (where, keys)
        return keys

    for kind, n in (("cellm", u["n_cells"]), ("binm", u["n_bins"])):
        arrays = {}
        for k in keyed(group(kind), kind):
            a = s.nd(f"{kind}/{k['name']}")
            assert a["shape"][0] == n, (kind, k, a["shape"], n)
            arrays[k["key"]] = a
        out[kind] = arrays
    results = []

    def walk(rel, path, attrs):
        for k in keyed(attrs, rel):
            node = f"{rel}/{k['name']}"
            meta = s.json(node + "/zarr.json")
            a = meta.get("attributes", {})
            t = a["_type"]
            assert t in ("table", "array", "json", "mapping"), (node, t)
            assert (meta["node_type"] == "array") == (t == "array"), node
            doc = {"type": t}
            for p in ("kind", "function", "params", "inputs", "uchrom_version", "created_utc"):
                if "_" + p in a:
                    doc[p] = a["_" + p]
            if t == "json":
                doc["value"] = a["value"]
            entry = {"path": path + [k["key"]], "attrs": doc}
            if t == "mapping":
                doc["keys"] = [m["key"] for m in a.get("keys", [])]
            if t == "table":
                entry["table"] = table_dict(pq.read_table(io.BytesIO(s.read(node + "/table.parquet"))))
            if t == "array":
                entry.update(s.nd(node))
            results.append(entry)
            if t == "mapping":
                walk(node, path + [k["key"]], a)

    walk("results", [], group("results"))
    out["results"] = results
    ug = group("uns")
    uns_arrays = {}
    for name in ug.get("arrays", []):
        uns_arrays[name] = s.nd(f"uns/{name}")

    def refs(v):
        if isinstance(v, dict):
            if v.get("__uchrom_type__") == "array_ref":
                assert v["path"].startswith("uns/") and v["path"][4:] in uns_arrays, v
            if v.get("__uchrom_type__") == "ndarray":
                assert int(np.prod(v["shape"])) <= 64, "inline ndarray over 64 elements"
            for x in v.values():
                refs(x)
        elif isinstance(v, list):
            for x in v:
                refs(x)

    refs(ug.get("uns", {}))
    out["uns"] = {"uns": ug.get("uns", {}), "arrays": uns_arrays}
    for kind in ("contacts", "links"):
        recs = group(kind).get(kind, [])
        keys = [r["key"] for r in recs]
        assert len(set(keys)) == len(keys), (kind, keys)
        out[kind] = recs
    return out


if __name__ == "__main__":
    main()
    # Both outputs are closed files by now. Leave without the interpreter's shutdown: pyarrow's
    # thread pools can abort it ("terminate called without an active exception",
    # apache/arrow#34314), which would fail a correct run. A failed check raised above and
    # exits 1 as usual.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
