//! `var.parquet`: the gene table, one row per output column, in output order (the writer
//! applies the gene order). The pandas index travels as an ordinary column; a `pandas`
//! schema-metadata entry, if the caller gives one, is written unchanged (in the Arrow
//! schema and as parquet key-value metadata, where pyarrow looks for it).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use arrow_array::{RecordBatch, RecordBatchReader, UInt32Array};
use arrow_schema::{ArrowError, Field, SchemaRef};
use parquet::arrow::arrow_reader::{ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use parquet::arrow::{ArrowWriter, ProjectionMask};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};

use crate::error::{Error, ErrorKind, Result};
use crate::parquet_meta::arrow_metadata;
use crate::parquet_meta::chunks::CheckedChunks;
use crate::storage::Root;

/// Checks a gene table given in input order.
pub(crate) fn check_table(table: &RecordBatch, n_genes: u32) -> Result<()> {
    if table.num_rows() != n_genes as usize {
        return Err(Error::invalid_argument(format!(
            "var table has {} rows, must have n_genes = {n_genes} (one per gene, in input order)",
            table.num_rows()
        )));
    }
    if table.num_columns() == 0 {
        return Err(Error::invalid_argument("var table has no columns"));
    }
    if let Some(name) = name_with_nul(table.schema().fields()) {
        return Err(Error::invalid_argument(format!(
            "var table: column name {name:?} contains a NUL byte (a reader could not hand the \
             table out through the Arrow C Data Interface, whose names are C strings)"
        )));
    }
    Ok(())
}

/// The first field name, at any depth, that holds a NUL byte. The Arrow C Data Interface
/// carries names as NUL-terminated strings: a stream whose schema has one cannot be exported
/// (its `get_schema` fails), so such a table is refused where it is read or written.
fn name_with_nul<'a>(
    fields: impl IntoIterator<Item = &'a std::sync::Arc<Field>>,
) -> Option<&'a str> {
    fields.into_iter().find_map(|f| {
        if f.name().contains('\0') {
            return Some(f.name().as_str());
        }
        match f.data_type() {
            arrow_schema::DataType::Struct(children) => name_with_nul(children),
            arrow_schema::DataType::List(c)
            | arrow_schema::DataType::LargeList(c)
            | arrow_schema::DataType::FixedSizeList(c, _)
            | arrow_schema::DataType::LargeListView(c)
            | arrow_schema::DataType::ListView(c)
            | arrow_schema::DataType::Map(c, _) => name_with_nul([c]),
            _ => None,
        }
    })
}

/// Writes `table` (input order) to `path` in output order: row j is input row `order[j]`.
pub(crate) fn write_table(path: &Path, table: &RecordBatch, order: Option<&[i32]>) -> Result<()> {
    let bad = |e: &dyn std::fmt::Display| {
        Error::invalid_argument(format!("var table: cannot be written as parquet: {e}"))
    };
    let table = match order {
        Some(order) => {
            let idx: UInt32Array = order.iter().map(|&g| g as u32).collect();
            arrow_select::take::take_record_batch(table, &idx).map_err(|e| bad(&e))?
        }
        None => table.clone(),
    };
    let kv: Vec<KeyValue> = table
        .schema()
        .metadata()
        .iter()
        .filter(|(k, _)| k.as_str() == "pandas")
        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
        .collect();
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_statistics_enabled(EnabledStatistics::None)
        .set_key_value_metadata(if kv.is_empty() { None } else { Some(kv) })
        .build();
    let file = File::create(path).map_err(|e| Error::io(path, &e))?;
    let mut w = ArrowWriter::try_new(BufWriter::new(file), table.schema(), Some(props))
        .map_err(|e| bad(&e))?;
    w.write(&table).map_err(|e| bad(&e))?;
    let mut out = w
        .into_inner()
        .map_err(|e| Error::new(ErrorKind::Io, format!("{}: {e}", path.display())))?;
    out.flush()
        .and_then(|_| out.get_ref().sync_all())
        .map_err(|e| Error::io(path, &e))
}

/// Opens `rel` (`var.parquet`, which must hold `n_genes` rows) of the dataset at `store` as
/// a stream of record batches. Remote: the whole (small) object in one GET.
pub(crate) fn read_table(
    store: &Root,
    rel: &str,
    n_genes: u64,
) -> Result<Box<dyn RecordBatchReader + Send>> {
    let missing = |e: Error| {
        if e.kind == ErrorKind::NotFound && !store.deleted() {
            Error::format(format!(
                "{}: missing, though the manifest's has_var_table is true",
                store.display_rel(rel)
            ))
        } else {
            e
        }
    };
    let what = store.display_rel(rel);
    if store.is_remote() {
        let bytes = store.read(rel).map_err(missing)?;
        read_parquet_table(bytes::Bytes::from(bytes), n_genes, &what)
    } else {
        let file = store.open_file(rel).map_err(missing)?;
        read_parquet_table(file, n_genes, &what)
    }
}

/// `var.parquet` from `source`: its footer walked and decoded, its rows and names checked,
/// then its column chunks fetched and their page headers walked (crate::parquet_meta)
/// before the stream decodes them.
fn read_parquet_table<T: parquet::file::reader::ChunkReader>(
    source: T,
    n_genes: u64,
    what: &str,
) -> Result<Box<dyn RecordBatchReader + Send>> {
    let meta = arrow_metadata(&source, what, ArrowReaderOptions::new())?;
    let rows = meta.metadata().file_metadata().num_rows();
    if rows < 0 || rows as u64 != n_genes {
        return Err(Error::format(format!(
            "{what}: {rows} rows, must be n_genes = {n_genes} (one per output column)"
        )));
    }
    // The parquet reader's batches carry no schema metadata; the footer's schema does
    // (the "pandas" entry among others).
    let schema = meta.schema().clone();
    if let Some(name) = name_with_nul(schema.fields()) {
        return Err(Error::format(format!(
            "{what}: column name {name:?} contains a NUL byte, which the Arrow C Data \
             Interface cannot carry (its names are C strings)"
        )));
    }
    let chunks = CheckedChunks::fetch(&source, meta.metadata(), &ProjectionMask::all(), what)?;
    let inner = crate::contain::decoding(what, || {
        ParquetRecordBatchReaderBuilder::new_with_metadata(chunks, meta)
            .with_batch_size(1 << 16)
            .build()
            .map_err(|e| Error::format(format!("{what}: {e}")))
    })?;
    let path = what.to_string();
    Ok(Box::new(WithSchema {
        inner,
        schema,
        path,
    }))
}

/// Batches of `inner`, relabelled with `schema` (same fields, plus metadata); the decoder
/// runs contained (a panic in it is an error of that batch naming `path`).
struct WithSchema<R> {
    inner: R,
    schema: SchemaRef,
    path: String,
}

impl<R: Iterator<Item = std::result::Result<RecordBatch, ArrowError>>> Iterator for WithSchema<R> {
    type Item = std::result::Result<RecordBatch, ArrowError>;
    fn next(&mut self) -> Option<Self::Item> {
        let next = crate::contain::decoding(&self.path, || Ok(self.inner.next()));
        match next {
            Ok(b) => b.map(|b| b.and_then(|b| b.with_schema(self.schema.clone()))),
            Err(e) => Some(Err(ArrowError::ExternalError(Box::new(e)))),
        }
    }
}

impl<R: Iterator<Item = std::result::Result<RecordBatch, ArrowError>>> RecordBatchReader
    for WithSchema<R>
{
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int32Array};
    use arrow_schema::{DataType, Fields};

    use super::*;

    #[test]
    fn names_with_nul_are_found_at_any_depth() {
        let int = |name: &str| Field::new(name, DataType::Int32, true);
        let nested = Field::new("s", DataType::Struct(vec![int("in\0ner")].into()), true);
        let list = Field::new("l", DataType::List(Arc::new(int("item\0"))), true);
        let plain = Fields::from(vec![int("a"), int("b")]);
        assert_eq!(name_with_nul(&plain), None);
        assert_eq!(
            name_with_nul(&Fields::from(vec![int("a"), nested])),
            Some("in\0ner")
        );
        assert_eq!(name_with_nul(&Fields::from(vec![list])), Some("item\0"));
        assert_eq!(name_with_nul(&Fields::from(vec![int("x\0")])), Some("x\0"));
    }

    #[test]
    fn a_table_to_write_with_a_nul_name_is_refused() {
        let col: ArrayRef = Arc::new(Int32Array::from(vec![1, 2]));
        let t = RecordBatch::try_from_iter([("ge\0ne", col)]).unwrap();
        let e = check_table(&t, 2).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
        assert!(e.message.contains("NUL byte"), "{e}");
    }
}
