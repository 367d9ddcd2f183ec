//! Category lists fixed by the caller (§16: "trace_id / cell_id / other categoricals keep
//! their given category lists"): given with `set_categories`, or the dictionary of a
//! dictionary-typed column in the first appended batch (R factors, pandas categoricals).
//! Such a list keeps its order and its unused categories; a value outside it is refused.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, Int64Array};
use arrow_schema::DataType;

use crate::chromdata::values;
use crate::error::{Error, Result};

/// How a list was fixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListSource {
    /// `set_categories`: batches may give plain values or any dictionary over the list.
    Given,
    /// The first batch's dictionary: later batches carry the same dictionary.
    Dictionary,
}

/// A fixed category list: utf8 or int64 values, no nulls, no duplicates.
#[derive(Debug)]
pub(crate) struct CategoryList {
    pub(crate) values: ArrayRef,
    pub(crate) source: ListSource,
    str_codes: HashMap<String, u32>,
    int_codes: HashMap<i64, u32>,
}

/// The dictionary values of a dictionary-typed column (None for other columns).
pub(crate) fn dictionary_values(a: &ArrayRef) -> Option<ArrayRef> {
    match a.data_type() {
        DataType::Dictionary(_, _) => Some(a.as_any_dictionary().values().clone()),
        _ => None,
    }
}

impl CategoryList {
    /// A list from `values` (strings or integers); `column` names it in messages.
    /// Errors: `Unsupported` (another type), `InvalidArgument` (nulls, duplicates).
    pub(crate) fn new(column: &str, values: &ArrayRef, source: ListSource) -> Result<Self> {
        let v = values::normalise_array(values)?;
        if v.null_count() > 0 {
            return Err(Error::invalid_argument(format!(
                "categories of \"{column}\": {} null values (a category list has none)",
                v.null_count()
            )));
        }
        let mut str_codes = HashMap::new();
        let mut int_codes = HashMap::new();
        let v: ArrayRef = match v.data_type() {
            DataType::Utf8 => {
                for (i, s) in v.as_string::<i32>().iter().enumerate() {
                    let s = s.unwrap_or_default();
                    if str_codes.insert(s.to_string(), i as u32).is_some() {
                        return Err(duplicate(column, s));
                    }
                }
                v
            }
            t if t.is_integer() => {
                let ints: Vec<i64> = values::int_values(v.as_ref())?
                    .into_iter()
                    .map(|x| x.unwrap_or_default())
                    .collect();
                for (i, x) in ints.iter().enumerate() {
                    if int_codes.insert(*x, i as u32).is_some() {
                        return Err(duplicate(column, &x.to_string()));
                    }
                }
                Arc::new(Int64Array::from(ints))
            }
            t => {
                return Err(Error::unsupported(format!(
                    "categories of \"{column}\": type {t} is not supported (strings or integers)"
                )))
            }
        };
        Ok(CategoryList {
            values: v,
            source,
            str_codes,
            int_codes,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }

    pub(crate) fn is_int(&self) -> bool {
        self.values.data_type() == &DataType::Int64
    }

    /// Checks a batch's column against the list (no state change): a dictionary-fixed list
    /// needs the same dictionary; every non-null value must be a category.
    pub(crate) fn check(&self, column: &str, a: &ArrayRef) -> Result<()> {
        if self.source == ListSource::Dictionary {
            let same = dictionary_values(a).is_some_and(|d| {
                values::normalise_array(&d).is_ok_and(|d| {
                    d.to_data() == self.values.to_data() || same_ints(&d, &self.values)
                })
            });
            if !same {
                return Err(Error::invalid_argument(format!(
                    "column \"{column}\": the first batch's dictionary fixed the categories; \
                     this batch must carry the same dictionary"
                )));
            }
        }
        self.codes(column, a).map(|_| ())
    }

    /// The code of each value (None for nulls); a value that is not a category is
    /// `InvalidArgument` naming it.
    pub(crate) fn codes(&self, column: &str, a: &ArrayRef) -> Result<Vec<Option<u32>>> {
        let v = values::normalise_array(a)?;
        let missing = |x: &dyn std::fmt::Display| {
            Error::invalid_argument(format!(
                "column \"{column}\": value {x} is not among its {} categories",
                self.len()
            ))
        };
        match (v.data_type(), self.is_int()) {
            (DataType::Utf8, false) => v
                .as_string::<i32>()
                .iter()
                .map(|s| match s {
                    None => Ok(None),
                    Some(s) => self
                        .str_codes
                        .get(s)
                        .map(|&c| Some(c))
                        .ok_or_else(|| missing(&format!("\"{s}\""))),
                })
                .collect(),
            (t, true) if t.is_integer() => values::int_values(v.as_ref())?
                .into_iter()
                .map(|x| match x {
                    None => Ok(None),
                    Some(x) => self
                        .int_codes
                        .get(&x)
                        .map(|&c| Some(c))
                        .ok_or_else(|| missing(&x)),
                })
                .collect(),
            (t, _) => Err(Error::invalid_argument(format!(
                "column \"{column}\": values of type {t} do not match its {} categories",
                if self.is_int() { "integer" } else { "string" }
            ))),
        }
    }

    /// The list as the categories of a categorical value column.
    pub(crate) fn cats(&self) -> Arc<Cats> {
        let str_lookup = self
            .str_codes
            .iter()
            .map(|(k, &v)| (k.clone(), v as i32))
            .collect();
        let int_lookup = self
            .int_codes
            .iter()
            .map(|(&k, &v)| (k, v as i32))
            .collect();
        Arc::new(Cats {
            values: self.values.clone(),
            str_lookup,
            int_lookup,
        })
    }

    /// Heap bytes held (estimate).
    pub(crate) fn heap_bytes(&self) -> u64 {
        let strs: u64 = self.str_codes.keys().map(|k| 2 * k.len() as u64 + 40).sum();
        strs + 24 * self.int_codes.len() as u64
    }
}

fn duplicate(column: &str, v: &str) -> Error {
    Error::invalid_argument(format!(
        "categories of \"{column}\": \"{v}\" appears twice (categories are distinct)"
    ))
}

/// Integer dictionaries of different widths holding the same values.
fn same_ints(a: &ArrayRef, b: &ArrayRef) -> bool {
    match (
        values::int_values(a.as_ref()),
        values::int_values(b.as_ref()),
    ) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// Category list of a categorical column and the value → code lookup.
#[derive(Debug)]
pub(crate) struct Cats {
    /// utf8 or int64, in code order (sorted, or the given list).
    pub(crate) values: ArrayRef,
    pub(crate) str_lookup: HashMap<String, i32>,
    pub(crate) int_lookup: HashMap<i64, i32>,
}

impl Cats {
    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }
    pub(crate) fn code_type(&self) -> DataType {
        crate::chromdata::spec::CodeType::for_categories(self.len()).arrow()
    }
}
