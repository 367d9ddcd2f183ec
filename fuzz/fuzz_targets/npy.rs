#![no_main]
//! A gene order .npy (first byte: the expected length).
libfuzzer_sys::fuzz_target!(|data: &[u8]| deltacells_fuzz::fuzz_npy(data));
