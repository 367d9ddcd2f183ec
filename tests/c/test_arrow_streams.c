/*
 * C tests of the Arrow C data / stream interfaces of the C API, using the Arrow structs of
 * include/deltacells.h alone (no Arrow library), through the real shared or static library.
 *
 * (a) Obs and var tables of datasets: record batches built by hand (a struct array "+s"
 *     of two dictionary (categorical) columns with batch-specific, unsorted dictionaries,
 *     utf8 and large utf8 text, int64, float64 with nulls, bool with nulls and float32
 *     columns, some batches with child or struct offsets), with release callbacks of our
 *     own that record every call; passed to dc_writer_append_obs / dc_writer_set_var_table
 *     (the array is moved, the schema borrowed), read back with dc_dataset_obs /
 *     dc_dataset_var_table and compared value by value: one batch per tile, categorical
 *     columns as dictionaries (int8/16/32 keys, "u" values) over one global sorted
 *     vocabulary, text as utf8 strings (pandas semantics: category vs object dtype), and
 *     categorical columns with more values than DC_WRITER_OBS_MAX_CATEGORIES as strings.
 *
 * (b) ChromData stores (section 5): tests/chromdata/make_stores.py (the independent pandas
 *     / zarr writer) writes stores of every layout, as directories and .cdz, into a private
 *     temporary directory; every section 5 function is called on them and the answers are
 *     checked against what the script wrote (counts from its manifest.json, values it
 *     derives from the row number: spot_id = 3 * row + 1, x NaN on every 7th row, fov,
 *     probe, tlabel) and against each other (every query's rows are the canonical rows of
 *     read_spots restricted to its selection, in that order). python3 with pyarrow, pandas,
 *     numpy and zarr >= 3 is required: without them the test FAILS, unless
 *     DELTACELLS_SKIP_PYTHON_TESTS is set (then part (b) is skipped, and says so).
 *
 * Every schema, array and stream the library hands out is released exactly once; every
 * array we hand in is released by the library exactly once (checked by counting). Every
 * allocation is freed: ctest also runs this program under valgrind.
 */
#define _XOPEN_SOURCE 700

#define TEST_NAME "test_arrow_streams"
#include "test_util.h"

#include "arrow_table.h"

#include <pthread.h>
#include <sys/wait.h>

#ifndef DC_MAKE_STORES_PY
#error "DC_MAKE_STORES_PY (path of tests/chromdata/make_stores.py) must be defined"
#endif

static char *g_dir; /* private temporary directory */

static char *tmp_path(const char *name) { return xasprintf("%s/%s", g_dir, name); }

/* ========================================================================================== */
/* (a) Arrow input built by hand                                                              */
/* ========================================================================================== */

/* Private data of every array / schema we create. Kept (not freed) after release until the
 * end of the test, so that a second release is detected instead of touching freed memory. */
typedef struct {
  int released;
  int64_t n_bufs;
  void *mem[3];        /* owned buffers */
  const void *ptrs[3]; /* ArrowArray.buffers */
  int64_t n_kids;
  void *kids[8];       /* heap ArrowArray / ArrowSchema structs of the children */
  void *kid_ptrs[8];
  void *dict;          /* heap dictionary struct or NULL */
  char *name;          /* schema name (owned) */
} priv_t;

static pthread_mutex_t g_priv_lock = PTHREAD_MUTEX_INITIALIZER;
static priv_t **g_privs;
static size_t g_n_privs;
static atomic_long g_arrays_made, g_arrays_released, g_schemas_made, g_schemas_released;

static priv_t *new_priv(void)
{
  priv_t *p = xcalloc(1, sizeof *p);
  pthread_mutex_lock(&g_priv_lock);
  g_privs = realloc(g_privs, (g_n_privs + 1) * sizeof *g_privs);
  if (!g_privs)
    FAIL("out of memory");
  g_privs[g_n_privs++] = p;
  pthread_mutex_unlock(&g_priv_lock);
  return p;
}

static void release_array(struct ArrowArray *a)
{
  if (a == NULL || a->release == NULL)
    FAIL("release called on a released ArrowArray");
  priv_t *p = a->private_data;
  if (p->released)
    FAIL("an ArrowArray was released twice");
  for (int64_t k = 0; k < p->n_kids; k++) {
    struct ArrowArray *kid = p->kids[k];
    if (kid->release) /* a child may have been moved out */
      kid->release(kid);
    free(kid);
  }
  if (p->dict) {
    struct ArrowArray *d = p->dict;
    if (d->release)
      d->release(d);
    free(d);
  }
  for (int i = 0; i < 3; i++)
    free(p->mem[i]);
  p->released = 1;
  a->release = NULL;
  atomic_fetch_add(&g_arrays_released, 1);
}

static void release_schema(struct ArrowSchema *s)
{
  if (s == NULL || s->release == NULL)
    FAIL("release called on a released ArrowSchema");
  priv_t *p = s->private_data;
  if (p->released)
    FAIL("an ArrowSchema was released twice");
  for (int64_t k = 0; k < p->n_kids; k++) {
    struct ArrowSchema *kid = p->kids[k];
    if (kid->release)
      kid->release(kid);
    free(kid);
  }
  if (p->dict) {
    struct ArrowSchema *d = p->dict;
    if (d->release)
      d->release(d);
    free(d);
  }
  free(p->name);
  p->released = 1;
  s->release = NULL;
  atomic_fetch_add(&g_schemas_released, 1);
}

/* Fills `a` with an array owning buffers b0..b2 (NULL where absent). */
static void init_array(struct ArrowArray *a, int64_t length, int64_t null_count, int64_t offset,
                       int64_t n_bufs, void *b0, void *b1, void *b2)
{
  priv_t *p = new_priv();
  p->n_bufs = n_bufs;
  p->mem[0] = b0, p->mem[1] = b1, p->mem[2] = b2;
  p->ptrs[0] = b0, p->ptrs[1] = b1, p->ptrs[2] = b2;
  memset(a, 0, sizeof *a);
  a->length = length;
  a->null_count = null_count;
  a->offset = offset;
  a->n_buffers = n_bufs;
  a->buffers = p->ptrs;
  a->release = release_array;
  a->private_data = p;
  atomic_fetch_add(&g_arrays_made, 1);
}

static struct ArrowArray *new_array(int64_t length, int64_t null_count, int64_t offset, int64_t n_bufs,
                                    void *b0, void *b1, void *b2)
{
  struct ArrowArray *a = xmalloc(sizeof *a);
  init_array(a, length, null_count, offset, n_bufs, b0, b1, b2);
  return a;
}

static void array_add_child(struct ArrowArray *parent, struct ArrowArray *kid)
{
  priv_t *p = parent->private_data;
  if (p->n_kids == 8)
    FAIL("too many children");
  p->kids[p->n_kids] = kid;
  p->kid_ptrs[p->n_kids] = kid;
  p->n_kids++;
  parent->n_children = p->n_kids;
  parent->children = (struct ArrowArray **)p->kid_ptrs;
}

static void init_schema(struct ArrowSchema *s, const char *format, const char *name, int64_t flags)
{
  priv_t *p = new_priv();
  p->name = xstrdup(name);
  memset(s, 0, sizeof *s);
  s->format = format; /* string literals */
  s->name = p->name;
  s->flags = flags;
  s->release = release_schema;
  s->private_data = p;
  atomic_fetch_add(&g_schemas_made, 1);
}

static struct ArrowSchema *new_schema(const char *format, const char *name, int64_t flags)
{
  struct ArrowSchema *s = xmalloc(sizeof *s);
  init_schema(s, format, name, flags);
  return s;
}

static void schema_add_child(struct ArrowSchema *parent, struct ArrowSchema *kid)
{
  priv_t *p = parent->private_data;
  p->kids[p->n_kids] = kid;
  p->kid_ptrs[p->n_kids] = kid;
  p->n_kids++;
  parent->n_children = p->n_kids;
  parent->children = (struct ArrowSchema **)p->kid_ptrs;
}

static void set_bit(uint8_t *bits, int64_t i, int v)
{
  if (v)
    bits[i >> 3] |= (uint8_t)(1u << (i & 7));
  else
    bits[i >> 3] &= (uint8_t)~(1u << (i & 7));
}

/* ------------------------------------------------------------------------------------------ */
/* The obs table: expected values by global row i                                             */
/* ------------------------------------------------------------------------------------------ */

static const char *const CELL_TYPES[] = {"T cell", "B cell", "NK", "Mono \xce\xb6", ""};
static const char *const RUNS[] = {"run_A", "run_B", "run_C"};

static const char *obs_cell_type(int64_t i) { return i % 11 == 5 ? NULL : CELL_TYPES[(i * 7) % 5]; }
static const char *obs_barcode(int64_t i, char *buf) /* NULL (missing) or buf */
{
  if (i % 13 == 7)
    return NULL;
  snprintf(buf, 64, "AAAC%04d-%d", (int)((i * 37) % 10000), (int)(i % 3));
  return buf;
}
static int64_t obs_donor(int64_t i) { return i % 4; } /* as "donor_<k>" */
static const char *obs_batch(int64_t i)
{
  if (i % 17 == 0)
    return NULL;
  return i < 100 ? RUNS[i % 2] : RUNS[i % 3];
}
static int64_t obs_n_counts(int64_t i) { return i * 1000003 - 5000000000ll; }
static int obs_score_valid(int64_t i) { return i % 5 != 2; }
static double obs_score(int64_t i) { return i == 17 ? NAN : (double)i * 0.25 - 3; }
static int obs_flag_valid(int64_t i) { return i % 11 != 3; }
static int obs_flag(int64_t i) { return i % 3 == 0; }
static float obs_pct(int64_t i) { return (float)(i % 100) / 7.0f; }

/* Categorical (Arrow dictionary) input columns are stored as categories, plain text as
 * strings (pandas semantics: "category" vs object dtype). */
#define N_OBS_COLS 8
static const char *const OBS_NAMES[N_OBS_COLS] = {"cell_type", "barcode", "donor",  "batch",
                                                  "n_counts",  "score",   "flag",   "pct mito/%"};
static const char *const OBS_FORMATS[N_OBS_COLS] = {"s", "u", "U", "c", "l", "g", "b", "f"};

/* Text of column `col` at buffer row k (NULL = missing). */
typedef const char *(*text_fn)(int64_t row, char *buf);
static const char *text_cell_type(int64_t i, char *buf) { (void)buf; return obs_cell_type(i); }
static const char *text_barcode(int64_t i, char *buf) { return obs_barcode(i, buf); }
static const char *text_donor(int64_t i, char *buf) { snprintf(buf, 64, "donor_%d", (int)obs_donor(i)); return buf; }
static const char *text_batch(int64_t i, char *buf) { (void)buf; return obs_batch(i); }

/* A utf8 ("u", int32 offsets) or large utf8 ("U", int64 offsets) array of `len` buffer
 * rows (rows[k] = the global row of buffer row k). */
static struct ArrowArray *text_array(const int64_t *rows, int64_t len, int64_t length, int64_t offset,
                                     int large, int with_validity, text_fn fn)
{
  char buf[64];
  size_t total = 0;
  for (int64_t k = 0; k < len; k++) {
    const char *s = fn(rows[k], buf);
    total += s ? strlen(s) : 0;
  }
  char *data = xmalloc(total + 1);
  void *offsets = xmalloc((size_t)(len + 1) * (large ? 8 : 4));
  uint8_t *valid = with_validity ? xcalloc((size_t)(len + 7) / 8, 1) : NULL;
  size_t at = 0;
  for (int64_t k = 0; k <= len; k++) {
    if (large)
      ((int64_t *)offsets)[k] = (int64_t)at;
    else
      ((int32_t *)offsets)[k] = (int32_t)at;
    if (k == len)
      break;
    const char *s = fn(rows[k], buf);
    if (valid)
      set_bit(valid, k, s != NULL);
    else if (!s)
      FAIL("a missing value in a column without validity");
    size_t l = s ? strlen(s) : 0;
    memcpy(data + at, s ? s : "", l);
    at += l;
  }
  return new_array(length, with_validity ? -1 : 0, offset, 3, valid, offsets, data);
}

/* A dictionary array: keys of format "c" (int8) or "s" (int16) into `dict` (n_dict utf8
 * values, this batch's own order). */
static struct ArrowArray *dict_array(const int64_t *rows, int64_t len, int64_t length, int64_t offset,
                                     int key_bytes, const char *const *dict, int n_dict, text_fn fn)
{
  char buf[64];
  uint8_t *valid = xcalloc((size_t)(len + 7) / 8, 1);
  void *keys = xcalloc((size_t)len, (size_t)key_bytes);
  for (int64_t k = 0; k < len; k++) {
    const char *s = fn(rows[k], buf);
    set_bit(valid, k, s != NULL);
    int key = 0;
    for (int j = 0; s && j < n_dict; j++)
      if (strcmp(dict[j], s) == 0)
        key = j + 1;
    if (s && key == 0)
      FAIL("\"%s\" is not in the batch's dictionary", s);
    if (key_bytes == 1)
      ((int8_t *)keys)[k] = (int8_t)(key ? key - 1 : 0);
    else
      ((int16_t *)keys)[k] = (int16_t)(key ? key - 1 : 0);
  }
  struct ArrowArray *a = new_array(length, -1, offset, 2, valid, keys, NULL);
  /* the dictionary: utf8, entry j = dict[j] */
  size_t total = 0;
  for (int j = 0; j < n_dict; j++)
    total += strlen(dict[j]);
  char *data = xmalloc(total + 1);
  int32_t *offs = xmalloc((size_t)(n_dict + 1) * sizeof *offs);
  offs[0] = 0;
  for (int j = 0; j < n_dict; j++) {
    memcpy(data + offs[j], dict[j], strlen(dict[j]));
    offs[j + 1] = offs[j] + (int32_t)strlen(dict[j]);
  }
  struct ArrowArray *values = new_array(n_dict, 0, 0, 3, NULL, offs, data);
  ((priv_t *)a->private_data)->dict = values;
  a->dictionary = values;
  return a;
}

/* A batch of obs rows [start, start + n): children have `pad` junk rows in front, skipped
 * by a child offset (child_off = 1) or by the struct's offset (child_off = 0). */
static void make_obs_batch(int64_t start, int64_t n, int64_t pad, int child_off, struct ArrowArray *out,
                           struct ArrowSchema *schema)
{
  int64_t len = pad + n; /* rows in each child's buffers */
  size_t nbytes = (size_t)(len + 7) / 8;
  int64_t coff = child_off ? pad : 0;
  int64_t clen = child_off ? n : len;
  int64_t *rows = xmalloc((size_t)(len ? len : 1) * sizeof *rows);
  for (int64_t k = 0; k < len; k++) /* junk rows in front: valid data, of other rows */
    rows[k] = k < pad ? 100000 + k : start + k - pad;

  /* cell_type: categorical (int16 keys), with nulls, each batch with its own dictionary
   * order, not sorted */
  const char *const ct_dict_a[] = {"NK", "", "T cell", "Mono \xce\xb6", "B cell"};
  const char *const ct_dict_b[] = {"B cell", "Mono \xce\xb6", "NK", "T cell", ""};
  struct ArrowArray *c0 = dict_array(rows, len, clen, coff, 2, start % 2 ? ct_dict_a : ct_dict_b, 5, text_cell_type);
  /* barcode: utf8 with nulls; donor: large utf8 without validity */
  struct ArrowArray *c1 = text_array(rows, len, clen, coff, 0, 1, text_barcode);
  struct ArrowArray *c2 = text_array(rows, len, clen, coff, 1, 0, text_donor);
  /* batch: categorical (int8 keys); the first batch's dictionary has two of the labels */
  const char *const b_dict_a[] = {"run_B", "run_A"};
  const char *const b_dict_b[] = {"run_C", "run_A", "run_B"};
  int two = pad == 0 && start + n <= 100; /* only rows < 100: run_A and run_B */
  struct ArrowArray *c3 = dict_array(rows, len, clen, coff, 1, two ? b_dict_a : b_dict_b, two ? 2 : 3, text_batch);

  /* n_counts: int64, no nulls */
  int64_t *d4 = xmalloc((size_t)len * sizeof *d4);
  for (int64_t k = 0; k < len; k++)
    d4[k] = obs_n_counts(rows[k]);
  struct ArrowArray *c4 = new_array(clen, 0, coff, 2, NULL, d4, NULL);

  /* score: float64 with a validity bitmap */
  uint8_t *v5 = xcalloc(nbytes, 1);
  double *d5 = xmalloc((size_t)len * sizeof *d5);
  int64_t nulls5 = 0;
  for (int64_t k = 0; k < len; k++) {
    set_bit(v5, k, obs_score_valid(rows[k]));
    nulls5 += k >= pad && !obs_score_valid(rows[k]);
    d5[k] = obs_score_valid(rows[k]) ? obs_score(rows[k]) : -12345.0; /* junk under nulls */
  }
  struct ArrowArray *c5 = new_array(clen, child_off ? nulls5 : -1, coff, 2, v5, d5, NULL);

  /* flag: bool with nulls */
  uint8_t *v6 = xcalloc(nbytes, 1);
  uint8_t *d6 = xcalloc(nbytes, 1);
  for (int64_t k = 0; k < len; k++) {
    set_bit(v6, k, obs_flag_valid(rows[k]));
    set_bit(d6, k, obs_flag(rows[k]));
  }
  struct ArrowArray *c6 = new_array(clen, -1, coff, 2, v6, d6, NULL);

  /* pct mito/%: float32 */
  float *d7 = xmalloc((size_t)len * sizeof *d7);
  for (int64_t k = 0; k < len; k++)
    d7[k] = obs_pct(rows[k]);
  struct ArrowArray *c7 = new_array(clen, 0, coff, 2, NULL, d7, NULL);
  free(rows);

  init_array(out, n, 0, child_off ? 0 : pad, 1, NULL, NULL, NULL);
  struct ArrowArray *kids[N_OBS_COLS] = {c0, c1, c2, c3, c4, c5, c6, c7};
  for (int j = 0; j < N_OBS_COLS; j++)
    array_add_child(out, kids[j]);

  init_schema(schema, "+s", "", 0);
  for (int j = 0; j < N_OBS_COLS; j++) {
    struct ArrowSchema *cs = new_schema(OBS_FORMATS[j], OBS_NAMES[j], ARROW_FLAG_NULLABLE);
    if (j == 0 || j == 3) {
      struct ArrowSchema *ds = new_schema("u", "", ARROW_FLAG_NULLABLE);
      ((priv_t *)cs->private_data)->dict = ds;
      cs->dictionary = ds;
    }
    schema_add_child(schema, cs);
  }
}

/* A one-column batch of `n` rows (format "l" or a type the obs writer does not take). */
static void make_one_column(const char *format, const char *name, int64_t n, struct ArrowArray *out,
                            struct ArrowSchema *schema)
{
  int64_t *d = xcalloc((size_t)n, sizeof *d);
  for (int64_t i = 0; i < n; i++)
    d[i] = i;
  struct ArrowArray *c = new_array(n, 0, 0, 2, NULL, d, NULL);
  init_array(out, n, 0, 0, 1, NULL, NULL, NULL);
  array_add_child(out, c);
  init_schema(schema, "+s", "", 0);
  schema_add_child(schema, new_schema(format, name, ARROW_FLAG_NULLABLE));
}

/* Passes a batch to append_obs and checks the move: the batch is marked released whatever
 * the outcome, the schema is still ours (we release it). */
static dc_status append_obs_moved(dc_writer *w, struct ArrowArray *batch, struct ArrowSchema *schema)
{
  long before = atomic_load(&g_schemas_released);
  dc_status s = dc_writer_append_obs(w, batch, schema);
  const char *msg = dc_last_error();
  char *saved = xstrdup(msg);
  if (batch->release != NULL)
    FAIL("dc_writer_append_obs returned %s but left the batch unreleased (it is moved)", dc_status_name(s));
  if (schema->release == NULL || atomic_load(&g_schemas_released) != before)
    FAIL("dc_writer_append_obs released the schema (it is only borrowed)");
  schema->release(schema);
  CHECK(schema->release == NULL);
  /* the status and message are those of the call */
  CHECK(strcmp(saved, dc_last_error()) == 0 || s == DC_OK);
  free(saved);
  return s;
}

/* ------------------------------------------------------------------------------------------ */
/* (a) tests                                                                                  */
/* ------------------------------------------------------------------------------------------ */

#define OBS_CELLS 300
#define OBS_TILE 64
#define OBS_GENES 20

static char *g_obs_path;

static int str_cmp_p(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The column holds the global vocabulary: the sorted distinct non-null values, the same in
 * every batch. */
static void check_vocabulary(const col_t *c)
{
  CHECK(c->dict_format != NULL);
  CHECK_STR(c->dict_format, "u");
  CHECK(strcmp(c->format, "c") == 0 || strcmp(c->format, "s") == 0 || strcmp(c->format, "i") == 0);
  CHECK(c->dict_same);
  for (int64_t k = 1; k < c->dict_n; k++)
    if (strcmp(c->dict[k - 1], c->dict[k]) >= 0)
      FAIL("column %s: vocabulary not sorted / unique at %lld: \"%s\" then \"%s\"", c->name, (long long)k,
           c->dict[k - 1], c->dict[k]);
  /* exactly the distinct values */
  char **seen = xmalloc((size_t)(c->n ? c->n : 1) * sizeof *seen);
  int64_t n = 0;
  for (int64_t i = 0; i < c->n; i++)
    if (c->valid[i])
      seen[n++] = c->sv[i];
  qsort(seen, (size_t)n, sizeof *seen, str_cmp_p);
  int64_t distinct = 0;
  for (int64_t i = 0; i < n; i++)
    if (i == 0 || strcmp(seen[i - 1], seen[i]) != 0) {
      if (distinct >= c->dict_n || strcmp(seen[i], c->dict[distinct]) != 0)
        FAIL("column %s: value \"%s\" is not vocabulary entry %lld", c->name, seen[i], (long long)distinct);
      distinct++;
    }
  CHECK_I64(distinct, c->dict_n);
  free(seen);
}

/* Checks rows [0, OBS_CELLS) of the obs columns present in `t` against the expected values. */
static void check_obs_values(const table_t *t)
{
  char buf[64], ebuf[64];
  CHECK_I64(t->n_rows, OBS_CELLS);
  CHECK_I64(t->n_batches, (OBS_CELLS + OBS_TILE - 1) / OBS_TILE); /* one batch per tile */
  for (int64_t b = 0; b < t->n_batches; b++)
    CHECK_I64(t->batch_len[b], b + 1 < t->n_batches ? OBS_TILE : OBS_CELLS - b * OBS_TILE);
  for (int64_t j = 0; j < t->n_cols; j++) {
    const col_t *c = &t->cols[j];
    for (int64_t i = 0; i < OBS_CELLS; i++) {
      int ok;
      const char *e = NULL;
      int text = 1;
      if (strcmp(c->name, "cell_type") == 0)
        e = obs_cell_type(i);
      else if (strcmp(c->name, "barcode") == 0)
        e = obs_barcode(i, ebuf);
      else if (strcmp(c->name, "donor") == 0)
        e = text_donor(i, ebuf);
      else if (strcmp(c->name, "batch") == 0)
        e = obs_batch(i);
      else
        text = 0;
      if (text) {
        ok = c->kind == K_STR && c->valid[i] == (e != NULL) && (!e || strcmp(c->sv[i], e) == 0);
      } else if (strcmp(c->name, "n_counts") == 0) {
        ok = c->kind == K_INT && c->valid[i] && c->iv[i] == obs_n_counts(i);
      } else if (strcmp(c->name, "score") == 0) {
        ok = c->kind == K_FLOAT && c->valid[i] == obs_score_valid(i) &&
             (!c->valid[i] || (isnan(obs_score(i)) ? isnan(c->fv[i]) : c->fv[i] == obs_score(i)));
      } else if (strcmp(c->name, "flag") == 0) {
        ok = c->kind == K_BOOL && c->valid[i] == obs_flag_valid(i) && (!c->valid[i] || c->iv[i] == obs_flag(i));
      } else if (strcmp(c->name, "pct mito/%") == 0) {
        ok = c->kind == K_FLOAT && c->valid[i] && c->fv[i] == (double)obs_pct(i);
      } else {
        FAIL("unexpected obs column \"%s\"", c->name);
      }
      if (!ok)
        FAIL("obs column %s row %lld: got %s", c->name, (long long)i,
             value_text(c, i, buf) ? value_text(c, i, buf) : "null");
    }
    PASS();
  }
}

/* The columns are `names`, with their stored types: categorical inputs as dictionaries
 * over the global vocabulary (unless named in `as_string`: more distinct values than
 * DC_WRITER_OBS_MAX_CATEGORIES), plain text (utf8 or large utf8) as utf8 strings, numbers
 * and bools as given. */
static void check_obs_schema(const table_t *t, const char *const *names, int n, const char *as_string)
{
  CHECK_I64(t->n_cols, n);
  for (int j = 0; j < n; j++) {
    const col_t *c = &t->cols[j];
    CHECK_STR(c->name, names[j]);
    int categorical = strcmp(c->name, "cell_type") == 0 || strcmp(c->name, "batch") == 0;
    if (as_string && strcmp(c->name, as_string) == 0)
      categorical = 0;
    if (categorical) {
      check_vocabulary(c);
    } else {
      if (c->dict_format != NULL)
        FAIL("obs column %s: a dictionary (%s over %s), expected a plain column", c->name, c->format,
             c->dict_format);
      const char *want = strcmp(c->name, "n_counts") == 0 ? "l"
                         : strcmp(c->name, "score") == 0  ? "g"
                         : strcmp(c->name, "flag") == 0   ? "b"
                         : strcmp(c->name, "pct mito/%") == 0 ? "f"
                                                              : "u"; /* text */
      CHECK_STR(c->format, want);
    }
    PASS();
  }
}

/* Var table: n_genes rows in input order: "gene_ids" (utf8), "highly_variable" (bool),
 * "mean" (float64). */
static void make_var_table(struct ArrowArray *out, struct ArrowSchema *schema)
{
  int64_t n = OBS_GENES;
  int32_t *off = xmalloc((size_t)(n + 1) * sizeof *off);
  char *data = xmalloc((size_t)n * 16);
  uint8_t *hv = xcalloc(8, 1);
  double *mean = xmalloc((size_t)n * sizeof *mean);
  off[0] = 0;
  for (int64_t i = 0; i < n; i++) {
    off[i + 1] = off[i] + sprintf(data + off[i], "ENSG%03d", (int)i);
    set_bit(hv, i, i % 3 == 1);
    mean[i] = (double)i / 4;
  }
  init_array(out, n, 0, 0, 1, NULL, NULL, NULL);
  array_add_child(out, new_array(n, 0, 0, 3, NULL, off, data));
  array_add_child(out, new_array(n, 0, 0, 2, NULL, hv, NULL));
  array_add_child(out, new_array(n, 0, 0, 2, NULL, mean, NULL));
  init_schema(schema, "+s", "", 0);
  schema_add_child(schema, new_schema("u", "gene_ids", ARROW_FLAG_NULLABLE));
  schema_add_child(schema, new_schema("b", "highly_variable", ARROW_FLAG_NULLABLE));
  schema_add_child(schema, new_schema("g", "mean", ARROW_FLAG_NULLABLE));
}

static void test_obs_write(void)
{
  g_context = "obs: write";
  g_obs_path = tmp_path("obs.dcds");
  dc_writer *w = NULL;
  EXPECT_OK(dc_writer_create(g_obs_path, OBS_GENES, &w));
  EXPECT_OK(dc_writer_set(w, DC_WRITER_TILE_SIZE, OBS_TILE));
  EXPECT_OK(dc_writer_set(w, DC_WRITER_OBS_TILES_PER_FILE, 2)); /* 3 shards */
  int32_t order[OBS_GENES];
  for (int j = 0; j < OBS_GENES; j++)
    order[j] = OBS_GENES - 1 - j;
  EXPECT_OK(dc_writer_set_gene_order(w, order, OBS_GENES));

  /* counts: cell i has gene i % 20 with count 1 + i % 7, in two appends of other sizes
   * than the obs batches */
  int64_t indptr[OBS_CELLS + 1];
  int32_t idx[OBS_CELLS], val[OBS_CELLS];
  for (int i = 0; i <= OBS_CELLS; i++)
    indptr[i] = i;
  for (int i = 0; i < OBS_CELLS; i++)
    idx[i] = i % OBS_GENES, val[i] = 1 + i % 7;
  EXPECT_OK(dc_writer_append_csr(w, 128, indptr, idx, val));

  /* obs in batches of 100 (plain), 1 (plain), 150 (child offsets), 49 (struct offset) */
  const int64_t sizes[] = {100, 1, 150, 49};
  const int64_t pads[] = {0, 0, 2, 3};
  const int child_off[] = {0, 0, 1, 0};
  int64_t start = 0;
  for (int b = 0; b < 4; b++) {
    struct ArrowArray batch;
    struct ArrowSchema schema;
    make_obs_batch(start, sizes[b], pads[b], child_off[b], &batch, &schema);
    EXPECT_OK(append_obs_moved(w, &batch, &schema));
    start += sizes[b];
    if (b == 1) {
      /* refused batches leave the writer as it was: wrong columns, not a struct */
      struct ArrowArray bad;
      struct ArrowSchema bad_schema;
      make_one_column("l", "n_counts", 5, &bad, &bad_schema);
      EXPECT_ERR(append_obs_moved(w, &bad, &bad_schema), DC_ERR_INVALID_ARGUMENT, NULL);
      make_obs_batch(0, 5, 0, 0, &bad, &bad_schema);
      ((struct ArrowSchema *)((priv_t *)bad_schema.private_data)->kids[5])->format = "f"; /* score as float32 */
      EXPECT_ERR(append_obs_moved(w, &bad, &bad_schema), DC_ERR_INVALID_ARGUMENT, "score");
      make_obs_batch(0, 5, 0, 0, &bad, &bad_schema);
      bad_schema.format = "+l"; /* not a struct */
      EXPECT(append_obs_moved(w, &bad, &bad_schema), DC_ERR_INVALID_ARGUMENT);
    }
  }
  EXPECT_OK(dc_writer_append_csr(w, OBS_CELLS - 128, indptr + 128, idx + 128, val + 128));

  struct ArrowArray var;
  struct ArrowSchema var_schema;
  make_var_table(&var, &var_schema);
  EXPECT_OK(dc_writer_set_var_table(w, &var, &var_schema));
  CHECK(var.release == NULL);
  CHECK(var_schema.release != NULL);
  var_schema.release(&var_schema);

  EXPECT_OK(dc_writer_finish(w));

  g_context = "obs: calls after finish";
  struct ArrowArray late;
  struct ArrowSchema late_schema;
  make_obs_batch(0, 3, 0, 0, &late, &late_schema);
  EXPECT_ERR(append_obs_moved(w, &late, &late_schema), DC_ERR_STATE, NULL);
  make_var_table(&late, &late_schema);
  EXPECT_ERR(dc_writer_set_var_table(w, &late, &late_schema), DC_ERR_STATE, NULL);
  CHECK(late.release == NULL);
  late_schema.release(&late_schema);
  dc_writer_free(w);

  g_context = "obs: an unsupported column type is refused and named";
  char *other = tmp_path("obs_bad.dcds");
  EXPECT_OK(dc_writer_create(other, OBS_GENES, &w));
  struct ArrowArray bad;
  struct ArrowSchema bad_schema;
  make_one_column("tsu:UTC", "when", 4, &bad, &bad_schema); /* timestamp */
  EXPECT_ERR(append_obs_moved(w, &bad, &bad_schema), DC_ERR_INVALID_ARGUMENT, "when");
  make_one_column("tdD", "day", 4, &bad, &bad_schema); /* date32 (int32 data: 4 x 8 bytes given) */
  EXPECT_ERR(append_obs_moved(w, &bad, &bad_schema), DC_ERR_INVALID_ARGUMENT, "day");
  dc_writer_free(w); /* abandoned */
  CHECK(!path_exists(other));

  g_context = "obs: fewer obs rows than cells";
  EXPECT_OK(dc_writer_create(other, OBS_GENES, &w));
  EXPECT_OK(dc_writer_append_csr(w, 10, indptr, idx, val));
  make_obs_batch(0, 9, 0, 0, &bad, &bad_schema);
  EXPECT_OK(append_obs_moved(w, &bad, &bad_schema));
  dc_status s = dc_writer_finish(w);
  if (s == DC_OK)
    FAIL("dc_writer_finish accepted 9 obs rows for 10 cells");
  CHECK(dc_last_error()[0] != '\0');
  CHECK(contains_ci(dc_last_error(), "obs"));
  dc_writer_free(w);
  dc_dataset *ds = NULL;
  EXPECT(dc_dataset_open(other, &ds), DC_ERR_NOT_FOUND); /* nothing published */

  g_context = "obs: DC_WRITER_OBS_MAX_CATEGORIES";
  EXPECT_OK(dc_writer_create(other, OBS_GENES, &w));
  EXPECT_OK(dc_writer_set(w, DC_WRITER_TILE_SIZE, OBS_TILE));
  EXPECT_OK(dc_writer_set(w, DC_WRITER_OBS_MAX_CATEGORIES, 3)); /* cell_type has 5 values, batch 3 */
  EXPECT_OK(dc_writer_append_csr(w, OBS_CELLS, indptr, idx, val));
  make_obs_batch(0, 200, 0, 0, &bad, &bad_schema);
  EXPECT_OK(append_obs_moved(w, &bad, &bad_schema));
  EXPECT_ERR(dc_writer_set(w, DC_WRITER_OBS_MAX_CATEGORIES, 10), DC_ERR_STATE, NULL);
  make_obs_batch(200, 100, 0, 0, &bad, &bad_schema);
  EXPECT_OK(append_obs_moved(w, &bad, &bad_schema));
  EXPECT_OK(dc_writer_finish(w));
  dc_writer_free(w);
  EXPECT_OK(dc_dataset_open(other, &ds));
  char *cache = tmp_path("cache_maxcat");
  EXPECT_OK(dc_dataset_set_cache_dir(ds, cache));
  struct ArrowArrayStream stream;
  table_t t;
  EXPECT_OK(dc_dataset_obs(ds, NULL, 0, &stream));
  read_stream(&stream, &t);
  check_obs_schema(&t, OBS_NAMES, N_OBS_COLS, "cell_type"); /* stored as strings */
  check_obs_values(&t);
  table_free(&t);
  dc_dataset_free(ds);
  free(cache);
  free(other);
}

static void test_obs_read(void)
{
  g_context = "obs: read all columns";
  dc_dataset *ds = NULL;
  EXPECT_OK(dc_dataset_open(g_obs_path, &ds));
  char *cache = tmp_path("cache");
  EXPECT_OK(dc_dataset_set_cache_dir(ds, cache));
  dc_dataset_info info;
  EXPECT_OK(dc_dataset_info_get(ds, &info));
  CHECK_U64(info.n_cells, OBS_CELLS);
  CHECK_U64(info.has_obs, 1);
  CHECK_U64(info.has_var_table, 1);
  CHECK_U64(info.has_gene_order, 1);

  struct ArrowArrayStream stream;
  table_t t;
  for (int pass = 0; pass < 2; pass++) { /* the second reads the local column cache */
    memset(&stream, 0, sizeof stream);
    EXPECT_OK(dc_dataset_obs(ds, NULL, 0, &stream));
    read_stream(&stream, &t);
    check_obs_schema(&t, OBS_NAMES, N_OBS_COLS, NULL);
    check_obs_values(&t);
    table_free(&t);
  }
  CHECK(path_exists(cache));

  g_context = "obs: a selection";
  const char *sel[] = {"score", "cell_type", "barcode", "pct mito/%"};
  EXPECT_OK(dc_dataset_obs(ds, sel, 4, &stream));
  read_stream(&stream, &t);
  check_obs_schema(&t, sel, 4, NULL); /* in the requested order */
  check_obs_values(&t);
  table_free(&t);
  const char *one[] = {"flag"};
  EXPECT_OK(dc_dataset_obs(ds, one, 1, &stream));
  read_stream(&stream, &t);
  check_obs_schema(&t, one, 1, NULL);
  check_obs_values(&t);
  table_free(&t);
  /* NULL with 0 and a pointer with 0 both mean all columns */
  EXPECT_OK(dc_dataset_obs(ds, one, 0, &stream));
  read_stream(&stream, &t);
  CHECK_I64(t.n_cols, N_OBS_COLS);
  table_free(&t);

  g_context = "obs: errors";
  const char *unknown[] = {"score", "no such column"};
  memset(&stream, 0, sizeof stream);
  EXPECT_ERR(dc_dataset_obs(ds, unknown, 2, &stream), DC_ERR_NOT_FOUND, "no such column");
  CHECK(stream.release == NULL);
  const char *twice[] = {"score", "flag", "score"};
  EXPECT_ERR(dc_dataset_obs(ds, twice, 3, &stream), DC_ERR_INVALID_ARGUMENT, "score");
  const char *bad_utf8[] = {"sc\xffore"};
  EXPECT_ERR(dc_dataset_obs(ds, bad_utf8, 1, &stream), DC_ERR_INVALID_ARGUMENT, NULL);
  CHECK(stream.release == NULL);

  g_context = "var table";
  EXPECT_OK(dc_dataset_var_table(ds, &stream));
  read_stream(&stream, &t);
  CHECK_I64(t.n_rows, OBS_GENES);
  const col_t *ids = table_col(&t, "gene_ids"), *hv = table_col(&t, "highly_variable"), *mean = table_col(&t, "mean");
  CHECK(ids->kind == K_STR && hv->kind == K_BOOL && mean->kind == K_FLOAT);
  for (int j = 0; j < OBS_GENES; j++) { /* output order: gene order reversed the columns */
    int in = OBS_GENES - 1 - j;
    char want[16];
    snprintf(want, sizeof want, "ENSG%03d", in);
    CHECK_STR(ids->sv[j], want);
    CHECK(hv->iv[j] == (in % 3 == 1));
    CHECK(mean->fv[j] == (double)in / 4);
  }
  table_free(&t);

  g_context = "obs: streams outlive the handle";
  struct ArrowArrayStream s_all, s_sel, s_var;
  EXPECT_OK(dc_dataset_obs(ds, NULL, 0, &s_all));
  EXPECT_OK(dc_dataset_obs(ds, sel, 2, &s_sel));
  EXPECT_OK(dc_dataset_var_table(ds, &s_var));
  dc_dataset_free(ds);
  read_stream(&s_all, &t);
  check_obs_schema(&t, OBS_NAMES, N_OBS_COLS, NULL);
  check_obs_values(&t);
  table_free(&t);
  read_stream(&s_sel, &t);
  check_obs_schema(&t, sel, 2, NULL);
  check_obs_values(&t);
  table_free(&t);
  read_stream(&s_var, &t);
  CHECK_I64(t.n_rows, OBS_GENES);
  table_free(&t);

  g_context = "obs: a stream released unread";
  EXPECT_OK(dc_dataset_open(g_obs_path, &ds));
  EXPECT_OK(dc_dataset_set_cache_dir(ds, cache));
  EXPECT_OK(dc_dataset_obs(ds, NULL, 0, &stream));
  struct ArrowSchema sch;
  CHECK(stream.get_schema(&stream, &sch) == 0);
  sch.release(&sch);
  CHECK(sch.release == NULL);
  struct ArrowArray first;
  CHECK(stream.get_next(&stream, &first) == 0);
  CHECK(first.release != NULL && first.length == OBS_TILE);
  stream.release(&stream); /* the batch we hold stays valid */
  CHECK(stream.release == NULL);
  dc_dataset_free(ds);
  CHECK(first.n_children == N_OBS_COLS);
  CHECK(((const int64_t *)first.children[4]->buffers[1])[first.children[4]->offset + 5] == obs_n_counts(5));
  first.release(&first);
  CHECK(first.release == NULL);

  g_context = "obs: a cache directory that cannot be written is no error";
  char *blocker = tmp_path("not_a_dir");
  write_file(blocker, "x", 1);
  EXPECT_OK(dc_dataset_open(g_obs_path, &ds));
  EXPECT_OK(dc_dataset_set_cache_dir(ds, blocker));
  EXPECT_OK(dc_dataset_obs(ds, NULL, 0, &stream));
  read_stream(&stream, &t);
  check_obs_values(&t);
  table_free(&t);
  EXPECT_ERR(dc_dataset_set_cache_dir(ds, "bad\xff"), DC_ERR_INVALID_ARGUMENT, NULL);
  dc_dataset_free(ds);
  free(blocker);
  free(cache);
}

/* Every array we handed to the library was released by it exactly once (double releases
 * fail at once in release_array); every schema by us. */
static void check_all_released(void)
{
  g_context = "every array and schema we made was released once";
  CHECK(atomic_load(&g_arrays_made) > 0);
  CHECK_I64(atomic_load(&g_arrays_released), atomic_load(&g_arrays_made));
  CHECK_I64(atomic_load(&g_schemas_released), atomic_load(&g_schemas_made));
  for (size_t i = 0; i < g_n_privs; i++) {
    CHECK(g_privs[i]->released);
    free(g_privs[i]);
  }
  free(g_privs);
  g_privs = NULL;
  g_n_privs = 0;
}

/* ========================================================================================== */
/* (b) ChromData stores                                                                       */
/* ========================================================================================== */

/* Runs argv (execvp) and returns its exit status (-1 if it could not run). */
static int run_command(char *const argv[], int quiet)
{
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0)
    FAIL("fork: %s", strerror(errno));
  if (pid == 0) {
    if (quiet) {
      FILE *f = freopen("/dev/null", "w", stderr);
      (void)f;
    }
    FILE *o = freopen("/dev/null", "w", stdout);
    (void)o;
    execvp(argv[0], argv);
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      FAIL("waitpid: %s", strerror(errno));
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Writes the stores into <g_dir>/stores; returns its path, or NULL when skipped. */
static char *make_stores(void)
{
  g_context = "ChromData: writing the stores with " DC_MAKE_STORES_PY;
  const char *py = getenv("DELTACELLS_PYTHON");
  if (!py || !*py)
    py = "python3";
  char *check[] = {(char *)py, "-c",
                   "import pyarrow, pandas, numpy, zarr; assert int(zarr.__version__.split('.')[0]) >= 3",
                   NULL};
  if (run_command(check, 1) != 0) {
    const char *msg = "python3 with pyarrow, pandas, numpy and zarr>=3 is needed to write the ChromData "
                      "test stores (scripts/setup.sh installs them: python3 -m pip install 'zarr>=3' "
                      "pyarrow pandas numpy)";
    if (getenv("DELTACELLS_SKIP_PYTHON_TESTS")) {
      printf("SKIPPED part (b), ChromData (DELTACELLS_SKIP_PYTHON_TESTS): %s\n", msg);
      return NULL;
    }
    FAIL("%s; set DELTACELLS_SKIP_PYTHON_TESTS=1 to skip this part", msg);
  }
  char *out = tmp_path("stores");
  char *argv[] = {(char *)py, DC_MAKE_STORES_PY, out, NULL};
  int rc = run_command(argv, 0);
  if (rc != 0)
    FAIL("%s %s %s exited with %d", py, DC_MAKE_STORES_PY, out, rc);
  return out;
}

/* ---- the script's manifest.json (a few fields, found by text search) ---- */

static const char *g_manifest;

/* The integer / bool after "field": in the store entry whose "path" is `path`. */
static long long manifest_field(const char *path, const char *field)
{
  char *pat = xasprintf("\"path\": \"%s\"", path);
  const char *at = strstr(g_manifest, pat);
  if (!at)
    FAIL("manifest.json has no store %s", path);
  free(pat);
  char *fpat = xasprintf("\"%s\":", field);
  const char *f = strstr(at, fpat);
  if (!f)
    FAIL("manifest.json: no %s after store %s", field, path);
  f += strlen(fpat);
  free(fpat);
  while (*f == ' ' || *f == '\n')
    f++;
  if (strncmp(f, "true", 4) == 0)
    return 1;
  if (strncmp(f, "false", 5) == 0)
    return 0;
  return strtoll(f, NULL, 10);
}

/* ---- stream helpers ---- */

static void read_query(dc_status s, struct ArrowArrayStream *stream, table_t *t, const char *what)
{
  if (s != DC_OK)
    FAIL("%s: %s: %s", what, dc_status_name(s), dc_last_error());
  read_stream(stream, t);
}

/* The values of a one-column table as text, e.g. categories or keys. */
static char **column_texts(const table_t *t, const char *name, int64_t *n)
{
  CHECK_I64(t->n_cols, 1);
  const col_t *c = table_col(t, name);
  char **out = xmalloc((size_t)(c->n ? c->n : 1) * sizeof *out);
  char buf[64];
  for (int64_t i = 0; i < c->n; i++) {
    const char *v = value_text(c, i, buf);
    out[i] = xstrdup(v ? v : "(null)");
  }
  *n = c->n;
  return out;
}

static void free_texts(char **v, int64_t n)
{
  for (int64_t i = 0; i < n; i++)
    free(v[i]);
  free(v);
}

static int64_t index_of(char *const *v, int64_t n, const char *s)
{
  for (int64_t i = 0; i < n; i++)
    if (s && strcmp(v[i], s) == 0)
      return i;
  return -1;
}

/* ---- what the script writes (tests/chromdata/make_stores.py) ---- */

typedef struct {
  const char *name; /* main, nocell, sorted, nocoords, empty */
  int has_cell, has_coords, trace_int, cell_int, coords_f32;
} logical_t;

static const logical_t LOGICAL[] = {
    {"main", 1, 1, 0, 0, 0},     {"nocell", 0, 1, 1, 0, 1}, {"sorted", 1, 1, 0, 1, 0},
    {"nocoords", 1, 0, 0, 0, 0}, {"empty", 1, 1, 0, 0, 0},
};

/* The full schema (spec §15.1) of a store the script writes: names and formats. */
static int full_schema(const logical_t *L, const char **names, const char **formats)
{
  int n = 0;
#define COL(nm, f) (names[n] = (nm), formats[n++] = (f))
  COL("bin_id", "i");
  COL("trace_id", L->trace_int ? "l" : "u");
  if (L->has_cell)
    COL("cell_id", L->cell_int ? "l" : "u");
  if (L->has_coords) {
    const char *cf = L->coords_f32 ? "f" : "g";
    COL("x", cf);
    COL("y", cf);
    COL("z", cf);
  }
  COL("coord_status", "u");
  COL("spot_id", "l");
  COL("readout", "u");
  COL("probe", "u");
  if (L->has_cell)
    COL("fov", "i");
  COL("tlabel", "u");
  COL("odd name/col", "s");
  COL("spot_tracks/intensity", "g");
  COL("spot_tracks/flag", "b");
  COL("layers/raw/x", "g");
  COL("layers/raw/y", "g");
  COL("layers/raw/z", "g");
  COL("layers/drift corr/x", "f");
  COL("layers/drift corr/y", "f");
  COL("layers/drift corr/z", "f");
#undef COL
  return n;
}

static int is_key(const char *name) { return !strcmp(name, "bin_id") || !strcmp(name, "trace_id") || !strcmp(name, "cell_id"); }
static int is_coord(const char *name) { return !strcmp(name, "x") || !strcmp(name, "y") || !strcmp(name, "z"); }

/* ---- the state of one store under test ---- */

typedef struct {
  const char *path;     /* the store's name in the script's manifest */
  const char *fullpath; /* where it is */
  dc_chromdata *cd;
  const logical_t *L;
  int layout;
  int64_t n_spots;
  dc_chromdata_info info;
  table_t canon; /* read_spots, canonical order, all columns */
  table_t orig;  /* read_spots, original order */
  char **traces, **cells, **chroms;
  int64_t n_traces, n_cells, n_chroms;
  int64_t *row_of_input; /* canonical row of input row i */
  int64_t *cell_code, *trace_code, *chrom_code; /* per canonical row */
} store_t;

/* Row `r` of table `t` equals row `rc` of the canonical table in every column of `t`. */
static void check_row_eq(const store_t *S, const table_t *t, int64_t r, int64_t rc, const char *what)
{
  for (int64_t j = 0; j < t->n_cols; j++) {
    const col_t *c = &t->cols[j];
    const col_t *e = table_col(&S->canon, c->name);
    if (!value_eq(c, r, e, rc)) {
      char b1[64], b2[64];
      const char *v1 = value_text(c, r, b1), *v2 = value_text(e, rc, b2);
      FAIL("%s (%s): row %lld column %s is %s, the canonical row %lld has %s", what, S->path, (long long)r,
           c->name, v1 ? v1 : "null", (long long)rc, v2 ? v2 : "null");
    }
  }
}

/* The columns of `t` are exactly `names` (formats as in the full schema). */
static void check_columns(const store_t *S, const table_t *t, const char **names, int n, const char *what)
{
  if (t->n_cols != n)
    FAIL("%s (%s): %lld columns, expected %d", what, S->path, (long long)t->n_cols, n);
  for (int j = 0; j < n; j++) {
    if (strcmp(t->cols[j].name, names[j]) != 0)
      FAIL("%s (%s): column %d is \"%s\", expected \"%s\"", what, S->path, j, t->cols[j].name, names[j]);
    const col_t *e = table_col(&S->canon, names[j]);
    CHECK_STR(t->cols[j].format, e->format);
    CHECK(t->cols[j].dict_format == NULL); /* categoricals decoded */
  }
}

/* The column selection `sel` answers with these names: keys, then (coords) x, y, z, or the
 * requested names in full-schema order, duplicates and keys ignored. */
static int selected_names(const store_t *S, const char *const *sel, size_t n_sel, const char **out)
{
  int n = 0;
  for (int64_t j = 0; j < S->canon.n_cols; j++) {
    const char *name = S->canon.cols[j].name;
    int want = is_key(name);
    if (sel && n_sel == 1 && strcmp(sel[0], "coords") == 0)
      want = want || is_coord(name);
    else if (!sel || n_sel == 0)
      want = 1;
    else
      for (size_t k = 0; k < n_sel; k++)
        want = want || strcmp(sel[k], name) == 0;
    if (want)
      out[n++] = name;
  }
  return n;
}

/* `t` is the canonical rows selected by `pred` (in canonical order), with the columns of
 * selection `sel`. Returns the number of rows. */
typedef int (*row_pred)(const store_t *S, int64_t r, int64_t arg);
static int pred_trace(const store_t *S, int64_t r, int64_t code) { return S->trace_code[r] == code; }
static int pred_cell(const store_t *S, int64_t r, int64_t code) { return S->cell_code[r] == code; }
static int pred_chrom(const store_t *S, int64_t r, int64_t code) { return S->chrom_code[r] == code; }
static int pred_all(const store_t *S, int64_t r, int64_t code) { (void)S, (void)r, (void)code; return 1; }

static int64_t check_selection(const store_t *S, const table_t *t, row_pred pred, int64_t arg,
                               const char *const *sel, size_t n_sel, const char *what)
{
  const char *names[64];
  int n = selected_names(S, sel, n_sel, names);
  check_columns(S, t, names, n, what);
  int64_t k = 0;
  for (int64_t r = 0; r < S->canon.n_rows; r++) {
    if (!pred(S, r, arg))
      continue;
    if (k >= t->n_rows)
      FAIL("%s (%s): only %lld rows", what, S->path, (long long)t->n_rows);
    check_row_eq(S, t, k, r, what);
    k++;
  }
  if (k != t->n_rows)
    FAIL("%s (%s): %lld rows, expected %lld", what, S->path, (long long)t->n_rows, (long long)k);
  PASS();
  return k;
}

/* ---- one store ---- */

static int64_t distinct_tuples(int64_t *keys, int64_t n, int width);

static void load_store(store_t *S, dc_chromdata *cd)
{
  struct ArrowArrayStream st;
  table_t t;
  /* categories */
  read_query(dc_chromdata_categories(cd, "spots", "trace_id", &st), &st, &t, "categories trace_id");
  CHECK_STR(t.cols[0].format, S->L->trace_int ? "l" : "u");
  S->traces = column_texts(&t, "category", &S->n_traces);
  table_free(&t);
  read_query(dc_chromdata_categories(cd, "bins", "chrom", &st), &st, &t, "categories chrom");
  S->chroms = column_texts(&t, "category", &S->n_chroms);
  table_free(&t);
  if (S->L->has_cell) {
    read_query(dc_chromdata_categories(cd, "spots", "cell_id", &st), &st, &t, "categories cell_id");
    CHECK_STR(t.cols[0].format, S->L->cell_int ? "l" : "u");
    S->cells = column_texts(&t, "category", &S->n_cells);
    table_free(&t);
  } else {
    S->cells = NULL;
    S->n_cells = 0;
    memset(&st, 0, sizeof st);
    EXPECT_ERR(dc_chromdata_categories(cd, "spots", "cell_id", &st), DC_ERR_NOT_FOUND, NULL);
    CHECK(st.release == NULL);
  }
  /* bins: chrom of every bin_id (the bins table has one row per bin, in bin_id order) */
  table_t bins;
  read_query(dc_chromdata_table(cd, "bins", &st), &st, &bins, "table bins");
  const col_t *bchrom = table_col(&bins, "chrom");

  /* the whole spot table, both orders */
  read_query(dc_chromdata_read_spots(cd, 0, NULL, 0, &st), &st, &S->canon, "read_spots");
  read_query(dc_chromdata_read_spots(cd, 1, NULL, 0, &st), &st, &S->orig, "read_spots original");
  int64_t n = S->canon.n_rows;
  S->row_of_input = xmalloc((size_t)(n ? n : 1) * sizeof(int64_t));
  S->cell_code = xmalloc((size_t)(n ? n : 1) * sizeof(int64_t));
  S->trace_code = xmalloc((size_t)(n ? n : 1) * sizeof(int64_t));
  S->chrom_code = xmalloc((size_t)(n ? n : 1) * sizeof(int64_t));
  const col_t *sid = table_col(&S->canon, "spot_id");
  const col_t *tid = table_col(&S->canon, "trace_id");
  const col_t *cid = S->L->has_cell ? table_col(&S->canon, "cell_id") : NULL;
  const col_t *bid = table_col(&S->canon, "bin_id");
  char buf[64];
  for (int64_t i = 0; i < n; i++)
    S->row_of_input[i] = -1;
  for (int64_t r = 0; r < n; r++) {
    CHECK(sid->valid[r] && (sid->iv[r] - 1) % 3 == 0);
    int64_t in = (sid->iv[r] - 1) / 3; /* spot_id = 3 * input row + 1 */
    if (in < 0 || in >= n || S->row_of_input[in] != -1)
      FAIL("%s: spot_id %lld twice or out of range", S->path, (long long)sid->iv[r]);
    S->row_of_input[in] = r;
    S->trace_code[r] = index_of(S->traces, S->n_traces, value_text(tid, r, buf));
    S->cell_code[r] = cid ? index_of(S->cells, S->n_cells, value_text(cid, r, buf)) : -1;
    CHECK(S->trace_code[r] >= 0 && (!cid || S->cell_code[r] >= 0));
    CHECK(bid->valid[r] && bid->iv[r] >= 0 && bid->iv[r] < bins.n_rows);
    S->chrom_code[r] = index_of(S->chroms, S->n_chroms, bchrom->sv[bid->iv[r]]);
    CHECK(S->chrom_code[r] >= 0);
  }
  table_free(&bins);
}

static void free_store(store_t *S)
{
  table_free(&S->canon);
  table_free(&S->orig);
  free_texts(S->traces, S->n_traces);
  if (S->cells)
    free_texts(S->cells, S->n_cells);
  free_texts(S->chroms, S->n_chroms);
  free(S->row_of_input);
  free(S->cell_code);
  free(S->trace_code);
  free(S->chrom_code);
}

static int64_t g_tuple_width;
static int tuple_cmp(const void *a, const void *b)
{
  const int64_t *x = a, *y = b;
  for (int64_t k = 0; k < g_tuple_width; k++)
    if (x[k] != y[k])
      return x[k] < y[k] ? -1 : 1;
  return 0;
}

static int64_t distinct_tuples(int64_t *keys, int64_t n, int width)
{
  g_tuple_width = width;
  qsort(keys, (size_t)n, (size_t)width * sizeof(int64_t), tuple_cmp);
  int64_t d = 0;
  for (int64_t i = 0; i < n; i++)
    if (i == 0 || tuple_cmp(keys + (i - 1) * width, keys + i * width) != 0)
      d++;
  return d;
}

/* The rows of read_spots: content the script derives from the input row number, the
 * canonical order, and the original order. */
static void check_spots(store_t *S)
{
  int64_t n = S->n_spots;
  char buf[64];
  CHECK_I64(S->canon.n_rows, n);
  CHECK_I64(S->orig.n_rows, n);
  const char *names[64], *formats[64];
  int nf = full_schema(S->L, names, formats);
  if (S->canon.n_cols != nf)
    FAIL("%s: read_spots has %lld columns, the full schema %d", S->path, (long long)S->canon.n_cols, nf);
  for (int j = 0; j < nf; j++) {
    CHECK_STR(S->canon.cols[j].name, names[j]);
    CHECK_STR(S->canon.cols[j].format, formats[j]);
    CHECK(S->canon.cols[j].dict_format == NULL);
    CHECK(S->canon.cols[j].flags & ARROW_FLAG_NULLABLE); /* every field is nullable */
  }
  check_columns(S, &S->orig, names, nf, "read_spots original order");

  /* original order: input row i is row i, and equals canonical row row_of_input[i] */
  const col_t *osid = table_col(&S->orig, "spot_id");
  for (int64_t i = 0; i < n; i++) {
    if (osid->iv[i] != 3 * i + 1)
      FAIL("%s: read_spots(original_order=1) row %lld has spot_id %lld, expected %lld", S->path, (long long)i,
           (long long)osid->iv[i], (long long)(3 * i + 1));
    for (int64_t j = 0; j < S->orig.n_cols; j++)
      if (!value_eq(&S->orig.cols[j], i, &S->canon.cols[j], S->row_of_input[i]))
        FAIL("%s: original row %lld and canonical row %lld differ in %s", S->path, (long long)i,
             (long long)S->row_of_input[i], S->orig.cols[j].name);
  }
  PASS();

  /* values the script derives from the input row / codes */
  const col_t *x = S->L->has_coords ? table_col(&S->orig, "x") : NULL;
  const col_t *probe = table_col(&S->orig, "probe"), *bid = table_col(&S->orig, "bin_id");
  const col_t *tlabel = table_col(&S->orig, "tlabel");
  const col_t *fov = S->L->has_cell ? table_col(&S->orig, "fov") : NULL;
  const col_t *status = table_col(&S->orig, "coord_status");
  for (int64_t i = 0; i < n; i++) {
    int64_t r = S->row_of_input[i];
    if (x && (i % 7 == 0) != (x->valid[i] && isnan(x->fv[i])))
      FAIL("%s: x of input row %lld is %s; the script writes NaN on every 7th row", S->path, (long long)i,
           value_text(x, i, buf) ? value_text(x, i, buf) : "null");
    snprintf(buf, sizeof buf, "p%lld", (long long)bid->iv[i]);
    CHECK_STR(probe->sv[i], buf);
    CHECK_STR(tlabel->sv[i], S->trace_code[r] % 2 ? "odd" : "even");
    if (fov)
      CHECK_I64(fov->iv[i], S->cell_code[r] * 10 + 3);
    CHECK(!status->valid[i] || !strcmp(status->sv[i], "ok") || !strcmp(status->sv[i], "lowq") ||
          !strcmp(status->sv[i], "missing"));
  }

  /* canonical order: (cell, trace, chrom, bin_id), ties in input order */
  const col_t *cb = table_col(&S->canon, "bin_id"), *cs = table_col(&S->canon, "spot_id");
  for (int64_t r = 1; r < n; r++) {
    int64_t a[5] = {S->cell_code[r - 1], S->trace_code[r - 1], S->chrom_code[r - 1], cb->iv[r - 1], cs->iv[r - 1]};
    int64_t b[5] = {S->cell_code[r], S->trace_code[r], S->chrom_code[r], cb->iv[r], cs->iv[r]};
    g_tuple_width = 5;
    if (tuple_cmp(a, b) >= 0)
      FAIL("%s: read_spots rows %lld and %lld are not in canonical order", S->path, (long long)r - 1, (long long)r);
  }
  PASS();


  /* selections of read_spots, both orders */
  struct ArrowArrayStream st;
  table_t t;
  const char *coords[] = {"coords"};
  read_query(dc_chromdata_read_spots(S->cd, 0, coords, 1, &st), &st, &t, "read_spots coords");
  check_selection(S, &t, pred_all, 0, coords, 1, "read_spots coords");
  table_free(&t);
  const char *sel[] = {"probe", "odd name/col", "trace_id", "probe", "spot_tracks/intensity", "x"};
  size_t n_sel = S->L->has_coords ? 6 : 5;
  read_query(dc_chromdata_read_spots(S->cd, 0, sel, n_sel, &st), &st, &t, "read_spots list");
  check_selection(S, &t, pred_all, 0, sel, n_sel, "read_spots list");
  table_free(&t);
  read_query(dc_chromdata_read_spots(S->cd, 1, coords, 1, &st), &st, &t, "read_spots original coords");
  const char *names2[64];
  int n2 = selected_names(S, coords, 1, names2);
  check_columns(S, &t, names2, n2, "read_spots original coords");
  CHECK_I64(t.n_rows, n);
  for (int64_t i = 0; i < n; i++)
    check_row_eq(S, &t, i, S->row_of_input[i], "read_spots original coords");
  table_free(&t);
}

static int64_t expected_runs(const store_t *S, int cells_only)
{
  int64_t n = S->canon.n_rows;
  int64_t *keys = xmalloc((size_t)(n ? n : 1) * 3 * sizeof *keys);
  int width = 0;
  for (int64_t r = 0; r < n; r++) {
    int64_t *k = keys + r * 3;
    if (cells_only) { /* cell segments */
      k[0] = S->cell_code[r];
      k[1] = S->layout == DC_LAYOUT_PARTITIONED ? S->chrom_code[r] : 0;
      width = 2;
    } else { /* runs */
      k[0] = S->cell_code[r];
      k[1] = S->trace_code[r];
      k[2] = S->layout == DC_LAYOUT_FLAT ? 0 : S->chrom_code[r];
      width = 3;
    }
  }
  if (width == 2)
    for (int64_t r = 0; r < n; r++)
      keys[r * 2] = keys[r * 3], keys[r * 2 + 1] = keys[r * 3 + 1];
  int64_t d = distinct_tuples(keys, n, width ? width : 3);
  free(keys);
  return d;
}

static void check_info(store_t *S)
{
  dc_chromdata_info *I = &S->info;
  CHECK_U64(I->format_major, 2);
  CHECK_U64(I->format_minor, (uint64_t)S->layout);
  CHECK_I64(I->layout, S->layout);
  CHECK_U64(I->n_spots, S->n_spots);
  CHECK_U64(I->n_traces, S->n_traces);
  CHECK_U64(I->n_cells, S->n_cells);
  CHECK_U64(I->n_chroms, S->n_chroms);
  CHECK_U64(I->n_chroms, 3);
  CHECK_I64(I->has_coords, S->L->has_coords);
  CHECK_I64(I->has_cell_id, manifest_field(S->path, "has_cell_id"));
  CHECK_I64(I->has_cell_id, S->L->has_cell);
  CHECK_I64(I->coord_bits, S->L->has_coords ? (S->L->coords_f32 ? 32 : 64) : 0);
  CHECK_U64(I->n_runs, expected_runs(S, 0));
  /* the script packs row groups of at most T = 40 rows */
  CHECK(I->n_row_groups >= (uint64_t)(S->n_spots + 39) / 40);
  if (strcmp(S->L->name, "main") == 0 || strcmp(S->L->name, "nocell") == 0)
    CHECK_I64(I->has_source_row, 1); /* shuffled input */
  if (strcmp(S->L->name, "sorted") == 0 && S->layout != DC_LAYOUT_PARTITIONED)
    CHECK_I64(I->has_source_row, 0); /* input already in stored order */
}

/* get_trace / get_cell / get_chrom of every id: the canonical rows of that id. */
static void check_id_queries(store_t *S)
{
  struct ArrowArrayStream st;
  table_t t;
  const char *coords[] = {"coords"};
  const char *list[] = {"odd name/col", "spot_tracks/intensity", "tlabel", "trace_id", "tlabel", "x", "probe"};
  size_t n_list = S->L->has_coords ? 7 : 6;
  const char *list_nx[] = {"odd name/col", "spot_tracks/intensity", "tlabel", "trace_id", "tlabel", "probe"};
  const char *const *lst = S->L->has_coords ? list : list_nx;
  const char *list2[] = {"layers/drift corr/y", "readout"};
  const char *fov[] = {"fov"};
  struct {
    const char *const *cols;
    size_t n;
  } sels[] = {{NULL, 0}, {coords, 1}, {lst, n_list}, {list2, 2}, {fov, 1}};
  int n_sels = S->L->has_cell ? 5 : 4;

  int64_t total = 0;
  for (int64_t k = 0; k < S->n_traces; k++)
    for (int s = 0; s < (k < 2 ? n_sels : 1); s++) {
      read_query(dc_chromdata_get_trace(S->cd, S->traces[k], sels[s].cols, sels[s].n, &st), &st, &t, "get_trace");
      int64_t rows = check_selection(S, &t, pred_trace, k, sels[s].cols, sels[s].n, "get_trace");
      if (s == 0)
        total += rows;
      table_free(&t);
    }
  CHECK_I64(total, S->n_spots); /* every spot has one trace */

  total = 0;
  for (int64_t k = 0; k < S->n_cells; k++)
    for (int s = 0; s < (k == 0 ? n_sels : 1); s++) {
      read_query(dc_chromdata_get_cell(S->cd, S->cells[k], sels[s].cols, sels[s].n, &st), &st, &t, "get_cell");
      int64_t rows = check_selection(S, &t, pred_cell, k, sels[s].cols, sels[s].n, "get_cell");
      if (s == 0)
        total += rows;
      table_free(&t);
    }
  if (S->L->has_cell)
    CHECK_I64(total, S->n_spots);

  total = 0;
  for (int64_t k = 0; k < S->n_chroms; k++)
    for (int s = 0; s < n_sels; s++) {
      read_query(dc_chromdata_get_chrom(S->cd, S->chroms[k], sels[s].cols, sels[s].n, &st), &st, &t, "get_chrom");
      int64_t rows = check_selection(S, &t, pred_chrom, k, sels[s].cols, sels[s].n, "get_chrom");
      if (s == 0)
        total += rows;
      table_free(&t);
    }
  CHECK_I64(total, S->n_spots);
}

/* iter_traces / iter_cells: batches of whole runs / cell segments in stored order. */
static void check_iterators(store_t *S)
{
  struct ArrowArrayStream st;
  table_t t;
  int64_t n = S->n_spots;
  int64_t runs = expected_runs(S, 0), segs = S->L->has_cell ? expected_runs(S, 1) : 0;
  uint8_t *seen = xmalloc((size_t)(n ? n : 1));
  const char *coords[] = {"coords"};
  const char *fov[] = {"fov", "readout"};

  for (int cells = 0; cells < 2; cells++) {
    if (cells && !S->L->has_cell) {
      memset(&st, 0, sizeof st);
      EXPECT_ERR(dc_chromdata_iter_cells(S->cd, 1, NULL, 0, &st), DC_ERR_NOT_FOUND, NULL);
      CHECK(st.release == NULL);
      break;
    }
    int64_t units = cells ? segs : runs;
    const char *what = cells ? "iter_cells" : "iter_traces";
    const uint64_t batches[] = {1, 3, (uint64_t)1 << 40};
    for (int b = 0; b < 3; b++) {
      const char *const *cols = b == 1 ? (cells ? fov : coords) : NULL;
      size_t n_cols = b == 1 ? (cells ? 2 : 1) : 0;
      dc_status s = cells ? dc_chromdata_iter_cells(S->cd, batches[b], cols, n_cols, &st)
                          : dc_chromdata_iter_traces(S->cd, batches[b], cols, n_cols, &st);
      read_query(s, &st, &t, what);
      CHECK_I64(t.n_rows, n);
      const char *names[64];
      int nn = selected_names(S, cols, n_cols, names);
      check_columns(S, &t, names, nn, what);
      if (b == 0 && t.n_batches != units)
        FAIL("%s(1) on %s: %lld batches, expected one per %s: %lld", what, S->path, (long long)t.n_batches,
             cells ? "cell segment" : "run", (long long)units);
      if (b == 1 && t.n_batches != (units + 2) / 3)
        FAIL("%s(3) on %s: %lld batches for %lld %s", what, S->path, (long long)t.n_batches, (long long)units,
             cells ? "cell segments" : "runs");
      if (b == 2)
        CHECK(t.n_batches <= 1 || t.n_batches <= units);
      for (int64_t k = 0; k < t.n_batches; k++)
        CHECK(t.batch_len[k] > 0);
      if (cols == NULL) {
        /* every spot once, with the content of its canonical row; one run / segment per
         * batch for batch = 1 */
        memset(seen, 0, (size_t)(n ? n : 1));
        const col_t *sid = table_col(&t, "spot_id");
        int64_t row = 0;
        for (int64_t k = 0; k < t.n_batches; k++) {
          int64_t first = -1;
          for (int64_t i = 0; i < t.batch_len[k]; i++, row++) {
            int64_t in = (sid->iv[row] - 1) / 3;
            CHECK(in >= 0 && in < n && !seen[in]);
            seen[in] = 1;
            int64_t r = S->row_of_input[in];
            check_row_eq(S, &t, row, r, what);
            if (b == 0) {
              if (first < 0)
                first = r;
              int same = S->cell_code[r] == S->cell_code[first];
              if (!cells)
                same = same && S->trace_code[r] == S->trace_code[first];
              if (cells ? S->layout == DC_LAYOUT_PARTITIONED : S->layout != DC_LAYOUT_FLAT)
                same = same && S->chrom_code[r] == S->chrom_code[first];
              if (!same)
                FAIL("%s(1) on %s: batch %lld holds more than one %s", what, S->path, (long long)k,
                     cells ? "cell segment" : "run");
            }
          }
        }
        PASS();
      }
      table_free(&t);
    }
    memset(&st, 0, sizeof st);
    EXPECT_ERR(cells ? dc_chromdata_iter_cells(S->cd, 0, NULL, 0, &st) : dc_chromdata_iter_traces(S->cd, 0, NULL, 0, &st),
               DC_ERR_INVALID_ARGUMENT, NULL);
    CHECK(st.release == NULL);
  }
  free(seen);
}

/* Small tables, keys and categories: what the script writes. */
static void check_tables(store_t *S)
{
  struct ArrowArrayStream st;
  table_t t;
  int64_t n;
  char **v;

  static const struct {
    const char *kind;
    int n;
    const char *keys[6];
  } KEYS[] = {
      {"layers", 2, {"raw", "drift corr"}},
      {"intervals", 2, {"tads.arcfish", "my tads"}},
      {"points", 1, {"fiducials"}},
      {"cellm", 3, {"pca", "umap 2d", "count"}},
      {"binm", 3, {"loadings", "flag", "none"}},
      {"results", 6, {"tads.arcfish", "dist", "summary", "nothing", "fishnet.ensemble", "empty rows"}},
      {"uns", 2, {"_0", "_1"}},
      {"contacts", 3, {"hic", "schic", "gone"}},
      {"links", 1, {"rna"}},
  };
  for (size_t k = 0; k < sizeof KEYS / sizeof KEYS[0]; k++) {
    read_query(dc_chromdata_keys(S->cd, KEYS[k].kind, &st), &st, &t, KEYS[k].kind);
    CHECK_STR(t.cols[0].format, "u");
    v = column_texts(&t, "key", &n);
    if (n != KEYS[k].n)
      FAIL("%s: keys(%s) has %lld entries, expected %d", S->path, KEYS[k].kind, (long long)n, KEYS[k].n);
    for (int64_t i = 0; i < n; i++)
      CHECK_STR(v[i], KEYS[k].keys[i]);
    if (strcmp(KEYS[k].kind, "layers") == 0) /* each layer is in the full schema */
      for (int64_t i = 0; i < n; i++) {
        char *col = xasprintf("layers/%s/z", v[i]);
        CHECK(table_col_opt(&S->canon, col) != NULL);
        free(col);
      }
    if (strcmp(KEYS[k].kind, "intervals") == 0 || strcmp(KEYS[k].kind, "points") == 0)
      for (int64_t i = 0; i < n; i++) {
        char *name = xasprintf("%s/%s", KEYS[k].kind, v[i]);
        table_t it;
        read_query(dc_chromdata_table(S->cd, name, &st), &st, &it, name);
        CHECK(it.n_rows >= 1);
        table_col(&it, strcmp(KEYS[k].kind, "points") == 0 ? "x" : "start");
        if (strcmp(v[i], "tads.arcfish") == 0) {
          CHECK_I64(it.n_rows, 2);
          CHECK(table_col(&it, "score")->fv[1] == 1.5);
        }
        if (strcmp(v[i], "fiducials") == 0)
          CHECK_STR(table_col(&it, "label")->sv[1], "b");
        table_free(&it);
        free(name);
      }
    free_texts(v, n);
    table_free(&t);
  }

  /* bins: one row per bin; readout (a referenced column) is the bin's name */
  read_query(dc_chromdata_table(S->cd, "bins", &st), &st, &t, "bins");
  CHECK_U64(t.n_rows, S->info.n_bins);
  CHECK_I64(t.n_cols, 4);
  CHECK_STR(table_col(&t, "chrom")->format, "u");
  CHECK_STR(table_col(&t, "start")->format, "l");
  CHECK_STR(table_col(&t, "end")->format, "l");
  const col_t *bname = table_col(&t, "name");
  const col_t *readout = table_col(&S->canon, "readout"), *bid = table_col(&S->canon, "bin_id");
  for (int64_t r = 0; r < S->canon.n_rows; r++)
    CHECK_STR(readout->sv[r], bname->sv[bid->iv[r]]);
  table_free(&t);
  read_query(dc_chromdata_table(S->cd, "bin_tracks", &st), &st, &t, "bin_tracks");
  CHECK_U64(t.n_rows, S->info.n_bins);
  CHECK_STR(table_col(&t, "gc")->format, "g");
  CHECK_STR(table_col(&t, "mappable")->format, "b");
  table_free(&t);

  /* traces / cells tables list the categories in order */
  read_query(dc_chromdata_table(S->cd, "traces", &st), &st, &t, "traces");
  CHECK_I64(t.n_rows, S->n_traces);
  char buf[64];
  for (int64_t i = 0; i < t.n_rows; i++) {
    CHECK_STR(value_text(table_col(&t, "trace_id"), i, buf), S->traces[i]);
    CHECK_I64(table_col(&t, "length")->iv[i], i);
  }
  table_free(&t);
  if (S->L->has_cell) {
    read_query(dc_chromdata_table(S->cd, "cells", &st), &st, &t, "cells");
    CHECK_I64(t.n_rows, S->n_cells);
    for (int64_t i = 0; i < t.n_rows; i++)
      CHECK_STR(value_text(table_col(&t, "cell_id"), i, buf), S->cells[i]);
    CHECK_STR(table_col(&t, "area")->format, "g");
    table_free(&t);
  } else {
    memset(&st, 0, sizeof st);
    EXPECT_ERR(dc_chromdata_table(S->cd, "cells", &st), DC_ERR_NOT_FOUND, NULL);
    CHECK(st.release == NULL);
  }

  /* categories of the other coded columns */
  read_query(dc_chromdata_categories(S->cd, "spots", "coord_status", &st), &st, &t, "coord_status");
  v = column_texts(&t, "category", &n);
  CHECK_I64(n, 3);
  CHECK(!strcmp(v[0], "ok") && !strcmp(v[1], "lowq") && !strcmp(v[2], "missing"));
  free_texts(v, n);
  table_free(&t);
  read_query(dc_chromdata_categories(S->cd, "spots", "tlabel", &st), &st, &t, "tlabel");
  v = column_texts(&t, "category", &n);
  CHECK(n == 2 && !strcmp(v[0], "even") && !strcmp(v[1], "odd"));
  free_texts(v, n);
  table_free(&t);
  /* the trace categories include one without spots (written by the script) */
  const char *unused = S->L->trace_int ? "999" : "t_unused";
  CHECK(index_of(S->traces, S->n_traces, unused) == S->n_traces - 1);
  read_query(dc_chromdata_get_trace(S->cd, unused, NULL, 0, &st), &st, &t, "get_trace unused");
  CHECK_I64(t.n_rows, 0);
  CHECK_I64(t.n_cols, S->canon.n_cols); /* an empty table with the full schema */
  table_free(&t);
}

static void check_errors(store_t *S)
{
  struct ArrowArrayStream st;
  memset(&st, 0, sizeof st);
  dc_chromdata *cd = S->cd;
  const char *t0 = S->traces[0];

  /* unknown ids: not found, also an id of the other type */
  EXPECT_ERR(dc_chromdata_get_trace(cd, S->L->trace_int ? "123456" : "no_such_trace", NULL, 0, &st), DC_ERR_NOT_FOUND, NULL);
  EXPECT_ERR(dc_chromdata_get_trace(cd, S->L->trace_int ? "t0" : "5", NULL, 0, &st), DC_ERR_NOT_FOUND, NULL);
  EXPECT_ERR(dc_chromdata_get_trace(cd, "", NULL, 0, &st), DC_ERR_NOT_FOUND, NULL);
  EXPECT_ERR(dc_chromdata_get_chrom(cd, "chrX", NULL, 0, &st), DC_ERR_NOT_FOUND, "chrX");
  EXPECT_ERR(dc_chromdata_get_cell(cd, "no_such_cell", NULL, 0, &st), DC_ERR_NOT_FOUND, NULL);
  CHECK(st.release == NULL);
  /* unknown columns, named */
  const char *bad_col[] = {"probe", "no_such_column"};
  EXPECT_ERR(dc_chromdata_get_trace(cd, t0, bad_col, 2, &st), DC_ERR_NOT_FOUND, "no_such_column");
  EXPECT_ERR(dc_chromdata_get_chrom(cd, S->chroms[0], bad_col, 2, &st), DC_ERR_NOT_FOUND, "no_such_column");
  EXPECT_ERR(dc_chromdata_read_spots(cd, 1, bad_col, 2, &st), DC_ERR_NOT_FOUND, "no_such_column");
  EXPECT_ERR(dc_chromdata_iter_traces(cd, 4, bad_col, 2, &st), DC_ERR_NOT_FOUND, "no_such_column");
  if (S->L->has_cell) {
    EXPECT_ERR(dc_chromdata_get_cell(cd, S->cells[0], bad_col, 2, &st), DC_ERR_NOT_FOUND, "no_such_column");
    EXPECT_ERR(dc_chromdata_iter_cells(cd, 4, bad_col, 2, &st), DC_ERR_NOT_FOUND, "no_such_column");
  }
  if (!S->L->has_coords) {
    const char *x[] = {"x"};
    EXPECT_ERR(dc_chromdata_read_spots(cd, 0, x, 1, &st), DC_ERR_NOT_FOUND, NULL);
  }
  /* unknown tables, categories, kinds */
  EXPECT_ERR(dc_chromdata_table(cd, "intervals/nope", &st), DC_ERR_NOT_FOUND, NULL);
  EXPECT_ERR(dc_chromdata_table(cd, "points/nope", &st), DC_ERR_NOT_FOUND, NULL);
  EXPECT_ERR(dc_chromdata_table(cd, "nope", &st), DC_ERR_NOT_FOUND, NULL);
  EXPECT_ERR(dc_chromdata_categories(cd, "spots", "spot_id", &st), DC_ERR_NOT_FOUND, NULL);
  EXPECT_ERR(dc_chromdata_categories(cd, "nope", "trace_id", &st), DC_ERR_NOT_FOUND, NULL);
  dc_status s = dc_chromdata_keys(cd, "nope", &st);
  CHECK(s == DC_ERR_NOT_FOUND || s == DC_ERR_INVALID_ARGUMENT);
  CHECK(dc_last_error()[0] != '\0');
  CHECK(st.release == NULL);

  /* NULL arguments */
  dc_chromdata_info info;
  const char *with_null[] = {"probe", NULL};
  EXPECT_ERR(dc_chromdata_info_get(NULL, &info), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_info_get(cd, NULL), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_table(NULL, "bins", &st), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_table(cd, NULL, &st), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_table(cd, "bins", NULL), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_keys(NULL, "layers", &st), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_keys(cd, NULL, &st), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_keys(cd, "layers", NULL), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_categories(NULL, "spots", "trace_id", &st), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_categories(cd, NULL, "trace_id", &st), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_categories(cd, "spots", NULL, &st), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_categories(cd, "spots", "trace_id", NULL), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_get_trace(NULL, t0, NULL, 0, &st), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_get_trace(cd, NULL, NULL, 0, &st), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_get_trace(cd, t0, NULL, 0, NULL), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_get_trace(cd, t0, with_null, 2, &st), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_get_trace(cd, "bad\xff", NULL, 0, &st), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_get_cell(NULL, "c", NULL, 0, &st), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_get_cell(cd, NULL, NULL, 0, &st), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_get_chrom(NULL, "chr1", NULL, 0, &st), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_get_chrom(cd, NULL, NULL, 0, &st), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_get_chrom(cd, "chr1", NULL, 0, NULL), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_get_chrom(cd, "chr1", with_null, 2, &st), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_iter_traces(NULL, 1, NULL, 0, &st), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_iter_traces(cd, 1, NULL, 0, NULL), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_iter_traces(cd, 1, with_null, 2, &st), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_iter_cells(NULL, 1, NULL, 0, &st), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_read_spots(NULL, 0, NULL, 0, &st), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_read_spots(cd, 0, NULL, 0, NULL), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_read_spots(cd, 0, with_null, 2, &st), DC_ERR_INVALID_ARGUMENT, NULL);
  CHECK(st.release == NULL); /* no stream was written by any failing call */
  if (S->L->has_cell) {
    EXPECT_ERR(dc_chromdata_get_cell(cd, S->cells[0], NULL, 0, NULL), DC_ERR_INVALID_ARGUMENT, NULL);
    EXPECT_ERR(dc_chromdata_iter_cells(cd, 1, NULL, 0, NULL), DC_ERR_INVALID_ARGUMENT, NULL);
  }
}

/* Streams stay valid after dc_chromdata_free, also those read lazily. */
static void check_streams_outlive_handle(store_t *S)
{
  dc_chromdata *cd = NULL;
  EXPECT_OK(dc_chromdata_open(S->fullpath, &cd));
  struct ArrowArrayStream s_orig, s_trace, s_iter, s_cells, s_chrom;
  EXPECT_OK(dc_chromdata_read_spots(cd, 1, NULL, 0, &s_orig));
  EXPECT_OK(dc_chromdata_get_trace(cd, S->traces[0], NULL, 0, &s_trace));
  EXPECT_OK(dc_chromdata_iter_traces(cd, 2, NULL, 0, &s_iter));
  EXPECT_OK(dc_chromdata_get_chrom(cd, S->chroms[1], NULL, 0, &s_chrom));
  if (S->L->has_cell)
    EXPECT_OK(dc_chromdata_iter_cells(cd, 1, NULL, 0, &s_cells));
  /* take the first batch of one stream before the handle goes */
  struct ArrowSchema sch;
  CHECK(s_iter.get_schema(&s_iter, &sch) == 0);
  sch.release(&sch);
  dc_chromdata_free(cd);

  table_t t;
  read_stream(&s_orig, &t);
  CHECK_I64(t.n_rows, S->n_spots);
  for (int64_t i = 0; i < t.n_rows; i++)
    check_row_eq(S, &t, i, S->row_of_input[i], "read_spots after free");
  table_free(&t);
  read_stream(&s_trace, &t);
  check_selection(S, &t, pred_trace, 0, NULL, 0, "get_trace after free");
  table_free(&t);
  read_stream(&s_chrom, &t);
  check_selection(S, &t, pred_chrom, 1, NULL, 0, "get_chrom after free");
  table_free(&t);
  read_stream(&s_iter, &t);
  CHECK_I64(t.n_rows, S->n_spots);
  CHECK_I64(t.n_batches, (expected_runs(S, 0) + 1) / 2);
  table_free(&t);
  if (S->L->has_cell) {
    read_stream(&s_cells, &t);
    CHECK_I64(t.n_rows, S->n_spots);
    CHECK_I64(t.n_batches, expected_runs(S, 1));
    table_free(&t);
  }
}

/* ---- several threads on one handle ---- */

typedef struct {
  const store_t *S;
  int id;
} cd_worker_arg;

static void *chromdata_worker(void *p)
{
  cd_worker_arg *a = p;
  const store_t *S = a->S;
  for (int round = 0; round < 3; round++) {
    for (int64_t k = 0; k < S->n_traces; k++) {
      int64_t kk = (k + a->id) % S->n_traces;
      struct ArrowArrayStream st;
      table_t t;
      dc_status s = a->id % 2 ? dc_chromdata_get_trace(S->cd, S->traces[kk], NULL, 0, &st)
                              : dc_chromdata_get_chrom(S->cd, S->chroms[kk % S->n_chroms], NULL, 0, &st);
      read_query(s, &st, &t, "threads");
      int64_t want = 0;
      for (int64_t r = 0; r < S->canon.n_rows; r++)
        want += a->id % 2 ? S->trace_code[r] == kk : S->chrom_code[r] == kk % S->n_chroms;
      CHECK_I64(t.n_rows, want);
      table_free(&t);
    }
    struct ArrowArrayStream st;
    table_t t;
    read_query(dc_chromdata_iter_traces(S->cd, 1 + (uint64_t)a->id, NULL, 0, &st), &st, &t, "threads iter");
    CHECK_I64(t.n_rows, S->n_spots);
    table_free(&t);
  }
  return NULL;
}

static void check_threads(store_t *S)
{
  pthread_t th[4];
  cd_worker_arg args[4];
  for (int i = 0; i < 4; i++) {
    args[i].S = S;
    args[i].id = i;
    CHECK(pthread_create(&th[i], NULL, chromdata_worker, &args[i]) == 0);
  }
  for (int i = 0; i < 4; i++)
    CHECK(pthread_join(th[i], NULL) == 0);
}

static void test_store(const char *stores, const char *name)
{
  char *path = xasprintf("%s/%s", stores, name);
  store_t S;
  memset(&S, 0, sizeof S);
  S.path = name;
  S.fullpath = path;
  for (size_t k = 0; k < sizeof LOGICAL / sizeof LOGICAL[0]; k++)
    if (strncmp(name, LOGICAL[k].name, strlen(LOGICAL[k].name)) == 0 && name[strlen(LOGICAL[k].name)] == '_')
      S.L = &LOGICAL[k];
  CHECK(S.L != NULL);
  const char *u = strrchr(name, '_');
  S.layout = u[2] - '0'; /* _20, _21, _22 */
  CHECK(S.layout >= 0 && S.layout <= 2);
  S.n_spots = manifest_field(name, "n_spots");

  g_context = name;
  EXPECT_OK(dc_chromdata_open(path, &S.cd));
  CHECK(S.cd != NULL);
  EXPECT_OK(dc_chromdata_info_get(S.cd, &S.info));
  load_store(&S, S.cd);
  check_info(&S);
  check_spots(&S);
  check_id_queries(&S);
  check_iterators(&S);
  check_tables(&S);
  check_errors(&S);
  if (strcmp(name, "main_21.chromdata.zarr") == 0 || strcmp(name, "nocell_22.cdz") == 0)
    check_threads(&S);
  dc_chromdata_free(S.cd);
  S.cd = NULL;
  check_streams_outlive_handle(&S);
  free_store(&S);
  free(path);
}

/* Opening: every invalid store of the script with the error kind it lists, non-stores,
 * NULL arguments. */
static void test_open_errors(const char *stores)
{
  g_context = "dc_chromdata_open: invalid stores";
  const char *at = strstr(g_manifest, "\"invalid\":");
  CHECK(at != NULL);
  int n = 0;
  while ((at = strstr(at, "\"path\": \"")) != NULL) {
    at += strlen("\"path\": \"");
    const char *end = strchr(at, '"');
    char *name = xasprintf("%.*s", (int)(end - at), at);
    const char *e = strstr(end, "\"error\": \"");
    CHECK(e != NULL);
    e += strlen("\"error\": \"");
    dc_status want = strncmp(e, "NotFound", 8) == 0      ? DC_ERR_NOT_FOUND
                     : strncmp(e, "Format", 6) == 0      ? DC_ERR_FORMAT
                     : strncmp(e, "Unsupported", 11) == 0 ? DC_ERR_UNSUPPORTED
                                                          : -1;
    if (want < 0)
      FAIL("manifest.json: unknown error kind for %s", name);
    char *path = xasprintf("%s/%s", stores, name);
    dc_chromdata *cd = NULL;
    dc_status s = dc_chromdata_open(path, &cd);
    if (s != want)
      FAIL("dc_chromdata_open(%s) returned %s (%s), the script expects %s", name, dc_status_name(s),
           dc_last_error(), dc_status_name(want));
    CHECK(dc_last_error()[0] != '\0' && !strchr(dc_last_error(), '\n'));
    CHECK(cd == NULL);
    free(path);
    free(name);
    n++;
  }
  CHECK(n >= 50);

  g_context = "dc_chromdata_open: not a store";
  dc_chromdata *cd = NULL;
  char *missing = xasprintf("%s/no_such.chromdata.zarr", stores);
  EXPECT_ERR(dc_chromdata_open(missing, &cd), DC_ERR_NOT_FOUND, NULL);
  char *missing_cdz = xasprintf("%s/no_such.cdz", stores);
  EXPECT_ERR(dc_chromdata_open(missing_cdz, &cd), DC_ERR_NOT_FOUND, NULL);
  char *empty = xasprintf("%s/empty_dir.chromdata.zarr", stores);
  CHECK(mkdir(empty, 0755) == 0);
  EXPECT_ERR(dc_chromdata_open(empty, &cd), DC_ERR_NOT_FOUND, NULL);
  char *text = xasprintf("%s/manifest.json", stores);
  dc_status s = dc_chromdata_open(text, &cd); /* a JSON file */
  CHECK(s == DC_ERR_FORMAT || s == DC_ERR_NOT_FOUND || s == DC_ERR_UNSUPPORTED);
  CHECK(dc_last_error()[0] != '\0');
  char *fake = xasprintf("%s/fake.cdz", stores);
  write_file(fake, "PK\x03\x04 this is not a zip file", 28);
  EXPECT_ERR(dc_chromdata_open(fake, &cd), DC_ERR_FORMAT, NULL);
  EXPECT_ERR(dc_chromdata_open(g_obs_path, &cd), DC_ERR_NOT_FOUND, NULL); /* a deltacells dataset */
  CHECK(cd == NULL);
  EXPECT_ERR(dc_chromdata_open(NULL, &cd), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_open(missing, NULL), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_open("bad\xff.cdz", &cd), DC_ERR_INVALID_ARGUMENT, NULL);
  CHECK(cd == NULL);
  dc_chromdata_free(NULL); /* no-op */
  free(missing);
  free(missing_cdz);
  free(empty);
  free(text);
  free(fake);
}

/* A stream that fails while it is read: the spot file of a flat store is truncated after
 * the stream was made (the footer was read at open). get_next reports an error, and
 * get_last_error describes it; the stream is then released as usual. */
static void test_stream_error(const char *stores)
{
  g_context = "a stream that fails while it is read";
  char *path = xasprintf("%s/main_20.chromdata.zarr", stores);
  char *spots = xasprintf("%s/tables/spots.parquet", path);
  dc_chromdata *cd = NULL;
  EXPECT_OK(dc_chromdata_open(path, &cd));
  struct ArrowArrayStream st;
  EXPECT_OK(dc_chromdata_iter_traces(cd, 1, NULL, 0, &st));
  CHECK(truncate(spots, 64) == 0);
  struct ArrowSchema sch;
  CHECK(st.get_schema(&st, &sch) == 0);
  sch.release(&sch);
  int rc = 0;
  int64_t batches = 0;
  for (;;) {
    struct ArrowArray a;
    rc = st.get_next(&st, &a);
    if (rc != 0)
      break;
    if (a.release == NULL)
      break;
    a.release(&a);
    batches++;
  }
  if (rc == 0)
    FAIL("iter_traces read %lld batches from a truncated spot file without an error", (long long)batches);
  const char *msg = st.get_last_error(&st);
  CHECK(msg != NULL && msg[0] != '\0');
  st.release(&st);
  CHECK(st.release == NULL);
  /* a new query of the damaged file fails too: at the call, or while it is read */
  memset(&st, 0, sizeof st);
  dc_status s = dc_chromdata_read_spots(cd, 0, NULL, 0, &st);
  if (s == DC_OK) {
    CHECK(st.get_schema(&st, &sch) == 0);
    sch.release(&sch);
    struct ArrowArray a;
    while ((rc = st.get_next(&st, &a)) == 0 && a.release != NULL)
      a.release(&a);
    CHECK(rc != 0);
    CHECK(st.get_last_error(&st) != NULL && st.get_last_error(&st)[0] != '\0');
    st.release(&st);
  } else {
    CHECK(s == DC_ERR_FORMAT || s == DC_ERR_IO);
    CHECK(dc_last_error()[0] != '\0');
    CHECK(st.release == NULL);
  }
  dc_chromdata_free(cd);
  free(spots);
  free(path);
}

static void test_chromdata(void)
{
  char *stores = make_stores();
  if (!stores)
    return;
  char *mpath = xasprintf("%s/manifest.json", stores);
  char *manifest = read_file(mpath, NULL);
  g_manifest = manifest;

  const char *names[] = {"main", "nocell", "sorted", "nocoords", "empty"};
  int tested = 0;
  for (size_t d = 0; d < 5; d++)
    for (int layout = 0; layout < 3; layout++)
      for (int cdz = 0; cdz < 2; cdz++) {
        char *name = xasprintf("%s_2%d.%s", names[d], layout, cdz ? "cdz" : "chromdata.zarr");
        test_store(stores, name);
        free(name);
        tested++;
      }
  CHECK_I64(tested, 30);
  test_open_errors(stores);
  test_stream_error(stores);

  g_manifest = NULL;
  free(manifest);
  free(mpath);
  free(stores);
}

int main(void)
{
  CHECK(dc_abi_version() == DC_ABI_VERSION);
  g_dir = make_temp_dir("dc_test_arrow_streams");

  test_obs_write();
  test_obs_read();
  check_all_released();
  test_chromdata();

  remove_tree(g_dir);
  g_tmp_root = NULL;
  free(g_dir);
  free(g_obs_path);
  printf("test_arrow_streams: %lu passed, 0 failed\n", (unsigned long)atomic_load(&g_passed));
  return 0;
}
