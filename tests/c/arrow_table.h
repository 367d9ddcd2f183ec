/*
 * A consumer of the Arrow C stream interface written with the header's Arrow structs alone
 * (no Arrow library), for the C tests: drains a `struct ArrowArrayStream` of record batches
 * (struct arrays) into a small column table of plain C values, checking the Arrow rules on
 * the way (release callbacks set to NULL after release, children counts, formats), and
 * releases every schema, array and the stream exactly once.
 *
 * Supported formats: c s i l C S I L (integers), f g (floats), u U (strings), b (bool),
 * and dictionary arrays of those over any of them (decoded; the dictionary is kept).
 * Include after test_util.h.
 */
#ifndef DC_ARROW_TABLE_H
#define DC_ARROW_TABLE_H

#include <math.h>

enum { K_INT, K_FLOAT, K_STR, K_BOOL };

typedef struct {
  char *name;
  char *format;       /* the field's format (for a dictionary: the index type) */
  char *dict_format;  /* NULL, or the dictionary's value format */
  int64_t flags;
  int kind;           /* K_* of the (decoded) values */
  int64_t n, cap;
  uint8_t *valid;
  int64_t *iv;        /* K_INT, K_BOOL */
  double *fv;         /* K_FLOAT */
  char **sv;          /* K_STR */
  /* dictionary columns: the first batch's dictionary, and whether every batch had the
   * same one */
  int64_t dict_n;
  char **dict;
  int dict_same;
} col_t;

typedef struct {
  int64_t n_cols;
  col_t *cols;
  int64_t n_rows;
  int64_t n_batches;
  int64_t *batch_len;
  char *schema_format;
} table_t;

static inline int kind_of(const char *f)
{
  if (strlen(f) != 1)
    return -1;
  switch (f[0]) {
  case 'c': case 's': case 'i': case 'l': case 'C': case 'S': case 'I': case 'L':
    return K_INT;
  case 'f': case 'g':
    return K_FLOAT;
  case 'u': case 'U':
    return K_STR;
  case 'b':
    return K_BOOL;
  default:
    return -1;
  }
}

static inline int bit_at(const void *bits, int64_t i) { return (((const uint8_t *)bits)[i >> 3] >> (i & 7)) & 1; }

static inline int64_t int_at(const char *f, const void *data, int64_t i)
{
  switch (f[0]) {
  case 'c': return ((const int8_t *)data)[i];
  case 's': return ((const int16_t *)data)[i];
  case 'i': return ((const int32_t *)data)[i];
  case 'l': return ((const int64_t *)data)[i];
  case 'C': return ((const uint8_t *)data)[i];
  case 'S': return ((const uint16_t *)data)[i];
  case 'I': return ((const uint32_t *)data)[i];
  default:  return (int64_t)((const uint64_t *)data)[i];
  }
}

/* The string at index i (absolute, offset applied) of a u/U array, as a new heap string. */
static inline char *str_at(const char *f, const struct ArrowArray *a, int64_t i)
{
  int64_t lo, hi;
  if (f[0] == 'u')
    lo = ((const int32_t *)a->buffers[1])[i], hi = ((const int32_t *)a->buffers[1])[i + 1];
  else
    lo = ((const int64_t *)a->buffers[1])[i], hi = ((const int64_t *)a->buffers[1])[i + 1];
  if (lo < 0 || hi < lo)
    FAIL("bad string offsets %lld..%lld at %lld", (long long)lo, (long long)hi, (long long)i);
  char *s = xmalloc((size_t)(hi - lo) + 1);
  if (hi > lo)
    memcpy(s, (const char *)a->buffers[2] + lo, (size_t)(hi - lo));
  s[hi - lo] = '\0';
  return s;
}

static inline int valid_at(const struct ArrowArray *a, int64_t i)
{
  if (a->null_count == 0 || a->n_buffers == 0 || a->buffers[0] == NULL)
    return 1;
  return bit_at(a->buffers[0], i);
}

static inline void col_push(col_t *c, int valid, int64_t iv, double fv, char *sv)
{
  if (c->n == c->cap) {
    c->cap = c->cap ? 2 * c->cap : 64;
    c->valid = realloc(c->valid, (size_t)c->cap);
    c->iv = realloc(c->iv, (size_t)c->cap * sizeof *c->iv);
    c->fv = realloc(c->fv, (size_t)c->cap * sizeof *c->fv);
    c->sv = realloc(c->sv, (size_t)c->cap * sizeof *c->sv);
    if (!c->valid || !c->iv || !c->fv || !c->sv)
      FAIL("out of memory");
  }
  c->valid[c->n] = (uint8_t)valid;
  c->iv[c->n] = iv;
  c->fv[c->n] = fv;
  c->sv[c->n] = sv;
  c->n++;
}

/* Appends `len` values of child array `a` (schema `s`), starting at the struct's row
 * `parent_off` (a struct's offset applies to its children). */
static inline void col_append(col_t *c, const struct ArrowSchema *s, const struct ArrowArray *a,
                              int64_t parent_off, int64_t len)
{
  if (a->length < parent_off + len)
    FAIL("column %s: child length %lld < %lld", c->name, (long long)a->length, (long long)(parent_off + len));
  const char *f = s->format;
  int64_t base = parent_off + a->offset;
  if (s->dictionary) {
    const struct ArrowArray *d = a->dictionary;
    if (!d)
      FAIL("column %s: dictionary schema without a dictionary array", c->name);
    const char *df = s->dictionary->format;
    if (kind_of(f) != K_INT || kind_of(df) < 0 || kind_of(df) == K_BOOL)
      FAIL("column %s: unsupported dictionary %s over %s", c->name, f, df);
    if (a->n_buffers != 2 || d->n_buffers != (kind_of(df) == K_STR ? 3 : 2))
      FAIL("column %s: wrong buffer counts", c->name);
    /* the dictionary of this batch */
    char **vals = xmalloc((size_t)(d->length ? d->length : 1) * sizeof *vals);
    for (int64_t k = 0; k < d->length; k++) {
      if (kind_of(df) == K_STR)
        vals[k] = str_at(df, d, d->offset + k);
      else
        vals[k] = xasprintf("%lld", (long long)int_at(df, d->buffers[1], d->offset + k));
    }
    if (c->dict == NULL) {
      c->dict = vals;
      c->dict_n = d->length;
      c->dict_same = 1;
    } else {
      int same = c->dict_n == d->length;
      for (int64_t k = 0; same && k < d->length; k++)
        same = strcmp(c->dict[k], vals[k]) == 0;
      if (!same)
        c->dict_same = 0;
      for (int64_t k = 0; k < d->length; k++)
        free(vals[k]);
      free(vals);
    }
    for (int64_t i = 0; i < len; i++) {
      int v = valid_at(a, base + i);
      char *sv = NULL;
      int64_t iv = 0;
      double fv = 0;
      if (v) {
        int64_t key = int_at(f, a->buffers[1], base + i);
        if (key < 0 || key >= c->dict_n)
          FAIL("column %s: dictionary key %lld outside 0..%lld", c->name, (long long)key, (long long)c->dict_n);
        if (kind_of(df) == K_STR)
          sv = xstrdup(c->dict[key]);
        else if (kind_of(df) == K_INT)
          iv = strtoll(c->dict[key], NULL, 10);
        else
          fv = strtod(c->dict[key], NULL);
      }
      col_push(c, v, iv, fv, sv);
    }
    return;
  }
  int k = kind_of(f);
  if (k < 0)
    FAIL("column %s: unsupported format \"%s\"", c->name, f);
  if (a->n_buffers != (k == K_STR ? 3 : 2))
    FAIL("column %s (%s): %lld buffers", c->name, f, (long long)a->n_buffers);
  if (a->n_children != 0 || a->dictionary != NULL)
    FAIL("column %s: unexpected children or dictionary", c->name);
  if (a->null_count > 0 && a->buffers[0] == NULL)
    FAIL("column %s: %lld nulls but no validity buffer", c->name, (long long)a->null_count);
  for (int64_t i = 0; i < len; i++) {
    int v = valid_at(a, base + i);
    switch (k) {
    case K_INT:
      col_push(c, v, int_at(f, a->buffers[1], base + i), 0, NULL);
      break;
    case K_FLOAT:
      col_push(c, v, 0,
               f[0] == 'g' ? ((const double *)a->buffers[1])[base + i]
                           : (double)((const float *)a->buffers[1])[base + i],
               NULL);
      break;
    case K_STR:
      col_push(c, v, 0, 0, v ? str_at(f, a, base + i) : NULL);
      break;
    default:
      col_push(c, v, bit_at(a->buffers[1], base + i), 0, NULL);
      break;
    }
  }
}

/* Drains `stream` into `t` and releases everything, the stream included. */
static inline void read_stream(struct ArrowArrayStream *stream, table_t *t)
{
  memset(t, 0, sizeof *t);
  CHECK(stream->release != NULL);
  CHECK(stream->get_schema && stream->get_next && stream->get_last_error);
  struct ArrowSchema schema;
  memset(&schema, 0, sizeof schema);
  int rc = stream->get_schema(stream, &schema);
  if (rc != 0)
    FAIL("get_schema returned %d: %s", rc, stream->get_last_error(stream) ? stream->get_last_error(stream) : "(NULL)");
  CHECK(schema.release != NULL);
  t->schema_format = xstrdup(schema.format);
  CHECK_STR(schema.format, "+s");
  t->n_cols = schema.n_children;
  t->cols = xcalloc((size_t)schema.n_children, sizeof *t->cols);
  for (int64_t j = 0; j < schema.n_children; j++) {
    const struct ArrowSchema *cs = schema.children[j];
    col_t *c = &t->cols[j];
    c->name = xstrdup(cs->name ? cs->name : "");
    c->format = xstrdup(cs->format);
    c->flags = cs->flags;
    c->dict_format = cs->dictionary ? xstrdup(cs->dictionary->format) : NULL;
    c->kind = kind_of(cs->dictionary ? cs->dictionary->format : cs->format);
    if (c->kind < 0)
      FAIL("column %s: unsupported format \"%s\"", c->name, cs->format);
  }
  for (;;) {
    struct ArrowArray batch;
    memset(&batch, 0, sizeof batch);
    rc = stream->get_next(stream, &batch);
    if (rc != 0)
      FAIL("get_next returned %d: %s", rc, stream->get_last_error(stream) ? stream->get_last_error(stream) : "(NULL)");
    if (batch.release == NULL)
      break; /* end of stream */
    if (batch.n_children != t->n_cols)
      FAIL("batch %lld has %lld columns, the schema %lld", (long long)t->n_batches,
           (long long)batch.n_children, (long long)t->n_cols);
    CHECK(batch.null_count == 0 || batch.null_count == -1);
    for (int64_t j = 0; j < t->n_cols; j++)
      col_append(&t->cols[j], schema.children[j], batch.children[j], batch.offset, batch.length);
    t->batch_len = realloc(t->batch_len, (size_t)(t->n_batches + 1) * sizeof *t->batch_len);
    if (!t->batch_len)
      FAIL("out of memory");
    t->batch_len[t->n_batches++] = batch.length;
    t->n_rows += batch.length;
    batch.release(&batch);
    CHECK(batch.release == NULL); /* the release callback marks the struct released */
  }
  schema.release(&schema);
  CHECK(schema.release == NULL);
  stream->release(stream);
  CHECK(stream->release == NULL);
}

static inline void table_free(table_t *t)
{
  for (int64_t j = 0; j < t->n_cols; j++) {
    col_t *c = &t->cols[j];
    for (int64_t i = 0; i < c->n; i++)
      free(c->sv[i]);
    for (int64_t k = 0; k < c->dict_n; k++)
      free(c->dict[k]);
    free(c->dict);
    free(c->name);
    free(c->format);
    free(c->dict_format);
    free(c->valid);
    free(c->iv);
    free(c->fv);
    free(c->sv);
  }
  free(t->cols);
  free(t->batch_len);
  free(t->schema_format);
  memset(t, 0, sizeof *t);
}

static inline const col_t *table_col_opt(const table_t *t, const char *name)
{
  for (int64_t j = 0; j < t->n_cols; j++)
    if (strcmp(t->cols[j].name, name) == 0)
      return &t->cols[j];
  return NULL;
}

static inline const col_t *table_col(const table_t *t, const char *name)
{
  const col_t *c = table_col_opt(t, name);
  if (!c)
    FAIL("no column \"%s\" in the table", name);
  return c;
}

/* Two cells of columns of the same kind hold the same value (NaN equals NaN). */
static inline int value_eq(const col_t *a, int64_t i, const col_t *b, int64_t j)
{
  if (a->kind != b->kind || a->valid[i] != b->valid[j])
    return 0;
  if (!a->valid[i])
    return 1;
  switch (a->kind) {
  case K_FLOAT:
    return (isnan(a->fv[i]) && isnan(b->fv[j])) || a->fv[i] == b->fv[j];
  case K_STR:
    return strcmp(a->sv[i], b->sv[j]) == 0;
  default:
    return a->iv[i] == b->iv[j];
  }
}

/* The value as text (for ids and messages): NULL for a null. `buf` holds 64 bytes. */
static inline const char *value_text(const col_t *c, int64_t i, char *buf)
{
  if (!c->valid[i])
    return NULL;
  switch (c->kind) {
  case K_STR:
    return c->sv[i];
  case K_FLOAT:
    snprintf(buf, 64, "%.17g", c->fv[i]);
    return buf;
  case K_BOOL:
    return c->iv[i] ? "true" : "false";
  default:
    snprintf(buf, 64, "%lld", (long long)c->iv[i]);
    return buf;
  }
}

#endif /* DC_ARROW_TABLE_H */
