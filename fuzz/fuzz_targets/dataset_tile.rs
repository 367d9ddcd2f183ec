#![no_main]
//! A dataset whose tile file is the input: open, every tile, gathers, var, obs.
libfuzzer_sys::fuzz_target!(|data: &[u8]| deltacells_fuzz::fuzz_dataset_member(
    deltacells_fuzz::DatasetMember::Tile,
    data
));
