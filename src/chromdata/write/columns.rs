//! Column handling of the streaming writer: input Arrow columns are normalised into a
//! small set of *spill* types (bool, int64, float32, float64, utf8), their types unified
//! over all appended batches (spec §16), and converted at `finish` into the stored types
//! (categorical codes, narrow integers, ...). Also the exact derived-column detection of
//! §10.3 (values compared bitwise per bin / cell / trace code).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int64Type};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Float32Array, Float64Array, Int16Array, Int32Array, Int64Array,
    Int8Array, StringArray, UInt16Array, UInt32Array, UInt64Array, UInt8Array,
};
use arrow_schema::DataType;

use super::categories::{CategoryList, Cats};
use crate::chromdata::spec::ValueType;
use crate::chromdata::values;
use crate::error::{Error, Result};

/// Largest number of categories stored with int16 codes (§4.4).
pub(crate) const INT16_CODES_MAX: usize = 32767;
/// A plain string column becomes categorical when it has at most this many distinct values
/// (and at most one distinct value per two non-null values).
pub(crate) const STRING_CATEGORICAL_MAX: usize = 32767;

/// Where a value column goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Group {
    /// An extra spot column (`spots.columns`).
    Extra,
    /// `spot_tracks/<name>`.
    Track(String),
    /// `layers/<key>/<axis>`: layer index, axis 0..3.
    Layer(usize, usize),
}

/// The unified kind of a column over the batches seen so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    Bool,
    /// Integers; the Arrow type to store (the common type of all batches).
    Int(DataType),
    F32,
    F64,
    /// Plain strings (categorical if few distinct values).
    Str,
    /// Dictionary-encoded strings: categorical.
    DictStr,
    /// Dictionary-encoded integers: categorical with int64 categories.
    DictInt,
}

fn is_str(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// The kind of one input column, or an error for unsupported types.
pub(crate) fn kind_of(name: &str, t: &DataType) -> Result<Kind> {
    Ok(match t {
        DataType::Boolean => Kind::Bool,
        t if t.is_integer() => Kind::Int(t.clone()),
        DataType::Float32 => Kind::F32,
        DataType::Float64 => Kind::F64,
        t if is_str(t) => Kind::Str,
        DataType::Dictionary(_, v) if is_str(v) => Kind::DictStr,
        DataType::Dictionary(_, v) if v.is_integer() => Kind::DictInt,
        t => {
            return Err(Error::unsupported(format!(
                "column \"{name}\": type {t} is not supported (bool, integers, float32, float64, \
                 strings or dictionaries of strings / integers)"
            )))
        }
    })
}

fn int_width(t: &DataType) -> (bool, u32) {
    match t {
        DataType::Int8 => (true, 8),
        DataType::Int16 => (true, 16),
        DataType::Int32 => (true, 32),
        DataType::Int64 => (true, 64),
        DataType::UInt8 => (false, 8),
        DataType::UInt16 => (false, 16),
        DataType::UInt32 => (false, 32),
        _ => (false, 64),
    }
}

fn unify_int(a: &DataType, b: &DataType) -> DataType {
    if a == b {
        return a.clone();
    }
    let ((sa, wa), (sb, wb)) = (int_width(a), int_width(b));
    if sa == sb {
        return if wa >= wb { a.clone() } else { b.clone() };
    }
    // Signed and unsigned: the signed type wide enough for both (int64 at most).
    let (uw, sw) = if sa { (wb, wa) } else { (wa, wb) };
    match sw.max(uw * 2) {
        16 => DataType::Int16,
        32 => DataType::Int32,
        _ => DataType::Int64,
    }
}

/// Unifies the kinds of two batches of the same column (§16).
pub(crate) fn unify(name: &str, a: &Kind, b: &Kind) -> Result<Kind> {
    use Kind::*;
    Ok(match (a, b) {
        (x, y) if x == y => x.clone(),
        (Int(x), Int(y)) => Int(unify_int(x, y)),
        (Int(_) | F32 | F64, Int(_) | F32 | F64) => F64,
        (Str | DictStr, Str | DictStr) => DictStr,
        (DictInt, Int(_)) | (Int(_), DictInt) => DictInt,
        _ => {
            return Err(Error::invalid_argument(format!(
                "column \"{name}\": type changes between batches ({a:?} then {b:?}) in a way \
                 that cannot be unified"
            )))
        }
    })
}

/// Normalises an input column to its spill type: bool, int64, float32, float64 or utf8.
pub(crate) fn to_spill(name: &str, a: &ArrayRef) -> Result<ArrayRef> {
    let a = values::normalise_array(a)?;
    Ok(match a.data_type() {
        DataType::Boolean | DataType::Float32 | DataType::Float64 | DataType::Utf8 => a,
        DataType::Int64 => a,
        DataType::UInt64 => {
            let v = a.as_primitive::<arrow_array::types::UInt64Type>();
            if v.iter().flatten().any(|x| x > i64::MAX as u64) {
                return Err(Error::unsupported(format!(
                    "column \"{name}\": uint64 values above 2^63-1 are not supported"
                )));
            }
            Arc::new(Int64Array::from(values::int_values(a.as_ref())?))
        }
        t if t.is_integer() => Arc::new(Int64Array::from(values::int_values(a.as_ref())?)),
        t => {
            return Err(Error::unsupported(format!(
                "column \"{name}\": type {t} is not supported"
            )))
        }
    })
}

/// One value of a derived-detection slot.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Slot {
    Empty,
    Null,
    B(bool),
    I(i64),
    /// Bits of the value as float64 (float32 values are widened first).
    F(u64),
    S(Box<str>),
}

/// Compares `a[i]` (a spill array) with a slot, bitwise for floats.
fn slot_eq(a: &dyn Array, i: usize, s: &Slot) -> bool {
    if a.is_null(i) {
        return *s == Slot::Null;
    }
    match (a.data_type(), s) {
        (DataType::Boolean, Slot::B(v)) => a.as_boolean().value(i) == *v,
        (DataType::Int64, Slot::I(v)) => a.as_primitive::<Int64Type>().value(i) == *v,
        (DataType::Float64, Slot::F(v)) => a.as_primitive::<Float64Type>().value(i).to_bits() == *v,
        (DataType::Float32, Slot::F(v)) => {
            (a.as_primitive::<Float32Type>().value(i) as f64).to_bits() == *v
        }
        (DataType::Utf8, Slot::S(v)) => a.as_string::<i32>().value(i) == v.as_ref(),
        _ => false,
    }
}

fn slot_of(a: &dyn Array, i: usize) -> Slot {
    if a.is_null(i) {
        return Slot::Null;
    }
    match a.data_type() {
        DataType::Boolean => Slot::B(a.as_boolean().value(i)),
        DataType::Int64 => Slot::I(a.as_primitive::<Int64Type>().value(i)),
        DataType::Float64 => Slot::F(a.as_primitive::<Float64Type>().value(i).to_bits()),
        DataType::Float32 => Slot::F((a.as_primitive::<Float32Type>().value(i) as f64).to_bits()),
        DataType::Utf8 => Slot::S(a.as_string::<i32>().value(i).into()),
        _ => Slot::Null,
    }
}

/// Derived-column detection for one key: slot per provisional code, or None once some
/// code was seen with two different values.
#[derive(Debug, Default)]
pub(crate) struct Detect {
    pub(crate) slots: Option<Vec<Slot>>,
}

impl Detect {
    pub(crate) fn new() -> Self {
        Detect {
            slots: Some(Vec::new()),
        }
    }

    /// Feeds a spill array with the provisional code of each row.
    pub(crate) fn feed(&mut self, a: &dyn Array, codes: &[u32]) {
        let Some(slots) = self.slots.as_mut() else {
            return;
        };
        for (i, &c) in codes.iter().enumerate() {
            let c = c as usize;
            if c >= slots.len() {
                slots.resize(c + 1, Slot::Empty);
            }
            if slots[c] == Slot::Empty {
                slots[c] = slot_of(a, i);
            } else if !slot_eq(a, i, &slots[c]) {
                self.slots = None;
                return;
            }
        }
    }
}

/// Everything the writer tracks about one value column.
#[derive(Debug)]
pub(crate) struct ColState {
    pub(crate) name: String,
    pub(crate) group: Group,
    pub(crate) kind: Kind,
    pub(crate) has_null: bool,
    pub(crate) n_nonnull: u64,
    /// Distinct strings (Str / DictStr), None once more than can be categorical.
    pub(crate) distinct_str: Option<HashSet<String>>,
    pub(crate) distinct_int: BTreeSet<i64>,
    /// Bytes of the strings in `distinct_str`.
    pub(crate) distinct_str_bytes: u64,
    /// Bytes of all non-null string values (for row-size estimates).
    pub(crate) str_value_bytes: u64,
    /// Derived detection per key: bin, cell, trace (extras only).
    pub(crate) detect: [Detect; 3],
    /// The fixed category list (given, or the first batch's dictionary): the column is
    /// categorical with exactly these categories.
    pub(crate) list: Option<Arc<CategoryList>>,
    /// Plain strings stay strings (never made categorical): set for columns a store being
    /// rewritten stores as strings.
    pub(crate) plain: bool,
}

impl ColState {
    pub(crate) fn new(name: &str, group: Group, kind: Kind) -> Self {
        let extra = group == Group::Extra;
        let d = || {
            if extra {
                Detect::new()
            } else {
                Detect::default()
            }
        };
        ColState {
            name: name.to_string(),
            group,
            kind,
            has_null: false,
            n_nonnull: 0,
            distinct_str: Some(HashSet::new()),
            distinct_int: BTreeSet::new(),
            distinct_str_bytes: 0,
            str_value_bytes: 0,
            detect: [d(), d(), d()],
            list: None,
            plain: false,
        }
    }

    /// Heap bytes held by the distinct-value sets and detection slots (estimate: strings
    /// inside slots are not counted).
    pub(crate) fn heap_bytes(&self) -> u64 {
        let strs = self.distinct_str.as_ref().map_or(0, |s| {
            (s.capacity() * (std::mem::size_of::<String>() + 1)) as u64 + self.distinct_str_bytes
        });
        let slots: u64 = self
            .detect
            .iter()
            .map(|d| {
                d.slots
                    .as_ref()
                    .map_or(0, |v| (v.capacity() * std::mem::size_of::<Slot>()) as u64)
            })
            .sum();
        // A B-tree holds about 11 keys per 200-byte node when full, half that at worst.
        strs + slots + 36 * self.distinct_int.len() as u64
    }

    /// Records a batch's spill array (kind already unified).
    pub(crate) fn observe(&mut self, a: &dyn Array, batch_kind: &Kind) {
        let nulls = a.null_count();
        self.has_null |= nulls > 0;
        self.n_nonnull += (a.len() - nulls) as u64;
        match batch_kind {
            Kind::Str | Kind::DictStr => {
                let cap = if *batch_kind == Kind::DictStr {
                    usize::MAX
                } else {
                    STRING_CATEGORICAL_MAX
                };
                let sa = a.as_string::<i32>();
                let first = sa.value_offsets().first().copied().unwrap_or(0);
                let last = sa.value_offsets().last().copied().unwrap_or(0);
                self.str_value_bytes += (last - first).max(0) as u64;
                if let Some(set) = self.distinct_str.as_mut() {
                    for v in a.as_string::<i32>().iter().flatten() {
                        if !set.contains(v) {
                            set.insert(v.to_string());
                            self.distinct_str_bytes += v.len() as u64;
                            if set.len() > cap.max(STRING_CATEGORICAL_MAX) && cap != usize::MAX {
                                self.distinct_str = None;
                                self.distinct_str_bytes = 0;
                                break;
                            }
                        }
                    }
                }
            }
            Kind::DictInt => {
                for v in a.as_primitive::<Int64Type>().iter().flatten() {
                    self.distinct_int.insert(v);
                }
            }
            _ => {}
        }
    }

    /// The stored type, decided once all batches are seen.
    pub(crate) fn final_type(&self) -> Result<FinalType> {
        if let Some(l) = &self.list {
            return Ok(FinalType::Cat(l.cats()));
        }
        Ok(match &self.kind {
            Kind::Bool => FinalType::Bool,
            Kind::Int(_) if self.has_null => FinalType::F64,
            Kind::Int(t) => FinalType::Int(t.clone()),
            Kind::F32 => FinalType::F32,
            Kind::F64 => FinalType::F64,
            Kind::Str if self.plain => FinalType::Str,
            Kind::Str | Kind::DictStr => match &self.distinct_str {
                Some(set)
                    if self.kind == Kind::DictStr
                        || (set.len() <= STRING_CATEGORICAL_MAX
                            && (set.len() as u64) * 2 <= self.n_nonnull) =>
                {
                    let mut v: Vec<&String> = set.iter().collect();
                    v.sort();
                    let lookup = v
                        .iter()
                        .enumerate()
                        .map(|(i, s)| ((*s).clone(), i as i32))
                        .collect();
                    let cats: ArrayRef =
                        Arc::new(StringArray::from_iter_values(v.iter().map(|s| s.as_str())));
                    FinalType::Cat(Arc::new(Cats {
                        values: cats,
                        str_lookup: lookup,
                        int_lookup: HashMap::new(),
                    }))
                }
                _ => FinalType::Str,
            },
            Kind::DictInt => {
                let v: Vec<i64> = self.distinct_int.iter().copied().collect();
                let lookup = v.iter().enumerate().map(|(i, &x)| (x, i as i32)).collect();
                FinalType::Cat(Arc::new(Cats {
                    values: Arc::new(Int64Array::from(v)),
                    str_lookup: HashMap::new(),
                    int_lookup: lookup,
                }))
            }
        })
    }
}

/// Stored type of a value column.
#[derive(Debug, Clone)]
pub(crate) enum FinalType {
    Bool,
    Int(DataType),
    F32,
    F64,
    Str,
    Cat(Arc<Cats>),
}

impl FinalType {
    /// Arrow type in the stored spot files.
    pub(crate) fn stored(&self) -> DataType {
        match self {
            FinalType::Bool => DataType::Boolean,
            FinalType::Int(t) => t.clone(),
            FinalType::F32 => DataType::Float32,
            FinalType::F64 => DataType::Float64,
            FinalType::Str => DataType::Utf8,
            FinalType::Cat(c) => c.code_type(),
        }
    }

    /// The value type of the vocabulary (§4.0) of the stored values (categoricals: their
    /// code type is described by the categorical descriptor instead).
    pub(crate) fn value_type(&self) -> ValueType {
        match self {
            FinalType::Bool => ValueType::Bool,
            FinalType::Int(t) => ValueType::of_stored(t),
            FinalType::F32 => ValueType::Float32,
            FinalType::F64 => ValueType::Float64,
            FinalType::Str | FinalType::Cat(_) => ValueType::String,
        }
    }

    /// Type name of the spec's vocabulary (§4.0).
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            FinalType::Bool => "bool",
            FinalType::Int(t) => match t {
                DataType::Int8 => "int8",
                DataType::Int16 => "int16",
                DataType::Int32 => "int32",
                DataType::Int64 => "int64",
                DataType::UInt8 => "uint8",
                DataType::UInt16 => "uint16",
                DataType::UInt32 => "uint32",
                _ => "uint64",
            },
            FinalType::F32 => "float32",
            FinalType::F64 => "float64",
            FinalType::Str => "string",
            FinalType::Cat(_) => "categorical",
        }
    }
}

/// Codes (int16 / int32, null where missing) from optional codes.
pub(crate) fn codes_array(codes: Vec<Option<i32>>, t: &DataType) -> ArrayRef {
    if *t == DataType::Int16 {
        Arc::new(Int16Array::from_iter(
            codes.into_iter().map(|c| c.map(|x| x as i16)),
        ))
    } else {
        Arc::new(Int32Array::from(codes))
    }
}

fn f64_values(a: &dyn Array) -> Vec<Option<f64>> {
    match a.data_type() {
        DataType::Float64 => a.as_primitive::<Float64Type>().iter().collect(),
        DataType::Float32 => a
            .as_primitive::<Float32Type>()
            .iter()
            .map(|v| v.map(f64::from))
            .collect(),
        DataType::Int64 => a
            .as_primitive::<Int64Type>()
            .iter()
            .map(|v| v.map(|x| x as f64))
            .collect(),
        _ => vec![None; a.len()],
    }
}

/// Converts a spill array into its stored form.
pub(crate) fn finalize(name: &str, a: &ArrayRef, t: &FinalType) -> Result<ArrayRef> {
    let bad = || {
        Error::invalid_argument(format!(
            "column \"{name}\": cannot convert {} to {}",
            a.data_type(),
            t.type_name()
        ))
    };
    Ok(match t {
        FinalType::Bool => {
            if a.data_type() != &DataType::Boolean {
                return Err(bad());
            }
            a.clone()
        }
        FinalType::Int(it) => {
            if a.data_type() != &DataType::Int64 {
                return Err(bad());
            }
            let v = a.as_primitive::<Int64Type>();
            macro_rules! narrow {
                ($arr:ty, $t:ty) => {
                    Arc::new(<$arr>::from_iter(v.iter().map(|x| x.map(|x| x as $t)))) as ArrayRef
                };
            }
            match it {
                DataType::Int8 => narrow!(Int8Array, i8),
                DataType::Int16 => narrow!(Int16Array, i16),
                DataType::Int32 => narrow!(Int32Array, i32),
                DataType::Int64 => a.clone(),
                DataType::UInt8 => narrow!(UInt8Array, u8),
                DataType::UInt16 => narrow!(UInt16Array, u16),
                DataType::UInt32 => narrow!(UInt32Array, u32),
                _ => narrow!(UInt64Array, u64),
            }
        }
        FinalType::F32 => {
            if a.data_type() != &DataType::Float32 {
                return Err(bad());
            }
            a.clone()
        }
        FinalType::F64 => {
            if a.data_type() == &DataType::Float64 {
                a.clone()
            } else {
                Arc::new(Float64Array::from(f64_values(a.as_ref())))
            }
        }
        FinalType::Str => {
            if a.data_type() != &DataType::Utf8 {
                return Err(bad());
            }
            a.clone()
        }
        FinalType::Cat(c) => {
            let codes: Vec<Option<i32>> = match a.data_type() {
                DataType::Utf8 => a
                    .as_string::<i32>()
                    .iter()
                    .map(|v| v.and_then(|s| c.str_lookup.get(s).copied()))
                    .collect(),
                DataType::Int64 => a
                    .as_primitive::<Int64Type>()
                    .iter()
                    .map(|v| v.and_then(|x| c.int_lookup.get(&x).copied()))
                    .collect(),
                _ => return Err(bad()),
            };
            codes_array(codes, &c.code_type())
        }
    })
}

/// Builds the stored array of a derived column from the slot of each final code.
pub(crate) fn derived_array(name: &str, slots: &[Slot], t: &FinalType) -> Result<ArrayRef> {
    // Build the spill-typed array first, then convert like any spill array.
    let spill: ArrayRef = match t {
        FinalType::Bool => Arc::new(BooleanArray::from_iter(slots.iter().map(|s| match s {
            Slot::B(b) => Some(*b),
            _ => None,
        }))),
        FinalType::Int(_) | FinalType::Cat(_) if !matches!(t, FinalType::Cat(c) if c.values.data_type() == &DataType::Utf8) => {
            Arc::new(Int64Array::from_iter(slots.iter().map(|s| match s {
                Slot::I(v) => Some(*v),
                _ => None,
            })))
        }
        FinalType::F32 => Arc::new(Float32Array::from_iter(slots.iter().map(|s| match s {
            Slot::F(v) => Some(f64::from_bits(*v) as f32),
            _ => None,
        }))),
        FinalType::F64 => Arc::new(Float64Array::from_iter(slots.iter().map(|s| match s {
            Slot::F(v) => Some(f64::from_bits(*v)),
            Slot::I(v) => Some(*v as f64),
            _ => None,
        }))),
        _ => Arc::new(StringArray::from_iter(slots.iter().map(|s| match s {
            Slot::S(v) => Some(v.as_ref()),
            _ => None,
        }))),
    };
    finalize(name, &spill, t)
}

/// Converts an f32-or-f64 spill array to the coordinate type, nulls as NaN.
pub(crate) fn coord_array(a: &ArrayRef, f32_out: bool) -> ArrayRef {
    let v = f64_values(a.as_ref());
    if f32_out {
        if a.data_type() == &DataType::Float32 && a.null_count() == 0 {
            return a.clone();
        }
        Arc::new(Float32Array::from_iter_values(
            v.into_iter().map(|x| x.map_or(f32::NAN, |x| x as f32)),
        ))
    } else {
        if a.data_type() == &DataType::Float64 && a.null_count() == 0 {
            return a.clone();
        }
        Arc::new(Float64Array::from_iter_values(
            v.into_iter().map(|x| x.unwrap_or(f64::NAN)),
        ))
    }
}

/// Group of a value column by its name; registers new layer keys.
pub(crate) fn group_of(name: &str, layer_keys: &mut Vec<String>) -> Group {
    if let Some(t) = name.strip_prefix("spot_tracks/") {
        return Group::Track(t.to_string());
    }
    if let Some((key, axis)) = name
        .strip_prefix("layers/")
        .and_then(|r| r.rsplit_once('/'))
    {
        let a = ["x", "y", "z"].iter().position(|x| *x == axis).unwrap_or(0);
        let k = match layer_keys.iter().position(|k| k == key) {
            Some(k) => k,
            None => {
                layer_keys.push(key.to_string());
                layer_keys.len() - 1
            }
        };
        return Group::Layer(k, a);
    }
    Group::Extra
}

/// `a`, copied into buffers of its own when it holds more memory than its values need.
pub(crate) fn compact(a: ArrayRef) -> ArrayRef {
    let held = a.get_array_memory_size();
    let data = a.to_data();
    let needed = data.get_slice_memory_size().unwrap_or(held);
    if held <= 2 * needed + 4096 {
        return a;
    }
    let mut m = arrow_data::transform::MutableArrayData::new(vec![&data], false, a.len());
    // A copy that cannot fit the offsets keeps the original (it only pins more memory).
    if m.try_extend(0, 0, a.len()).is_err() {
        return a;
    }
    arrow_array::make_array(m.freeze())
}

/// Checks the names of the value columns of the first batch: unique, non-empty, layer
/// columns named `layers/<key>/x|y|z`.
pub(crate) fn check_value_names(names: &[&str]) -> Result<()> {
    let mut seen = HashSet::new();
    for &name in names {
        if !seen.insert(name) {
            return Err(Error::invalid_argument(format!(
                "column \"{name}\" appears twice"
            )));
        }
        if let Some(rest) = name.strip_prefix("layers/") {
            let ok = rest
                .rsplit_once('/')
                .is_some_and(|(k, a)| !k.is_empty() && ["x", "y", "z"].contains(&a));
            if !ok {
                return Err(Error::invalid_argument(format!(
                    "column \"{name}\": layer columns are named layers/<key>/x, y or z"
                )));
            }
        }
        if name.strip_prefix("spot_tracks/") == Some("") || name.is_empty() {
            return Err(Error::invalid_argument(format!(
                "column \"{name}\": empty name"
            )));
        }
    }
    Ok(())
}
