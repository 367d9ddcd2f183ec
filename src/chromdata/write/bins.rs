//! The bins of a write (§5.1): a table given with `set_bins` (spots then name a bin by
//! `bin_id` or by its locus), or bins derived from the loci of the spots, numbered in
//! (chromosome, start, end) order at `finish`.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};

use super::ids::{map_bytes, IdMap};
use crate::chromdata::values;
use crate::error::{Error, ErrorKind, Result};

/// Bins given with `set_bins`.
#[derive(Debug)]
pub(crate) struct GivenBins {
    /// The bins table as stored (chrom as dictionary, start / end int64, extras).
    pub(crate) table: RecordBatch,
    pub(crate) chrom_names: Vec<String>,
    pub(crate) chrom_of_bin: Vec<i32>,
    /// rank[bin] in (chrom code, bin id) order.
    rank: Vec<u32>,
    lookup: Option<HashMap<(i32, i64, i64), u32>>,
    chrom_lookup: HashMap<String, i32>,
}

/// Bins derived from the loci seen.
#[derive(Debug, Default)]
pub(crate) struct DerivedBins {
    chroms: IdMap,
    loci: HashMap<(u32, i64, i64), u32>,
    list: Vec<(u32, i64, i64)>,
}

pub(crate) type ColFn<'a> = dyn Fn(&str) -> Option<ArrayRef> + 'a;

/// chrom (utf8), start, end (int64) of the loci columns.
fn loci(col: &ColFn<'_>) -> Result<(ArrayRef, Vec<i64>, Vec<i64>)> {
    let get = |n: &str| {
        col(n).ok_or_else(|| {
            Error::invalid_argument(format!(
                "the batch has no {n} column (loci are chrom, start, end, or bin_id with set_bins)"
            ))
        })
    };
    let c = values::normalise_array(&get("chrom")?)?;
    if c.data_type() != &DataType::Utf8 {
        return Err(Error::invalid_argument(format!(
            "chrom must be strings, got {}",
            c.data_type()
        )));
    }
    let ints = |n: &str| -> Result<Vec<i64>> {
        let a = get(n)?;
        let v = values::int_values(a.as_ref())
            .map_err(|_| Error::invalid_argument(format!("{n} must be integers")))?;
        v.into_iter()
            .enumerate()
            .map(|(r, x)| x.ok_or_else(|| Error::invalid_argument(format!("row {r}: {n} is null"))))
            .collect()
    };
    if c.null_count() > 0 {
        return Err(Error::invalid_argument("chrom has null values"));
    }
    Ok((c, ints("start")?, ints("end")?))
}

impl GivenBins {
    fn lookup_loci(&mut self, c: &ArrayRef, s: &[i64], e: &[i64]) -> Result<Vec<u32>> {
        if self.lookup.is_none() {
            let st = self.table.column(1).as_primitive::<Int64Type>();
            let en = self.table.column(2).as_primitive::<Int64Type>();
            let mut m = HashMap::with_capacity(st.len());
            for b in 0..st.len() {
                m.entry((self.chrom_of_bin[b], st.value(b), en.value(b)))
                    .or_insert(b as u32);
            }
            self.lookup = Some(m);
        }
        let m = self.lookup.as_ref().unwrap_or_else(|| unreachable!());
        let names = c.as_string::<i32>();
        (0..s.len())
            .map(|r| {
                let name = names.value(r);
                self.chrom_lookup
                    .get(name)
                    .and_then(|&ch| m.get(&(ch, s[r], e[r])))
                    .copied()
                    .ok_or_else(|| {
                        Error::invalid_argument(format!(
                            "row {r}: locus {name}:{}-{} is not a bin of the bins table",
                            s[r], e[r]
                        ))
                    })
            })
            .collect()
    }
}

/// The stored bins table: chrom as a dictionary column over the chromosome names.
pub(crate) fn bins_batch(
    names: &[String],
    chrom_of: &[i32],
    starts: Vec<i64>,
    ends: Vec<i64>,
    extras: Vec<(Field, ArrayRef)>,
) -> Result<RecordBatch> {
    let values = Arc::new(StringArray::from_iter_values(names.iter()));
    let keys = Int32Array::from(chrom_of.to_vec());
    let dict = arrow_array::DictionaryArray::<arrow_array::types::Int32Type>::try_new(keys, values)
        .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
    let mut fields = vec![
        Field::new("chrom", dict.data_type().clone(), true),
        Field::new("start", DataType::Int64, true),
        Field::new("end", DataType::Int64, true),
    ];
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(dict),
        Arc::new(Int64Array::from(starts)),
        Arc::new(Int64Array::from(ends)),
    ];
    for (f, a) in extras {
        fields.push(f);
        cols.push(a);
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)
        .map_err(|e| Error::invalid_argument(format!("bins: {e}")))
}

pub(crate) fn given_bins(b: RecordBatch) -> Result<GivenBins> {
    let s = b.schema();
    let get = |n: &str, i: usize| -> Result<ArrayRef> {
        match s.fields().get(i) {
            Some(f) if f.name() == n => Ok(b.column(i).clone()),
            _ => Err(Error::invalid_argument(format!(
                "bins: column {i} must be \"{n}\" (bins are chrom, start, end, ...)"
            ))),
        }
    };
    let chrom = get("chrom", 0)?;
    let nb = b.num_rows();
    if nb as u64 > i32::MAX as u64 {
        return Err(Error::limit("bins: more than 2^31-1 bins"));
    }
    let (names, codes): (Vec<String>, Vec<i32>) = match chrom.data_type() {
        DataType::Dictionary(_, v) if matches!(**v, DataType::Utf8 | DataType::LargeUtf8) => {
            let d = chrom.as_any_dictionary();
            let vals = values::normalise_array(d.values())?;
            let vals = vals.as_string::<i32>();
            if vals.null_count() > 0 {
                return Err(Error::invalid_argument("bins: chrom dictionary has nulls"));
            }
            let names: Vec<String> = vals.iter().map(|v| v.unwrap_or("").to_string()).collect();
            let uniq: std::collections::HashSet<&String> = names.iter().collect();
            if uniq.len() != names.len() {
                return Err(Error::invalid_argument(
                    "bins: chrom dictionary has duplicate values",
                ));
            }
            let keys = values::int_values(d.keys())?;
            let codes = keys
                .into_iter()
                .enumerate()
                .map(|(r, k)| {
                    k.map(|k| k as i32).ok_or_else(|| {
                        Error::invalid_argument(format!("bins row {r}: chrom is null"))
                    })
                })
                .collect::<Result<_>>()?;
            (names, codes)
        }
        _ => {
            let c = values::normalise_array(&chrom)?;
            if c.data_type() != &DataType::Utf8 {
                return Err(Error::invalid_argument(format!(
                    "bins: chrom must be strings, got {}",
                    c.data_type()
                )));
            }
            if c.null_count() > 0 {
                return Err(Error::invalid_argument("bins: chrom has nulls"));
            }
            let c = c.as_string::<i32>();
            let mut names: Vec<String> = c.iter().map(|v| v.unwrap_or("").to_string()).collect();
            names.sort_unstable();
            names.dedup();
            let lookup: HashMap<&str, i32> = names
                .iter()
                .enumerate()
                .map(|(i, s)| (s.as_str(), i as i32))
                .collect();
            let codes = c.iter().map(|v| lookup[v.unwrap_or("")]).collect();
            (names, codes)
        }
    };
    let ints = |n: &str, i: usize| -> Result<Vec<i64>> {
        let a = get(n, i)?;
        let v = values::int_values(a.as_ref())
            .map_err(|_| Error::invalid_argument(format!("bins: {n} must be integers")))?;
        v.into_iter()
            .enumerate()
            .map(|(r, x)| {
                x.ok_or_else(|| Error::invalid_argument(format!("bins row {r}: {n} is null")))
            })
            .collect()
    };
    let starts = ints("start", 1)?;
    let ends = ints("end", 2)?;
    let mut extras = Vec::new();
    for i in 3..s.fields().len() {
        let f = s.field(i);
        let a = values::normalise_array(b.column(i))?;
        match a.data_type() {
            DataType::Boolean | DataType::Float32 | DataType::Float64 | DataType::Utf8 => {}
            t if t.is_integer() => {}
            t => {
                return Err(Error::unsupported(format!(
                "bins column \"{}\": type {t} is not supported (bool, integers, floats, strings)",
                f.name()
            )))
            }
        }
        if ["chrom", "start", "end"].contains(&f.name().as_str()) {
            return Err(Error::invalid_argument(format!(
                "bins: column \"{}\" appears twice",
                f.name()
            )));
        }
        extras.push((Field::new(f.name(), a.data_type().clone(), true), a));
    }
    let chrom_lookup = names
        .iter()
        .enumerate()
        .map(|(i, s)| (s.clone(), i as i32))
        .collect();
    let mut order: Vec<u32> = (0..nb as u32).collect();
    order.sort_unstable_by_key(|&i| (codes[i as usize], i));
    let mut rank = vec![0u32; nb];
    for (r, &i) in order.iter().enumerate() {
        rank[i as usize] = r as u32;
    }
    let table = bins_batch(&names, &codes, starts, ends, extras)?;
    Ok(GivenBins {
        table,
        chrom_names: names,
        chrom_of_bin: codes,
        rank,
        lookup: None,
        chrom_lookup,
    })
}

/// The bins of a write: given, or derived from the loci seen.
#[derive(Debug)]
pub(crate) enum Bins {
    Given(GivenBins),
    Derived(DerivedBins),
}

impl Default for Bins {
    fn default() -> Self {
        Bins::Derived(DerivedBins::default())
    }
}

/// The bins as stored, fixed at `finish`.
pub(crate) struct FinalBins {
    /// The bins table (chrom as a dictionary, start, end, extra columns).
    pub(crate) table: RecordBatch,
    pub(crate) chrom_names: Vec<String>,
    /// Chrom code of every final bin.
    pub(crate) chrom_of_bin: Vec<i32>,
    /// Provisional → final bin id (None: bins were given, ids are final).
    pub(crate) bin_final: Option<Vec<u32>>,
    /// Chrom code of each provisional chromosome id.
    pub(crate) chrom_code_of_id: Vec<i32>,
}

/// Rank of each derived locus in (chrom rank, start, end) order, and the loci in that order.
fn locus_order(d: &DerivedBins, chrom_rank: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let mut order: Vec<u32> = (0..d.list.len() as u32).collect();
    order.sort_unstable_by_key(|&i| {
        let (c, s, e) = d.list[i as usize];
        (chrom_rank[c as usize], s, e)
    });
    let mut rank = vec![0u32; order.len()];
    for (r, &i) in order.iter().enumerate() {
        rank[i as usize] = r as u32;
    }
    (rank, order)
}

impl Bins {
    /// Number of given bins (None when bins are derived).
    pub(crate) fn n_given(&self) -> Option<usize> {
        match self {
            Bins::Given(g) => Some(g.chrom_of_bin.len()),
            Bins::Derived(_) => None,
        }
    }

    /// Provisional bin id of each row of a batch (`col` finds its columns by name).
    pub(crate) fn ids(&mut self, col: &ColFn<'_>, n: usize) -> Result<Vec<u32>> {
        match self {
            Bins::Given(g) => {
                if let Some(b) = col("bin_id") {
                    let v = values::int_values(b.as_ref())
                        .map_err(|e| Error::invalid_argument(format!("bin_id: {}", e.message)))?;
                    let nb = g.chrom_of_bin.len() as i64;
                    v.iter()
                        .enumerate()
                        .map(|(r, x)| match x {
                            Some(x) if (0..nb).contains(x) => Ok(*x as u32),
                            Some(x) => Err(Error::invalid_argument(format!(
                                "row {r}: bin_id {x} is not a bin (there are {nb})"
                            ))),
                            None => {
                                Err(Error::invalid_argument(format!("row {r}: bin_id is null")))
                            }
                        })
                        .collect()
                } else {
                    let (c, s, e) = loci(col)?;
                    g.lookup_loci(&c, &s, &e)
                }
            }
            Bins::Derived(d) => {
                if col("bin_id").is_some() {
                    return Err(Error::invalid_argument(
                        "bin_id given but no bins were set (set_bins), give chrom / start / end",
                    ));
                }
                let (c, s, e) = loci(col)?;
                let cids = d.chroms.ids("chrom", &c)?;
                let mut out = Vec::with_capacity(n);
                for r in 0..n {
                    let key = (cids[r], s[r], e[r]);
                    let next = d.list.len() as u32;
                    let id = *d.loci.entry(key).or_insert(next);
                    if id == next {
                        d.list.push(key);
                    }
                    out.push(id);
                }
                Ok(out)
            }
        }
    }

    /// Provisional chromosome id of provisional bin `b`.
    pub(crate) fn chrom_id(&self, b: u32) -> u32 {
        match self {
            Bins::Given(g) => g.chrom_of_bin[b as usize] as u32,
            Bins::Derived(d) => d.list[b as usize].0,
        }
    }

    /// Rank of each provisional bin in (chrom, bin) order, and its chromosome's rank.
    pub(crate) fn ranks(&self) -> (Vec<u32>, Vec<u32>) {
        match self {
            Bins::Given(g) => (
                g.rank.clone(),
                g.chrom_of_bin.iter().map(|&c| c as u32).collect(),
            ),
            Bins::Derived(d) => {
                let cr = d.chroms.ranks();
                let (rank, _) = locus_order(d, &cr);
                let chrom = d.list.iter().map(|&(c, _, _)| cr[c as usize]).collect();
                (rank, chrom)
            }
        }
    }

    /// Heap bytes held (estimate; derived bins count what `finish` will build from them).
    pub(crate) fn heap_bytes(&self) -> u64 {
        match self {
            Bins::Given(g) => {
                g.table.get_array_memory_size() as u64
                    + g.lookup.as_ref().map_or(0, map_bytes)
                    + map_bytes(&g.chrom_lookup)
                    + 8 * g.rank.capacity() as u64
            }
            Bins::Derived(d) => {
                d.chroms.heap_bytes()
                    + map_bytes(&d.loci)
                    + (d.list.capacity() * std::mem::size_of::<(u32, i64, i64)>()) as u64
                    // bin_final, ranks and the bins table at finish
                    + 40 * d.list.len() as u64
            }
        }
    }

    /// Fixes the bins: given bins as they are (released from `self`), derived bins numbered
    /// in (chromosome, start, end) order.
    pub(crate) fn finalize(&mut self) -> Result<FinalBins> {
        if let Bins::Given(_) = self {
            let Bins::Given(g) = std::mem::take(self) else {
                return Err(Error::new(ErrorKind::Internal, "bins changed"));
            };
            let chrom_code_of_id = (0..g.chrom_names.len() as i32).collect();
            return Ok(FinalBins {
                table: g.table,
                chrom_names: g.chrom_names,
                chrom_of_bin: g.chrom_of_bin,
                bin_final: None,
                chrom_code_of_id,
            });
        }
        let Bins::Derived(d) = self else {
            return Err(Error::new(ErrorKind::Internal, "bins changed"));
        };
        let cr = d.chroms.ranks();
        let (fin, order) = locus_order(d, &cr);
        let mut names: Vec<String> = d.chroms.strs.clone();
        names.sort_unstable();
        let chrom_of: Vec<i32> = order
            .iter()
            .map(|&i| cr[d.list[i as usize].0 as usize] as i32)
            .collect();
        let starts: Vec<i64> = order.iter().map(|&i| d.list[i as usize].1).collect();
        let ends: Vec<i64> = order.iter().map(|&i| d.list[i as usize].2).collect();
        let table = bins_batch(&names, &chrom_of, starts, ends, vec![])?;
        Ok(FinalBins {
            table,
            chrom_names: names,
            chrom_of_bin: chrom_of,
            bin_final: Some(fin),
            chrom_code_of_id: cr.into_iter().map(|r| r as i32).collect(),
        })
    }
}
