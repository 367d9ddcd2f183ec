#!/usr/bin/env python3
"""Writes a small, realistic, SYNTHETIC chromatin-tracing table in the 4DN FOF-CT core
format (the input of `deltacells chromdata import-fofct`), deterministically from a seed.

No real chromatin-tracing table with a clear licence ships in a package of the registries
this project can use (PyPI, Debian, crates.io, npm: the tracing tools found there —
SnapFISH, sfimpute, CIMA, pyHiM — ship code and model weights, not tables), so the demo
data are simulated, with the structure and the defects of real ones:

* 3 chromosomes (chr2, chr21, chrX; GRCh38 coordinates), each imaged as a region of
  consecutive 30 kb loci (chr21: 30 loci from 28.0 Mb, as in chr21 tracing studies);
* 32 cells in 4 fields of view; each cell holds 2 alleles of chr2 and chr21 and 1 or 2
  of chrX (some cells lose a trace: a homolog not detected), every allele one trace;
* each trace a 3D random walk (Gaussian chain: per-locus step of 0.11 um per axis, so
  that the mean distance grows with the square root of the genomic distance) placed at
  the nucleus centre of its cell, plus localisation noise;
* missing spots as real pipelines write them: ~8% of the loci of a trace not detected
  (no row), and ~3% detected but with a failed 3D fit (a row with empty X, Y, Z and
  Fit_Status "failed");
* per-spot quality columns: Intensity (photons), Localization_Precision (um), Fit_Status;
  and Allele (1 or 2) and FOV;
* rows in acquisition order: by field of view, cell and trace, then by hybridisation
  round (each locus is read out in a fixed, shuffled round), as imaging pipelines
  write them, not in genomic order.

Only the standard library is used (random.Random with a fixed seed), so the bytes are the
same on every machine and Python 3 version:

    python3 tests/data/chromatin/make_fofct.py tests/data/chromatin/synthetic_traces.fofct.csv
    python3 tests/data/chromatin/make_fofct.py --check tests/data/chromatin/synthetic_traces.fofct.csv
"""
import io
import math
import random
import sys

SEED = 20261203
STEP_UM = 0.11            # per-axis standard deviation of one 30 kb step (um)
NOISE_UM = 0.035          # localisation noise per axis (um)
P_MISSING = 0.08          # locus not detected: no row
P_FAILED = 0.03           # detected, 3D fit failed: empty X, Y, Z
REGIONS = [               # chromosome, first locus start, loci, locus size, alleles
    ("chr2", 46_000_000, 24, 30_000, 2),
    ("chr21", 28_000_000, 30, 30_000, 2),
    ("chrX", 73_800_000, 20, 30_000, 2),
]
N_FOV, CELLS_PER_FOV = 4, 8
COLUMNS = ["Spot_ID", "Trace_ID", "X", "Y", "Z", "Chrom", "Chrom_Start", "Chrom_End",
           "Cell_ID", "Allele", "FOV", "Intensity", "Localization_Precision", "Fit_Status"]


def fmt(v, digits):
    return f"{v:.{digits}f}"


def generate():
    rng = random.Random(SEED)
    # Readout round of each locus: a fixed shuffled order per region.
    rounds = {}
    for chrom, _, n, _, _ in REGIONS:
        order = list(range(n))
        rng.shuffle(order)
        rounds[chrom] = order
    out = io.StringIO()
    out.write("##FOF-CT_version=v0.1\n")
    out.write("##Table_namespace=4dn_FOF-CT_core\n")
    out.write("##genome_assembly=GRCh38\n")
    out.write("##XYZ_unit=micron\n")
    out.write("##Software_Title=libdeltacells tests/data/chromatin/make_fofct.py (SYNTHETIC data)\n")
    out.write("##Software_Type=Tracing\n")
    out.write(f"##Software_Description=3D Gaussian-chain traces, seed {SEED}; not a measurement\n")
    out.write(f"##columns=({', '.join(COLUMNS)})\n")
    spot_id, trace_id = 0, 0
    for fov in range(1, N_FOV + 1):
        for c in range(1, CELLS_PER_FOV + 1):
            cell = f"fov{fov}_cell{c:02d}"
            centre = (rng.uniform(10, 190), rng.uniform(10, 190), rng.uniform(3.0, 7.0))
            for chrom, first, n_loci, size, alleles in REGIONS:
                n_alleles = alleles
                if chrom == "chrX" and rng.random() < 0.3:
                    n_alleles = 1            # one homolog not detected in this cell
                for allele in range(1, n_alleles + 1):
                    trace_id += 1
                    # territory of this allele: a few um from the nucleus centre
                    base = [centre[k] + rng.gauss(0, 1.5 if k < 2 else 0.6) for k in range(3)]
                    pos, walk = list(base), []
                    for _ in range(n_loci):
                        pos = [pos[k] + rng.gauss(0, STEP_UM) for k in range(3)]
                        walk.append(pos)
                    for locus in rounds[chrom]:
                        u = rng.random()
                        if u < P_MISSING:
                            continue
                        spot_id += 1
                        start = first + locus * size
                        intensity = max(200.0, rng.gauss(2600, 700))
                        precision = 0.012 + 1.2 / math.sqrt(intensity) * rng.uniform(0.8, 1.2)
                        if u < P_MISSING + P_FAILED:
                            xyz, status = ["", "", ""], "failed"
                        else:
                            xyz = [fmt(walk[locus][k] + rng.gauss(0, NOISE_UM), 4) for k in range(3)]
                            status = "ok"
                        row = [str(spot_id), str(trace_id), *xyz, chrom, str(start),
                               str(start + size), cell, str(allele), str(fov),
                               fmt(intensity, 1), fmt(precision, 4), status]
                        out.write(",".join(row) + "\n")
    return out.getvalue()


def main(argv):
    check = argv[1:2] == ["--check"]
    args = argv[2:] if check else argv[1:]
    if len(args) != 1:
        raise SystemExit(__doc__)
    text = generate()
    if check:
        with open(args[0], encoding="utf-8", newline="") as f:
            if f.read() != text:
                raise SystemExit(f"{args[0]} differs from what make_fofct.py generates")
        return
    with open(args[0], "w", encoding="utf-8", newline="") as f:
        f.write(text)


if __name__ == "__main__":
    main(sys.argv)
