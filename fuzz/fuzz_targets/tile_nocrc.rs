#![no_main]
//! A tile blob with CRC verification off, so that mutations reach the decoder.
libfuzzer_sys::fuzz_target!(|data: &[u8]| deltacells_fuzz::fuzz_tile(data, false));
