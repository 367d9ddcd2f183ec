/*
 * C tests of datasets (sections 3 and 4 of the C API), through include/deltacells.h and the
 * real shared or static library.
 *
 * The test writes datasets with dc_writer_* from a random CSR matrix it keeps (rows in
 * several appends of different sizes, columns in any order, explicit zeros, counts and gaps
 * above 65535, a gene order, gene names), reads them back with dc_dataset_* and compares
 * every cell, tile, gene-order entry and name with its own expectation: output column j is
 * input column order[j], explicit zeros are dropped, columns are sorted within a cell.
 * Then every error path of the contract: NULL arguments, bad parameters, missing
 * manifest, out-of-range cells and tiles, size queries, calls after finish, existing
 * targets, abandoned writes, a corrupted tile, inconsistent manifests, absent optional
 * parts; and several pthreads gathering from one handle at once.
 *
 * Everything happens in a private directory made with mkdtemp and removed at the end.
 * Every allocation is freed: ctest also runs this program under valgrind.
 */
#define _XOPEN_SOURCE 700

#define TEST_NAME "test_dataset"
#include "test_util.h"

#include <pthread.h>

/* ------------------------------------------------------------------------------------------ */
/* The test matrix and its expected reading                                                  */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
  uint64_t n_rows;
  uint32_t n_cols;
  int64_t *indptr;  /* n_rows + 1 */
  int32_t *indices; /* indptr[n_rows] */
  int32_t *values;
} csr_t;

static void csr_free(csr_t *m)
{
  free(m->indptr);
  free(m->indices);
  free(m->values);
  memset(m, 0, sizeof *m);
}

static uint64_t csr_row_nnz(const csr_t *m, uint64_t r) { return (uint64_t)(m->indptr[r + 1] - m->indptr[r]); }

/* A random count matrix as a writer's input: columns unique but in random order within a
 * row, a few explicit zeros (which the writer drops), empty rows, rare counts above 65535
 * and rare gaps above 65535 (when n_cols allows), which the tile format stores as
 * exceptions. */
static void make_input(rng_t *rng, uint64_t n_rows, uint32_t n_cols, int max_per_row, csr_t *m)
{
  m->n_rows = n_rows;
  m->n_cols = n_cols;
  m->indptr = xmalloc((n_rows + 1) * sizeof *m->indptr);
  m->indices = xmalloc(n_rows * (size_t)(max_per_row + 2) * sizeof *m->indices);
  m->values = xmalloc(n_rows * (size_t)(max_per_row + 2) * sizeof *m->values);
  int64_t nz = 0;
  m->indptr[0] = 0;
  for (uint64_t r = 0; r < n_rows; r++) {
    int64_t start = nz;
    if (r % 37 == 5) {
      /* empty row */
    } else if (r % 50 == 7 && n_cols > 70000) {
      /* a gap above 65535 */
      m->indices[nz] = 1, m->values[nz++] = 3;
      m->indices[nz] = (int32_t)(n_cols - 1), m->values[nz++] = 2;
    } else {
      int k = (int)rng_below(rng, (uint64_t)max_per_row + 1);
      uint64_t step = n_cols / (uint64_t)(k + 1) * 2 + 1;
      uint64_t g = rng_below(rng, step);
      for (int j = 0; j < k && g < n_cols; j++) {
        int32_t v = (int32_t)(1 + rng_below(rng, 20));
        uint64_t dice = rng_below(rng, 400);
        if (dice == 0)
          v = (int32_t)(65536 + rng_below(rng, 5000000)); /* a count exception */
        else if (dice < 10)
          v = 0; /* an explicit zero */
        m->indices[nz] = (int32_t)g;
        m->values[nz] = v;
        nz++;
        g += 1 + rng_below(rng, step);
      }
    }
    /* shuffle the row: the writer accepts columns in any order */
    for (int64_t i = nz - 1; i > start; i--) {
      int64_t j = start + (int64_t)rng_below(rng, (uint64_t)(i - start + 1));
      int32_t t = m->indices[i];
      m->indices[i] = m->indices[j];
      m->indices[j] = t;
      t = m->values[i];
      m->values[i] = m->values[j];
      m->values[j] = t;
    }
    m->indptr[r + 1] = nz;
  }
}

typedef struct {
  int32_t col, val;
} entry_t;

static int entry_cmp(const void *a, const void *b)
{
  int32_t x = ((const entry_t *)a)->col, y = ((const entry_t *)b)->col;
  return (x > y) - (x < y);
}

/* What a reader must return for `in` written with gene order `order` (NULL = identity):
 * output column j holds input column order[j]; zeros dropped; columns sorted per row. */
static void expected_output(const csr_t *in, const int32_t *order, csr_t *out)
{
  int32_t *inv = xmalloc(in->n_cols * sizeof *inv);
  for (uint32_t j = 0; j < in->n_cols; j++)
    inv[order ? order[j] : (int32_t)j] = (int32_t)j;
  uint64_t cap = (uint64_t)in->indptr[in->n_rows];
  out->n_rows = in->n_rows;
  out->n_cols = in->n_cols;
  out->indptr = xmalloc((in->n_rows + 1) * sizeof *out->indptr);
  out->indices = xmalloc(cap * sizeof *out->indices);
  out->values = xmalloc(cap * sizeof *out->values);
  entry_t *row = xmalloc(in->n_cols * sizeof *row);
  int64_t nz = 0;
  out->indptr[0] = 0;
  for (uint64_t r = 0; r < in->n_rows; r++) {
    size_t k = 0;
    for (int64_t i = in->indptr[r]; i < in->indptr[r + 1]; i++)
      if (in->values[i] != 0)
        row[k].col = inv[in->indices[i]], row[k++].val = in->values[i];
    qsort(row, k, sizeof *row, entry_cmp);
    for (size_t i = 0; i < k; i++)
      out->indices[nz] = row[i].col, out->values[nz++] = row[i].val;
    out->indptr[r + 1] = nz;
  }
  free(row);
  free(inv);
}

static int32_t *random_permutation(rng_t *rng, uint32_t n)
{
  int32_t *p = xmalloc(n * sizeof *p);
  for (uint32_t i = 0; i < n; i++)
    p[i] = (int32_t)i;
  for (uint32_t i = n - 1; i > 0; i--) {
    uint32_t j = (uint32_t)rng_below(rng, (uint64_t)i + 1);
    int32_t t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
  return p;
}

/* Gene names in input order: "G00000", ..., with one non-ASCII name. */
static char **make_names(uint32_t n)
{
  char **names = xmalloc(n * sizeof *names);
  for (uint32_t i = 0; i < n; i++)
    names[i] = i == 3 ? xstrdup("G\xc3\xa8ne-\xce\xb1 (3)") : xasprintf("G%05u", i);
  return names;
}

static void free_names(char **names, uint32_t n)
{
  for (uint32_t i = 0; i < n; i++)
    free(names[i]);
  free(names);
}

/* ------------------------------------------------------------------------------------------ */
/* Writing                                                                                    */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
  int64_t tile_size;         /* 0: default */
  int64_t n_chunks;          /* 0: default */
  int64_t level;             /* INT64_MIN: default */
  int64_t threads;           /* -1: default */
  const int32_t *order;      /* NULL: no gene order */
  const char *const *names;  /* NULL: no gene names */
  const uint64_t *calls;     /* rows per append call, the rest in a last call */
  size_t n_calls;
  int bad_appends;           /* also try invalid appends between the good ones */
} write_opts;

/* Appends rows [start, start + n) of `in`, either as a block of the large matrix (pointers
 * into it, indptr not rebased) or as a rebased copy of indptr. */
static dc_status append_rows(dc_writer *w, const csr_t *in, uint64_t start, uint64_t n, int rebase)
{
  const int64_t *ip = in->indptr + start;
  const int32_t *idx = in->indices + in->indptr[start];
  const int32_t *val = in->values + in->indptr[start];
  if (!rebase)
    return dc_writer_append_csr(w, n, ip, idx, val);
  int64_t *copy = xmalloc((n + 1) * sizeof *copy);
  for (uint64_t r = 0; r <= n; r++)
    copy[r] = ip[r] - ip[0];
  dc_status s = dc_writer_append_csr(w, n, copy, idx, val);
  free(copy);
  return s;
}

/* Invalid appends: each is refused as a whole (all or nothing), and the writer goes on. */
static void try_bad_appends(dc_writer *w, uint32_t n_genes)
{
  const int64_t indptr[] = {0, 2, 3, 5};
  int32_t indices[] = {0, 1, 2, 3, 4};
  int32_t values[] = {1, 1, 1, 1, 1};
  /* a column out of range in the last row, after two good rows */
  indices[4] = (int32_t)n_genes;
  EXPECT_ERR(dc_writer_append_csr(w, 3, indptr, indices, values), DC_ERR_INVALID_ARGUMENT, "row");
  indices[4] = -1;
  EXPECT_ERR(dc_writer_append_csr(w, 3, indptr, indices, values), DC_ERR_INVALID_ARGUMENT, "row");
  indices[4] = 3; /* repeated column in row 2 */
  EXPECT_ERR(dc_writer_append_csr(w, 3, indptr, indices, values), DC_ERR_INVALID_ARGUMENT, "row");
  indices[4] = 4;
  values[2] = -1; /* negative count in row 1 */
  EXPECT_ERR(dc_writer_append_csr(w, 3, indptr, indices, values), DC_ERR_INVALID_ARGUMENT, "row");
  values[2] = 1;
  const int64_t decreasing[] = {0, 3, 2, 5};
  EXPECT(dc_writer_append_csr(w, 3, decreasing, indices, values), DC_ERR_INVALID_ARGUMENT);
  const int64_t negative_start[] = {-1, 2, 3, 5};
  EXPECT(dc_writer_append_csr(w, 3, negative_start, indices, values), DC_ERR_INVALID_ARGUMENT);
  /* NULL arrays with entries to read */
  EXPECT(dc_writer_append_csr(w, 3, NULL, indices, values), DC_ERR_INVALID_ARGUMENT);
  EXPECT(dc_writer_append_csr(w, 3, indptr, NULL, values), DC_ERR_INVALID_ARGUMENT);
  EXPECT(dc_writer_append_csr(w, 3, indptr, indices, NULL), DC_ERR_INVALID_ARGUMENT);
}

static void write_dataset(const char *path, const csr_t *in, const write_opts *o)
{
  dc_writer *w = NULL;
  EXPECT_OK(dc_writer_create(path, in->n_cols, &w));
  CHECK(w != NULL);
  if (o->tile_size)
    EXPECT_OK(dc_writer_set(w, DC_WRITER_TILE_SIZE, o->tile_size));
  if (o->n_chunks)
    EXPECT_OK(dc_writer_set(w, DC_WRITER_N_CHUNKS, o->n_chunks));
  if (o->level != INT64_MIN)
    EXPECT_OK(dc_writer_set(w, DC_WRITER_ZSTD_LEVEL, o->level));
  if (o->threads >= 0)
    EXPECT_OK(dc_writer_set(w, DC_WRITER_THREADS, o->threads));
  if (o->order)
    EXPECT_OK(dc_writer_set_gene_order(w, o->order, in->n_cols));
  if (o->bad_appends)
    try_bad_appends(w, in->n_cols);
  uint64_t row = 0;
  for (size_t c = 0; c <= o->n_calls; c++) {
    uint64_t n = c < o->n_calls ? o->calls[c] : in->n_rows - row;
    CHECK(row + n <= in->n_rows);
    EXPECT_OK(append_rows(w, in, row, n, (int)(c % 2)));
    row += n;
    if (o->bad_appends && c == 1)
      try_bad_appends(w, in->n_cols);
    if (c == 2)
      EXPECT_OK(dc_writer_set(w, DC_WRITER_THREADS, 1)); /* "any time" */
  }
  /* names may come any time before finish */
  if (o->names)
    EXPECT_OK(dc_writer_set_var_names(w, o->names, in->n_cols));
  EXPECT_OK(dc_writer_finish(w));
  dc_writer_free(w);
}

/* ------------------------------------------------------------------------------------------ */
/* Reading and comparing                                                                      */
/* ------------------------------------------------------------------------------------------ */

static void check_rows(const csr_t *exp, const uint64_t *cells, size_t n, dc_dtype dtype,
                       const int64_t *indptr, const int32_t *indices, const void *values,
                       uint64_t nnz)
{
  uint64_t at = 0;
  CHECK_I64(indptr[0], 0);
  for (size_t i = 0; i < n; i++) {
    uint64_t c = cells[i];
    uint64_t k = csr_row_nnz(exp, c);
    if ((uint64_t)(indptr[i + 1] - indptr[i]) != k)
      FAIL("row %zu (cell %llu) has %lld entries, expected %llu", i, (unsigned long long)c,
           (long long)(indptr[i + 1] - indptr[i]), (unsigned long long)k);
    if ((uint64_t)indptr[i] != at)
      FAIL("indptr[%zu] = %lld, expected %llu", i, (long long)indptr[i], (unsigned long long)at);
    for (uint64_t j = 0; j < k; j++) {
      int64_t e = exp->indptr[c] + (int64_t)j;
      int32_t got_col = indices[at + j];
      double got_val = dtype == DC_INT32 ? (double)((const int32_t *)values)[at + j]
                                         : (double)((const float *)values)[at + j];
      double exp_val = dtype == DC_INT32 ? (double)exp->values[e] : (double)(float)exp->values[e];
      if (got_col != exp->indices[e] || got_val != exp_val)
        FAIL("row %zu (cell %llu) entry %llu: (%d, %.1f), expected (%d, %.1f)", i,
             (unsigned long long)c, (unsigned long long)j, got_col, got_val, exp->indices[e], exp_val);
    }
    at += k;
  }
  CHECK_U64(nnz, at);
  CHECK_U64(indptr[n], at);
}

static uint64_t expected_nnz(const csr_t *exp, const uint64_t *cells, size_t n)
{
  uint64_t s = 0;
  for (size_t i = 0; i < n; i++)
    s += csr_row_nnz(exp, cells[i]);
  return s;
}

/* batch_nnz, the size queries, and the gather itself (both dtypes) of `cells`. */
static void check_gather(dc_dataset *ds, const csr_t *exp, const uint64_t *cells, size_t n)
{
  uint64_t want = expected_nnz(exp, cells, n), got = 12345;
  EXPECT_OK(dc_dataset_batch_nnz(ds, cells, n, &got));
  CHECK_U64(got, want);
  if (want > 0) {
    got = 0;
    EXPECT_ERR(dc_dataset_gather(ds, cells, n, DC_INT32, NULL, NULL, NULL, 0, &got),
               DC_ERR_BUFFER_TOO_SMALL, NULL);
    CHECK_U64(got, want);
  }
  int64_t *indptr = xmalloc((n + 1) * sizeof *indptr);
  int32_t *indices = xmalloc((want + 3) * sizeof *indices);
  int32_t *values = xmalloc((want + 3) * sizeof *values);
  if (want > 0) {
    got = 0;
    EXPECT(dc_dataset_gather(ds, cells, n, DC_FLOAT32, indptr, indices, values, want - 1, &got),
           DC_ERR_BUFFER_TOO_SMALL);
    CHECK_U64(got, want);
  }
  for (dc_dtype dtype = DC_INT32; dtype <= DC_FLOAT32; dtype++) {
    memset(indices, 0xEE, (want + 3) * sizeof *indices);
    got = 0;
    /* a larger capacity than needed is fine */
    EXPECT_OK(dc_dataset_gather(ds, cells, n, dtype, indptr, indices, values, want + 3, &got));
    check_rows(exp, cells, n, dtype, indptr, indices, values, got);
  }
  free(indptr);
  free(indices);
  free(values);
}

/* Reads everything there is to read of the dataset at `path` and compares it with `exp`
 * (the expected output matrix), `order` and `names` (input order; NULL = absent). */
static void verify_dataset(const char *path, const csr_t *exp, uint64_t tile_size,
                           const int32_t *order, const char *const *names, rng_t *rng)
{
  dc_dataset *ds = NULL;
  EXPECT_OK(dc_dataset_open(path, &ds));
  CHECK(ds != NULL);

  dc_dataset_info info;
  memset(&info, 0xAB, sizeof info);
  EXPECT_OK(dc_dataset_info_get(ds, &info));
  uint64_t n_tiles = (exp->n_rows + tile_size - 1) / tile_size;
  CHECK_U64(info.n_cells, exp->n_rows);
  CHECK_U64(info.n_genes, exp->n_cols);
  CHECK_U64(info.version, 2);
  CHECK_U64(info.n_tiles, n_tiles);
  CHECK_U64(info.tile_size, tile_size);
  CHECK_U64(info.nnz, exp->indptr[exp->n_rows]);
  CHECK_U64(info.has_gene_order, order != NULL);
  CHECK_U64(info.has_var_names, names != NULL);
  CHECK_U64(info.has_var_table, 0);
  CHECK_U64(info.has_obs, 0);

  /* Tiles: bounds from the manifest, contents decoded, both dtypes. */
  uint64_t max_tile_nnz = 0;
  for (uint64_t t = 0; t < n_tiles; t++) {
    uint64_t first = 99, cells = 99, nnz = 99;
    EXPECT_OK(dc_dataset_tile_bounds(ds, t, &first, &cells, &nnz));
    uint64_t want_first = t * tile_size;
    uint64_t want_cells = t + 1 < n_tiles ? tile_size : exp->n_rows - want_first;
    CHECK_U64(first, want_first);
    CHECK_U64(cells, want_cells);
    CHECK_U64(nnz, exp->indptr[first + cells] - exp->indptr[first]);
    if (nnz > max_tile_nnz)
      max_tile_nnz = nnz;
    /* every out-pointer may be NULL */
    uint64_t only = 0;
    EXPECT_OK(dc_dataset_tile_bounds(ds, t, NULL, NULL, NULL));
    EXPECT_OK(dc_dataset_tile_bounds(ds, t, NULL, &only, NULL));
    CHECK_U64(only, cells);
  }
  int64_t *indptr = xmalloc((tile_size + 1) * sizeof *indptr);
  int32_t *indices = xmalloc((max_tile_nnz + 1) * sizeof *indices);
  float *values = xmalloc((max_tile_nnz + 1) * sizeof *values);
  uint64_t *cells = xmalloc((2 * exp->n_rows + 410) * sizeof *cells); /* room for every list below */
  for (uint64_t t = 0; t < n_tiles; t++) {
    uint64_t first, n, nnz, got = 0;
    EXPECT_OK(dc_dataset_tile_bounds(ds, t, &first, &n, &nnz));
    for (uint64_t i = 0; i < n; i++)
      cells[i] = first + i;
    if (nnz > 0) {
      EXPECT_ERR(dc_dataset_read_tile(ds, t, DC_INT32, NULL, NULL, NULL, 0, &got),
                 DC_ERR_BUFFER_TOO_SMALL, NULL);
      CHECK_U64(got, nnz);
      got = 0;
      EXPECT(dc_dataset_read_tile(ds, t, DC_FLOAT32, indptr, indices, values, nnz - 1, &got),
             DC_ERR_BUFFER_TOO_SMALL);
      CHECK_U64(got, nnz);
    }
    for (dc_dtype dtype = DC_INT32; dtype <= DC_FLOAT32; dtype++) {
      got = 0;
      memset(indices, 0xEE, (max_tile_nnz + 1) * sizeof *indices);
      EXPECT_OK(dc_dataset_read_tile(ds, t, dtype, indptr, indices, values, max_tile_nnz + 1, &got));
      check_rows(exp, cells, n, dtype, indptr, indices, values, got);
    }
  }

  /* Gathers: every cell in order and reversed, random cells with repeats, tile borders,
   * one cell many times, nothing; with the tile cache and thread count varied. */
  for (int round = 0; round < 4; round++) {
    EXPECT_OK(dc_dataset_set(ds, DC_DATASET_TILE_CACHE, round == 0 ? 0 : round == 1 ? 1 : 8));
    EXPECT_OK(dc_dataset_set(ds, DC_DATASET_THREADS, round % 3));
    EXPECT_OK(dc_dataset_set(ds, DC_DATASET_VERIFY_CRC, round % 2));
    size_t n = 0;
    switch (round) {
    case 0:
      for (uint64_t c = 0; c < exp->n_rows; c++)
        cells[n++] = c;
      break;
    case 1:
      for (uint64_t c = exp->n_rows; c-- > 0;)
        cells[n++] = c;
      break;
    case 2:
      for (uint64_t t = 0; t < n_tiles; t++) { /* both sides of every tile border */
        if (t > 0)
          cells[n++] = t * tile_size - 1;
        cells[n++] = t * tile_size;
      }
      cells[n++] = exp->n_rows - 1;
      cells[n++] = 0;
      cells[n++] = exp->n_rows - 1;
      break;
    default:
      n = exp->n_rows < 400 ? exp->n_rows : 400;
      for (size_t i = 0; i < n; i++)
        cells[i] = i % 5 == 4 ? cells[rng_below(rng, i)] : rng_below(rng, exp->n_rows);
      break;
    }
    check_gather(ds, exp, cells, n);
  }
  for (size_t i = 0; i < 7; i++)
    cells[i] = exp->n_rows / 2;
  check_gather(ds, exp, cells, 7);
  check_gather(ds, exp, cells, 0); /* nothing: indptr = {0} */
  uint64_t zero = 99;
  EXPECT_OK(dc_dataset_batch_nnz(ds, NULL, 0, &zero));
  CHECK_U64(zero, 0);

  /* Gene order and names. */
  int32_t *got_order = xmalloc((exp->n_cols + 1) * sizeof *got_order);
  if (order) {
    EXPECT_OK(dc_dataset_gene_order(ds, got_order, exp->n_cols));
    CHECK(memcmp(got_order, order, exp->n_cols * sizeof *order) == 0);
    EXPECT_OK(dc_dataset_gene_order(ds, got_order, exp->n_cols + 1)); /* more room is fine */
    CHECK(memcmp(got_order, order, exp->n_cols * sizeof *order) == 0);
    EXPECT(dc_dataset_gene_order(ds, got_order, exp->n_cols - 1), DC_ERR_BUFFER_TOO_SMALL);
  } else {
    EXPECT_ERR(dc_dataset_gene_order(ds, got_order, exp->n_cols), DC_ERR_NOT_FOUND, NULL);
  }
  free(got_order);
  const char *name = NULL;
  if (names) {
    for (uint32_t j = 0; j < exp->n_cols; j++) {
      name = NULL;
      EXPECT_OK(dc_dataset_var_name(ds, j, &name));
      const char *want = names[order ? order[j] : (int32_t)j];
      if (name == NULL || strcmp(name, want) != 0)
        FAIL("var_name(%u) = \"%s\", expected \"%s\"", j, name ? name : "(NULL)", want);
    }
    /* a name stays valid while the handle lives */
    const char *first = NULL, *again = NULL;
    EXPECT_OK(dc_dataset_var_name(ds, 0, &first));
    check_gather(ds, exp, cells, 3);
    EXPECT_OK(dc_dataset_var_name(ds, 0, &again));
    CHECK_STR(first, names[order ? order[0] : 0]);
    CHECK_STR(again, first);
    name = (const char *)1;
    EXPECT_ERR(dc_dataset_var_name(ds, exp->n_cols, &name), DC_ERR_OUT_OF_RANGE, NULL);
    CHECK(name == (const char *)1); /* untouched on error */
  } else {
    EXPECT_ERR(dc_dataset_var_name(ds, 0, &name), DC_ERR_NOT_FOUND, NULL);
  }

  free(indptr);
  free(indices);
  free(values);
  free(cells);
  dc_dataset_free(ds);
}

/* ------------------------------------------------------------------------------------------ */
/* Test state                                                                                 */
/* ------------------------------------------------------------------------------------------ */

#define N_GENES 70001u /* > 65536: some gaps are exceptions */
#define N_CELLS 1000u
#define TILE 128u      /* 8 tiles, the last one with 104 cells */

static char *g_dir;      /* the private temporary directory */
static csr_t g_in;       /* the writer's input */
static csr_t g_exp;      /* the expected reading (gene order applied) */
static int32_t *g_order; /* the gene order */
static char **g_names;   /* gene names, input order */
static char *g_main;     /* the main dataset */
static rng_t g_rng = {20240601};

static char *tmp_path(const char *name) { return xasprintf("%s/%s", g_dir, name); }

static const uint64_t g_calls[] = {1, 0, 37, 128, 300, 7}; /* + 527 in a last call */

static void test_roundtrip(void)
{
  g_context = "round trip: gene order, names, several appends";
  make_input(&g_rng, N_CELLS, N_GENES, 60, &g_in);
  g_order = random_permutation(&g_rng, N_GENES);
  g_names = make_names(N_GENES);
  expected_output(&g_in, g_order, &g_exp);
  CHECK(g_exp.indptr[N_CELLS] > 10000);

  g_main = tmp_path("main.dcds");
  write_opts o = {TILE, 3, 3, 2, g_order, (const char *const *)g_names, g_calls,
                  sizeof g_calls / sizeof g_calls[0], 1};
  write_dataset(g_main, &g_in, &o);
  CHECK(path_exists(g_main));
  char *manifest = xasprintf("%s/manifest.json", g_main);
  CHECK(path_exists(manifest));
  free(manifest);
  CHECK_U64(count_entries(g_dir, ".main.dcds"), 0); /* no temporary directory left */
  verify_dataset(g_main, &g_exp, TILE, g_order, (const char *const *)g_names, &g_rng);

  g_context = "round trip: defaults, no gene order, no names";
  csr_t in, exp;
  make_input(&g_rng, 300, 500, 40, &in);
  expected_output(&in, NULL, &exp);
  char *plain = tmp_path("plain.dcds");
  write_opts p = {0, 0, INT64_MIN, -1, NULL, NULL, NULL, 0, 0};
  write_dataset(plain, &in, &p);
  verify_dataset(plain, &exp, 10000, NULL, NULL, &g_rng); /* default tile size */

  g_context = "round trip: one cell per tile, 1 chunk, level 1, many tiny appends";
  char *tiny = tmp_path("tiny.dcds");
  const uint64_t ones[] = {1, 1, 2, 1, 3, 1};
  int32_t *rev = xmalloc(500 * sizeof *rev);
  for (int i = 0; i < 500; i++)
    rev[i] = 499 - i;
  csr_t exp_rev;
  csr_t part = in;
  part.n_rows = 12;
  expected_output(&part, rev, &exp_rev);
  write_opts q = {1, 1, 1, 0, rev, NULL, ones, 6, 0};
  write_dataset(tiny, &part, &q);
  verify_dataset(tiny, &exp_rev, 1, rev, NULL, &g_rng);
  free(rev);
  csr_free(&exp_rev);

  g_context = "round trip: zero cells";
  char *empty = tmp_path("empty.dcds");
  dc_writer *w = NULL;
  EXPECT_OK(dc_writer_create(empty, 10, &w));
  EXPECT_OK(dc_writer_finish(w));
  dc_writer_free(w);
  dc_dataset *ds = NULL;
  EXPECT_OK(dc_dataset_open(empty, &ds));
  dc_dataset_info info;
  EXPECT_OK(dc_dataset_info_get(ds, &info));
  CHECK_U64(info.n_cells, 0);
  CHECK_U64(info.n_tiles, 0);
  CHECK_U64(info.nnz, 0);
  CHECK_U64(info.n_genes, 10);
  uint64_t cell0 = 0, nnz = 7;
  EXPECT_ERR(dc_dataset_batch_nnz(ds, &cell0, 1, &nnz), DC_ERR_OUT_OF_RANGE, NULL);
  EXPECT_ERR(dc_dataset_tile_bounds(ds, 0, NULL, NULL, NULL), DC_ERR_OUT_OF_RANGE, NULL);
  dc_dataset_free(ds);

  free(plain);
  free(tiny);
  free(empty);
  csr_free(&in);
  csr_free(&exp);
}

/* ------------------------------------------------------------------------------------------ */
/* Errors: arguments                                                                          */
/* ------------------------------------------------------------------------------------------ */

static void test_null_arguments(void)
{
  g_context = "NULL arguments: reading";
  dc_dataset *ds = NULL;
  EXPECT_ERR(dc_dataset_open(NULL, &ds), DC_ERR_INVALID_ARGUMENT, NULL);
  CHECK(ds == NULL);
  EXPECT_ERR(dc_dataset_open(g_main, NULL), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_OK(dc_dataset_open(g_main, &ds));

  dc_dataset_info info;
  EXPECT_ERR(dc_dataset_info_get(NULL, &info), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_info_get(ds, NULL), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_set(NULL, DC_DATASET_THREADS, 1), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_set_cache_dir(NULL, g_dir), DC_ERR_INVALID_ARGUMENT, NULL);
  uint64_t a, b, c;
  EXPECT_ERR(dc_dataset_tile_bounds(NULL, 0, &a, &b, &c), DC_ERR_INVALID_ARGUMENT, NULL);

  uint64_t nnz = 0, t0_nnz;
  EXPECT_OK(dc_dataset_tile_bounds(ds, 0, NULL, NULL, &t0_nnz));
  int64_t indptr[TILE + 1];
  int32_t *indices = xmalloc(t0_nnz * sizeof *indices);
  int32_t *values = xmalloc(t0_nnz * sizeof *values);
  EXPECT_ERR(dc_dataset_read_tile(NULL, 0, DC_INT32, indptr, indices, values, t0_nnz, &nnz),
             DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_read_tile(ds, 0, DC_INT32, NULL, indices, values, t0_nnz, &nnz),
             DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_read_tile(ds, 0, DC_INT32, indptr, NULL, values, t0_nnz, &nnz),
             DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_read_tile(ds, 0, DC_INT32, indptr, indices, NULL, t0_nnz, &nnz),
             DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_read_tile(ds, 0, DC_INT32, indptr, indices, values, t0_nnz, NULL),
             DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_read_tile(ds, 0, 2, indptr, indices, values, t0_nnz, &nnz),
             DC_ERR_INVALID_ARGUMENT, "dtype");
  EXPECT_ERR(dc_dataset_read_tile(ds, 0, -1, indptr, indices, values, t0_nnz, &nnz),
             DC_ERR_INVALID_ARGUMENT, "dtype");

  uint64_t cells[] = {0, 1, 2};
  uint64_t need = 0;
  EXPECT_OK(dc_dataset_batch_nnz(ds, cells, 3, &need));
  int32_t *gi = xmalloc((need + 1) * sizeof *gi);
  int32_t *gv = xmalloc((need + 1) * sizeof *gv);
  int64_t gp[4];
  EXPECT_ERR(dc_dataset_batch_nnz(NULL, cells, 3, &nnz), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_batch_nnz(ds, NULL, 3, &nnz), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_batch_nnz(ds, cells, 3, NULL), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_gather(NULL, cells, 3, DC_INT32, gp, gi, gv, need, &nnz),
             DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_gather(ds, NULL, 3, DC_INT32, gp, gi, gv, need, &nnz),
             DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_gather(ds, cells, 3, DC_INT32, NULL, gi, gv, need, &nnz),
             DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_gather(ds, cells, 3, DC_INT32, gp, NULL, gv, need, &nnz),
             DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_gather(ds, cells, 3, DC_INT32, gp, gi, NULL, need, &nnz),
             DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_gather(ds, cells, 3, DC_INT32, gp, gi, gv, need, NULL),
             DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_gather(ds, cells, 3, 7, gp, gi, gv, need, &nnz),
             DC_ERR_INVALID_ARGUMENT, "dtype");

  int32_t order[4];
  const char *name;
  struct ArrowArrayStream stream;
  EXPECT_ERR(dc_dataset_gene_order(NULL, order, 4), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_gene_order(ds, NULL, N_GENES), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_var_name(NULL, 0, &name), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_var_name(ds, 0, NULL), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_var_table(NULL, &stream), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_var_table(ds, NULL), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_obs(NULL, NULL, 0, &stream), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_obs(ds, NULL, 0, NULL), DC_ERR_INVALID_ARGUMENT, NULL);
  const char *col_with_null[] = {NULL};
  EXPECT_ERR(dc_dataset_obs(ds, col_with_null, 1, &stream), DC_ERR_INVALID_ARGUMENT, NULL);
  free(gi);
  free(gv);
  free(indices);
  free(values);
  dc_dataset_free(ds);
  dc_dataset_free(NULL); /* no-op */

  g_context = "NULL arguments: writing";
  char *path = tmp_path("null_args.dcds");
  dc_writer *w = NULL;
  EXPECT_ERR(dc_writer_create(NULL, 10, &w), DC_ERR_INVALID_ARGUMENT, NULL);
  CHECK(w == NULL);
  EXPECT_ERR(dc_writer_create(path, 10, NULL), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_OK(dc_writer_create(path, 4, &w));
  EXPECT_ERR(dc_writer_set(NULL, DC_WRITER_TILE_SIZE, 10), DC_ERR_INVALID_ARGUMENT, NULL);
  const int32_t perm[] = {3, 2, 1, 0};
  EXPECT_ERR(dc_writer_set_gene_order(NULL, perm, 4), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_set_gene_order(w, NULL, 4), DC_ERR_INVALID_ARGUMENT, NULL);
  const char *names[] = {"a", "b", "c", "d"};
  const char *names_with_null[] = {"a", NULL, "c", "d"};
  EXPECT_ERR(dc_writer_set_var_names(NULL, names, 4), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_set_var_names(w, NULL, 4), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_set_var_names(w, names_with_null, 4), DC_ERR_INVALID_ARGUMENT, NULL);
  const int64_t ip[] = {0, 1};
  const int32_t ix[] = {2}, vx[] = {5};
  EXPECT_ERR(dc_writer_append_csr(NULL, 1, ip, ix, vx), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_append_csr(w, 1, NULL, ix, vx), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_append_csr(w, 1, ip, NULL, vx), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_append_csr(w, 1, ip, ix, NULL), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_append_obs(NULL, NULL, NULL), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_append_obs(w, NULL, NULL), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_set_var_table(NULL, NULL, NULL), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_set_var_table(w, NULL, NULL), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_finish(NULL), DC_ERR_INVALID_ARGUMENT, NULL);
  /* the writer is still usable after all that; rows with no entries may pass NULL arrays */
  const int64_t empty_rows[] = {0, 0, 0};
  EXPECT_OK(dc_writer_append_csr(w, 2, empty_rows, NULL, NULL));
  EXPECT_OK(dc_writer_append_csr(w, 0, empty_rows, NULL, NULL)); /* no rows at all */
  EXPECT_OK(dc_writer_append_csr(w, 1, ip, ix, vx));
  EXPECT_OK(dc_writer_finish(w));
  dc_writer_free(w);
  dc_writer_free(NULL); /* no-op */
  EXPECT_OK(dc_dataset_open(path, &ds));
  uint64_t all[] = {0, 1, 2}, got = 0;
  int64_t p3[4];
  int32_t i3[2], v3[2];
  EXPECT_OK(dc_dataset_gather(ds, all, 3, DC_INT32, p3, i3, v3, 2, &got));
  CHECK_U64(got, 1);
  CHECK(p3[0] == 0 && p3[1] == 0 && p3[2] == 0 && p3[3] == 1 && i3[0] == 2 && v3[0] == 5);
  /* cells without entries need no entry buffers */
  got = 7;
  EXPECT_OK(dc_dataset_gather(ds, all, 2, DC_FLOAT32, p3, NULL, NULL, 0, &got));
  CHECK(got == 0 && p3[0] == 0 && p3[1] == 0 && p3[2] == 0);
  dc_dataset_free(ds);
  free(path);
}

static void test_bad_parameters(void)
{
  g_context = "bad reader parameters";
  dc_dataset *ds = NULL;
  EXPECT_OK(dc_dataset_open(g_main, &ds));
  EXPECT_ERR(dc_dataset_set(ds, 4, 0), DC_ERR_INVALID_ARGUMENT, NULL); /* 3 is DC_DATASET_CACHE_BYTES */
  EXPECT_ERR(dc_dataset_set(ds, -1, 0), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_set(ds, INT32_MAX, 0), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_set(ds, DC_DATASET_THREADS, -1), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_set(ds, DC_DATASET_TILE_CACHE, -1), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_set(ds, DC_DATASET_VERIFY_CRC, 2), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_dataset_set(ds, DC_DATASET_VERIFY_CRC, -1), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_OK(dc_dataset_set(ds, DC_DATASET_THREADS, 0));
  EXPECT_OK(dc_dataset_set(ds, DC_DATASET_TILE_CACHE, 0));
  EXPECT_OK(dc_dataset_set(ds, DC_DATASET_VERIFY_CRC, 0));
  dc_dataset_free(ds);

  g_context = "bad writer parameters";
  char *path = tmp_path("bad_params.dcds");
  dc_writer *w = NULL;
  EXPECT_ERR(dc_writer_create(path, 0, &w), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_create(path, 0x80000001u, &w), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_create(path, UINT32_MAX, &w), DC_ERR_INVALID_ARGUMENT, NULL);
  CHECK(w == NULL);
  char *orphan = tmp_path("no/such/parent/x.dcds");
  EXPECT_ERR(dc_writer_create(orphan, 10, &w), DC_ERR_NOT_FOUND, NULL);
  CHECK(w == NULL);
  free(orphan);
  EXPECT_ERR(dc_writer_create("/", 10, &w), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_create("bad\xff\xfe.dcds", 10, &w), DC_ERR_INVALID_ARGUMENT, NULL);
  CHECK(w == NULL);

  EXPECT_OK(dc_writer_create(path, 8, &w));
  EXPECT_ERR(dc_writer_set(w, 7, 1), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_set(w, -1, 1), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_set(w, DC_WRITER_TILE_SIZE, 0), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_set(w, DC_WRITER_TILE_SIZE, -5), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_set(w, DC_WRITER_N_CHUNKS, 0), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_set(w, DC_WRITER_N_CHUNKS, 65537), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_OK(dc_writer_set(w, DC_WRITER_N_CHUNKS, 65536));
  EXPECT_ERR(dc_writer_set(w, DC_WRITER_ZSTD_LEVEL, 23), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_set(w, DC_WRITER_ZSTD_LEVEL, INT64_MAX), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_set(w, DC_WRITER_ZSTD_LEVEL, INT64_MIN), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_OK(dc_writer_set(w, DC_WRITER_ZSTD_LEVEL, 22));
  EXPECT_ERR(dc_writer_set(w, DC_WRITER_THREADS, -1), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_set(w, DC_WRITER_OVERWRITE, 2), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_set(w, DC_WRITER_OVERWRITE, -1), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_set(w, DC_WRITER_OBS_TILES_PER_FILE, 0), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_set(w, DC_WRITER_OBS_MAX_CATEGORIES, -1), DC_ERR_INVALID_ARGUMENT, NULL);

  /* gene order: wrong length, repeated entry, out of range */
  int32_t perm[8] = {7, 6, 5, 4, 3, 2, 1, 0};
  EXPECT_ERR(dc_writer_set_gene_order(w, perm, 7), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_set_gene_order(w, perm, 9), DC_ERR_INVALID_ARGUMENT, NULL);
  perm[5] = 7;
  EXPECT_ERR(dc_writer_set_gene_order(w, perm, 8), DC_ERR_INVALID_ARGUMENT, NULL);
  perm[5] = 8;
  EXPECT_ERR(dc_writer_set_gene_order(w, perm, 8), DC_ERR_INVALID_ARGUMENT, NULL);
  perm[5] = -1;
  EXPECT_ERR(dc_writer_set_gene_order(w, perm, 8), DC_ERR_INVALID_ARGUMENT, NULL);
  perm[5] = 2;

  /* names: wrong length, a line break, bad UTF-8 */
  const char *names[8] = {"a", "b", "c", "d", "e", "f", "g", "h"};
  EXPECT_ERR(dc_writer_set_var_names(w, names, 7), DC_ERR_INVALID_ARGUMENT, NULL);
  names[6] = "two\nlines";
  EXPECT_ERR(dc_writer_set_var_names(w, names, 8), DC_ERR_INVALID_ARGUMENT, "6");
  names[6] = "cr\r";
  EXPECT_ERR(dc_writer_set_var_names(w, names, 8), DC_ERR_INVALID_ARGUMENT, "6");
  names[6] = "bad\xc3(";
  EXPECT_ERR(dc_writer_set_var_names(w, names, 8), DC_ERR_INVALID_ARGUMENT, "6");
  names[6] = "g";

  /* After all those refusals the settings still work; after the first append the
   * layout settings are refused with DC_ERR_STATE. */
  EXPECT_OK(dc_writer_set(w, DC_WRITER_N_CHUNKS, 2));
  EXPECT_OK(dc_writer_set(w, DC_WRITER_TILE_SIZE, 2));
  EXPECT_OK(dc_writer_set_gene_order(w, perm, 8));
  EXPECT_OK(dc_writer_set_var_names(w, names, 8));
  const int64_t ip[] = {0, 2, 3, 3};
  const int32_t ix[] = {7, 0, 3}, vx[] = {1, 2, 3};
  EXPECT_OK(dc_writer_append_csr(w, 3, ip, ix, vx));
  EXPECT_ERR(dc_writer_set(w, DC_WRITER_TILE_SIZE, 5), DC_ERR_STATE, NULL);
  EXPECT_ERR(dc_writer_set(w, DC_WRITER_N_CHUNKS, 5), DC_ERR_STATE, NULL);
  EXPECT_ERR(dc_writer_set(w, DC_WRITER_ZSTD_LEVEL, 5), DC_ERR_STATE, NULL);
  EXPECT_ERR(dc_writer_set(w, DC_WRITER_OBS_TILES_PER_FILE, 5), DC_ERR_STATE, NULL);
  EXPECT_ERR(dc_writer_set_gene_order(w, perm, 8), DC_ERR_STATE, NULL);
  EXPECT_OK(dc_writer_set(w, DC_WRITER_THREADS, 2));
  EXPECT_OK(dc_writer_set(w, DC_WRITER_OVERWRITE, 0));
  /* the last call of set_var_names wins */
  names[0] = "first";
  EXPECT_OK(dc_writer_set_var_names(w, names, 8));
  EXPECT_OK(dc_writer_finish(w));

  g_context = "calls after finish";
  EXPECT_ERR(dc_writer_append_csr(w, 3, ip, ix, vx), DC_ERR_STATE, NULL);
  EXPECT_ERR(dc_writer_set(w, DC_WRITER_THREADS, 1), DC_ERR_STATE, NULL);
  EXPECT_ERR(dc_writer_set(w, DC_WRITER_OVERWRITE, 1), DC_ERR_STATE, NULL);
  EXPECT_ERR(dc_writer_set_gene_order(w, perm, 8), DC_ERR_STATE, NULL);
  EXPECT_ERR(dc_writer_set_var_names(w, names, 8), DC_ERR_STATE, NULL);
  EXPECT_ERR(dc_writer_finish(w), DC_ERR_STATE, NULL);
  dc_writer_free(w);

  /* what was written: 3 cells, 2 tiles, gene order perm, names permuted */
  EXPECT_OK(dc_dataset_open(path, &ds));
  dc_dataset_info info;
  EXPECT_OK(dc_dataset_info_get(ds, &info));
  CHECK_U64(info.n_cells, 3);
  CHECK_U64(info.n_tiles, 2);
  CHECK_U64(info.nnz, 3);
  int32_t order[8];
  EXPECT_OK(dc_dataset_gene_order(ds, order, 8));
  CHECK(memcmp(order, perm, sizeof order) == 0);
  for (uint32_t j = 0; j < 8; j++) {
    const char *name = NULL;
    EXPECT_OK(dc_dataset_var_name(ds, j, &name));
    CHECK_STR(name, names[perm[j]]);
  }
  uint64_t cells[] = {0}, got = 0;
  int64_t gp[2];
  int32_t gi[2], gv[2];
  EXPECT_OK(dc_dataset_gather(ds, cells, 1, DC_INT32, gp, gi, gv, 2, &got));
  /* input row 0 = {7: 1, 0: 2}; output column j = input column perm[j] */
  int32_t inv[8];
  for (int j = 0; j < 8; j++)
    inv[perm[j]] = j;
  CHECK_U64(got, 2);
  int32_t c0 = inv[0], c7 = inv[7];
  CHECK(gi[0] == (c0 < c7 ? c0 : c7) && gi[1] == (c0 < c7 ? c7 : c0));
  CHECK(gv[0] == (c0 < c7 ? 2 : 1) && gv[1] == (c0 < c7 ? 1 : 2));
  dc_dataset_free(ds);
  free(path);
}

/* Every parameter's range, as dc_*_param_bounds report it, is exactly what dc_*_set accepts:
 * both ends accepted, one step beyond either end refused. */
static void test_parameter_bounds(void)
{
  g_context = "reader parameter bounds";
  dc_dataset *ds = NULL;
  EXPECT_OK(dc_dataset_open(g_main, &ds));
  const dc_dataset_param rp[] = {DC_DATASET_THREADS, DC_DATASET_TILE_CACHE, DC_DATASET_VERIFY_CRC,
                                 DC_DATASET_CACHE_BYTES};
  for (size_t i = 0; i < sizeof rp / sizeof rp[0]; i++) {
    int64_t lo = 7, hi = -7;
    EXPECT_OK(dc_dataset_param_bounds(rp[i], &lo, &hi));
    CHECK(lo == 0 && lo <= hi);
    EXPECT_OK(dc_dataset_set(ds, rp[i], lo));
    EXPECT_OK(dc_dataset_set(ds, rp[i], hi));
    EXPECT_ERR(dc_dataset_set(ds, rp[i], lo - 1), DC_ERR_INVALID_ARGUMENT, NULL);
    if (hi < INT64_MAX)
      EXPECT_ERR(dc_dataset_set(ds, rp[i], hi + 1), DC_ERR_INVALID_ARGUMENT, NULL);
  }
  int64_t lo = 0, hi = 0;
  EXPECT_OK(dc_dataset_param_bounds(DC_DATASET_VERIFY_CRC, &lo, &hi));
  CHECK(lo == 0 && hi == 1);
  EXPECT_OK(dc_dataset_set(ds, DC_DATASET_THREADS, 0));
  EXPECT_OK(dc_dataset_set(ds, DC_DATASET_TILE_CACHE, 2));
  dc_dataset_free(ds);
  lo = 5, hi = 6;
  EXPECT_ERR(dc_dataset_param_bounds(4, &lo, &hi), DC_ERR_INVALID_ARGUMENT, "4");
  EXPECT_ERR(dc_dataset_param_bounds(DC_DATASET_THREADS, NULL, &hi), DC_ERR_INVALID_ARGUMENT, "min");
  EXPECT_ERR(dc_dataset_param_bounds(DC_DATASET_THREADS, &lo, NULL), DC_ERR_INVALID_ARGUMENT, "max");
  CHECK(lo == 5 && hi == 6); /* out-parameters are written only on DC_OK */

  g_context = "writer parameter bounds";
  const dc_writer_param wp[] = {DC_WRITER_TILE_SIZE,  DC_WRITER_N_CHUNKS,           DC_WRITER_ZSTD_LEVEL,
                                DC_WRITER_THREADS,    DC_WRITER_OVERWRITE,          DC_WRITER_OBS_TILES_PER_FILE,
                                DC_WRITER_OBS_MAX_CATEGORIES};
  char *path = tmp_path("param_bounds.dcds");
  dc_writer *w = NULL;
  EXPECT_OK(dc_writer_create(path, 4, &w));
  for (size_t i = 0; i < sizeof wp / sizeof wp[0]; i++) {
    lo = 7, hi = -7;
    EXPECT_OK(dc_writer_param_bounds(wp[i], &lo, &hi));
    CHECK(lo <= hi);
    EXPECT_OK(dc_writer_set(w, wp[i], lo));
    EXPECT_OK(dc_writer_set(w, wp[i], hi));
    if (lo > INT64_MIN)
      EXPECT_ERR(dc_writer_set(w, wp[i], lo - 1), DC_ERR_INVALID_ARGUMENT, NULL);
    if (hi < INT64_MAX)
      EXPECT_ERR(dc_writer_set(w, wp[i], hi + 1), DC_ERR_INVALID_ARGUMENT, NULL);
  }
  /* the documented ranges */
  EXPECT_OK(dc_writer_param_bounds(DC_WRITER_N_CHUNKS, &lo, &hi));
  CHECK(lo == 1 && hi == 65536);
  EXPECT_OK(dc_writer_param_bounds(DC_WRITER_ZSTD_LEVEL, &lo, &hi));
  CHECK(lo < 0 && hi >= 19); /* the linked zstd's: negative fast levels up to at least 19 */
  EXPECT_OK(dc_writer_param_bounds(DC_WRITER_OVERWRITE, &lo, &hi));
  CHECK(lo == 0 && hi == 1);
  EXPECT_OK(dc_writer_param_bounds(DC_WRITER_TILE_SIZE, &lo, &hi));
  CHECK(lo == 1 && hi == INT64_MAX);
  dc_writer_free(w); /* abandoned: nothing written */
  lo = 5, hi = 6;
  EXPECT_ERR(dc_writer_param_bounds(7, &lo, &hi), DC_ERR_INVALID_ARGUMENT, "7");
  EXPECT_ERR(dc_writer_param_bounds(-1, &lo, &hi), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_writer_param_bounds(DC_WRITER_TILE_SIZE, NULL, NULL), DC_ERR_INVALID_ARGUMENT, NULL);
  CHECK(lo == 5 && hi == 6);
  free(path);
}

/* ------------------------------------------------------------------------------------------ */
/* Errors: reading                                                                            */
/* ------------------------------------------------------------------------------------------ */

static void test_not_found_and_out_of_range(void)
{
  g_context = "open: no manifest, no directory, a file";
  dc_dataset *ds = NULL;
  char *nomani = tmp_path("no_manifest.dcds");
  CHECK(mkdir(nomani, 0755) == 0);
  char *tiles = xasprintf("%s/tiles", nomani);
  CHECK(mkdir(tiles, 0755) == 0);
  EXPECT_ERR(dc_dataset_open(nomani, &ds), DC_ERR_NOT_FOUND, "manifest");
  CHECK(ds == NULL);
  char *missing = tmp_path("does_not_exist.dcds");
  EXPECT_ERR(dc_dataset_open(missing, &ds), DC_ERR_NOT_FOUND, NULL);
  CHECK(ds == NULL);
  EXPECT_ERR(dc_dataset_open("bad\xff.dcds", &ds), DC_ERR_INVALID_ARGUMENT, NULL);
  free(tiles);
  free(nomani);
  free(missing);

  g_context = "out of range";
  EXPECT_OK(dc_dataset_open(g_main, &ds));
  dc_dataset_info info;
  EXPECT_OK(dc_dataset_info_get(ds, &info));
  uint64_t first = 77, n = 77, nnz = 77;
  EXPECT_ERR(dc_dataset_tile_bounds(ds, info.n_tiles, &first, &n, &nnz), DC_ERR_OUT_OF_RANGE, NULL);
  EXPECT_ERR(dc_dataset_tile_bounds(ds, UINT64_MAX, &first, &n, &nnz), DC_ERR_OUT_OF_RANGE, NULL);
  CHECK(first == 77 && n == 77 && nnz == 77); /* out-parameters untouched on error */
  int64_t indptr[TILE + 1];
  int32_t ix[4];
  float vx[4];
  EXPECT_ERR(dc_dataset_read_tile(ds, info.n_tiles, DC_FLOAT32, indptr, ix, vx, 4, &nnz),
             DC_ERR_OUT_OF_RANGE, NULL);
  EXPECT_ERR(dc_dataset_read_tile(ds, info.n_tiles, DC_FLOAT32, NULL, NULL, NULL, 0, &nnz),
             DC_ERR_OUT_OF_RANGE, NULL);
  CHECK(nnz == 77);
  uint64_t cells[] = {0, N_CELLS - 1, N_CELLS, 5};
  char word[32];
  snprintf(word, sizeof word, "%u", N_CELLS);
  EXPECT_ERR(dc_dataset_batch_nnz(ds, cells, 4, &nnz), DC_ERR_OUT_OF_RANGE, word);
  CHECK(nnz == 77);
  EXPECT_ERR(dc_dataset_gather(ds, cells, 4, DC_INT32, indptr, ix, (int32_t *)vx, 4, &nnz),
             DC_ERR_OUT_OF_RANGE, word);
  EXPECT_ERR(dc_dataset_gather(ds, cells, 4, DC_INT32, NULL, NULL, NULL, 0, &nnz),
             DC_ERR_OUT_OF_RANGE, word);
  cells[2] = UINT64_MAX;
  EXPECT_ERR(dc_dataset_gather(ds, cells, 4, DC_INT32, NULL, NULL, NULL, 0, &nnz),
             DC_ERR_OUT_OF_RANGE, NULL);
  CHECK(nnz == 77);
  const char *name = NULL;
  EXPECT_ERR(dc_dataset_var_name(ds, N_GENES, &name), DC_ERR_OUT_OF_RANGE, NULL);
  EXPECT_ERR(dc_dataset_var_name(ds, UINT32_MAX, &name), DC_ERR_OUT_OF_RANGE, NULL);
  CHECK(name == NULL);

  g_context = "absent optional parts";
  struct ArrowArrayStream stream;
  memset(&stream, 0, sizeof stream);
  EXPECT_ERR(dc_dataset_var_table(ds, &stream), DC_ERR_NOT_FOUND, NULL);
  CHECK(stream.release == NULL); /* nothing written on error */
  EXPECT_ERR(dc_dataset_obs(ds, NULL, 0, &stream), DC_ERR_NOT_FOUND, NULL);
  const char *cols[] = {"cell_type"};
  EXPECT_ERR(dc_dataset_obs(ds, cols, 1, &stream), DC_ERR_NOT_FOUND, NULL);
  CHECK(stream.release == NULL);
  dc_dataset_free(ds);
}

/* Copies a dataset directory (manifest, tiles, optional files) to `dst`. */
static void copy_dataset(const char *src, const char *dst, uint64_t n_tiles)
{
  CHECK(mkdir(dst, 0755) == 0);
  char *d = xasprintf("%s/tiles", dst);
  CHECK(mkdir(d, 0755) == 0);
  free(d);
  const char *files[] = {"manifest.json", "gene_order.npy", "var_names.txt"};
  for (size_t i = 0; i < 3; i++) {
    char *s = xasprintf("%s/%s", src, files[i]);
    char *t = xasprintf("%s/%s", dst, files[i]);
    if (path_exists(s))
      copy_file(s, t);
    free(s);
    free(t);
  }
  for (uint64_t i = 0; i < n_tiles; i++) {
    char *s = xasprintf("%s/tiles/tile_%06llu.dct", src, (unsigned long long)i);
    char *t = xasprintf("%s/tiles/tile_%06llu.dct", dst, (unsigned long long)i);
    copy_file(s, t);
    free(s);
    free(t);
  }
}

/* The message names tile `t` (as "tile 2", "tile_000002" or similar). */
static void check_names_tile(uint64_t t)
{
  const char *msg = dc_last_error();
  char a[32], b[32];
  snprintf(a, sizeof a, "tile %llu", (unsigned long long)t);
  snprintf(b, sizeof b, "tile_%06llu", (unsigned long long)t);
  if (!contains_ci(msg, a) && !contains_ci(msg, b))
    FAIL("message \"%s\" does not name tile %llu", msg, (unsigned long long)t);
  PASS();
}

static void test_corrupt_tile(void)
{
  g_context = "a corrupted tile";
  char *copy = tmp_path("corrupt.dcds");
  copy_dataset(g_main, copy, 8);
  dc_dataset *ds = NULL;
  EXPECT_OK(dc_dataset_open(copy, &ds)); /* the copy reads like the original */
  uint64_t cells[] = {0, 300, 999}, nnz = 0;
  EXPECT_OK(dc_dataset_batch_nnz(ds, cells, 3, &nnz));
  dc_dataset_free(ds);

  /* flip one byte in the middle of tile 2's data */
  char *tile = xasprintf("%s/tiles/tile_000002.dct", copy);
  size_t len;
  char *data = read_file(tile, &len);
  CHECK(len > 1000);
  data[len - len / 3] ^= 0x10;
  write_file(tile, data, len);

  EXPECT_OK(dc_dataset_open(copy, &ds)); /* tiles are read on demand */
  uint64_t t2_nnz = 0, t2_first = 0, t2_n = 0;
  EXPECT_OK(dc_dataset_tile_bounds(ds, 2, &t2_first, &t2_n, &t2_nnz));
  int64_t *indptr = xmalloc((N_CELLS + 1) * sizeof *indptr);
  int32_t *ix = xmalloc((g_exp.indptr[N_CELLS] + 1) * sizeof *ix);
  int32_t *vx = xmalloc((g_exp.indptr[N_CELLS] + 1) * sizeof *vx);
  EXPECT_ERR(dc_dataset_read_tile(ds, 2, DC_INT32, indptr, ix, vx, t2_nnz, &nnz), DC_ERR_CHECKSUM, NULL);
  check_names_tile(2);
  uint64_t across[] = {5, 2 * TILE + 3, 7 * TILE};
  uint64_t need = expected_nnz(&g_exp, across, 3);
  EXPECT_ERR(dc_dataset_gather(ds, across, 3, DC_FLOAT32, indptr, ix, vx, need, &nnz), DC_ERR_CHECKSUM, NULL);
  check_names_tile(2);
  /* other tiles are still fine */
  uint64_t others[] = {0, 1, 3 * TILE, 999};
  check_gather(ds, &g_exp, others, 4);
  /* without the CRC check the damage may go unnoticed or be found by the decoder: either
   * way no crash, and never a checksum error */
  EXPECT_OK(dc_dataset_set(ds, DC_DATASET_VERIFY_CRC, 0));
  dc_status s = dc_dataset_read_tile(ds, 2, DC_INT32, indptr, ix, vx, t2_nnz, &nnz);
  CHECK(s == DC_OK || s == DC_ERR_FORMAT);
  EXPECT_OK(dc_dataset_set(ds, DC_DATASET_VERIFY_CRC, 1));
  dc_dataset_free(ds);
  data[len - len / 3] ^= 0x10; /* repaired */
  write_file(tile, data, len);
  EXPECT_OK(dc_dataset_open(copy, &ds));
  check_gather(ds, &g_exp, across, 3);
  dc_dataset_free(ds);

  g_context = "a truncated tile";
  write_file(tile, data, len - 10);
  EXPECT_OK(dc_dataset_open(copy, &ds));
  EXPECT_ERR(dc_dataset_read_tile(ds, 2, DC_INT32, indptr, ix, vx, t2_nnz, &nnz), DC_ERR_FORMAT, NULL);
  check_names_tile(2);
  dc_dataset_free(ds);

  g_context = "a missing tile";
  CHECK(remove(tile) == 0);
  EXPECT_OK(dc_dataset_open(copy, &ds));
  EXPECT_ERR(dc_dataset_read_tile(ds, 2, DC_INT32, indptr, ix, vx, t2_nnz, &nnz), DC_ERR_NOT_FOUND, NULL);
  check_names_tile(2);
  EXPECT_ERR(dc_dataset_gather(ds, across, 3, DC_INT32, indptr, ix, vx, need, &nnz), DC_ERR_NOT_FOUND, NULL);
  dc_dataset_free(ds);

  g_context = "a tile swapped with another";
  char *tile3 = xasprintf("%s/tiles/tile_000003.dct", copy);
  copy_file(tile3, tile); /* tile 3's bytes as tile 2: valid CRC, wrong content */
  EXPECT_OK(dc_dataset_open(copy, &ds));
  dc_status st = dc_dataset_read_tile(ds, 2, DC_INT32, indptr, ix, vx, g_exp.indptr[N_CELLS], &nnz);
  /* the header disagrees with the manifest (nnz, size) unless the tiles happen to match */
  if (st != DC_OK) {
    EXPECT_ERR(st, DC_ERR_FORMAT, NULL);
    check_names_tile(2);
  } else {
    FAIL("tile 3's bytes were accepted as tile 2 (nnz %llu, manifest %llu)", (unsigned long long)nnz,
         (unsigned long long)t2_nnz);
  }
  dc_dataset_free(ds);

  free(tile3);
  free(indptr);
  free(ix);
  free(vx);
  free(data);
  free(tile);
  free(copy);
}

/* Replaces the number after "key": (first occurrence; skipping `skip` occurrences) with
 * `value` (any text). */
static char *edit_json_value(const char *text, const char *key, int skip, const char *value)
{
  char *pat = xasprintf("\"%s\"", key);
  const char *at = text;
  for (int i = 0; i <= skip; i++) {
    at = strstr(i ? at + 1 : at, pat);
    if (!at)
      FAIL("manifest has no %s (occurrence %d)", pat, i);
  }
  const char *p = at + strlen(pat);
  while (*p == ' ' || *p == ':' || *p == '\n' || *p == '\t')
    p++;
  const char *start = p;
  if (*p == '"') {
    p++;
    while (*p && *p != '"')
      p++;
    p++;
  } else if (*p == '[') {
    start = ++p; /* the first element of a list */
    while (*p == ' ' || *p == '\n')
      start = ++p;
    while (*p && (*p == '-' || (*p >= '0' && *p <= '9')))
      p++;
  } else {
    while (*p && (*p == '-' || (*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 't' ||
                  *p == 'r' || *p == 'u' || *p == 'f' || *p == 'a' || *p == 'l' || *p == 's'))
      p++;
  }
  char *out = xasprintf("%.*s%s%s", (int)(start - text), text, value, p);
  free(pat);
  return out;
}

static void test_bad_manifest(void)
{
  char *copy = tmp_path("bad_manifest.dcds");
  copy_dataset(g_main, copy, 8);
  char *mpath = xasprintf("%s/manifest.json", copy);
  size_t len;
  char *orig = read_file(mpath, &len);
  dc_dataset *ds = NULL;
  char num[32];

  static const struct {
    const char *what, *key;
    int skip;
    int delta;          /* added to the number found, when value is NULL */
    const char *value;  /* replacement text */
    dc_status open_status;
  } cases[] = {
      {"n_cells one more than the tiles hold", "n_cells", 0, 1, NULL, DC_ERR_FORMAT},
      {"n_cells one less than the tiles hold", "n_cells", 0, -1, NULL, DC_ERR_FORMAT},
      {"n_genes not a number", "n_genes", 0, 0, "\"many\"", DC_ERR_FORMAT},
      {"n_genes zero", "n_genes", 0, 0, "0", DC_ERR_FORMAT},
      {"tile_size below the first tile's cells", "tile_size", 0, -1, NULL, DC_ERR_FORMAT},
      {"negative n_cells", "n_cells", 0, 0, "-5", DC_ERR_FORMAT},
      {"first tile_cells entry changed", "tile_cells", 0, 1, NULL, DC_ERR_FORMAT},
      {"version 3", "version", 0, 0, "3", DC_ERR_UNSUPPORTED},
      {"another format", "format", 0, 0, "\"something-else\"", DC_ERR_UNSUPPORTED},
      {"has_gene_order not a bool", "has_gene_order", 0, 0, "\"yes\"", DC_ERR_FORMAT},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    g_context = cases[i].what;
    char *edited;
    if (cases[i].value) {
      edited = edit_json_value(orig, cases[i].key, cases[i].skip, cases[i].value);
    } else {
      char *pat = xasprintf("\"%s\"", cases[i].key);
      const char *p = strstr(orig, pat) + strlen(pat);
      while (*p == ' ' || *p == ':' || *p == '[' || *p == '\n')
        p++;
      long long v = strtoll(p, NULL, 10);
      snprintf(num, sizeof num, "%lld", v + cases[i].delta);
      edited = edit_json_value(orig, cases[i].key, cases[i].skip, num);
      free(pat);
    }
    CHECK(strcmp(edited, orig) != 0);
    write_file(mpath, edited, strlen(edited));
    ds = NULL;
    EXPECT_ERR(dc_dataset_open(copy, &ds), cases[i].open_status, NULL);
    CHECK(ds == NULL);
    free(edited);
  }

  g_context = "manifest: not JSON, truncated, empty, an array";
  const char *texts[] = {"not json", "", "[]", "{\"format\": \"deltacells-dataset\"}", "null"};
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
    write_file(mpath, texts[i], strlen(texts[i]));
    EXPECT_ERR(dc_dataset_open(copy, &ds), DC_ERR_FORMAT, "manifest");
  }
  write_file(mpath, orig, len / 2);
  EXPECT_ERR(dc_dataset_open(copy, &ds), DC_ERR_FORMAT, "manifest");

  g_context = "manifest: tile_nnz disagrees with the tile header";
  {
    const char *p = strstr(orig, "\"tile_nnz\"");
    CHECK(p != NULL);
    p += strlen("\"tile_nnz\"");
    while (*p == ' ' || *p == ':' || *p == '[' || *p == '\n')
      p++;
    snprintf(num, sizeof num, "%lld", strtoll(p, NULL, 10) + 1);
    char *edited = edit_json_value(orig, "tile_nnz", 0, num);
    write_file(mpath, edited, strlen(edited));
    free(edited);
    /* counts that only the tile can contradict: found when tile 0 is read */
    dc_status s = dc_dataset_open(copy, &ds);
    if (s == DC_OK) {
      uint64_t nnz;
      int64_t indptr[TILE + 1];
      int32_t *ix = xmalloc((g_exp.indptr[TILE] + 2) * sizeof *ix);
      int32_t *vx = xmalloc((g_exp.indptr[TILE] + 2) * sizeof *vx);
      EXPECT_ERR(dc_dataset_read_tile(ds, 0, DC_INT32, indptr, ix, vx, g_exp.indptr[TILE] + 2, &nnz),
                 DC_ERR_FORMAT, NULL);
      check_names_tile(0);
      uint64_t c0 = 0;
      EXPECT_ERR(dc_dataset_gather(ds, &c0, 1, DC_INT32, indptr, ix, vx, g_exp.indptr[TILE] + 2, &nnz),
                 DC_ERR_FORMAT, NULL);
      free(ix);
      free(vx);
      dc_dataset_free(ds);
    } else {
      EXPECT_ERR(s, DC_ERR_FORMAT, NULL);
    }
  }

  /* restored, it opens again */
  write_file(mpath, orig, len);
  EXPECT_OK(dc_dataset_open(copy, &ds));
  dc_dataset_free(ds);
  free(orig);
  free(mpath);
  free(copy);
}

/* ------------------------------------------------------------------------------------------ */
/* Errors: writing (existing targets, abandoned writes)                                      */
/* ------------------------------------------------------------------------------------------ */

static uint64_t n_cells_at(const char *path)
{
  dc_dataset *ds = NULL;
  EXPECT_OK(dc_dataset_open(path, &ds));
  dc_dataset_info info;
  EXPECT_OK(dc_dataset_info_get(ds, &info));
  dc_dataset_free(ds);
  return info.n_cells;
}

static void write_small(const char *path, uint64_t n_rows, int overwrite, dc_status expect_finish)
{
  dc_writer *w = NULL;
  EXPECT_OK(dc_writer_create(path, N_GENES, &w));
  EXPECT_OK(dc_writer_set(w, DC_WRITER_OVERWRITE, overwrite));
  EXPECT_OK(dc_writer_set(w, DC_WRITER_ZSTD_LEVEL, 1));
  EXPECT_OK(append_rows(w, &g_in, 0, n_rows, 0));
  EXPECT(dc_writer_finish(w), expect_finish);
  dc_writer_free(w);
}

static void test_exists_and_abandon(void)
{
  g_context = "existing target without overwrite";
  char *path = tmp_path("exists.dcds");
  write_small(path, 10, 0, DC_OK);
  CHECK_U64(n_cells_at(path), 10);

  dc_writer *w = NULL;
  EXPECT_OK(dc_writer_create(path, N_GENES, &w));
  EXPECT_ERR(append_rows(w, &g_in, 0, 20, 0), DC_ERR_EXISTS, NULL); /* checked by the first append */
  dc_writer_free(w);
  CHECK_U64(n_cells_at(path), 10);

  /* checked again by finish, which may be retried after allowing overwrite */
  EXPECT_OK(dc_writer_create(path, N_GENES, &w));
  EXPECT_OK(dc_writer_set(w, DC_WRITER_OVERWRITE, 1));
  EXPECT_OK(append_rows(w, &g_in, 0, 20, 1));
  EXPECT_OK(dc_writer_set(w, DC_WRITER_OVERWRITE, 0));
  EXPECT_ERR(dc_writer_finish(w), DC_ERR_EXISTS, NULL);
  CHECK_U64(n_cells_at(path), 10); /* nothing lost */
  EXPECT_OK(dc_writer_set(w, DC_WRITER_OVERWRITE, 1));
  EXPECT_OK(dc_writer_finish(w));
  dc_writer_free(w);
  CHECK_U64(n_cells_at(path), 20);

  g_context = "overwrite with fewer tiles leaves none of the old ones";
  EXPECT_OK(dc_writer_create(path, N_GENES, &w));
  EXPECT_OK(dc_writer_set(w, DC_WRITER_TILE_SIZE, 4));
  EXPECT_OK(dc_writer_set(w, DC_WRITER_OVERWRITE, 1));
  EXPECT_OK(append_rows(w, &g_in, 0, 30, 0)); /* 8 tiles */
  EXPECT_OK(dc_writer_finish(w));
  dc_writer_free(w);
  char *tiles = xasprintf("%s/tiles", path);
  CHECK_U64(count_entries(tiles, "tile_"), 8);
  EXPECT_OK(dc_writer_create(path, N_GENES, &w));
  EXPECT_OK(dc_writer_set(w, DC_WRITER_OVERWRITE, 1));
  EXPECT_OK(append_rows(w, &g_in, 0, 20, 0)); /* 1 tile */
  EXPECT_OK(dc_writer_finish(w));
  dc_writer_free(w);
  CHECK_U64(count_entries(tiles, "tile_"), 1);
  CHECK_U64(n_cells_at(path), 20);
  free(tiles);

  g_context = "existing target without overwrite, target created after the first append";
  char *late = tmp_path("late.dcds");
  EXPECT_OK(dc_writer_create(late, N_GENES, &w));
  EXPECT_OK(append_rows(w, &g_in, 0, 5, 0));
  write_small(late, 3, 0, DC_OK);
  EXPECT_ERR(dc_writer_finish(w), DC_ERR_EXISTS, NULL);
  CHECK_U64(n_cells_at(late), 3);
  dc_writer_free(w);
  CHECK_U64(n_cells_at(late), 3);

  g_context = "overwrite never replaces a directory that is not a dataset";
  char *other = tmp_path("not_a_dataset");
  CHECK(mkdir(other, 0755) == 0);
  char *precious = xasprintf("%s/precious.txt", other);
  write_file(precious, "keep me", 7);
  EXPECT_OK(dc_writer_create(other, N_GENES, &w));
  EXPECT_OK(dc_writer_set(w, DC_WRITER_OVERWRITE, 1));
  EXPECT_ERR(append_rows(w, &g_in, 0, 5, 0), DC_ERR_EXISTS, "precious.txt");
  EXPECT_ERR(dc_writer_finish(w), DC_ERR_EXISTS, "precious.txt");
  dc_writer_free(w);
  CHECK(path_exists(precious));

  g_context = "dc_writer_free without finish";
  char *abandoned = tmp_path("abandoned.dcds");
  EXPECT_OK(dc_writer_create(abandoned, N_GENES, &w));
  EXPECT_OK(dc_writer_set(w, DC_WRITER_TILE_SIZE, 16));
  EXPECT_OK(append_rows(w, &g_in, 0, 100, 0)); /* several tiles encoded in the background */
  EXPECT_OK(dc_writer_set_var_names(w, (const char *const *)g_names, N_GENES));
  dc_writer_free(w);
  dc_dataset *ds = NULL;
  EXPECT_ERR(dc_dataset_open(abandoned, &ds), DC_ERR_NOT_FOUND, NULL);
  CHECK(!path_exists(abandoned));
  CHECK_U64(count_entries(g_dir, ".abandoned"), 0); /* no temporary directory left either */

  /* a writer created and freed at once */
  EXPECT_OK(dc_writer_create(abandoned, N_GENES, &w));
  dc_writer_free(w);
  CHECK(!path_exists(abandoned));

  /* an abandoned overwrite leaves the existing dataset untouched */
  EXPECT_OK(dc_writer_create(path, N_GENES, &w));
  EXPECT_OK(dc_writer_set(w, DC_WRITER_OVERWRITE, 1));
  EXPECT_OK(append_rows(w, &g_in, 0, 40, 0));
  dc_writer_free(w);
  CHECK_U64(n_cells_at(path), 20);
  CHECK_U64(count_entries(g_dir, ".exists"), 0);
  CHECK_U64(count_entries(g_dir, ".late"), 0);
  CHECK_U64(count_entries(g_dir, ".not_a_dataset"), 0);

  free(path);
  free(late);
  free(other);
  free(precious);
  free(abandoned);
}

/* ------------------------------------------------------------------------------------------ */
/* Several threads, one handle                                                                */
/* ------------------------------------------------------------------------------------------ */

#define N_WORKERS 4
#define ROUNDS 12

typedef struct {
  dc_dataset *ds;
  int id;
} worker_arg;

static pthread_barrier_t g_barrier;

static void *gather_worker(void *p)
{
  worker_arg *a = p;
  rng_t rng = {1000u + (uint64_t)a->id};
  uint64_t cells[300];
  pthread_barrier_wait(&g_barrier);
  for (int r = 0; r < ROUNDS; r++) {
    size_t n = 1 + rng_below(&rng, 300);
    for (size_t i = 0; i < n; i++)
      cells[i] = (r + a->id) % 3 == 0 ? (rng_below(&rng, 8) * TILE + rng_below(&rng, 3)) % N_CELLS
                                      : rng_below(&rng, N_CELLS);
    check_gather(a->ds, &g_exp, cells, n);
    if (a->id == 0) /* settings change while the others gather */
      EXPECT_OK(dc_dataset_set(a->ds, DC_DATASET_TILE_CACHE, r % 3));
    if (a->id == 1)
      EXPECT_OK(dc_dataset_set(a->ds, DC_DATASET_THREADS, r % 3));
    /* a failing call on this thread leaves its own message */
    uint64_t bad = N_CELLS + (uint64_t)a->id, nnz;
    char word[32];
    snprintf(word, sizeof word, "%llu", (unsigned long long)bad);
    EXPECT_ERR(dc_dataset_batch_nnz(a->ds, &bad, 1, &nnz), DC_ERR_OUT_OF_RANGE, word);
  }
  return NULL;
}

static void test_threads(void)
{
  g_context = "several threads gather from one handle";
  dc_dataset *ds = NULL;
  EXPECT_OK(dc_dataset_open(g_main, &ds));
  EXPECT_OK(dc_dataset_set(ds, DC_DATASET_TILE_CACHE, 1));
  pthread_t th[N_WORKERS];
  worker_arg args[N_WORKERS];
  CHECK(pthread_barrier_init(&g_barrier, NULL, N_WORKERS) == 0);
  for (int i = 0; i < N_WORKERS; i++) {
    args[i].ds = ds;
    args[i].id = i;
    CHECK(pthread_create(&th[i], NULL, gather_worker, &args[i]) == 0);
  }
  for (int i = 0; i < N_WORKERS; i++)
    CHECK(pthread_join(th[i], NULL) == 0);
  CHECK(pthread_barrier_destroy(&g_barrier) == 0);
  dc_dataset_free(ds);
}

int main(void)
{
  CHECK(dc_abi_version() == DC_ABI_VERSION);
  g_dir = make_temp_dir("dc_test_dataset");

  test_roundtrip();
  test_null_arguments();
  test_bad_parameters();
  test_parameter_bounds();
  test_not_found_and_out_of_range();
  test_corrupt_tile();
  test_bad_manifest();
  test_exists_and_abandon();
  test_threads();

  remove_tree(g_dir);
  g_tmp_root = NULL;
  free(g_dir);
  free(g_main);
  free(g_order);
  free_names(g_names, N_GENES);
  csr_free(&g_in);
  csr_free(&g_exp);
  printf("test_dataset: %lu passed, 0 failed\n", (unsigned long)atomic_load(&g_passed));
  return 0;
}
