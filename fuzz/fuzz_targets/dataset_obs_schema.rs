#![no_main]
//! A dataset whose obs/schema.json is the input: open, every tile, gathers, var, obs.
libfuzzer_sys::fuzz_target!(|data: &[u8]| deltacells_fuzz::fuzz_dataset_member(
    deltacells_fuzz::DatasetMember::ObsSchema,
    data
));
