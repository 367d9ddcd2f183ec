//! Where bytes live. One layer for every writer and reader of the library: local files
//! (`fs`); `.cdz` members and object stores are added beside it.
//!
//! Writers are atomic through this layer: they build their output in a hidden temporary
//! sibling of the target, and publish it by renaming it into place once every file and
//! directory in it is on disk.

pub mod fs;
