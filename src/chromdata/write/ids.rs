//! Provisional ids of trace, cell and chromosome values, in order of first appearance;
//! their final codes (ranks of the sorted values) are known once every batch is seen —
//! unless the category list is fixed (given, or the first batch's dictionary): then the
//! ids are the codes of the list from the start.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, Int64Array, StringArray};
use arrow_schema::DataType;

use super::categories::{dictionary_values, CategoryList, ListSource};
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
    /// The fixed category list, if any (then ids are its codes).
    pub(crate) list: Option<CategoryList>,
}

impl IdMap {
    /// Heap bytes held (estimate).
    pub(crate) fn heap_bytes(&self) -> u64 {
        self.list.as_ref().map_or(0, CategoryList::heap_bytes)
            + map_bytes(&self.str_ids)
            + map_bytes(&self.int_ids)
            + (self.strs.capacity() * std::mem::size_of::<String>()) as u64
            + (self.int_vals.capacity() * 8) as u64
            + 2 * self.str_bytes
    }

    pub(crate) fn len(&self) -> usize {
        if let Some(l) = &self.list {
            return l.len();
        }
        if self.ints == Some(true) {
            self.int_vals.len()
        } else {
            self.strs.len()
        }
    }

    /// Fixes the category list (before any id was assigned).
    pub(crate) fn set_list(&mut self, list: CategoryList) {
        self.ints = Some(list.is_int());
        self.list = Some(list);
    }

    /// Checks a batch's column without changing anything: no nulls, strings or integers
    /// (as in earlier batches), and with a fixed list — or a dictionary that will fix it —
    /// values among the categories. Every error `ids` could give is given here.
    pub(crate) fn check(&self, name: &str, a: &ArrayRef) -> Result<()> {
        if a.null_count() > 0 || values::normalise_array(a)?.null_count() > 0 {
            return Err(Error::invalid_argument(format!(
                "column \"{name}\" has null values; it must have none"
            )));
        }
        if let Some(l) = &self.list {
            return l.check(name, a);
        }
        if let (Some(d), true) = (dictionary_values(a), self.len() == 0) {
            return CategoryList::new(name, &d, ListSource::Dictionary)?.check(name, a);
        }
        let t = values::normal_type(a.data_type());
        let ints = match t {
            DataType::Utf8 => false,
            ref t if t.is_integer() => true,
            t => {
                return Err(Error::unsupported(format!(
                    "column \"{name}\": type {t} is not supported (strings or integers)"
                )))
            }
        };
        if let Some(i) = self.ints.filter(|&i| i != ints) {
            return Err(Error::invalid_argument(format!(
                "column \"{name}\": values are {} here but were {} in earlier batches",
                if ints { "integers" } else { "strings" },
                if i { "integers" } else { "strings" }
            )));
        }
        Ok(())
    }

    /// Provisional ids of a non-null string or integer column (checked with `check`). A
    /// dictionary-typed first batch fixes the list.
    pub(crate) fn ids(&mut self, name: &str, a: &ArrayRef) -> Result<Vec<u32>> {
        self.check(name, a)?;
        if self.list.is_none() && self.len() == 0 {
            if let Some(d) = dictionary_values(a) {
                self.set_list(CategoryList::new(name, &d, ListSource::Dictionary)?);
            }
        }
        if let Some(l) = &self.list {
            return Ok(l
                .codes(name, a)?
                .into_iter()
                .map(Option::unwrap_or_default)
                .collect());
        }
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
        if self.list.is_some() {
            return (0..self.len() as u32).collect();
        }
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

    /// The category values (utf8 or int64): the fixed list, or the values sorted.
    pub(crate) fn sorted_values(&self) -> ArrayRef {
        if let Some(l) = &self.list {
            return l.values.clone();
        }
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
