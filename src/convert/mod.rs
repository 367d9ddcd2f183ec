//! Readers of the input formats people convert from (behind the `cli` feature: the library
//! proper reads and writes only deltacells and ChromData).

pub mod mtx;
