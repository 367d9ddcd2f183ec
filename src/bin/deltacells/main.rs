//! The `deltacells` command-line tool.
//!
//!     deltacells convert INPUT OUTPUT [--tile-size N] [--chunks N] [--level N] [--threads N]
//!                        [--no-sort-genes] [--overwrite] [--matrix ELEMENT]
//!     deltacells info DATASET [--tiles]
//!     deltacells verify DATASET [--threads N]
//!     deltacells export DATASET OUT.mtx[.gz] [--cells LIST|FILE]
//!     deltacells tile encode INPUT OUT.dct [--level N] [--chunks N] [--threads N] [--no-sort-genes]
//!     deltacells tile info TILE
//!     deltacells tile verify TILE [--against INPUT [--no-sort-genes]]
//!
//! `deltacells COMMAND --help` explains each. Errors print one line on stderr and exit with
//! a status that says what kind of failure it was ([`exit_status`]).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use deltacells::convert::mtx::{self, CellMatrix};
use deltacells::convert::{self as conv, ConvertOptions};
use deltacells::dataset::{self, Dataset, WriterOptions};
use deltacells::storage::fs;
use deltacells::tile::{self, EncodeOptions, Tile, ValuesOut};
use deltacells::{Error, ErrorKind, Result};

mod args;
mod chromdata_cli;
mod console;
mod isolate;

use console::{quiet, summary, Bar};

use args::Args;

/// `println!` that ignores a closed stdout (`deltacells info | head` must not panic).
macro_rules! say {
    ($($t:tt)*) => {{
        let _ = writeln!(std::io::stdout().lock(), $($t)*);
    }};
}

/// `print!` that ignores a closed stdout.
macro_rules! say_nolf {
    ($($t:tt)*) => {{
        let _ = write!(std::io::stdout().lock(), $($t)*);
    }};
}

const USAGE: &str =
    "deltacells: convert single-cell count matrices to deltacells datasets, inspect them

usage:
  deltacells convert INPUT OUTPUT [options]      10x folder / .mtx[.gz] / .h5ad -> dataset
  deltacells info DATASET [--tiles]              manifest summary, sizes, optional parts
  deltacells verify DATASET [--against INPUT]    decode and check every tile and file
  deltacells export DATASET OUT.mtx [--cells ..] cells -> Matrix Market (genes x cells)
  deltacells tile encode INPUT OUT.dct [--level N] [--chunks N] [--threads N] [--no-sort-genes]
  deltacells tile info TILE
  deltacells tile verify TILE [--against INPUT [--no-sort-genes]]
  deltacells chromdata info STORE                ChromData store summary
  deltacells chromdata get STORE --trace ID | --cell ID | --chrom NAME [--columns ..]
                           [--format csv|parquet] [--output FILE]
  deltacells chromdata import-fofct TABLE.csv OUT.chromdata.zarr|OUT.cdz [options]
  deltacells chromdata rewrite SRC DST [--layout ..]  any store into any layout, all kept

Every command takes --quiet (-q): print nothing but errors. Long work (convert, verify,
chromdata import-fofct, chromdata rewrite) shows its progress on stderr when stderr is a
terminal; with --progress also when it is not (plain lines, e.g. in a batch job's log: one when
a stage begins or ends, at most one every 10 seconds in between). Progress never goes to stdout.

Examples:
  deltacells convert filtered_feature_bc_matrix/ pbmc.dc
  deltacells verify pbmc.dc --against filtered_feature_bc_matrix/
  deltacells chromdata import-fofct traces.csv traces.cdz
  deltacells chromdata get traces.cdz --trace 17 --columns coords

`deltacells COMMAND --help` (or `deltacells help COMMAND`) explains a command;
`deltacells --version` prints the version of the tool and of its C API.

Errors print one line on stderr (`deltacells: error: ...`) and exit with
  1  bad data: a file breaks its format, a checksum or a check fails (verify), or it needs
     something this version does not support
  2  usage: unknown command or option, missing or malformed argument, value out of range
  3  not found: an input path, or the trace, cell or chromosome asked for
  4  I/O: a file could not be read or written, or the output exists (see --overwrite)
  5  internal error (please report it)";

const CONVERT_HELP: &str = "usage: deltacells convert INPUT OUTPUT [options]

Converts a count matrix into a new deltacells dataset (a directory) at OUTPUT.

INPUT is one of
  a 10x Genomics matrix folder   matrix.mtx[.gz], features.tsv[.gz] (or genes.tsv[.gz]),
                                 barcodes.tsv[.gz]
  a Matrix Market file           .mtx or .mtx.gz, genes x cells as 10x writes it, integer
                                 (or real holding whole numbers) counts
  an AnnData file                .h5ad (recognised by its HDF5 signature): X as CSR, CSC or
                                 dense, integer or float dtype holding whole counts

Options
  --tile-size N      cells per tile (default 10000)
  --chunks N         independently decodable chunks per tile (default 8)
  --level N          zstd level (default 19; higher is smaller and decodes as fast)
  --threads N        encoding threads (default: DELTACELLS_NUM_THREADS or all cores)
  --no-sort-genes    keep the input gene order (default: genes are sorted by decreasing
                     total count, which compresses better; the order is recorded in
                     gene_order.npy, so the input order is never lost)
  --overwrite        replace an existing dataset at OUTPUT (only once the new one is
                     complete; a directory holding anything else is never replaced)
  --matrix ELEMENT   h5ad only: the counts element, e.g. layers/counts or raw/X (default X)

Gene names (var_names.txt): 10x features column 2 (the symbols) when they are unique in the
file; otherwise column 1 (the gene ids, unique in Cell Ranger output); if both repeat, the
symbols made unique with -1, -2 suffixes (as AnnData's var_names_make_unique). For .h5ad:
the var index. A bare .mtx has no names.
Obs / var tables (barcodes and features columns; h5ad obs and var) are stored as obs/ shards
and var.parquet (categorical columns as categories, the rest as numeric, bool or string).

Memory: a Matrix Market file is gene-major (all cells' entries are interleaved), so it is
read whole (about 16 bytes per nonzero). h5ad CSR and dense X are streamed a tile at a time
(plus one pass for the gene totals); CSC X is read whole and transposed. The dataset itself
is written a tile at a time.

Safety: the dataset is written into a hidden temporary directory next to OUTPUT and renamed
into place at the end, so an interrupted or failed conversion never leaves anything that
opens as a dataset. A bad input gives a one-line error naming the file and the line (or the
HDF5 element and position), and exit status 1 (2 for a usage error, 3 for a missing input).
An HDF5 input is read in a child process (this program started again, one process start):
libhdf5, the C library reading it, can crash on a malformed file, and then the error names the
file and the signal, the status is 1, nothing is written and an existing OUTPUT is untouched.
libhdf5 can also loop forever on a malformed file: one libhdf5 call that runs longer than its
budget (60 s for metadata and attributes, plus 1 s per MiB for a bulk read; the base is set by
DELTACELLS_HDF5_CALL_TIMEOUT in seconds, 0 = no limit) ends the same way, the error naming
the HDF5 object. A long conversion is never stopped: the budget is per call.
Progress is shown on stderr when stderr is a terminal, or with --progress (not with
--quiet, which also drops the summary).

Examples:
  deltacells convert filtered_feature_bc_matrix/ pbmc.dc
  deltacells convert pbmc.h5ad pbmc.dc --matrix layers/counts --tile-size 4096 --overwrite
  deltacells convert GSE123.mtx.gz out.dc --no-sort-genes --level 9 --threads 8 --quiet";

const INFO_HELP: &str = "usage: deltacells info DATASET [--tiles]

Prints the manifest summary of a dataset: cells, genes, nonzeros, tiles and their sizes,
bytes per cell and per nonzero, encoder settings, and which optional parts it has (gene
order, var names, var table, obs). Reads the manifest only (nothing is decoded); use
`deltacells verify` to check the tiles. --tiles lists every tile.

Examples:
  deltacells info pbmc.dc
  deltacells info pbmc.dc --tiles | sort -k4 -n | tail   # the largest tiles";

const VERIFY_HELP: &str = "usage: deltacells verify DATASET [--threads N] [--against INPUT]

Checks a dataset completely: the manifest; every tile listed (its file size, its CRC-32,
every check of the format while decoding it, its header against the manifest, and that its
rows are canonical: genes strictly increasing, no stored zero); that tiles/ holds nothing
else; gene_order.npy and var_names.txt when listed; that optional files exist exactly when
the manifest says so (and obs shard sizes). Prints one line per problem and exits with
status 1 if there is any, else prints a summary and exits 0.
  --against INPUT  also gather every cell (tile by tile, through the reader's gather) and
                   compare it with INPUT (any input `convert` takes), undoing the gene order.
                   An HDF5 INPUT is read in a child process, as by convert (see its help):
                   a crash of libhdf5 on a malformed file is an error naming it, status 1.
Progress is shown on stderr when stderr is a terminal, or with --progress.

Examples:
  deltacells verify pbmc.dc
  deltacells verify pbmc.dc --against filtered_feature_bc_matrix/ --threads 4
  deltacells verify pbmc.dc --quiet && echo valid";

const EXPORT_HELP: &str = "usage: deltacells export DATASET OUT.mtx [--cells LIST|FILE]

Writes cells of a dataset to a Matrix Market file (gzipped if OUT ends in .gz), genes x
cells like 10x Genomics files, entries ordered by cell then gene.
Genes are in the ORIGINAL INPUT ORDER when the dataset records a gene order (the
converter's sorting is undone, so row i is line i of the input's features.tsv); otherwise in
dataset column order. Column k is the k-th requested cell.
  --cells LIST   0-based cell indices: 0,5,9 or ranges 0-99 (inclusive), comma-separated
  --cells FILE   a file with one 0-based cell index per line
Default: all cells, in order. The file is written under a temporary name and renamed.

Examples:
  deltacells export pbmc.dc first100.mtx --cells 0-99
  deltacells export pbmc.dc selected.mtx.gz --cells cells.txt";

const TILE_HELP: &str = "usage:
  deltacells tile encode INPUT OUT.dct [--level N] [--chunks N] [--threads N] [--no-sort-genes]
  deltacells tile info TILE
  deltacells tile verify TILE [--against INPUT [--no-sort-genes]]

Single tiles (one file holding all cells of INPUT): encode, describe, decode with every check.
INPUT: a 10x Genomics matrix folder or a Matrix Market file (genes x cells).
By default genes are reordered by decreasing total count, as deltacells datasets store them.

Examples:
  deltacells tile encode filtered_feature_bc_matrix/ all.dct --level 19 --chunks 8
  deltacells tile info all.dct
  deltacells tile verify all.dct --against filtered_feature_bc_matrix/";

fn read_input(path: &Path, sort_genes: bool) -> Result<CellMatrix> {
    let matrix = if path.is_dir() {
        mtx::find_10x_folder(path)?.matrix
    } else {
        path.to_path_buf()
    };
    let m = mtx::read_matrix_market(&matrix, true)?;
    Ok(if sort_genes {
        m.permute_genes(&m.order_by_decreasing_total())
    } else {
        m
    })
}

fn read_file(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::io(path, &e))
}

fn decode_all(blob: &[u8], threads: usize) -> Result<CellMatrix> {
    let t = Tile::parse(blob, true)?;
    let n = t.header.nnz as usize;
    let mut m = CellMatrix {
        n_cells: t.header.n_cells as usize,
        n_genes: t.header.n_genes,
        indptr: vec![0; t.header.n_cells as usize + 1],
        indices: vec![0; n],
        values: vec![0; n],
    };
    tile::decode_parsed(
        &t,
        threads,
        &mut m.indptr,
        &mut m.indices,
        ValuesOut::I32(&mut m.values),
    )?;
    Ok(m)
}

fn tile_encode(a: &Args) -> Result<()> {
    a.check_known(&["--level", "--chunks", "--threads", "--no-sort-genes"])?;
    let [_, _, input, out] = a.words.as_slice() else {
        return Err(Error::invalid_argument(
            "tile encode needs INPUT and OUT.dct",
        ));
    };
    let opts = EncodeOptions {
        zstd_level: a.number("--level", tile::DEFAULT_ZSTD_LEVEL)?,
        n_chunks: a.number("--chunks", tile::DEFAULT_CHUNKS)?,
        threads: a.number("--threads", 0usize)?,
    };
    let t0 = Instant::now();
    let m = read_input(Path::new(input), !a.flag("--no-sort-genes"))?;
    let read_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let blob = tile::encode_tile(&m.as_csr(), opts)?;
    let enc_s = t1.elapsed().as_secs_f64();
    let out = PathBuf::from(out);
    fs::write_file_atomically(&out, |f| {
        f.write_all(&blob).map_err(|e| Error::io(&out, &e))
    })?;
    summary!(
        "{}: {} cells x {} genes, {} nonzeros -> {} bytes ({:.3} bytes/nonzero); read {:.2}s, encoded {:.2}s",
        out.display(),
        m.n_cells,
        m.n_genes,
        m.indices.len(),
        blob.len(),
        blob.len() as f64 / m.indices.len().max(1) as f64,
        read_s,
        enc_s
    );
    Ok(())
}

fn tile_info(a: &Args) -> Result<()> {
    a.check_known(&[])?;
    let [_, _, path] = a.words.as_slice() else {
        return Err(Error::invalid_argument("tile info needs TILE"));
    };
    let blob = read_file(Path::new(path))?;
    let t = Tile::parse(&blob, true)?;
    let h = &t.header;
    say!(
        "tile {path}: format version {}, {} bytes, CRC-32 0x{:08x} (verified)",
        h.version,
        h.total_size,
        h.crc32
    );
    say!(
        "  {} cells x {} genes, {} nonzeros, {} exceptions",
        h.n_cells,
        h.n_genes,
        h.nnz,
        t.n_exceptions
    );
    say!("  {} chunks:", h.n_chunks);
    for (c, e) in t.chunks.iter().enumerate() {
        say!(
            "    chunk {c}: cells {}..{}, nonzeros {}..{}, gaps {} B, vals {} B, exceptions {} B + {} B",
            e.cell_lo, e.cell_hi, e.nnz_lo, e.nnz_hi, e.gaps.len, e.vals.len, e.vexc.len, e.gexc.len
        );
    }
    Ok(())
}

fn tile_verify(a: &Args) -> Result<()> {
    a.check_known(&["--against", "--no-sort-genes"])?;
    let [_, _, path] = a.words.as_slice() else {
        return Err(Error::invalid_argument("tile verify needs TILE"));
    };
    let blob = read_file(Path::new(path))?;
    let t0 = Instant::now();
    let m = decode_all(&blob, 0)?;
    let dec_s = t0.elapsed().as_secs_f64();
    say_nolf!(
        "{path}: OK: {} cells, {} nonzeros, CRC and every check of the format passed; decoded in {:.1} ms",
        m.n_cells,
        m.indices.len(),
        dec_s * 1e3
    );
    if let Some(src) = a.value("--against") {
        let expected = read_input(Path::new(src), !a.flag("--no-sort-genes"))?;
        if expected != m {
            say!();
            return Err(Error::format(format!(
                "{path}: decoded matrix differs from {src}"
            )));
        }
        say_nolf!("; identical to {src}");
    }
    say!();
    Ok(())
}

fn two_words<'a>(a: &'a Args, cmd: &str, what: &str) -> Result<(&'a str, &'a str)> {
    match a.words.as_slice() {
        [_, x, y] => Ok((x, y)),
        _ => Err(Error::invalid_argument(format!(
            "{cmd} needs {what} (see deltacells {cmd} --help)"
        ))),
    }
}

fn one_word<'a>(a: &'a Args, cmd: &str, what: &str) -> Result<&'a str> {
    match a.words.as_slice() {
        [_, x] => Ok(x),
        _ => Err(Error::invalid_argument(format!(
            "{cmd} needs {what} (see deltacells {cmd} --help)"
        ))),
    }
}

fn cmd_convert(a: &Args) -> Result<()> {
    a.check_known(&[
        "--tile-size",
        "--chunks",
        "--level",
        "--threads",
        "--no-sort-genes",
        "--overwrite",
        "--matrix",
    ])?;
    let (input, output) = two_words(a, "convert", "INPUT and OUTPUT")?;
    let d = WriterOptions::default();
    let opts = ConvertOptions {
        writer: WriterOptions {
            tile_size: a.number("--tile-size", d.tile_size)?,
            n_chunks: a.number("--chunks", d.n_chunks)?,
            zstd_level: a.number("--level", d.zstd_level)?,
            threads: a.number("--threads", 0usize)?,
            overwrite: a.flag("--overwrite"),
            ..d
        },
        sort_genes: !a.flag("--no-sort-genes"),
    };
    opts.writer.validate()?;
    let input = Path::new(input);
    let t0 = Instant::now();
    let mut source: Box<dyn conv::CellSource> = match a.value("--matrix") {
        Some(elem) => Box::new(conv::h5ad::H5adSource::open_matrix(input, elem)?),
        None => conv::open_source(input)?,
    };
    let bar = Bar::new(output, Bar::wanted(quiet()));
    let s = conv::convert(source.as_mut(), Path::new(output), &opts, &bar)?;
    drop(bar); // cleared before the summary
    summary!(
        "{output}: {} cells x {} genes, {} nonzeros, from a {} ({:.1} MB)",
        s.n_cells,
        s.n_genes,
        s.nnz,
        s.kind,
        s.input_bytes as f64 / 1e6
    );
    summary!(
        "  {} bytes ({:.1} bytes/cell, {:.3} bytes/nonzero), {} tiles of {} cells, zstd {}, {} chunks",
        s.output_bytes,
        s.output_bytes as f64 / s.n_cells as f64,
        s.output_bytes as f64 / s.nnz.max(1) as f64,
        s.n_cells.div_ceil(opts.writer.tile_size),
        opts.writer.tile_size,
        opts.writer.zstd_level,
        opts.writer.n_chunks
    );
    summary!(
        "  genes: {}; names: {}",
        if opts.sort_genes {
            "sorted by decreasing total count (gene_order.npy)"
        } else {
            "input order"
        },
        s.var_names
            .as_deref()
            .unwrap_or("none (the input has none)")
    );
    if s.tables_available && !s.tables_stored {
        summary!("  obs/var tables: read and checked, not stored (this build's writer has no obs/var.parquet yet)");
    }
    let secs = t0.elapsed().as_secs_f64();
    summary!(
        "  {secs:.2}s ({:.0} cells/s, {:.1} MB/s of input)",
        s.n_cells as f64 / secs,
        s.input_bytes as f64 / 1e6 / secs
    );
    Ok(())
}

fn human(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.2} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} kB", b / 1e3)
    } else {
        format!("{bytes} B")
    }
}

fn file_size(p: &Path) -> Option<u64> {
    std::fs::metadata(p).ok().map(|m| m.len())
}

fn cmd_info(a: &Args) -> Result<()> {
    a.check_known(&["--tiles"])?;
    let path = one_word(a, "info", "DATASET")?;
    let ds = Dataset::open(path)?;
    let m = ds.manifest();
    let i = ds.info();
    let tile_bytes: u64 = m.tile_bytes.iter().sum();
    say!("dataset {path}: deltacells format version {}", i.version);
    say!(
        "  {} cells x {} genes, {} nonzeros ({:.1} per cell, density {:.4})",
        i.n_cells,
        i.n_genes,
        i.nnz,
        i.nnz as f64 / i.n_cells.max(1) as f64,
        i.nnz as f64 / (i.n_cells.max(1) as f64 * i.n_genes as f64)
    );
    let (min, max) = (
        m.tile_bytes.iter().min().copied().unwrap_or(0),
        m.tile_bytes.iter().max().copied().unwrap_or(0),
    );
    say!(
        "  {} tiles of up to {} cells; tile files {} ({} .. {} each)",
        i.n_tiles,
        i.tile_size,
        human(tile_bytes),
        human(min),
        human(max)
    );
    say!(
        "  {:.1} bytes per cell, {:.3} bytes per nonzero (tiles only)",
        tile_bytes as f64 / i.n_cells.max(1) as f64,
        tile_bytes as f64 / i.nnz.max(1) as f64
    );
    say!(
        "  encoder: zstd level {}, {} chunks per tile",
        m.zstd_level.map_or("?".into(), |v| v.to_string()),
        m.n_chunks.map_or("?".into(), |v| v.to_string())
    );
    let root = Path::new(path);
    let part = |has: bool, rel: &str, what: &str| {
        if has {
            let size = file_size(&root.join(rel)).map_or("missing!".into(), human);
            say!("  {rel}: yes ({size}) - {what}");
        } else {
            say!("  {rel}: no");
        }
    };
    part(
        i.has_gene_order,
        dataset::paths::GENE_ORDER,
        "genes sorted; column j was input gene gene_order[j]",
    );
    part(i.has_var_names, dataset::paths::VAR_NAMES, "gene names");
    part(i.has_var_table, dataset::paths::VAR_TABLE, "gene table");
    if i.has_obs {
        let shards = m.obs_shard_bytes.as_ref().map_or(0, Vec::len);
        let bytes: u64 = m.obs_shard_bytes.iter().flatten().sum();
        say!(
            "  obs: yes ({shards} shards, {}; fingerprint {})",
            human(bytes),
            m.obs_fingerprint.as_deref().unwrap_or("?")
        );
    } else {
        say!("  obs: no");
    }
    let total = conv::source::dir_bytes(root);
    say!(
        "  total on disk: {} ({:.1} bytes per cell)",
        human(total),
        total as f64 / i.n_cells.max(1) as f64
    );
    if a.flag("--tiles") {
        say!("  tile      cells        nnz      bytes  bytes/cell");
        for t in 0..i.n_tiles as usize {
            say!(
                "  {t:>6} {:>8} {:>10} {:>10} {:>10.1}",
                m.tile_cells[t],
                m.tile_nnz[t],
                m.tile_bytes[t],
                m.tile_bytes[t] as f64 / m.tile_cells[t] as f64
            );
        }
    }
    Ok(())
}

fn cmd_verify(a: &Args) -> Result<()> {
    a.check_known(&["--threads", "--against"])?;
    let path = one_word(a, "verify", "DATASET")?;
    let t0 = Instant::now();
    let threads = a.number("--threads", 0usize)?;
    let rep = {
        let bar = Bar::new(path, Bar::wanted(quiet()));
        conv::verify::verify_dataset(Path::new(path), threads, &bar)
    };
    for n in &rep.notes {
        summary!("{path}: note: {n}");
    }
    if !rep.problems.is_empty() {
        for p in &rep.problems {
            eprintln!("deltacells: verify: {p}");
        }
        return Err(Error::format(format!(
            "{path}: {} problem(s) found; {} of {} tiles verified",
            rep.problems.len(),
            rep.tiles_ok,
            rep.n_tiles
        )));
    }
    summary!(
        "{path}: OK: {} tiles, {} cells, {} nonzeros; every CRC, tile check and manifest agreement passed ({:.2}s)",
        rep.n_tiles,
        rep.n_cells,
        rep.nnz,
        t0.elapsed().as_secs_f64()
    );
    if let Some(src) = a.value("--against") {
        let ds = Dataset::open(path)?;
        ds.set_threads(a.number("--threads", 0usize)?);
        let mut source = conv::open_source(Path::new(src))?;
        let bar = Bar::new(&format!("{path} with {src}"), Bar::wanted(quiet()));
        let nnz = conv::verify::compare_with_source(&ds, source.as_mut(), &bar)
            .map_err(|e| e.context(format!("{path} vs {src}")))?;
        drop(bar);
        summary!(
            "{path}: gathered all cells: identical to {src} ({nnz} nonzeros, gene order undone)"
        );
    }
    Ok(())
}

/// Parses `--cells`: a comma-separated list of indices and inclusive ranges `a-b`, or the
/// path of a file with one index per line.
fn parse_cells(spec: &str, n_cells: u64) -> Result<Vec<u64>> {
    let looks_like_list = !spec.is_empty()
        && spec
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b',' || b == b'-' || b == b' ');
    let check = |c: u64, at: &str| -> Result<u64> {
        if c >= n_cells {
            Err(Error::invalid_argument(format!(
                "--cells: {at}: cell {c} is out of range (the dataset has {n_cells} cells)"
            )))
        } else {
            Ok(c)
        }
    };
    let num = |w: &str, at: &str| -> Result<u64> {
        w.trim().parse::<u64>().map_err(|_| {
            Error::invalid_argument(format!("--cells: {at}: '{w}' is not a cell index"))
        })
    };
    let mut out = Vec::new();
    if looks_like_list && !Path::new(spec).is_file() {
        for (k, item) in spec.split(',').enumerate() {
            let at = format!("item {}", k + 1);
            match item.split_once('-') {
                Some((x, y)) => {
                    let (x, y) = (check(num(x, &at)?, &at)?, check(num(y, &at)?, &at)?);
                    if y < x {
                        return Err(Error::invalid_argument(format!(
                            "--cells: {at}: range {x}-{y} is empty"
                        )));
                    }
                    out.extend(x..=y);
                }
                None => out.push(check(num(item, &at)?, &at)?),
            }
        }
    } else {
        let p = Path::new(spec);
        let text = std::fs::read_to_string(p).map_err(|e| Error::io(p, &e))?;
        for (k, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let at = format!("{}:{}", p.display(), k + 1);
            out.push(check(num(line, &at)?, &at)?);
        }
    }
    if out.is_empty() {
        return Err(Error::invalid_argument("--cells: no cells given"));
    }
    Ok(out)
}

fn cmd_export(a: &Args) -> Result<()> {
    a.check_known(&["--cells", "--threads"])?;
    let (path, out) = two_words(a, "export", "DATASET and OUT.mtx")?;
    let ds = Dataset::open(path)?;
    ds.set_threads(a.number("--threads", 0usize)?);
    let n = ds.info().n_cells;
    let cells = match a.value("--cells") {
        Some(spec) => parse_cells(spec, n)?,
        None => (0..n).collect(),
    };
    let s = conv::export::export_mtx(&ds, &cells, Path::new(out))?;
    summary!(
        "{out}: {} genes x {} cells, {} nonzeros (genes in {} order)",
        s.n_genes,
        s.n_cells,
        s.nnz,
        if s.input_gene_order {
            "the original input"
        } else {
            "dataset column"
        }
    );
    Ok(())
}

fn help_for(cmd: &str) -> &'static str {
    match cmd {
        "convert" => CONVERT_HELP,
        "info" => INFO_HELP,
        "verify" => VERIFY_HELP,
        "export" => EXPORT_HELP,
        "tile" => TILE_HELP,
        "chromdata" => chromdata_cli::HELP,
        _ => USAGE,
    }
}

fn run(raw: Vec<String>) -> Result<()> {
    let a = Args::parse(raw);
    console::set_quiet(a.flag("--quiet") || a.flag("-q"));
    console::set_progress(a.flag("--progress"));
    if console::quiet() && a.flag("--progress") {
        return Err(Error::invalid_argument(
            "--progress and --quiet ask for opposite things: give one of them",
        ));
    }
    let first = a.words.first().map(String::as_str);
    if first == Some("help") {
        say!("{}", help_for(a.words.get(1).map_or("", String::as_str)));
        return Ok(());
    }
    if a.flag("--version") || a.flag("-V") {
        say!(
            "deltacells {} (C ABI {}, tile format {})",
            env!("CARGO_PKG_VERSION"),
            deltacells::ffi::DC_ABI_VERSION,
            tile::FORMAT_VERSION
        );
        return Ok(());
    }
    if a.flag("--help") || a.flag("-h") || first.is_none() {
        say!("{}", help_for(first.unwrap_or("")));
        return Ok(());
    }
    let cmd: Vec<&str> = a.words.iter().take(2).map(String::as_str).collect();
    match cmd.as_slice() {
        ["convert", ..] => cmd_convert(&a),
        ["info", ..] => cmd_info(&a),
        ["verify", ..] => cmd_verify(&a),
        ["export", ..] => cmd_export(&a),
        ["tile", "encode"] => tile_encode(&a),
        ["tile", "info"] => tile_info(&a),
        ["tile", "verify"] => tile_verify(&a),
        ["chromdata", "info"] => chromdata_cli::info(&a),
        ["chromdata", "get"] => chromdata_cli::get(&a),
        ["chromdata", "import-fofct"] => chromdata_cli::import_fofct(&a),
        ["chromdata", "rewrite"] => chromdata_cli::rewrite(&a),
        _ => Err(Error::invalid_argument(format!(
            "unknown command '{}' (try deltacells --help)",
            cmd.join(" ")
        ))),
    }
}

/// The exit status of a failed command, by what went wrong (listed in `deltacells --help`),
/// so that scripts can tell bad data from a typo or a full disk.
fn exit_status(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::Format | ErrorKind::Checksum | ErrorKind::Unsupported | ErrorKind::Limit => 1,
        ErrorKind::InvalidArgument | ErrorKind::OutOfRange => 2,
        ErrorKind::NotFound => 3,
        ErrorKind::Io | ErrorKind::Exists => 4,
        ErrorKind::BufferTooSmall { .. } | ErrorKind::State | ErrorKind::Internal => 5,
    }
}

fn main() -> ExitCode {
    if let Err(m) = isolate::enter_child() {
        eprintln!("deltacells: error: {m}");
        return ExitCode::from(exit_status(ErrorKind::Internal));
    }
    let raw: Vec<String> = std::env::args().skip(1).collect();
    // A command that opens an HDF5 input runs in a child process: libhdf5's crashes on
    // malformed files end that process, not this one (isolate.rs).
    if let Some(plan) = isolate::plan(&Args::parse(raw.clone())) {
        return isolate::run_in_child(&plan);
    }
    let result = run(raw);
    isolate::print_call_stats();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("deltacells: error: {e}");
            ExitCode::from(exit_status(e.kind))
        }
    }
}
