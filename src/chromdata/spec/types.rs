//! The type vocabulary of §4.0 and its Arrow mapping; categorical code types (§4.4);
//! coordinate / layer float types.

use arrow_schema::DataType;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::json::unsupported_value;

/// Largest number of categories stored with int16 codes (§4.4).
pub(crate) const INT16_CODES_MAX: usize = 32767;

/// Implements `name` / `from_name` and serde as the name for a vocabulary enum; an unknown
/// name is an `Unsupported` error with `$what` in the message.
macro_rules! vocabulary {
    ($ty:ident, $what:literal, { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            pub(crate) const ALL: &'static [$ty] = &[$($ty::$variant),+];

            pub(crate) fn name(self) -> &'static str {
                match self { $($ty::$variant => $name),+ }
            }

            pub(crate) fn from_name(name: &str) -> Option<$ty> {
                Self::ALL.iter().copied().find(|t| t.name() == name)
            }
        }

        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let name = String::deserialize(d)?;
                $ty::from_name(&name).ok_or_else(|| {
                    unsupported_value(format!(concat!($what, " \"{}\" is not one of {}"), name,
                        Self::ALL.iter().map(|t| t.name()).collect::<Vec<_>>().join(", ")))
                })
            }
        }
    };
}

/// A value type of the vocabulary of §4.0 (`categorical` is [`super::ColumnType`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ValueType {
    Bool,
    Int8,
    Int16,
    Int32,
    Int64,
    UInt8,
    UInt16,
    UInt32,
    UInt64,
    Float32,
    Float64,
    String,
}

vocabulary!(ValueType, "column type", {
    Bool => "bool", Int8 => "int8", Int16 => "int16", Int32 => "int32", Int64 => "int64",
    UInt8 => "uint8", UInt16 => "uint16", UInt32 => "uint32", UInt64 => "uint64",
    Float32 => "float32", Float64 => "float64", String => "string",
});

impl ValueType {
    /// The Arrow type of stored values (strings as `utf8`).
    pub(crate) fn arrow(self) -> DataType {
        match self {
            ValueType::Bool => DataType::Boolean,
            ValueType::Int8 => DataType::Int8,
            ValueType::Int16 => DataType::Int16,
            ValueType::Int32 => DataType::Int32,
            ValueType::Int64 => DataType::Int64,
            ValueType::UInt8 => DataType::UInt8,
            ValueType::UInt16 => DataType::UInt16,
            ValueType::UInt32 => DataType::UInt32,
            ValueType::UInt64 => DataType::UInt64,
            ValueType::Float32 => DataType::Float32,
            ValueType::Float64 => DataType::Float64,
            ValueType::String => DataType::Utf8,
        }
    }

    /// The vocabulary name a writer records for a column stored as Arrow type `t`: the
    /// same-width type, `string` for strings (the writer stores nothing else).
    pub(crate) fn of_stored(t: &DataType) -> ValueType {
        match t {
            DataType::Boolean => ValueType::Bool,
            DataType::Int8 => ValueType::Int8,
            DataType::Int16 => ValueType::Int16,
            DataType::Int32 => ValueType::Int32,
            DataType::Int64 => ValueType::Int64,
            DataType::UInt8 => ValueType::UInt8,
            DataType::UInt16 => ValueType::UInt16,
            DataType::UInt32 => ValueType::UInt32,
            DataType::UInt64 => ValueType::UInt64,
            DataType::Float32 => ValueType::Float32,
            DataType::Float64 => ValueType::Float64,
            _ => ValueType::String,
        }
    }
}

/// Code type of a categorical column in spot-aligned and derived files (§4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CodeType {
    Int16,
    Int32,
}

vocabulary!(CodeType, "code type", { Int16 => "int16", Int32 => "int32" });

impl CodeType {
    /// int16 up to [`INT16_CODES_MAX`] categories, else int32.
    pub(crate) fn for_categories(n: usize) -> CodeType {
        if n <= INT16_CODES_MAX {
            CodeType::Int16
        } else {
            CodeType::Int32
        }
    }

    pub(crate) fn arrow(self) -> DataType {
        match self {
            CodeType::Int16 => DataType::Int16,
            CodeType::Int32 => DataType::Int32,
        }
    }
}

/// Type of coordinates (`coord_dtype`, `spots.coords.type`) and layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FloatType {
    Float32,
    Float64,
}

vocabulary!(FloatType, "coordinate type", { Float32 => "float32", Float64 => "float64" });

impl FloatType {
    pub(crate) fn arrow(self) -> DataType {
        match self {
            FloatType::Float32 => DataType::Float32,
            FloatType::Float64 => DataType::Float64,
        }
    }

    pub(crate) fn bits(self) -> u32 {
        match self {
            FloatType::Float32 => 32,
            FloatType::Float64 => 64,
        }
    }

    pub(crate) fn of(float32: bool) -> FloatType {
        if float32 {
            FloatType::Float32
        } else {
            FloatType::Float64
        }
    }
}

/// Element type of the N-D Zarr arrays of §12 (cellm, binm, results, uns; §6.1): the Zarr v3
/// `data_type` names, which are also the names `dc_chromdata_attrs` reports as `dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArrayType {
    Bool,
    Int8,
    Int16,
    Int32,
    Int64,
    UInt8,
    UInt16,
    UInt32,
    UInt64,
    Float32,
    Float64,
}

vocabulary!(ArrayType, "array data type", {
    Bool => "bool", Int8 => "int8", Int16 => "int16", Int32 => "int32", Int64 => "int64",
    UInt8 => "uint8", UInt16 => "uint16", UInt32 => "uint32", UInt64 => "uint64",
    Float32 => "float32", Float64 => "float64",
});

impl ArrayType {
    /// The Arrow type of the elements.
    pub(crate) fn arrow(self) -> DataType {
        match self {
            ArrayType::Bool => DataType::Boolean,
            ArrayType::Int8 => DataType::Int8,
            ArrayType::Int16 => DataType::Int16,
            ArrayType::Int32 => DataType::Int32,
            ArrayType::Int64 => DataType::Int64,
            ArrayType::UInt8 => DataType::UInt8,
            ArrayType::UInt16 => DataType::UInt16,
            ArrayType::UInt32 => DataType::UInt32,
            ArrayType::UInt64 => DataType::UInt64,
            ArrayType::Float32 => DataType::Float32,
            ArrayType::Float64 => DataType::Float64,
        }
    }

    /// The element type of Arrow type `t`; None for types a Zarr array of §6.1 cannot hold.
    pub(crate) fn of_arrow(t: &DataType) -> Option<ArrayType> {
        ArrayType::ALL.iter().copied().find(|a| &a.arrow() == t)
    }

    /// Bytes per element.
    pub(crate) fn size(self) -> usize {
        match self {
            ArrayType::Bool | ArrayType::Int8 | ArrayType::UInt8 => 1,
            ArrayType::Int16 | ArrayType::UInt16 => 2,
            ArrayType::Int32 | ArrayType::UInt32 | ArrayType::Float32 => 4,
            _ => 8,
        }
    }

    /// The NumPy type string of an inline `ndarray` tag of uns (§12), e.g. `<f8`.
    pub(crate) fn numpy(self) -> &'static str {
        match self {
            ArrayType::Bool => "|b1",
            ArrayType::Int8 => "|i1",
            ArrayType::Int16 => "<i2",
            ArrayType::Int32 => "<i4",
            ArrayType::Int64 => "<i8",
            ArrayType::UInt8 => "|u1",
            ArrayType::UInt16 => "<u2",
            ArrayType::UInt32 => "<u4",
            ArrayType::UInt64 => "<u8",
            ArrayType::Float32 => "<f4",
            ArrayType::Float64 => "<f8",
        }
    }

    /// The element type of a NumPy type string (`<f8`, `float64`, `=i4`, `bool`, ...); None
    /// for a type that is not numeric or bool, or big-endian.
    pub(crate) fn of_numpy(s: &str) -> Option<ArrayType> {
        if let Some(t) = ArrayType::from_name(s) {
            return Some(t);
        }
        if s == "bool" || s == "?" {
            return Some(ArrayType::Bool);
        }
        let body = match s.as_bytes().first() {
            Some(b'<' | b'|' | b'=') => &s[1..],
            Some(b'>') if s.ends_with('1') => &s[1..],
            Some(b'>') => return None,
            _ => s,
        };
        ArrayType::ALL
            .iter()
            .copied()
            .find(|t| &t.numpy()[1..] == body)
    }
}

/// `_type` of a results member (§12).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResultType {
    Table,
    Array,
    Json,
    Mapping,
}

vocabulary!(ResultType, "result type", {
    Table => "table", Array => "array", Json => "json", Mapping => "mapping",
});
