//! `deltacells chromdata ...`: inspect ChromData stores and query them from the shell.

use std::io::Write;
use std::path::Path;

use arrow_array::RecordBatch;
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use deltacells::chromdata::{
    self, fofct, ChromData, Columns, Layout, RewriteOptions, WriterOptions,
};
use deltacells::storage::{fs, Root};
use deltacells::{Error, Result};

use super::args::Args;
use super::console::{self, summary, Bar};

pub const HELP: &str = "usage:
  deltacells chromdata info STORE [--option KEY=VALUE ...]
  deltacells chromdata get STORE (--trace ID | --cell ID | --chrom NAME)
                           [--columns coords|NAME,NAME,...] [--format csv|parquet]
                           [--output FILE] [--option KEY=VALUE ...]
  deltacells chromdata import-fofct TABLE.csv OUT.chromdata.zarr|OUT.cdz
                           [--layout flat|partitioned|primary+coords] [--float32]
                           [--memory-budget BYTES] [--threads N] [--overwrite]
                           [--option KEY=VALUE ...]
  deltacells chromdata rewrite SRC DST.chromdata.zarr|DST.cdz
                           [--layout flat|partitioned|primary+coords]
                           [--memory-budget BYTES] [--threads N] [--overwrite]

STORE is a NAME.chromdata.zarr directory or a .cdz file (ChromData 2.0, 2.1 or 2.2), opened
backed: only the metadata and the index are read at open, and a query decodes only the
row groups and columns it needs. For info and get, STORE may also be a URL:
s3://bucket/prefix/NAME.chromdata.zarr, gs://..., az://..., http(s)://host/NAME.cdz (a
last component ending in .cdz is one .cdz object, any other a directory store under that
prefix), read by byte ranges. --option KEY=VALUE (repeatable) passes a setting of the C
API's dc_chromdata_open_opts: object-store settings under the object_store crate's names
(aws_endpoint, aws_region, allow_http, ...), max_concurrency (requests in flight, default
16), timeout_ms (per request, default 30000), retries (default 5); what is not given comes
from the standard environment variables (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...).

info   prints the format version, layout, counts (spots, bins, traces, cells, chromosomes,
       runs, row groups), whether coordinates (and their precision), cell ids and the
       written order (source_row) are stored, and the keys of layers, intervals and points.
get    prints the spots of one trace, cell or chromosome in canonical order, as CSV on
       standard output (default) or as a Parquet file (--format parquet needs --output).
       --columns coords   keys plus x, y, z only (reads nothing else)
       --columns a,b      keys plus these columns
       Ids are text; for integer-typed ids the text is the decimal value.
import-fofct
       streams a 4DN FOF-CT core table (`#` header lines, ##FOF-CT_version,
       ##columns=(Spot_ID, Trace_ID, X, Y, Z, Chrom, Chrom_Start, Chrom_End, ...); extra
       columns are kept) into a new store with bounded memory (--memory-budget, default half
       of the RAM): rows are spilled as sorted runs and merged. The layout defaults to
       primary+coords (2.2); a path ending in .cdz writes the zipped container. The store is
       built beside the target and renamed into place: an interrupted import leaves no store.
       A malformed line is reported with its line number. OUT may be an object-store URL
       (s3://bucket/prefix/traces.cdz, gs://..., az://...): the store is then built in a
       local spill directory ($DELTACELLS_SPILL_DIR, else the temporary directory) and
       uploaded at the end, a .cdz as one multipart upload, a directory store with its root
       zarr.json last; --option KEY=VALUE (repeatable) gives its settings (object-store
       keys such as aws_endpoint, aws_region; max_concurrency, timeout_ms, retries), the
       rest comes from the environment (AWS_ACCESS_KEY_ID, ...). Progress (bytes of the table
       read, then the final sort and write) is shown on stderr when it is a terminal, or
       with --progress.
rewrite
       writes store SRC (any version 2.0-2.2, any layout, directory or .cdz) again in another
       layout (default primary+coords, 2.2) or form, with everything it holds: bins, bin
       tracks, category lists (order and unused categories kept), traces and cells tables,
       spots with their tracks and layers, intervals, points, cellm, binm, results, uns,
       contacts and links. The original row order stays recoverable (source_row). Streams
       under the memory budget (default half of the RAM); progress as for import-fofct.

Every subcommand takes --quiet (-q): nothing but errors, and --progress (progress lines on
stderr even when it is not a terminal).

Examples:
  deltacells chromdata import-fofct traces.csv traces.cdz
  deltacells chromdata import-fofct traces.csv traces.chromdata.zarr --layout flat --float32
  deltacells chromdata import-fofct traces.csv s3://lab/runs/traces.cdz --option aws_region=eu-west-1
  deltacells chromdata rewrite old-2.1.chromdata.zarr new.cdz          # upgrade to 2.2
  deltacells chromdata info traces.cdz
  deltacells chromdata get traces.cdz --trace 17                      # CSV on stdout
  deltacells chromdata get traces.cdz --cell fov1_cell03 --columns coords,Intensity
  deltacells chromdata get traces.cdz --chrom chr21 --format parquet --output chr21.parquet
  deltacells chromdata info s3://lab-bucket/runs/traces.cdz --option aws_region=eu-west-1
  deltacells chromdata get https://data.example.org/traces.chromdata.zarr --trace 17";

/// `--columns a,b,..` by the library's selector rule (`Columns::from_selectors`).
fn columns_of(a: &Args) -> Columns {
    let list = a.value("--columns").unwrap_or("");
    let selectors: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    Columns::from_selectors(&selectors)
}

/// Opens STORE (a path or URL) with the `--option KEY=VALUE` settings.
fn open_store(a: &Args, store: &str) -> Result<ChromData> {
    ChromData::open_url(store, &a.values("--option"))
}

pub fn info(a: &Args) -> Result<()> {
    a.check_known(&["--option"])?;
    let [_, _, path] = a.words.as_slice() else {
        return Err(Error::invalid_argument(
            "chromdata info needs STORE (try deltacells chromdata --help)",
        ));
    };
    let cd = open_store(a, path)?;
    let i = cd.info();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "store {path}: ChromData {}.{}, layout {}",
        i.format_major,
        i.format_minor,
        i.layout.name()
    );
    let _ = writeln!(
        out,
        "  {} spots, {} bins on {} chromosomes, {} traces, {} cells",
        i.n_spots, i.n_bins, i.n_chroms, i.n_traces, i.n_cells
    );
    let _ = writeln!(
        out,
        "  {} runs (trace x chromosome), {} row groups",
        i.n_runs, i.n_row_groups
    );
    let coords = if i.has_coords {
        format!("x, y, z as float{}", i.coord_bits)
    } else {
        "none".into()
    };
    let _ = writeln!(
        out,
        "  coordinates: {coords}; cell ids: {}; written order kept (source_row): {}",
        if i.has_cell_id { "yes" } else { "no" },
        if i.has_source_row {
            "yes"
        } else {
            "no (written in canonical order)"
        }
    );
    for kind in ["layers", "intervals", "points"] {
        let keys = cd.keys(kind)?;
        if !keys.is_empty() {
            let _ = writeln!(out, "  {kind}: {}", keys.join(", "));
        }
    }
    Ok(())
}

pub fn get(a: &Args) -> Result<()> {
    a.check_known(&[
        "--trace",
        "--cell",
        "--chrom",
        "--columns",
        "--format",
        "--output",
        "--option",
    ])?;
    let [_, _, path] = a.words.as_slice() else {
        return Err(Error::invalid_argument(
            "chromdata get needs STORE (try deltacells chromdata --help)",
        ));
    };
    let selectors: Vec<(&str, &str)> = ["--trace", "--cell", "--chrom"]
        .iter()
        .filter_map(|&k| a.value(k).map(|v| (k, v)))
        .collect();
    let [(which, id)] = selectors.as_slice() else {
        return Err(Error::invalid_argument(
            "chromdata get needs exactly one of --trace ID, --cell ID, --chrom NAME",
        ));
    };
    let format = a.value("--format").unwrap_or("csv");
    if !["csv", "parquet"].contains(&format) {
        return Err(Error::invalid_argument(format!(
            "--format {format}: expected csv or parquet"
        )));
    }
    let output = a.value("--output");
    if format == "parquet" && output.is_none() {
        return Err(Error::invalid_argument(
            "--format parquet needs --output FILE",
        ));
    }
    let cd = open_store(a, path)?;
    let cols = columns_of(a);
    let batch = match *which {
        "--trace" => cd.get_trace(&cd.parse_id(id, false), &cols)?,
        "--cell" => cd.get_cell(&cd.parse_id(id, true), &cols)?,
        _ => cd.get_chrom(id, &cols)?,
    };
    match (format, output) {
        ("parquet", Some(out)) => write_parquet(&batch, Path::new(out)),
        (_, Some(out)) => {
            let p = Path::new(out);
            fs::write_file_atomically(p, |f| {
                let mut w = std::io::BufWriter::new(f);
                write_csv(&batch, &mut w)
                    .and_then(|_| w.flush())
                    .map_err(|e| Error::io(p, &e))
            })
        }
        _ => {
            let mut out = std::io::stdout().lock();
            match write_csv(&batch, &mut out) {
                // A closed pipe (`| head`) is not an error.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                r => r.map_err(|e| Error::io(Path::new("<stdout>"), &e)),
            }
        }
    }
}

/// RFC 4180 CSV: a header line, then one line per row; fields holding a comma, quote or
/// line break are quoted; nulls are empty fields.
fn write_csv(batch: &RecordBatch, out: &mut dyn Write) -> std::io::Result<()> {
    let quote = |s: &str| -> String {
        if s.contains([',', '"', '\n', '\r']) {
            format!("\"{}\"", s.replace('"', "\"\""))
        } else {
            s.to_string()
        }
    };
    let names: Vec<String> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| quote(f.name()))
        .collect();
    writeln!(out, "{}", names.join(","))?;
    let opts = FormatOptions::default().with_null("");
    let fmts: Vec<ArrayFormatter<'_>> = batch
        .columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts))
        .collect::<std::result::Result<_, _>>()
        .map_err(std::io::Error::other)?;
    let mut line = String::new();
    for r in 0..batch.num_rows() {
        line.clear();
        for (k, f) in fmts.iter().enumerate() {
            if k > 0 {
                line.push(',');
            }
            line.push_str(&quote(&f.value(r).to_string()));
        }
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// Writes `batch` as a zstd-compressed Parquet file, published atomically like every output.
fn write_parquet(batch: &RecordBatch, path: &Path) -> Result<()> {
    use parquet::arrow::ArrowWriter;
    use parquet::basic::{Compression, ZstdLevel};
    use parquet::file::properties::WriterProperties;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build();
    let fail = |e: parquet::errors::ParquetError| {
        Error::new(
            deltacells::ErrorKind::Io,
            format!("{}: {e}", path.display()),
        )
    };
    fs::write_file_atomically(path, |file| {
        let mut w = ArrowWriter::try_new(file, batch.schema(), Some(props)).map_err(fail)?;
        w.write(batch).map_err(fail)?;
        w.close().map_err(fail)?;
        Ok(())
    })
}

/// `--layout`: flat | partitioned | primary+coords (or the format versions).
fn layout_of(a: &Args) -> Result<Layout> {
    match a.value("--layout").unwrap_or("primary+coords") {
        "flat" | "2.0" => Ok(Layout::Flat),
        "partitioned" | "2.1" => Ok(Layout::Partitioned),
        "primary+coords" | "2.2" => Ok(Layout::PrimaryCoords),
        other => Err(Error::invalid_argument(format!(
            "--layout {other}: expected flat, partitioned or primary+coords"
        ))),
    }
}

pub fn rewrite(a: &Args) -> Result<()> {
    a.check_known(&["--layout", "--memory-budget", "--threads", "--overwrite"])?;
    let [_, _, src, dst] = a.words.as_slice() else {
        return Err(Error::invalid_argument(
            "chromdata rewrite needs SRC and DST (try deltacells chromdata --help)",
        ));
    };
    let opts = RewriteOptions {
        layout: layout_of(a)?,
        overwrite: a.flag("--overwrite"),
        memory_budget: a.number("--memory-budget", 0u64)?,
        threads: a.number("--threads", 0usize)?,
    };
    let t = std::time::Instant::now();
    {
        let bar = Bar::new(dst, Bar::wanted(console::quiet()));
        chromdata::rewrite(Path::new(src), Path::new(dst), &opts, &bar)?;
    }
    let n = ChromData::open(dst)?.info().n_spots;
    summary!(
        "{dst}: {n} spots from {src}, layout {}, {:.2}s",
        opts.layout.name(),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

pub fn import_fofct(a: &Args) -> Result<()> {
    a.check_known(&[
        "--layout",
        "--float32",
        "--memory-budget",
        "--threads",
        "--overwrite",
        "--option",
    ])?;
    let [_, _, table, out] = a.words.as_slice() else {
        return Err(Error::invalid_argument(
            "chromdata import-fofct needs TABLE.csv and OUT (try deltacells chromdata --help)",
        ));
    };
    let layout = layout_of(a)?;
    let options = WriterOptions {
        memory_budget: a.number("--memory-budget", 0u64)?,
        coord_float32: a.flag("--float32"),
        layout,
        overwrite: a.flag("--overwrite"),
        threads: a.number("--threads", 0usize)?,
        ..WriterOptions::default()
    };
    let t = std::time::Instant::now();
    let n = {
        let bar = Bar::new(out, Bar::wanted(console::quiet()));
        let root = Root::parse(out, &a.values("--option"))?;
        fofct::import_observed_at(table, root, options, &bar)?
    };
    summary!(
        "{out}: {n} spots from {table}, layout {}, {:.2}s",
        layout.name(),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
