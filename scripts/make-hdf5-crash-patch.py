#!/usr/bin/env python3
"""Stores an .h5ad that crashes libhdf5 as a small patch against a committed seed.

The fuzz target `h5ad` mutates copies of the bundled .h5ad (about 190 KB); some mutations
make libhdf5 crash (a segfault in C code: docs/reliability.md §1). The CLI contains that by
reading HDF5 inputs in a child process, and tests/hdf5_crash.rs checks it on each input kept
here. The inputs are stored as JSON patches in tests/data/hdf5-crashes/ — outside
fuzz/corpus and fuzz/regressions, which tests/fuzz_replay.rs replays in-process (a crash
there would kill the test binary):

    {"seed": "tests/data/scrna/...h5ad", "seed_sha256": ..., "length": N, "sha256": ...,
     "origin": "...", "edits": [[offset, n, "hex"], ...]}

Each edit replaces the n seed bytes at offset (offsets into the seed, increasing, not
overlapping) by the given bytes; the test rebuilds the file and checks both hashes.

    python3 scripts/make-hdf5-crash-patch.py CRASH NAME [--origin TEXT] [--minimize BIN]
                                             [--hang --object TEXT]

CRASH: the crashing file (e.g. target/fuzz-work/artifacts/h5ad/crash-<sha1>); NAME: the
patch's name (tests/data/hdf5-crashes/NAME.json). --seed PATH chooses another seed.
--minimize BIN: with the same length as the seed, reverts every changed byte that is not
needed for `BIN convert FILE OUT` (or with --no-sort-genes) to still report a libhdf5 crash (BIN: the deltacells
binary, e.g. target/debug/deltacells); the patch then holds only what crashes.

--hang: the file makes libhdf5 loop forever instead (a `timeout-*` artifact); the patch goes
to tests/data/hdf5-hangs/NAME.json, with `"object": TEXT` (--object: what the CLI's watchdog
names, e.g. "var attribute '_index'"), and --minimize keeps what still makes the watchdog
end the conversion (run with DELTACELLS_HDF5_CALL_TIMEOUT=1). Minimizing reverts the changed
bytes in halves first (delta debugging), then one by one.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED = "tests/data/scrna/10x-v3-1107-cells-chr21.h5ad"
OUT = os.path.join(ROOT, "tests", "data", "hdf5-crashes")


def edits_of(seed, data):
    """Edits turning seed into data: runs of changed bytes (same length), else one edit
    replacing what lies between the common prefix and the common suffix."""
    if len(seed) == len(data):
        edits, i = [], 0
        while i < len(seed):
            if seed[i] == data[i]:
                i += 1
                continue
            j = i
            while j < len(seed) and seed[j] != data[j]:
                j += 1
            edits.append([i, j - i, data[i:j].hex()])
            i = j
        return edits
    p = 0
    while p < min(len(seed), len(data)) and seed[p] == data[p]:
        p += 1
    s = 0
    while (s < min(len(seed), len(data)) - p
           and seed[len(seed) - 1 - s] == data[len(data) - 1 - s]):
        s += 1
    return [[p, len(seed) - s - p, data[p:len(data) - s].hex()]]


def apply(seed, edits):
    out, at = bytearray(), 0
    for off, n, hx in edits:
        out += seed[at:off] + bytes.fromhex(hx)
        at = off + n
    return bytes(out + seed[at:])


HANG = False


def crashes(binary, data):
    """Whether `binary convert` of data, with or without --no-sort-genes (which skips the
    pass over X before the names), reports a libhdf5 crash (--hang: a call that did not
    return, with a 1 s budget)."""
    want = "libhdf5 did not return within" if HANG else "libhdf5 crashed"
    env = dict(os.environ, DELTACELLS_HDF5_CALL_TIMEOUT="1")
    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "input.h5ad")
        with open(f, "wb") as fh:
            fh.write(data)
        for extra in ([], ["--no-sort-genes"]):
            r = subprocess.run([binary, "convert", f, os.path.join(d, "out.dc")] + extra,
                               capture_output=True, text=True, env=env, timeout=120)
            if r.returncode == 1 and want in r.stderr:
                return True
        return False


def minimize(binary, seed, data):
    if not crashes(binary, data):
        sys.exit(f"{binary} convert does not report a libhdf5 "
                 f"{'hang' if HANG else 'crash'} on this input")
    cur = bytearray(data)

    def revert(idx):
        trial = bytearray(cur)
        for i in idx:
            trial[i] = seed[i]
        return bytes(trial)

    # Delta debugging: revert halves of the changed bytes while the outcome stays.
    todo = [[k for k in range(len(seed)) if seed[k] != data[k]]]
    while todo:
        idx = todo.pop()
        if crashes(binary, revert(idx)):
            cur = bytearray(revert(idx))
            print(f"  {len(idx)} bytes from {idx[0]}: not needed", file=sys.stderr)
        elif len(idx) > 1:
            todo += [idx[len(idx) // 2:], idx[:len(idx) // 2]]
        else:
            print(f"  byte {idx[0]}: needed", file=sys.stderr)
    return bytes(cur)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("crash")
    ap.add_argument("name")
    ap.add_argument("--seed", default=SEED)
    ap.add_argument("--origin", default="")
    ap.add_argument("--minimize", metavar="BIN")
    ap.add_argument("--hang", action="store_true")
    ap.add_argument("--object", default="")
    a = ap.parse_args()
    global HANG
    HANG = a.hang
    if a.hang and not a.object:
        sys.exit("--hang needs --object (what the watchdog names)")
    seed = open(os.path.join(ROOT, a.seed), "rb").read()
    data = open(a.crash, "rb").read()
    origin = a.origin or os.path.basename(a.crash)
    if a.minimize:
        if len(data) != len(seed):
            sys.exit("--minimize needs an input of the seed's length")
        full = len(edits_of(seed, data))
        data = minimize(a.minimize, seed, data)
        origin += (f"; minimized with scripts/make-hdf5-crash-patch.py --minimize "
                   f"({full} changed runs -> {len(edits_of(seed, data))})")
    edits = edits_of(seed, data)
    assert apply(seed, edits) == data
    doc = {
        "seed": a.seed,
        "seed_sha256": hashlib.sha256(seed).hexdigest(),
        "length": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "origin": origin,
        "edits": edits,
    }
    if a.hang:
        doc["object"] = a.object
    out = OUT.replace("hdf5-crashes", "hdf5-hangs") if a.hang else OUT
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, a.name + ".json")
    with open(path, "w") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")
    print(f"{os.path.relpath(path, ROOT)}: {len(edits)} edits, "
          f"{sum(len(e[2]) // 2 for e in edits)} bytes")


if __name__ == "__main__":
    main()
