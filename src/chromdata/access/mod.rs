//! Access to the bytes of a store: the container (a directory or a `.cdz` of STORED
//! members, read in place), its Parquet files (footers, row groups on demand) and its Zarr
//! arrays. Used by `read`; knows nothing of queries.

pub(crate) mod pages;
pub(crate) mod parquet;
pub(crate) mod plain;
pub(crate) mod store;
pub(crate) mod zarr;
