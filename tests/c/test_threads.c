/*
 * Concurrency tests of the tile functions, through include/deltacells.h:
 *   - several pthreads decode (n_threads 0 = library pool, and 1 = on the calling thread)
 *     and encode the same tile at once; every result must be exact;
 *   - dc_last_error() is per thread: an error on one thread does not change another
 *     thread's message, and a thread that has not failed sees "".
 * Every allocation is freed: ctest also runs this program under valgrind.
 */
#define _POSIX_C_SOURCE 200809L

#include "deltacells.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_ulong g_passed;

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "%s:%d: FAILED: %s (dc_last_error: \"%s\")\n", __FILE__, __LINE__,     \
              #cond, dc_last_error());                                                         \
      fprintf(stderr, "test_threads: %lu passed, 1 failed\n", (unsigned long)g_passed);        \
      exit(1);                                                                                 \
    }                                                                                          \
    atomic_fetch_add(&g_passed, 1);                                                            \
  } while (0)

#define N_WORKERS 6
#define ROUNDS 3

/* The matrix every thread decodes and encodes. */
static uint64_t g_n_cells;
static int64_t *g_indptr;
static int32_t *g_indices, *g_values;
#define N_GENES 80000u

/* The reference tile, encoded once by the main thread. */
static uint8_t *g_blob;
static size_t g_len;

static pthread_barrier_t g_barrier;

static uint64_t g_rng = 42;
static uint64_t rnd(void)
{
  uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* 600 cells, about 20000 nonzeros, some counts above 65535 and gaps above 65535. */
static void make_matrix(void)
{
  uint64_t cap = 600 * 80;
  g_n_cells = 600;
  g_indptr = malloc((g_n_cells + 1) * sizeof *g_indptr);
  g_indices = malloc(cap * sizeof *g_indices);
  g_values = malloc(cap * sizeof *g_values);
  CHECK(g_indptr && g_indices && g_values);
  uint64_t nz = 0;
  g_indptr[0] = 0;
  for (uint64_t c = 0; c < g_n_cells; c++) {
    uint64_t k = rnd() % 70;
    uint64_t g = c % 50 == 0 ? 66000 + rnd() % 1000 : rnd() % 100; /* a few large first gaps */
    for (uint64_t j = 0; j < k && g < N_GENES; j++) {
      g_indices[nz] = (int32_t)g;
      g_values[nz] = rnd() % 200 == 0 ? (int32_t)(65536 + rnd() % 1000000) : (int32_t)(1 + rnd() % 30);
      nz++;
      g += 1 + rnd() % 200;
    }
    g_indptr[c + 1] = (int64_t)nz;
  }
}

static void check_decoded(const int64_t *indptr, const int32_t *indices, const void *values,
                          dc_dtype dtype)
{
  uint64_t nnz = (uint64_t)g_indptr[g_n_cells], wrong = 0;
  CHECK(memcmp(indptr, g_indptr, (g_n_cells + 1) * sizeof *indptr) == 0);
  CHECK(memcmp(indices, g_indices, nnz * sizeof *indices) == 0);
  for (uint64_t j = 0; j < nnz; j++) {
    if (dtype == DC_INT32)
      wrong += ((const int32_t *)values)[j] != g_values[j];
    else
      wrong += ((const float *)values)[j] != (float)g_values[j];
  }
  CHECK(wrong == 0);
}

/* Decodes the reference tile ROUNDS times with 0 and 1 threads, both dtypes, and encodes the
 * matrix once: the bytes must equal the reference tile. */
static void *decode_worker(void *arg)
{
  uintptr_t id = (uintptr_t)arg;
  uint64_t nnz = (uint64_t)g_indptr[g_n_cells];
  int64_t *indptr = malloc((g_n_cells + 1) * sizeof *indptr);
  int32_t *indices = malloc(nnz * sizeof *indices);
  int32_t *values = malloc(nnz * sizeof *values);
  CHECK(indptr && indices && values);

  pthread_barrier_wait(&g_barrier); /* all start together */
  for (int r = 0; r < ROUNDS; r++) {
    for (uint32_t t = 0; t < 2; t++) {
      dc_dtype dtype = (r + (int)id) % 2 ? DC_FLOAT32 : DC_INT32;
      uint64_t got = 0;
      memset(indices, 0xEE, nnz * sizeof *indices);
      CHECK(dc_tile_decode(g_blob, g_len, t, 1, dtype, indptr, indices, values, nnz, &got) == DC_OK);
      CHECK(got == nnz);
      check_decoded(indptr, indices, values, dtype);
    }
  }
  uint8_t *blob = NULL;
  size_t len = 0;
  CHECK(dc_tile_encode(g_n_cells, N_GENES, g_indptr, g_indices, g_values, 1, 6, (uint32_t)(id % 2),
                       &blob, &len) == DC_OK);
  CHECK(len == g_len && memcmp(blob, g_blob, len) == 0);
  dc_bytes_free(blob, len);

  free(indptr);
  free(indices);
  free(values);
  return NULL;
}

static void test_concurrent_decode(void)
{
  pthread_t th[N_WORKERS];
  CHECK(pthread_barrier_init(&g_barrier, NULL, N_WORKERS) == 0);
  for (uintptr_t i = 0; i < N_WORKERS; i++)
    CHECK(pthread_create(&th[i], NULL, decode_worker, (void *)i) == 0);
  for (int i = 0; i < N_WORKERS; i++)
    CHECK(pthread_join(th[i], NULL) == 0);
  CHECK(pthread_barrier_destroy(&g_barrier) == 0);
}

/* ---- dc_last_error is thread-local ---- */

typedef struct {
  int which;       /* 0: bad magic, 1: version 3, 2: no failing call */
  char first[512]; /* the message right after the thread's first failure */
  char saved[512]; /* the thread's latest message */
} error_job;

static pthread_barrier_t g_err_barrier;

static void *error_worker(void *arg)
{
  error_job *job = arg;
  uint8_t *blob = malloc(g_len);
  CHECK(blob != NULL);
  memcpy(blob, g_blob, g_len);
  dc_tile_info info;

  CHECK(dc_last_error()[0] == '\0'); /* a new thread has no error yet */
  const char *msg = NULL;
  if (job->which == 0) {
    blob[0] = 'X';
    CHECK(dc_tile_inspect(blob, g_len, 1, &info) == DC_ERR_FORMAT);
  } else if (job->which == 1) {
    blob[8] = 3;
    CHECK(dc_tile_inspect(blob, g_len, 1, &info) == DC_ERR_UNSUPPORTED);
  } else {
    CHECK(dc_tile_inspect(blob, g_len, 1, &info) == DC_OK);
  }
  msg = dc_last_error();
  CHECK(strlen(msg) < sizeof job->saved);
  strcpy(job->saved, msg);
  strcpy(job->first, msg);
  CHECK((job->which == 2) == (msg[0] == '\0'));

  /* 1: every thread has set (or not) its message; the others fail now, in turn */
  pthread_barrier_wait(&g_err_barrier);
  for (int turn = 0; turn < 3; turn++) {
    if (turn == job->which && job->which != 2) {
      /* a second, different failure on this thread only (dtype 90 or 91: bad) */
      CHECK(dc_tile_decode(blob, g_len, 1, 1, 90 + job->which, NULL, NULL, NULL, 0, &(uint64_t){0}) ==
            DC_ERR_INVALID_ARGUMENT);
      CHECK(strcmp(dc_last_error(), job->saved) != 0);
      strcpy(job->saved, dc_last_error());
      msg = dc_last_error();
    }
    pthread_barrier_wait(&g_err_barrier);
    /* the pointer from this thread's last dc_ call still reads this thread's message, and
     * so does a new call */
    CHECK(strcmp(msg, job->saved) == 0);
    CHECK(strcmp(dc_last_error(), job->saved) == 0);
    msg = dc_last_error();
    pthread_barrier_wait(&g_err_barrier);
  }
  free(blob);
  return NULL;
}

static void test_thread_local_errors(void)
{
  /* the main thread's own failure, which the workers must not disturb */
  uint64_t got;
  CHECK(dc_tile_decode(g_blob, g_len, 1, 1, 7, NULL, NULL, NULL, 0, &got) == DC_ERR_INVALID_ARGUMENT);
  char main_msg[512];
  CHECK(strlen(dc_last_error()) > 0 && strlen(dc_last_error()) < sizeof main_msg);
  strcpy(main_msg, dc_last_error());

  error_job jobs[3];
  pthread_t th[3];
  CHECK(pthread_barrier_init(&g_err_barrier, NULL, 3) == 0);
  for (int i = 0; i < 3; i++) {
    memset(&jobs[i], 0, sizeof jobs[i]);
    jobs[i].which = i;
    CHECK(pthread_create(&th[i], NULL, error_worker, &jobs[i]) == 0);
  }
  for (int i = 0; i < 3; i++)
    CHECK(pthread_join(th[i], NULL) == 0);
  CHECK(pthread_barrier_destroy(&g_err_barrier) == 0);

  CHECK(strcmp(dc_last_error(), main_msg) == 0);
  /* the threads really had different errors */
  CHECK(strcmp(jobs[0].first, jobs[1].first) != 0);
  CHECK(strcmp(jobs[0].saved, jobs[1].saved) != 0);
  CHECK(strstr(jobs[0].saved, "90") && strstr(jobs[1].saved, "91"));
  CHECK(jobs[2].saved[0] == '\0');
}

/* n_threads 0 means DELTACELLS_NUM_THREADS, or all cores when it is unset or not a positive
 * integer. Set before any other thread of ours runs. */
static void test_env_threads(void)
{
  const char *settings[] = {"3", "1", "0", "-2", "many", "", "100000"};
  uint64_t nnz = (uint64_t)g_indptr[g_n_cells], got = 0;
  int64_t *indptr = malloc((g_n_cells + 1) * sizeof *indptr);
  int32_t *indices = malloc(nnz * sizeof *indices);
  float *values = malloc(nnz * sizeof *values);
  CHECK(indptr && indices && values);
  for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
    CHECK(setenv("DELTACELLS_NUM_THREADS", settings[i], 1) == 0);
    CHECK(dc_tile_decode(g_blob, g_len, 0, 1, DC_FLOAT32, indptr, indices, values, nnz, &got) == DC_OK);
    check_decoded(indptr, indices, values, DC_FLOAT32);
  }
  CHECK(unsetenv("DELTACELLS_NUM_THREADS") == 0);
  free(indptr);
  free(indices);
  free(values);
}

int main(void)
{
  CHECK(dc_last_error()[0] == '\0');
  make_matrix();
  CHECK(dc_tile_encode(g_n_cells, N_GENES, g_indptr, g_indices, g_values, 1, 6, 1, &g_blob, &g_len) == DC_OK);
  dc_tile_info info;
  CHECK(dc_tile_inspect(g_blob, g_len, 1, &info) == DC_OK);
  CHECK(info.n_chunks == 6 && info.n_exceptions > 0 && info.nnz > 10000);

  test_concurrent_decode();
  test_thread_local_errors();
  test_env_threads();

  dc_bytes_free(g_blob, g_len);
  free(g_indptr);
  free(g_indices);
  free(g_values);
  printf("test_threads: %lu passed, 0 failed\n", (unsigned long)g_passed);
  return 0;
}
