//! Provisional ids of trace, cell and chromosome values, in order of first appearance;
//! their final codes (ranks of the sorted values) are known once every batch is seen.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, Int64Array, StringArray};
use arrow_schema::DataType;

use crate::chromdata::values;
use crate::error::{Error, Result};

/// Bytes of a hash map's table (keys, values, control bytes), not counting heap data the
/// entries own.
pub(crate) fn map_bytes<K, V, S>(m: &HashMap<K, V, S>) -> u64 {
    (m.capacity() * (std::mem::size_of::<(K, V)>() + 1)) as u64
}

/// Provisional ids of trace / cell / chromosome values, in order of first appearance.
#[derive(Debug, Default)]
pub(crate) struct IdMap {
    pub(crate) ints: Option<bool>,
    str_ids: HashMap<String, u32>,
    int_ids: HashMap<i64, u32>,
    pub(crate) strs: Vec<String>,
    pub(crate) int_vals: Vec<i64>,
    /// Bytes of the distinct strings (each is held twice: list and lookup).
    str_bytes: u64,
}

impl IdMap {
    /// Heap bytes held (estimate).
    pub(crate) fn heap_bytes(&self) -> u64 {
        map_bytes(&self.str_ids)
            + map_bytes(&self.int_ids)
            + (self.strs.capacity() * std::mem::size_of::<String>()) as u64
            + (self.int_vals.capacity() * 8) as u64
            + 2 * self.str_bytes
    }

    pub(crate) fn len(&self) -> usize {
        if self.ints == Some(true) {
            self.int_vals.len()
        } else {
            self.strs.len()
        }
    }

    /// Provisional ids of a non-null string or integer column.
    pub(crate) fn ids(&mut self, name: &str, a: &ArrayRef) -> Result<Vec<u32>> {
        let a = values::normalise_array(a)?;
        if a.null_count() > 0 {
            return Err(Error::invalid_argument(format!(
                "column \"{name}\" has {} null values; it must have none",
                a.null_count()
            )));
        }
        let ints = match a.data_type() {
            DataType::Utf8 => false,
            t if t.is_integer() => true,
            t => {
                return Err(Error::unsupported(format!(
                    "column \"{name}\": type {t} is not supported (strings or integers)"
                )))
            }
        };
        match self.ints {
            None => self.ints = Some(ints),
            Some(i) if i != ints => {
                return Err(Error::invalid_argument(format!(
                    "column \"{name}\": values are {} here but were {} in earlier batches",
                    if ints { "integers" } else { "strings" },
                    if i { "integers" } else { "strings" }
                )))
            }
            _ => {}
        }
        let mut out = Vec::with_capacity(a.len());
        if ints {
            for v in values::int_values(a.as_ref())? {
                let v = v.unwrap_or_default();
                let next = self.int_vals.len() as u32;
                let id = *self.int_ids.entry(v).or_insert_with(|| next);
                if id == next {
                    self.int_vals.push(v);
                }
                out.push(id);
            }
        } else {
            for v in a.as_string::<i32>().iter() {
                let v = v.unwrap_or_default();
                let id = match self.str_ids.get(v) {
                    Some(&id) => id,
                    None => {
                        let id = self.strs.len() as u32;
                        self.str_ids.insert(v.to_string(), id);
                        self.strs.push(v.to_string());
                        self.str_bytes += v.len() as u64;
                        id
                    }
                };
                out.push(id);
            }
        }
        Ok(out)
    }

    /// rank[prov id] = position of its value in sorted order (= final code once all are seen).
    pub(crate) fn ranks(&self) -> Vec<u32> {
        let mut order: Vec<u32> = (0..self.len() as u32).collect();
        if self.ints == Some(true) {
            order.sort_unstable_by_key(|&i| self.int_vals[i as usize]);
        } else {
            order.sort_unstable_by(|&a, &b| self.strs[a as usize].cmp(&self.strs[b as usize]));
        }
        let mut rank = vec![0u32; order.len()];
        for (r, &i) in order.iter().enumerate() {
            rank[i as usize] = r as u32;
        }
        rank
    }

    /// The sorted category values (utf8 or int64).
    pub(crate) fn sorted_values(&self) -> ArrayRef {
        if self.ints == Some(true) {
            let mut v = self.int_vals.clone();
            v.sort_unstable();
            Arc::new(Int64Array::from(v))
        } else {
            let mut v: Vec<&str> = self.strs.iter().map(String::as_str).collect();
            v.sort_unstable();
            Arc::new(StringArray::from(v))
        }
    }
}
