//! One spot-aligned Parquet file of a store, written block by block and cut into the
//! planned row groups, its columns encoded in parallel: every (file, column) pair of a
//! merged block is one task on the writer's pool, and the finished column chunks of a row
//! group are appended to the file in column order. The bytes are those of the parquet
//! crate's `ArrowWriter` fed the same slices (the same column writers, fed the same leaves,
//! closed and appended in the same order), so they do not depend on the threads.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, FieldRef, Schema, SchemaRef};
use parquet::arrow::arrow_writer::{
    compute_leaves, ArrowColumnChunk, ArrowColumnWriter, ArrowRowGroupWriterFactory,
};
use parquet::arrow::ArrowWriter;
use parquet::file::writer::SerializedFileWriter;

use super::parquet_file::props;
use super::queued_file::{FileIo, SinkFile};
use crate::error::{Error, ErrorKind, Result};

/// Which columns of a file are dictionary-encoded (the parquet crate's default is all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dictionary {
    /// Every column.
    All,
    /// Every column but the floating-point ones (plain: their values are seldom repeated).
    NotFloats,
    /// No column: a column writer with a dictionary holds ~96 KiB whatever its rows (see
    /// `finish`), more than a wide store's column writers can hold under a small budget.
    Off,
}

impl Dictionary {
    /// The stored names of `fields` written without a dictionary.
    fn plain_columns(self, fields: &[Field]) -> Vec<String> {
        let float = |f: &&Field| matches!(f.data_type(), DataType::Float32 | DataType::Float64);
        match self {
            Dictionary::All => Vec::new(),
            Dictionary::NotFloats => fields
                .iter()
                .filter(float)
                .map(|f| f.name().clone())
                .collect(),
            Dictionary::Off => fields.iter().map(|f| f.name().clone()).collect(),
        }
    }
}

/// A Parquet file of the store written block by block, cut into the planned row groups.
pub(crate) struct ParquetSink {
    path: PathBuf,
    file: Option<SerializedFileWriter<SinkFile>>,
    factory: ArrowRowGroupWriterFactory,
    /// Columns of the final batch this file stores, in file order.
    cols: Vec<usize>,
    schema: SchemaRef,
    groups: Vec<u64>,
    /// Current row group and the rows it has so far.
    g: usize,
    in_group: u64,
    /// Column writers of row group `g`, once it has rows.
    open: Option<Vec<ArrowColumnWriter>>,
    /// Partition index, or None for all rows.
    pub(crate) part: Option<usize>,
}

/// Rows `off .. off + n` of a block go to row group `group`; `ends` when they complete it.
#[derive(Debug, Clone, Copy)]
struct Segment {
    off: usize,
    n: usize,
    ends: bool,
}

impl ParquetSink {
    /// A file `tables/<rel>` under `root` with the columns `cols` ((column of the final
    /// batch, stored name)) of `fin_schema`, cut into `groups`; the columns `dictionary`
    /// names dictionary-encoded, written as `io` says.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        root: &Path,
        rel: &str,
        fin_schema: &Schema,
        cols: Vec<(usize, String)>,
        groups: Vec<u64>,
        part: Option<usize>,
        dictionary: Dictionary,
        io: &FileIo,
    ) -> Result<ParquetSink> {
        let path = root.join("tables").join(rel);
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).map_err(|e| Error::io(d, &e))?;
        }
        let fields: Vec<Field> = cols
            .iter()
            .map(|(i, n)| Field::new(n, fin_schema.field(*i).data_type().clone(), true))
            .collect();
        let dict_off = dictionary.plain_columns(&fields);
        let schema = Arc::new(Schema::new(fields));
        let f = File::create(&path).map_err(|e| Error::io(&path, &e))?;
        let ioerr = |e: parquet::errors::ParquetError| {
            Error::new(ErrorKind::Io, format!("{}: {e}", path.display()))
        };
        // The ArrowWriter sets up the file (schema, Arrow schema metadata) exactly as a
        // plain ArrowWriter of these columns would; its parts then write the row groups.
        let (file, factory) =
            ArrowWriter::try_new(io.open(f), schema.clone(), Some(props(&dict_off)))
                .and_then(|w| w.into_serialized_writer())
                .map_err(ioerr)?;
        Ok(ParquetSink {
            path,
            file: Some(file),
            factory,
            cols: cols.into_iter().map(|(i, _)| i).collect(),
            schema,
            groups,
            g: 0,
            in_group: 0,
            open: None,
            part,
        })
    }

    /// Columns of the final batch this file stores.
    pub(crate) fn columns(&self) -> &[usize] {
        &self.cols
    }

    /// The file's blocks will be projections of the final batch to the columns `keep`
    /// (sorted, holding all of this file's).
    pub(crate) fn project(&mut self, keep: &[usize]) {
        for c in self.cols.iter_mut() {
            *c = keep.binary_search(c).unwrap_or(*c);
        }
    }

    fn err(&self, e: impl std::fmt::Display) -> Error {
        Error::new(ErrorKind::Io, format!("{}: {e}", self.path.display()))
    }

    /// `n` rows cut at the ends of the planned row groups, from the current position.
    fn segments(&self, n: usize) -> Result<Vec<Segment>> {
        let mut out = Vec::new();
        let (mut g, mut in_group, mut off) = (self.g, self.in_group, 0usize);
        while off < n {
            let Some(&target) = self.groups.get(g) else {
                return Err(Error::new(
                    ErrorKind::Internal,
                    format!("{}: more rows than planned", self.path.display()),
                ));
            };
            let k = ((target - in_group) as usize).min(n - off);
            in_group += k as u64;
            let ends = in_group == target;
            out.push(Segment { off, n: k, ends });
            off += k;
            if ends {
                g += 1;
                in_group = 0;
            }
        }
        Ok(out)
    }

    /// The column writers of each segment's row group, per column: the open group's for
    /// the first segment, fresh ones for the next.
    fn writers_for(&mut self, segs: &[Segment]) -> Result<Vec<Vec<ArrowColumnWriter>>> {
        let mut per_col: Vec<Vec<ArrowColumnWriter>> =
            (0..self.cols.len()).map(|_| Vec::new()).collect();
        let mut open = self.open.take();
        for k in 0..segs.len() {
            let ws = match open.take() {
                Some(ws) => ws,
                None => self
                    .factory
                    .create_column_writers(self.g + k)
                    .map_err(|e| self.err(e))?,
            };
            for (c, w) in ws.into_iter().enumerate() {
                per_col[c].push(w);
            }
        }
        Ok(per_col)
    }

    /// Appends the finished column chunks (per column, one per completed row group) and
    /// keeps the writers of a group still open.
    fn absorb(&mut self, jobs: Vec<ColumnJob>, segs: &[Segment]) -> Result<()> {
        let n_done = segs.iter().filter(|s| s.ends).count();
        let mut chunks: Vec<std::vec::IntoIter<ArrowColumnChunk>> = Vec::new();
        let mut open = Vec::new();
        for j in jobs {
            chunks.push(j.chunks.into_iter());
            open.extend(j.rest);
        }
        for _ in 0..n_done {
            let file = self.file.as_mut().ok_or_else(|| {
                Error::new(ErrorKind::Internal, "a Parquet sink was used after close")
            })?;
            let ioerr = |e: parquet::errors::ParquetError| {
                Error::new(ErrorKind::Io, format!("{}: {e}", self.path.display()))
            };
            let mut rg = file.next_row_group().map_err(ioerr)?;
            for c in chunks.iter_mut() {
                let chunk = c.next().ok_or_else(|| {
                    Error::new(
                        ErrorKind::Internal,
                        "a column chunk of a row group is missing",
                    )
                })?;
                chunk.append_to_row_group(&mut rg).map_err(ioerr)?;
            }
            rg.close().map_err(ioerr)?;
        }
        self.open = (!open.is_empty()).then_some(open);
        for s in segs {
            self.in_group += s.n as u64;
            if s.ends {
                self.g += 1;
                self.in_group = 0;
            }
        }
        Ok(())
    }

    pub(crate) fn close(&mut self) -> Result<()> {
        if self.g != self.groups.len() || self.in_group != 0 {
            return Err(Error::new(
                ErrorKind::Internal,
                format!(
                    "{}: wrote {} of {} planned row groups",
                    self.path.display(),
                    self.g,
                    self.groups.len()
                ),
            ));
        }
        if let Some(w) = self.file.take() {
            let inner = w.into_inner().map_err(|e| self.err(e))?;
            inner.finish().map_err(|e| self.err(e))?;
        }
        Ok(())
    }
}

/// One column of one file for one block: its slices, one per segment, go to the writers
/// of their row groups; those the block completes are closed into chunks.
struct ColumnJob {
    field: FieldRef,
    array: ArrayRef,
    segs: Arc<[Segment]>,
    writers: Vec<ArrowColumnWriter>,
    chunks: Vec<ArrowColumnChunk>,
    rest: Option<ArrowColumnWriter>,
}

impl ColumnJob {
    fn run(&mut self) -> parquet::errors::Result<()> {
        let writers = std::mem::take(&mut self.writers);
        for (s, mut w) in self.segs.iter().zip(writers) {
            let slice = self.array.slice(s.off, s.n);
            for leaf in compute_leaves(&self.field, &slice)? {
                w.write(&leaf)?;
            }
            if s.ends {
                self.chunks.push(w.close()?);
            } else {
                self.rest = Some(w);
            }
        }
        Ok(())
    }
}

/// Writes each sink's rows of a block (`inputs[i]` for sink i, None when it has none),
/// every (sink, column) pair a task on `pool` when there is one.
pub(crate) fn write_blocks(
    sinks: &mut [ParquetSink],
    inputs: &[Option<&RecordBatch>],
    pool: Option<&rayon::ThreadPool>,
) -> Result<()> {
    let mut jobs: Vec<ColumnJob> = Vec::new();
    let mut plans: Vec<(usize, Arc<[Segment]>)> = Vec::new();
    for (si, (s, b)) in sinks.iter_mut().zip(inputs).enumerate() {
        let Some(b) = b else { continue };
        let segs: Arc<[Segment]> = s.segments(b.num_rows())?.into();
        if segs.is_empty() {
            continue;
        }
        let writers = s.writers_for(&segs)?;
        for ((&c, ws), f) in s.cols.iter().zip(writers).zip(s.schema.fields()) {
            jobs.push(ColumnJob {
                field: f.clone(),
                array: b.column(c).clone(),
                segs: segs.clone(),
                writers: ws,
                chunks: Vec::new(),
                rest: None,
            });
        }
        plans.push((si, segs));
    }
    let results: Vec<parquet::errors::Result<()>> = match pool {
        // One job per leaf: rayon would otherwise cut the jobs into a few runs of
        // neighbours, and a run of a wide file's heavy columns (a 2.2 store's 60 tracks come
        // before its small coords slices) kept one worker busy while the other idled
        // (quiet profile at 10 M x 60: workers 63 % and 39 % busy during the merge).
        Some(pool) => pool.install(|| {
            use rayon::prelude::*;
            jobs.par_iter_mut()
                .with_max_len(1)
                .map(ColumnJob::run)
                .collect()
        }),
        None => jobs.iter_mut().map(ColumnJob::run).collect(),
    };
    let mut jobs = jobs.into_iter();
    let mut results = results.into_iter();
    for (si, segs) in plans {
        let s = &mut sinks[si];
        let n = s.cols.len();
        for r in results.by_ref().take(n) {
            r.map_err(|e| s.err(e))?;
        }
        let mine: Vec<ColumnJob> = jobs.by_ref().take(n).collect();
        s.absorb(mine, &segs)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chromdata::write::queued_file::WriteQueue;
    use arrow_array::{Float32Array, Float64Array, Int16Array, Int32Array};

    /// A block of `n` rows from `lo`: int32, int16 with nulls, float32 with few distinct
    /// values (dictionary), float64 (plain where floats are not dictionary-encoded).
    fn block(lo: usize, n: usize) -> RecordBatch {
        let r = lo..lo + n;
        let cols: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from_iter_values(
                r.clone().map(|i| (i * 7 % 1000) as i32),
            )),
            Arc::new(Int16Array::from_iter(
                r.clone().map(|i| (i % 5 != 0).then_some((i % 300) as i16)),
            )),
            Arc::new(Float32Array::from_iter_values(
                r.clone().map(|i| (i % 13) as f32 * 0.5),
            )),
            Arc::new(Float64Array::from_iter_values(r.map(|i| (i as f64).sin()))),
        ];
        let fields: Vec<Field> = ["a", "b", "c", "d"]
            .iter()
            .zip(&cols)
            .map(|(n, c)| Field::new(*n, c.data_type().clone(), true))
            .collect();
        RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap()
    }

    /// The bytes a plain `ArrowWriter` writes for `rows` rows cut into `groups`.
    fn reference(path: &Path, groups: &[u64], dictionary: Dictionary) -> Vec<u8> {
        let all = block(0, groups.iter().sum::<u64>() as usize);
        let dict_off: Vec<String> = match dictionary {
            Dictionary::All => vec![],
            Dictionary::NotFloats => vec!["c".into(), "d".into()],
            Dictionary::Off => vec!["a".into(), "b".into(), "c".into(), "d".into()],
        };
        let f = File::create(path).unwrap();
        let mut w = ArrowWriter::try_new(
            std::io::BufWriter::new(f),
            all.schema(),
            Some(props(&dict_off)),
        )
        .unwrap();
        let mut off = 0;
        for &g in groups {
            w.write(&all.slice(off, g as usize)).unwrap();
            w.flush().unwrap();
            off += g as usize;
        }
        w.close().unwrap();
        std::fs::read(path).unwrap()
    }

    #[test]
    fn column_parallel_sinks_write_the_arrow_writers_bytes() {
        let dir = std::env::temp_dir().join(format!("dc-parquet-sink-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let groups = vec![700u64, 1000, 1, 999, 300];
        let n: usize = groups.iter().sum::<u64>() as usize;
        let schema = block(0, 1).schema();
        let cols: Vec<(usize, String)> = (0..4)
            .map(|i| (i, schema.field(i).name().clone()))
            .collect();
        let pool = crate::pool::pool(3).unwrap();
        let mut wants = Vec::new();
        for dictionary in [Dictionary::NotFloats, Dictionary::All, Dictionary::Off] {
            let want = reference(&dir.join("want.parquet"), &groups, dictionary);
            assert!(
                !wants.contains(&want),
                "{dictionary:?}: the same bytes as another"
            );
            wants.push(want.clone());
            // Blocks that end inside, at and across row-group ends (one spans three groups).
            for (k, cuts) in [vec![n], vec![1, 699, 1, 1700, 599], vec![650, 1400, 950]]
                .into_iter()
                .enumerate()
            {
                for threaded in [false, true] {
                    let rel = format!("t{k}-{threaded}-{dictionary:?}.parquet");
                    // Threaded: also through the write thread, in small buffers.
                    let io = FileIo {
                        buffer: if threaded { 1000 } else { 8 << 10 },
                        queue: threaded.then(|| WriteQueue::start().unwrap()),
                    };
                    let mut sinks = vec![ParquetSink::new(
                        &dir,
                        &rel,
                        &schema,
                        cols.clone(),
                        groups.clone(),
                        None,
                        dictionary,
                        &io,
                    )
                    .unwrap()];
                    let mut lo = 0;
                    for c in &cuts {
                        let b = block(lo, *c);
                        let p = threaded.then_some(pool.as_ref());
                        write_blocks(&mut sinks, &[Some(&b)], p).unwrap();
                        lo += c;
                    }
                    assert_eq!(lo, n);
                    sinks[0].close().unwrap();
                    let got = std::fs::read(dir.join("tables").join(&rel)).unwrap();
                    assert!(got == want, "{rel}: bytes differ from ArrowWriter's");
                }
            }
        }
        // More rows than planned is an error, not a longer file.
        let mut sinks = vec![ParquetSink::new(
            &dir,
            "over.parquet",
            &schema,
            cols,
            vec![10],
            None,
            Dictionary::NotFloats,
            &FileIo {
                buffer: 8 << 10,
                queue: None,
            },
        )
        .unwrap()];
        let e = write_blocks(&mut sinks, &[Some(&block(0, 11))], None).unwrap_err();
        assert!(e.to_string().contains("more rows than planned"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
