/*
 * dataset_write.c -- write a small deltacells dataset: a directory of tiles plus a
 * manifest, made from a cells x genes count matrix given in CSR form, in row blocks.
 *
 * Usage: dataset_write OUT_DIR      (OUT_DIR's parent must exist; an existing dataset
 *                                    there is replaced)
 * Then read it with dataset_gather OUT_DIR (examples-c/dataset_gather.c).
 *
 * Build with CMake (target deltacells::deltacells or deltacells::deltacells_static), or by
 * hand after `cargo build --release`:
 *   cc -std=c11 -Iinclude examples-c/dataset_write.c -Ltarget/release -ldeltacells \
 *      -Wl,-rpath,$PWD/target/release -o dataset_write
 * Exits non-zero on any failure.
 */
#include "deltacells.h"

#include <stdint.h>
#include <stdio.h>

/* Every fallible call returns a dc_status; on failure dc_last_error() holds a one-line
 * message for this thread, valid until the next dc_ call on it: print it at once. */
static int failed(dc_status status, const char *what)
{
  if (status == DC_OK)
    return 0;
  fprintf(stderr, "%s failed: %s: %s\n", what, dc_status_name(status), dc_last_error());
  return 1;
}

int main(int argc, char **argv)
{
  if (argc != 2) {
    fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }

  /* 5 cells x 6 genes. Within a row the columns may come in any order, and explicit zeros
   * are dropped; the writer sorts and checks everything. Cell 1 is empty. */
  enum { N_GENES = 6 };
  const int64_t indptr[] = {0, 3, 3, 6, 7, 11};
  const int32_t indices[] = {4, 0, 2, /**/ /**/ 5, 1, 3, /**/ 2, /**/ 0, 1, 3, 5};
  const int32_t values[] = {7, 1, 2, /**/ /**/ 1, 0, 3, /**/ 9, /**/ 1, 1, 2, 4};
  /* Store genes by decreasing (made-up) expression: output column j is input column
   * order[j]. Optional; without it columns keep their input order. */
  const int32_t order[N_GENES] = {5, 3, 0, 2, 4, 1};
  const char *const names[N_GENES] = {"ACTB", "GAPDH", "MT-CO1", "RPL13", "CD3E", "MS4A1"};

  int rc = 1;
  dc_writer *w = NULL;

  /* 1. Create: everything goes to a hidden temporary directory next to OUT_DIR. */
  if (failed(dc_writer_create(argv[1], N_GENES, &w), "dc_writer_create"))
    return 1;

  /* 2. Settings, before the first append. Real data uses the default tile size (10000
   *    cells) and zstd level 19; two cells per tile here, to have several tiles. */
  if (failed(dc_writer_set(w, DC_WRITER_TILE_SIZE, 2), "dc_writer_set(TILE_SIZE)") ||
      failed(dc_writer_set(w, DC_WRITER_OVERWRITE, 1), "dc_writer_set(OVERWRITE)") ||
      failed(dc_writer_set_gene_order(w, order, N_GENES), "dc_writer_set_gene_order") ||
      failed(dc_writer_set_var_names(w, names, N_GENES), "dc_writer_set_var_names"))
    goto done;

  /* 3. Append rows in blocks of any size: rows 0-2, then 3-4. A block of a larger CSR
   *    matrix is passed with pointers to its first row and first entry (indptr need not
   *    start at 0). Full tiles are encoded in the background. */
  if (failed(dc_writer_append_csr(w, 3, indptr, indices, values), "dc_writer_append_csr") ||
      failed(dc_writer_append_csr(w, 2, indptr + 3, indices + indptr[3], values + indptr[3]),
             "dc_writer_append_csr"))
    goto done;

  /* 4. Finish: the dataset appears complete (manifest.json written last, then an atomic
   *    rename) or not at all. Without finish, dc_writer_free abandons the write. */
  if (failed(dc_writer_finish(w), "dc_writer_finish"))
    goto done;
  printf("wrote %s: 5 cells, %d genes\n", argv[1], N_GENES);
  rc = 0;

done:
  dc_writer_free(w);
  return rc;
}
