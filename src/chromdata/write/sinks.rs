//! The Parquet files of a store (§6.2, §8–§10): one sink per spot-aligned file of the
//! layout, cut into the planned row groups and fed by the merge; small tables written in
//! one piece.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, RecordBatch, UInt32Array};
use arrow_schema::{Field, Schema};

use super::collected::Collected;
use super::columns::Group;
use super::parquet_file::write_parquet;
use super::parquet_sink::{write_blocks, Dictionary, ParquetSink};
use super::queued_file::FileIo;
use super::row_groups::{Partition, Plan};
use crate::chromdata::spec::{self, chrom_dirs, portable, FloatType, Layout, Storage, AXES};
use crate::error::{Error, ErrorKind, Result};

/// Writes a small table (one row group) to `tables/<rel>`.
pub(crate) fn write_small(root: &Path, rel: &str, b: &RecordBatch) -> Result<()> {
    write_parquet(&root.join("tables").join(rel), b)
}

/// Writes `b` as one Parquet file (one row group, zstd), creating the parent directory.
pub(crate) fn one_col(name: &str, a: ArrayRef) -> Result<RecordBatch> {
    let s = Schema::new(vec![Field::new(name, a.data_type().clone(), true)]);
    RecordBatch::try_new(Arc::new(s), vec![a])
        .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))
}

/// The members of `tables.spots` that depend on the layout, filled while the sinks are made.
#[derive(Default)]
pub(crate) struct SpotFilesMeta {
    pub(crate) path: Option<String>,
    pub(crate) primary_path: Option<Option<String>>,
    pub(crate) coords_row_group_size: Option<u64>,
    pub(crate) partitions: Option<Vec<spec::Partition>>,
    pub(crate) files: Option<Vec<String>>,
    pub(crate) coords_files: Option<Vec<String>>,
}

/// (column of the final batch, stored name) of each column of a file.
type FileColumns = Vec<(usize, String)>;

/// Which columns of the final batches go to which file.
pub(crate) struct StoredColumns {
    /// bin_id, trace_id, [cell_id], [x, y, z].
    pub(crate) key: FileColumns,
    /// Value columns that are extra spot columns, in order.
    pub(crate) extras: Vec<usize>,
    /// Storage of each extra column.
    pub(crate) storage: Vec<Storage>,
    pub(crate) tracks: FileColumns,
    /// x, y, z of each layer.
    pub(crate) layers: Vec<FileColumns>,
    /// Type of each layer.
    pub(crate) layer_types: Vec<FloatType>,
}

impl StoredColumns {
    /// `fin_schema`: the final batches' schema, whose value columns start at `fv`.
    pub(crate) fn new(
        inp: &Collected,
        fin_schema: &Schema,
        fv: usize,
        storage: Vec<Storage>,
        layer_types: Vec<FloatType>,
    ) -> StoredColumns {
        let cols = &inp.cols;
        let layer = |k: usize| -> FileColumns {
            (0..3)
                .map(|a| {
                    let i = cols
                        .iter()
                        .position(|c| c.group == Group::Layer(k, a))
                        .unwrap_or(0);
                    (fv + i, AXES[a].to_string())
                })
                .collect()
        };
        StoredColumns {
            key: (0..fv)
                .map(|i| (i, fin_schema.field(i).name().clone()))
                .collect(),
            extras: (0..cols.len())
                .filter(|&i| cols[i].group == Group::Extra)
                .collect(),
            storage,
            tracks: cols
                .iter()
                .enumerate()
                .filter_map(|(i, c)| match &c.group {
                    Group::Track(n) => Some((fv + i, n.clone())),
                    _ => None,
                })
                .collect(),
            layers: (0..inp.layer_keys.len()).map(layer).collect(),
            layer_types,
        }
    }

    /// The extra columns whose storage passes `want`, as file columns.
    fn extras_where(
        &self,
        inp: &Collected,
        fv: usize,
        want: impl Fn(&Storage) -> bool,
    ) -> FileColumns {
        self.extras
            .iter()
            .zip(&self.storage)
            .filter(|(_, s)| want(s))
            .map(|(&i, _)| (fv + i, inp.cols[i].name.clone()))
            .collect()
    }
}

/// The sinks of a store and the metadata of the files they write.
pub(crate) struct Sinks {
    pub(crate) list: Vec<ParquetSink>,
    /// Partition (sink `part`) of each chromosome code.
    pub(crate) part_of_chrom: HashMap<i32, usize>,
    /// Columns of the final batch that a partition's slice keeps (sorted): those its sinks
    /// store, and the input row.
    part_cols: Vec<usize>,
    pub(crate) spot_files: SpotFilesMeta,
    pub(crate) tracks_meta: Option<spec::TracksEntry>,
    pub(crate) layers_meta: Vec<spec::LayerEntry>,
    /// How the files are written; after `list` so that the files go first when the sinks
    /// are dropped (the write thread is then joined, see `queued_file`).
    io: Option<FileIo>,
}

/// What the memory plan of `finish` decided for the sinks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SinkChoices {
    /// Target rows per coords row group (2.2), recorded in the metadata.
    pub(crate) coords_row_group_size: u64,
    /// Whether columns may be dictionary-encoded (the layout's default) or none is.
    pub(crate) dictionaries: bool,
    /// Write buffer of each file.
    pub(crate) file_buffer: usize,
}

/// Opens sinks in the temporary store `root` for the final batches of `fin_schema`.
struct SinkMaker<'a> {
    root: &'a Path,
    fin_schema: &'a Schema,
    plan: &'a Plan,
    cols: &'a StoredColumns,
    layer_names: Vec<String>,
    /// False when the memory plan leaves no room for dictionary encoders (`Sizes::choose`).
    dictionaries: bool,
    io: FileIo,
}

impl SinkMaker<'_> {
    fn sink(
        &self,
        rel: &str,
        cols: FileColumns,
        groups: &[u64],
        part: Option<usize>,
        dictionary: Dictionary,
    ) -> Result<ParquetSink> {
        let dictionary = if self.dictionaries {
            dictionary
        } else {
            Dictionary::Off
        };
        ParquetSink::new(
            self.root,
            rel,
            self.fin_schema,
            cols,
            groups.to_vec(),
            part,
            dictionary,
            &self.io,
        )
    }

    /// spot_tracks and layers of the single-file layouts (flat; primary of 2.2).
    fn whole_tables(&self, prefix: &str, dictionary: Dictionary, s: &mut Sinks) -> Result<()> {
        if let Some(m) = s.tracks_meta.as_mut() {
            let rel = format!("{prefix}spot_tracks.parquet");
            let groups = &self.plan.groups;
            s.list
                .push(self.sink(&rel, self.cols.tracks.clone(), groups, None, dictionary)?);
            m.path = Some(rel);
        }
        for (k, m) in s.layers_meta.iter_mut().enumerate() {
            let rel = format!("{prefix}layers/{}.parquet", self.layer_names[k]);
            let cols = self.cols.layers[k].clone();
            s.list
                .push(self.sink(&rel, cols, &self.plan.groups, None, dictionary)?);
            m.path = Some(rel);
        }
        Ok(())
    }
}

impl Sinks {
    /// One sink per file of the layout (§8–§10), with the planned row groups.
    pub(crate) fn open(
        inp: &Collected,
        root: &Path,
        fin_schema: &Schema,
        fv: usize,
        plan: &Plan,
        cols: &StoredColumns,
        choices: SinkChoices,
    ) -> Result<Sinks> {
        let SinkChoices {
            coords_row_group_size,
            dictionaries,
            file_buffer,
        } = choices;
        let chrom_dirs = chrom_dirs(&inp.chrom_names);
        let maker = SinkMaker {
            root,
            fin_schema,
            plan,
            cols,
            layer_names: portable(
                &inp.layer_keys
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
            ),
            dictionaries,
            io: FileIo::new(file_buffer, inp.threads)?,
        };
        let mut s = Sinks::empty(inp, cols);
        let part_meta = |parts: &[Partition]| -> Vec<spec::Partition> {
            parts
                .iter()
                .map(|p| spec::Partition {
                    chrom: inp.chrom_names[p.chrom as usize].clone(),
                    chrom_code: p.chrom as i64,
                    dir: Some(chrom_dirs[p.chrom as usize].clone()),
                    n_rows: p.rows,
                    n_row_groups: p.groups.len() as u64,
                    other: spec::Members::new(),
                })
                .collect()
        };
        let mut all = cols.key.clone();
        all.extend(cols.extras_where(inp, fv, |_| true));
        match inp.layout {
            Layout::Flat => {
                s.list.push(maker.sink(
                    "spots.parquet",
                    all,
                    &plan.groups,
                    None,
                    Dictionary::NotFloats,
                )?);
                s.spot_files.path = Some("spots.parquet".into());
                maker.whole_tables("", Dictionary::NotFloats, &mut s)?;
            }
            Layout::Partitioned => {
                let mut files = Vec::new();
                let mut tfiles = Vec::new();
                let mut lfiles: Vec<Vec<String>> = vec![Vec::new(); inp.layer_keys.len()];
                for (p, part) in plan.partitions.iter().enumerate() {
                    s.part_of_chrom.insert(part.chrom, p);
                    let d = &chrom_dirs[part.chrom as usize];
                    let rel = format!("spots/{d}/part-0.parquet");
                    s.list.push(maker.sink(
                        &rel,
                        all.clone(),
                        &part.groups,
                        Some(p),
                        Dictionary::NotFloats,
                    )?);
                    files.push(rel);
                    if !cols.tracks.is_empty() {
                        let rel = format!("spot_tracks/{d}/part-0.parquet");
                        let tc = cols.tracks.clone();
                        s.list.push(maker.sink(
                            &rel,
                            tc,
                            &part.groups,
                            Some(p),
                            Dictionary::NotFloats,
                        )?);
                        tfiles.push(rel);
                    }
                    for (k, lf) in lfiles.iter_mut().enumerate() {
                        let rel = format!("layers/{}/{d}/part-0.parquet", maker.layer_names[k]);
                        let lc = cols.layers[k].clone();
                        s.list.push(maker.sink(
                            &rel,
                            lc,
                            &part.groups,
                            Some(p),
                            Dictionary::NotFloats,
                        )?);
                        lf.push(rel);
                    }
                }
                s.spot_files.partitions = Some(part_meta(&plan.partitions));
                s.spot_files.files = Some(files);
                if let Some(m) = s.tracks_meta.as_mut() {
                    m.files = Some(tfiles);
                }
                for (m, f) in s.layers_meta.iter_mut().zip(lfiles) {
                    m.files = Some(f);
                }
            }
            Layout::PrimaryCoords => {
                let prim = cols.extras_where(inp, fv, |s| matches!(s, Storage::Primary));
                if prim.is_empty() {
                    s.spot_files.primary_path = Some(None);
                } else {
                    let rel = "primary/spots.parquet";
                    s.list
                        .push(maker.sink(rel, prim, &plan.groups, None, Dictionary::All)?);
                    s.spot_files.primary_path = Some(Some(rel.into()));
                }
                maker.whole_tables("primary/", Dictionary::All, &mut s)?;
                let mut files = Vec::new();
                for (p, part) in plan.coords_parts.iter().enumerate() {
                    s.part_of_chrom.insert(part.chrom, p);
                    let rel = format!("coords/{}/part-0.parquet", chrom_dirs[part.chrom as usize]);
                    let kc = cols.key.clone();
                    s.list.push(maker.sink(
                        &rel,
                        kc,
                        &part.groups,
                        Some(p),
                        Dictionary::NotFloats,
                    )?);
                    files.push(rel);
                }
                s.spot_files.coords_row_group_size = Some(coords_row_group_size);
                s.spot_files.partitions = Some(part_meta(&plan.coords_parts));
                s.spot_files.coords_files = Some(files);
            }
        }
        s.project_parts(fin_schema.fields().len() - 1);
        s.io = Some(maker.io);
        Ok(s)
    }

    /// No sink yet; the tracks and layers entries of the metadata without their files.
    fn empty(inp: &Collected, cols: &StoredColumns) -> Sinks {
        Sinks {
            list: Vec::new(),
            part_of_chrom: HashMap::new(),
            part_cols: Vec::new(),
            spot_files: SpotFilesMeta::default(),
            tracks_meta: (!cols.tracks.is_empty()).then(|| spec::TracksEntry {
                path: None,
                files: None,
                columns: Vec::new(),
                other: spec::Members::new(),
            }),
            io: None,
            layers_meta: inp
                .layer_keys
                .iter()
                .zip(&cols.layer_types)
                .map(|(key, &ty)| spec::LayerEntry {
                    key: key.clone(),
                    ty,
                    columns: AXES.iter().map(|a| a.to_string()).collect(),
                    path: None,
                    files: None,
                    other: spec::Members::new(),
                })
                .collect(),
        }
    }

    /// Partition slices keep only the columns their sinks store, and the input row
    /// (`rows_col`): a 2.2 block's coords slices then copy 6 columns, not all of them
    /// (the whole block's 60 tracks were copied again, on the encoder's thread).
    fn project_parts(&mut self, rows_col: usize) {
        let mut keep = vec![rows_col];
        for s in self.list.iter().filter(|s| s.part.is_some()) {
            keep.extend(s.columns());
        }
        keep.sort_unstable();
        keep.dedup();
        for s in self.list.iter_mut().filter(|s| s.part.is_some()) {
            s.project(&keep);
        }
        self.part_cols = keep;
    }

    /// Column of a partition slice that holds the final batch's column `c`, if it keeps it.
    pub(crate) fn part_col(&self, c: usize) -> Option<usize> {
        self.part_cols.binary_search(&c).ok()
    }

    /// Per-partition slices of a merged block (by its chromosome column `chrom_col`), of
    /// the columns partition sinks store and the input row (see `part_col`); None for
    /// partitions the block has no rows of.
    pub(crate) fn split(
        &self,
        block: &RecordBatch,
        chrom_col: usize,
    ) -> Result<Vec<Option<RecordBatch>>> {
        let n_parts = self.part_of_chrom.len();
        let mut parts: Vec<Option<RecordBatch>> = vec![None; n_parts];
        if n_parts == 0 {
            return Ok(parts);
        }
        let chrom = block.column(chrom_col).as_primitive::<Int32Type>();
        let mut idx: Vec<Vec<u32>> = vec![Vec::new(); n_parts];
        for (i, c) in chrom.values().iter().enumerate() {
            idx[self.part_of_chrom[c]].push(i as u32);
        }
        let projected = block
            .project(&self.part_cols)
            .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
        for (p, ix) in idx.into_iter().enumerate() {
            if ix.is_empty() {
                continue;
            }
            let b = arrow_select::take::take_record_batch(&projected, &UInt32Array::from(ix))
                .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
            parts[p] = Some(b);
        }
        Ok(parts)
    }

    /// Hands a merged block to every sink (its partition's slice to partition sinks), on
    /// `pool` when there is one.
    pub(crate) fn write(
        &mut self,
        block: &RecordBatch,
        parts: &[Option<RecordBatch>],
        pool: Option<&rayon::ThreadPool>,
    ) -> Result<()> {
        let inputs: Vec<Option<&RecordBatch>> = self
            .list
            .iter()
            .map(|s| match s.part {
                None => Some(block),
                Some(p) => parts[p].as_ref(),
            })
            .collect();
        write_blocks(&mut self.list, &inputs, pool)?;
        Ok(())
    }
}
