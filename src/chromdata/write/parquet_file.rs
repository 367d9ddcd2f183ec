//! One Parquet file written in one piece, with the store's writer properties (zstd level 3,
//! no row-group cap, dictionary encoding off where asked); shared by the spot sinks and the
//! content components so that neither imports the other.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use arrow_array::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

use crate::error::{Error, ErrorKind, Result};

pub(crate) fn props(dict_off: &[String]) -> WriterProperties {
    let mut b = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap_or_default()))
        .set_max_row_group_row_count(None)
        .set_created_by("libdeltacells".to_string());
    for c in dict_off {
        b = b.set_column_dictionary_enabled(ColumnPath::from(c.as_str()), false);
    }
    b.build()
}

pub(crate) fn write_parquet(path: &Path, b: &RecordBatch) -> Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| Error::io(d, &e))?;
    }
    let err =
        |e: &dyn std::fmt::Display| Error::new(ErrorKind::Io, format!("{}: {e}", path.display()));
    let f = File::create(path).map_err(|e| Error::io(path, &e))?;
    let mut w =
        ArrowWriter::try_new(BufWriter::new(f), b.schema(), Some(props(&[]))).map_err(|e| {
            Error::unsupported(format!("{}: cannot store this table: {e}", path.display()))
        })?;
    if b.num_rows() > 0 {
        w.write(b).map_err(|e| err(&e))?;
    }
    w.close().map_err(|e| err(&e))?;
    Ok(())
}
