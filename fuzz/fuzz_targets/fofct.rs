#![no_main]
//! A FOF-CT table: import it into a ChromData store, then open the store and query it.
libfuzzer_sys::fuzz_target!(|data: &[u8]| deltacells_fuzz::fuzz_fofct(data));
