/* I/O fault injection (issue 19, item 4), run under fault_shim.so (LD_PRELOAD): every
 * writer of the library — the dataset writer, the ChromData writer in every layout as a
 * directory and as .cdz, and the converter (the `deltacells convert` CLI) — once for every N
 * from 1 to the number of open/write/pwrite/fsync/rename/mkdir calls it makes, with the Nth
 * call failing (ENOSPC for even N, EIO for odd N), writing a new target and replacing an
 * existing one. Each case runs in a forked child (the converter: an exec'd CLI) and must end
 *   - in DC_OK, with the new output complete at the target, or
 *   - in DC_ERR_IO (CLI: exit status 4) with a message naming a path of the case, nothing at
 *     a new target, and an existing target intact (it opens, with its old content);
 * and leave no temporary behind — or, where the failing call was the writer's own cleanup,
 * a hidden temporary that the next write to that target removes (checked: the next write
 * succeeds and leaves nothing else).
 *
 *   fault_driver [SCENARIO...]        default: all; names as printed
 *   DC_FAULT_STRIDE=k                 run N = 1, every k-th, and the last few (default 8:
 *                                     CI, a few minutes); 1 = every N, the full sweep
 *   DC_FAULT_CLI=path                 the `deltacells` binary for the converter scenarios
 *                                     (skipped, and said so, when unset or missing)
 *   DC_FAULT_INPUT=dir                the converter's input (a 10x folder)
 * Prints one line per scenario: calls, cases run, outcomes, temporaries left and cleaned. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "deltacells.h"
#include "../c/arrow_build.h"

/* ---- the shim's controls ------------------------------------------------------------ */

static void (*fault_arm)(long, int);
static long (*fault_disarm)(void);
static const char *(*fault_hit)(void);

static void find_shim(void)
{
  fault_arm = (void (*)(long, int))dlsym(RTLD_DEFAULT, "dc_fault_arm");
  fault_disarm = (long (*)(void))dlsym(RTLD_DEFAULT, "dc_fault_disarm");
  fault_hit = (const char *(*)(void))dlsym(RTLD_DEFAULT, "dc_fault_hit");
  if (!fault_arm || !fault_disarm || !fault_hit) {
    fprintf(stderr, "fault_driver: run it with LD_PRELOAD=fault_shim.so\n");
    exit(2);
  }
}

/* ---- small utilities ---------------------------------------------------------------- */

_Noreturn static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
_Noreturn static void die(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(1);
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...)
{
  va_list ap;
  va_start(ap, f);
  char *s = NULL;
  if (vasprintf(&s, f, ap) < 0)
    abort();
  va_end(ap);
  return s;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
  (void)st, (void)flag, (void)ftw;
  return remove(p);
}

static void remove_tree(const char *p) { nftw(p, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static int exists(const char *p)
{
  struct stat st;
  return lstat(p, &st) == 0;
}

/* Entries of `dir` other than `keep` (NULL: none kept); the first one's name in *first. */
static int others_in(const char *dir, const char *keep, char *first, size_t cap)
{
  DIR *d = opendir(dir);
  if (!d)
    die("opendir %s: %s", dir, strerror(errno));
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || (keep && !strcmp(e->d_name, keep)))
      continue;
    if (n++ == 0 && first)
      snprintf(first, cap, "%s", e->d_name);
  }
  closedir(d);
  return n;
}

/* ---- what is written ---------------------------------------------------------------- */

/* Generation g (0: the existing target, 1: the new output) of each kind of output. */
enum { GENES = 50 };
static uint64_t ds_cells(int g) { return 30 + 20 * (uint64_t)g; }
static int32_t ds_value(int g, uint64_t c, int j)
{
  return (c * 7 + (uint64_t)j * 3 + (uint64_t)g) % 5 == 0 ? 1 + (int32_t)((c + (uint64_t)j) % 9) : 0;
}
static int64_t cd_spots(int g) { return 40 + 17 * g; }

/* Writes generation g of a dataset at path (overwrite when asked); returns the status and
 * copies the message into msg. Frees the writer before returning (its cleanup counts). */
static dc_status write_dataset(const char *path, int g, int overwrite, char *msg, size_t cap)
{
  uint64_t n = ds_cells(g);
  int64_t *indptr = calloc(n + 1, sizeof *indptr);
  int32_t *idx = calloc(n * GENES, sizeof *idx), *val = calloc(n * GENES, sizeof *val);
  for (uint64_t c = 0; c < n; c++) {
    indptr[c + 1] = indptr[c];
    for (int j = 0; j < GENES; j++)
      if (ds_value(g, c, j)) {
        idx[indptr[c + 1]] = j;
        val[indptr[c + 1]++] = ds_value(g, c, j);
      }
  }
  char *names[GENES];
  for (int j = 0; j < GENES; j++)
    names[j] = fmt("g%d_%d", g, j);
  dc_writer *w = NULL;
  dc_status st = dc_writer_create(path, GENES, &w);
  const int64_t settings[][2] = {{DC_WRITER_TILE_SIZE, 8}, {DC_WRITER_N_CHUNKS, 2},
                                 {DC_WRITER_ZSTD_LEVEL, 1}, {DC_WRITER_THREADS, 1},
                                 {DC_WRITER_OVERWRITE, overwrite}};
  for (size_t i = 0; st == DC_OK && i < sizeof settings / sizeof settings[0]; i++)
    st = dc_writer_set(w, (dc_writer_param)settings[i][0], settings[i][1]);
  if (st == DC_OK)
    st = dc_writer_set_var_names(w, (const char *const *)names, GENES);
  uint64_t half = n / 2;
  if (st == DC_OK)
    st = dc_writer_append_csr(w, half, indptr, idx, val);
  if (st == DC_OK)
    st = dc_writer_append_csr(w, n - half, indptr + half, idx + indptr[half], val + indptr[half]);
  if (st == DC_OK)
    st = dc_writer_finish(w);
  snprintf(msg, cap, "%s", st == DC_OK ? "" : dc_last_error());
  dc_writer_free(w);
  for (int j = 0; j < GENES; j++)
    free(names[j]);
  free(indptr), free(idx), free(val);
  return st;
}

/* Whether the dataset at path opens and is generation g, every value checked. */
static int dataset_is(const char *path, int g, char *why, size_t cap)
{
  dc_dataset *ds = NULL;
  if (dc_dataset_open(path, &ds) != DC_OK) {
    snprintf(why, cap, "does not open: %s", dc_last_error());
    return 0;
  }
  dc_dataset_info info;
  int ok = dc_dataset_info_get(ds, &info) == DC_OK && info.n_cells == ds_cells(g);
  if (!ok)
    snprintf(why, cap, "not generation %d (n_cells %llu)", g, (unsigned long long)info.n_cells);
  uint64_t n = ds_cells(g), nnz = 0;
  uint64_t *cells = calloc(n, sizeof *cells);
  int64_t *ip = calloc(n + 1, sizeof *ip);
  int32_t *ix = calloc(n * GENES, sizeof *ix), *v = calloc(n * GENES, sizeof *v);
  for (uint64_t c = 0; c < n; c++)
    cells[c] = c;
  if (ok && dc_dataset_gather(ds, cells, n, DC_INT32, ip, ix, v, n * GENES, &nnz) != DC_OK) {
    snprintf(why, cap, "gather fails: %s", dc_last_error());
    ok = 0;
  }
  for (uint64_t c = 0; ok && c < n; c++) {
    int32_t dense[GENES] = {0};
    for (int64_t k = ip[c]; k < ip[c + 1]; k++)
      dense[ix[k]] = v[k];
    for (int j = 0; j < GENES; j++)
      if (dense[j] != ds_value(g, c, j)) {
        snprintf(why, cap, "cell %llu gene %d differs from generation %d", (unsigned long long)c, j, g);
        ok = 0;
        break;
      }
  }
  free(cells), free(ip), free(ix), free(v);
  dc_dataset_free(ds);
  return ok;
}

static void release_schema(struct ArrowSchema *s)
{
  for (int64_t i = 0; i < s->n_children; i++) {
    if (s->children[i]->release)
      s->children[i]->release(s->children[i]);
    free(s->children[i]);
  }
  free(s->children);
  s->release = NULL;
}
static void release_leaf(struct ArrowSchema *s) { s->release = NULL; }

enum { CD_COLS = 8 };
static const char *const CD_NAMES[CD_COLS] = {"chrom", "start", "end", "trace_id",
                                              "cell_id", "x", "y", "z"};
static const char *const CD_FORMATS[CD_COLS] = {"u", "l", "l", "u", "l", "g", "g", "g"};

static void spots_schema(struct ArrowSchema *s)
{
  memset(s, 0, sizeof *s);
  s->format = "+s";
  s->name = "";
  s->n_children = CD_COLS;
  s->children = calloc(CD_COLS, sizeof *s->children);
  for (int i = 0; i < CD_COLS; i++) {
    struct ArrowSchema *c = calloc(1, sizeof *c);
    c->format = CD_FORMATS[i];
    c->name = CD_NAMES[i];
    c->flags = ARROW_FLAG_NULLABLE;
    c->release = release_leaf;
    s->children[i] = c;
  }
  s->release = release_schema;
}

/* Spots [lo, hi) of generation g. */
static void spots_batch(int g, int64_t lo, int64_t hi, struct ArrowArray *out)
{
  static const char *chroms[] = {"chr1", "chr2", "chrX"};
  static const char *traces[] = {"t0", "t1", "t2", "t3", "t4", "t5", "t6"};
  int64_t n = hi - lo;
  const char **chrom = calloc((size_t)n, sizeof *chrom), **trace = calloc((size_t)n, sizeof *trace);
  int64_t *start = calloc((size_t)n, 8), *end = calloc((size_t)n, 8), *cell = calloc((size_t)n, 8);
  double *x = calloc((size_t)n, 8), *y = calloc((size_t)n, 8), *z = calloc((size_t)n, 8);
  for (int64_t k = 0; k < n; k++) {
    int64_t i = lo + k;
    chrom[k] = chroms[(i * 5 + g) % 3];
    trace[k] = traces[(i * 3) % 7];
    cell[k] = (i * 3) % 7 % 3;
    start[k] = ((i * 13) % 11) * 1000;
    end[k] = start[k] + 1000;
    x[k] = (double)g + 0.5 * (double)i;
    y[k] = 100.0 - (double)i;
    z[k] = 0.25 * (double)i;
  }
  struct ArrowArray *cols[CD_COLS] = {
      utf8_array(chrom, n),        prim_array(start, n, 8), prim_array(end, n, 8),
      utf8_array(trace, n),        prim_array(cell, n, 8),  prim_array(x, n, 8),
      prim_array(y, n, 8),         prim_array(z, n, 8)};
  batch_of(out, CD_COLS, cols, n);
  free(chrom), free(trace), free(start), free(end), free(cell), free(x), free(y), free(z);
}

static dc_status write_store(const char *path, int layout, int g, int overwrite, char *msg, size_t cap)
{
  dc_chromdata_writer *w = NULL;
  dc_status st = dc_chromdata_writer_create(path, &w);
  const int64_t settings[][2] = {{DC_CDW_LAYOUT, layout}, {DC_CDW_MEMORY_BUDGET, 1 << 20},
                                 {DC_CDW_THREADS, 1}, {DC_CDW_OVERWRITE, overwrite}};
  for (size_t i = 0; st == DC_OK && i < sizeof settings / sizeof settings[0]; i++)
    st = dc_chromdata_writer_set(w, (dc_chromdata_writer_param)settings[i][0], settings[i][1]);
  int64_t n = cd_spots(g), cut = n / 3;
  for (int part = 0; st == DC_OK && part < 2; part++) {
    struct ArrowSchema schema;
    struct ArrowArray batch;
    spots_schema(&schema);
    spots_batch(g, part ? cut : 0, part ? n : cut, &batch);
    st = dc_chromdata_writer_append(w, &batch, &schema);
    if (batch.release)
      batch.release(&batch);
    if (schema.release)
      schema.release(&schema);
  }
  if (st == DC_OK)
    st = dc_chromdata_writer_finish(w);
  snprintf(msg, cap, "%s", st == DC_OK ? "" : dc_last_error());
  dc_chromdata_writer_free(w);
  return st;
}

/* Whether the store at path opens and is generation g (every spot read back). */
static int store_is(const char *path, int g, char *why, size_t cap)
{
  dc_chromdata *cd = NULL;
  if (dc_chromdata_open(path, &cd) != DC_OK) {
    snprintf(why, cap, "does not open: %s", dc_last_error());
    return 0;
  }
  dc_chromdata_info info;
  int ok = dc_chromdata_info_get(cd, &info) == DC_OK && info.n_spots == (uint64_t)cd_spots(g);
  if (!ok)
    snprintf(why, cap, "not generation %d (n_spots %llu)", g, (unsigned long long)info.n_spots);
  struct ArrowArrayStream s;
  memset(&s, 0, sizeof s);
  int64_t rows = 0;
  if (ok && dc_chromdata_read_spots(cd, 0, NULL, 0, &s) != DC_OK) {
    snprintf(why, cap, "read_spots fails: %s", dc_last_error());
    ok = 0;
  }
  while (ok) {
    struct ArrowArray b;
    if (s.get_next(&s, &b) != 0) {
      snprintf(why, cap, "stream fails: %s", s.get_last_error(&s));
      ok = 0;
      break;
    }
    if (!b.release)
      break;
    rows += b.length;
    b.release(&b);
  }
  if (s.release)
    s.release(&s);
  if (ok && rows != cd_spots(g)) {
    snprintf(why, cap, "read %lld spots, generation %d has %lld", (long long)rows, g,
             (long long)cd_spots(g));
    ok = 0;
  }
  dc_chromdata_free(cd);
  return ok;
}

/* ---- scenarios ---------------------------------------------------------------------- */

typedef struct {
  const char *name;
  int kind;     /* 0 dataset, 1 store, 2 converter (CLI) */
  int layout;   /* stores */
  const char *target;
  int overwrite;
} scenario;

static const char *g_cli, *g_input;

/* Runs the writer of scenario sc for generation 1 into dir; returns a status (CLI: DC_OK or
 * DC_ERR_IO for exit status 4, else DC_ERR_INTERNAL) and the message. */
static dc_status run_writer(const scenario *sc, const char *dir, long fail_at, int err, char *msg,
                            size_t cap, long *calls)
{
  char *target = fmt("%s/%s", dir, sc->target);
  dc_status st;
  if (sc->kind == 2) {
    char *count = fmt("%s.count", dir), *errf = fmt("%s.stderr", dir);
    pid_t pid = fork();
    if (pid == 0) {
      setenv("DC_FAULT_N", fmt("%ld", fail_at), 1);
      setenv("DC_FAULT_ERRNO", fmt("%d", err), 1);
      setenv("DC_FAULT_COUNT_FILE", count, 1);
      int fd = open(errf, O_WRONLY | O_CREAT | O_TRUNC, 0644), nul = open("/dev/null", O_WRONLY);
      dup2(fd, 2), dup2(nul, 1);
      const char *argv[] = {g_cli, "convert", g_input, target, "--tile-size", "256",
                            "--chunks", "2", "--level", "1", "--threads", "1", "--quiet",
                            sc->overwrite ? "--overwrite" : NULL, NULL};
      execv(g_cli, (char *const *)argv);
      _exit(127);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    int code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    st = code == 0 ? DC_OK : code == 4 ? DC_ERR_IO : DC_ERR_INTERNAL;
    FILE *f = fopen(errf, "r");
    size_t got = f ? fread(msg, 1, cap - 1, f) : 0;
    msg[got] = '\0';
    if (f)
      fclose(f);
    if (st == DC_ERR_INTERNAL)
      snprintf(msg + strlen(msg), cap - strlen(msg), " [exit status %d]", code);
    *calls = 0;
    f = fopen(count, "r");
    if (f) {
      if (fscanf(f, "%ld", calls) != 1)
        *calls = 0;
      fclose(f);
    }
    unlink(count), unlink(errf);
    free(count), free(errf);
  } else {
    fault_arm(fail_at, err);
    st = sc->kind == 0 ? write_dataset(target, 1, sc->overwrite, msg, cap)
                       : write_store(target, sc->layout, 1, sc->overwrite, msg, cap);
    *calls = fault_disarm();
  }
  free(target);
  return st;
}

static int output_is(const scenario *sc, const char *path, int g, char *why, size_t cap)
{
  if (sc->kind == 1)
    return store_is(path, g, why, cap);
  if (sc->kind == 2 && g == 1) { /* the converted 10x folder */
    dc_dataset *ds = NULL;
    if (dc_dataset_open(path, &ds) != DC_OK) {
      snprintf(why, cap, "does not open: %s", dc_last_error());
      return 0;
    }
    dc_dataset_info info;
    int ok = dc_dataset_info_get(ds, &info) == DC_OK && info.n_cells == 1107 && info.has_obs;
    if (!ok)
      snprintf(why, cap, "not the converted input (n_cells %llu)", (unsigned long long)info.n_cells);
    dc_dataset_free(ds);
    return ok;
  }
  return dataset_is(path, g, why, cap);
}

/* The existing target of an overwrite case (generation 0), written without faults. */
static void write_old(const scenario *sc, const char *path)
{
  char msg[512];
  dc_status st = sc->kind == 1 ? write_store(path, sc->layout, 0, 0, msg, sizeof msg)
                               : write_dataset(path, 0, 0, msg, sizeof msg);
  if (st != DC_OK)
    die("%s: writing the existing target: %s", sc->name, msg);
}

/* Exit codes of a case child. */
enum { CASE_OK = 0, CASE_BAD = 1, CASE_LEFT = 3 };

/* One case in a forked child: writes with call n failing, then checks the outcome. */
static int run_case(const scenario *sc, const char *dir, long n)
{
  char *target = fmt("%s/%s", dir, sc->target);
  if (sc->overwrite)
    write_old(sc, target);
  char msg[4096], why[512], left[256];
  long calls = 0;
  int err = n % 2 ? EIO : ENOSPC;
  /* The library prints nothing (c-api.md §1), failures included: its stderr goes to a file
     that must stay empty. (The CLI reports its error on stderr: its own capture, above.) */
  char *printed_f = fmt("%s.stderr", dir);
  int saved = -1;
  if (sc->kind != 2) {
    int fd = open(printed_f, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    fflush(stderr);
    saved = dup(2);
    if (fd < 0 || saved < 0 || dup2(fd, 2) < 0)
      die("%s: redirecting stderr: %s", sc->name, strerror(errno));
    close(fd);
  }
  dc_status st = run_writer(sc, dir, n, err, msg, sizeof msg, &calls);
  const char *hit = sc->kind == 2 ? "?" : fault_hit();
  if (saved >= 0) {
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char printed[512];
    FILE *pf = fopen(printed_f, "r");
    size_t got = pf ? fread(printed, 1, sizeof printed - 1, pf) : 0;
    printed[got] = '\0';
    if (pf)
      fclose(pf);
    unlink(printed_f);
    if (got)
      die("%s N=%ld (%s): the library printed on stderr: %s", sc->name, n, hit, printed);
  }
  free(printed_f);
  if (st == DC_OK) {
    if (!output_is(sc, target, 1, why, sizeof why))
      die("%s N=%ld (%s): DC_OK but the output %s", sc->name, n, hit, why);
  } else {
    if (st != DC_ERR_IO)
      die("%s N=%ld (%s, errno %d): status %s, expected DC_ERR_IO: %s", sc->name, n, hit, err,
          dc_status_name(st), msg);
    if (strchr(msg, '\n') != strrchr(msg, '\n') || !strstr(msg, "/"))
      die("%s N=%ld (%s): the message does not name a path on one line: %s", sc->name, n, hit, msg);
    if (!strstr(msg, dir) && !(g_input && strstr(msg, g_input)))
      die("%s N=%ld (%s): the message names no path of the case: %s", sc->name, n, hit, msg);
    if (sc->overwrite) {
      if (!output_is(sc, target, 0, why, sizeof why))
        die("%s N=%ld (%s): after the failure the existing target %s: %s", sc->name, n, hit, why, msg);
    } else if (exists(target)) {
      die("%s N=%ld (%s): after the failure something is at the target: %s", sc->name, n, hit, msg);
    }
  }
  int code = others_in(dir, sc->target, left, sizeof left) ? CASE_LEFT : CASE_OK;
  if (getenv("DC_FAULT_VERBOSE"))
    fprintf(stderr, "%s N=%ld (%s): %s %s%s%s\n", sc->name, n, hit, dc_status_name(st), msg,
            code == CASE_LEFT ? " left " : "", code == CASE_LEFT ? left : "");
  free(target);
  return code;
}

/* After a case left a temporary: the next write to the target succeeds and removes it. */
static int run_next(const scenario *sc, const char *dir)
{
  char msg[4096], why[512], left[256];
  char *target = fmt("%s/%s", dir, sc->target);
  long calls;
  scenario again = *sc;
  again.overwrite = exists(target);
  dc_status st = run_writer(&again, dir, 0, 0, msg, sizeof msg, &calls);
  if (st != DC_OK)
    die("%s: the write after a case that left a temporary fails: %s", sc->name, msg);
  if (!output_is(sc, target, 1, why, sizeof why))
    die("%s: the write after a case that left a temporary: output %s", sc->name, why);
  if (others_in(dir, sc->target, left, sizeof left))
    die("%s: the next write did not remove the temporary %s", sc->name, left);
  free(target);
  return CASE_OK;
}

/* Forks, runs f in the child, returns its exit code. */
static int in_child(int (*f)(const scenario *, const char *, long), const scenario *sc,
                    const char *dir, long n)
{
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0)
    die("fork: %s", strerror(errno));
  if (pid == 0)
    _exit(f(sc, dir, n));
  int ws = 0;
  waitpid(pid, &ws, 0);
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

static int next_adapter(const scenario *sc, const char *dir, long n)
{
  (void)n;
  return run_next(sc, dir);
}

/* The number of calls of a fault-free run (in a child, reported through a file). */
static int count_calls(const scenario *sc, const char *dir, long n)
{
  (void)n;
  char msg[4096];
  long calls = 0;
  if (sc->overwrite) {
    char *t = fmt("%s/%s", dir, sc->target);
    write_old(sc, t);
    free(t);
  }
  dc_status st = run_writer(sc, dir, 0, 0, msg, sizeof msg, &calls);
  if (st != DC_OK)
    die("%s: the fault-free run fails: %s", sc->name, msg);
  char *f = fmt("%s.calls", dir);
  FILE *fp = fopen(f, "w");
  fprintf(fp, "%ld\n", calls);
  fclose(fp);
  free(f);
  return 0;
}

static int run_scenario(const scenario *sc, const char *base, long stride)
{
  char *dir = fmt("%s/%s-count", base, sc->name);
  mkdir(dir, 0755);
  if (in_child(count_calls, sc, dir, 0) != 0)
    return 1;
  char *cf = fmt("%s.calls", dir);
  FILE *fp = fopen(cf, "r");
  long total = 0;
  if (!fp || fscanf(fp, "%ld", &total) != 1 || total <= 0)
    die("%s: no call count", sc->name);
  fclose(fp);
  unlink(cf);
  remove_tree(dir);
  long cases = 0, left = 0;
  /* Thread scheduling can change the number of calls a little: go a few past the count. */
  for (long n = 1; n <= total + 3; n++) {
    if (stride > 1 && n != 1 && n % stride != 0 && n < total - 2)
      continue;
    char *d = fmt("%s/%s-%ld", base, sc->name, n);
    mkdir(d, 0755);
    int code = in_child(run_case, sc, d, n);
    if (code == CASE_LEFT) {
      left++;
      code = in_child(next_adapter, sc, d, 0);
    }
    if (code != CASE_OK) {
      fprintf(stderr, "%s: case N=%ld failed (child exit %d); kept %s\n", sc->name, n, code, d);
      return 1;
    }
    remove_tree(d);
    free(d);
    cases++;
  }
  printf("%-28s %5ld calls, %5ld cases passed, %ld left a temporary the next write removed\n",
         sc->name, total, cases, left);
  fflush(stdout);
  free(dir);
  return 0;
}

int main(int argc, char **argv)
{
  find_shim();
  const char *s = getenv("DC_FAULT_STRIDE");
  long stride = s && *s ? strtol(s, NULL, 10) : 8;
  if (stride < 1)
    stride = 1;
  g_cli = getenv("DC_FAULT_CLI");
  g_input = getenv("DC_FAULT_INPUT");
  static const char *layouts[] = {"flat", "partitioned", "primary"};
  scenario all[32];
  int n = 0;
  for (int ow = 0; ow < 2; ow++) {
    all[n++] = (scenario){ow ? "dataset-overwrite" : "dataset", 0, 0, "out", ow};
    for (int l = 0; l < 3; l++)
      for (int cdz = 0; cdz < 2; cdz++)
        all[n++] = (scenario){fmt("chromdata-%s-%s%s", layouts[l], cdz ? "cdz" : "dir",
                                  ow ? "-overwrite" : ""),
                              1, l, cdz ? "out.cdz" : "out.chromdata.zarr", ow};
    all[n++] = (scenario){ow ? "convert-overwrite" : "convert", 2, 0, "out", ow};
  }
  const char *tmp = getenv("TMPDIR");
  char *base = fmt("%s/dc-fault.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(base))
    die("mkdtemp: %s", strerror(errno));
  setenv("TMPDIR", base, 1); /* spill files of the writers go there too */
  int failed = 0, ran = 0;
  for (int i = 0; i < n; i++) {
    int wanted = argc < 2;
    for (int a = 1; a < argc; a++)
      wanted |= !strcmp(argv[a], all[i].name);
    if (!wanted)
      continue;
    if (all[i].kind == 2 && (!g_cli || access(g_cli, X_OK) != 0 || !g_input)) {
      printf("%-28s skipped: DC_FAULT_CLI (the deltacells binary, cargo build --features cli) "
             "or DC_FAULT_INPUT not set\n",
             all[i].name);
      continue;
    }
    ran++;
    if (run_scenario(&all[i], base, stride) != 0) {
      failed = 1;
      break;
    }
  }
  if (!failed)
    remove_tree(base);
  printf("fault_injection: %d scenarios, stride %ld: %s\n", ran, stride, failed ? "FAILED" : "passed");
  return failed || ran == 0;
}
