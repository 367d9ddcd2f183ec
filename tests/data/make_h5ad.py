#!/usr/bin/env python3
"""Writes AnnData (.h5ad) test fixtures from a bundled 10x matrix folder.

    python3 tests/data/make_h5ad.py SRC_10X_FOLDER OUT_DIR [VARIANT ...]

VARIANTs (default: all): csr, csc, dense, float (CSR with float32 data), csr64 (int64 data,
int64 indices). Each is OUT_DIR/<variant>.h5ad with the same counts (cells x genes, the
source's gene order), obs columns of every kind the converter handles (categorical with and
without missing values, int, float, bool, string, nullable integer), and a var table
(gene_ids, feature_types as categorical, a numeric column), index = gene symbols made
unique. Deterministic: the same input gives the same tables. Needs anndata, h5py, scipy
(`python3 -m pip install anndata h5py`).
"""
import gzip
import os
import sys

import anndata as ad
import numpy as np
import pandas as pd
import scipy.io
import scipy.sparse as sp


def read_lines(folder, *names):
    for n in names:
        p = os.path.join(folder, n)
        if os.path.exists(p):
            opener = gzip.open if p.endswith(".gz") else open
            with opener(p, "rt") as f:
                return [line.rstrip("\n") for line in f]
    raise FileNotFoundError(f"{folder}: none of {names}")


def build(folder):
    mtx = None
    for n in ("matrix.mtx.gz", "matrix.mtx"):
        p = os.path.join(folder, n)
        if os.path.exists(p):
            mtx = scipy.io.mmread(p)
            break
    x = sp.csr_matrix(mtx.T).astype(np.int32)  # cells x genes
    x.sort_indices()
    features = [line.split("\t") for line in read_lines(folder, "features.tsv.gz", "features.tsv", "genes.tsv.gz", "genes.tsv")]
    barcodes = [line.split("\t")[0] for line in read_lines(folder, "barcodes.tsv.gz", "barcodes.tsv")]
    n_cells, n_genes = x.shape
    i = np.arange(n_cells)
    obs = pd.DataFrame(
        {
            "cell_type": pd.Categorical(np.array(["T", "B", "NK", "Mono"])[i % 4]),
            "batch": pd.Categorical(
                np.where(i % 7 == 0, None, np.array(["b1", "b2"])[i % 2]), categories=["b1", "b2"]
            ),
            "n_counts": np.asarray(x.sum(axis=1)).ravel().astype(np.int64),
            "frac": (i % 100 / 100.0).astype(np.float64),
            "score32": (i % 10 / 4.0).astype(np.float32),
            "is_doublet": (i % 5 == 0),
            "donor": np.array([f"donor{k % 3}" for k in i], dtype=object),
            "n_genes_opt": pd.array([None if k % 11 == 0 else int(k % 50) for k in i], dtype="Int64"),
        },
        index=pd.Index(barcodes, name=None),
    )
    ids = [f[0] for f in features]
    names = [f[1] if len(f) > 1 else f[0] for f in features]
    types = [f[2] if len(f) > 2 else "Gene Expression" for f in features]
    var = pd.DataFrame(
        {
            "gene_ids": np.array(ids, dtype=object),
            "feature_types": pd.Categorical(types),
            "total": np.asarray(x.sum(axis=0)).ravel().astype(np.int64),
        },
        index=pd.Index(names),
    )
    a = ad.AnnData(X=x, obs=obs, var=var)
    a.var_names_make_unique()
    return a


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    folder, out = sys.argv[1], sys.argv[2]
    variants = sys.argv[3:] or ["csr", "csc", "dense", "float", "csr64"]
    os.makedirs(out, exist_ok=True)
    base = build(folder)
    for v in variants:
        a = base.copy()
        if v == "csr":
            pass
        elif v == "csc":
            a.X = sp.csc_matrix(a.X)
        elif v == "dense":
            a.X = np.asarray(a.X.todense(), dtype=np.int64)
        elif v == "float":
            a.X = a.X.astype(np.float32)
        elif v == "csr64":
            x = a.X.astype(np.int64)
            x.indices = x.indices.astype(np.int64)
            x.indptr = x.indptr.astype(np.int64)
            a.X = x
        else:
            sys.exit(f"unknown variant {v}")
        a.write_h5ad(os.path.join(out, f"{v}.h5ad"), compression="gzip")
    print(f"wrote {', '.join(variants)} to {out} ({base.n_obs} cells x {base.n_vars} genes)")


if __name__ == "__main__":
    main()
