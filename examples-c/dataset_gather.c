/*
 * dataset_gather.c -- open a dataset, gather some cells into CSR, free everything: the
 * complete program of docs/c-api.md, error handling included.
 *
 * Usage: dataset_gather DATASET_DIR    (e.g. one written by examples-c/dataset_write.c)
 *
 * Build with CMake (target deltacells::deltacells or deltacells::deltacells_static), or by
 * hand after `cargo build --release`:
 *   cc -std=c11 -Iinclude examples-c/dataset_gather.c -Ltarget/release -ldeltacells \
 *      -Wl,-rpath,$PWD/target/release -o dataset_gather
 */
#include <stdio.h>
#include <stdlib.h>
#include "deltacells.h"

/* The message belongs to the calling thread and lasts until its next dc_ call: print it
 * before calling anything else (dc_dataset_free included). */
static int fail(dc_status s) {
  fprintf(stderr, "%s: %s\n", dc_status_name(s), dc_last_error());
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  dc_dataset *ds = NULL;
  dc_status s = dc_dataset_open(argv[1], &ds);
  if (s != DC_OK) return fail(s);

  dc_dataset_info info;
  s = dc_dataset_info_get(ds, &info);
  if (s != DC_OK) { fail(s); dc_dataset_free(ds); return 1; }
  uint64_t cells[] = {0, info.n_cells - 1, 0};           /* any order, repeats allowed */
  size_t n = sizeof cells / sizeof cells[0];

  uint64_t nnz = 0;                                      /* how big must the buffers be? */
  s = dc_dataset_batch_nnz(ds, cells, n, &nnz);           /* (no cells: out of range) */
  if (s != DC_OK) { fail(s); dc_dataset_free(ds); return 1; }

  int64_t *indptr = malloc((n + 1) * sizeof *indptr);
  int32_t *indices = malloc((nnz ? nnz : 1) * sizeof *indices);
  int32_t *values = malloc((nnz ? nnz : 1) * sizeof *values);
  if (!indptr || !indices || !values) s = DC_ERR_LIMIT;  /* out of memory */
  else s = dc_dataset_gather(ds, cells, n, DC_INT32, indptr, indices, values, nnz, &nnz);
  if (s == DC_OK)
    for (size_t i = 0; i < n; i++)
      printf("cell %llu: %lld nonzeros\n", (unsigned long long)cells[i],
             (long long)(indptr[i + 1] - indptr[i]));
  else if (s != DC_ERR_LIMIT)
    fail(s);
  else
    fprintf(stderr, "out of memory\n");
  free(indptr); free(indices); free(values);
  dc_dataset_free(ds);
  return s == DC_OK ? 0 : 1;
}
