/*
 * Fork safety (what R's parallel::mclapply, Python's multiprocessing and PyTorch DataLoader
 * workers do): a process that has already used the library — thread pools started, caches
 * filled, and another thread gathering at the very moment of the fork — forks children,
 * and then parent and children all gather cells and query a ChromData store at once, each
 * with two threads. Every result is checked against the matrix the test wrote, or against
 * the parent's answer from before the fork. A child that does not finish within its alarm
 * (a deadlock: the parent's pool threads do not exist in it, or a lock was copied held) is
 * a failure, not a hang.
 */
#define _GNU_SOURCE
#define TEST_NAME "test_fork"
#include "test_util.h"
#include "arrow_table.h"
#include "arrow_build.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#define N_CELLS 3000u
#define N_GENES 500u
#define TILE_SIZE 256
#define N_CHILDREN 3
#define ROUNDS 6
#define CHILD_ALARM_S 240
#define QUICK_FORKS 100
#define QUICK_ALARM_S 60

/* ---- the matrix: cell c has sorted genes and counts drawn from a fixed seed ------------ */

static int64_t g_indptr[N_CELLS + 1];
static int32_t *g_indices, *g_values;

static void make_matrix(void)
{
  rng_t r = {7};
  g_indices = xmalloc(N_CELLS * 40 * sizeof(int32_t));
  g_values = xmalloc(N_CELLS * 40 * sizeof(int32_t));
  int64_t nnz = 0;
  for (uint32_t c = 0; c < N_CELLS; c++) {
    g_indptr[c] = nnz;
    uint32_t gene = (uint32_t)rng_below(&r, 20);
    uint32_t k = 1 + (uint32_t)rng_below(&r, 30);
    for (uint32_t j = 0; j < k && gene < N_GENES; j++) {
      g_indices[nnz] = (int32_t)gene;
      g_values[nnz] = 1 + (int32_t)rng_below(&r, c % 50 == 0 ? 100000 : 60);
      nnz++;
      gene += 1 + (uint32_t)rng_below(&r, 25);
    }
  }
  g_indptr[N_CELLS] = nnz;
}

static void write_dataset(const char *path)
{
  dc_writer *w = NULL;
  EXPECT_OK(dc_writer_create(path, N_GENES, &w));
  EXPECT_OK(dc_writer_set(w, DC_WRITER_TILE_SIZE, TILE_SIZE));
  EXPECT_OK(dc_writer_set(w, DC_WRITER_THREADS, 2));
  EXPECT_OK(dc_writer_set(w, DC_WRITER_ZSTD_LEVEL, 3));
  EXPECT_OK(dc_writer_append_csr(w, N_CELLS, g_indptr, g_indices, g_values));
  EXPECT_OK(dc_writer_finish(w));
  dc_writer_free(w);
}

/* Gathers 80 cells drawn from `seed` (repeats, several tiles) and compares each row. */
static void gather_and_check(dc_dataset *ds, uint64_t seed)
{
  enum { N = 80 };
  rng_t r = {seed};
  uint64_t cells[N];
  for (int i = 0; i < N; i++)
    cells[i] = rng_below(&r, N_CELLS);
  uint64_t nnz = 0;
  EXPECT_OK(dc_dataset_batch_nnz(ds, cells, N, &nnz));
  int64_t indptr[N + 1];
  int32_t *indices = xmalloc(nnz * sizeof(int32_t) + 1), *values = xmalloc(nnz * sizeof(int32_t) + 1);
  uint64_t got = 0;
  EXPECT_OK(dc_dataset_gather(ds, cells, N, DC_INT32, indptr, indices, values, nnz, &got));
  CHECK_U64(got, nnz);
  for (int i = 0; i < N; i++) {
    int64_t lo = g_indptr[cells[i]], n = g_indptr[cells[i] + 1] - lo;
    CHECK_I64(indptr[i + 1] - indptr[i], n);
    if (memcmp(indices + indptr[i], g_indices + lo, (size_t)n * sizeof(int32_t)) != 0 ||
        memcmp(values + indptr[i], g_values + lo, (size_t)n * sizeof(int32_t)) != 0)
      FAIL("cell %llu differs from the matrix written", (unsigned long long)cells[i]);
  }
  free(indices);
  free(values);
}

/* ---- a ChromData store written through the C writer (Arrow C data built by hand) -------- */

#define N_SPOTS 600
#define N_TRACES 12

static void release_schema(struct ArrowSchema *s)
{
  for (int64_t i = 0; i < s->n_children; i++)
    free(s->children[i]);
  free(s->children);
  s->release = NULL;
}

static void write_store(const char *path)
{
  static const char *names[] = {"chrom", "start", "end", "trace_id", "cell_id", "x", "y", "z"};
  static const char *formats[] = {"u", "l", "l", "u", "u", "g", "g", "g"};
  enum { NC = 8 };
  char *chrom[N_SPOTS], *trace[N_SPOTS], *cell[N_SPOTS];
  int64_t start[N_SPOTS], end[N_SPOTS];
  double x[N_SPOTS], y[N_SPOTS], z[N_SPOTS];
  for (int i = 0; i < N_SPOTS; i++) {
    int t = (i * 7) % N_TRACES;
    chrom[i] = xasprintf("chr%d", 1 + (i * 5) % 3);
    trace[i] = xasprintf("t%d", t);
    cell[i] = xasprintf("cell%d", t % 4);
    start[i] = (int64_t)((i * 13) % 40) * 30000;
    end[i] = start[i] + 30000;
    x[i] = 0.5 * i;
    y[i] = 1000.0 - i;
    z[i] = i * 0.25;
  }
  struct ArrowArray *cols[NC] = {utf8_array((const char *const *)chrom, N_SPOTS),
                                 prim_array(start, N_SPOTS, sizeof *start),
                                 prim_array(end, N_SPOTS, sizeof *end),
                                 utf8_array((const char *const *)trace, N_SPOTS),
                                 utf8_array((const char *const *)cell, N_SPOTS),
                                 prim_array(x, N_SPOTS, sizeof *x),
                                 prim_array(y, N_SPOTS, sizeof *y),
                                 prim_array(z, N_SPOTS, sizeof *z)};
  struct ArrowArray *batch = struct_array(NC, cols, N_SPOTS);
  struct ArrowSchema schema = {.format = "+s", .name = "", .n_children = NC};
  schema.children = xcalloc(NC, sizeof(struct ArrowSchema *));
  for (int i = 0; i < NC; i++) {
    schema.children[i] = xcalloc(1, sizeof(struct ArrowSchema));
    schema.children[i]->format = formats[i];
    schema.children[i]->name = names[i];
    schema.children[i]->flags = ARROW_FLAG_NULLABLE;
    schema.children[i]->release = release_schema; /* no children: frees nothing */
  }
  schema.release = release_schema;

  dc_chromdata_writer *w = NULL;
  EXPECT_OK(dc_chromdata_writer_create(path, &w));
  EXPECT_OK(dc_chromdata_writer_set(w, DC_CDW_LAYOUT, DC_LAYOUT_PRIMARY_COORDS));
  EXPECT_OK(dc_chromdata_writer_set(w, DC_CDW_THREADS, 2));
  EXPECT_OK(dc_chromdata_writer_append(w, batch, &schema));
  CHECK(batch->release == NULL);
  EXPECT_OK(dc_chromdata_writer_finish(w));
  dc_chromdata_writer_free(w);
  free(batch);
  schema.release(&schema);
  for (int i = 0; i < N_SPOTS; i++) {
    free(chrom[i]);
    free(trace[i]);
    free(cell[i]);
  }
}

/* The parent's answers from before the fork: every trace, all columns. */
static table_t g_traces[N_TRACES];

static void query_trace(dc_chromdata *cd, int t, table_t *out)
{
  char id[16];
  snprintf(id, sizeof id, "t%d", t);
  struct ArrowArrayStream s;
  memset(&s, 0, sizeof s);
  EXPECT_OK(dc_chromdata_get_trace(cd, id, NULL, 0, &s));
  read_stream(&s, out);
}

static void query_and_check(dc_chromdata *cd, int t)
{
  table_t got;
  query_trace(cd, t, &got);
  const table_t *want = &g_traces[t];
  CHECK_I64(got.n_rows, want->n_rows);
  CHECK_I64(got.n_cols, want->n_cols);
  for (int64_t c = 0; c < want->n_cols; c++)
    for (int64_t i = 0; i < want->n_rows; i++)
      if (!value_eq(&got.cols[c], i, &want->cols[c], i))
        FAIL("trace t%d: column %s row %lld differs from the parent's answer", t,
             want->cols[c].name, (long long)i);
  table_free(&got);
}

/* ---- work done at once by several threads of one process ------------------------------ */

typedef struct {
  dc_dataset *ds;
  dc_chromdata *cd;
  uint64_t seed;
} work_t;

static void *work(void *arg)
{
  const work_t *w = arg;
  for (int round = 0; round < ROUNDS; round++) {
    gather_and_check(w->ds, w->seed * 1000 + (uint64_t)round);
    query_and_check(w->cd, (int)((w->seed + (uint64_t)round) % N_TRACES));
  }
  return NULL;
}

static void work_in_two_threads(dc_dataset *ds, dc_chromdata *cd, uint64_t seed)
{
  pthread_t th[2];
  work_t w[2] = {{ds, cd, seed}, {ds, cd, seed + 1}};
  for (int i = 0; i < 2; i++)
    if (pthread_create(&th[i], NULL, work, &w[i]) != 0)
      FAIL("pthread_create");
  for (int i = 0; i < 2; i++)
    pthread_join(th[i], NULL);
}

/* A parent thread that keeps gathering and querying while the children are forked, so that
 * forks happen in the middle of library calls (pool busy, cache locks taken). */
static atomic_int g_stop;

static void *hammer(void *arg)
{
  work_t *w = arg;
  for (uint64_t i = 0; !atomic_load(&g_stop); i++) {
    gather_and_check(w->ds, 5000 + i);
    query_and_check(w->cd, (int)(i % N_TRACES));
  }
  return NULL;
}

/* Waits for `pid` up to `seconds`; kills it and fails if it does not finish. */
static void wait_child(pid_t pid, int seconds)
{
  for (int i = 0; i < seconds * 10; i++) {
    int st = 0;
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) {
      if (WIFSIGNALED(st))
        FAIL("child %d died of signal %d (SIGALRM: it hung)", (int)pid, WTERMSIG(st));
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        FAIL("child %d exited with status %d", (int)pid, WEXITSTATUS(st));
      PASS();
      return;
    }
    if (r < 0)
      FAIL("waitpid: %s", strerror(errno));
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  FAIL("child %d did not finish within %d s (deadlock after fork)", (int)pid, seconds);
}

/* Many short-lived children forked back to back while two parent threads are inside calls:
 * each child gathers and queries once. A lock copied held would hang one of them. */
static void quick_forks(dc_dataset *ds, dc_chromdata *cd)
{
  atomic_store(&g_stop, 0);
  work_t hw[2] = {{ds, cd, 0}, {ds, cd, 0}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++)
    if (pthread_create(&th[i], NULL, hammer, &hw[i]) != 0)
      FAIL("pthread_create");
  for (int k = 0; k < QUICK_FORKS; k++) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
      FAIL("fork: %s", strerror(errno));
    if (pid == 0) {
      alarm(QUICK_ALARM_S);
      g_context = "quick child";
      g_tmp_root = NULL;
      gather_and_check(ds, 300 + (uint64_t)k);
      query_and_check(cd, k % N_TRACES);
      _exit(0); /* no cleanup: the parent's state is the parent's */
    }
    wait_child(pid, QUICK_ALARM_S + 30);
  }
  atomic_store(&g_stop, 1);
  for (int i = 0; i < 2; i++)
    pthread_join(th[i], NULL);
}

/* Frees the handles, the expected answers and the paths (a child before it exits, the parent
 * at the end). */
static void release_test_state(dc_dataset *ds, dc_chromdata *cd, char *ds_path, char *cd_path) {
  dc_dataset_free(ds);
  dc_chromdata_free(cd);
  for (int t = 0; t < N_TRACES; t++)
    table_free(&g_traces[t]);
  free(g_indices);
  free(g_values);
  free(ds_path);
  free(cd_path);
}

int main(void)
{
  char *dir = make_temp_dir("dc-test-fork");
  char *ds_path = xasprintf("%s/cells.dc", dir);
  char *cd_path = xasprintf("%s/spots.chromdata.zarr", dir);
  make_matrix();
  g_context = "write";
  write_dataset(ds_path);
  write_store(cd_path);

  g_context = "parent before the fork";
  dc_dataset *ds = NULL;
  dc_chromdata *cd = NULL;
  EXPECT_OK(dc_dataset_open(ds_path, &ds));
  EXPECT_OK(dc_dataset_set(ds, DC_DATASET_THREADS, 2)); /* gathers run on the library pool */
  EXPECT_OK(dc_dataset_set(ds, DC_DATASET_TILE_CACHE, 3));
  EXPECT_OK(dc_chromdata_open(cd_path, &cd));
  for (int t = 0; t < N_TRACES; t++) {
    query_trace(cd, t, &g_traces[t]);
    CHECK(g_traces[t].n_rows == N_SPOTS / N_TRACES);
  }
  gather_and_check(ds, 1); /* the pool exists and the caches are filled */

  work_t hw = {ds, cd, 0};
  pthread_t hammer_thread;
  if (pthread_create(&hammer_thread, NULL, hammer, &hw) != 0)
    FAIL("pthread_create");

  pid_t kids[N_CHILDREN];
  for (int k = 0; k < N_CHILDREN; k++) {
    struct timespec ts = {0, 3 * 1000 * 1000}; /* let the hammer get into a call */
    nanosleep(&ts, NULL);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
      FAIL("fork: %s", strerror(errno));
    if (pid == 0) {
      alarm(CHILD_ALARM_S);
      g_context = "child";
      g_tmp_root = NULL; /* the directory is the parent's to remove */
      work_in_two_threads(ds, cd, 100 + 10 * (uint64_t)k);
      /* A writer in the child too (its pool is new). */
      char *out = xasprintf("%s/child-%d.dc", dir, k);
      write_dataset(out);
      dc_dataset *back = NULL;
      EXPECT_OK(dc_dataset_open(out, &back));
      gather_and_check(back, 9);
      dc_dataset_free(back);
      free(out);
      release_test_state(ds, cd, ds_path, cd_path);
      free(dir);
      exit(0);
    }
    kids[k] = pid;
  }
  g_context = "parent after the fork";
  work_in_two_threads(ds, cd, 50);
  atomic_store(&g_stop, 1);
  pthread_join(hammer_thread, NULL);
  for (int k = 0; k < N_CHILDREN; k++)
    wait_child(kids[k], CHILD_ALARM_S + 30);

  g_context = "quick forks";
  quick_forks(ds, cd);

  /* The parent's pool still works after the children are gone. */
  gather_and_check(ds, 77);
  release_test_state(ds, cd, ds_path, cd_path);
  remove_tree(dir);
  free(dir);
  printf(TEST_NAME ": %lu passed, 0 failed\n", (unsigned long)atomic_load(&g_passed));
  return 0;
}
