#![no_main]
//! A .cdz file: open and every query.
libfuzzer_sys::fuzz_target!(|data: &[u8]| deltacells_fuzz::read_chromdata(
    &deltacells_fuzz::scratch_file("input.cdz", data)
));
