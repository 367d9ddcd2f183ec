//! The stored trace / cell codes of the key columns, checked against the index's runs.
//!
//! A run (a stored block of one trace, one cell and one chromosome) has one trace code and
//! one cell code in the index; every spot row of the run must hold them. The output's
//! trace_id / cell_id come from the runs and the categories, so the stored codes are only
//! checked, never part of a result: the decoding tasks check each decoded slice where it
//! lands ([`super::gather`]), and the codes need no memory of their own (a scratch column
//! held them, 4 bytes per spot, at a full read's peak: issue 17, item 4).

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrowPrimitiveType, PrimitiveArray};
use arrow_buffer::ArrowNativeType;
use arrow_schema::DataType;

use crate::error::{Error, Result};

/// The code each output row of a read must hold: runs of rows in output order.
pub(crate) struct RunCodes {
    /// First output row of each run, then the total number of rows.
    starts: Vec<usize>,
    /// The code of each run.
    codes: Vec<u32>,
    /// The column in messages ("STORE: spots trace_id").
    what: String,
}

impl RunCodes {
    /// The runs `(code, rows)` in output order; `what` names the column in errors.
    pub(crate) fn new(runs: impl IntoIterator<Item = (u32, usize)>, what: String) -> RunCodes {
        let mut starts = vec![0usize];
        let mut codes = Vec::new();
        let mut at = 0usize;
        for (code, rows) in runs {
            at += rows;
            starts.push(at);
            codes.push(code);
        }
        RunCodes {
            starts,
            codes,
            what,
        }
    }

    /// Output rows the runs cover.
    pub(crate) fn rows(&self) -> usize {
        self.starts.last().copied().unwrap_or(0)
    }

    /// Whether `t` can hold codes: an integer type (else reads of the column are refused).
    pub(crate) fn check_type(&self, t: &DataType) -> Result<()> {
        if t.is_integer() {
            Ok(())
        } else {
            Err(Error::format(format!(
                "{}: expected integer codes, found {t}",
                self.what
            )))
        }
    }

    /// Checks that `codes` (stored codes, not null) are those of output rows
    /// `[first, first + codes.len())`.
    pub(crate) fn check(&self, codes: &dyn Array, first: usize) -> Result<()> {
        if codes.null_count() > 0 {
            return Err(Error::format(format!(
                "{}: null code (never null)",
                self.what
            )));
        }
        if first + codes.len() > self.rows() {
            return Err(Error::new(
                crate::error::ErrorKind::Internal,
                format!("{}: codes past the runs' rows", self.what),
            ));
        }
        macro_rules! dispatch {
            ($($dt:ident => $t:ty),*) => {
                match codes.data_type() {
                    $(DataType::$dt => self.typed(codes.as_primitive::<$t>(), first),)*
                    t => self.check_type(t),
                }
            };
        }
        dispatch!(Int8 => Int8Type, Int16 => Int16Type, Int32 => Int32Type, Int64 => Int64Type,
                  UInt8 => UInt8Type, UInt16 => UInt16Type, UInt32 => UInt32Type,
                  UInt64 => UInt64Type)
    }

    fn typed<T: ArrowPrimitiveType>(&self, a: &PrimitiveArray<T>, first: usize) -> Result<()> {
        let v = a.values();
        // The run holding `first`: the last start at or before it.
        let mut run = self.starts.partition_point(|&s| s <= first) - 1;
        let mut at = 0usize;
        while at < v.len() {
            let row = first + at;
            let len = (self.starts[run + 1] - row).min(v.len() - at);
            let code = self.codes[run];
            let want = T::Native::usize_as(code as usize);
            let part = &v[at..at + len];
            // One branch-free pass (it vectorises); the offending row only on failure.
            if !part.iter().fold(true, |ok, &x| ok & (x == want)) {
                let k = part.iter().position(|&x| x != want).unwrap_or(0);
                return Err(Error::format(format!(
                    "{}: code {} at selected row {} differs from its run's code {code} in the index",
                    self.what,
                    part[k].to_i64().unwrap_or(-1),
                    row + k
                )));
            }
            at += len;
            run += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int16Array, Int32Array, StringArray};

    fn runs() -> RunCodes {
        // rows 0-2: code 5, rows 3-3: code 0, rows 4-8: code 7 (a run of zero rows between)
        RunCodes::new([(5, 3), (0, 1), (9, 0), (7, 5)], "s: spots trace_id".into())
    }

    #[test]
    fn slices_anywhere_in_the_runs_are_checked_against_their_rows() {
        let r = runs();
        assert_eq!(r.rows(), 9);
        let all = [5i16, 5, 5, 0, 7, 7, 7, 7, 7];
        for first in 0..all.len() {
            for end in first + 1..=all.len() {
                let a = Int16Array::from(all[first..end].to_vec());
                r.check(&a, first).unwrap();
                // The same slice one row later is wrong wherever it crosses a run's edge.
                if end < all.len() {
                    let shifted = r.check(&a, first + 1);
                    let crosses = all[first + 1..=end] != all[first..end];
                    assert_eq!(shifted.is_err(), crosses, "{first}..{end}");
                }
            }
        }
    }

    #[test]
    fn a_wrong_code_names_its_row_the_code_and_the_runs_code() {
        let r = runs();
        let a = Int32Array::from(vec![0, 7, 7, 6, 7]);
        let e = r.check(&a, 3).unwrap_err();
        assert_eq!(e.kind, crate::error::ErrorKind::Format);
        assert_eq!(
            e.message,
            "s: spots trace_id: code 6 at selected row 6 differs from its run's code 7 in the index"
        );
    }

    #[test]
    fn nulls_and_non_integer_codes_are_refused() {
        let r = runs();
        let e = r
            .check(&Int16Array::from(vec![Some(5), None]), 0)
            .unwrap_err();
        assert!(e.message.ends_with("null code (never null)"), "{e}");
        let e = r.check(&StringArray::from(vec!["5"]), 0).unwrap_err();
        assert!(
            e.message.ends_with("expected integer codes, found Utf8"),
            "{e}"
        );
        assert!(r.check_type(&DataType::Float32).is_err());
        assert!(r.check_type(&DataType::UInt8).is_ok());
        // Past the runs' rows: an internal error, not a panic.
        assert!(r.check(&Int16Array::from(vec![7, 7]), 8).is_err());
    }
}
