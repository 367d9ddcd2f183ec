#![no_main]
//! A ChromData directory store (2.0 / 2.1 / 2.2) with one member replaced: open and every query.
libfuzzer_sys::fuzz_target!(|data: &[u8]| deltacells_fuzz::fuzz_store_member(data));
