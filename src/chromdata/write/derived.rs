//! Derived and referenced columns (§10.3): which extra spot columns of a 2.2 store are
//! stored once per bin / cell / trace code or taken from a bins column, detected exactly
//! (values compared bitwise) while the spots were appended.

use arrow_array::ArrayRef;

use super::collected::Collected;
use super::columns::{self, FinalType, Group, Slot};
use crate::chromdata::spec::{DerivedKey, Layout, Storage};
use crate::error::Result;

/// Derived columns per key: (column, values by code).
pub(crate) type DerivedCols = [Vec<(usize, ArrayRef)>; 3];

/// Where each extra column is stored (§10.3, 2.2 only; every column is in the spot files
/// of 2.0 / 2.1): a bins column whose values agree with it on every bin, else a derived
/// file keyed by bin, cell or trace when it has one value per code, else the primary file.
/// Returns the storage of each extra column (in order) and the derived values per key
/// (indexed like [`DerivedKey::ALL`]).
pub(crate) fn decide_storage(
    inp: &Collected,
    types: &[FinalType],
) -> Result<(Vec<Storage>, DerivedCols)> {
    let mut out = Vec::new();
    let mut derived: [Vec<(usize, ArrayRef)>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    let n_codes = [
        inp.chrom_of_bin.len(),
        inp.cell_cats.as_ref().map_or(0, |c| c.len()),
        inp.trace_cats.len(),
    ];
    for (ci, c) in inp.cols.iter().enumerate() {
        if c.group != Group::Extra {
            continue;
        }
        if inp.layout != Layout::PrimaryCoords {
            out.push(Storage::Spots);
            continue;
        }
        let t = &types[ci];
        let mut st = Storage::Primary;
        if inp.n_spots > 0 {
            // Final-code slots per key.
            let finals: [Option<Vec<Slot>>; 3] = std::array::from_fn(|k| {
                let slots = c.detect[k].slots.as_ref()?;
                if k == 1 && !inp.has_cells {
                    return None;
                }
                let mut v = vec![Slot::Empty; n_codes[k]];
                for (p, s) in slots.iter().enumerate() {
                    if *s == Slot::Empty {
                        continue;
                    }
                    let f = match k {
                        0 => inp.bin_final.as_ref().map_or(p as u32, |m| m[p]),
                        1 => inp.cell_final[p],
                        _ => inp.trace_final[p],
                    } as usize;
                    v[f] = s.clone();
                }
                Some(v)
            });
            // Reference to a bins column (non-categorical, same type).
            if let (Some(slots), false) = (&finals[0], matches!(t, FinalType::Cat(_))) {
                let bs = inp.bins.schema();
                for (bi, f) in bs.fields().iter().enumerate().skip(3) {
                    if f.data_type() != &t.stored() {
                        continue;
                    }
                    let spill = columns::to_spill(f.name(), inp.bins.column(bi))?;
                    let ok = slots.iter().enumerate().all(|(b, s)| {
                        *s == Slot::Empty || {
                            let one = spill.slice(b, 1);
                            let mut d = columns::Detect::new();
                            d.feed(one.as_ref(), &[0]);
                            d.slots.as_ref().is_some_and(|v| v[0] == *s)
                        }
                    });
                    if ok {
                        st = Storage::Bins(f.name().clone());
                        break;
                    }
                }
            }
            if matches!(st, Storage::Primary) {
                for (k, f) in finals.iter().enumerate() {
                    if let Some(slots) = f {
                        let slots: Vec<Slot> = slots
                            .iter()
                            .map(|s| {
                                if *s == Slot::Empty {
                                    Slot::Null
                                } else {
                                    s.clone()
                                }
                            })
                            .collect();
                        let a = columns::derived_array(&c.name, &slots, t)?;
                        derived[k].push((ci, a));
                        st = Storage::Derived(DerivedKey::ALL[k]);
                        break;
                    }
                }
            }
        }
        out.push(st);
    }
    Ok((out, derived))
}
