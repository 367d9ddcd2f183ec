#![no_main]
//! A tile blob: inspect and decode with CRC verification (int32, float32, short buffer).
libfuzzer_sys::fuzz_target!(|data: &[u8]| deltacells_fuzz::fuzz_tile(data, true));
