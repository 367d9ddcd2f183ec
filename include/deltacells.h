/*
 * libdeltacells: deltacells datasets and ChromData stores, C API (ABI version 1).
 *
 * Generated from the Rust sources by cbindgen; do not edit. See docs/c-api.md.
 *
 * Conventions: every fallible function returns a dc_status (DC_OK = 0); on failure
 * dc_last_error() returns a one-line message for the calling thread. Out-parameters are
 * written only on DC_OK. Handles are released by their *_free function; *_free(NULL) is a
 * no-op. No function prints anything or lets a panic escape.
 */

#ifndef DELTACELLS_H
#define DELTACELLS_H

#include <stdint.h>
#include <stddef.h>

/* The Arrow C data and stream interfaces, exactly as the Arrow specification defines
 * them, under the standard guards so this header can sit beside Arrow C++ or nanoarrow. */
#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
  const char* format;
  const char* name;
  const char* metadata;
  int64_t flags;
  int64_t n_children;
  struct ArrowSchema** children;
  struct ArrowSchema* dictionary;
  void (*release)(struct ArrowSchema*);
  void* private_data;
};

struct ArrowArray {
  int64_t length;
  int64_t null_count;
  int64_t offset;
  int64_t n_buffers;
  int64_t n_children;
  const void** buffers;
  struct ArrowArray** children;
  struct ArrowArray* dictionary;
  void (*release)(struct ArrowArray*);
  void* private_data;
};

#endif  /* ARROW_C_DATA_INTERFACE */

#ifndef ARROW_C_STREAM_INTERFACE
#define ARROW_C_STREAM_INTERFACE

struct ArrowArrayStream {
  int (*get_schema)(struct ArrowArrayStream*, struct ArrowSchema* out);
  int (*get_next)(struct ArrowArrayStream*, struct ArrowArray* out);
  const char* (*get_last_error)(struct ArrowArrayStream*);
  void (*release)(struct ArrowArrayStream*);
  void* private_data;
};

#endif  /* ARROW_C_STREAM_INTERFACE */


/**
 * Major version of the library (semantic versioning of the crate).
 */
#define DC_VERSION_MAJOR 0

/**
 * Minor version of the library.
 */
#define DC_VERSION_MINOR 1

/**
 * Patch version of the library.
 */
#define DC_VERSION_PATCH 0

/**
 * Version of the C ABI described by this header. Functions keep their meaning within one
 * ABI version; the shared library's SONAME is `libdeltacells.so.<DC_ABI_VERSION>`.
 */
#define DC_ABI_VERSION 1

/**
 * An iterator over batches of a dataset's cells (opaque). Created by
 * `dc_dataset_batches`, released by `dc_batches_free`. One thread at a time.
 */
typedef struct dc_batches dc_batches;

/**
 * An open ChromData store (opaque). May be used from several threads at once.
 */
typedef struct dc_chromdata dc_chromdata;

/**
 * A ChromData store being written (opaque), from `dc_chromdata_writer_create`, released
 * with `dc_chromdata_writer_free`. Must not be used from several threads at once.
 */
typedef struct dc_chromdata_writer dc_chromdata_writer;

/**
 * An open dataset (opaque). Created by `dc_dataset_open`, released by `dc_dataset_free`.
 * May be used from several threads at once.
 */
typedef struct dc_dataset dc_dataset;

/**
 * A dataset being written (opaque). Created by `dc_writer_create`, released by
 * `dc_writer_free`. Must not be used from several threads at once.
 */
typedef struct dc_writer dc_writer;

/**
 * Result of every fallible call (a C `int32_t`; the `DC_OK` / `DC_ERR_*` constants).
 */
typedef int32_t dc_status;

/**
 * Element type of decoded counts (`DC_INT32` or `DC_FLOAT32`).
 */
typedef int32_t dc_dtype;

/**
 * Spot-table layout of a store (`DC_LAYOUT_*`).
 */
typedef int32_t dc_layout;

/**
 * Version, layout and counts of a store, filled by `dc_chromdata_info_get`.
 */
typedef struct dc_chromdata_info {
  uint32_t format_major;
  uint32_t format_minor;
  dc_layout layout;
  uint64_t n_spots;
  uint64_t n_bins;
  uint64_t n_traces;
  uint64_t n_cells;
  uint64_t n_chroms;
  int32_t has_coords;
  int32_t has_cell_id;
  uint64_t n_runs;
  uint64_t n_row_groups;
  int32_t has_source_row;
  /**
   * 32 or 64; 0 without coordinates.
   */
  int32_t coord_bits;
} dc_chromdata_info;

/**
 * A setting of a ChromData writer (`DC_CDW_*`), for `dc_chromdata_writer_set`.
 */
typedef int32_t dc_chromdata_writer_param;

/**
 * A setting of a dataset handle (`DC_DATASET_*`), for `dc_dataset_set`.
 */
typedef int32_t dc_dataset_param;

/**
 * Summary of a dataset, filled by `dc_dataset_info_get`.
 */
typedef struct dc_dataset_info {
  uint64_t n_cells;
  uint32_t n_genes;
  /**
   * Dataset format version (2).
   */
  uint32_t version;
  uint64_t n_tiles;
  uint64_t tile_size;
  /**
   * Sum of the tiles' stored nonzeros.
   */
  uint64_t nnz;
  int32_t has_gene_order;
  int32_t has_var_names;
  int32_t has_var_table;
  int32_t has_obs;
} dc_dataset_info;

/**
 * Summary of a tile, filled by `dc_tile_inspect`.
 */
typedef struct dc_tile_info {
  /**
   * Format version of the tile (2).
   */
  uint32_t version;
  uint32_t n_chunks;
  uint64_t n_cells;
  uint64_t nnz;
  uint32_t n_genes;
  /**
   * Value + gap exceptions over all chunks (saturates at UINT32_MAX).
   */
  uint32_t n_exceptions;
  uint64_t total_size;
} dc_tile_info;

/**
 * A setting of a writer (`DC_WRITER_*`), for `dc_writer_set`.
 */
typedef int32_t dc_writer_param;

/**
 * Format 2.0: one flat spot table.
 */
#define DC_LAYOUT_FLAT 0

/**
 * Format 2.1: spot tables partitioned by chromosome.
 */
#define DC_LAYOUT_PARTITIONED 1

/**
 * Format 2.2: primary tables + coordinate partitions.
 */
#define DC_LAYOUT_PRIMARY_COORDS 2

/**
 * Bytes of memory the writer may use in all (>= 1 MiB; 0 = default, half of the
 * available RAM): unsorted spots, sorting, the merge and the Parquet writers share it,
 * after the per-trace index (about 100 bytes per (cell, trace, chromosome) triple). A
 * smaller budget means more spilled runs, more merge passes and, below what one default
 * row group of the widest file needs, smaller row groups (recorded in the store); below
 * what the column writers' dictionaries need (~96 KiB each: ~16 MB for 60 tracks in
 * 2.2), no column is dictionary-encoded (larger files, the same contents). The caller's
 * own batches are not counted, and each appended batch is converted in one
 * piece: keep batches well below the budget. Before finish.
 */
#define DC_CDW_MEMORY_BUDGET 0

/**
 * 0 (default): float64 coordinates; 1: float32. Before finish.
 */
#define DC_CDW_COORD_FLOAT32 1

/**
 * A `dc_layout`; default `DC_LAYOUT_PRIMARY_COORDS` (2.2). Before finish.
 */
#define DC_CDW_LAYOUT 2

/**
 * 0 (default): `DC_ERR_EXISTS` if a store exists at the target; 1: replace it (only a
 * store: any other existing path is always refused). Before finish.
 */
#define DC_CDW_OVERWRITE 3

/**
 * Worker threads (>= 0; 0 = `DELTACELLS_NUM_THREADS`, else all cores). The output does
 * not depend on it. With more than one, finishing also runs up to three helper threads
 * for its duration (the merge's block encoder, the writer of the store's files, the
 * removal of spilled runs), which mostly wait on the workers; with one, all work runs on
 * the calling thread.
 */
#define DC_CDW_THREADS 4

/**
 * Decode threads per call (0 = `DELTACELLS_NUM_THREADS`, else all cores). Default 0.
 */
#define DC_DATASET_THREADS 0

/**
 * Since contract 1.1 a shorthand for `DC_DATASET_CACHE_BYTES`: sets the budget to
 * `value` times the decoded size of this dataset's largest tile (4 bytes per nonzero plus
 * 12 per cell, plus 4 KiB), so that about `value` whole tiles' chunks fit. 0 disables the
 * cache. Whichever of the two was set last is in effect.
 */
#define DC_DATASET_TILE_CACHE 1

/**
 * 1 (default): check each tile's CRC-32 when it is read, before anything in it is
 * decompressed; 0: skip the check. Chunks served from the cache were checked when their
 * tile was read; sizing (`dc_dataset_batch_nnz`) reads only header, chunk table and indptr,
 * checked structurally.
 */
#define DC_DATASET_VERIFY_CRC 2

/**
 * Budget in bytes of the decoded-data cache, shared by every thread using the handle and
 * by its batch iterators (default 268435456 = 256 MiB; 0 disables it). The cache keeps
 * decompressed chunks (4 bytes per nonzero, 4 per cell, plus exceptions) and tile indexes
 * (header, chunk table, indptr: 8 bytes per cell), least recently used evicted first;
 * what a batch iterator has read ahead stays until its batch is handed out. Shrinking
 * evicts at once.
 */
#define DC_DATASET_CACHE_BYTES 3

/**
 * Success.
 */
#define DC_OK 0

/**
 * NULL where not allowed, bad enum value, bad UTF-8, inconsistent arguments.
 */
#define DC_ERR_INVALID_ARGUMENT 1

/**
 * The OS refused a read/write/rename (the message names the path).
 */
#define DC_ERR_IO 2

/**
 * Missing file, unknown id / column / table, optional part absent.
 */
#define DC_ERR_NOT_FOUND 3

/**
 * Malformed or inconsistent data (bad magic, bad structure, bad counts).
 */
#define DC_ERR_FORMAT 4

/**
 * CRC-32 / SHA-256 mismatch.
 */
#define DC_ERR_CHECKSUM 5

/**
 * A version, flag, layout or type this build does not read.
 */
#define DC_ERR_UNSUPPORTED 6

/**
 * Index past the end (cell, tile, gene).
 */
#define DC_ERR_OUT_OF_RANGE 7

/**
 * Caller buffer shorter than needed (the needed size is reported).
 */
#define DC_ERR_BUFFER_TOO_SMALL 8

/**
 * Call not valid now (e.g. append after finish, or a poisoned handle).
 */
#define DC_ERR_STATE 9

/**
 * A policy limit was hit (e.g. too many exceptions in a tile, memory budget).
 */
#define DC_ERR_LIMIT 10

/**
 * Output path exists and overwriting was not allowed.
 */
#define DC_ERR_EXISTS 11

/**
 * A bug: a Rust panic caught at the boundary; the handle involved is poisoned.
 */
#define DC_ERR_INTERNAL 12

/**
 * Counts as `int32_t`.
 */
#define DC_INT32 0

/**
 * Counts as `float` (exact up to 2^24).
 */
#define DC_FLOAT32 1

/**
 * Cells per tile (>= 1), default 10000. Before the first append.
 */
#define DC_WRITER_TILE_SIZE 0

/**
 * Chunks per tile (1 ..= 65536), default 8. Before the first append.
 */
#define DC_WRITER_N_CHUNKS 1

/**
 * zstd level (zstd's range; 0 = zstd's default), default 19. Before the first append.
 */
#define DC_WRITER_ZSTD_LEVEL 2

/**
 * Encode threads (>= 0; 0 = `DELTACELLS_NUM_THREADS`, else all cores). Any time.
 */
#define DC_WRITER_THREADS 3

/**
 * 0 (default): `DC_ERR_EXISTS` if the target exists; 1: replace an existing dataset at
 * the target, only when `dc_writer_finish` succeeds. Before finish.
 */
#define DC_WRITER_OVERWRITE 4

/**
 * Tiles (row groups) per obs shard (>= 1), default 1000. Before the first append.
 */
#define DC_WRITER_OBS_TILES_PER_FILE 5

/**
 * Categorical (dictionary) obs columns with more distinct values than this (>= 0) are
 * stored as strings instead of categories; default 20000. Before the first
 * `dc_writer_append_obs`.
 */
#define DC_WRITER_OBS_MAX_CATEGORIES 6

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

/**
 * Iterates the cells `cells[0..n)` (any order, repeats allowed; the array is copied) in
 * batches of `batch_size` rows (the last may be shorter). While the caller works on one
 * batch, the next `read_ahead` batches (0 = 2, at most 64) are prepared on the dataset's
 * pool (`DC_DATASET_THREADS` at this call): their plans made and the chunks holding their
 * cells decompressed into the dataset's decoded-data cache, where they stay until their
 * batch is handed out. Memory: the cache's budget (`DC_DATASET_CACHE_BYTES`; with 0 only
 * the plans are prepared ahead) plus a few words per row of the batches prepared. All the
 * iterator's work runs on the pool; a calling thread only waits.
 *
 * The iterator keeps what it needs of the dataset alive: `dc_dataset_free` may come first.
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (NULL `ds`, `out`, or `cells` with n > 0;
 * `batch_size` 0), `DC_ERR_OUT_OF_RANGE` (a cell >= n_cells: the message names its index
 * and value; every cell is checked here), `DC_ERR_IO` (the pool's threads cannot start).
 *
 * # Safety
 * `ds` is a live handle; `cells` points to `n` values; `out` is writable.
 */
dc_status dc_dataset_batches(struct dc_dataset *ds,
                             const uint64_t *cells,
                             size_t n,
                             size_t batch_size,
                             uint32_t read_ahead,
                             struct dc_batches **out);

/**
 * Rows and nonzeros of the next batch (to size buffers): `*n_rows = 0` at the end. Either
 * out-pointer may be NULL if not wanted. Waits for the batch's plan (header, chunk table and
 * indptr of its tiles; no decompression).
 *
 * Errors: the errors of reading the batch's tile indexes (they name the tile); the batch
 * stays the next one and `dc_batches_next` returns the same error.
 *
 * # Safety
 * `b` is a live iterator; the out-pointers are NULL or writable.
 */
dc_status dc_batches_peek(struct dc_batches *b, uint64_t *n_rows, uint64_t *nnz);

/**
 * The next batch into caller buffers, exactly as `dc_dataset_gather` of its cells writes
 * them: `indptr[n_rows + 1]` (starting at 0), `indices[capacity]`, `values[capacity]` of
 * type `dtype`; `*n_rows_out` rows and `*nnz_out` nonzeros. At the end: `DC_OK` with
 * `*n_rows_out = 0` and `*nnz_out = 0`, nothing else written (the buffers may be NULL).
 *
 * Size query: if `capacity` is below the batch's nnz, returns `DC_ERR_BUFFER_TOO_SMALL`
 * with `*nnz_out` = the needed nnz, and the batch stays the next one (`indptr`, `indices`,
 * `values` may then be NULL); `dc_batches_peek` gives the same numbers.
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (NULL `b`, `n_rows_out`, `nnz_out`, or a NULL buffer
 * the batch needs; bad dtype), and the errors of reading the batch's tiles
 * (`DC_ERR_FORMAT`, `DC_ERR_CHECKSUM`, `DC_ERR_NOT_FOUND`, `DC_ERR_IO`, ...), whose
 * message names the tile and, where one chunk is at fault, the chunk and cell. After such
 * an error the batch is consumed: the iterator stays usable and the next call returns the
 * batch after it. On error the buffers hold no meaning.
 *
 * # Safety
 * `b` is a live iterator; `indptr` has room for n_rows + 1 values (at most batch_size + 1),
 * `indices` and `values` for `capacity` elements (of the type `dtype` names); no buffer
 * overlaps another; the out-pointers are writable.
 */
dc_status dc_batches_next(struct dc_batches *b,
                          dc_dtype dtype,
                          int64_t *indptr,
                          int32_t *indices,
                          void *values,
                          uint64_t capacity,
                          uint64_t *n_rows_out,
                          uint64_t *nnz_out);

/**
 * Releases a batch iterator: read-ahead not yet started is cancelled, read-ahead running
 * is waited for (at most one chunk per thread), and what was read ahead is released; no
 * work of the iterator continues after this returns. NULL is a no-op.
 *
 * # Safety
 * `b` is NULL or an iterator from `dc_dataset_batches` not yet freed, not in use by
 * another thread.
 */
void dc_batches_free(struct dc_batches *b);

/**
 * A block-shuffled permutation of all cells into `out[0..n_cells)`: the tiles in a random
 * order, the cells shuffled within windows of `window_tiles` consecutive tiles of that
 * order (0 = 1), so that each window's cells come together. The same `seed` gives the same
 * order on every platform: the stream is SplitMix64 seeded with `seed`; a draw below m is
 * Lemire's multiply-shift with rejection (x = next, p = x * m in 128 bits, redraw while
 * (p mod 2^64) < (2^64 - m) mod m, result p >> 64); a shuffle is Fisher-Yates from the end
 * (for i = len-1 down to 1, swap a[i] with a[draw below i+1]). First the tile indices
 * 0..n_tiles are shuffled; then, window after window of that order, the window's cells
 * (its tiles in window order, each tile's cells ascending) are listed and shuffled with the
 * same stream, and appended.
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (NULL `ds`, NULL `out` with n_cells > 0),
 * `DC_ERR_BUFFER_TOO_SMALL` (`len` < n_cells; the message gives n_cells).
 *
 * # Safety
 * `ds` is a live handle; `out` has room for `len` values.
 */
dc_status dc_dataset_shuffled_order(const struct dc_dataset *ds,
                                    uint64_t seed,
                                    uint32_t window_tiles,
                                    uint64_t *out,
                                    size_t len);

/**
 * Opens a store — a `*.chromdata.zarr` directory or a `.cdz` file, a `file://` URL, or an
 * object-store URL (`s3://bucket/prefix/x.chromdata.zarr`, `gs://…`, `az://…`,
 * `http(s)://…/x.cdz`; settings from the environment, see `dc_chromdata_open_opts`). Reads
 * the metadata, the index arrays, the small tables and the Parquet footers, and validates
 * them (spec §14).
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, bad UTF-8, a malformed URL), `DC_ERR_NOT_FOUND`
 * (path, prefix or a referenced part missing), `DC_ERR_FORMAT` (malformed or
 * inconsistent), `DC_ERR_UNSUPPORTED` (version, layout; a URL in a build without remote
 * storage), `DC_ERR_IO`.
 *
 * # Safety
 * `path` is a NUL-terminated string; `out` is writable.
 */
dc_status dc_chromdata_open(const char *path, struct dc_chromdata **out);

/**
 * Like `dc_chromdata_open`, with `n_options` settings `"key=value"` (C API §7):
 * object-store settings under the `object_store` crate's names (`aws_endpoint`,
 * `aws_region`, `aws_access_key_id`, `aws_secret_access_key`, `allow_http`, …) and the
 * library's `max_concurrency` (requests in flight per handle, 1..1024, default 16),
 * `timeout_ms` (per request, default 30000) and `retries` (default 5, exponential
 * backoff); what is not given comes from the standard environment variables. A URL whose
 * last component ends in `.cdz` is one `.cdz` object (its central directory and members
 * read by byte ranges), any other a directory store under that prefix. Remote reads: the
 * metadata and Zarr chunks one GET each, Parquet by byte ranges (footers once per handle,
 * the needed column chunks of the needed row groups, adjacent chunks in one request).
 * After the retries a failure is `DC_ERR_IO` naming the URL, the operation and the HTTP
 * status or transport error; no call waits past its timeouts; credentials never appear in
 * messages.
 *
 * Errors: those of `dc_chromdata_open`; `DC_ERR_INVALID_ARGUMENT` (an unknown key, a bad
 * value, `options` NULL with `n_options` > 0).
 *
 * # Safety
 * `path` is a NUL-terminated string; `options` is NULL (only with `n_options` = 0) or
 * points to `n_options` NUL-terminated strings; `out` is writable.
 */
dc_status dc_chromdata_open_opts(const char *path,
                                 const char *const *options,
                                 size_t n_options,
                                 struct dc_chromdata **out);

/**
 * Releases a handle (NULL: no-op), and the result memory it kept (see
 * `dc_chromdata_read_spots`). Streams obtained from it stay valid.
 *
 * # Safety
 * `cd` is NULL or a handle from `dc_chromdata_open` not yet freed, unused by other threads.
 */
void dc_chromdata_free(struct dc_chromdata *cd);

/**
 * Fills `*out` with the store's version, layout and counts.
 *
 * # Safety
 * `cd` is a live handle; `out` is writable.
 */
dc_status dc_chromdata_info_get(const struct dc_chromdata *cd, struct dc_chromdata_info *out);

/**
 * A small table: "bins", "bin_tracks", "traces", "cells", "intervals/<key>",
 * "points/<key>" (dictionary columns decoded, strings as utf8). Absent → `DC_ERR_NOT_FOUND`.
 *
 * # Safety
 * `cd` is a live handle; `name` a NUL-terminated string; `out` writable.
 */
dc_status dc_chromdata_table(struct dc_chromdata *cd,
                             const char *name,
                             struct ArrowArrayStream *out);

/**
 * Original keys of a kind ("layers", "intervals", "points", "cellm", "binm", "results",
 * "uns", "contacts", "links") as a one-column utf8 table "key", in logical order.
 *
 * # Safety
 * `cd` is a live handle; `kind` a NUL-terminated string; `out` writable.
 */
dc_status dc_chromdata_keys(struct dc_chromdata *cd,
                            const char *kind,
                            struct ArrowArrayStream *out);

/**
 * The category list of a coded column, e.g. ("spots", "trace_id"), as a one-column table
 * "category" (utf8, int64, float64 or bool).
 *
 * # Safety
 * `cd` is a live handle; `table`, `column` NUL-terminated strings; `out` writable.
 */
dc_status dc_chromdata_categories(struct dc_chromdata *cd,
                                  const char *table,
                                  const char *column,
                                  struct ArrowArrayStream *out);

/**
 * All spots of a trace, across cells and chromosomes, in canonical order (spec §15.2).
 * `columns`: NULL/0 = all; {"coords"} = keys + x, y, z; or explicit names. For integer
 * trace categories `trace_id` is the decimal value. Unknown id or column →
 * `DC_ERR_NOT_FOUND`.
 *
 * # Safety
 * `cd` live; `trace_id` NUL-terminated; `columns` NULL or `n_columns` strings; `out` writable.
 */
dc_status dc_chromdata_get_trace(struct dc_chromdata *cd,
                                 const char *trace_id,
                                 const char *const *columns,
                                 size_t n_columns,
                                 struct ArrowArrayStream *out);

/**
 * All spots of a cell, in canonical order. A store without cell_id → `DC_ERR_NOT_FOUND`.
 *
 * # Safety
 * As `dc_chromdata_get_trace`.
 */
dc_status dc_chromdata_get_cell(struct dc_chromdata *cd,
                                const char *cell_id,
                                const char *const *columns,
                                size_t n_columns,
                                struct ArrowArrayStream *out);

/**
 * All spots on a chromosome, in canonical order.
 *
 * # Safety
 * As `dc_chromdata_get_trace`.
 */
dc_status dc_chromdata_get_chrom(struct dc_chromdata *cd,
                                 const char *chrom,
                                 const char *const *columns,
                                 size_t n_columns,
                                 struct ArrowArrayStream *out);

/**
 * Batches of `batch` whole runs (one trace in one cell and chromosome) in stored order,
 * read row group by row group as the stream is consumed. `batch` 0 →
 * `DC_ERR_INVALID_ARGUMENT`.
 *
 * # Safety
 * `cd` live; `columns` NULL or `n_columns` strings; `out` writable.
 */
dc_status dc_chromdata_iter_traces(struct dc_chromdata *cd,
                                   uint64_t batch,
                                   const char *const *columns,
                                   size_t n_columns,
                                   struct ArrowArrayStream *out);

/**
 * Batches of `batch` cell segments in stored order. No cell_id → `DC_ERR_NOT_FOUND`.
 *
 * # Safety
 * As `dc_chromdata_iter_traces`.
 */
dc_status dc_chromdata_iter_cells(struct dc_chromdata *cd,
                                  uint64_t batch,
                                  const char *const *columns,
                                  size_t n_columns,
                                  struct ArrowArrayStream *out);

/**
 * The whole spot table in canonical order; `original_order` non-zero restores the
 * written order (source_row).
 *
 * Memory: when you release a large result (its fixed-width columns, 2 MiB or more), the
 * handle keeps that memory for its next query, as pyarrow's allocator keeps freed memory:
 * at most `DELTACELLS_CHROMDATA_RETAIN_BYTES` bytes per handle (environment variable read
 * at open; default a quarter of physical memory, 0 keeps nothing), memory unused for a
 * second is freed at the handle's next query or release, and all of it at
 * `dc_chromdata_free` (kept memory is also given back to the kernel as reclaimable under
 * memory pressure). Every query returning spots does this.
 *
 * # Safety
 * `cd` live; `columns` NULL or `n_columns` strings; `out` writable.
 */
dc_status dc_chromdata_read_spots(struct dc_chromdata *cd,
                                  int original_order,
                                  const char *const *columns,
                                  size_t n_columns,
                                  struct ArrowArrayStream *out);

/**
 * Metadata of a pass-through entry as JSON (UTF-8, no NUL terminator), in a buffer the
 * caller releases with `dc_bytes_free`. `kind` and `path` (original keys; member keys
 * inside results mappings, `n_path` = depth):
 * - "results", {key, ...} → `{"type", "kind", "function", "params", "inputs",
 *   "uchrom_version", "created_utc" (each only if stored), "value" (json entries: the
 *   stored tagged JSON), "keys" (mappings: member keys in order)}`;
 * - "cellm" | "binm", {key} → `{"shape": [...], "dtype": "float64" | ...}`;
 * - "intervals", {key} → `{"kind": ..., "source_result": ... or null}`; "points", {key} → `{}`;
 * - "uns", n_path 0 → the stored tagged-JSON dict (array references left as tags);
 * - "contacts" | "links", n_path 0 → the records, each with "resolved_path" added.
 *
 * Unknown kind or key → `DC_ERR_NOT_FOUND`; a path of the wrong depth →
 * `DC_ERR_INVALID_ARGUMENT`; malformed stored metadata → `DC_ERR_FORMAT`.
 *
 * # Safety
 * `cd` is a live handle; `kind` a NUL-terminated string; `path` NULL (n_path 0) or
 * `n_path` strings; `json_out` and `len_out` writable.
 */
dc_status dc_chromdata_attrs(struct dc_chromdata *cd,
                             const char *kind,
                             const char *const *path,
                             size_t n_path,
                             uint8_t **json_out,
                             size_t *len_out);

/**
 * An array entry ("cellm" / "binm" {key}, "results" {key, ...} of type array, "uns"
 * {stored array name}) as one record batch with one non-null column "value": 1-D → a
 * primitive array of the stored type; 2-D (n, k) → FixedSizeList<k>; more dimensions →
 * nested FixedSizeLists, row-major. Rows = the first dimension; the field metadata
 * "shape" holds the full shape as a JSON list.
 *
 * Errors: unknown kind or key → `DC_ERR_NOT_FOUND`; a results entry that is not an array
 * → `DC_ERR_INVALID_ARGUMENT`; a data type or codec this build does not read →
 * `DC_ERR_UNSUPPORTED`.
 *
 * # Safety
 * `cd` is a live handle; `kind` a NUL-terminated string; `path` NULL (n_path 0) or
 * `n_path` strings; `out` writable.
 */
dc_status dc_chromdata_array(struct dc_chromdata *cd,
                             const char *kind,
                             const char *const *path,
                             size_t n_path,
                             struct ArrowArrayStream *out);

/**
 * A results entry of type table ({key, member keys...}) as a stream, normalised as
 * `dc_chromdata_table` normalises tables. Unknown key → `DC_ERR_NOT_FOUND`; an entry of
 * another type → `DC_ERR_INVALID_ARGUMENT`.
 *
 * # Safety
 * `cd` is a live handle; `path` points to `n_path` strings; `out` writable.
 */
dc_status dc_chromdata_result_table(struct dc_chromdata *cd,
                                    const char *const *path,
                                    size_t n_path,
                                    struct ArrowArrayStream *out);

/**
 * Starts writing a ChromData store at `path`: a `*.chromdata.zarr` directory, or a zip
 * when the path ends in `.cdz` (its parent must exist). Everything is built in a hidden
 * temporary sibling `.<name>.tmp-<pid>-<random>` and moved into place by
 * `dc_chromdata_writer_finish`; the target is checked there (`DC_ERR_EXISTS`). `path` may
 * also be an object-store URL (`s3://bucket/prefix/name.chromdata.zarr`, `…/name.cdz`,
 * `gs://…`, `az://…`; settings from the environment, see `dc_chromdata_writer_create_opts`).
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, bad UTF-8, no final name, a malformed URL),
 * `DC_ERR_NOT_FOUND` (parent directory), `DC_ERR_UNSUPPORTED` (an http(s):// URL, which is
 * read only), `DC_ERR_IO`.
 *
 * # Safety
 * `path` is a NUL-terminated string; `out` is writable.
 */
dc_status dc_chromdata_writer_create(const char *path, struct dc_chromdata_writer **out);

/**
 * Like `dc_chromdata_writer_create` at `url` (a path or a URL), with `n_options` settings
 * `"key=value"` (as for `dc_dataset_open_opts`). To an object store, the store is built in a local spill
 * directory (`$DELTACELLS_SPILL_DIR`, else the system's temporary directory) and uploaded
 * by `dc_chromdata_writer_finish`: a `.cdz` as one multipart upload (complete or absent:
 * aborted on any failure), a directory store as every object first and its root
 * `zarr.json` last (a prefix without it does not open). With `DC_CDW_OVERWRITE`, an old
 * directory store's root `zarr.json` is deleted first, then its other objects. Objects
 * under a directory target without a store's root `zarr.json` (what a write that died
 * leaves) are refused (`DC_ERR_EXISTS`), never deleted. A write that dies leaves nothing
 * that opens; after the retries, a failed request is `DC_ERR_IO` naming the URL.
 *
 * Errors: those of `dc_chromdata_writer_create`; `DC_ERR_INVALID_ARGUMENT` (an unknown
 * key, a bad value, `options` NULL with `n_options` > 0).
 *
 * # Safety
 * `url` is a NUL-terminated string; `options` is NULL (only with `n_options` = 0) or
 * points to `n_options` NUL-terminated strings; `out` is writable.
 */
dc_status dc_chromdata_writer_create_opts(const char *url,
                                          const char *const *options,
                                          size_t n_options,
                                          struct dc_chromdata_writer **out);

/**
 * Sets a parameter (`DC_CDW_*`). Errors: `DC_ERR_INVALID_ARGUMENT` (unknown parameter,
 * value out of range), `DC_ERR_STATE` (after finish).
 *
 * # Safety
 * `w` is NULL or a live handle.
 */
dc_status dc_chromdata_writer_set(struct dc_chromdata_writer *w,
                                  dc_chromdata_writer_param p,
                                  int64_t value);

/**
 * The range of values `dc_chromdata_writer_set` accepts for `p`: `*min ..= *max` (for
 * `DC_CDW_MEMORY_BUDGET` also: 0 or at least 1 MiB; for `DC_CDW_LAYOUT` the `dc_layout`
 * values). Needs no handle.
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (unknown parameter, NULL).
 *
 * # Safety
 * `min` and `max` are writable.
 */
dc_status dc_chromdata_writer_param_bounds(dc_chromdata_writer_param p, int64_t *min, int64_t *max);

/**
 * Sets the bins table (chrom, start, end, ...), before the first append. `bins` (a struct
 * array) is moved into the library (released on every path); `schema` is borrowed.
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, bad table), `DC_ERR_UNSUPPORTED` (column type),
 * `DC_ERR_STATE` (after an append or finish).
 *
 * # Safety
 * `bins` is NULL or a valid `struct ArrowArray`; `schema` NULL or a valid
 * `struct ArrowSchema` describing it.
 */
dc_status dc_chromdata_writer_set_bins(struct dc_chromdata_writer *w,
                                       struct ArrowArray *bins,
                                       struct ArrowSchema *schema);

/**
 * Appends spots in any order: chrom, start, end (or bin_id with bins set), trace_id,
 * [cell_id], [x, y, z], extra columns (`spot_tracks/<name>`, `layers/<key>/x|y|z` for
 * tracks and layers). `batch` is moved into the library; `schema` is borrowed.
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, missing / inconsistent columns, types that
 * cannot be unified), `DC_ERR_UNSUPPORTED` (column type), `DC_ERR_IO` (spill),
 * `DC_ERR_STATE` (after finish).
 *
 * # Safety
 * As `dc_chromdata_writer_set_bins`.
 */
dc_status dc_chromdata_writer_append(struct dc_chromdata_writer *w,
                                     struct ArrowArray *batch,
                                     struct ArrowSchema *schema);

/**
 * Sets the bin tracks (spec §5.2): one row per bin of the table given with
 * `dc_chromdata_writer_set_bins` (row i = bin i); columns bool, integers, floats or
 * strings. Any time before finish; a second call replaces the first. `table` (a struct
 * array) is moved into the library (released on every path); `schema` is borrowed.
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, row count differs from the bins, no columns,
 * empty or repeated names), `DC_ERR_UNSUPPORTED` (column type), `DC_ERR_STATE` (no bins
 * table set, or after finish).
 *
 * # Safety
 * As `dc_chromdata_writer_set_bins`.
 */
dc_status dc_chromdata_writer_set_bin_tracks(struct dc_chromdata_writer *w,
                                             struct ArrowArray *table,
                                             struct ArrowSchema *schema);

/**
 * Adds a pass-through table (spec §12), stored as given: `collection` is `"intervals"`
 * (then `kind` is `"domain"`, `"pair"`, `"peak"`, `"segment"` — their required columns are
 * checked — or any other non-empty kind) or `"points"` (then `kind` is NULL or `""`). `key` is
 * the table's name (unique per collection; any UTF-8, stored under a portable file
 * name). The table is written to the temporary directory at once. Any time before
 * finish. `table` is moved into the library; `schema` is borrowed.
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (NULL where a string is needed, unknown collection,
 * missing kind or required column, empty key), `DC_ERR_EXISTS` (key used already),
 * `DC_ERR_UNSUPPORTED` (a type Parquet cannot store), `DC_ERR_IO`, `DC_ERR_STATE`.
 *
 * # Safety
 * `collection`, `key` are NUL-terminated strings, `kind` one or NULL; `table` and
 * `schema` as in `dc_chromdata_writer_set_bins`.
 */
dc_status dc_chromdata_writer_add_table(struct dc_chromdata_writer *w,
                                        const char *collection,
                                        const char *key,
                                        const char *kind,
                                        struct ArrowArray *table,
                                        struct ArrowSchema *schema);

/**
 * Merges the spilled runs, writes the layout, the index and the metadata, and moves the
 * store into place atomically. On error nothing is left at the target.
 *
 * Errors: `DC_ERR_EXISTS`, `DC_ERR_IO`, `DC_ERR_STATE` (finished or failed before).
 *
 * # Safety
 * `w` is NULL or a live handle.
 */
dc_status dc_chromdata_writer_finish(struct dc_chromdata_writer *w);

/**
 * Releases the writer; without a successful finish the write is abandoned and its
 * temporary files removed. NULL is a no-op.
 *
 * # Safety
 * `w` is NULL or a handle from `dc_chromdata_writer_create`, not used afterwards.
 */
void dc_chromdata_writer_free(struct dc_chromdata_writer *w);

/**
 * Fixes the category list of a coded column: "trace_id", "cell_id" or an extra
 * categorical spot column; before the first append. `values` is a batch of one column
 * (any name; strings or integers, distinct, no nulls), moved in; `schema` borrowed. The
 * list keeps its order and unused categories. Without this call, a dictionary-typed
 * column of the first appended batch fixes the list (its dictionary, in order); later
 * batches then carry the same dictionary. Plain values give sorted categories.
 *
 * Errors: `DC_ERR_STATE` (after the first append, or finish), `DC_ERR_EXISTS` (the
 * column's list was given already), `DC_ERR_INVALID_ARGUMENT` (NULL, nulls, duplicates),
 * `DC_ERR_UNSUPPORTED` (a value type other than strings or integers). An appended value
 * outside the list is `DC_ERR_INVALID_ARGUMENT` naming it.
 *
 * # Safety
 * `w` NULL or a live handle; `column` a NUL-terminated string; `values` NULL or a valid
 * `struct ArrowArray`; `schema` NULL or a valid `struct ArrowSchema` describing it.
 */
dc_status dc_chromdata_writer_set_categories(struct dc_chromdata_writer *w,
                                             const char *column,
                                             struct ArrowArray *values,
                                             struct ArrowSchema *schema);

/**
 * Sets the "traces" or "cells" annotation table (chromdata-zarr.md §5.3): a first column
 * `trace_id` / `cell_id` holding each category once (any order; the writer orders rows
 * by category), then annotation columns (bool, integers, floats, strings; dictionary
 * columns are categorical and keep their dictionary). Moved in; any time before finish.
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (unknown name, first column, repeated ids, ids not
 * among given categories; ids missing from the table are reported by finish),
 * `DC_ERR_EXISTS` (set twice), `DC_ERR_UNSUPPORTED` (a column type), `DC_ERR_STATE`.
 *
 * # Safety
 * As `dc_chromdata_writer_set_categories`.
 */
dc_status dc_chromdata_writer_set_table(struct dc_chromdata_writer *w,
                                        const char *name,
                                        struct ArrowArray *table,
                                        struct ArrowSchema *schema);

/**
 * Adds a "cellm" or "binm" array under `key`, encoded as `dc_chromdata_array` returns it:
 * a batch of one column, primitive (1-D) or nested FixedSizeLists, no nulls; the field
 * metadata "shape" (a JSON list), when present, must agree (it gives the inner
 * dimensions of an array without rows). First dimension n_cells / n_bins, checked now
 * when known, else by finish. Written to disk at the call (not held in memory).
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (unknown kind, empty key, nulls, wrong first
 * dimension), `DC_ERR_EXISTS` (key added already), `DC_ERR_UNSUPPORTED` (an element
 * type a Zarr array cannot hold: bool, integers, float32, float64 only).
 *
 * # Safety
 * As `dc_chromdata_writer_set_categories`; `kind`, `key` NUL-terminated strings.
 */
dc_status dc_chromdata_writer_add_array(struct dc_chromdata_writer *w,
                                        const char *kind,
                                        const char *key,
                                        struct ArrowArray *array,
                                        struct ArrowSchema *schema);

/**
 * Adds a results entry at `path` (its key, then member keys inside mappings; n_path =
 * depth). `attrs_json` is what `dc_chromdata_attrs` returns for results: `"type"`
 * required (table, array, json or mapping), `"value"` for json entries, provenance
 * (kind, function, params, inputs, uchrom_version, created_utc) optional, `"keys"`
 * ignored. `data`: the table ("table") or the one-column array batch ("array"), moved
 * in; NULL (and `schema` NULL) for json and mapping. A mapping's members come after it.
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (bad JSON, unknown type, data not matching the type,
 * a member of an entry that is not a mapping), `DC_ERR_NOT_FOUND` (a member before its
 * mapping), `DC_ERR_EXISTS` (key added already), `DC_ERR_UNSUPPORTED` (a type Parquet
 * or Zarr cannot store).
 *
 * # Safety
 * `w` NULL or a live handle; `path` NULL (n_path 0) or `n_path` strings; `attrs_json` a
 * NUL-terminated string; `data` NULL or a valid `struct ArrowArray` and `schema` a valid
 * `struct ArrowSchema` describing it.
 */
dc_status dc_chromdata_writer_add_result(struct dc_chromdata_writer *w,
                                         const char *const *path,
                                         size_t n_path,
                                         const char *attrs_json,
                                         struct ArrowArray *data,
                                         struct ArrowSchema *schema);

/**
 * JSON parts (chromdata-zarr.md §12): ("uns", NULL, a tagged-JSON dict; inline ndarray
 * tags of any size, the writer applies the 64-element rule), ("contacts", NULL, an array
 * of records with "key" and "path"), ("links", NULL, the same) — the writer adds
 * "relative_path" where §12 asks — and ("intervals", key, `{"source_result": ...}`) for
 * a table added with `dc_chromdata_writer_add_table`.
 *
 * An empty `key` is the same as NULL.
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (unknown kind, bad JSON, a key for another kind),
 * `DC_ERR_NOT_FOUND` (unknown intervals key), `DC_ERR_EXISTS` (set twice, record keys
 * repeated), `DC_ERR_UNSUPPORTED` (an ndarray dtype Zarr cannot store).
 *
 * # Safety
 * `w` NULL or a live handle; `kind`, `json` NUL-terminated strings; `key` NULL or one.
 */
dc_status dc_chromdata_writer_set_json(struct dc_chromdata_writer *w,
                                       const char *kind,
                                       const char *key,
                                       const char *json);

/**
 * Rewrites a store (any version, layout, directory or .cdz) into another layout and
 * place with everything it holds, keeping the original row order recoverable
 * (source_row); e.g. a 2.0 / 2.1 store into 2.2. Streaming, under the writer's default
 * memory budget; `dst` ending in `.cdz` writes a zip. `overwrite` non-zero replaces a
 * store at `dst`.
 *
 * Errors: those of `dc_chromdata_open` for `src`; `DC_ERR_EXISTS` (a store at `dst` and
 * `overwrite` 0, or something else there); `DC_ERR_INVALID_ARGUMENT` (NULL, a bad
 * layout, `dst` is `src`); `DC_ERR_IO`.
 *
 * # Safety
 * `src`, `dst` are NUL-terminated strings.
 */
dc_status dc_chromdata_rewrite(const char *src, const char *dst, dc_layout layout, int overwrite);

/**
 * Opens the dataset at `path` — a directory, a `file://` URL, or an object-store URL
 * (`s3://bucket/prefix`, `gs://…`, `az://…`, `http(s)://…`; settings from the environment,
 * see `dc_dataset_open_opts`) — and validates its `manifest.json` (format, version, and the
 * consistency of every count). Tiles are read on demand.
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, bad UTF-8, a malformed URL), `DC_ERR_NOT_FOUND`
 * (no such directory or prefix, or no manifest.json: an incomplete dataset),
 * `DC_ERR_FORMAT` (bad manifest), `DC_ERR_UNSUPPORTED` (another format or version; a URL in
 * a build without remote storage), `DC_ERR_IO`.
 *
 * # Safety
 * `path` is a NUL-terminated string; `out` is writable.
 */
dc_status dc_dataset_open(const char *path, struct dc_dataset **out);

/**
 * Like `dc_dataset_open`, with `n_options` settings `"key=value"` (C API §7):
 * object-store settings under the `object_store` crate's names (`aws_endpoint`,
 * `aws_region`, `aws_access_key_id`, `aws_secret_access_key`, `allow_http`,
 * `google_service_account`, `azure_storage_account_name`, …), and the library's
 * `max_concurrency` (requests in flight per handle, 1..1024, default 16), `timeout_ms` (per
 * request, default 30000) and `retries` (default 5, exponential backoff). What is not given
 * comes from the standard environment variables (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`,
 * …). Remote reads: one GET per tile (the tiles of a gather concurrently), obs and var by
 * byte ranges; after the retries a failure is `DC_ERR_IO` naming the URL, the operation and
 * the HTTP status or transport error; no call waits past its timeouts. Credentials never
 * appear in messages.
 *
 * Errors: those of `dc_dataset_open`; `DC_ERR_INVALID_ARGUMENT` (an unknown key, a bad
 * value, `options` NULL with `n_options` > 0).
 *
 * # Safety
 * `path` is a NUL-terminated string; `options` is NULL (only with `n_options` = 0) or
 * points to `n_options` NUL-terminated strings; `out` is writable.
 */
dc_status dc_dataset_open_opts(const char *path,
                               const char *const *options,
                               size_t n_options,
                               struct dc_dataset **out);

/**
 * Releases a dataset handle and everything it owns (strings returned by
 * `dc_dataset_var_name` become invalid). NULL is a no-op.
 *
 * # Safety
 * `ds` is NULL or a handle from `dc_dataset_open` not yet freed, and no other thread is
 * using it.
 */
void dc_dataset_free(struct dc_dataset *ds);

/**
 * Sets a parameter of the handle: `DC_DATASET_THREADS` (>= 0), `DC_DATASET_TILE_CACHE`
 * (>= 0 tiles; shrinking evicts at once), `DC_DATASET_VERIFY_CRC` (0 or 1),
 * `DC_DATASET_CACHE_BYTES` (>= 0 bytes); `dc_dataset_param_bounds` gives each range. Safe to call
 * while other threads use the handle; calls already running keep their settings.
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, unknown parameter, value out of range).
 *
 * # Safety
 * `ds` is a live handle from `dc_dataset_open`.
 */
dc_status dc_dataset_set(struct dc_dataset *ds, dc_dataset_param p, int64_t value);

/**
 * The range of values `dc_dataset_set` accepts for `p`: `*min ..= *max`. Needs no handle.
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (unknown parameter, NULL).
 *
 * # Safety
 * `min` and `max` are writable.
 */
dc_status dc_dataset_param_bounds(dc_dataset_param p, int64_t *min, int64_t *max);

/**
 * Fills `*out` with the dataset's summary.
 *
 * # Safety
 * `ds` is a live handle; `out` is writable.
 */
dc_status dc_dataset_info_get(const struct dc_dataset *ds, struct dc_dataset_info *out);

/**
 * Tile `tile` holds global cells `[*first_cell, *first_cell + *n_cells)` and `*nnz` stored
 * nonzeros (from the manifest; nothing is read). Any out-pointer may be NULL if not wanted.
 *
 * Errors: `DC_ERR_OUT_OF_RANGE` (tile >= n_tiles).
 *
 * # Safety
 * `ds` is a live handle; the out-pointers are NULL or writable.
 */
dc_status dc_dataset_tile_bounds(const struct dc_dataset *ds,
                                 uint64_t tile,
                                 uint64_t *first_cell,
                                 uint64_t *n_cells,
                                 uint64_t *nnz);

/**
 * Decodes tile `tile` into caller buffers: `indptr[n_cells + 1]` (offsets local to the
 * tile, starting at 0), `indices[capacity]` (gene indices, increasing within a cell) and
 * `values[capacity]` of type `dtype`. On success `*nnz_out` is the tile's nnz. The tile's
 * header must agree with the manifest (cells, nnz, genes, size).
 *
 * Size query: if `capacity` is below the tile's nnz, returns `DC_ERR_BUFFER_TOO_SMALL` with
 * `*nnz_out` = nnz (`indptr`, `indices`, `values` may then be NULL); see also
 * `dc_dataset_tile_bounds`.
 *
 * Errors: `DC_ERR_OUT_OF_RANGE` (tile), `DC_ERR_NOT_FOUND` (tile file missing),
 * `DC_ERR_FORMAT`, `DC_ERR_CHECKSUM`, `DC_ERR_UNSUPPORTED`, `DC_ERR_IO`. On error the
 * buffers hold no meaning.
 *
 * # Safety
 * `ds` is a live handle; `indptr` has room for n_cells + 1 values, `indices` and `values`
 * for `capacity` elements (of the type `dtype` names); no buffer overlaps another.
 */
dc_status dc_dataset_read_tile(struct dc_dataset *ds,
                               uint64_t tile,
                               dc_dtype dtype,
                               int64_t *indptr,
                               int32_t *indices,
                               void *values,
                               uint64_t capacity,
                               uint64_t *nnz_out);

/**
 * Stored nonzeros of the cells `cells[0..n]` (repeats count again): the capacity a
 * `dc_dataset_gather` of the same cells needs. Reads only tile headers and indptrs (no
 * decompression; cached per tile).
 *
 * Errors: `DC_ERR_OUT_OF_RANGE` (a cell >= n_cells; the message names it), and the errors
 * of reading a tile header.
 *
 * # Safety
 * `ds` is a live handle; `cells` points to `n` values (NULL allowed if n = 0); `nnz_out` is
 * writable.
 */
dc_status dc_dataset_batch_nnz(struct dc_dataset *ds,
                               const uint64_t *cells,
                               size_t n,
                               uint64_t *nnz_out);

/**
 * Gathers the cells `cells[0..n]` (any order, repeats allowed, across tiles) into CSR: row
 * i of the result is cell `cells[i]`. Outputs: `indptr[n + 1]` (starting at 0),
 * `indices[capacity]`, `values[capacity]` of type `dtype`; on success `*nnz_out` is the
 * result's nnz. Only the chunks holding requested cells are decompressed (or taken from
 * the handle's decoded-data cache, `DC_DATASET_CACHE_BYTES`), each tile read at most once
 * per call, in parallel (`DC_DATASET_THREADS`); every cell is written straight into its
 * rows of the outputs. The cells returned are checked against every rule of the format.
 *
 * Size query: if `capacity` is below the result's nnz, returns `DC_ERR_BUFFER_TOO_SMALL`
 * with `*nnz_out` = the needed nnz, having decoded nothing (`indptr`, `indices`, `values`
 * may then be NULL); `dc_dataset_batch_nnz` gives the same number.
 *
 * Errors: `DC_ERR_OUT_OF_RANGE` (a cell >= n_cells), and the errors of reading a tile
 * (`DC_ERR_FORMAT`, `DC_ERR_CHECKSUM`, `DC_ERR_NOT_FOUND`, `DC_ERR_IO`, ...), which name
 * the tile. On error the buffers hold no meaning.
 *
 * # Safety
 * `ds` is a live handle; `cells` points to `n` values; `indptr` has room for n + 1 values,
 * `indices` and `values` for `capacity` elements (of the type `dtype` names); no buffer
 * overlaps another or `cells`.
 */
dc_status dc_dataset_gather(struct dc_dataset *ds,
                            const uint64_t *cells,
                            size_t n,
                            dc_dtype dtype,
                            int64_t *indptr,
                            int32_t *indices,
                            void *values,
                            uint64_t capacity,
                            uint64_t *nnz_out);

/**
 * Copies the gene order (`gene_order.npy`) to `out[0..n_genes]`: output column j was
 * input column `out[j]`. `len` is the room in `out` and must be at least n_genes.
 *
 * Errors: `DC_ERR_NOT_FOUND` (the dataset has no gene order), `DC_ERR_BUFFER_TOO_SMALL`
 * (len < n_genes), `DC_ERR_FORMAT` (the file is missing or not a valid int32 permutation).
 *
 * # Safety
 * `ds` is a live handle; `out` has room for `len` values.
 */
dc_status dc_dataset_gene_order(const struct dc_dataset *ds, int32_t *out, size_t len);

/**
 * The name of output column `gene` (`var_names.txt`), as a NUL-terminated UTF-8 string
 * owned by the handle (valid until `dc_dataset_free`).
 *
 * Errors: `DC_ERR_NOT_FOUND` (the dataset has no gene names), `DC_ERR_OUT_OF_RANGE`
 * (gene >= n_genes), `DC_ERR_FORMAT` (the file is missing, not UTF-8, has a line count other
 * than n_genes, or a NUL byte).
 *
 * # Safety
 * `ds` is a live handle; `name_out` is writable.
 */
dc_status dc_dataset_var_name(const struct dc_dataset *ds, uint32_t gene, const char **name_out);

/**
 * The gene table (`var.parquet`: one row per output column, in output order, the pandas
 * index as a column) as an Arrow stream written to `*out`. The caller owns the stream and
 * calls its `release`; it stays valid after `dc_dataset_free`.
 *
 * Errors: `DC_ERR_NOT_FOUND` (the dataset has no gene table), `DC_ERR_FORMAT` (the file is
 * missing, unreadable, or does not have n_genes rows), `DC_ERR_IO`.
 *
 * # Safety
 * `ds` is a live handle; `out` is writable.
 */
dc_status dc_dataset_var_table(struct dc_dataset *ds, struct ArrowArrayStream *out);

/**
 * Obs columns `columns[0..n_columns]` (NULL or 0 = all, in schema order) as an Arrow
 * stream written to `*out`: one record batch per tile, in cell order. Category columns
 * arrive as dictionary arrays (int8/16/32 keys as stored, utf8 values = the global
 * vocabulary; a missing value is null); numeric, bool and string columns as stored. The
 * first request of a column copies it into the local cache (`dc_dataset_set_cache_dir`),
 * later ones read it from there. The caller owns the stream and calls its `release`; it
 * stays valid after `dc_dataset_free`.
 *
 * Errors: `DC_ERR_NOT_FOUND` (no obs, or an unknown column: the message names it),
 * `DC_ERR_INVALID_ARGUMENT` (NULL, bad UTF-8, a column named twice), `DC_ERR_FORMAT` (the
 * obs files disagree with the manifest), `DC_ERR_UNSUPPORTED`, `DC_ERR_IO`.
 *
 * # Safety
 * `ds` is a live handle; `columns` is NULL or points to `n_columns` NUL-terminated
 * strings; `out` is writable.
 */
dc_status dc_dataset_obs(struct dc_dataset *ds,
                         const char *const *columns,
                         size_t n_columns,
                         struct ArrowArrayStream *out);

/**
 * Sets the directory of the local obs column cache (columns go to
 * `<dir>/<obs_fingerprint>/obs/`). NULL restores the default: `$DELTACELLS_CACHE`, else
 * `$XDG_CACHE_HOME/deltacells`, else `~/.cache/deltacells`. A cache that cannot be
 * written is no error: obs is then read from the dataset each time.
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (NULL handle, bad UTF-8).
 *
 * # Safety
 * `ds` is a live handle; `dir` is NULL or a NUL-terminated string.
 */
dc_status dc_dataset_set_cache_dir(struct dc_dataset *ds, const char *dir);

/**
 * Name of a status code, e.g. `"DC_ERR_FORMAT"`; `"DC_UNKNOWN_STATUS"` for a value that
 * is not a status. The string is static.
 */
const char *dc_status_name(dc_status s);

/**
 * The message of the most recent failing call on the calling thread: one line naming the
 * object and the rule broken. Never NULL (empty if no call has failed on this thread).
 * Valid until the next `dc_` call on this thread.
 */
const char *dc_last_error(void);

/**
 * Validates a tile's header, chunk table, indptr and the headers of its zstd frames, and
 * (if `verify_crc` is non-zero) its CRC-32; fills `*info`. Decompresses nothing.
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (NULL), `DC_ERR_FORMAT` (structure), `DC_ERR_CHECKSUM`,
 * `DC_ERR_UNSUPPORTED` (version, flags, big-endian host).
 *
 * # Safety
 * `blob` points to `len` readable bytes; `info` is NULL or writable.
 */
dc_status dc_tile_inspect(const uint8_t *blob,
                          size_t len,
                          int32_t verify_crc,
                          struct dc_tile_info *info);

/**
 * Decodes a whole tile into caller buffers, making every check of the format.
 *
 * Outputs: `indptr[n_cells + 1]`, `indices[capacity]`, `values[capacity]` of type `dtype`
 * (`int32_t` or `float`). On success `*nnz_out` is the tile's nnz and the first nnz entries
 * of `indices` / `values` hold the cells' gene indices (increasing within a cell) and counts.
 *
 * Size query: if `capacity < nnz`, returns `DC_ERR_BUFFER_TOO_SMALL` with `*nnz_out = nnz`
 * (the tile is validated first; `indptr`, `indices`, `values` may then be NULL).
 * `n_threads` 0 = the library pool (`DELTACELLS_NUM_THREADS` or all cores); 1 decodes on the
 * calling thread. `verify_crc` non-zero checks the CRC-32 before decoding.
 * On any error the output buffers hold no meaning.
 *
 * # Safety
 * `blob` points to `len` readable bytes; `indptr` has room for `n_cells + 1` values and
 * `indices` / `values` for `capacity` elements each (NULL allowed where described above);
 * no output buffer overlaps another or the blob.
 */
dc_status dc_tile_decode(const uint8_t *blob,
                         size_t len,
                         uint32_t n_threads,
                         int32_t verify_crc,
                         dc_dtype dtype,
                         int64_t *indptr,
                         int32_t *indices,
                         void *values,
                         uint64_t capacity,
                         uint64_t *nnz_out);

/**
 * Encodes one tile from CSR rows (cells): `indptr[n_cells + 1]` (starting at 0,
 * non-decreasing), and `indptr[n_cells]` entries of `indices` (sorted and unique within a
 * row, in `0 .. n_genes-1`) and `values` (counts >= 1).
 *
 * `zstd_level` 0 = zstd's default (3; the format's writers use 19); `n_chunks` 0 = 8 (a tile
 * gets at most one chunk per cell); `n_threads` 0 = the library pool. The output is the
 * same for any thread count. On success `*blob_out` / `*len_out` receive a library-allocated
 * buffer; release it with `dc_bytes_free`.
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, bad CSR, bad level), `DC_ERR_LIMIT` (more than
 * max(1024, nnz/200) counts or gaps above 65535, or a chunk of 2^32 nonzeros).
 *
 * # Safety
 * `indptr` points to `n_cells + 1` readable values, `indices` and `values` to
 * `indptr[n_cells]` each (NULL allowed when that is 0); the out-pointers are writable.
 */
dc_status dc_tile_encode(uint64_t n_cells,
                         uint32_t n_genes,
                         const int64_t *indptr,
                         const int32_t *indices,
                         const int32_t *values,
                         int32_t zstd_level,
                         uint32_t n_chunks,
                         uint32_t n_threads,
                         uint8_t **blob_out,
                         size_t *len_out);

/**
 * Releases a buffer returned by the library (e.g. by `dc_tile_encode`). `blob` NULL is a
 * no-op; `len` is the length that was returned (accepted for symmetry, not needed).
 *
 * # Safety
 * `blob` is NULL or a buffer returned by the library and not yet released.
 */
void dc_bytes_free(uint8_t *blob, size_t len);

/**
 * The library version as "MAJOR.MINOR.PATCH" (static string).
 */
const char *dc_version(void);

/**
 * The ABI version the library was built with; compare with `DC_ABI_VERSION` to detect a
 * header/library mismatch at run time.
 */
uint32_t dc_abi_version(void);

/**
 * Starts writing a dataset of `n_genes` columns to the directory `path` (its parent must
 * exist). Everything is written to a hidden temporary directory next to it,
 * `.<name>.tmp-<pid>-<random>`, and moved into place by `dc_writer_finish`. `path` may also
 * be an object-store URL (`s3://bucket/prefix`, `gs://…`, `az://…`; settings from the
 * environment, see `dc_writer_create_opts`).
 *
 * Whether `path` may already exist is decided by `DC_WRITER_OVERWRITE`, which can be set
 * after this call: the check is made by the first `dc_writer_append_csr` and again by
 * `dc_writer_finish` (`DC_ERR_EXISTS`).
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, bad UTF-8, n_genes not in 1..2^31, a path without
 * a final name, a malformed URL), `DC_ERR_NOT_FOUND` (parent directory),
 * `DC_ERR_UNSUPPORTED` (an http(s):// URL, which is read only), `DC_ERR_IO`.
 *
 * # Safety
 * `path` is a NUL-terminated string; `out` is writable.
 */
dc_status dc_writer_create(const char *path, uint32_t n_genes, struct dc_writer **out);

/**
 * Like `dc_writer_create`, with `n_options` settings `"key=value"` (as for
 * `dc_dataset_open_opts`). To an object store, each tile is uploaded (one PUT) as soon as
 * it is encoded; obs shards and the other files are built in a local spill directory
 * (`$DELTACELLS_SPILL_DIR`, else the system's temporary directory) and uploaded by
 * `dc_writer_finish`, which uploads `manifest.json` last: a prefix without it is not a
 * dataset, so a write that dies leaves nothing that opens. With `DC_WRITER_OVERWRITE`, the
 * old manifest is deleted before the first tile is uploaded.
 *
 * Errors: those of `dc_writer_create`; `DC_ERR_INVALID_ARGUMENT` (an unknown key, a bad
 * value, `options` NULL with `n_options` > 0).
 *
 * # Safety
 * `path` is a NUL-terminated string; `options` is NULL (only with `n_options` = 0) or
 * points to `n_options` NUL-terminated strings; `out` is writable.
 */
dc_status dc_writer_create_opts(const char *path,
                                uint32_t n_genes,
                                const char *const *options,
                                size_t n_options,
                                struct dc_writer **out);

/**
 * Sets a parameter (see the `DC_WRITER_*` constants for ranges and when each may be set).
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, unknown parameter, value out of range),
 * `DC_ERR_STATE` (too late: after the first append, or after finish).
 *
 * # Safety
 * `w` is a live writer.
 */
dc_status dc_writer_set(struct dc_writer *w, dc_writer_param p, int64_t value);

/**
 * The range of values `dc_writer_set` accepts for `p`: `*min ..= *max` (for
 * `DC_WRITER_ZSTD_LEVEL`, the range of the zstd the library was built with). Needs no
 * handle.
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (unknown parameter, NULL).
 *
 * # Safety
 * `min` and `max` are writable.
 */
dc_status dc_writer_param_bounds(dc_writer_param p, int64_t *min, int64_t *max);

/**
 * Sets the gene order, before the first append: output column j = input column
 * `order[j]`. `order[0..n]` must be a permutation of 0..n_genes (n = n_genes). Written as
 * `gene_order.npy`; appended rows are remapped and re-sorted.
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, n != n_genes, not a permutation; the message
 * names the entry), `DC_ERR_STATE` (after the first append or finish).
 *
 * # Safety
 * `w` is a live writer; `order` points to `n` values.
 */
dc_status dc_writer_set_gene_order(struct dc_writer *w, const int32_t *order, size_t n);

/**
 * Sets the gene names `names[0..n]` in input column order (n = n_genes); they are written
 * to `var_names.txt` in output order. Names must be UTF-8 without line breaks. May be
 * called any time before finish (the last call wins).
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, n != n_genes, bad UTF-8, a line break; the message
 * names the index), `DC_ERR_STATE` (after finish).
 *
 * # Safety
 * `w` is a live writer; `names` points to `n` NUL-terminated strings.
 */
dc_status dc_writer_set_var_names(struct dc_writer *w, const char *const *names, size_t n);

/**
 * Appends `n_rows` cells (rows) in input column space; any number of rows per call, and
 * every `DC_WRITER_TILE_SIZE` rows make a tile, encoded in the background. Row r holds the
 * entries `indptr[r] - indptr[0] .. indptr[r + 1] - indptr[0]` of `indices` (column indices
 * in 0..n_genes, each at most once per row, in any order) and `values` (counts >= 0;
 * explicit zeros are dropped). So a block of rows of a larger CSR matrix can be passed
 * with pointers to its first entry, rebased or not. The call is all or nothing.
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, bad indptr, column out of range or repeated,
 * negative count; the message names the row), `DC_ERR_EXISTS` (target exists and
 * overwrite is off), `DC_ERR_LIMIT` (a tile has too many counts or gaps above 65535),
 * `DC_ERR_STATE` (after finish, or after an earlier encoding error), `DC_ERR_IO`.
 *
 * # Safety
 * `w` is a live writer; `indptr` points to `n_rows + 1` values, `indices` and `values` to
 * `indptr[n_rows] - indptr[0]` values each (NULL allowed when that is 0).
 */
dc_status dc_writer_append_csr(struct dc_writer *w,
                               uint64_t n_rows,
                               const int64_t *indptr,
                               const int32_t *indices,
                               const int32_t *values);

/**
 * Appends obs rows: one Arrow record batch (a struct array with its schema) per call. Row
 * i overall describes cell i: batch boundaries need not match the `dc_writer_append_csr`
 * calls, but at `dc_writer_finish` there must be exactly one obs row per cell. Every
 * batch has the first one's columns (names, order, types). Categorical columns
 * (dictionaries of utf8, as pandas `category`) are stored as categories over a global
 * sorted vocabulary, or as strings when they have more than 20,000 distinct values
 * (`DC_WRITER_OBS_MAX_CATEGORIES`); plain text (utf8, large utf8) as strings; integers
 * and floats as numeric; bool as bool.
 *
 * `batch` is moved into the library (released, and the caller's struct marked
 * released, even on error); `schema` is only borrowed.
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, not a struct array, invalid buffers, an
 * unsupported column type or a batch unlike the first; the message names the column),
 * `DC_ERR_STATE` (after finish), `DC_ERR_IO`.
 *
 * # Safety
 * `w` is a live writer; `batch` is NULL or a valid `struct ArrowArray`; `schema` is NULL
 * or a valid `struct ArrowSchema` describing it.
 */
dc_status dc_writer_append_obs(struct dc_writer *w,
                               struct ArrowArray *batch,
                               struct ArrowSchema *schema);

/**
 * Sets the gene table (`var.parquet`): a record batch of n_genes rows in input column
 * order, written in output order (permuted by the gene order). Keep the pandas index as a
 * column; a schema metadata entry `"pandas"` is written unchanged. Any time before
 * finish (the last call wins). `table` is moved into the library like
 * `dc_writer_append_obs`'s batch; `schema` is borrowed.
 *
 * Errors: `DC_ERR_INVALID_ARGUMENT` (NULL, not a struct array, row count != n_genes),
 * `DC_ERR_STATE` (after finish).
 *
 * # Safety
 * As `dc_writer_append_obs`.
 */
dc_status dc_writer_set_var_table(struct dc_writer *w,
                                  struct ArrowArray *table,
                                  struct ArrowSchema *schema);

/**
 * Encodes the remaining rows, waits for every tile, writes `gene_order.npy`,
 * `var_names.txt` and `manifest.json` (last), syncs, and renames the temporary directory
 * to the target: the dataset appears complete or not at all. With `DC_WRITER_OVERWRITE`,
 * an existing dataset at the target is replaced only now (a directory holding anything but
 * a dataset's files is never replaced).
 *
 * Errors: `DC_ERR_EXISTS` (the target exists; nothing is lost and finish may be called
 * again, e.g. after setting `DC_WRITER_OVERWRITE`), `DC_ERR_LIMIT` / `DC_ERR_IO` (a tile
 * failed; the writer is then unusable), `DC_ERR_STATE` (already finished or failed).
 *
 * # Safety
 * `w` is a live writer.
 */
dc_status dc_writer_finish(struct dc_writer *w);

/**
 * Releases a writer. Without a successful `dc_writer_finish` the write is abandoned: its
 * temporary directory is removed and no manifest is left behind (an existing dataset at
 * the target is untouched). NULL is a no-op.
 *
 * # Safety
 * `w` is NULL or a writer from `dc_writer_create` not yet freed.
 */
void dc_writer_free(struct dc_writer *w);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* DELTACELLS_H */
