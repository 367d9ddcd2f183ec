#!/usr/bin/env python3
"""pyarrow side of the ChromData benchmark (benches/chromdata.rs); not a test.

The Rust bench runs this script and parses the one JSON object it prints on stdout.
Times are measured here, in Python, around the pyarrow calls only.

    bench_pyarrow.py write INPUT.arrow OUT.parquet ROW_GROUP_SIZE
        Loads the Arrow IPC file (memory-mapped, not timed), then times
        pyarrow.parquet.write_table(zstd level 3, row_group_size) -> {"secs", "peak_rss_kb"}.

    bench_pyarrow.py read STORE PLAN.json
        STORE is a *.chromdata.zarr directory, a .cdz zip or a single .parquet file.
        PLAN.json: {"queries": [{"kind": K, "items": [[{"path", "row_groups", "columns"}, ...],
        ...]}, ...]}: per query kind, per item, the Parquet reads (store-relative path, row
        groups within the file, projected columns) that the Rust reader makes for it (from
        ChromData::read_plan). Kind "open" items list every spot-aligned file: its footer is
        read, and every other .parquet file of the store (the small tables) is read whole.
        Each item is timed with use_threads=True and with use_threads=False (only the
        former for a kind with "threads_only": true); files are
        opened (footers parsed) once per kind, outside the timings, as the Rust side uses
        one handle per query kind.
        -> {"kinds": {K: {"threads": [secs...], "single": [secs...], "rows": [n...]}},
            "peak_rss_kb": N}
        With --once, each item is read once (use_threads=True) and nothing else is done:
        the peak RSS is then that of the reads alone (full-read memory).
"""
import json
import os
import resource
import sys
import time
import zipfile

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq


def peak_rss_kb():
    """Peak RSS of this process image, kB: VmHWM. Not ru_maxrss, which Linux carries over
    exec from the forked parent (it would report the Rust bench's own RSS)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kB on Linux


def cmd_write(inp, out, row_group_size):
    with pa.memory_map(inp, "r") as src:
        table = ipc.open_file(src).read_all()
    t = time.perf_counter()
    pq.write_table(
        table,
        out,
        compression="zstd",
        compression_level=3,
        row_group_size=int(row_group_size),
    )
    secs = time.perf_counter() - t
    print(json.dumps({"secs": secs, "peak_rss_kb": peak_rss_kb(), "pyarrow": pa.__version__}))


class Store:
    """Store-relative paths to pyarrow sources: plain files, or .cdz members read in place
    from a memory map of the zip (members are STORED)."""

    def __init__(self, path):
        self.path = path
        self.zip = None
        self.single = None
        if os.path.isdir(path):
            pass
        elif path.endswith(".parquet"):
            self.single = path
        else:
            self.zip = path
            # Zero-copy: a buffer over the whole memory-mapped zip, sliced per member.
            self.buf = pa.memory_map(path, "r").read_buffer()
            self.members = {}
            with zipfile.ZipFile(path) as z, open(path, "rb") as f:
                for info in z.infolist():
                    if info.compress_type != zipfile.ZIP_STORED:
                        raise SystemExit(f"{path}: member {info.filename} is not STORED")
                    f.seek(info.header_offset)
                    head = f.read(30)
                    n, m = int.from_bytes(head[26:28], "little"), int.from_bytes(head[28:30], "little")
                    self.members[info.filename] = (info.header_offset + 30 + n + m, info.file_size)

    def names(self):
        if self.single is not None:
            return [""]
        if self.zip is not None:
            return sorted(self.members)
        out = []
        for root, _, files in os.walk(self.path):
            for f in files:
                out.append(os.path.relpath(os.path.join(root, f), self.path).replace(os.sep, "/"))
        return sorted(out)

    def open(self, rel):
        if self.single is not None:
            return pq.ParquetFile(self.single)
        if self.zip is not None:
            off, size = self.members[rel]
            return pq.ParquetFile(pa.BufferReader(self.buf.slice(off, size)))
        return pq.ParquetFile(os.path.join(self.path, rel))


def run_item(files, item, threads):
    rows = 0
    for r in item:
        t = files[r["path"]].read_row_groups(r["row_groups"], columns=r["columns"], use_threads=threads)
        rows = max(rows, t.num_rows)
    return rows


def cmd_read(store_path, plan_path, once):
    store = Store(store_path)
    with open(plan_path) as f:
        plan = json.load(f)
    out = {}
    for q in plan["queries"]:
        kind, items = q["kind"], q["items"]
        res = {"threads": [], "single": [], "rows": []}
        if kind == "open":
            spot = sorted({r["path"] for item in items for r in item})
            small = [n for n in store.names() if n.endswith(".parquet") and n not in spot]
            # One untimed round first, then `rounds` timed rounds per mode (median taken by
            # the bench).
            n = q.get("rounds", 5)
            for threads, key, reps in ((True, None, 1), (True, "threads", n), (False, "single", n)):
                for _ in range(reps):
                    t = time.perf_counter()
                    for p in spot:
                        store.open(p).metadata
                    for p in small:
                        store.open(p).read(use_threads=threads)
                    if key is not None:
                        res[key].append(time.perf_counter() - t)
            out[kind] = res
            continue
        paths = sorted({r["path"] for item in items for r in item})
        files = {p: store.open(p) for p in paths}
        threads_only = once or q.get("threads_only", False)
        modes = ((True, "threads"),) if threads_only else ((True, "threads"), (False, "single"))
        for threads, key in modes:
            for item in items:
                t = time.perf_counter()
                n = run_item(files, item, threads)
                res[key].append(time.perf_counter() - t)
                if threads:
                    res["rows"].append(n)
        out[kind] = res
    print(json.dumps({"kinds": out, "peak_rss_kb": peak_rss_kb(), "pyarrow": pa.__version__}))


def main(argv):
    if len(argv) >= 4 and argv[0] == "write":
        cmd_write(argv[1], argv[2], argv[3])
    elif len(argv) >= 3 and argv[0] == "read":
        cmd_read(argv[1], argv[2], "--once" in argv[3:])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
