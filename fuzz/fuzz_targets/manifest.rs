#![no_main]
//! manifest.json text: parse, and round trip what parses.
libfuzzer_sys::fuzz_target!(|data: &[u8]| deltacells_fuzz::fuzz_manifest(data));
