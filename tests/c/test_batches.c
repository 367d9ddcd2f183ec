/*
 * C tests of batches read ahead and shuffled orders (section 3.1 of the C API), and of the
 * decoded-data cache parameter, through include/deltacells.h and the real shared or static
 * library.
 *
 * The test writes a dataset from a random CSR matrix it keeps (sorted columns, counts and
 * gaps above 65535 now and then), then iterates it in batches over random orders with
 * repeats, several batch sizes, read-ahead depths, thread counts and cache budgets, and
 * compares every batch with the input rows and with dc_dataset_gather of the same cells.
 * Then: peek, a buffer too small (the batch stays), NULL arrays, batch_size 0, out-of-range
 * cells (named by index), free in the middle of an iteration, an iterator outliving its
 * dataset, a corrupt tile in the middle of an iteration (that batch fails, naming the tile;
 * the next one is read), and dc_dataset_shuffled_order (a permutation, window by window,
 * deterministic, size checks).
 *
 * Everything happens in a private directory made with mkdtemp and removed at the end.
 * Every allocation is freed: ctest also runs this program under valgrind.
 */
#define _XOPEN_SOURCE 700

#define TEST_NAME "test_batches"
#include "test_util.h"

enum { N_CELLS = 300, N_GENES = 70000, TILE = 40 };

typedef struct {
  int64_t indptr[N_CELLS + 1];
  int32_t *indices;
  int32_t *values;
} input_t;

static input_t g_in;
static char *g_dir;
static char *g_path;

/* Sparse rows over 70,000 genes: about 12 nonzeros each, so that gaps above 65535 occur;
 * a few counts above 65535. */
static void make_input(rng_t *rng)
{
  g_in.indices = xmalloc((size_t)N_CELLS * 64 * sizeof(int32_t));
  g_in.values = xmalloc((size_t)N_CELLS * 64 * sizeof(int32_t));
  int64_t nz = 0;
  g_in.indptr[0] = 0;
  for (int r = 0; r < N_CELLS; r++) {
    int k = (int)rng_below(rng, 25);
    int32_t g = (int32_t)rng_below(rng, 5000);
    for (int j = 0; j < k && g < N_GENES; j++) {
      g_in.indices[nz] = g;
      g_in.values[nz] = rng_below(rng, 100) == 0 ? 70000 + (int32_t)rng_below(rng, 1000) : 1 + (int32_t)rng_below(rng, 20);
      nz++;
      g += 1 + (int32_t)(rng_below(rng, 20) == 0 ? 66000 : rng_below(rng, 3000));
    }
    g_in.indptr[r + 1] = nz;
  }
}

static void write_input(const char *path)
{
  dc_writer *w = NULL;
  EXPECT_OK(dc_writer_create(path, N_GENES, &w));
  EXPECT_OK(dc_writer_set(w, DC_WRITER_TILE_SIZE, TILE));
  EXPECT_OK(dc_writer_set(w, DC_WRITER_N_CHUNKS, 3));
  EXPECT_OK(dc_writer_set(w, DC_WRITER_ZSTD_LEVEL, 1));
  EXPECT_OK(dc_writer_append_csr(w, N_CELLS, g_in.indptr, g_in.indices, g_in.values));
  EXPECT_OK(dc_writer_finish(w));
  dc_writer_free(w);
}

/* Rows of a batch (int32 or float32 values) against the input rows of `cells`. */
static void check_batch(const uint64_t *cells, uint64_t n, dc_dtype dtype, const int64_t *indptr,
                        const int32_t *indices, const void *values, uint64_t nnz)
{
  CHECK_I64(indptr[0], 0);
  CHECK_U64(indptr[n], nnz);
  for (uint64_t i = 0; i < n; i++) {
    uint64_t c = cells[i];
    int64_t a = g_in.indptr[c], len = g_in.indptr[c + 1] - a;
    if (indptr[i + 1] - indptr[i] != len)
      FAIL("row %llu (cell %llu) has %lld nonzeros, expected %lld", (unsigned long long)i,
           (unsigned long long)c, (long long)(indptr[i + 1] - indptr[i]), (long long)len);
    for (int64_t j = 0; j < len; j++) {
      int64_t o = indptr[i] + j;
      double v = dtype == DC_INT32 ? ((const int32_t *)values)[o] : ((const float *)values)[o];
      if (indices[o] != g_in.indices[a + j] || v != (double)g_in.values[a + j])
        FAIL("row %llu (cell %llu) entry %lld differs", (unsigned long long)i, (unsigned long long)c,
             (long long)j);
    }
  }
  PASS();
}

typedef struct {
  int64_t *indptr;
  int32_t *indices;
  void *values;
  uint64_t cap;
} bufs_t;

static void bufs_init(bufs_t *b, uint64_t rows, uint64_t cap)
{
  b->indptr = xmalloc((rows + 1) * sizeof(int64_t));
  b->indices = xmalloc((cap ? cap : 1) * sizeof(int32_t));
  b->values = xmalloc((cap ? cap : 1) * sizeof(float));
  b->cap = cap;
}

static void bufs_free(bufs_t *b)
{
  free(b->indptr);
  free(b->indices);
  free(b->values);
}

/* Iterates `cells` in batches and checks each against the input and against a gather. */
static void iterate_and_check(dc_dataset *ds, const uint64_t *cells, size_t n, size_t bs, uint32_t ra,
                              dc_dtype dtype)
{
  dc_batches *b = NULL;
  EXPECT_OK(dc_dataset_batches(ds, cells, n, bs, ra, &b));
  CHECK(b != NULL);
  bufs_t out, ref;
  bufs_init(&out, bs, 64 * bs);
  bufs_init(&ref, bs, 64 * bs);
  size_t done = 0;
  for (;;) {
    uint64_t rows = 99, nnz = 99, got_rows = 99, got_nnz = 99;
    EXPECT_OK(dc_batches_peek(b, &rows, &nnz));
    EXPECT_OK(dc_batches_next(b, dtype, out.indptr, out.indices, out.values, out.cap, &got_rows, &got_nnz));
    CHECK_U64(got_rows, rows);
    CHECK_U64(got_nnz, nnz);
    if (rows == 0)
      break;
    uint64_t want_rows = n - done < bs ? n - done : bs;
    CHECK_U64(rows, want_rows);
    check_batch(cells + done, rows, dtype, out.indptr, out.indices, out.values, nnz);
    uint64_t ref_nnz = 0;
    EXPECT_OK(dc_dataset_gather(ds, cells + done, rows, dtype, ref.indptr, ref.indices, ref.values, ref.cap,
                                &ref_nnz));
    CHECK_U64(ref_nnz, nnz);
    CHECK(memcmp(ref.indptr, out.indptr, (rows + 1) * sizeof(int64_t)) == 0);
    CHECK(nnz == 0 || memcmp(ref.indices, out.indices, nnz * sizeof(int32_t)) == 0);
    CHECK(nnz == 0 || memcmp(ref.values, out.values, nnz * 4) == 0);
    done += rows;
  }
  CHECK_U64(done, n);
  /* The end stays the end. */
  uint64_t rows = 1, nnz = 1;
  EXPECT_OK(dc_batches_next(b, dtype, NULL, NULL, NULL, 0, &rows, &nnz));
  CHECK_U64(rows, 0);
  CHECK_U64(nnz, 0);
  dc_batches_free(b);
  bufs_free(&out);
  bufs_free(&ref);
}

static void test_batches_equal_gathers(void)
{
  g_context = "batches equal gathers";
  dc_dataset *ds = NULL;
  EXPECT_OK(dc_dataset_open(g_path, &ds));
  rng_t rng = {77};
  const int64_t budgets[] = {0, 1000, 50000, 268435456};
  for (int round = 0; round < 12; round++) {
    EXPECT_OK(dc_dataset_set(ds, DC_DATASET_THREADS, 1 + round % 2));
    EXPECT_OK(dc_dataset_set(ds, DC_DATASET_CACHE_BYTES, budgets[round % 4]));
    size_t n = (size_t)rng_below(&rng, 700);
    uint64_t *cells = xmalloc((n ? n : 1) * sizeof *cells);
    for (size_t i = 0; i < n; i++)
      cells[i] = rng_below(&rng, N_CELLS);
    size_t bs = 1 + (size_t)rng_below(&rng, 90);
    iterate_and_check(ds, cells, n, bs, (uint32_t)rng_below(&rng, 5), round % 3 ? DC_INT32 : DC_FLOAT32);
    free(cells);
  }
  /* A shuffled epoch, window of 2 tiles. */
  uint64_t order[N_CELLS];
  EXPECT_OK(dc_dataset_shuffled_order(ds, 9, 2, order, N_CELLS));
  iterate_and_check(ds, order, N_CELLS, 32, 3, DC_INT32);
  /* DC_DATASET_TILE_CACHE is still accepted (a budget of that many tiles). */
  EXPECT_OK(dc_dataset_set(ds, DC_DATASET_TILE_CACHE, 2));
  iterate_and_check(ds, order, N_CELLS, 50, 0, DC_FLOAT32);
  dc_dataset_free(ds);
}

static void test_bad_arguments(void)
{
  g_context = "bad arguments";
  dc_dataset *ds = NULL;
  EXPECT_OK(dc_dataset_open(g_path, &ds));
  uint64_t cells[] = {3, 7, 300, 9};
  dc_batches *b = (dc_batches *)&cells; /* must stay untouched on error */
  EXPECT_ERR(dc_dataset_batches(ds, cells, 4, 2, 0, &b), DC_ERR_OUT_OF_RANGE, "cells[2] = 300");
  CHECK(b == (dc_batches *)&cells);
  EXPECT_ERR(dc_dataset_batches(ds, cells, 2, 0, 0, &b), DC_ERR_INVALID_ARGUMENT, "batch_size");
  EXPECT_ERR(dc_dataset_batches(ds, NULL, 2, 1, 0, &b), DC_ERR_INVALID_ARGUMENT, "cells");
  EXPECT_ERR(dc_dataset_batches(ds, cells, 2, 1, 0, NULL), DC_ERR_INVALID_ARGUMENT, "out");
  EXPECT_ERR(dc_dataset_batches(NULL, cells, 2, 1, 0, &b), DC_ERR_INVALID_ARGUMENT, "dc_dataset");
  EXPECT_ERR(dc_dataset_set(ds, DC_DATASET_CACHE_BYTES, -1), DC_ERR_INVALID_ARGUMENT, "CACHE_BYTES");

  EXPECT_OK(dc_dataset_batches(ds, cells, 2, 2, 1, &b));
  uint64_t rows = 0, nnz = 0, r2 = 0, z2 = 0;
  EXPECT_OK(dc_batches_peek(b, &rows, &nnz));
  EXPECT_OK(dc_batches_peek(b, NULL, NULL)); /* either out-pointer may be NULL */
  CHECK_U64(rows, 2);
  uint64_t want = (uint64_t)(g_in.indptr[4] - g_in.indptr[3] + g_in.indptr[8] - g_in.indptr[7]);
  CHECK_U64(nnz, want);
  bufs_t o;
  bufs_init(&o, 2, nnz + 1);
  EXPECT_ERR(dc_batches_next(NULL, DC_INT32, o.indptr, o.indices, o.values, o.cap, &r2, &z2),
             DC_ERR_INVALID_ARGUMENT, "dc_batches");
  EXPECT_ERR(dc_batches_next(b, DC_INT32, o.indptr, o.indices, o.values, o.cap, NULL, &z2),
             DC_ERR_INVALID_ARGUMENT, "n_rows_out");
  EXPECT_ERR(dc_batches_next(b, DC_INT32, o.indptr, o.indices, o.values, o.cap, &r2, NULL),
             DC_ERR_INVALID_ARGUMENT, "nnz_out");
  EXPECT_ERR(dc_batches_next(b, (dc_dtype)7, o.indptr, o.indices, o.values, o.cap, &r2, &z2),
             DC_ERR_INVALID_ARGUMENT, "dtype");
  if (nnz > 0) {
    z2 = 0;
    EXPECT_ERR(dc_batches_next(b, DC_INT32, o.indptr, o.indices, o.values, nnz - 1, &r2, &z2),
               DC_ERR_BUFFER_TOO_SMALL, NULL);
    CHECK_U64(z2, nnz);
    EXPECT_ERR(dc_batches_next(b, DC_INT32, o.indptr, NULL, o.values, o.cap, &r2, &z2),
               DC_ERR_INVALID_ARGUMENT, "indices");
    EXPECT_ERR(dc_batches_next(b, DC_INT32, o.indptr, o.indices, NULL, o.cap, &r2, &z2),
               DC_ERR_INVALID_ARGUMENT, "values");
  }
  EXPECT_ERR(dc_batches_next(b, DC_INT32, NULL, o.indices, o.values, o.cap, &r2, &z2),
             DC_ERR_INVALID_ARGUMENT, "indptr");
  /* After all those refusals the first batch is still the next one. */
  EXPECT_OK(dc_batches_next(b, DC_INT32, o.indptr, o.indices, o.values, o.cap, &r2, &z2));
  CHECK_U64(r2, 2);
  check_batch(cells, 2, DC_INT32, o.indptr, o.indices, o.values, z2);
  EXPECT_ERR(dc_batches_peek(NULL, &rows, &nnz), DC_ERR_INVALID_ARGUMENT, "dc_batches");
  dc_batches_free(b);
  dc_batches_free(NULL);
  bufs_free(&o);

  /* Shuffled orders: sizes and NULLs. */
  uint64_t order[N_CELLS];
  EXPECT_ERR(dc_dataset_shuffled_order(ds, 1, 1, order, N_CELLS - 1), DC_ERR_BUFFER_TOO_SMALL, "n_cells");
  EXPECT_ERR(dc_dataset_shuffled_order(ds, 1, 1, NULL, N_CELLS), DC_ERR_INVALID_ARGUMENT, "out");
  EXPECT_ERR(dc_dataset_shuffled_order(NULL, 1, 1, order, N_CELLS), DC_ERR_INVALID_ARGUMENT, "dc_dataset");
  dc_dataset_free(ds);
}

static void test_shuffled_order(void)
{
  g_context = "shuffled order";
  dc_dataset *ds = NULL;
  EXPECT_OK(dc_dataset_open(g_path, &ds));
  static uint64_t a[N_CELLS], b2[N_CELLS];
  for (uint32_t window = 0; window < 4; window++) {
    EXPECT_OK(dc_dataset_shuffled_order(ds, 12345, window, a, N_CELLS));
    EXPECT_OK(dc_dataset_shuffled_order(ds, 12345, window, b2, N_CELLS));
    CHECK(memcmp(a, b2, sizeof a) == 0); /* deterministic */
    int seen[N_CELLS] = {0};
    for (int i = 0; i < N_CELLS; i++) {
      CHECK(a[i] < N_CELLS && !seen[a[i]]);
      seen[a[i]] = 1;
    }
    /* Window by window: the first w*TILE cells come from w tiles (all tiles are full). */
    uint32_t w = window ? window : 1;
    int tiles_seen[N_CELLS / TILE] = {0}, distinct = 0;
    for (uint32_t i = 0; i < w * TILE && i < N_CELLS; i++)
      if (!tiles_seen[a[i] / TILE]++)
        distinct++;
    CHECK(distinct <= (int)w);
  }
  EXPECT_OK(dc_dataset_shuffled_order(ds, 12346, 2, b2, N_CELLS));
  CHECK(memcmp(a, b2, sizeof a) != 0); /* another seed, another order */
  dc_dataset_free(ds);
}

static void test_free_mid_iteration_and_outliving(void)
{
  g_context = "free in the middle; iterator outlives the dataset";
  dc_dataset *ds = NULL;
  EXPECT_OK(dc_dataset_open(g_path, &ds));
  uint64_t order[N_CELLS];
  EXPECT_OK(dc_dataset_shuffled_order(ds, 3, 2, order, N_CELLS));
  bufs_t o;
  bufs_init(&o, 16, 64 * 16);
  for (int taken = 0; taken < 3; taken++) {
    EXPECT_OK(dc_dataset_set(ds, DC_DATASET_THREADS, 2));
    dc_batches *b = NULL;
    EXPECT_OK(dc_dataset_batches(ds, order, N_CELLS, 16, 8, &b));
    for (int k = 0; k < taken; k++) {
      uint64_t r = 0, z = 0;
      EXPECT_OK(dc_batches_next(b, DC_INT32, o.indptr, o.indices, o.values, o.cap, &r, &z));
      check_batch(order + 16 * k, r, DC_INT32, o.indptr, o.indices, o.values, z);
    }
    dc_batches_free(b); /* read-ahead of up to 8 batches in flight */
  }
  /* The dataset freed first: the iterator still reads everything. */
  dc_batches *b = NULL;
  EXPECT_OK(dc_dataset_batches(ds, order, N_CELLS, 16, 2, &b));
  dc_dataset_free(ds);
  size_t done = 0;
  for (;;) {
    uint64_t r = 0, z = 0;
    EXPECT_OK(dc_batches_next(b, DC_FLOAT32, o.indptr, o.indices, o.values, o.cap, &r, &z));
    if (r == 0)
      break;
    check_batch(order + done, r, DC_FLOAT32, o.indptr, o.indices, o.values, z);
    done += r;
  }
  CHECK_U64(done, N_CELLS);
  dc_batches_free(b);
  bufs_free(&o);
}

static void test_corrupt_tile_mid_iteration(void)
{
  g_context = "corrupt tile in the middle of an iteration";
  char *copy = xasprintf("%s/corrupt", g_dir);
  write_input(copy);
  char *tile = xasprintf("%s/tiles/tile_000003.dct", copy);
  size_t len;
  char *bytes = read_file(tile, &len);
  bytes[len - 1] ^= 0x5a; /* a stream byte: the CRC no longer matches */
  write_file(tile, bytes, len);
  free(bytes);

  dc_dataset *ds = NULL;
  EXPECT_OK(dc_dataset_open(copy, &ds));
  uint64_t cells[N_CELLS];
  for (int i = 0; i < N_CELLS; i++)
    cells[i] = (uint64_t)i;
  bufs_t o;
  bufs_init(&o, TILE, 64 * TILE);
  for (int threads = 1; threads <= 2; threads++) {
    EXPECT_OK(dc_dataset_set(ds, DC_DATASET_THREADS, threads));
    dc_batches *b = NULL;
    EXPECT_OK(dc_dataset_batches(ds, cells, N_CELLS, TILE, 2, &b));
    for (int k = 0; k < (N_CELLS + TILE - 1) / TILE; k++) { /* the last batch is short */
      uint64_t r = 0, z = 0;
      dc_status s = dc_batches_next(b, DC_INT32, o.indptr, o.indices, o.values, o.cap, &r, &z);
      if (k == 3) {
        EXPECT_ERR(s, DC_ERR_CHECKSUM, "tile 3");
      } else {
        EXPECT_OK(s);
        CHECK_U64(r, N_CELLS - TILE * k < TILE ? N_CELLS - TILE * k : TILE);
        check_batch(cells + TILE * k, r, DC_INT32, o.indptr, o.indices, o.values, z);
      }
    }
    uint64_t r = 1, z = 1;
    EXPECT_OK(dc_batches_next(b, DC_INT32, o.indptr, o.indices, o.values, o.cap, &r, &z));
    CHECK_U64(r, 0);
    dc_batches_free(b);
  }
  dc_dataset_free(ds);
  bufs_free(&o);
  free(tile);
  free(copy);
}

int main(void)
{
  g_dir = make_temp_dir("dc-test-batches");
  g_path = xasprintf("%s/ds", g_dir);
  rng_t rng = {2026};
  make_input(&rng);
  write_input(g_path);

  test_batches_equal_gathers();
  test_bad_arguments();
  test_shuffled_order();
  test_free_mid_iteration_and_outliving();
  test_corrupt_tile_mid_iteration();

  remove_tree(g_dir);
  free(g_dir);
  free(g_path);
  free(g_in.indices);
  free(g_in.values);
  g_tmp_root = NULL;
  printf(TEST_NAME ": %lu passed, 0 failed\n", (unsigned long)atomic_load(&g_passed));
  return 0;
}
