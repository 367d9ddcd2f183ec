#!/usr/bin/env python3
"""What reading an HDF5 input in a child process costs the CLI (docs/reliability.md §1).

`deltacells convert` of an .h5ad, isolated (as shipped: the binary re-executes itself) vs
in-process (DELTACELLS_ISOLATED_READER set to this script's pid, so that the binary, whose
parent this script is, runs the command itself), runs alternated; and `deltacells --version`,
one bare process start. Prints medians.

    python3 scripts/bench-hdf5-isolation.py BIN INPUT.h5ad OUT_DIR [RUNS] [WARMUP]
    python3 scripts/bench-hdf5-isolation.py --make-big PATH   # 200,000 x 2,000, 5% dense

Run it alone (bin/quiet on the team machine). --make-big needs anndata and scipy.
"""
import os
import statistics
import subprocess
import sys
import time


def make_big(path):
    import anndata as ad
    import numpy as np
    import pandas as pd
    import scipy.sparse as sp
    rng = np.random.default_rng(7)
    n, g = 200_000, 2000
    x = sp.random(n, g, density=0.05, format="csr", random_state=7,
                  data_rvs=lambda k: rng.integers(1, 20, k)).astype(np.int32)
    obs = pd.DataFrame(index=[f"cell{i}" for i in range(n)])
    var = pd.DataFrame(index=[f"gene{i}" for i in range(g)])
    ad.AnnData(X=x, obs=obs, var=var).write_h5ad(path)


def main():
    if sys.argv[1] == "--make-big":
        make_big(sys.argv[2])
        return
    binary, h5ad, out_dir = sys.argv[1:4]
    runs = int(sys.argv[4]) if len(sys.argv) > 4 else 30
    warm = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    isolated = {k: v for k, v in os.environ.items() if k != "DELTACELLS_ISOLATED_READER"}
    in_process = dict(isolated, DELTACELLS_ISOLATED_READER=str(os.getpid()))
    cmd = [binary, "convert", h5ad, os.path.join(out_dir, "out.dc"), "--overwrite", "--quiet"]

    def run(args, env):
        t0 = time.perf_counter()
        subprocess.run(args, env=env, check=True, stdout=subprocess.DEVNULL)
        return time.perf_counter() - t0

    for _ in range(warm):
        run(cmd, isolated)
        run(cmd, in_process)
    iso, inp, start = [], [], []
    for _ in range(runs):
        iso.append(run(cmd, isolated))
        inp.append(run(cmd, in_process))
        start.append(run([binary, "--version"], isolated))
    m = statistics.median
    print(f"{os.path.basename(h5ad)}, {runs} runs: convert isolated {m(iso) * 1e3:.1f} ms, "
          f"in-process {m(inp) * 1e3:.1f} ms (medians; isolated / in-process "
          f"{m(iso) / m(inp):.3f}, difference {(m(iso) - m(inp)) * 1e3:.1f} ms); "
          f"one process start (--version) {m(start) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
