#![no_main]
//! An .h5ad file: open, every cell, var names, obs / var tables (as far as libhdf5 allows).
libfuzzer_sys::fuzz_target!(|data: &[u8]| deltacells_fuzz::fuzz_h5ad(data));
