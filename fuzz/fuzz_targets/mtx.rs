#![no_main]
//! A Matrix Market file (genes as rows and as columns).
libfuzzer_sys::fuzz_target!(|data: &[u8]| deltacells_fuzz::fuzz_mtx(data));
