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
 * An open ChromData store (opaque). May be used from several threads at once.
 */
typedef struct dc_chromdata dc_chromdata;

/**
 * Result of every fallible call (a C `int32_t`; the `DC_OK` / `DC_ERR_*` constants).
 */
typedef int32_t dc_status;

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
 * Element type of decoded counts (`DC_INT32` or `DC_FLOAT32`).
 */
typedef int32_t dc_dtype;

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

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

/**
 * Opens a store: a `*.chromdata.zarr` directory or a `.cdz` file. Reads the metadata, the
 * index arrays, the small tables and the Parquet footers, and validates them (spec §14).
 *
 * Errors: `DC_ERR_NOT_FOUND` (path or a referenced part missing), `DC_ERR_FORMAT`
 * (malformed or inconsistent), `DC_ERR_UNSUPPORTED` (version, layout), `DC_ERR_IO`.
 *
 * # Safety
 * `path` is a NUL-terminated string; `out` is writable.
 */
dc_status dc_chromdata_open(const char *path, struct dc_chromdata **out);

/**
 * Releases a handle (NULL: no-op). Streams obtained from it stay valid.
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
 * # Safety
 * `cd` live; `columns` NULL or `n_columns` strings; `out` writable.
 */
dc_status dc_chromdata_read_spots(struct dc_chromdata *cd,
                                  int original_order,
                                  const char *const *columns,
                                  size_t n_columns,
                                  struct ArrowArrayStream *out);

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

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* DELTACELLS_H */
