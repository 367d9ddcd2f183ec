//! The deltacells tile (format version 2): one self-contained object holding consecutive
//! cells of a count matrix in CSR form, delta-coded, byte-planed, zstd-compressed, in
//! independent chunks. See `docs/format.md`.

mod chunk;
mod decode;
mod encode;
mod exceptions;
mod header;
mod inspect;
mod kernels;
mod values;

pub use chunk::ChunkData;
pub use decode::{decode_parsed, decode_tile, DecodeOptions};
pub use encode::{
    encode_tile, exception_limit, CsrRef, EncodeOptions, DEFAULT_CHUNKS, DEFAULT_ZSTD_LEVEL,
};
pub use header::{
    ChunkEntry, StreamRef, TileHeader, CHUNK_ENTRY_SIZE, ESCAPE, FORMAT_VERSION, HEADER_SIZE,
    MAGIC, MAX_COUNT, MAX_GENES,
};
pub use inspect::{inspect, StreamKind, Tile, TileIndex, TileInfo};
pub use kernels::{active_path, force_path, store_fence, KernelPath, STREAM_STORE_MIN_BYTES};
pub use values::ValuesOut;
