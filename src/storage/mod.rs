//! Where bytes live. One layer for every writer and reader of the library: local files
//! (`fs`), and object stores at URLs (`remote`, behind the `remote` cargo feature), named by
//! a [`Location`] (a path or a URL) with [`Options`].
//!
//! Local writers are atomic through this layer: they build their output in a hidden
//! temporary sibling of the target, and publish it by renaming it into place once every file
//! and directory in it is on disk. Remote writers upload their parts and write the object
//! that makes the whole visible last (see `upload`).

pub mod dir;
pub mod fs;
pub mod location;
pub mod options;
#[cfg(feature = "remote")]
pub mod remote;
mod root;
#[cfg(feature = "remote")]
mod store_keys;

pub(crate) use dir::open_reopening;
pub use dir::OpenDir;
pub use location::{Location, RemoteUrl, Scheme};
pub use options::Options;
pub use root::Root;
