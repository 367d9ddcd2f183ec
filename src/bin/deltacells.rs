//! The `deltacells` command-line tool.
//!
//!     deltacells tile encode INPUT OUT.dct [--level N] [--chunks N] [--threads N] [--no-sort-genes]
//!     deltacells tile info TILE
//!     deltacells tile verify TILE [--against INPUT [--no-sort-genes]]
//!
//! INPUT is a 10x Genomics matrix folder (matrix.mtx[.gz], features/genes.tsv[.gz],
//! barcodes.tsv[.gz]) or a bare Matrix Market file (genes x cells, as 10x writes them).
//! Errors print one line on stderr and exit with status 1.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use deltacells::convert::mtx::{self, CellMatrix};
use deltacells::tile::{self, EncodeOptions, Tile, ValuesOut};
use deltacells::{Error, Result};

const USAGE: &str = "usage:
  deltacells tile encode INPUT OUT.dct [--level N] [--chunks N] [--threads N] [--no-sort-genes]
  deltacells tile info TILE
  deltacells tile verify TILE [--against INPUT [--no-sort-genes]]

INPUT: a 10x Genomics matrix folder or a Matrix Market file (genes x cells).
By default genes are reordered by decreasing total count, as deltacells datasets store them.";

/// Parsed command line: positional words and `--name [value]` options.
struct Args {
    words: Vec<String>,
    opts: Vec<(String, Option<String>)>,
}

impl Args {
    fn parse(raw: Vec<String>) -> Args {
        const FLAGS: [&str; 2] = ["--no-sort-genes", "--help"];
        let (mut words, mut opts) = (Vec::new(), Vec::new());
        let mut it = raw.into_iter();
        while let Some(a) = it.next() {
            if a.starts_with("--") {
                let v = if FLAGS.contains(&a.as_str()) {
                    None
                } else {
                    it.next()
                };
                opts.push((a, v));
            } else {
                words.push(a);
            }
        }
        Args { words, opts }
    }
    fn flag(&self, name: &str) -> bool {
        self.opts.iter().any(|(n, _)| n == name)
    }
    fn value(&self, name: &str) -> Option<&str> {
        self.opts
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_deref())
    }
    fn number<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T> {
        match self.value(name) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| {
                Error::invalid_argument(format!("{name}: '{v}' is not a valid number"))
            }),
        }
    }
    fn check_known(&self, known: &[&str]) -> Result<()> {
        for (n, v) in &self.opts {
            if !known.contains(&n.as_str()) {
                return Err(Error::invalid_argument(format!("unknown option {n}")));
            }
            if v.is_none() && !["--no-sort-genes", "--help"].contains(&n.as_str()) {
                return Err(Error::invalid_argument(format!("{n} needs a value")));
            }
        }
        Ok(())
    }
}

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
    std::fs::write(&out, &blob).map_err(|e| Error::io(&out, &e))?;
    println!(
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
    println!(
        "tile {path}: format version {}, {} bytes, CRC-32 0x{:08x} (verified)",
        h.version, h.total_size, h.crc32
    );
    println!(
        "  {} cells x {} genes, {} nonzeros, {} exceptions",
        h.n_cells, h.n_genes, h.nnz, t.n_exceptions
    );
    println!("  {} chunks:", h.n_chunks);
    for (c, e) in t.chunks.iter().enumerate() {
        println!(
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
    print!(
        "{path}: OK: {} cells, {} nonzeros, CRC and every check of the format passed; decoded in {:.1} ms",
        m.n_cells,
        m.indices.len(),
        dec_s * 1e3
    );
    if let Some(src) = a.value("--against") {
        let expected = read_input(Path::new(src), !a.flag("--no-sort-genes"))?;
        if expected != m {
            println!();
            return Err(Error::format(format!(
                "{path}: decoded matrix differs from {src}"
            )));
        }
        print!("; identical to {src}");
    }
    println!();
    Ok(())
}

fn run(raw: Vec<String>) -> Result<()> {
    let a = Args::parse(raw);
    let cmd: Vec<&str> = a.words.iter().take(2).map(String::as_str).collect();
    if a.flag("--help") || cmd.is_empty() {
        println!("{USAGE}");
        return Ok(());
    }
    match cmd.as_slice() {
        ["tile", "encode"] => tile_encode(&a),
        ["tile", "info"] => tile_info(&a),
        ["tile", "verify"] => tile_verify(&a),
        _ => Err(Error::invalid_argument(format!(
            "unknown command '{}'\n{USAGE}",
            cmd.join(" ")
        ))),
    }
}

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("deltacells: error: {e}");
            ExitCode::FAILURE
        }
    }
}
