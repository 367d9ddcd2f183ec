//! Block-shuffled orders of a dataset's cells (`dc_dataset_shuffled_order`): tiles in a
//! random order, cells shuffled within windows of consecutive tiles of that order, so that
//! a training epoch sees every cell once in a random-looking order while each batch touches
//! only the tiles of one window.
//!
//! The result is specified bit for bit, so that any platform (and any reimplementation)
//! produces the same order for a seed:
//!
//! * the random stream is SplitMix64 seeded with `seed`: `state += 0x9E3779B97F4A7C15;
//!   z = state; z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9; z = (z ^ (z >> 27)) *
//!   0x94D049BB133111EB; output z ^ (z >> 31)` (all arithmetic modulo 2^64);
//! * a uniform integer below m (m >= 1) is Lemire's multiply-shift with rejection: draw x,
//!   p = x * m as a 128-bit product; while (p mod 2^64) < (2^64 - m) mod m draw again;
//!   the result is p >> 64;
//! * a shuffle of a[0..n) is Fisher-Yates from the end: for i = n-1 down to 1, swap a[i]
//!   with a[j], j uniform below i + 1;
//! * the order: shuffle the tile indices 0..n_tiles; cut the shuffled list into windows of
//!   `window_tiles` consecutive entries (the last may be shorter); for each window in turn,
//!   list the global cells of its tiles (tile by tile in window order, each tile's cells in
//!   increasing order), shuffle that list with the same stream, and append it.

use crate::error::{Error, ErrorKind, Result};

use super::reader::Dataset;

/// SplitMix64 (Steele, Lea and Flood 2014), the stream of the shuffles.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform below `m` (>= 1), Lemire's method with rejection.
    pub fn below(&mut self, m: u64) -> u64 {
        let threshold = m.wrapping_neg() % m;
        loop {
            let p = self.next_u64() as u128 * m as u128;
            if (p as u64) >= threshold {
                return (p >> 64) as u64;
            }
        }
    }

    /// Fisher-Yates from the end.
    pub fn shuffle<T>(&mut self, a: &mut [T]) {
        for i in (1..a.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            a.swap(i, j);
        }
    }
}

impl Dataset {
    /// A block-shuffled permutation of all cells into `out` (n_cells entries; see the module
    /// documentation for the exact algorithm). `window_tiles` 0 means 1.
    ///
    /// Errors: `BufferTooSmall { needed: n_cells }` when `out` is shorter.
    pub fn shuffled_order(&self, seed: u64, window_tiles: usize, out: &mut [u64]) -> Result<()> {
        let n_cells = self.info().n_cells;
        if (out.len() as u64) < n_cells {
            return Err(Error::new(
                ErrorKind::BufferTooSmall { needed: n_cells },
                format!(
                    "out holds {} entries, the dataset has n_cells = {n_cells}",
                    out.len()
                ),
            ));
        }
        let window = window_tiles.max(1);
        let starts = self.starts();
        let mut rng = SplitMix64::new(seed);
        let mut tiles: Vec<usize> = (0..starts.len() - 1).collect();
        rng.shuffle(&mut tiles);
        let mut at = 0usize;
        for w in tiles.chunks(window) {
            let begin = at;
            for &t in w {
                for c in starts[t]..starts[t + 1] {
                    out[at] = c;
                    at += 1;
                }
            }
            rng.shuffle(&mut out[begin..at]);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_is_in_range_and_shuffle_permutes() {
        let mut r = SplitMix64::new(1);
        for m in [1u64, 2, 3, 7, 1000, u64::MAX] {
            for _ in 0..100 {
                assert!(r.below(m) < m);
            }
        }
        let mut v: Vec<u32> = (0..100).collect();
        r.shuffle(&mut v);
        let mut s = v.clone();
        s.sort_unstable();
        assert_eq!(s, (0..100).collect::<Vec<_>>());
        assert_ne!(v, s);
    }

    /// The first outputs of SplitMix64 for seed 0, as published with the algorithm
    /// (Vigna's splitmix64.c).
    #[test]
    fn splitmix64_reference_values() {
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(r.next_u64(), 0x06C4_5D18_8009_454F);
    }
}
