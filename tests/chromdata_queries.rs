//! Every spot query of the backed reader against a straightforward reference, on random
//! stores: random data (nullable columns of every kind, categoricals, columns derived by
//! bin / cell / trace, spot tracks, a layer, with and without cell_id, float32 or float64
//! coordinates) written by the streaming writer in every layout, as a directory and as a
//! `.cdz`, with random row-group sizes and batch splits. The reference is computed from the
//! input rows alone: the canonical order (§7.1) is a stable sort by (cell, trace, chrom,
//! bin) codes, and a query's answer is the matching rows in that order (§15.2), columns in
//! full-schema order (§15.1). Each query runs twice on one handle (the second may be served
//! by the row-group cache) and once more on a fresh handle.

mod chromdata_common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{
    ArrayRef, BooleanArray, DictionaryArray, Float32Array, Float64Array, Int32Array, Int64Array,
    RecordBatch, StringArray, UInt64Array,
};
use chromdata_common::{assert_same, sort_by};
use deltacells::chromdata::{CatValue, ChromData, ChromDataWriter, Columns, Layout, WriterOptions};

/// A deterministic pseudo-random generator (no dependency).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

const CHROMS: [&str; 5] = ["chr2", "chr10", "chr1", "chr X", "chrM"];

/// The shape of one random store.
struct Case {
    seed: u64,
    n: usize,
    cells: bool,
    coord_f32: bool,
    n_traces: u64,
    n_cells: u64,
    n_chroms: usize,
}

/// Input rows (input order) as one batch for the writer, and the reference table: the
/// full result schema in input order, with every row's (cell, trace, chrom, bin) codes.
struct Data {
    input: RecordBatch,
    reference: RecordBatch,
    /// Sort key of each input row: (cell code, trace code, chrom code, bin id).
    keys: Vec<(i64, i64, i64, i64)>,
    traces: Vec<String>,
    cells: Vec<i64>,
    chroms: Vec<String>,
}

fn make(c: &Case) -> Data {
    let mut r = Rng(c.seed | 1);
    let n = c.n;
    let chrom_of: Vec<usize> = (0..n)
        .map(|_| r.below(c.n_chroms as u64) as usize)
        .collect();
    let start: Vec<i64> = (0..n).map(|_| r.below(12) as i64 * 1000).collect();
    let trace: Vec<String> = (0..n)
        .map(|_| format!("t{}", r.below(c.n_traces)))
        .collect();
    let cell: Vec<i64> = (0..n).map(|_| 50 - 3 * r.below(c.n_cells) as i64).collect();
    let coord = |r: &mut Rng, i: usize| {
        if i % 13 == 5 {
            f64::NAN
        } else {
            (r.unit() - 0.5) * 1e4
        }
    };
    let xyz: [Vec<f64>; 3] = std::array::from_fn(|_| (0..n).map(|i| coord(&mut r, i)).collect());
    let status: Vec<Option<&str>> = (0..n)
        .map(|_| match r.below(5) {
            0 => None,
            1 => Some("measured"),
            2 => Some("imputed"),
            _ => Some("missing"),
        })
        .collect();
    let spot_id: Vec<i64> = (0..n).map(|i| i as i64).collect();
    let probe: Vec<String> = (0..n)
        .map(|i| format!("{}:{}", CHROMS[chrom_of[i]], start[i]))
        .collect();
    let fov: Vec<i32> = cell.iter().map(|&c| (c * 7 % 11) as i32).collect();
    let label: Vec<i64> = trace.iter().map(|t| t.len() as i64 * 100 + 1).collect();
    let score: Vec<Option<f32>> = (0..n)
        .map(|i| (i % 6 != 0).then(|| r.unit() as f32))
        .collect();
    let flag: Vec<Option<bool>> = (0..n)
        .map(|i| (i % 4 != 1).then(|| r.below(2) == 1))
        .collect();
    let tag: Vec<Option<String>> = (0..n)
        .map(|i| (i % 9 != 2).then(|| format!("s{}", r.below(1_000_000))))
        .collect();
    let track: Vec<f64> = (0..n).map(|_| r.unit()).collect();
    let count: Vec<i64> = (0..n).map(|_| r.below(40) as i64).collect();
    let raw: [Vec<f32>; 3] = std::array::from_fn(|_| (0..n).map(|_| r.unit() as f32).collect());

    // Codes: categories are the sorted distinct values (what a streaming writer derives).
    let sorted = |v: &mut Vec<String>| {
        v.sort();
        v.dedup();
    };
    let mut traces = trace.clone();
    sorted(&mut traces);
    let mut cells = if c.cells { cell.clone() } else { Vec::new() };
    cells.sort();
    cells.dedup();
    let mut chroms: Vec<String> = chrom_of.iter().map(|&c| CHROMS[c].to_string()).collect();
    sorted(&mut chroms);
    let mut loci: Vec<(usize, i64)> = (0..n)
        .map(|i| {
            let code = chroms
                .binary_search(&CHROMS[chrom_of[i]].to_string())
                .unwrap();
            (code, start[i])
        })
        .collect();
    loci.sort();
    loci.dedup();
    let bin_id: Vec<i32> = (0..n)
        .map(|i| {
            let code = chroms
                .binary_search(&CHROMS[chrom_of[i]].to_string())
                .unwrap();
            loci.binary_search(&(code, start[i])).unwrap() as i32
        })
        .collect();
    let keys: Vec<(i64, i64, i64, i64)> = (0..n)
        .map(|i| {
            let cc = if c.cells {
                cells.binary_search(&cell[i]).unwrap() as i64
            } else {
                -1
            };
            let tc = traces.binary_search(&trace[i]).unwrap() as i64;
            let ch = chroms
                .binary_search(&CHROMS[chrom_of[i]].to_string())
                .unwrap() as i64;
            (cc, tc, ch, bin_id[i] as i64)
        })
        .collect();

    let strs = |v: &[String]| Arc::new(StringArray::from_iter_values(v.iter())) as ArrayRef;
    let ostrs = |v: &[Option<String>]| Arc::new(StringArray::from(v.to_vec())) as ArrayRef;
    let f64s = |v: &[f64]| Arc::new(Float64Array::from(v.to_vec())) as ArrayRef;
    let coord_out = |v: &[f64]| -> ArrayRef {
        if c.coord_f32 {
            Arc::new(Float32Array::from_iter_values(v.iter().map(|x| *x as f32)))
        } else {
            f64s(v)
        }
    };
    let status_dict: DictionaryArray<arrow_array::types::Int8Type> =
        status.iter().copied().collect();
    let chrom_col: Vec<String> = chrom_of.iter().map(|&c| CHROMS[c].to_string()).collect();

    let mut input: Vec<(&str, ArrayRef)> = vec![
        ("chrom", strs(&chrom_col)),
        ("start", Arc::new(Int64Array::from(start.clone()))),
        (
            "end",
            Arc::new(Int64Array::from_iter_values(start.iter().map(|s| s + 1000))),
        ),
        ("trace_id", strs(&trace)),
    ];
    let mut reference: Vec<(&str, ArrayRef)> = vec![
        ("bin_id", Arc::new(Int32Array::from(bin_id))),
        ("trace_id", strs(&trace)),
    ];
    if c.cells {
        let cells_a: ArrayRef = Arc::new(Int64Array::from(cell.clone()));
        input.push(("cell_id", cells_a.clone()));
        reference.push(("cell_id", cells_a));
    }
    for (k, axis) in ["x", "y", "z"].into_iter().enumerate() {
        input.push((axis, f64s(&xyz[k])));
        reference.push((axis, coord_out(&xyz[k])));
    }
    let extras: Vec<(&str, ArrayRef, ArrayRef)> = vec![
        (
            "coord_status",
            Arc::new(status_dict),
            Arc::new(StringArray::from(status.clone())),
        ),
        (
            "spot_id",
            Arc::new(Int64Array::from(spot_id.clone())),
            Arc::new(Int64Array::from(spot_id)),
        ),
        ("probe", strs(&probe), strs(&probe)),
        (
            "fov",
            Arc::new(Int32Array::from(fov.clone())),
            Arc::new(Int32Array::from(fov)),
        ),
        (
            "label",
            Arc::new(Int64Array::from(label.clone())),
            Arc::new(Int64Array::from(label)),
        ),
        (
            "score",
            Arc::new(Float32Array::from(score.clone())),
            Arc::new(Float32Array::from(score)),
        ),
        (
            "flag",
            Arc::new(BooleanArray::from(flag.clone())),
            Arc::new(BooleanArray::from(flag)),
        ),
        ("tag", ostrs(&tag), ostrs(&tag)),
        ("spot_tracks/intensity", f64s(&track), f64s(&track)),
        (
            "spot_tracks/count",
            Arc::new(Int64Array::from(count.clone())),
            Arc::new(Int64Array::from(count)),
        ),
    ];
    for (name, i, o) in extras {
        input.push((name, i));
        reference.push((name, o));
    }
    for (k, name) in ["layers/raw/x", "layers/raw/y", "layers/raw/z"]
        .into_iter()
        .enumerate()
    {
        let a: ArrayRef = Arc::new(Float32Array::from(raw[k].clone()));
        input.push((name, a.clone()));
        reference.push((name, a));
    }
    let batch = chromdata_common::batch;
    Data {
        input: batch(input),
        reference: batch(reference),
        keys,
        traces,
        cells,
        chroms,
    }
}

impl Data {
    /// The reference answer: input rows `keep` in canonical order, columns of `columns`.
    fn answer(&self, keep: impl Fn(usize) -> bool, columns: &[String]) -> RecordBatch {
        let mut rows: Vec<usize> = (0..self.keys.len()).filter(|&i| keep(i)).collect();
        rows.sort_by_key(|&i| self.keys[i]); // stable: ties keep input order
        self.rows(&rows, columns)
    }

    fn rows(&self, rows: &[usize], columns: &[String]) -> RecordBatch {
        let idx = UInt64Array::from_iter_values(rows.iter().map(|&i| i as u64));
        let b = arrow_select::take::take_record_batch(&self.reference, &idx).unwrap();
        let schema = b.schema();
        let pick: Vec<usize> = columns
            .iter()
            .map(|c| schema.index_of(c).unwrap())
            .collect();
        b.project(&pick).unwrap()
    }

    fn names(&self) -> Vec<String> {
        self.reference
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect()
    }
}

/// The column sets a case queries: all, coords, and a random selection (asked in a
/// shuffled order with a duplicate; answered in full-schema order with the keys first).
fn column_sets(d: &Data, r: &mut Rng) -> Vec<(Columns, Vec<String>)> {
    let all = d.names();
    let n_keys = if d.cells.is_empty() { 2 } else { 3 };
    let coords: Vec<String> = all
        .iter()
        .filter(|n| {
            all.iter().position(|a| a == *n).unwrap() < n_keys
                || ["x", "y", "z"].contains(&n.as_str())
        })
        .cloned()
        .collect();
    let picked: Vec<String> = all[n_keys..]
        .iter()
        .filter(|_| r.below(3) == 0)
        .cloned()
        .collect();
    let mut asked = picked.clone();
    asked.reverse();
    if let Some(first) = picked.first() {
        asked.push(first.clone());
    }
    asked.push("trace_id".into());
    let mut want: Vec<String> = all[..n_keys].to_vec();
    want.extend(all[n_keys..].iter().filter(|n| picked.contains(n)).cloned());
    vec![
        (Columns::All, all.clone()),
        (Columns::Coords, coords),
        (Columns::Names(asked), want),
    ]
}

fn tmpdir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("chromdata-queries")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(path: &Path, d: &Data, c: &Case, layout: Layout, r: &mut Rng) {
    let opts = WriterOptions {
        layout,
        coord_float32: c.coord_f32,
        row_group_size: 4 + r.below(120),
        coords_row_group_size: 2 + r.below(60),
        ..WriterOptions::default()
    };
    let mut w = ChromDataWriter::create(path, opts).unwrap();
    let mut lo = 0;
    while lo < c.n {
        let hi = (lo + 1 + r.below(c.n as u64 / 2 + 1) as usize).min(c.n);
        w.append(d.input.slice(lo, hi - lo)).unwrap();
        lo = hi;
    }
    w.finish().unwrap();
}

/// Runs `q` twice on `cd` and once on a fresh handle of `path`; all three must equal `want`.
fn check(
    cd: &ChromData,
    path: &Path,
    want: &RecordBatch,
    what: &str,
    q: impl Fn(&ChromData) -> deltacells::Result<RecordBatch>,
) {
    for (k, got) in [q(cd), q(cd), q(&ChromData::open(path).unwrap())]
        .into_iter()
        .enumerate()
    {
        let got = got.unwrap_or_else(|e| panic!("{what} (run {k}): {e}"));
        assert_same(&got, want, &format!("{what} (run {k})"));
    }
}

fn run_case(c: &Case, layout: Layout) -> usize {
    let d = make(c);
    let short = match layout {
        Layout::Flat => "20",
        Layout::Partitioned => "21",
        Layout::PrimaryCoords => "22",
    };
    let dir = tmpdir(&format!("case{}-{short}", c.seed));
    let mut r = Rng(c.seed.wrapping_mul(0x9E37_79B9) | 1);
    let mut checked = 0;
    {
        for ext in ["chromdata.zarr", "cdz"] {
            let path = dir.join(format!("s{short}.{ext}"));
            write(&path, &d, c, layout, &mut r);
            let cd = ChromData::open(&path).unwrap();
            let what = |q: &str| format!("seed {} {short} {ext}: {q}", c.seed);
            for (cols, names) in column_sets(&d, &mut r) {
                let all = d.answer(|_| true, &names);
                check(
                    &cd,
                    &path,
                    &all,
                    &what(&format!("read_spots {cols:?}")),
                    |h| h.read_spots(false, &cols),
                );
                let input_order: Vec<usize> = (0..c.n).collect();
                let orig = d.rows(&input_order, &names);
                check(&cd, &path, &orig, &what("read_spots original order"), |h| {
                    h.read_spots(true, &cols)
                });
                for (t, name) in d.traces.iter().enumerate() {
                    let want = d.answer(|i| d.keys[i].1 == t as i64, &names);
                    let id = CatValue::Str(name.clone());
                    check(
                        &cd,
                        &path,
                        &want,
                        &what(&format!("get_trace {name} {cols:?}")),
                        |h| h.get_trace(&id, &cols),
                    );
                }
                for (k, &cell) in d.cells.iter().enumerate() {
                    let want = d.answer(|i| d.keys[i].0 == k as i64, &names);
                    let id = CatValue::Int(cell);
                    check(
                        &cd,
                        &path,
                        &want,
                        &what(&format!("get_cell {cell} {cols:?}")),
                        |h| h.get_cell(&id, &cols),
                    );
                }
                for (k, chrom) in d.chroms.iter().enumerate() {
                    let want = d.answer(|i| d.keys[i].2 == k as i64, &names);
                    check(
                        &cd,
                        &path,
                        &want,
                        &what(&format!("get_chrom {chrom} {cols:?}")),
                        |h| h.get_chrom(chrom, &cols),
                    );
                }
                checked += 3 + d.traces.len() + d.cells.len() + d.chroms.len();
            }
            // Iteration in batches of whole runs covers every spot once.
            let batch = 1 + r.below(5);
            let it = cd.iter_traces(batch, &Columns::All).unwrap();
            let schema = arrow_array::RecordBatchReader::schema(&it);
            let parts: Vec<RecordBatch> = it.collect::<Result<_, _>>().unwrap();
            let got = arrow_select::concat::concat_batches(&schema, &parts).unwrap();
            let want = d.answer(|_| true, &d.names());
            assert_same(
                &sort_by(&got, "spot_id"),
                &sort_by(&want, "spot_id"),
                &what(&format!("iter_traces({batch})")),
            );
            drop(cd);
            let _ = std::fs::remove_dir_all(&path);
            let _ = std::fs::remove_file(&path);
        }
    }
    checked
}

/// Six random cases (1 to 2,000 spots) in one layout.
fn random_stores(layout: Layout) {
    let mut checked = 0;
    let mut r = Rng(20261203);
    for seed in 1..=6u64 {
        let case = Case {
            seed,
            n: [1, 37, 300, 700, 1200, 2000][seed as usize - 1],
            cells: seed % 3 != 0,
            coord_f32: seed % 2 == 0,
            n_traces: 1 + r.below(9),
            n_cells: 1 + r.below(6),
            n_chroms: 1 + r.below(CHROMS.len() as u64) as usize,
        };
        checked += run_case(&case, layout);
    }
    assert!(checked > 300, "only {checked} queries checked");
}

#[test]
fn flat_queries_match_the_reference() {
    random_stores(Layout::Flat);
}

#[test]
fn partitioned_queries_match_the_reference() {
    random_stores(Layout::Partitioned);
}

#[test]
fn primary_coords_queries_match_the_reference() {
    random_stores(Layout::PrimaryCoords);
}

/// Results over 2 MiB: a handle keeps a released result's memory and hands it to its next
/// read (in test builds filled with garbage first). Reads of other column sets, sizes and
/// orders on one handle must still equal the reference, and the memory must be kept.
#[test]
fn reused_result_memory_gives_the_same_answers() {
    let c = Case {
        seed: 7,
        n: 60_000,
        cells: true,
        coord_f32: false,
        n_traces: 7,
        n_cells: 4,
        n_chroms: 3,
    };
    let d = make(&c);
    let dir = tmpdir("reuse");
    let path = dir.join("s22.chromdata.zarr");
    let opts = WriterOptions {
        layout: Layout::PrimaryCoords,
        row_group_size: 5000,
        coords_row_group_size: 3000,
        ..WriterOptions::default()
    };
    let mut w = ChromDataWriter::create(&path, opts).unwrap();
    w.append(d.input.clone()).unwrap();
    w.finish().unwrap();
    let cd = ChromData::open(&path).unwrap();
    let all = d.names();
    // All columns but spot_id: every later column sits 8 bytes per row earlier.
    let fewer: Vec<String> = all.iter().filter(|n| *n != "spot_id").cloned().collect();
    let sets = [
        (Columns::All, all.clone()),
        (Columns::Names(fewer.clone()), fewer),
    ];
    let mut kept = 0;
    for round in 0..2 {
        for (cols, names) in &sets {
            let what = format!("round {round} {cols:?}");
            let got = cd.read_spots(false, cols).unwrap();
            assert_same(
                &got,
                &d.answer(|_| true, names),
                &format!("{what}: read_spots"),
            );
            drop(got);
            kept += usize::from(cd.kept_result_bytes() > 0);
            let order: Vec<usize> = (0..c.n).collect();
            let got = cd.read_spots(true, cols).unwrap();
            assert_same(
                &got,
                &d.rows(&order, names),
                &format!("{what}: original order"),
            );
            drop(got);
            let chrom = &d.chroms[round % d.chroms.len()];
            let k = round % d.chroms.len();
            let got = cd.get_chrom(chrom, cols).unwrap();
            let want = d.answer(|i| d.keys[i].2 == k as i64, names);
            assert_same(&got, &want, &format!("{what}: get_chrom {chrom}"));
        }
    }
    assert_eq!(kept, 4, "a released full read's memory was not kept");
    drop(cd);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Rewrites the Parquet file at `path` with the same rows and columns in row groups of
/// `rows` rows (the store's index then disagrees with the file).
fn regroup(path: &Path, rows: usize) {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;
    let file = std::fs::File::open(path).unwrap();
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    let batches: Vec<RecordBatch> = reader.map(|b| b.unwrap()).collect();
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(rows))
        .build();
    let out = std::fs::File::create(path).unwrap();
    let mut w = ArrowWriter::try_new(out, batches[0].schema(), Some(props)).unwrap();
    for b in &batches {
        w.write(b).unwrap();
    }
    w.close().unwrap();
}

/// Bytes of a Parquet file's footer (its `FileMetaData`).
fn footer_len(path: &Path) -> u64 {
    let b = std::fs::read(path).unwrap();
    let n = b.len();
    u32::from_le_bytes(b[n - 8..n - 4].try_into().unwrap()) as u64
}

/// A 2.2 store whose primary footers are wide (many small row groups, more than open's
/// first read of a footer): every query answers as the reference. With the primary file's
/// row groups no longer those of the index, open refuses the store (§14 rule 4 is an
/// open-time rule, wide footers included) with a format error naming the file and both
/// row-group lists, the same on every try.
#[test]
fn wide_footers_are_checked_at_open() {
    let c = Case {
        seed: 11,
        n: 30_000,
        cells: true,
        coord_f32: false,
        n_traces: 9,
        n_cells: 3,
        n_chroms: 4,
    };
    let d = make(&c);
    let dir = tmpdir("wide-footers");
    let path = dir.join("s22.chromdata.zarr");
    let opts = WriterOptions {
        layout: Layout::PrimaryCoords,
        row_group_size: 40,
        coords_row_group_size: 2000,
        ..WriterOptions::default()
    };
    let mut w = ChromDataWriter::create(&path, opts).unwrap();
    w.append(d.input.clone()).unwrap();
    w.finish().unwrap();
    let primary = path.join("tables/primary/spots.parquet");
    assert!(
        footer_len(&primary) > 64 * 1024,
        "footer of {} bytes: not wide",
        footer_len(&primary)
    );
    let all = d.names();
    let cd = ChromData::open(&path).unwrap();
    assert_same(
        &cd.read_spots(false, &Columns::All).unwrap(),
        &d.answer(|_| true, &all),
        "read_spots",
    );
    let got = cd.get_chrom(&d.chroms[1], &Columns::All).unwrap();
    assert_same(&got, &d.answer(|i| d.keys[i].2 == 1, &all), "get_chrom");
    drop(cd);

    regroup(&primary, 55);
    let mut first = None;
    for round in 0..2 {
        let e = ChromData::open(&path).map(|_| ()).unwrap_err();
        assert_eq!(e.kind, deltacells::ErrorKind::Format, "{e}");
        assert!(
            e.message
                .contains("primary/spots.parquet: row groups of [55, 55")
                && e.message.contains("the index says [40, 40"),
            "round {round}: {e}"
        );
        assert_eq!(first.get_or_insert_with(|| e.clone()), &e, "round {round}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Rewrites `path` (a Parquet file) with row `row` of integer column `column` changed to
/// another code of the column, every row group kept as it was; returns (old, new) code.
fn recode(path: &Path, column: &str, row: usize) -> (i64, i64) {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int16Type, Int32Type, Int8Type};
    use arrow_schema::DataType;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::arrow::ArrowWriter;
    let bytes = bytes::Bytes::from(std::fs::read(path).unwrap());
    let groups = ParquetRecordBatchReaderBuilder::try_new(bytes.clone())
        .unwrap()
        .metadata()
        .num_row_groups();
    let mut batches = Vec::new();
    for g in 0..groups {
        let b = ParquetRecordBatchReaderBuilder::try_new(bytes.clone())
            .unwrap()
            .with_row_groups(vec![g])
            .with_batch_size(usize::MAX)
            .build()
            .unwrap()
            .map(|b| b.unwrap())
            .collect::<Vec<_>>();
        assert_eq!(b.len(), 1, "one batch per row group");
        batches.push(b.into_iter().next().unwrap());
    }
    let schema = batches[0].schema();
    let k = schema.index_of(column).unwrap();
    // The codes as i64 and back (the stored type is any integer type).
    macro_rules! by_type {
        ($a:expr, |$v:ident| $body:expr) => {
            match $a.data_type() {
                DataType::Int8 => {
                    let $v = $a.as_primitive::<Int8Type>();
                    $body
                }
                DataType::Int16 => {
                    let $v = $a.as_primitive::<Int16Type>();
                    $body
                }
                DataType::Int32 => {
                    let $v = $a.as_primitive::<Int32Type>();
                    $body
                }
                t => panic!("codes of type {t}"),
            }
        };
    }
    let wide = |a: &ArrayRef| -> Vec<i64> {
        by_type!(a, |v| v.values().iter().map(|&x| x as i64).collect())
    };
    let n_codes = batches
        .iter()
        .flat_map(|b| wide(b.column(k)))
        .max()
        .unwrap()
        + 1;
    let (mut at, mut change) = (0usize, None);
    for b in &mut batches {
        if (at..at + b.num_rows()).contains(&row) {
            let i = row - at;
            let old = wide(b.column(k))[i];
            let new = (old + 1) % n_codes;
            change = Some((old, new));
            let a = b.column(k).clone();
            let changed: ArrayRef = by_type!(a, |v| set_code(v, i, new));
            let mut cols = b.columns().to_vec();
            cols[k] = changed;
            *b = RecordBatch::try_new(schema.clone(), cols).unwrap();
        }
        at += b.num_rows();
    }
    let mut w = ArrowWriter::try_new(std::fs::File::create(path).unwrap(), schema, None).unwrap();
    for b in &batches {
        w.write(b).unwrap();
        w.flush().unwrap(); // one row group per batch, as before
    }
    w.close().unwrap();
    let (old, new) = change.expect("row inside the file");
    assert_ne!(old, new, "a column of one code");
    (old, new)
}

/// A stored trace / cell code that disagrees with its run in the index is refused by any
/// read that meets it, all columns or coords only, every time: a format error
/// naming the column, the code, the selected row and the run's code (the codes are checked
/// while they are decoded and never kept; issue 17, item 4). Reads that do not meet the
/// row still answer.
#[test]
fn stored_codes_that_disagree_with_their_runs_are_refused() {
    let c = Case {
        seed: 23,
        n: 6000,
        cells: true,
        coord_f32: false,
        n_traces: 7,
        n_cells: 3,
        n_chroms: 3,
    };
    let d = make(&c);
    for (column, row) in [("trace_id", 4321usize), ("cell_id", 17)] {
        let dir = tmpdir(&format!("bad-{column}"));
        let path = dir.join("flat.chromdata.zarr");
        let opts = WriterOptions {
            layout: Layout::Flat,
            row_group_size: 1000,
            ..WriterOptions::default()
        };
        let mut w = ChromDataWriter::create(&path, opts).unwrap();
        w.append(d.input.clone()).unwrap();
        w.finish().unwrap();
        // The flat file is in canonical order: its rows are a full read's selected rows.
        let (old, new) = recode(&path.join("tables/spots.parquet"), column, row);
        let want = format!(
            "spots {column}: code {new} at selected row {row} differs from its run's code {old} in the index"
        );
        let cd = ChromData::open(&path).unwrap();
        for cols in [Columns::All, Columns::Coords] {
            for round in 0..2 {
                let e = cd.read_spots(false, &cols).unwrap_err();
                assert_eq!(e.kind, deltacells::ErrorKind::Format, "{e}");
                assert!(e.message.contains(&want), "round {round}: {e}");
            }
        }
        // A trace whose rows do not include the changed one answers as the reference.
        let t = (0..d.traces.len())
            .find(|&t| t as i64 != canonical_key(&d, row).1)
            .unwrap();
        let id = CatValue::Str(d.traces[t].clone());
        let got = cd.get_trace(&id, &Columns::All).unwrap();
        let want = d.answer(|i| d.keys[i].1 == t as i64, &d.names());
        assert_same(&got, &want, "get_trace");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The key (cell, trace, chrom, bin codes) of canonical row `row` of `d`.
fn canonical_key(d: &Data, row: usize) -> (i64, i64, i64, i64) {
    let mut keys = d.keys.clone();
    keys.sort();
    keys[row]
}

/// `a` with value `i` replaced by `new`.
fn set_code<T: arrow_array::ArrowPrimitiveType>(
    a: &arrow_array::PrimitiveArray<T>,
    i: usize,
    new: i64,
) -> ArrayRef {
    use arrow_buffer::ArrowNativeType;
    let mut v = a.values().to_vec();
    v[i] = T::Native::from_usize(new as usize).unwrap();
    Arc::new(arrow_array::PrimitiveArray::<T>::new(
        v.into(),
        arrow_array::Array::nulls(a).cloned(),
    ))
}
