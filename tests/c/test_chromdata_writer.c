/* The ChromData writer (C API section 6) through the header alone: spots are built by hand
 * as Arrow C data (no Arrow library), appended out of order in two batches, written in
 * every layout and as .cdz, and read back with the backed reader; the error paths of every
 * writer function; a .cdz and a directory store written to moto's S3 server
 * (scripts/remote_servers.py, started here; DELTACELLS_SKIP_REMOTE_TESTS=1 skips that part)
 * with dc_chromdata_writer_create_opts, downloaded and read back. Runs under valgrind too
 * (every struct released exactly once). */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "deltacells.h"
#include "arrow_build.h"

static int g_passed = 0, g_failed = 0;

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (cond) {                                                                  \
      g_passed++;                                                                \
    } else {                                                                     \
      g_failed++;                                                                \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__,    \
              __LINE__, #cond, dc_last_error());                                 \
    }                                                                            \
  } while (0)

#define CHECK_STATUS(call, want)                                                 \
  do {                                                                           \
    dc_status s_ = (call);                                                       \
    if (s_ == (want) && (s_ == DC_OK || dc_last_error()[0] != '\0')) {           \
      g_passed++;                                                                \
    } else {                                                                     \
      g_failed++;                                                                \
      fprintf(stderr, "%s:%d: %s returned %s, expected %s (%s)\n", __FILE__,      \
              __LINE__, #call, dc_status_name(s_), dc_status_name(want),         \
              dc_last_error());                                                  \
    }                                                                            \
  } while (0)

/* ---- Arrow C data built by hand (arrays: arrow_build.h) ----------------------------- */

static struct ArrowArray *f64_array(const double *v, int64_t n) { return prim_array(v, n, sizeof *v); }

static struct ArrowArray *i64_array(const int64_t *v, int64_t n) { return prim_array(v, n, sizeof *v); }

/* Schemas: names and formats are static strings; only the child arrays are allocated. */
static void release_schema(struct ArrowSchema *s) {
  for (int64_t i = 0; i < s->n_children; i++) {
    struct ArrowSchema *c = s->children[i];
    if (c->release) c->release(c);
    free(c);
  }
  free(s->children);
  s->release = NULL;
}

static void release_leaf_schema(struct ArrowSchema *s) { s->release = NULL; }

enum { N_COLS = 9 };
static const char *const COL_NAMES[N_COLS] = {"chrom", "start", "end", "trace_id", "cell_id",
                                              "x",     "y",     "z",   "spot_tracks/intensity"};
static const char *const COL_FORMATS[N_COLS] = {"u", "l", "l", "u", "u", "g", "g", "g", "g"};

/* A struct schema of `nc` leaf children with static names and formats. */
static void struct_schema(int nc, const char *const *names, const char *const *formats,
                          struct ArrowSchema *s) {
  memset(s, 0, sizeof *s);
  s->format = "+s";
  s->name = "";
  s->n_children = nc;
  s->children = calloc((size_t)nc, sizeof(struct ArrowSchema *));
  for (int i = 0; i < nc; i++) {
    struct ArrowSchema *c = calloc(1, sizeof *c);
    c->format = formats[i];
    c->name = names[i];
    c->flags = ARROW_FLAG_NULLABLE;
    c->release = release_leaf_schema;
    s->children[i] = c;
  }
  s->release = release_schema;
}

static void spots_schema(struct ArrowSchema *s) { struct_schema(N_COLS, COL_NAMES, COL_FORMATS, s); }

/* The logical spots, in input (deliberately not canonical) order. */
enum { N_SPOTS = 40 };
typedef struct {
  const char *chrom[N_SPOTS], *trace[N_SPOTS], *cell[N_SPOTS];
  int64_t start[N_SPOTS], end[N_SPOTS];
  double x[N_SPOTS], y[N_SPOTS], z[N_SPOTS], intensity[N_SPOTS];
} spots;

static void make_spots(spots *sp) {
  static const char *chroms[] = {"chr2", "chr1", "chrX"};
  static const char *traces[] = {"t3", "t1", "t2", "t0", "t4"};
  static const char *cells[] = {"cellB", "cellA", "cellB", "cellA", "cellC"};
  for (int i = 0; i < N_SPOTS; i++) {
    int t = (i * 7) % 5;
    sp->trace[i] = traces[t];
    sp->cell[i] = cells[t];
    sp->chrom[i] = chroms[(i * 5) % 3];
    sp->start[i] = (int64_t)((i * 13) % 8) * 30000;
    sp->end[i] = sp->start[i] + 30000;
    sp->x[i] = (i == 11) ? NAN : 0.5 * i;
    sp->y[i] = 100.0 - i;
    sp->z[i] = i * 0.25;
    sp->intensity[i] = (double)(i * i);
  }
}

/* Rows [lo, hi) of the spots as a struct array. */
static void spots_batch(const spots *sp, int lo, int hi, struct ArrowArray *out) {
  int64_t n = hi - lo;
  struct ArrowArray *cols[N_COLS] = {
      utf8_array(sp->chrom + lo, n), i64_array(sp->start + lo, n), i64_array(sp->end + lo, n),
      utf8_array(sp->trace + lo, n), utf8_array(sp->cell + lo, n), f64_array(sp->x + lo, n),
      f64_array(sp->y + lo, n),      f64_array(sp->z + lo, n),     f64_array(sp->intensity + lo, n)};
  batch_of(out, N_COLS, cols, n);
}

/* ---- reading back -------------------------------------------------------------------- */

static int child_index(const struct ArrowSchema *s, const char *name) {
  for (int64_t i = 0; i < s->n_children; i++)
    if (strcmp(s->children[i]->name, name) == 0) return (int)i;
  return -1;
}

static int same_double(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

/* Reads every spot in the written order and compares x, y, z and the track with the input. */
static void check_read_back(const char *path, const spots *sp, int float32) {
  dc_chromdata *cd = NULL;
  CHECK_STATUS(dc_chromdata_open(path, &cd), DC_OK);
  if (!cd) return;
  dc_chromdata_info info;
  CHECK_STATUS(dc_chromdata_info_get(cd, &info), DC_OK);
  CHECK(info.n_spots == N_SPOTS);
  CHECK(info.n_traces == 5);
  CHECK(info.n_cells == 3);
  CHECK(info.n_chroms == 3);
  CHECK(info.has_coords == 1 && info.has_cell_id == 1);
  CHECK(info.coord_bits == (float32 ? 32 : 64));
  CHECK(info.has_source_row == 1); /* the input was not in canonical order */

  struct ArrowArrayStream stream;
  memset(&stream, 0, sizeof stream);
  CHECK_STATUS(dc_chromdata_read_spots(cd, 1, NULL, 0, &stream), DC_OK);
  dc_chromdata_free(cd); /* the stream stays valid */
  if (!stream.release) return;
  struct ArrowSchema schema;
  CHECK(stream.get_schema(&stream, &schema) == 0);
  int ix = child_index(&schema, "x"), iy = child_index(&schema, "y");
  int iz = child_index(&schema, "z"), it = child_index(&schema, "spot_tracks/intensity");
  CHECK(ix >= 0 && iy >= 0 && iz >= 0 && it >= 0);
  if (ix >= 0) CHECK(strcmp(schema.children[ix]->format, float32 ? "f" : "g") == 0);
  int64_t row = 0;
  for (;;) {
    struct ArrowArray batch;
    CHECK(stream.get_next(&stream, &batch) == 0);
    if (!batch.release) break;
    for (int64_t r = 0; r < batch.length && row < N_SPOTS && ix >= 0 && it >= 0; r++, row++) {
      const struct ArrowArray *cx = batch.children[ix], *ct = batch.children[it];
      double x = float32 ? ((const float *)cx->buffers[1])[cx->offset + r]
                         : ((const double *)cx->buffers[1])[cx->offset + r];
      double want = float32 ? (double)(float)sp->x[row] : sp->x[row];
      if (isnan(want))
        CHECK(isnan(x));
      else
        CHECK(same_double(x, want));
      CHECK(((const double *)ct->buffers[1])[ct->offset + r] == sp->intensity[row]);
    }
    batch.release(&batch);
  }
  CHECK(row == N_SPOTS);
  schema.release(&schema);
  stream.release(&stream);
}

static void write_store(const char *path, int64_t layout, int float32, const spots *sp) {
  dc_chromdata_writer *w = NULL;
  CHECK_STATUS(dc_chromdata_writer_create(path, &w), DC_OK);
  CHECK_STATUS(dc_chromdata_writer_set(w, DC_CDW_LAYOUT, layout), DC_OK);
  CHECK_STATUS(dc_chromdata_writer_set(w, DC_CDW_COORD_FLOAT32, float32), DC_OK);
  CHECK_STATUS(dc_chromdata_writer_set(w, DC_CDW_MEMORY_BUDGET, 1 << 20), DC_OK);
  CHECK_STATUS(dc_chromdata_writer_set(w, DC_CDW_THREADS, 2), DC_OK);
  struct ArrowSchema schema;
  spots_schema(&schema);
  for (int part = 0; part < 2; part++) {
    struct ArrowArray batch;
    spots_batch(sp, part ? 17 : 0, part ? N_SPOTS : 17, &batch);
    CHECK_STATUS(dc_chromdata_writer_append(w, &batch, &schema), DC_OK);
    CHECK(batch.release == NULL); /* moved into the library */
  }
  CHECK_STATUS(dc_chromdata_writer_finish(w), DC_OK);
  /* After finish: every call but free is a state error. */
  struct ArrowArray late;
  spots_batch(sp, 0, 3, &late);
  CHECK_STATUS(dc_chromdata_writer_append(w, &late, &schema), DC_ERR_STATE);
  CHECK(late.release == NULL); /* released on every path */
  CHECK_STATUS(dc_chromdata_writer_finish(w), DC_ERR_STATE);
  CHECK_STATUS(dc_chromdata_writer_set(w, DC_CDW_THREADS, 1), DC_ERR_STATE);
  dc_chromdata_writer_free(w);
  schema.release(&schema);
}

/* ---- small tables: struct arrays of given columns ------------------------------------ */

/* A struct array of `nc` children (moved in) and its schema (static names / formats). */
static void struct_of(int64_t n, int nc, struct ArrowArray **children, const char *const *names,
                      const char *const *formats, struct ArrowArray *out,
                      struct ArrowSchema *schema) {
  batch_of(out, nc, children, n);
  struct_schema(nc, names, formats, schema);
}

/* The one batch of a stream of a single-batch table; 0 rows when absent. */
static int64_t first_batch(struct ArrowArrayStream *stream, struct ArrowArray *batch) {
  memset(batch, 0, sizeof *batch);
  if (stream->get_next(stream, batch) != 0 || !batch->release) return 0;
  return batch->length;
}

/* Bins covering every locus of make_spots (3 chromosomes x 8 bins of 30 kb), bin tracks,
 * intervals and points: written, then read back through the reader's C API. */
static void check_small_tables(const char *dir, const spots *sp) {
  static const char *chroms[] = {"chr2", "chr1", "chrX"};
  enum { N_BINS = 24 };
  const char *bchrom[N_BINS];
  int64_t bstart[N_BINS], bend[N_BINS];
  double signal[N_BINS];
  for (int b = 0; b < N_BINS; b++) {
    bchrom[b] = chroms[b / 8];
    bstart[b] = (b % 8) * 30000;
    bend[b] = bstart[b] + 30000;
    signal[b] = b * 1.5;
  }
  static const char *const bin_names[] = {"chrom", "start", "end"};
  static const char *const bin_formats[] = {"u", "l", "l"};
  static const char *const sig_names[] = {"signal"};
  static const char *const f64_format[] = {"g"};
  char path[512];
  snprintf(path, sizeof path, "%s/small.chromdata.zarr", dir);
  dc_chromdata_writer *w = NULL;
  CHECK_STATUS(dc_chromdata_writer_create(path, &w), DC_OK);
  struct ArrowArray a;
  struct ArrowSchema s;

  /* Bin tracks before the bins table: a state error, the array released. */
  struct ArrowArray *sig[] = {f64_array(signal, N_BINS)};
  struct_of(N_BINS, 1, sig, sig_names, f64_format, &a, &s);
  CHECK_STATUS(dc_chromdata_writer_set_bin_tracks(w, &a, &s), DC_ERR_STATE);
  CHECK(a.release == NULL);
  s.release(&s);

  struct ArrowArray *bins[] = {utf8_array(bchrom, N_BINS), i64_array(bstart, N_BINS),
                               i64_array(bend, N_BINS)};
  struct_of(N_BINS, 3, bins, bin_names, bin_formats, &a, &s);
  CHECK_STATUS(dc_chromdata_writer_set_bins(w, &a, &s), DC_OK);
  s.release(&s);
  /* Wrong row count, then the real one. */
  struct ArrowArray *sig2[] = {f64_array(signal, N_BINS - 1)};
  struct_of(N_BINS - 1, 1, sig2, sig_names, f64_format, &a, &s);
  CHECK_STATUS(dc_chromdata_writer_set_bin_tracks(w, &a, &s), DC_ERR_INVALID_ARGUMENT);
  s.release(&s);
  struct ArrowArray *sig3[] = {f64_array(signal, N_BINS)};
  struct_of(N_BINS, 1, sig3, sig_names, f64_format, &a, &s);
  CHECK_STATUS(dc_chromdata_writer_set_bin_tracks(w, &a, &s), DC_OK);
  s.release(&s);

  /* Intervals (domain: chrom, start, end) under a key that needs a portable name. */
  const char *tchrom[] = {"chr1", "chrX"};
  int64_t tstart[] = {0, 60000}, tend[] = {90000, 120000};
  struct ArrowArray *tads[] = {utf8_array(tchrom, 2), i64_array(tstart, 2), i64_array(tend, 2)};
  struct_of(2, 3, tads, bin_names, bin_formats, &a, &s);
  CHECK_STATUS(dc_chromdata_writer_add_table(w, "intervals", "tads v1", "pair", &a, &s),
               DC_ERR_INVALID_ARGUMENT); /* a pair needs chrom1 ... end2 */
  CHECK(a.release == NULL);
  s.release(&s);
  struct ArrowArray *tads2[] = {utf8_array(tchrom, 2), i64_array(tstart, 2),
                                i64_array(tend, 2)};
  struct_of(2, 3, tads2, bin_names, bin_formats, &a, &s);
  CHECK_STATUS(dc_chromdata_writer_add_table(w, "intervals", "tads v1", "domain", &a, &s), DC_OK);
  s.release(&s);
  struct ArrowArray *tads3[] = {utf8_array(tchrom, 2), i64_array(tstart, 2),
                                i64_array(tend, 2)};
  struct_of(2, 3, tads3, bin_names, bin_formats, &a, &s);
  CHECK_STATUS(dc_chromdata_writer_add_table(w, "intervals", "tads v1", "domain", &a, &s),
               DC_ERR_EXISTS);
  s.release(&s);
  struct ArrowArray *pts[] = {f64_array(signal, 3)};
  struct_of(3, 1, pts, sig_names, f64_format, &a, &s);
  CHECK_STATUS(dc_chromdata_writer_add_table(w, "points", NULL, NULL, &a, &s),
               DC_ERR_INVALID_ARGUMENT); /* NULL key */
  s.release(&s);
  struct ArrowArray *pts2[] = {f64_array(signal, 3)};
  struct_of(3, 1, pts2, sig_names, f64_format, &a, &s);
  CHECK_STATUS(dc_chromdata_writer_add_table(w, "points", "fiducials", NULL, &a, &s), DC_OK);
  s.release(&s);

  struct ArrowSchema schema;
  spots_schema(&schema);
  struct ArrowArray batch;
  spots_batch(sp, 0, N_SPOTS, &batch);
  CHECK_STATUS(dc_chromdata_writer_append(w, &batch, &schema), DC_OK);
  schema.release(&schema);
  CHECK_STATUS(dc_chromdata_writer_finish(w), DC_OK);
  dc_chromdata_writer_free(w);

  dc_chromdata *cd = NULL;
  CHECK_STATUS(dc_chromdata_open(path, &cd), DC_OK);
  if (!cd) return;
  struct ArrowArrayStream st;
  struct ArrowArray b;
  CHECK_STATUS(dc_chromdata_table(cd, "bin_tracks", &st), DC_OK);
  CHECK(first_batch(&st, &b) == N_BINS);
  if (b.release) {
    const double *v = b.children[0]->buffers[1];
    for (int i = 0; i < N_BINS; i++) CHECK(v[b.children[0]->offset + i] == signal[i]);
    b.release(&b);
  }
  st.release(&st);
  CHECK_STATUS(dc_chromdata_table(cd, "intervals/tads v1", &st), DC_OK);
  CHECK(first_batch(&st, &b) == 2);
  if (b.release) {
    const int64_t *v = b.children[1]->buffers[1];
    CHECK(v[b.children[1]->offset + 1] == 60000);
    b.release(&b);
  }
  st.release(&st);
  CHECK_STATUS(dc_chromdata_keys(cd, "points", &st), DC_OK);
  CHECK(first_batch(&st, &b) == 1);
  if (b.release) {
    const struct ArrowArray *k = b.children[0];
    const int32_t *off = k->buffers[1];
    const char *data = k->buffers[2];
    CHECK(off[k->offset + 1] - off[k->offset] == 9 &&
          memcmp(data + off[k->offset], "fiducials", 9) == 0);
    b.release(&b);
  }
  st.release(&st);
  dc_chromdata_free(cd);
}

/* Every setting's range, as dc_chromdata_writer_param_bounds reports it, is what
 * dc_chromdata_writer_set accepts: both ends accepted, one step beyond either end refused. */
static void check_param_bounds(const char *dir) {
  char path[512];
  snprintf(path, sizeof path, "%s/bounds.chromdata.zarr", dir);
  dc_chromdata_writer *w = NULL;
  CHECK_STATUS(dc_chromdata_writer_create(path, &w), DC_OK);
  const dc_chromdata_writer_param ps[] = {DC_CDW_MEMORY_BUDGET, DC_CDW_COORD_FLOAT32, DC_CDW_LAYOUT,
                                          DC_CDW_OVERWRITE, DC_CDW_THREADS};
  for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
    int64_t lo = 7, hi = -7;
    CHECK_STATUS(dc_chromdata_writer_param_bounds(ps[i], &lo, &hi), DC_OK);
    CHECK(lo == 0 && lo < hi);
    CHECK_STATUS(dc_chromdata_writer_set(w, ps[i], lo), DC_OK);
    CHECK_STATUS(dc_chromdata_writer_set(w, ps[i], hi), DC_OK);
    CHECK_STATUS(dc_chromdata_writer_set(w, ps[i], lo - 1), DC_ERR_INVALID_ARGUMENT);
    if (hi < INT64_MAX) CHECK_STATUS(dc_chromdata_writer_set(w, ps[i], hi + 1), DC_ERR_INVALID_ARGUMENT);
  }
  /* the documented ranges; the budget also refuses 1 .. 1 MiB - 1 */
  int64_t lo = 0, hi = 0;
  CHECK_STATUS(dc_chromdata_writer_param_bounds(DC_CDW_LAYOUT, &lo, &hi), DC_OK);
  CHECK(lo == DC_LAYOUT_FLAT && hi == DC_LAYOUT_PRIMARY_COORDS);
  CHECK_STATUS(dc_chromdata_writer_param_bounds(DC_CDW_OVERWRITE, &lo, &hi), DC_OK);
  CHECK(lo == 0 && hi == 1);
  CHECK_STATUS(dc_chromdata_writer_param_bounds(DC_CDW_MEMORY_BUDGET, &lo, &hi), DC_OK);
  CHECK(lo == 0 && hi == INT64_MAX);
  CHECK_STATUS(dc_chromdata_writer_set(w, DC_CDW_MEMORY_BUDGET, 1000), DC_ERR_INVALID_ARGUMENT);
  CHECK(strstr(dc_last_error(), "memory budget") != NULL);
  CHECK_STATUS(dc_chromdata_writer_set(w, DC_CDW_MEMORY_BUDGET, 1 << 20), DC_OK);
  dc_chromdata_writer_free(w); /* abandoned: nothing written */
  lo = 5, hi = 6;
  CHECK_STATUS(dc_chromdata_writer_param_bounds(99, &lo, &hi), DC_ERR_INVALID_ARGUMENT);
  CHECK(strstr(dc_last_error(), "99") != NULL);
  CHECK_STATUS(dc_chromdata_writer_param_bounds(-1, &lo, &hi), DC_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(dc_chromdata_writer_param_bounds(DC_CDW_THREADS, NULL, &hi), DC_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(dc_chromdata_writer_param_bounds(DC_CDW_THREADS, &lo, NULL), DC_ERR_INVALID_ARGUMENT);
  CHECK(lo == 5 && hi == 6); /* out-parameters are written only on DC_OK */
  struct stat st;
  CHECK(stat(path, &st) != 0);
}

/* ---- remote: moto's S3 server, started as a child process ------------------------------ */

#ifndef DC_REMOTE_SERVERS_PY
#define DC_REMOTE_SERVERS_PY "scripts/remote_servers.py"
#endif

static const char *python_exe(void) {
  const char *py = getenv("DELTACELLS_PYTHON");
  return (py && *py) ? py : "python3";
}

typedef struct {
  pid_t pid;
  int to_child; /* its standard input: closing it stops the servers */
  char s3[128]; /* http://127.0.0.1:PORT */
} servers;

/* Starts scripts/remote_servers.py with the bucket dc-test; 0 on success. */
static int start_servers(servers *sv) {
  int in[2], out[2];
  if (pipe(in) != 0) return -1;
  if (pipe(out) != 0) return -1;
  const char *py = python_exe(); /* before fork: only exec-safe calls in the child */
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[0]);
    close(in[1]);
    close(out[0]);
    close(out[1]);
    execlp(py, py, DC_REMOTE_SERVERS_PY, "--bucket", "dc-test", (char *)NULL);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  sv->pid = pid;
  sv->to_child = in[1];
  FILE *f = fdopen(out[0], "r");
  char line[2048] = "";
  int ok = f && fgets(line, sizeof line, f) != NULL;
  if (f) fclose(f);
  const char *at = ok ? strstr(line, "\"s3\": \"") : NULL;
  const char *end = at ? strchr(at + 7, '"') : NULL;
  if (!end || (size_t)(end - (at + 7)) >= sizeof sv->s3) return -1;
  memcpy(sv->s3, at + 7, (size_t)(end - (at + 7)));
  sv->s3[end - (at + 7)] = '\0';
  return 0;
}

static void stop_servers(servers *sv) {
  close(sv->to_child);
  int status;
  waitpid(sv->pid, &status, 0);
}

/* Downloads s3://dc-test/<key> to `file` with boto3 (which moto[server] brings; independent
 * of the library); 0 on success. */
static int download(const servers *sv, const char *key, const char *file) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "%s -c \"import sys, boto3; boto3.client('s3', endpoint_url=sys.argv[1], "
           "region_name='us-east-1', aws_access_key_id='k', aws_secret_access_key='s')"
           ".download_file('dc-test', sys.argv[2], sys.argv[3])\" '%s' '%s' '%s'",
           python_exe(), sv->s3, key, file);
  return system(cmd);
}

/* Writes the spots to s3://dc-test/c/<name> through dc_chromdata_writer_create_opts. */
static dc_status write_remote(const servers *sv, const char *name, int overwrite,
                              const spots *sp) {
  char url[256], endpoint[200];
  snprintf(url, sizeof url, "s3://dc-test/c/%s", name);
  snprintf(endpoint, sizeof endpoint, "aws_endpoint=%s", sv->s3);
  const char *opts[] = {endpoint, "aws_region=us-east-1", "aws_access_key_id=k",
                        "aws_secret_access_key=s", "allow_http=true"};
  dc_chromdata_writer *w = NULL;
  CHECK_STATUS(dc_chromdata_writer_create_opts(url, opts, 5, &w), DC_OK);
  if (!w) return DC_ERR_INTERNAL;
  CHECK_STATUS(dc_chromdata_writer_set(w, DC_CDW_OVERWRITE, overwrite), DC_OK);
  struct ArrowSchema schema;
  spots_schema(&schema);
  struct ArrowArray batch;
  spots_batch(sp, 0, N_SPOTS, &batch);
  CHECK_STATUS(dc_chromdata_writer_append(w, &batch, &schema), DC_OK);
  dc_status st = dc_chromdata_writer_finish(w);
  dc_chromdata_writer_free(w);
  schema.release(&schema);
  return st;
}

static void check_remote(const char *dir, const spots *sp) {
  const char *skip = getenv("DELTACELLS_SKIP_REMOTE_TESTS");
  if (skip && strcmp(skip, "1") == 0) {
    fprintf(stderr, "DELTACELLS_SKIP_REMOTE_TESTS=1: remote part skipped\n");
    return;
  }
  servers sv;
  int started = start_servers(&sv) == 0;
  CHECK(started); /* needs python3 with moto[server] (scripts/setup.sh) */
  if (!started) return;
  char file[512];
  /* A .cdz: one object, downloaded and read back. */
  CHECK_STATUS(write_remote(&sv, "pc.cdz", 0, sp), DC_OK);
  snprintf(file, sizeof file, "%s/remote-pc.cdz", dir);
  CHECK(download(&sv, "c/pc.cdz", file) == 0);
  check_read_back(file, sp, 0);
  /* Again: exists; with overwrite: replaced. */
  CHECK_STATUS(write_remote(&sv, "pc.cdz", 0, sp), DC_ERR_EXISTS);
  CHECK(strstr(dc_last_error(), "s3://dc-test/c/pc.cdz") != NULL);
  CHECK_STATUS(write_remote(&sv, "pc.cdz", 1, sp), DC_OK);
  /* A directory store: its root zarr.json and every object the metadata names. */
  CHECK_STATUS(write_remote(&sv, "d.chromdata.zarr", 0, sp), DC_OK);
  snprintf(file, sizeof file, "%s/remote-d-zarr.json", dir);
  CHECK(download(&sv, "c/d.chromdata.zarr/zarr.json", file) == 0);
  struct stat st;
  CHECK(stat(file, &st) == 0 && st.st_size > 0);
  /* Bad options: an unknown key, NULL options with a count, a read-only URL. */
  dc_chromdata_writer *w = NULL;
  const char *bad[] = {"no_such_option=1"};
  CHECK_STATUS(dc_chromdata_writer_create_opts("s3://dc-test/c/x.cdz", bad, 1, &w),
               DC_ERR_INVALID_ARGUMENT);
  CHECK(strstr(dc_last_error(), "no_such_option") != NULL);
  CHECK_STATUS(dc_chromdata_writer_create_opts("s3://dc-test/c/x.cdz", NULL, 1, &w),
               DC_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(dc_chromdata_writer_create("https://127.0.0.1:9/x.cdz", &w), DC_ERR_UNSUPPORTED);
  CHECK(w == NULL);
  stop_servers(&sv);
}

/* dc_chromdata_open_opts (C API section 7): options on a local store (checked, no effect
 * there), bad options, and a URL whose server refuses connections: DC_ERR_IO naming the URL,
 * never the secret. The S3 reads themselves are tested against a real server in
 * tests/remote_chromdata.rs. */
static void check_open_opts(const char *path) {
  const char *const opts[] = {"max_concurrency=4", "timeout_ms=2000", "retries=1"};
  dc_chromdata *cd = NULL;
  dc_chromdata_info a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  CHECK_STATUS(dc_chromdata_open_opts(path, opts, 3, &cd), DC_OK);
  CHECK_STATUS(dc_chromdata_info_get(cd, &a), DC_OK);
  dc_chromdata_free(cd);
  cd = NULL;
  CHECK_STATUS(dc_chromdata_open_opts(path, NULL, 0, &cd), DC_OK);
  CHECK_STATUS(dc_chromdata_info_get(cd, &b), DC_OK);
  dc_chromdata_free(cd);
  CHECK(a.n_spots == N_SPOTS && a.n_spots == b.n_spots);
  CHECK(a.n_row_groups == b.n_row_groups && a.layout == b.layout);

  cd = NULL;
  const char *const bad[] = {"no_such_option=1"};
  CHECK_STATUS(dc_chromdata_open_opts(path, bad, 1, &cd), DC_ERR_INVALID_ARGUMENT);
  CHECK(strstr(dc_last_error(), "no_such_option") != NULL);
  const char *const zero[] = {"max_concurrency=0"};
  CHECK_STATUS(dc_chromdata_open_opts(path, zero, 1, &cd), DC_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(dc_chromdata_open_opts(path, NULL, 2, &cd), DC_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(dc_chromdata_open_opts(NULL, NULL, 0, &cd), DC_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(dc_chromdata_open_opts("ftp://host/x.cdz", NULL, 0, &cd), DC_ERR_INVALID_ARGUMENT);
  CHECK(cd == NULL);

  const char *const refused[] = {"aws_endpoint=http://127.0.0.1:1", "aws_region=us-east-1",
                                 "aws_access_key_id=key-id", "aws_secret_access_key=s3cr3t-VALUE",
                                 "allow_http=true", "retries=0", "timeout_ms=5000"};
  CHECK_STATUS(dc_chromdata_open_opts("s3://bucket/x.cdz", refused, 7, &cd), DC_ERR_IO);
  CHECK(strstr(dc_last_error(), "s3://bucket/x.cdz") != NULL);
  CHECK(strstr(dc_last_error(), "s3cr3t-VALUE") == NULL);
  CHECK_STATUS(dc_chromdata_open_opts("s3://bucket/x.chromdata.zarr", refused, 7, &cd), DC_ERR_IO);
  CHECK(strstr(dc_last_error(), "s3://bucket/x.chromdata.zarr") != NULL);
  CHECK(cd == NULL);
}

int main(void) {
  char dir[] = "/tmp/dc-cdw-XXXXXX";
  if (!mkdtemp(dir)) return 2;
  spots sp;
  make_spots(&sp);
  char path[512];

  static const struct {
    int64_t layout;
    int float32;
    const char *name;
  } cases[] = {{DC_LAYOUT_FLAT, 0, "flat.chromdata.zarr"},
               {DC_LAYOUT_PARTITIONED, 1, "part.chromdata.zarr"},
               {DC_LAYOUT_PRIMARY_COORDS, 0, "pc.chromdata.zarr"},
               {DC_LAYOUT_PRIMARY_COORDS, 1, "pc.cdz"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, cases[i].name);
    write_store(path, cases[i].layout, cases[i].float32, &sp);
    check_read_back(path, &sp, cases[i].float32);
  }

  check_small_tables(dir, &sp);
  check_param_bounds(dir);
  snprintf(path, sizeof path, "%s/pc.cdz", dir);
  check_open_opts(path);

  /* An existing store is not replaced without DC_CDW_OVERWRITE, and is with it. */
  snprintf(path, sizeof path, "%s/pc.chromdata.zarr", dir);
  {
    dc_chromdata_writer *w = NULL;
    struct ArrowSchema schema;
    spots_schema(&schema);
    CHECK_STATUS(dc_chromdata_writer_create(path, &w), DC_OK);
    struct ArrowArray batch;
    spots_batch(&sp, 0, N_SPOTS, &batch);
    CHECK_STATUS(dc_chromdata_writer_append(w, &batch, &schema), DC_OK);
    CHECK_STATUS(dc_chromdata_writer_finish(w), DC_ERR_EXISTS);
    CHECK_STATUS(dc_chromdata_writer_set(w, DC_CDW_OVERWRITE, 1), DC_OK);
    CHECK_STATUS(dc_chromdata_writer_finish(w), DC_OK);
    dc_chromdata_writer_free(w);
    schema.release(&schema);
    check_read_back(path, &sp, 0);
  }

  /* Freed without finish: nothing opens at the target, and no temporary is left. */
  snprintf(path, sizeof path, "%s/abandoned.chromdata.zarr", dir);
  {
    dc_chromdata_writer *w = NULL;
    struct ArrowSchema schema;
    spots_schema(&schema);
    CHECK_STATUS(dc_chromdata_writer_create(path, &w), DC_OK);
    struct ArrowArray batch;
    spots_batch(&sp, 0, N_SPOTS, &batch);
    CHECK_STATUS(dc_chromdata_writer_append(w, &batch, &schema), DC_OK);
    dc_chromdata_writer_free(w);
    schema.release(&schema);
    struct stat st;
    CHECK(stat(path, &st) != 0);
    dc_chromdata *cd = NULL;
    CHECK_STATUS(dc_chromdata_open(path, &cd), DC_ERR_NOT_FOUND);
    CHECK(cd == NULL);
  }

  /* Argument errors. */
  {
    dc_chromdata_writer *w = NULL;
    CHECK_STATUS(dc_chromdata_writer_create(NULL, &w), DC_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dc_chromdata_writer_create(path, NULL), DC_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dc_chromdata_writer_create("/no/such/dir/x.chromdata.zarr", &w),
                 DC_ERR_NOT_FOUND);
    CHECK(w == NULL);
    snprintf(path, sizeof path, "%s/args.chromdata.zarr", dir);
    CHECK_STATUS(dc_chromdata_writer_create(path, &w), DC_OK);
    CHECK_STATUS(dc_chromdata_writer_set(w, 99, 1), DC_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dc_chromdata_writer_set(w, DC_CDW_LAYOUT, 7), DC_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(dc_chromdata_writer_set(NULL, DC_CDW_LAYOUT, 0), DC_ERR_INVALID_ARGUMENT);
    struct ArrowSchema schema;
    spots_schema(&schema);
    CHECK_STATUS(dc_chromdata_writer_append(w, NULL, &schema), DC_ERR_INVALID_ARGUMENT);
    struct ArrowArray batch;
    spots_batch(&sp, 0, 5, &batch);
    CHECK_STATUS(dc_chromdata_writer_append(w, &batch, NULL), DC_ERR_INVALID_ARGUMENT);
    CHECK(batch.release == NULL); /* released even on error */
    /* A batch without trace_id: the schema says 3 columns only. */
    schema.n_children = 3;
    spots_batch(&sp, 0, 5, &batch);
    for (int64_t i = 3; i < batch.n_children; i++) {
      batch.children[i]->release(batch.children[i]);
      free(batch.children[i]);
    }
    batch.n_children = 3;
    CHECK_STATUS(dc_chromdata_writer_append(w, &batch, &schema), DC_ERR_INVALID_ARGUMENT);
    CHECK(batch.release == NULL);
    schema.n_children = N_COLS;
    schema.release(&schema);
    CHECK_STATUS(dc_chromdata_writer_finish(NULL), DC_ERR_INVALID_ARGUMENT);
    dc_chromdata_writer_free(w);
    dc_chromdata_writer_free(NULL);
  }

  check_remote(dir, &sp);

  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  printf("test_chromdata_writer: %d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}
