/*
 * tile_roundtrip.c -- encode a small count matrix into a deltacells tile and decode it back.
 *
 * A tile holds consecutive cells (rows) of a cells x genes count matrix in CSR form:
 *   indptr[n_cells + 1]   row i holds the nonzeros indptr[i] .. indptr[i+1]-1
 *   indices[nnz]          gene (column) of each nonzero, increasing within a row
 *   values[nnz]           its count, >= 1
 *
 * Build with CMake (target deltacells::deltacells or deltacells::deltacells_static), or by
 * hand after `cargo build --release`:
 *   cc -std=c11 -Iinclude examples-c/tile_roundtrip.c -Ltarget/release -ldeltacells \
 *      -Wl,-rpath,$PWD/target/release -o tile_roundtrip
 * (the shared library's SONAME is libdeltacells.so.1: make sure that name resolves, e.g. a
 * symlink next to libdeltacells.so). Exits non-zero on any failure.
 */
#include "deltacells.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every fallible call returns a dc_status; on failure, dc_last_error() holds a one-line
 * message for this thread (valid until the next dc_ call on it). */
static int failed(dc_status status, const char *what)
{
  if (status == DC_OK)
    return 0;
  fprintf(stderr, "%s failed: %s: %s\n", what, dc_status_name(status), dc_last_error());
  return 1;
}

int main(void)
{
  /* 4 cells x 100000 genes; cell 2 is empty; cell 3 has a count above 65535 and a gene far
   * from its neighbour, both of which the format stores as rare "exceptions". */
  const uint64_t n_cells = 4;
  const uint32_t n_genes = 100000;
  const int64_t indptr_in[] = {0, 3, 5, 5, 8};
  const int32_t indices_in[] = {2, 17, 99, /**/ 0, 5, /**/ /**/ 1, 12, 90000};
  const int32_t values_in[] = {1, 4, 2, /**/ 7, 1, /**/ /**/ 3, 250000, 1};

  int rc = 1;
  uint8_t *blob = NULL;
  size_t blob_len = 0;
  int64_t *indptr = NULL;
  int32_t *indices = NULL;
  int32_t *values = NULL;
  dc_tile_info info;
  uint64_t nnz = 0;
  dc_status s;

  /* 1. Encode. zstd level 19 is what the format's writers use (0 = zstd's default); 0 chunks
   *    = the default (8, at most one per cell); 0 threads = the library's pool. */
  if (failed(dc_tile_encode(n_cells, n_genes, indptr_in, indices_in, values_in, 19, 0, 0, &blob,
                            &blob_len),
             "dc_tile_encode"))
    goto done;

  /* 2. Inspect: validates the structure (and, with verify_crc = 1, the CRC-32) without
   *    decompressing anything. */
  if (failed(dc_tile_inspect(blob, blob_len, 1, &info), "dc_tile_inspect"))
    goto done;
  printf("tile: %zu bytes, format version %u, %llu cells, %u genes, %llu nonzeros, "
         "%u chunks, %u exceptions\n",
         blob_len, info.version, (unsigned long long)info.n_cells, info.n_genes,
         (unsigned long long)info.nnz, info.n_chunks, info.n_exceptions);

  /* 3. Decode with the size-query pattern: indptr needs n_cells + 1 entries (known from
   *    inspect); a first call with capacity 0 reports the nonzeros in nnz through
   *    DC_ERR_BUFFER_TOO_SMALL (or succeeds at once for a tile without nonzeros). */
  indptr = malloc((info.n_cells + 1) * sizeof *indptr);
  if (!indptr)
    goto done;
  s = dc_tile_decode(blob, blob_len, 0, 1, DC_INT32, indptr, NULL, NULL, 0, &nnz);
  if (s == DC_ERR_BUFFER_TOO_SMALL) {
    indices = malloc(nnz * sizeof *indices);
    values = malloc(nnz * sizeof *values);
    if (!indices || !values)
      goto done;
    s = dc_tile_decode(blob, blob_len, 0, 1, DC_INT32, indptr, indices, values, nnz, &nnz);
  }
  if (failed(s, "dc_tile_decode"))
    goto done;

  /* 4. Print the cells and compare with the input. */
  for (uint64_t c = 0; c < info.n_cells; c++) {
    printf("cell %llu:", (unsigned long long)c);
    for (int64_t j = indptr[c]; j < indptr[c + 1]; j++)
      printf(" %d:%d", indices[j], values[j]);
    printf("\n");
  }
  if (nnz != (uint64_t)indptr_in[n_cells] ||
      memcmp(indptr, indptr_in, sizeof indptr_in) != 0 ||
      memcmp(indices, indices_in, sizeof indices_in) != 0 ||
      memcmp(values, values_in, sizeof values_in) != 0) {
    fprintf(stderr, "decoded tile differs from the input\n");
    goto done;
  }
  printf("round trip OK: %llu nonzeros\n", (unsigned long long)nnz);

  /* 5. Errors are values, not crashes: a truncated tile is refused with DC_ERR_FORMAT. */
  s = dc_tile_inspect(blob, blob_len - 1, 1, &info);
  if (s != DC_ERR_FORMAT) {
    fprintf(stderr, "a truncated tile gave %s, expected DC_ERR_FORMAT\n", dc_status_name(s));
    goto done;
  }
  printf("truncated tile refused as expected: %s: %s\n", dc_status_name(s), dc_last_error());
  rc = 0;

done:
  /* 6. Free everything: library buffers with dc_bytes_free, ours with free. */
  dc_bytes_free(blob, blob_len);
  free(indptr);
  free(indices);
  free(values);
  return rc;
}
