/* Everything a ChromData store holds, through the header alone (C API 1.1 §5.1, §6.1):
 * a store written with given category lists (non-lexical order, unused categories), a
 * traces table, cellm / binm arrays (1-D and 2-D), results (table, array, json, a mapping
 * with members), uns (an array over 64 elements), contacts (relative_path), intervals with
 * source_result — in every layout and as .cdz — read back with dc_chromdata_attrs /
 * dc_chromdata_array / dc_chromdata_result_table; dc_chromdata_rewrite between layouts;
 * every validation error with its status. Arrow data is built by hand (no Arrow library).
 * Runs under valgrind too (every struct released exactly once). */
#define _GNU_SOURCE
#define TEST_NAME "test_chromdata_content"
#include "test_util.h"
#include "arrow_table.h"

/* ---- Arrow C data built by hand --------------------------------------------------- */

typedef struct {
  void *mem[3];
} priv_t;

static void release_array(struct ArrowArray *a)
{
  for (int64_t i = 0; i < a->n_children; i++) {
    struct ArrowArray *c = a->children[i];
    if (c->release) c->release(c);
    free(c);
  }
  free(a->children);
  priv_t *p = a->private_data;
  for (int i = 0; i < 3; i++) free(p->mem[i]);
  free(p);
  free((void *)a->buffers);
  a->release = NULL;
}

static struct ArrowArray *new_array(int64_t length, int64_t n_buffers)
{
  struct ArrowArray *a = xcalloc(1, sizeof *a);
  a->length = length;
  a->n_buffers = n_buffers;
  a->buffers = xcalloc((size_t)n_buffers, sizeof(void *));
  a->private_data = xcalloc(1, sizeof(priv_t));
  a->release = release_array;
  return a;
}

static struct ArrowArray *prim_array(const void *v, int64_t n, size_t width)
{
  struct ArrowArray *a = new_array(n, 2);
  priv_t *p = a->private_data;
  p->mem[1] = xmalloc((size_t)n * width + 1);
  memcpy(p->mem[1], v, (size_t)n * width);
  a->buffers[1] = p->mem[1];
  return a;
}

static struct ArrowArray *utf8_array(const char *const *v, int64_t n)
{
  struct ArrowArray *a = new_array(n, 3);
  priv_t *p = a->private_data;
  int32_t *off = xmalloc((size_t)(n + 1) * sizeof *off);
  size_t total = 0;
  for (int64_t i = 0; i < n; i++) total += strlen(v[i]);
  char *data = xmalloc(total + 1);
  off[0] = 0;
  for (int64_t i = 0; i < n; i++) {
    size_t len = strlen(v[i]);
    memcpy(data + off[i], v[i], len);
    off[i + 1] = off[i] + (int32_t)len;
  }
  p->mem[1] = off;
  p->mem[2] = data;
  a->buffers[1] = off;
  a->buffers[2] = data;
  return a;
}

/* A fixed-size list of `k` over a child (moved in). */
static struct ArrowArray *fsl_array(struct ArrowArray *child, int64_t k)
{
  struct ArrowArray *a = new_array(child->length / k, 1);
  a->n_children = 1;
  a->children = xcalloc(1, sizeof(struct ArrowArray *));
  a->children[0] = child;
  return a;
}

/* A struct array (a record batch) over moved-in children, as a value in *out. */
static void batch_of(struct ArrowArray *out, int n_cols, struct ArrowArray **cols, int64_t n_rows)
{
  struct ArrowArray *a = new_array(n_rows, 1);
  a->n_children = n_cols;
  a->children = xcalloc((size_t)n_cols, sizeof(struct ArrowArray *));
  for (int i = 0; i < n_cols; i++) a->children[i] = cols[i];
  *out = *a;
  free(a);
}

/* Schemas: a tree of heap nodes with static format / name / metadata strings. */
static void release_schema(struct ArrowSchema *s)
{
  for (int64_t i = 0; i < s->n_children; i++) {
    struct ArrowSchema *c = s->children[i];
    if (c->release) c->release(c);
    free(c);
  }
  free(s->children);
  if (s->dictionary) {
    s->dictionary->release(s->dictionary);
    free(s->dictionary);
  }
  free((void *)s->metadata);
  s->release = NULL;
}

static struct ArrowSchema *leaf(const char *format, const char *name)
{
  struct ArrowSchema *s = xcalloc(1, sizeof *s);
  s->format = format;
  s->name = name;
  s->flags = ARROW_FLAG_NULLABLE;
  s->release = release_schema;
  return s;
}

static struct ArrowSchema *with_children(struct ArrowSchema *s, int n, struct ArrowSchema **c)
{
  s->n_children = n;
  s->children = xcalloc((size_t)n, sizeof *s->children);
  for (int i = 0; i < n; i++) s->children[i] = c[i];
  return s;
}

/* Arrow field metadata {"shape": shape}: int32 count, then (int32 len, bytes) pairs. */
static const char *shape_metadata(const char *shape)
{
  size_t kl = 5, vl = strlen(shape);
  char *m = xmalloc(4 + 4 + kl + 4 + vl);
  int32_t one = 1, k = (int32_t)kl, v = (int32_t)vl;
  memcpy(m, &one, 4);
  memcpy(m + 4, &k, 4);
  memcpy(m + 8, "shape", kl);
  memcpy(m + 8 + kl, &v, 4);
  memcpy(m + 12 + kl, shape, vl);
  return m;
}

/* The schema of a one-column record batch. */
static void one_column_schema(struct ArrowSchema *out, struct ArrowSchema *col)
{
  struct ArrowSchema *s = with_children(leaf("+s", ""), 1, &col);
  *out = *s;
  free(s);
}

/* ---- the logical data -------------------------------------------------------------- */

enum { N = 8 };
static const char *CHROM[N] = {"chr2", "chr1", "chr1", "chr2", "chr1", "chr1", "chr2", "chr1"};
static const int64_t START[N] = {0, 0, 100, 0, 100, 200, 100, 0};
static const char *TRACE[N] = {"t1", "t2", "t0", "t2", "t1", "t0", "t0", "t2"};
static const char *CELL[N] = {"cB", "cA", "cA", "cB", "cA", "cB", "cA", "cB"};
/* Given trace categories: not sorted, one unused. */
static const char *TRACE_CATS[4] = {"t2", "t0", "t1", "t_unused"};
enum { N_BINS = 5 }; /* distinct loci: chr1 0/100/200, chr2 0/100 */

static void spots(struct ArrowArray *b, struct ArrowSchema *s)
{
  int64_t end[N];
  double x[N];
  for (int i = 0; i < N; i++) {
    end[i] = START[i] + 100;
    x[i] = i * 1.5;
  }
  struct ArrowArray *c[5] = {utf8_array(CHROM, N), prim_array(START, N, 8), prim_array(end, N, 8),
                             utf8_array(TRACE, N), utf8_array(CELL, N)};
  batch_of(b, 5, c, N);
  struct ArrowSchema *f[5] = {leaf("u", "chrom"), leaf("l", "start"), leaf("l", "end"),
                              leaf("u", "trace_id"), leaf("u", "cell_id")};
  struct ArrowSchema *t = with_children(leaf("+s", ""), 5, f);
  *s = *t;
  free(t);
  (void)x;
}

/* (n, 3) float64 cellm as FixedSizeList<3>. */
static void matrix(struct ArrowArray *b, struct ArrowSchema *s, int64_t n, double base)
{
  double v[3 * 16];
  for (int64_t i = 0; i < 3 * n; i++) v[i] = base + (double)i;
  struct ArrowArray *col = fsl_array(prim_array(v, 3 * n, 8), 3);
  batch_of(b, 1, &col, n);
  struct ArrowSchema *item = leaf("g", "item");
  struct ArrowSchema *value = with_children(leaf("+w:3", "value"), 1, &item);
  one_column_schema(s, value);
}

static void int_vector(struct ArrowArray *b, struct ArrowSchema *s, int64_t n, const char *shape)
{
  int64_t v[128];
  for (int64_t i = 0; i < n; i++) v[i] = i * 10;
  struct ArrowArray *col = prim_array(v, n, 8);
  batch_of(b, 1, &col, n);
  struct ArrowSchema *value = leaf("l", "value");
  if (shape) value->metadata = shape_metadata(shape);
  one_column_schema(s, value);
}

static void utf8_values(struct ArrowArray *b, struct ArrowSchema *s, const char *const *v, int64_t n,
                        const char *name)
{
  struct ArrowArray *col = utf8_array(v, n);
  batch_of(b, 1, &col, n);
  one_column_schema(s, leaf("u", name));
}

static void traces_table(struct ArrowArray *b, struct ArrowSchema *s)
{
  static const char *ids[4] = {"t0", "t_unused", "t1", "t2"}; /* any order */
  int64_t len[4] = {100, 999, 101, 102};
  struct ArrowArray *c[2] = {utf8_array(ids, 4), prim_array(len, 4, 8)};
  batch_of(b, 2, c, 4);
  struct ArrowSchema *f[2] = {leaf("u", "trace_id"), leaf("l", "length")};
  struct ArrowSchema *t = with_children(leaf("+s", ""), 2, f);
  *s = *t;
  free(t);
}

static void domain_table(struct ArrowArray *b, struct ArrowSchema *s)
{
  static const char *chrom[2] = {"chr1", "chr2"};
  int64_t st[2] = {0, 0}, en[2] = {200, 100};
  struct ArrowArray *c[3] = {utf8_array(chrom, 2), prim_array(st, 2, 8), prim_array(en, 2, 8)};
  batch_of(b, 3, c, 2);
  struct ArrowSchema *f[3] = {leaf("u", "chrom"), leaf("l", "start"), leaf("l", "end")};
  struct ArrowSchema *t = with_children(leaf("+s", ""), 3, f);
  *s = *t;
  free(t);
}

/* ---- helpers ----------------------------------------------------------------------- */

static char *attrs(dc_chromdata *cd, const char *kind, const char *const *path, size_t n)
{
  uint8_t *json = NULL;
  size_t len = 0;
  EXPECT_OK(dc_chromdata_attrs(cd, kind, path, n, &json, &len));
  char *s = xmalloc(len + 1);
  memcpy(s, json, len);
  s[len] = '\0';
  dc_bytes_free(json, len);
  return s;
}

#define CHECK_HAS(hay, needle)                                                                 \
  do {                                                                                         \
    if (!strstr((hay), (needle)))                                                              \
      FAIL("\"%s\" does not contain \"%s\"", (hay), (needle));                                 \
    PASS();                                                                                    \
  } while (0)

/* Writes the store with every component; `dir` holds the linked contact file. */
static void write_all(const char *path, const char *dir, int64_t layout)
{
  dc_chromdata_writer *w = NULL;
  struct ArrowArray a;
  struct ArrowSchema s;
  EXPECT_OK(dc_chromdata_writer_create(path, &w));
  EXPECT_OK(dc_chromdata_writer_set(w, DC_CDW_LAYOUT, layout));
  EXPECT_OK(dc_chromdata_writer_set(w, DC_CDW_OVERWRITE, 1));
  utf8_values(&a, &s, TRACE_CATS, 4, "category");
  EXPECT_OK(dc_chromdata_writer_set_categories(w, "trace_id", &a, &s));
  s.release(&s);
  traces_table(&a, &s);
  EXPECT_OK(dc_chromdata_writer_set_table(w, "traces", &a, &s));
  s.release(&s);
  matrix(&a, &s, 2, 0.5);
  EXPECT_OK(dc_chromdata_writer_add_array(w, "cellm", "pca", &a, &s));
  s.release(&s);
  int_vector(&a, &s, N_BINS, "[5]");
  EXPECT_OK(dc_chromdata_writer_add_array(w, "binm", "rank k", &a, &s));
  s.release(&s);
  spots(&a, &s);
  EXPECT_OK(dc_chromdata_writer_append(w, &a, &s));
  CHECK(a.release == NULL); /* moved into the library */
  s.release(&s);
  const char *tads[1] = {"tads"};
  domain_table(&a, &s);
  EXPECT_OK(dc_chromdata_writer_add_result(w, tads, 1,
      "{\"type\":\"table\",\"kind\":\"tads\",\"params\":{\"w\":3},\"created_utc\":null}", &a, &s));
  s.release(&s);
  const char *m[1] = {"ens"}, *mv[2] = {"ens", "n"}, *ma[2] = {"ens", "mask/1"};
  EXPECT_OK(dc_chromdata_writer_add_result(w, m, 1, "{\"type\":\"mapping\",\"function\":\"f\"}", NULL, NULL));
  EXPECT_OK(dc_chromdata_writer_add_result(w, mv, 2, "{\"type\":\"json\",\"value\":[1,{\"__uchrom_type__\":\"float\",\"value\":\"nan\"}]}", NULL, NULL));
  matrix(&a, &s, 4, 10.0);
  EXPECT_OK(dc_chromdata_writer_add_result(w, ma, 2, "{\"type\":\"array\"}", &a, &s));
  s.release(&s);
  /* uns: a 70-element ndarray (over the 64-element rule) and a small one. */
  char uns[2048];
  int at = snprintf(uns, sizeof uns, "{\"a\":1,\"big\":{\"__uchrom_type__\":\"ndarray\",\"dtype\":\"<f8\",\"shape\":[70],\"data\":[");
  for (int i = 0; i < 70; i++) at += snprintf(uns + at, sizeof uns - (size_t)at, "%s%d.5", i ? "," : "", i);
  snprintf(uns + at, sizeof uns - (size_t)at, "]},\"small\":{\"__uchrom_type__\":\"ndarray\",\"dtype\":\"<i8\",\"shape\":[2],\"data\":[1,2]}}");
  EXPECT_OK(dc_chromdata_writer_set_json(w, "uns", NULL, uns));
  char *contacts = xasprintf("[{\"key\":\"hic\",\"path\":\"%s/linked/x.mcool\",\"format\":\"mcool\"},"
                             "{\"key\":\"far\",\"path\":\"/nowhere/y.hic\",\"format\":\"hic\"}]", dir);
  EXPECT_OK(dc_chromdata_writer_set_json(w, "contacts", NULL, contacts));
  free(contacts);
  EXPECT_OK(dc_chromdata_writer_set_json(w, "links", NULL, "[{\"key\":\"rna\",\"path\":\"rna.h5ad\",\"format\":\"h5ad\"}]"));
  domain_table(&a, &s);
  EXPECT_OK(dc_chromdata_writer_add_table(w, "intervals", "tads", "domain", &a, &s));
  s.release(&s);
  EXPECT_OK(dc_chromdata_writer_set_json(w, "intervals", "tads", "{\"source_result\":\"tads\"}"));
  EXPECT_OK(dc_chromdata_writer_finish(w));
  dc_chromdata_writer_free(w);
}

/* Reads everything back. */
static void check_all(const char *path, const char *dir)
{
  dc_chromdata *cd = NULL;
  struct ArrowArrayStream st;
  table_t t;
  EXPECT_OK(dc_chromdata_open(path, &cd));
  dc_chromdata_info info;
  EXPECT_OK(dc_chromdata_info_get(cd, &info));
  CHECK_U64(info.n_spots, N);
  CHECK_U64(info.n_traces, 4);
  CHECK_U64(info.n_cells, 2);
  CHECK_U64(info.n_bins, N_BINS);
  /* the given category list, order and unused category kept */
  EXPECT_OK(dc_chromdata_categories(cd, "spots", "trace_id", &st));
  read_stream(&st, &t);
  CHECK_I64(t.n_rows, 4);
  for (int i = 0; i < 4; i++) CHECK_STR(t.cols[0].sv[i], TRACE_CATS[i]);
  table_free(&t);
  /* traces rows in category order */
  EXPECT_OK(dc_chromdata_table(cd, "traces", &st));
  read_stream(&st, &t);
  CHECK_I64(t.n_rows, 4);
  CHECK_STR(t.cols[0].sv[0], "t2");
  CHECK_I64(table_col(&t, "length")->iv[0], 102);
  CHECK_I64(table_col(&t, "length")->iv[3], 999);
  table_free(&t);
  /* canonical order follows the given list: trace t2 (code 0) first within cA */
  EXPECT_OK(dc_chromdata_read_spots(cd, 0, NULL, 0, &st));
  read_stream(&st, &t);
  CHECK_STR(table_col(&t, "cell_id")->sv[0], "cA");
  CHECK_STR(table_col(&t, "trace_id")->sv[0], "t2");
  table_free(&t);
  char *j;
  const char *tads[1] = {"tads"}, *ens[1] = {"ens"}, *n[2] = {"ens", "n"}, *mask[2] = {"ens", "mask/1"};
  j = attrs(cd, "results", tads, 1);
  CHECK_STR(j, "{\"type\":\"table\",\"kind\":\"tads\",\"params\":{\"w\":3},\"created_utc\":null}");
  free(j);
  j = attrs(cd, "results", ens, 1);
  CHECK_STR(j, "{\"type\":\"mapping\",\"function\":\"f\",\"keys\":[\"n\",\"mask/1\"]}");
  free(j);
  j = attrs(cd, "results", n, 2);
  CHECK_HAS(j, "\"value\":[1,{\"__uchrom_type__\":\"float\",\"value\":\"nan\"}]");
  free(j);
  EXPECT_OK(dc_chromdata_result_table(cd, tads, 1, &st));
  read_stream(&st, &t);
  CHECK_I64(t.n_rows, 2);
  CHECK_I64(table_col(&t, "end")->iv[0], 200);
  table_free(&t);
  /* arrays: FixedSizeList<3> of float64 with the shape in the field metadata */
  EXPECT_OK(dc_chromdata_array(cd, "results", mask, 2, &st));
  struct ArrowSchema sch;
  struct ArrowArray arr;
  CHECK(st.get_schema(&st, &sch) == 0);
  CHECK_STR(sch.children[0]->format, "+w:3");
  CHECK(sch.children[0]->metadata != NULL);
  CHECK(memcmp(sch.children[0]->metadata + 12 + 5, "[4,3]", 5) == 0);
  CHECK(st.get_next(&st, &arr) == 0);
  CHECK_I64(arr.length, 4);
  const struct ArrowArray *item = arr.children[0]->children[0];
  CHECK(((const double *)item->buffers[1])[item->offset + 11] == 21.0);
  arr.release(&arr);
  sch.release(&sch);
  st.release(&st);
  j = attrs(cd, "cellm", (const char *const[]){"pca"}, 1);
  CHECK_STR(j, "{\"shape\":[2,3],\"dtype\":\"float64\"}");
  free(j);
  j = attrs(cd, "binm", (const char *const[]){"rank k"}, 1);
  CHECK_STR(j, "{\"shape\":[5],\"dtype\":\"int64\"}");
  free(j);
  /* uns: the big array became uns/_0 */
  j = attrs(cd, "uns", NULL, 0);
  CHECK_HAS(j, "\"big\":{\"__uchrom_type__\":\"array_ref\",\"path\":\"uns/_0\"}");
  CHECK_HAS(j, "\"small\":{\"__uchrom_type__\":\"ndarray\"");
  free(j);
  EXPECT_OK(dc_chromdata_array(cd, "uns", (const char *const[]){"_0"}, 1, &st));
  read_stream(&st, &t);
  CHECK_I64(t.n_rows, 70);
  CHECK(t.cols[0].fv[69] == 69.5);
  table_free(&t);
  /* contacts: relative_path added (the file sits beside the store), resolved */
  j = attrs(cd, "contacts", NULL, 0);
  CHECK_HAS(j, "\"relative_path\":\"linked/x.mcool\"");
  char *resolved = xasprintf("\"resolved_path\":\"%s/linked/x.mcool\"", dir);
  CHECK_HAS(j, resolved);
  free(resolved);
  CHECK_HAS(j, "\"resolved_path\":\"/nowhere/y.hic\"");
  free(j);
  j = attrs(cd, "intervals", tads, 1);
  CHECK_STR(j, "{\"kind\":\"domain\",\"source_result\":\"tads\"}");
  free(j);
  dc_chromdata_free(cd);
}

/* Every validation error of §6.1 with its status. */
static void check_errors(const char *dir)
{
  char *path = xasprintf("%s/bad.chromdata.zarr", dir);
  dc_chromdata_writer *w = NULL;
  struct ArrowArray a;
  struct ArrowSchema s;
  EXPECT_OK(dc_chromdata_writer_create(path, &w));
  /* a category list with a duplicate */
  static const char *dup[3] = {"t0", "t1", "t0"};
  utf8_values(&a, &s, dup, 3, "category");
  EXPECT_ERR(dc_chromdata_writer_set_categories(w, "trace_id", &a, &s), DC_ERR_INVALID_ARGUMENT, "t0");
  CHECK(a.release == NULL);
  s.release(&s);
  /* ids not among the categories */
  static const char *few[2] = {"t0", "t1"};
  utf8_values(&a, &s, few, 2, "category");
  EXPECT_OK(dc_chromdata_writer_set_categories(w, "trace_id", &a, &s));
  s.release(&s);
  spots(&a, &s);
  EXPECT_ERR(dc_chromdata_writer_append(w, &a, &s), DC_ERR_INVALID_ARGUMENT, "t2");
  s.release(&s);
  /* unknown kinds */
  matrix(&a, &s, 2, 0);
  EXPECT_ERR(dc_chromdata_writer_add_array(w, "obsm", "x", &a, &s), DC_ERR_INVALID_ARGUMENT, "obsm");
  s.release(&s);
  EXPECT_ERR(dc_chromdata_writer_set_json(w, "notes", NULL, "{}"), DC_ERR_INVALID_ARGUMENT, "notes");
  EXPECT_ERR(dc_chromdata_writer_set_table(w, "genes", NULL, NULL), DC_ERR_INVALID_ARGUMENT, "genes");
  EXPECT_ERR(dc_chromdata_writer_add_result(w, (const char *const[]){"r"}, 1, "{\"type\":\"frame\"}", NULL, NULL),
             DC_ERR_INVALID_ARGUMENT, "frame");
  /* bad JSON */
  EXPECT_ERR(dc_chromdata_writer_set_json(w, "uns", NULL, "{\"a\":"), DC_ERR_INVALID_ARGUMENT, "uns");
  EXPECT_ERR(dc_chromdata_writer_add_result(w, (const char *const[]){"r"}, 1, "{type:json}", NULL, NULL),
             DC_ERR_INVALID_ARGUMENT, NULL);
  /* a mapping member before its mapping */
  EXPECT_ERR(dc_chromdata_writer_add_result(w, (const char *const[]){"m", "x"}, 2,
                                            "{\"type\":\"json\",\"value\":1}", NULL, NULL),
             DC_ERR_NOT_FOUND, "mapping");
  /* duplicate keys */
  EXPECT_OK(dc_chromdata_writer_add_result(w, (const char *const[]){"m"}, 1, "{\"type\":\"mapping\"}", NULL, NULL));
  EXPECT_ERR(dc_chromdata_writer_add_result(w, (const char *const[]){"m"}, 1, "{\"type\":\"mapping\"}", NULL, NULL),
             DC_ERR_EXISTS, "m");
  matrix(&a, &s, 2, 0);
  EXPECT_OK(dc_chromdata_writer_add_array(w, "cellm", "pca", &a, &s));
  s.release(&s);
  matrix(&a, &s, 2, 0);
  EXPECT_ERR(dc_chromdata_writer_add_array(w, "cellm", "pca", &a, &s), DC_ERR_EXISTS, "pca");
  s.release(&s);
  EXPECT_ERR(dc_chromdata_writer_set_json(w, "contacts", NULL, "[{\"key\":\"a\",\"path\":\"p\"},{\"key\":\"a\",\"path\":\"q\"}]"),
             DC_ERR_EXISTS, "a");
  /* types Zarr cannot store */
  utf8_values(&a, &s, few, 2, "value");
  EXPECT_ERR(dc_chromdata_writer_add_array(w, "cellm", "names", &a, &s), DC_ERR_UNSUPPORTED, "names");
  s.release(&s);
  EXPECT_ERR(dc_chromdata_writer_set_json(w, "uns", NULL,
                                          "{\"s\":{\"__uchrom_type__\":\"ndarray\",\"dtype\":\"<U3\",\"shape\":[1],\"data\":[\"abc\"]}}"),
             DC_ERR_UNSUPPORTED, "<U3");
  /* source_result for intervals that were not added */
  EXPECT_ERR(dc_chromdata_writer_set_json(w, "intervals", "nope", "{\"source_result\":null}"), DC_ERR_NOT_FOUND, "nope");
  dc_chromdata_writer_free(w);

  /* a category list after the first append; wrong first dimensions at finish */
  w = NULL;
  EXPECT_OK(dc_chromdata_writer_create(path, &w));
  spots(&a, &s);
  EXPECT_OK(dc_chromdata_writer_append(w, &a, &s));
  s.release(&s);
  utf8_values(&a, &s, TRACE_CATS, 4, "category");
  EXPECT_ERR(dc_chromdata_writer_set_categories(w, "trace_id", &a, &s), DC_ERR_STATE, "append");
  CHECK(a.release == NULL);
  s.release(&s);
  int_vector(&a, &s, 3, NULL);
  EXPECT_OK(dc_chromdata_writer_add_array(w, "binm", "short", &a, &s));
  s.release(&s);
  EXPECT_ERR(dc_chromdata_writer_finish(w), DC_ERR_INVALID_ARGUMENT, "short");
  dc_chromdata_writer_free(w);
  CHECK(!path_exists(path));
  free(path);
}

int main(void)
{
  char *dir = make_temp_dir("dc_content");
  char *linked = xasprintf("%s/linked", dir);
  mkdir(linked, 0700);
  char *mcool = xasprintf("%s/x.mcool", linked);
  write_file(mcool, "", 0);
  static const struct {
    int64_t layout;
    const char *name;
  } L[] = {{DC_LAYOUT_FLAT, "flat.chromdata.zarr"},
           {DC_LAYOUT_PARTITIONED, "part.chromdata.zarr"},
           {DC_LAYOUT_PRIMARY_COORDS, "prim.chromdata.zarr"},
           {DC_LAYOUT_PRIMARY_COORDS, "prim.cdz"}};
  for (size_t i = 0; i < sizeof L / sizeof L[0]; i++) {
    char *p = xasprintf("%s/%s", dir, L[i].name);
    g_context = L[i].name;
    write_all(p, dir, L[i].layout);
    check_all(p, dir);
    free(p);
  }
  /* rewrite: 2.2 .cdz -> 2.0 directory -> 2.1 .cdz, everything kept */
  g_context = "rewrite";
  char *src = xasprintf("%s/prim.cdz", dir), *mid = xasprintf("%s/re20.chromdata.zarr", dir);
  char *out = xasprintf("%s/re21.cdz", dir);
  EXPECT_OK(dc_chromdata_rewrite(src, mid, DC_LAYOUT_FLAT, 0));
  check_all(mid, dir);
  EXPECT_OK(dc_chromdata_rewrite(mid, out, DC_LAYOUT_PARTITIONED, 0));
  check_all(out, dir);
  EXPECT_ERR(dc_chromdata_rewrite(src, out, DC_LAYOUT_FLAT, 0), DC_ERR_EXISTS, NULL);
  EXPECT_ERR(dc_chromdata_rewrite(src, src, DC_LAYOUT_FLAT, 1), DC_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_ERR(dc_chromdata_rewrite(src, out, 7, 1), DC_ERR_INVALID_ARGUMENT, "layout");
  EXPECT_ERR(dc_chromdata_rewrite(NULL, out, 0, 1), DC_ERR_INVALID_ARGUMENT, NULL);
  free(src);
  free(mid);
  free(out);
  g_context = "errors";
  check_errors(dir);
  remove_tree(dir);
  free(mcool);
  free(linked);
  printf(TEST_NAME ": %lu passed, 0 failed\n", (unsigned long)atomic_load(&g_passed));
  return 0;
}
