#!/usr/bin/env python3
"""Independent writer of ChromData stores (spec: shared/spec/chromdata-zarr.md) and of
expected query answers, for the Rust tests of the backed reader.

Written from the spec only, with pandas / pyarrow / zarr-python >= 3; it shares no code
with the Rust reader. For every logical dataset it writes the store in all three layouts
(2.0 flat, 2.1 partitioned, 2.2 primary+coords) as directories and as .cdz, computes the
answers of the §15 queries with pandas directly from the logical (input-order) data, and
writes them as Parquet files plus a manifest.json. It also writes invalid stores, one per
§14 rule, each with the error kind a reader must report.

Usage: make_stores.py OUT_DIR
"""
import json
import os
import re
import shutil
import sys
import zipfile

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import zarr
from zarr.codecs import ZstdCodec

# ----------------------------------------------------------------------------------------
# Logical datasets


def portable(names):
    """§6.3: stored names for a collection of names (original order)."""
    out, seen = [], set()
    for i, n in enumerate(names):
        ok = (
            re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", n) is not None
            and len(n) <= 64
            and not n.endswith(".")
            and n.upper().split(".")[0]
            not in {"CON", "PRN", "AUX", "NUL"} | {f"COM{i}" for i in range(1, 10)} | {f"LPT{i}" for i in range(1, 10)}
            and n.lower() not in seen
        )
        seen.add(n.lower())
        out.append(n if ok else f"_{i}")
    return out


def make_dataset(name, rng, *, n_cells, n_traces, has_coords, coord_dtype, cell_int=False,
                 trace_int=False, shuffle=True, n_spots_per=(3, 9), zero=False):
    chroms = ["chr1", "chr2", "chr 3/x"]
    # Bins: 8 per chromosome, in genome order, plus a name column.
    rows = []
    for c in chroms:
        for k in range(8):
            rows.append((c, k * 1000, (k + 1) * 1000, f"{c}_b{k}".replace(" ", "").replace("/", "")))
    bins = pd.DataFrame(rows, columns=["chrom", "start", "end", "name"])
    bins["chrom"] = pd.Categorical(bins["chrom"], categories=chroms)
    bins["start"] = bins["start"].astype("int64")
    bins["end"] = bins["end"].astype("int64")
    n_bins = len(bins)
    bin_tracks = pd.DataFrame({"gc": rng.random(n_bins), "mappable": rng.random(n_bins) > 0.3})

    trace_cats = list(range(100, 100 + n_traces)) if trace_int else [f"t{i}" for i in range(n_traces)]
    trace_cats = trace_cats + ([999] if trace_int else ["t_unused"])
    cell_cats = None
    if n_cells:
        cell_cats = list(range(10, 10 + n_cells)) if cell_int else [f"cell{i}" for i in range(n_cells)]
        # Not sorted, with an unused category: readers and writers keep given category lists
        # as they are (§16); codes are positions in them.
        cell_cats = cell_cats[:1] + cell_cats[:0:-1] + ([77] if cell_int else ["c_unused"])

    # Spots: each (cell, trace) has some loci; some traces span two chromosomes.
    spots = []
    if not zero:
        for c in range(n_cells or 1):
            for t in range(n_traces):
                if rng.random() < 0.25:
                    continue  # not every trace in every cell
                chs = [int(rng.integers(0, len(chroms)))]
                if rng.random() < 0.4:
                    chs.append((chs[0] + 1) % len(chroms))
                for ch in chs:
                    k = int(rng.integers(n_spots_per[0], n_spots_per[1]))
                    bsel = rng.integers(0, 8, size=k) + 8 * ch
                    for b in bsel:
                        spots.append((c if n_cells else -1, t, int(b)))
    df = pd.DataFrame(spots, columns=["cell", "trace", "bin_id"])
    if not shuffle:
        chrom_code = bins["chrom"].cat.codes.to_numpy()[df["bin_id"].to_numpy()] if len(df) else np.zeros(0, int)
        order = np.lexsort((df["bin_id"].to_numpy(), chrom_code, df["trace"].to_numpy(), df["cell"].to_numpy()))
        df = df.iloc[order].reset_index(drop=True)
    else:
        df = df.sample(frac=1.0, random_state=int(rng.integers(1 << 30))).reset_index(drop=True)
    n = len(df)
    out = pd.DataFrame({"bin_id": df["bin_id"].astype("int32")})
    out["trace_id"] = pd.Categorical.from_codes(df["trace"].to_numpy(), categories=trace_cats)
    if n_cells:
        out["cell_id"] = pd.Categorical.from_codes(df["cell"].to_numpy(), categories=cell_cats)
    if has_coords:
        for a in "xyz":
            v = (rng.random(n) * 100).astype(coord_dtype)
            out[a] = v
        if n:
            out.loc[out.index[:: 7], "x"] = np.nan
    # Extra spot columns.
    status = pd.Categorical.from_codes(rng.integers(-1, 3, size=n), categories=["ok", "lowq", "missing"])
    out["coord_status"] = status
    out["spot_id"] = np.arange(n, dtype="int64") * 3 + 1
    bin_name = bins["name"].to_numpy()[df["bin_id"].to_numpy()] if n else np.array([], dtype=object)
    out["readout"] = pd.array(bin_name, dtype=object)  # equals bins.name -> referenced
    out["probe"] = pd.array(np.char.add("p", df["bin_id"].astype(str).to_numpy()) if n else [], dtype=object)  # by bin (string)
    out["probe"] = out["probe"].astype(object)
    if n_cells:
        out["fov"] = (df["cell"].to_numpy() * 10 + 3).astype("int32")  # by cell
    out["tlabel"] = pd.Categorical.from_codes((df["trace"].to_numpy() % 2) if n else np.zeros(0, int),
                                              categories=["even", "odd"])  # by trace, categorical
    out["odd name/col"] = rng.integers(-5, 5, size=n).astype("int16")  # non-portable, primary
    tracks = pd.DataFrame({"intensity": rng.random(n), "flag": rng.random(n) > 0.5})
    layers = {
        "raw": pd.DataFrame({a: rng.random(n).astype("float64") for a in "xyz"}),
        "drift corr": pd.DataFrame({a: rng.random(n).astype("float32") for a in "xyz"}),
    }
    intervals = {
        "tads.arcfish": ("domain", pd.DataFrame({"chrom": pd.Categorical(["chr1", "chr2"]), "start": [0, 1000], "end": [3000, 5000],
                                                 "score": [0.5, 1.5]})),
        "my tads": ("domain", pd.DataFrame({"chrom": ["chr1"], "start": [100], "end": [900]})),
    }
    points = {"fiducials": pd.DataFrame({"x": [1.0, 2.0], "y": [3.0, 4.0], "label": ["a", "b"]})}
    traces = pd.DataFrame({"trace_id": pd.Series(trace_cats, dtype="int64" if trace_int else object),
                           "length": np.arange(len(trace_cats), dtype="int64")})
    cells = None
    if n_cells:
        cells = pd.DataFrame({"cell_id": pd.Series(cell_cats, dtype="int64" if cell_int else object),
                              "area": rng.random(len(cell_cats))})
    comps = make_components(rng, n_cells=len(cell_cats) if n_cells else 0, n_bins=n_bins)
    return dict(
        comps=comps, name=name, bins=bins, bin_tracks=bin_tracks, chroms=chroms, trace_cats=trace_cats, cell_cats=cell_cats,
        spots=out, tracks=tracks, layers=layers, intervals=intervals, points=points, traces=traces, cells=cells,
        coord_dtype=coord_dtype if has_coords else None,
        extras=["coord_status", "spot_id", "readout", "probe"] + (["fov"] if n_cells else []) + ["tlabel", "odd name/col"],
    )


# ----------------------------------------------------------------------------------------
# Pass-through components (§12)

PROV = {"_kind": "tads", "_function": "uchrom.strc.tad.call_tads_by_pval", "_params": {"window": 3, "alpha": 0.05},
        "_inputs": {"chrom": ["chr1", "chr2"]}, "_uchrom_version": "0.3.0", "_created_utc": "2026-01-02T03:04:05Z"}
FLOAT_NAN = {"__uchrom_type__": "float", "value": "nan"}


def make_components(rng, *, n_cells, n_bins):
    """The §12 content of a dataset: cellm / binm arrays, a results tree (table, array, json,
    nested mappings, non-portable keys), uns with inline and Zarr arrays, contacts, links."""
    cellm = {"pca": rng.random((n_cells, 4)), "umap 2d": rng.random((n_cells, 2)).astype("float32"),
             "count": rng.integers(0, 9, size=n_cells).astype("int64")}
    binm = {"loadings": rng.integers(-50, 50, size=(n_bins, 3, 2)).astype("int32"),
            "flag": rng.random(n_bins) > 0.5, "none": np.zeros((n_bins, 0), dtype="uint16")}
    results = [
        (["tads.arcfish"], dict(PROV, _type="table"),
         pd.DataFrame({"chrom": pd.Categorical(["chr1", "chr2", "chr1"]), "start": [0, 1000, 5000],
                       "end": [3000, 5000, 8000], "score": [0.5, 1.5, np.nan], "label": ["a", None, "c"]})),
        (["dist"], {"_type": "array", "_kind": "distances", "_created_utc": None}, rng.random((4, 3))),
        (["summary"], {"_type": "json", "value": {"n": 3, "ratio": FLOAT_NAN, "ids": [1, 2],
                                                  "pair": {"__uchrom_type__": "tuple", "items": [1, "a"]}}}, None),
        (["nothing"], {"_type": "json", "value": None}, None),
        (["fishnet.ensemble"], dict(PROV, _type="mapping", _kind="ensemble"), None),
        (["fishnet.ensemble", "chr1"], {"_type": "mapping"}, None),
        (["fishnet.ensemble", "chr1", "mask"], {"_type": "array"}, rng.random((3, 3)) > 0.5),
        (["fishnet.ensemble", "chr1", "n_traces"], {"_type": "json", "value": 5}, None),
        (["fishnet.ensemble", "odd/key"], {"_type": "table"}, pd.DataFrame({"i": np.arange(3, dtype="int16")})),
        (["empty rows"], {"_type": "array"}, np.zeros((0, 7), dtype="float32")),
    ]
    big = rng.random((10, 7))
    small = np.arange(6, dtype="int64").reshape(2, 3)
    uns_big = rng.integers(0, 100, size=80).astype("uint8")
    uns = {"a": 1, "params": {"x": [1, 2], "name": "run 1"}, "big": {"__uchrom_type__": "array_ref", "path": "uns/_0"},
           "small": {"__uchrom_type__": "ndarray", "dtype": "<i8", "shape": [2, 3], "data": small.tolist()},
           "nested": [{"__uchrom_type__": "array_ref", "path": "uns/_1"}, FLOAT_NAN],
           "keys": {"__uchrom_type__": "dict", "items": [[1, "one"], [2, "two"]]}}
    uns_arrays = {"_0": big, "_1": uns_big}
    contacts = [
        {"key": "hic", "path": "/nowhere/GM12878.mcool", "format": "mcool", "kind": "bulk", "genome_assembly": "hg38",
         "normalization": "weight", "resolutions": [5000, 10000], "relative_path": "linked/GM12878.mcool"},
        {"key": "schic", "path": "@ABS@/linked/cells.scool", "format": "scool", "kind": "single_cell",
         "genome_assembly": "hg38", "normalization": None, "resolutions": [1000000], "cell_map": "RNAbarcode"},
        {"key": "gone", "path": "/nowhere/gone.hic", "format": "hic", "kind": "bulk", "genome_assembly": "mm10",
         "normalization": "KR", "resolutions": [], "relative_path": "linked/missing.hic"},
    ]
    links = [{"key": "rna", "path": "/nowhere/rna.h5ad", "format": "h5ad", "relative_path": "linked/rna.h5ad",
              "modalities": ["rna"]}]
    return dict(cellm=cellm, binm=binm, results=results, uns=uns, uns_arrays=uns_arrays, contacts=contacts,
                links=links, source_result={"tads.arcfish": "tads.arcfish"})


def nd_array(group, name, data, attributes=None):
    """An N-D array of §6.1: bytes + zstd(3), one chunk (at least 1 along each axis)."""
    data = np.asarray(data)
    chunks = tuple(max(d, 1) for d in data.shape)
    a = group.create_array(name, shape=data.shape, chunks=chunks, dtype=data.dtype, fill_value=0,
                           compressors=[ZstdCodec(level=3, checksum=False)], attributes=attributes or {})
    if data.size:
        a[...] = data
    return a


def write_components(g, root, comps, abs_dir=None):
    def keyed(keys):
        return [{"key": k, "name": n} for k, n in zip(keys, portable(keys))]

    for kind in ("cellm", "binm"):
        arrays = comps[kind]
        grp = g.create_group(kind, attributes={"keys": keyed(list(arrays))})
        for (k, v), n in zip(arrays.items(), portable(list(arrays))):
            nd_array(grp, n, v)
    # Results: groups / arrays per path, each mapping's keys listing its members.
    members = {}
    for path, attrs, data in comps["results"]:
        members.setdefault(tuple(path[:-1]), []).append(path[-1])
    node = {(): g.create_group("results", attributes={"keys": keyed(members.get((), []))})}
    for path, attrs, data in comps["results"]:
        parent = node[tuple(path[:-1])]
        sibs = members[tuple(path[:-1])]
        stored = portable(sibs)[sibs.index(path[-1])]
        t = attrs["_type"]
        if t == "array":
            nd_array(parent, stored, data, attributes=attrs)
            continue
        a = dict(attrs)
        if t == "mapping":
            a["keys"] = keyed(members.get(tuple(path), []))
        grp = parent.create_group(stored, attributes=a)
        node[tuple(path)] = grp
        if t == "table":
            pq.write_table(pa.Table.from_pandas(data, preserve_index=False),
                           os.path.join(root, grp.path, "table.parquet"), compression="zstd")
    ug = g.create_group("uns", attributes={"uns": comps["uns"], "arrays": list(comps["uns_arrays"])})
    for n, v in comps["uns_arrays"].items():
        nd_array(ug, n, v)
    absdir = os.path.dirname(os.path.abspath(root))
    contacts = json.loads(json.dumps(comps["contacts"]).replace("@ABS@", absdir))
    g.create_group("contacts", attributes={"contacts": contacts})
    g.create_group("links", attributes={"links": comps["links"]})


def component_queries(ds, out_dir):
    """Expected answers of the §5.1 calls (attrs, array, result_table) and their errors."""
    comps = ds["comps"]
    absdir = os.path.abspath(out_dir)
    qs = []

    def arr(what, path, v):
        v = np.asarray(v)
        vals = v.reshape(-1).tolist()
        qs.append({"kind": "array", "what": what, "path": path, "shape": list(v.shape), "dtype": str(v.dtype),
                   "values": vals})

    for kind in ("cellm", "binm"):
        for k, v in comps[kind].items():
            qs.append({"kind": "attrs", "what": kind, "path": [k], "json": {"shape": list(np.shape(v)),
                                                                            "dtype": str(np.asarray(v).dtype)}})
            arr(kind, [k], v)
    children = {}
    for path, attrs, data in comps["results"]:
        children.setdefault(tuple(path[:-1]), []).append(path[-1])
    for path, attrs, data in comps["results"]:
        doc = {"type": attrs["_type"]}
        for k in ("_kind", "_function", "_params", "_inputs", "_uchrom_version", "_created_utc"):
            if k in attrs:
                doc[k[1:]] = attrs[k]
        if "value" in attrs:
            doc["value"] = attrs["value"]
        if attrs["_type"] == "mapping":
            doc["keys"] = children.get(tuple(path), [])
        qs.append({"kind": "attrs", "what": "results", "path": path, "json": doc})
        if attrs["_type"] == "array":
            arr("results", path, data)
        if attrs["_type"] == "table":
            qs.append({"kind": "result_table", "path": path, "table": data})
    qs.append({"kind": "attrs", "what": "uns", "path": [], "json": comps["uns"]})
    for n, v in comps["uns_arrays"].items():
        arr("uns", [n], v)
    contacts = json.loads(json.dumps(comps["contacts"]).replace("@ABS@", absdir))
    for r in contacts:
        if os.path.exists(r["path"]):
            r["resolved_path"] = r["path"]
        elif "relative_path" in r and os.path.exists(os.path.join(absdir, r["relative_path"])):
            r["resolved_path"] = os.path.join(absdir, r["relative_path"])
        else:
            r["resolved_path"] = r["path"]
    qs.append({"kind": "attrs", "what": "contacts", "path": [], "json": contacts})
    links = [dict(r, resolved_path=os.path.join(absdir, r["relative_path"])) for r in comps["links"]]
    qs.append({"kind": "attrs", "what": "links", "path": [], "json": links})
    for k, (kind, _) in ds["intervals"].items():
        qs.append({"kind": "attrs", "what": "intervals", "path": [k],
                   "json": {"kind": kind, "source_result": comps["source_result"].get(k)}})
    for k in ds["points"]:
        qs.append({"kind": "attrs", "what": "points", "path": [k], "json": {}})
    errs = [("attrs", "cellm", ["nope"], "NotFound"), ("attrs", "frames", ["x"], "NotFound"),
            ("attrs", "results", ["tads.arcfish", "x"], "NotFound"), ("attrs", "results", [], "InvalidArgument"),
            ("attrs", "uns", ["x"], "InvalidArgument"), ("array", "results", ["summary"], "InvalidArgument"),
            ("array", "uns", ["_9"], "NotFound"), ("result_table", "results", ["dist"], "InvalidArgument"),
            ("array", "results", ["fishnet.ensemble", "nope"], "NotFound")]
    for kind, what, path, err in errs:
        qs.append({"kind": kind, "what": what, "path": path, "error": err})
    return qs


# ----------------------------------------------------------------------------------------
# Writer helpers


def cat_type(values):
    if all(isinstance(v, (int, np.integer)) for v in values):
        return pa.int64()
    return pa.string()


def codes_type(n):
    return pa.int16() if n <= 32767 else pa.int32()


def prim_name(s):
    dt = s.dtype
    if isinstance(dt, pd.CategoricalDtype):
        return "categorical"
    if dt == object or pd.api.types.is_string_dtype(dt):
        return "string"
    return {"bool": "bool", "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
            "float32": "float32", "float64": "float64"}[str(dt)]


def arrow_codes(s):
    codes = np.asarray(s.cat.codes, dtype=np.int64)
    return pa.array(codes, type=codes_type(len(s.cat.categories)), mask=codes < 0)


def arrow_values(s):
    if isinstance(s.dtype, pd.CategoricalDtype):
        return arrow_codes(s)
    if s.dtype == object:
        return pa.array(list(s), type=pa.string())
    return pa.array(s.to_numpy())


def write_pq(path, table, groups, dictionary=True):
    """Write `table` with exactly the given row-group sizes."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with pq.ParquetWriter(path, table.schema, compression="zstd", compression_level=3,
                          use_dictionary=dictionary) as w:
        pos = 0
        for g in groups:
            w.write_table(table.slice(pos, g), row_group_size=max(g, 1))
            pos += g
        assert pos == table.num_rows, (path, pos, table.num_rows)


def write_small(path, df):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path, compression="zstd")


def write_categories(root, rel, cats):
    path = os.path.join(root, "tables", rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.table({"category": pa.array(list(cats), type=cat_type(cats))}), path)


def zarr_array(group, name, data, dtype):
    data = np.asarray(data, dtype=dtype)
    n = len(data)
    a = group.create_array(name, shape=(n,), chunks=(min(max(n, 1), 1048576),), dtype=dtype, fill_value=0,
                           compressors=[ZstdCodec(level=3, checksum=False)])
    if n:
        a[:] = data
    return a


def boundaries(keys):
    """Start indices of maximal blocks of equal consecutive key tuples, plus the end."""
    n = len(keys[0]) if keys else 0
    if n == 0:
        return [0]
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for k in keys:
        change[1:] |= k[1:] != k[:-1]
    return list(np.flatnonzero(change)) + [n]


def pack(unit_bounds, run_bounds, T):
    """§7.3 greedy row-group packing; returns group sizes."""
    leaves = []
    runs = set(run_bounds)
    for a, b in zip(unit_bounds[:-1], unit_bounds[1:]):
        if b - a <= T:
            leaves.append(b - a)
            continue
        inner = [a] + [r for r in run_bounds if a < r < b] + [b]
        for ra, rb in zip(inner[:-1], inner[1:]):
            if rb - ra <= T:
                leaves.append(rb - ra)
            else:
                for s in range(ra, rb, T):
                    leaves.append(min(T, rb - s))
    groups, cur = [], 0
    for l in leaves:
        if cur > 0 and cur + l > T:
            groups.append(cur)
            cur = 0
        cur += l
    if cur > 0:
        groups.append(cur)
    del runs
    return groups


# ----------------------------------------------------------------------------------------
# Store writer


def write_store(ds, out, layout, T=40, TC=16):
    if os.path.exists(out):
        shutil.rmtree(out)
    version = {"flat": "2.0", "partitioned": "2.1", "primary+coords": "2.2"}[layout]
    spot_order = {"flat": "cell,trace,bin", "partitioned": "chrom,cell,trace,bin",
                  "primary+coords": "cell,trace,chrom,bin"}[layout]
    sp = ds["spots"]
    n = len(sp)
    bins = ds["bins"]
    has_cell = "cell_id" in sp
    has_coords = "x" in sp
    n_chroms = len(ds["chroms"])
    bin_chrom = np.asarray(bins["chrom"].cat.codes, dtype=np.int64)
    cell = np.asarray(sp["cell_id"].cat.codes, dtype=np.int64) if has_cell else np.full(n, -1)
    trace = np.asarray(sp["trace_id"].cat.codes, dtype=np.int64)
    binid = sp["bin_id"].to_numpy().astype(np.int64)
    chrom = bin_chrom[binid] if n else np.zeros(0, np.int64)
    canon = np.lexsort((binid, chrom, trace, cell))  # stable
    if layout == "partitioned":
        stored = canon[np.argsort(chrom[canon], kind="stable")]
    else:
        stored = canon
    S = lambda a: a[stored]  # noqa: E731
    c_s, t_s, ch_s = S(cell), S(trace), S(chrom)

    if layout == "flat":
        run_keys = [c_s, t_s]
        seg_keys = [c_s]
    elif layout == "partitioned":
        run_keys = [ch_s, c_s, t_s]
        seg_keys = [ch_s, c_s]
    else:
        run_keys = [c_s, t_s, ch_s]
        seg_keys = [c_s]
    rb = boundaries(run_keys) if n else [0]
    trace_offsets = rb
    runs = list(zip(rb[:-1], rb[1:]))
    trace_codes = [int(t_s[a]) for a, _ in runs]
    trace_cells = [int(c_s[a]) for a, _ in runs]
    chrom_trace = [int(ch_s[a]) if len(set(ch_s[a:b])) == 1 else -1 for a, b in runs]
    if has_cell and n:
        cb = boundaries(seg_keys)
        cell_codes = [int(c_s[a]) for a in cb[:-1]]
    else:
        cb = [0]
        cell_codes = []

    # Row groups.
    def groups_for(lo, hi, T_):
        units = [b - lo for b in (cb if has_cell else rb) if lo <= b <= hi]
        rr = [b - lo for b in rb if lo <= b <= hi]
        if units[0] != 0:
            units = [0] + units
        return pack(units, rr, T_)

    partitions = []
    if layout == "partitioned":
        part_bounds = boundaries([ch_s]) if n else [0]
        groups = []
        part_groups = [0]
        for a, b in zip(part_bounds[:-1], part_bounds[1:]):
            g = groups_for(a, b, T)
            groups.append(g)
            part_groups.append(part_groups[-1] + len(g))
        flat_groups = [x for g in groups for x in g]
    else:
        flat_groups = groups_for(0, n, T) if n else []
    row_groups = [0] + list(np.cumsum(flat_groups).astype(int)) if flat_groups else [0]

    # Parquet files.
    root = out
    tdir = os.path.join(root, "tables")
    os.makedirs(tdir, exist_ok=True)
    chrom_names = ds["chroms"]
    chrom_dirs = ["chrom=" + p for p in portable(chrom_names)]
    portable_cols = dict(zip(ds["extras"], portable(ds["extras"])))
    del portable_cols

    def key_table(idx):
        cols = {"bin_id": pa.array(binid[idx].astype(np.int32))}
        cols["trace_id"] = pa.array(trace[idx], type=codes_type(len(ds["trace_cats"])))
        if has_cell:
            cols["cell_id"] = pa.array(cell[idx], type=codes_type(len(ds["cell_cats"])))
        if has_coords:
            for a in "xyz":
                cols[a] = pa.array(sp[a].to_numpy()[idx])
        return cols

    # Storage decisions for extra columns.
    storage = {}
    for c in ds["extras"]:
        if layout != "primary+coords":
            storage[c] = {"storage": "spots"}
            continue
        s = sp[c]
        is_cat = isinstance(s.dtype, pd.CategoricalDtype)
        vals = s.cat.codes.to_numpy() if is_cat else s.to_numpy()
        dec = None
        if not is_cat:
            for bc in bins.columns:
                if isinstance(bins[bc].dtype, pd.CategoricalDtype):
                    continue
                if prim_name(bins[bc]) == prim_name(s) and n and all(
                        bins[bc].to_numpy()[binid] == vals):
                    dec = {"storage": "bins", "source": bc}
                    break
        if dec is None:
            for key, codes in (("bin", binid), ("cell", cell if has_cell else None), ("trace", trace)):
                if codes is None or n == 0:
                    continue
                frame = pd.DataFrame({"k": codes, "v": pd.Series(vals).astype(object)})
                if (frame.groupby("k")["v"].nunique(dropna=False) <= 1).all():
                    dec = {"storage": "derived", "key": key}
                    break
        storage[c] = dec or {"storage": "primary"}

    extra_stored = dict(zip(ds["extras"], portable(ds["extras"])))

    def coldesc(c, s, table, spot_aligned=True):
        t = prim_name(s)
        d = {"name": c, "type": t}
        if t == "categorical":
            cats = list(s.cat.categories)
            if spot_aligned:
                d["codes"] = "int16" if len(cats) <= 32767 else "int32"
            d["categories"] = f"categories/{table}.{extra_stored[c]}.parquet"
            d["n_categories"] = len(cats)
            d["ordered"] = False
        return d

    extra_descs = []
    for c in ds["extras"]:
        d = coldesc(c, sp[c], "spots")
        d.update(storage[c])
        extra_descs.append(d)
        if d["type"] == "categorical":
            write_categories(root, d["categories"], list(sp[c].cat.categories))

    trace_desc = {"name": "trace_id", "type": "categorical", "codes": "int16" if len(ds["trace_cats"]) <= 32767 else "int32",
                  "categories": "categories/spots.trace_id.parquet", "n_categories": len(ds["trace_cats"]), "ordered": False}
    write_categories(root, trace_desc["categories"], ds["trace_cats"])
    cell_desc = None
    if has_cell:
        cell_desc = {"name": "cell_id", "type": "categorical", "codes": "int16",
                     "categories": "categories/spots.cell_id.parquet", "n_categories": len(ds["cell_cats"]), "ordered": False}
        write_categories(root, cell_desc["categories"], ds["cell_cats"])

    def extras_table(idx, which):
        cols = {}
        for c in ds["extras"]:
            if storage[c]["storage"] in which:
                cols[c] = arrow_values(sp[c].iloc[idx])
        return cols

    track_cols = list(ds["tracks"].columns)
    track_tab = lambda idx: {c: pa.array(ds["tracks"][c].to_numpy()[idx]) for c in track_cols}  # noqa: E731
    layer_keys = list(ds["layers"])
    layer_names = portable(layer_keys)
    tables = {}
    spots_meta = {"layout": layout, "n_rows": n, "row_group_size": T,
                  "bin_id": {"name": "bin_id", "type": "int32"}, "trace_id": trace_desc, "cell_id": cell_desc,
                  "coords": {"columns": ["x", "y", "z"], "type": ds["coord_dtype"]} if has_coords else None,
                  "columns": extra_descs}
    layers_meta = []
    tracks_meta = {"columns": [{"name": c, "type": prim_name(ds["tracks"][c])} for c in track_cols]}
    derived_meta = []

    def tab(cols):
        return pa.table(cols) if cols else None

    if layout == "flat":
        cols = key_table(stored)
        cols.update(extras_table(stored, {"spots"}))
        write_pq(os.path.join(tdir, "spots.parquet"), pa.table(cols), flat_groups, dictionary=False)
        spots_meta["path"] = "spots.parquet"
        write_pq(os.path.join(tdir, "spot_tracks.parquet"), pa.table(track_tab(stored)), flat_groups, dictionary=False)
        tracks_meta["path"] = "spot_tracks.parquet"
        for k, nm in zip(layer_keys, layer_names):
            L = ds["layers"][k]
            write_pq(os.path.join(tdir, f"layers/{nm}.parquet"),
                     pa.table({a: pa.array(L[a].to_numpy()[stored]) for a in "xyz"}), flat_groups, dictionary=False)
            layers_meta.append({"key": k, "type": str(L["x"].dtype), "columns": ["x", "y", "z"], "path": f"layers/{nm}.parquet"})
    elif layout == "partitioned":
        files, tfiles, lfiles = [], [], {k: [] for k in layer_keys}
        for p, (a, b) in enumerate(zip(part_bounds[:-1], part_bounds[1:])):
            idx = stored[a:b]
            code = int(ch_s[a])
            dname = chrom_dirs[code]
            cols = key_table(idx)
            cols.update(extras_table(idx, {"spots"}))
            f = f"spots/{dname}/part-0.parquet"
            write_pq(os.path.join(tdir, f), pa.table(cols), groups[p], dictionary=False)
            files.append(f)
            f = f"spot_tracks/{dname}/part-0.parquet"
            write_pq(os.path.join(tdir, f), pa.table(track_tab(idx)), groups[p], dictionary=False)
            tfiles.append(f)
            for k, nm in zip(layer_keys, layer_names):
                L = ds["layers"][k]
                f = f"layers/{nm}/{dname}/part-0.parquet"
                write_pq(os.path.join(tdir, f), pa.table({x: pa.array(L[x].to_numpy()[idx]) for x in "xyz"}), groups[p],
                         dictionary=False)
                lfiles[k].append(f)
            partitions.append({"chrom": chrom_names[code], "chrom_code": code, "dir": dname, "n_rows": int(b - a),
                               "n_row_groups": len(groups[p])})
        spots_meta["partitions"] = partitions
        spots_meta["files"] = files
        tracks_meta["files"] = tfiles
        for k in layer_keys:
            layers_meta.append({"key": k, "type": str(ds["layers"][k]["x"].dtype), "columns": ["x", "y", "z"], "files": lfiles[k]})
    else:
        # Primary tables in canonical order.
        pcols = extras_table(stored, {"primary"})
        if pcols:
            write_pq(os.path.join(tdir, "primary/spots.parquet"), pa.table(pcols), flat_groups)
            spots_meta["primary_path"] = "primary/spots.parquet"
        else:
            spots_meta["primary_path"] = None
        write_pq(os.path.join(tdir, "primary/spot_tracks.parquet"), pa.table(track_tab(stored)), flat_groups)
        tracks_meta["path"] = "primary/spot_tracks.parquet"
        for k, nm in zip(layer_keys, layer_names):
            L = ds["layers"][k]
            write_pq(os.path.join(tdir, f"primary/layers/{nm}.parquet"),
                     pa.table({a: pa.array(L[a].to_numpy()[stored]) for a in "xyz"}), flat_groups)
            layers_meta.append({"key": k, "type": str(L["x"].dtype), "columns": ["x", "y", "z"], "path": f"primary/layers/{nm}.parquet"})
        # Derived files.
        for key, nrows, codes in (("bin", len(bins), binid), ("cell", len(ds["cell_cats"] or []), cell), ("trace", len(ds["trace_cats"]), trace)):
            cs = [c for c in ds["extras"] if storage[c] == {"storage": "derived", "key": key}]
            if not cs:
                continue
            cols = {}
            for c in cs:
                s = sp[c]
                is_cat = isinstance(s.dtype, pd.CategoricalDtype)
                vals = s.cat.codes.to_numpy() if is_cat else s.to_numpy()
                out_vals = [None] * nrows
                for code, v in zip(codes, vals):
                    out_vals[code] = None if (is_cat and v < 0) else v
                if is_cat:
                    cols[c] = pa.array(out_vals, type=codes_type(len(s.cat.categories)))
                elif s.dtype == object:
                    cols[c] = pa.array(out_vals, type=pa.string())
                else:
                    cols[c] = pa.array(out_vals, type=pa.from_numpy_dtype(s.dtype))
            write_pq(os.path.join(tdir, f"derived/{key}.parquet"), pa.table(cols), [nrows])
            derived_meta.append({"key": key, "path": f"derived/{key}.parquet", "n_rows": nrows, "columns": cs})
        # Coords partitions: canonical rows stably sorted by chrom.
        corder = canon[np.argsort(chrom[canon], kind="stable")]
        cc, ct, cch = cell[corder], trace[corder], chrom[corder]
        crb = boundaries([cch, cc, ct]) if n else [0]
        cpb = boundaries([cch]) if n else [0]
        ccb = boundaries([cch, cc]) if (n and has_cell) else crb
        cgroups, cpg, files = [], [0], []
        for a, b in zip(cpb[:-1], cpb[1:]):
            units = [x - a for x in ccb if a <= x <= b]
            g = pack(units, [x - a for x in crb if a <= x <= b], TC)
            code = int(cch[a])
            f = f"coords/{chrom_dirs[code]}/part-0.parquet"
            write_pq(os.path.join(tdir, f), pa.table(key_table(corder[a:b])), g, dictionary=False)
            files.append(f)
            cgroups.extend(g)
            cpg.append(cpg[-1] + len(g))
            partitions.append({"chrom": chrom_names[code], "chrom_code": code, "dir": chrom_dirs[code],
                               "n_rows": int(b - a), "n_row_groups": len(g)})
        spots_meta["coords_row_group_size"] = TC
        spots_meta["partitions"] = partitions
        spots_meta["coords_files"] = files
        # primary_run: coords run k -> primary run with the same (cell, trace, chrom).
        prim_key = {(trace_cells[r], trace_codes[r], chrom_trace[r]): r for r in range(len(runs))}
        primary_run = [prim_key[(int(cc[a]), int(ct[a]), int(cch[a]))] for a in crb[:-1]]
        coords_index = dict(partition_offsets=cpb, partition_groups=cpg,
                            partition_chrom=[int(cch[a]) for a in cpb[:-1]],
                            row_groups=[0] + list(np.cumsum(cgroups).astype(int)) if cgroups else [0],
                            run_offsets=crb, primary_run=primary_run)

    # Small tables.
    write_small(os.path.join(tdir, "bins.parquet"), bins)
    write_categories(root, "categories/bins.chrom.parquet", ds["chroms"])
    bins_meta = {"path": "bins.parquet", "n_rows": len(bins), "columns": [
        {"name": "chrom", "type": "categorical", "categories": "categories/bins.chrom.parquet",
         "n_categories": len(ds["chroms"]), "ordered": False},
        {"name": "start", "type": "int64"}, {"name": "end", "type": "int64"}, {"name": "name", "type": "string"}]}
    write_small(os.path.join(tdir, "bin_tracks.parquet"), ds["bin_tracks"])
    bt_meta = {"path": "bin_tracks.parquet", "n_rows": len(bins),
               "columns": [{"name": c, "type": prim_name(ds["bin_tracks"][c])} for c in ds["bin_tracks"].columns]}
    write_small(os.path.join(tdir, "traces.parquet"), ds["traces"])
    tr_meta = {"path": "traces.parquet", "n_rows": len(ds["traces"]), "index": "trace_id",
               "columns": [{"name": c, "type": prim_name(ds["traces"][c])} for c in ds["traces"].columns]}
    ce_meta = None
    if has_cell:
        write_small(os.path.join(tdir, "cells.parquet"), ds["cells"])
        ce_meta = {"path": "cells.parquet", "n_rows": len(ds["cells"]), "index": "cell_id",
                   "columns": [{"name": c, "type": prim_name(ds["cells"][c])} for c in ds["cells"].columns]}
    iv_meta = []
    for k, nm in zip(ds["intervals"], portable(list(ds["intervals"]))):
        kind, df = ds["intervals"][k]
        write_small(os.path.join(tdir, f"intervals/{nm}.parquet"), df)
        iv_meta.append({"key": k, "path": f"intervals/{nm}.parquet", "n_rows": len(df), "kind": kind,
                        "source_result": ds["comps"]["source_result"].get(k)})
    pt_meta = []
    for k, nm in zip(ds["points"], portable(list(ds["points"]))):
        df = ds["points"][k]
        write_small(os.path.join(tdir, f"points/{nm}.parquet"), df)
        pt_meta.append({"key": k, "path": f"points/{nm}.parquet", "n_rows": len(df)})

    tables = {"spots": spots_meta, "spot_tracks": tracks_meta, "layers": layers_meta, "derived": derived_meta,
              "bins": bins_meta, "bin_tracks": bt_meta, "traces": tr_meta, "cells": ce_meta,
              "intervals": iv_meta, "points": pt_meta}

    # Zarr nodes.
    has_source_row = not np.array_equal(stored, np.arange(n))
    uchrom = {"format": "chromdata.zarr", "format_version": version, "spot_order": spot_order, "n_spots": n,
              "n_bins": len(bins), "n_traces": len(ds["trace_cats"]), "n_cells": len(ds["cell_cats"] or []),
              "n_chroms": n_chroms, "n_runs": len(runs), "n_row_groups": len(flat_groups),
              "has_source_row": bool(has_source_row), "has_cell_id": has_cell, "has_coords": has_coords,
              "coord_dtype": ds["coord_dtype"], "some_future_key": [1, 2]}
    if layout == "primary+coords":
        uchrom["n_coord_row_groups"] = len(coords_index["row_groups"]) - 1
    g = zarr.open_group(root, mode="a", attributes={"uchrom_format_version": version, "uchrom_version": "test-writer",
                                                   "uchrom": uchrom})
    g.create_group("tables", attributes={"tables": tables})
    ix = g.create_group("index")
    zarr_array(ix, "trace_offsets", trace_offsets, "int64")
    zarr_array(ix, "trace_codes", trace_codes, "int32")
    zarr_array(ix, "trace_cells", trace_cells, "int32")
    zarr_array(ix, "chrom_trace", chrom_trace, "int32")
    zarr_array(ix, "cell_offsets", cb, "int64")
    zarr_array(ix, "cell_codes", cell_codes, "int32")
    zarr_array(ix, "row_groups", row_groups, "int64")
    if has_source_row:
        zarr_array(ix, "source_row", stored, "int64")
    if layout == "partitioned":
        zarr_array(ix, "partition_offsets", part_bounds, "int64")
        zarr_array(ix, "partition_groups", part_groups, "int64")
        zarr_array(ix, "partition_chrom", [int(ch_s[a]) for a in part_bounds[:-1]], "int32")
        seg_part = [int(np.searchsorted(part_bounds, a, side="right") - 1) for a in cb[:-1]] if has_cell else []
        zarr_array(ix, "cell_partition", seg_part, "int32")
    if layout == "primary+coords":
        cg = ix.create_group("coords")
        for k in ("partition_offsets", "partition_groups", "row_groups", "run_offsets", "primary_run"):
            zarr_array(cg, k, coords_index[k], "int64")
        zarr_array(cg, "partition_chrom", coords_index["partition_chrom"], "int32")
    write_components(g, root, ds["comps"])
    return root


def make_cdz(src_dir, out):
    files = []
    for d, _, fs in os.walk(src_dir):
        for f in fs:
            full = os.path.join(d, f)
            files.append(os.path.relpath(full, src_dir).replace(os.sep, "/"))
    files = ["zarr.json"] + sorted((f for f in files if f != "zarr.json"), key=lambda s: s.encode())
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as z:
        for f in files:
            info = zipfile.ZipInfo(f, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED
            with open(os.path.join(src_dir, f), "rb") as fh:
                z.writestr(info, fh.read())


# ----------------------------------------------------------------------------------------
# Expected answers (pandas, from the logical data in input order)


def full_expected(ds):
    """The full-schema table (§15.1) in input order."""
    sp = ds["spots"]
    cols = {}
    cols["bin_id"] = pa.array(sp["bin_id"].to_numpy().astype(np.int32))

    def decoded(s):
        cats = list(s.cat.categories)
        t = cat_type(cats)
        codes = s.cat.codes.to_numpy()
        vals = [None if c < 0 else cats[c] for c in codes]
        return pa.array(vals, type=t)

    cols["trace_id"] = decoded(sp["trace_id"])
    if "cell_id" in sp:
        cols["cell_id"] = decoded(sp["cell_id"])
    if "x" in sp:
        for a in "xyz":
            cols[a] = pa.array(sp[a].to_numpy())
    for c in ds["extras"]:
        s = sp[c]
        if isinstance(s.dtype, pd.CategoricalDtype):
            cols[c] = decoded(s)
        elif s.dtype == object:
            cols[c] = pa.array(list(s), type=pa.string())
        else:
            cols[c] = pa.array(s.to_numpy())
    for c in ds["tracks"].columns:
        cols[f"spot_tracks/{c}"] = pa.array(ds["tracks"][c].to_numpy())
    for k, L in ds["layers"].items():
        for a in "xyz":
            cols[f"layers/{k}/{a}"] = pa.array(L[a].to_numpy())
    return pa.table(cols)


def canonical_idx(ds, mask):
    sp = ds["spots"]
    n = len(sp)
    cell = sp["cell_id"].cat.codes.to_numpy().astype(np.int64) if "cell_id" in sp else np.full(n, -1)
    trace = sp["trace_id"].cat.codes.to_numpy().astype(np.int64)
    binid = sp["bin_id"].to_numpy().astype(np.int64)
    chrom = ds["bins"]["chrom"].cat.codes.to_numpy()[binid] if n else np.zeros(0, np.int64)
    df = pd.DataFrame({"cell": cell, "trace": trace, "chrom": chrom, "bin": binid, "row": np.arange(n)})
    df = df[mask]
    df = df.sort_values(["cell", "trace", "chrom", "bin"], kind="stable")
    return df["row"].to_numpy()


def select(full, columns, has_cell):
    names = full.column_names
    keys = ["bin_id", "trace_id"] + (["cell_id"] if has_cell else [])
    if columns == "all":
        return full
    if columns == "coords":
        return full.select([c for c in names if c in keys or c in ("x", "y", "z")])
    want = set(keys) | set(columns)
    return full.select([c for c in names if c in want])


def write_expected(ds, outdir, name):
    os.makedirs(outdir, exist_ok=True)
    full = full_expected(ds)
    sp = ds["spots"]
    has_cell = "cell_id" in sp
    n = len(sp)
    queries = []
    counter = [0]

    def emit(q, table):
        counter[0] += 1
        f = f"{name}_{counter[0]:03d}.parquet"
        # Result types per §15.1: keep as built (utf8, no dictionaries, no metadata).
        pq.write_table(table.replace_schema_metadata(None), os.path.join(outdir, f))
        q["file"] = f
        queries.append(q)

    col_sets = ["all", "coords", ["odd name/col", "spot_tracks/intensity", "tlabel", "trace_id", "tlabel", "x", "probe"],
                ["layers/drift corr/y", "readout"]]
    if "x" not in sp:
        col_sets[2] = [c for c in col_sets[2] if c != "x"]
    if has_cell:
        col_sets.append(["fov"])
    trace_codes = sp["trace_id"].cat.codes.to_numpy()
    for t, tv in enumerate(ds["trace_cats"]):
        for cs in (col_sets if t < 2 else ["all"]):
            idx = canonical_idx(ds, trace_codes == t)
            emit({"kind": "get_trace", "id": tv, "columns": cs}, select(full.take(idx), cs, has_cell))
    if has_cell:
        cell_codes = sp["cell_id"].cat.codes.to_numpy()
        for c, cv in enumerate(ds["cell_cats"]):
            for cs in (col_sets if c == 0 else ["all"]):
                idx = canonical_idx(ds, cell_codes == c)
                emit({"kind": "get_cell", "id": cv, "columns": cs}, select(full.take(idx), cs, has_cell))
    binid = sp["bin_id"].to_numpy()
    chrom = ds["bins"]["chrom"].cat.codes.to_numpy()[binid] if n else np.zeros(0, int)
    for ch, chv in enumerate(ds["chroms"]):
        for cs in col_sets:
            idx = canonical_idx(ds, chrom == ch)
            emit({"kind": "get_chrom", "id": chv, "columns": cs}, select(full.take(idx), cs, has_cell))
    for cs in col_sets:
        idx = canonical_idx(ds, np.ones(n, bool))
        emit({"kind": "read_spots", "original_order": False, "columns": cs}, select(full.take(idx), cs, has_cell))
        emit({"kind": "read_spots", "original_order": True, "columns": cs}, select(full, cs, has_cell))
    emit({"kind": "by_spot_id"}, full.take(np.argsort(sp["spot_id"].to_numpy(), kind="stable")))

    # Small tables and categories.
    def norm_table(df):
        t = pa.Table.from_pandas(df, preserve_index=False)
        cols = []
        for c in t.columns:
            c = c.combine_chunks()
            if pa.types.is_dictionary(c.type):
                c = c.dictionary_decode()
            cols.append(c)
        return pa.table(dict(zip(t.column_names, cols)))

    emit({"kind": "table", "name": "bins"}, norm_table(ds["bins"]))
    emit({"kind": "table", "name": "bin_tracks"}, norm_table(ds["bin_tracks"]))
    emit({"kind": "table", "name": "traces"}, norm_table(ds["traces"]))
    if has_cell:
        emit({"kind": "table", "name": "cells"}, norm_table(ds["cells"]))
    for k, (_, df) in ds["intervals"].items():
        emit({"kind": "table", "name": f"intervals/{k}"}, norm_table(df))
    for k, df in ds["points"].items():
        emit({"kind": "table", "name": f"points/{k}"}, norm_table(df))
    cat_cols = [("spots", "trace_id", ds["trace_cats"]), ("bins", "chrom", ds["chroms"]),
                ("spots", "coord_status", list(sp["coord_status"].cat.categories)),
                ("spots", "tlabel", list(sp["tlabel"].cat.categories))]
    if has_cell:
        cat_cols.append(("spots", "cell_id", ds["cell_cats"]))
    for tname, col, cats in cat_cols:
        emit({"kind": "categories", "table": tname, "column": col}, pa.table({"category": pa.array(cats, type=cat_type(cats))}))
    comps = ds["comps"]
    keys = {"layers": list(ds["layers"]), "intervals": list(ds["intervals"]), "points": list(ds["points"]),
            "cellm": list(comps["cellm"]), "binm": list(comps["binm"]),
            "results": [p[0] for p, _, _ in comps["results"] if len(p) == 1], "uns": list(comps["uns_arrays"]),
            "contacts": [r["key"] for r in comps["contacts"]], "links": [r["key"] for r in comps["links"]]}
    for kind, ks in keys.items():
        emit({"kind": "keys", "what": kind}, pa.table({"key": pa.array(ks, type=pa.string())}))
    # Errors.
    bad_id = 123456 if isinstance(ds["trace_cats"][0], int) else "no_such_trace"
    wrong_type = "100" if isinstance(ds["trace_cats"][0], int) else 5
    errs = [
        {"kind": "get_trace", "id": bad_id, "columns": "all", "error": "NotFound"},
        {"kind": "get_trace", "id": wrong_type, "columns": "all", "error": "NotFound"},
        {"kind": "get_chrom", "id": "chrX", "columns": "all", "error": "NotFound"},
        {"kind": "get_trace", "id": ds["trace_cats"][0], "columns": ["no_such_column"], "error": "NotFound"},
        {"kind": "table", "name": "intervals/nope", "error": "NotFound"},
        {"kind": "categories", "table": "spots", "column": "spot_id", "error": "NotFound"},
    ]
    if not has_cell:
        errs.append({"kind": "get_cell", "id": "c0", "columns": "all", "error": "NotFound"})
        errs.append({"kind": "table", "name": "cells", "error": "NotFound"})
    queries.extend(errs)
    return queries


# ----------------------------------------------------------------------------------------
# Invalid stores (§14)


def edit_json(path, fn):
    with open(path) as f:
        j = json.load(f)
    fn(j)
    with open(path, "w") as f:
        json.dump(j, f)


def invalid_stores(base_dir, out_root):
    """base_dir: a valid store written in each layout; returns [(name, path, kind)]."""
    cases = []

    def variant(name, layout, fn, kind, cdz=False):
        src = base_dir[layout]
        dst = os.path.join(out_root, f"bad_{name}.chromdata.zarr")
        if os.path.exists(dst):
            shutil.rmtree(dst)
        shutil.copytree(src, dst)
        fn(dst)
        if cdz:
            z = dst[: -len(".chromdata.zarr")] + ".cdz"
            make_cdz(dst, z)
            shutil.rmtree(dst)
            dst = z
        cases.append({"name": name, "path": os.path.basename(dst), "error": kind})

    def root_attrs(fn):
        return lambda d: edit_json(os.path.join(d, "zarr.json"), lambda j: fn(j["attributes"]))

    def uchrom(fn):
        return root_attrs(lambda a: fn(a["uchrom"]))

    def tables_attr(fn):
        return lambda d: edit_json(os.path.join(d, "tables/zarr.json"), lambda j: fn(j["attributes"]["tables"]))

    def rm(rel):
        def f(d):
            p = os.path.join(d, rel)
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
        return f

    def truncate(rel, keep=50):
        def f(d):
            p = os.path.join(d, rel)
            with open(p, "rb") as fh:
                data = fh.read()
            with open(p, "wb") as fh:
                fh.write(data[: len(data) - keep])
        return f

    def set_version(v):
        def f(a):
            a["uchrom_format_version"] = v
            a["uchrom"]["format_version"] = v
        return root_attrs(f)

    # 1. root
    variant("no_root", "flat", rm("zarr.json"), "NotFound")
    variant("root_is_array", "flat", lambda d: edit_json(os.path.join(d, "zarr.json"), lambda j: j.update(node_type="array")), "Format")
    variant("root_zarr_v2", "flat", lambda d: edit_json(os.path.join(d, "zarr.json"), lambda j: j.update(zarr_format=2)), "Format")
    variant("root_not_json", "flat", lambda d: open(os.path.join(d, "zarr.json"), "w").write("{not json"), "Format")
    variant("no_version", "flat", root_attrs(lambda a: a.pop("uchrom_format_version")), "Format")
    # 2. versions and layouts
    variant("bad_version", "flat", set_version("2.x"), "Unsupported")
    variant("bad_version_3_parts", "flat", set_version("2.0.1"), "Unsupported")
    variant("major_1", "flat", set_version("1.0"), "Unsupported")
    variant("major_3", "flat", set_version("3.0"), "Unsupported")
    variant("newer_minor", "primary+coords", set_version("2.3"), "Unsupported")
    variant("format_name", "flat", uchrom(lambda u: u.update(format="h5cd")), "Format")
    variant("format_version_mismatch", "flat", uchrom(lambda u: u.update(format_version="2.1")), "Format")
    variant("layout_mismatch", "flat", tables_attr(lambda t: t["spots"].update(layout="partitioned")), "Unsupported")
    variant("layout_mismatch_22_as_21", "primary+coords",
            lambda d: (set_version("2.1")(d), uchrom(lambda u: u.update(spot_order="chrom,cell,trace,bin"))(d)), "Unsupported")
    variant("unknown_layout", "partitioned", tables_attr(lambda t: t["spots"].update(layout="columnar")), "Unsupported")
    variant("spot_order_mismatch", "flat", uchrom(lambda u: u.update(spot_order="chrom,cell,trace,bin")), "Unsupported")
    # 3. missing / truncated parts
    variant("no_tables_group", "flat", rm("tables/zarr.json"), "NotFound")
    variant("missing_spots_file", "flat", rm("tables/spots.parquet"), "NotFound")
    variant("missing_partition_file", "partitioned", rm("tables/spots/chrom=chr2/part-0.parquet"), "NotFound")
    variant("missing_coords_file", "primary+coords", rm("tables/coords/chrom=chr1/part-0.parquet"), "NotFound")
    variant("missing_primary", "primary+coords", rm("tables/primary/spots.parquet"), "NotFound")
    variant("missing_layer", "primary+coords", rm("tables/primary/layers/_1.parquet"), "NotFound")
    variant("missing_derived", "primary+coords", rm("tables/derived/bin.parquet"), "NotFound")
    variant("missing_categories", "flat", rm("tables/categories/spots.trace_id.parquet"), "NotFound")
    variant("missing_bins", "partitioned", rm("tables/bins.parquet"), "NotFound")
    variant("missing_index_array", "flat", rm("index/trace_codes"), "NotFound")
    variant("missing_index_chunk_meta", "partitioned", rm("index/partition_offsets/zarr.json"), "NotFound")
    variant("missing_interval", "flat", rm("tables/intervals/_1.parquet"), "NotFound")
    variant("missing_source_row", "flat", rm("index/source_row"), "NotFound")
    variant("truncated_spots", "flat", truncate("tables/spots.parquet"), "Format")
    variant("truncated_bins", "flat", truncate("tables/bins.parquet", 5), "Format")
    variant("truncated_coords_cdz", "primary+coords", truncate("tables/coords/chrom=chr2/part-0.parquet", 30), "Format", cdz=True)
    variant("missing_member_cdz", "partitioned", rm("tables/spot_tracks/chrom=chr1/part-0.parquet"), "NotFound", cdz=True)
    # 4. counts
    variant("n_spots", "flat", uchrom(lambda u: u.update(n_spots=u["n_spots"] + 1)), "Format")
    variant("spots_n_rows", "partitioned", tables_attr(lambda t: t["spots"].update(n_rows=t["spots"]["n_rows"] - 1)), "Format")
    variant("n_bins", "flat", uchrom(lambda u: u.update(n_bins=u["n_bins"] + 1)), "Format")
    variant("bins_n_rows", "flat", tables_attr(lambda t: t["bins"].update(n_rows=3)), "Format")
    variant("n_traces", "primary+coords", uchrom(lambda u: u.update(n_traces=u["n_traces"] - 1)), "Format")
    variant("trace_n_categories", "flat", tables_attr(lambda t: t["spots"]["trace_id"].update(n_categories=2)), "Format")
    variant("n_cells", "flat", uchrom(lambda u: u.update(n_cells=u["n_cells"] + 2)), "Format")
    variant("n_chroms", "flat", uchrom(lambda u: u.update(n_chroms=2)), "Format")
    variant("n_runs", "flat", uchrom(lambda u: u.update(n_runs=u["n_runs"] + 1)), "Format")
    variant("n_row_groups", "flat", uchrom(lambda u: u.update(n_row_groups=u["n_row_groups"] + 1)), "Format")
    variant("n_coord_row_groups", "primary+coords", uchrom(lambda u: u.update(n_coord_row_groups=u["n_coord_row_groups"] - 1)), "Format")
    variant("has_source_row_false", "flat", uchrom(lambda u: u.update(has_source_row=False)), "Format")
    variant("partition_meta_rows", "partitioned",
            tables_attr(lambda t: t["spots"]["partitions"][0].update(n_rows=t["spots"]["partitions"][0]["n_rows"] + 1)), "Format")
    variant("partition_meta_chrom", "partitioned",
            tables_attr(lambda t: t["spots"]["partitions"][0].update(chrom_code=2)), "Format")
    variant("partition_meta_groups", "primary+coords",
            tables_attr(lambda t: t["spots"]["partitions"][1].update(n_row_groups=99)), "Format")
    variant("descriptor_missing_column", "flat",
            tables_attr(lambda t: t["spots"]["columns"][1].update(name="not_there")), "Format")
    variant("descriptor_code_type", "partitioned",
            tables_attr(lambda t: t["spots"]["trace_id"].update(codes="int32")), "Format")
    variant("descriptor_value_type", "primary+coords",
            tables_attr(lambda t: [c.update(type="float64") for c in t["spots"]["columns"] if c["name"] == "spot_id"]), "Format")
    variant("derived_rows", "primary+coords",
            tables_attr(lambda t: t["derived"][0].update(n_rows=t["derived"][0]["n_rows"] + 1)), "Format")
    variant("derived_column_missing", "primary+coords",
            tables_attr(lambda t: t["derived"][0].update(columns=[])), "Format")
    variant("has_cell_id_mismatch", "flat", uchrom(lambda u: u.update(has_cell_id=False, n_cells=0)), "Format")
    variant("coords_mismatch", "flat", uchrom(lambda u: u.update(has_coords=False, coord_dtype=None)), "Format")
    variant("reserved_name", "flat", tables_attr(lambda t: t["spots"]["columns"][1].update(name="x")), "Format")

    # 5. arrays: dtype and shape
    def retype(rel, dtype):
        def f(d):
            g = zarr.open_group(d, mode="a")
            a = g[rel]
            data = a[:]
            del g[rel]
            parent, name = rel.rsplit("/", 1)
            zarr_array(g[parent], name, data.astype(dtype), dtype)
        return f

    def reshape(rel):
        def f(d):
            g = zarr.open_group(d, mode="a")
            data = g[rel][:]
            del g[rel]
            parent, name = rel.rsplit("/", 1)
            a = g[parent].create_array(name, shape=(1, len(data)), chunks=(1, max(len(data), 1)), dtype=data.dtype,
                                       fill_value=0, compressors=[ZstdCodec(level=3, checksum=False)])
            a[:] = data[None, :]
        return f

    variant("array_dtype", "flat", retype("index/trace_offsets", "int32"), "Format")
    variant("array_dtype_codes", "partitioned", retype("index/trace_codes", "int64"), "Format")
    variant("array_shape", "primary+coords", reshape("index/coords/run_offsets"), "Format")
    variant("primary_run_not_perm", "primary+coords",
            lambda d: (lambda g: g["index/coords/primary_run"].__setitem__(slice(0, 2), np.zeros(2, "int64")))(
                zarr.open_group(d, mode="a")), "Format")
    variant("offsets_decreasing", "flat",
            lambda d: (lambda a: a.__setitem__(1, 0))(zarr.open_group(d, mode="a")["index/trace_offsets"]), "Format")
    variant("row_groups_mismatch", "flat",
            lambda d: (lambda a: a.__setitem__(1, a[1] + 1))(zarr.open_group(d, mode="a")["index/row_groups"]), "Format")

    # .cdz member compressed (deflate) -> must be rejected.
    src = base_dir["flat"]
    z = os.path.join(out_root, "bad_deflated.cdz")
    files = ["zarr.json"] + sorted(
        os.path.relpath(os.path.join(dp, f), src).replace(os.sep, "/")
        for dp, _, fs in os.walk(src) for f in fs if os.path.relpath(os.path.join(dp, f), src) != "zarr.json")
    with zipfile.ZipFile(z, "w") as zf:
        for f in files:
            ct = zipfile.ZIP_DEFLATED if f.endswith("spots.parquet") else zipfile.ZIP_STORED
            zf.write(os.path.join(src, f), f, compress_type=ct)
    cases.append({"name": "deflated_member", "path": "bad_deflated.cdz", "error": "Unsupported"})
    return cases


# ----------------------------------------------------------------------------------------


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "chromdata-stores"
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(12345)
    datasets = [
        make_dataset("main", rng, n_cells=4, n_traces=6, has_coords=True, coord_dtype="float64"),
        make_dataset("nocell", rng, n_cells=0, n_traces=7, has_coords=True, coord_dtype="float32", trace_int=True),
        make_dataset("sorted", rng, n_cells=3, n_traces=4, has_coords=True, coord_dtype="float64", shuffle=False,
                     cell_int=True),
        make_dataset("nocoords", rng, n_cells=2, n_traces=5, has_coords=False, coord_dtype=None),
        make_dataset("empty", rng, n_cells=2, n_traces=3, has_coords=True, coord_dtype="float64", zero=True),
    ]
    manifest = {"stores": [], "invalid": []}
    # Files linked by the contacts / links records (§12 path rule): cells.scool by absolute
    # path, rna.h5ad only by relative_path.
    os.makedirs(os.path.join(out, "linked"), exist_ok=True)
    for f in ("cells.scool", "rna.h5ad"):
        open(os.path.join(out, "linked", f), "w").close()
    base = {}
    for ds in datasets:
        expected_dir = os.path.join(out, "expected", ds["name"])
        queries = write_expected(ds, expected_dir, ds["name"])
        comp_queries = component_queries(ds, out)
        for i, q in enumerate(comp_queries):
            if "table" in q:
                f = f"{ds['name']}_result_{i:03d}.parquet"
                t = pa.Table.from_pandas(q.pop("table"), preserve_index=False)
                cols = [c.combine_chunks() for c in t.columns]
                cols = [c.dictionary_decode() if pa.types.is_dictionary(c.type) else c for c in cols]
                pq.write_table(pa.table(dict(zip(t.column_names, cols))), os.path.join(expected_dir, f))
                q["file"] = f
        for layout, short in (("flat", "20"), ("partitioned", "21"), ("primary+coords", "22")):
            p = os.path.join(out, f"{ds['name']}_{short}.chromdata.zarr")
            write_store(ds, p, layout)
            make_cdz(p, os.path.join(out, f"{ds['name']}_{short}.cdz"))
            if ds["name"] == "main":
                base[layout] = p
            for path in (os.path.basename(p), f"{ds['name']}_{short}.cdz"):
                manifest["stores"].append({"path": path, "dataset": ds["name"], "layout": layout,
                                           "expected_dir": f"expected/{ds['name']}", "queries": queries,
                                           "components": comp_queries,
                                           "has_cell_id": "cell_id" in ds["spots"], "n_spots": len(ds["spots"])})
    manifest["invalid"] = invalid_stores(base, out)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, default=lambda o: o.item() if hasattr(o, "item") else str(o))


if __name__ == "__main__":
    main()
