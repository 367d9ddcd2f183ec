//! Obs and var tables as Arrow record batches, and where they reach the dataset writer.
//!
//! Conventions (the same for every input):
//! * the first column of each table is the pandas index (cell barcodes / obs names, gene
//!   names / var names); its name is recorded in the schema metadata under `INDEX_KEY`
//!   (`"_index"` unless the input named it, as AnnData does);
//! * the var table is in *input* gene order (the writer applies the gene order);
//! * the obs table has one row per cell, in cell order.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};

use crate::dataset::DatasetWriter;
use crate::error::{Error, Result};

/// Schema metadata key naming the index column.
pub const INDEX_KEY: &str = "deltacells.index";
/// Index column name when the input does not name it (AnnData's own default).
pub const DEFAULT_INDEX: &str = "_index";

/// The obs and var tables of an input, when it has them.
#[derive(Debug, Clone, Default)]
pub struct Tables {
    /// One row per gene, input gene order.
    pub var: Option<RecordBatch>,
    /// One row per cell.
    pub obs: Option<RecordBatch>,
}

/// Builds a record batch whose first column is the index.
pub fn batch_with_index(
    index_name: &str,
    index: Vec<String>,
    columns: Vec<(String, ArrayRef)>,
    what: &str,
) -> Result<RecordBatch> {
    let mut fields = vec![Field::new(index_name, DataType::Utf8, false)];
    let mut arrays: Vec<ArrayRef> = vec![Arc::new(StringArray::from(index))];
    let mut seen: HashSet<String> = HashSet::from([index_name.to_string()]);
    for (name, a) in columns {
        if !seen.insert(name.clone()) {
            return Err(Error::format(format!(
                "{what}: column name '{name}' appears twice (or equals the index name)"
            )));
        }
        fields.push(Field::new(name, a.data_type().clone(), a.null_count() > 0));
        arrays.push(a);
    }
    let meta = HashMap::from([(INDEX_KEY.to_string(), index_name.to_string())]);
    let schema = Arc::new(Schema::new(fields).with_metadata(meta));
    RecordBatch::try_new(schema, arrays)
        .map_err(|e| Error::format(format!("{what}: cannot build the table: {e}")))
}

/// How var names were chosen from a 10x features file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarNamesFrom {
    /// Column 2 (gene symbols), unique in this file.
    Names,
    /// Column 1 (gene ids), because the names repeat.
    Ids,
    /// Names made unique by suffixes `-1`, `-2`, ... (neither column was unique).
    NamesMadeUnique,
}

impl VarNamesFrom {
    pub fn describe(self) -> &'static str {
        match self {
            VarNamesFrom::Names => "gene names (features column 2)",
            VarNamesFrom::Ids => "gene ids (features column 1; the names repeat)",
            VarNamesFrom::NamesMadeUnique => {
                "gene names made unique with -1, -2 suffixes (names and ids both repeat)"
            }
        }
    }
}

fn all_unique(v: &[String]) -> bool {
    let mut s = HashSet::with_capacity(v.len());
    v.iter().all(|x| s.insert(x.as_str()))
}

/// AnnData's `var_names_make_unique`: the second occurrence of "X" becomes "X-1", the third
/// "X-2", ..., skipping suffixed names that already exist.
pub fn make_unique(names: &[String]) -> Vec<String> {
    let mut taken: HashSet<String> = names.iter().cloned().collect();
    let mut count: HashMap<&str, usize> = HashMap::new();
    let mut first_seen: HashSet<&str> = HashSet::new();
    let mut out = Vec::with_capacity(names.len());
    for n in names {
        if first_seen.insert(n.as_str()) {
            out.push(n.clone());
            continue;
        }
        let k = count.entry(n.as_str()).or_insert(0);
        loop {
            *k += 1;
            let cand = format!("{n}-{k}");
            if taken.insert(cand.clone()) {
                out.push(cand);
                break;
            }
        }
    }
    out
}

/// The var names, var table and obs table of a 10x folder, from the lines of its features
/// (or genes) file and barcodes file. Var names: column 2 if unique, else column 1 (the
/// Ensembl ids, unique in Cell Ranger output), else column 2 made unique.
pub fn tenx_tables(
    features_path: &Path,
    features: &[String],
    barcodes_path: &Path,
    barcodes: &[String],
    n_genes: u32,
    n_cells: u64,
) -> Result<(Vec<String>, VarNamesFrom, Tables)> {
    if features.len() != n_genes as usize {
        return Err(Error::format(format!(
            "{}: {} lines, the matrix has {n_genes} genes (one line per gene)",
            features_path.display(),
            features.len()
        )));
    }
    if barcodes.len() as u64 != n_cells {
        return Err(Error::format(format!(
            "{}: {} lines, the matrix has {n_cells} cells (one line per cell)",
            barcodes_path.display(),
            barcodes.len()
        )));
    }
    let mut ids = Vec::with_capacity(features.len());
    let mut names = Vec::with_capacity(features.len());
    let mut types = Vec::with_capacity(features.len());
    let mut width = None;
    for (i, line) in features.iter().enumerate() {
        let f: Vec<&str> = line.split('\t').collect();
        let w = *width.get_or_insert(f.len());
        if f.len() != w || f[0].is_empty() {
            return Err(Error::format(format!(
                "{}:{}: {} tab-separated fields, expected {w} like line 1 (id, name, type)",
                features_path.display(),
                i + 1,
                f.len()
            )));
        }
        ids.push(f[0].to_string());
        names.push(f.get(1).unwrap_or(&f[0]).to_string());
        if let Some(t) = f.get(2) {
            types.push(t.to_string());
        }
    }
    let (var_names, from) = if all_unique(&names) {
        (names.clone(), VarNamesFrom::Names)
    } else if all_unique(&ids) {
        (ids.clone(), VarNamesFrom::Ids)
    } else {
        (make_unique(&names), VarNamesFrom::NamesMadeUnique)
    };
    let mut var_cols: Vec<(String, ArrayRef)> =
        vec![("gene_ids".into(), Arc::new(StringArray::from(ids)))];
    if width.unwrap_or(1) >= 2 {
        var_cols.push(("gene_symbols".into(), Arc::new(StringArray::from(names))));
    }
    if !types.is_empty() {
        var_cols.push(("feature_types".into(), Arc::new(StringArray::from(types))));
    }
    let var = batch_with_index(
        DEFAULT_INDEX,
        var_names.clone(),
        var_cols,
        &features_path.display().to_string(),
    )?;
    // Barcodes: the first field is the obs name; further tab-separated fields (rare) are
    // kept as string columns barcode_field_2, ...
    let mut obs_names = Vec::with_capacity(barcodes.len());
    let mut extra: Vec<Vec<String>> = Vec::new();
    let mut bwidth = None;
    for (i, line) in barcodes.iter().enumerate() {
        let f: Vec<&str> = line.split('\t').collect();
        let w = *bwidth.get_or_insert(f.len());
        if f.len() != w || f[0].is_empty() {
            return Err(Error::format(format!(
                "{}:{}: {} tab-separated fields with an empty barcode or unlike line 1 ({w})",
                barcodes_path.display(),
                i + 1,
                f.len()
            )));
        }
        obs_names.push(f[0].to_string());
        if extra.len() < w - 1 {
            extra.resize(w - 1, Vec::new());
        }
        for (k, x) in f[1..].iter().enumerate() {
            extra[k].push(x.to_string());
        }
    }
    let obs_cols = extra
        .into_iter()
        .enumerate()
        .map(|(k, v)| {
            (
                format!("barcode_field_{}", k + 2),
                Arc::new(StringArray::from(v)) as ArrayRef,
            )
        })
        .collect();
    let obs = batch_with_index(
        DEFAULT_INDEX,
        obs_names,
        obs_cols,
        &barcodes_path.display().to_string(),
    )?;
    Ok((
        var_names,
        from,
        Tables {
            var: Some(var),
            obs: Some(obs),
        },
    ))
}

/// Hands the tables to the writer: one `set_var_table` call (input gene order) and one
/// `append_obs` call (all cells, after the last `append_csr`). Returns whether anything was
/// stored.
pub fn attach_tables(writer: &mut DatasetWriter, tables: Tables) -> Result<bool> {
    let mut stored = false;
    if let Some(var) = tables.var {
        writer.set_var_table(var)?;
        stored = true;
    }
    if let Some(obs) = tables.obs {
        writer.append_obs(obs)?;
        stored = true;
    }
    Ok(stored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn make_unique_like_anndata() {
        let v: Vec<String> = ["a", "b", "a", "a", "a-1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(make_unique(&v), vec!["a", "b", "a-2", "a-3", "a-1"]);
    }

    #[test]
    fn tenx_names_fall_back_to_ids() {
        let f: Vec<String> = vec!["ENSG1\tA\tGene Expression".into(), "ENSG2\tA\tGE".into()];
        let b: Vec<String> = vec!["AAAC-1".into()];
        let (names, from, t) = tenx_tables(Path::new("f"), &f, Path::new("b"), &b, 2, 1).unwrap();
        assert_eq!(names, vec!["ENSG1", "ENSG2"]);
        assert_eq!(from, VarNamesFrom::Ids);
        let var = t.var.unwrap();
        assert_eq!(var.num_rows(), 2);
        assert_eq!(var.schema().field(0).name(), "_index");
        assert_eq!(var.num_columns(), 4);
        assert_eq!(t.obs.unwrap().num_rows(), 1);
        let e = tenx_tables(Path::new("f"), &f, Path::new("b"), &b, 3, 1).unwrap_err();
        assert!(e.message.contains("2 lines, the matrix has 3 genes"));
    }
}
