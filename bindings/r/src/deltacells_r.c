/*
 * deltacells_r.c -- the .Call shim between R and the libdeltacells C API.
 *
 * This file is the only code that calls the R API. It holds no logic of the formats: it
 * converts R objects to C arguments, calls one library function, and converts the results
 * (CSR buffers, Arrow C streams) to R objects.
 *
 * Error rule: an R error (a longjmp) is raised only when no library (Rust) frame is on the
 * stack: argument checks come before the library call, and a failing call's status and
 * message are copied after it returned (dcr_fail). Library resources that an R error or an
 * allocation failure could strand -- handles, Arrow streams and batches -- are held by
 * external pointers with finalizers, so the garbage collector releases them if a longjmp
 * skips the explicit release.
 *
 * Every entry point checks its arguments itself (type, length, NA / NaN, range, whole
 * numbers) even though the R functions check them first: a .Call reached with anything
 * must end in an R error, never in undefined behaviour.
 */
#define R_NO_REMAP
#include <R.h>
#include <R_ext/Rdynload.h>
#include <Rinternals.h>

#include <inttypes.h>
#include <stdarg.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deltacells.h"

static SEXP dcr_namespace = NULL;

/* Largest integer below which every integer is exactly a double (2^53). */
#define DCR_EXACT_DOUBLE 9007199254740992.0

/* Raises a "deltacells_error" condition (R function .dc_stop) with the status and the
 * message `msg` (a CHARSXP copied from dc_last_error() right after the failing call). */
static void dcr_raise(dc_status s, const char *function, SEXP msg)
{
  PROTECT(msg);
  SEXP status = PROTECT(Rf_ScalarInteger(s));
  SEXP name = PROTECT(Rf_mkString(dc_status_name(s)));
  SEXP text = PROTECT(Rf_ScalarString(msg));
  SEXP fn = PROTECT(Rf_mkString(function));
  SEXP call = PROTECT(Rf_lang5(Rf_install(".dc_stop"), status, name, text, fn));
  Rf_eval(call, dcr_namespace ? dcr_namespace : R_GlobalEnv);
  UNPROTECT(6); /* not reached: .dc_stop signals an error */
  Rf_error("%s: %s", function, dc_status_name(s));
}

/* Called only after the failing dc_ call returned: copies its message, then raises. */
static void dcr_fail(dc_status s, const char *function)
{
  dcr_raise(s, function, Rf_mkCharCE(dc_last_error(), CE_UTF8));
}

#define DCR_CHECK(call, name)                                                               \
  do {                                                                                      \
    dc_status dcr_s_ = (call);                                                              \
    if (dcr_s_ != DC_OK) dcr_fail(dcr_s_, name);                                            \
  } while (0)

/* An argument error (or another R-side error): formats the message, then signals it
 * through R function .dc_arg_stop, which names the user's call (not this shim's .Call) and
 * gives the condition the classes of DC_ERR_INVALID_ARGUMENT (or of the status named).
 * Never called with a library frame on the stack. */
static void dcr_verror(const char *status_name, const char *fmt, va_list ap)
{
  char text[1024];
  vsnprintf(text, sizeof text, fmt, ap);
  if (dcr_namespace) {
    SEXP msg = PROTECT(Rf_mkString(text));
    SEXP status = PROTECT(Rf_mkString(status_name));
    SEXP call = PROTECT(Rf_lang3(Rf_install(".dc_arg_stop"), msg, status));
    Rf_eval(call, dcr_namespace);
    UNPROTECT(3); /* not reached */
  }
  Rf_error("%s", text);
}

static void dcr_error(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  dcr_verror("DC_ERR_INVALID_ARGUMENT", fmt, ap);
  va_end(ap);
}

/* A value R cannot represent (class deltacells_unsupported). */
static void dcr_unsupported(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  dcr_verror("DC_ERR_UNSUPPORTED", fmt, ap);
  va_end(ap);
}

/* ---------------------------------------------------------------------------------------
 * Argument checks (R errors, raised before any library call)
 * ------------------------------------------------------------------------------------- */

/* A single number (integer, double or logical), not NA / NaN / infinite, whole, within
 * [lo, hi] (both exactly representable as doubles). */
static double whole_arg(SEXP x, const char *what, double lo, double hi)
{
  if ((TYPEOF(x) != INTSXP && TYPEOF(x) != REALSXP && TYPEOF(x) != LGLSXP) || XLENGTH(x) != 1)
    dcr_error("'%s' must be a single number", what);
  double v;
  if (TYPEOF(x) == REALSXP) {
    v = REAL(x)[0];
    if (ISNAN(v)) dcr_error("'%s' must not be NA or NaN", what);
  } else {
    int i = TYPEOF(x) == INTSXP ? INTEGER(x)[0] : LOGICAL(x)[0];
    if (i == NA_INTEGER) dcr_error("'%s' must not be NA", what);
    v = i;
  }
  if (!R_FINITE(v) || v != floor(v)) dcr_error("'%s' must be a whole number (got %g)", what, v);
  if (v < lo || v > hi) dcr_error("'%s' must be between %.0f and %.0f (got %.0f)", what, lo, hi, v);
  return v;
}

static int64_t int64_arg(SEXP x, const char *what, double lo, double hi)
{
  return (int64_t)whole_arg(x, what, lo, hi); /* exact: |v| <= 2^53 */
}

static int flag_arg(SEXP x, const char *what)
{
  if (TYPEOF(x) != LGLSXP || XLENGTH(x) != 1 || LOGICAL(x)[0] == NA_LOGICAL)
    dcr_error("'%s' must be TRUE or FALSE", what);
  return LOGICAL(x)[0];
}

static void batches_finalizer(SEXP p)
{
  dc_batches_free((dc_batches *)R_ExternalPtrAddr(p));
  R_ClearExternalPtr(p);
}

static void *handle(SEXP p, const char *tag)
{
  if (TYPEOF(p) != EXTPTRSXP || R_ExternalPtrTag(p) != Rf_install(tag))
    dcr_error("expected a %s handle", tag);
  void *h = R_ExternalPtrAddr(p);
  if (!h) dcr_error("the %s handle was closed", tag);
  return h;
}

static const char *string_arg(SEXP s, const char *what)
{
  if (TYPEOF(s) != STRSXP || XLENGTH(s) != 1 || STRING_ELT(s, 0) == NA_STRING)
    dcr_error("'%s' must be a single string (not NA)", what);
  return Rf_translateCharUTF8(STRING_ELT(s, 0));
}

/* A character vector (or NULL) as a C array of UTF-8 strings (R_alloc: freed by R). */
static const char *const *strings_arg(SEXP s, size_t *n, const char *what)
{
  *n = 0;
  if (Rf_isNull(s)) return NULL;
  if (TYPEOF(s) != STRSXP) dcr_error("'%s' must be a character vector or NULL", what);
  *n = (size_t)XLENGTH(s);
  if (*n == 0) return NULL;
  const char **out = (const char **)R_alloc(*n, sizeof *out);
  for (size_t i = 0; i < *n; i++) {
    if (STRING_ELT(s, i) == NA_STRING) dcr_error("'%s' must not contain NA", what);
    out[i] = Rf_translateCharUTF8(STRING_ELT(s, i));
  }
  return out;
}

/* How 64-bit integer columns become R vectors: 0 = double, refusing a value a double
 * cannot hold exactly; 1 = character (decimal text, exact). */
static int int64_mode_arg(SEXP x)
{
  return (int)int64_arg(x, "int64", 0, 1);
}

/* Writer / dataset parameters: list(codes = integer, values = double), checked pairwise. */
typedef struct {
  R_xlen_t n;
  const int *codes;
  const double *values;
} params_arg;

static params_arg params_of(SEXP params)
{
  params_arg out = {0, NULL, NULL};
  if (TYPEOF(params) != VECSXP || XLENGTH(params) != 2)
    dcr_error("'params' must be list(codes = integer, values = double)");
  SEXP codes = VECTOR_ELT(params, 0), values = VECTOR_ELT(params, 1);
  if (TYPEOF(codes) != INTSXP || TYPEOF(values) != REALSXP || XLENGTH(codes) != XLENGTH(values))
    dcr_error("'params' must be list(codes = integer, values = double) of equal lengths");
  for (R_xlen_t k = 0; k < XLENGTH(codes); k++) {
    double v = REAL(values)[k];
    if (INTEGER(codes)[k] == NA_INTEGER || ISNAN(v) || !R_FINITE(v) || v != floor(v) ||
        fabs(v) > DCR_EXACT_DOUBLE)
      dcr_error("parameter %ld: %g is not a whole number", (long)k + 1, v);
  }
  out.n = XLENGTH(codes);
  out.codes = INTEGER(codes);
  out.values = REAL(values);
  return out;
}

/* ---------------------------------------------------------------------------------------
 * Handles as external pointers
 * ------------------------------------------------------------------------------------- */

static void dataset_finalizer(SEXP p)
{
  dc_dataset_free((dc_dataset *)R_ExternalPtrAddr(p));
  R_ClearExternalPtr(p);
}

static void chromdata_finalizer(SEXP p)
{
  dc_chromdata_free((dc_chromdata *)R_ExternalPtrAddr(p));
  R_ClearExternalPtr(p);
}

static void writer_finalizer(SEXP p)
{
  dc_writer_free((dc_writer *)R_ExternalPtrAddr(p));
  R_ClearExternalPtr(p);
}

static void cd_writer_finalizer(SEXP p)
{
  dc_chromdata_writer_free((dc_chromdata_writer *)R_ExternalPtrAddr(p));
  R_ClearExternalPtr(p);
}

static SEXP dcr_open(SEXP path, SEXP options)
{
  const char *cpath = string_arg(path, "path");
  size_t n_options = 0;
  const char *const *opts = strings_arg(options, &n_options, "options");
  dc_dataset *ds = NULL;
  DCR_CHECK(dc_dataset_open_opts(cpath, opts, n_options, &ds), "dc_dataset_open_opts");
  SEXP p = PROTECT(R_MakeExternalPtr(ds, Rf_install("deltacells_dataset"), R_NilValue));
  R_RegisterCFinalizerEx(p, dataset_finalizer, TRUE);
  UNPROTECT(1);
  return p;
}

static void arrow_holder_finalizer(SEXP p); /* Arrow streams, below */

static SEXP dcr_close(SEXP p)
{
  if (TYPEOF(p) == EXTPTRSXP) {
    SEXP tag = R_ExternalPtrTag(p);
    if (tag == Rf_install("deltacells_dataset")) dataset_finalizer(p);
    else if (tag == Rf_install("deltacells_batches")) batches_finalizer(p);
    else if (tag == Rf_install("deltacells_chromdata")) chromdata_finalizer(p);
    else if (tag == Rf_install("deltacells_stream")) arrow_holder_finalizer(p);
  }
  return R_NilValue;
}

static SEXP named_list(int n, const char **names)
{
  SEXP out = PROTECT(Rf_allocVector(VECSXP, n));
  SEXP nm = PROTECT(Rf_allocVector(STRSXP, n));
  for (int i = 0; i < n; i++) SET_STRING_ELT(nm, i, Rf_mkChar(names[i]));
  Rf_setAttrib(out, R_NamesSymbol, nm);
  UNPROTECT(2);
  return out;
}

static SEXP dcr_info(SEXP p)
{
  dc_dataset_info info;
  DCR_CHECK(dc_dataset_info_get((dc_dataset *)handle(p, "deltacells_dataset"), &info),
            "dc_dataset_info_get");
  const char *names[] = {"n_cells", "n_genes", "version", "n_tiles", "tile_size", "nnz",
                         "has_gene_order", "has_var_names", "has_var_table", "has_obs"};
  SEXP out = PROTECT(named_list(10, names));
  SET_VECTOR_ELT(out, 0, Rf_ScalarReal((double)info.n_cells));
  SET_VECTOR_ELT(out, 1, Rf_ScalarReal((double)info.n_genes));
  SET_VECTOR_ELT(out, 2, Rf_ScalarInteger((int)info.version));
  SET_VECTOR_ELT(out, 3, Rf_ScalarReal((double)info.n_tiles));
  SET_VECTOR_ELT(out, 4, Rf_ScalarReal((double)info.tile_size));
  SET_VECTOR_ELT(out, 5, Rf_ScalarReal((double)info.nnz));
  SET_VECTOR_ELT(out, 6, Rf_ScalarLogical(info.has_gene_order != 0));
  SET_VECTOR_ELT(out, 7, Rf_ScalarLogical(info.has_var_names != 0));
  SET_VECTOR_ELT(out, 8, Rf_ScalarLogical(info.has_var_table != 0));
  SET_VECTOR_ELT(out, 9, Rf_ScalarLogical(info.has_obs != 0));
  UNPROTECT(1);
  return out;
}

static SEXP dcr_set(SEXP p, SEXP param, SEXP value)
{
  dc_dataset *ds = (dc_dataset *)handle(p, "deltacells_dataset");
  int code = (int)int64_arg(param, "param", 0, INT32_MAX);
  int64_t v = int64_arg(value, "value", -DCR_EXACT_DOUBLE, DCR_EXACT_DOUBLE);
  DCR_CHECK(dc_dataset_set(ds, code, v), "dc_dataset_set");
  return R_NilValue;
}

static SEXP dcr_genes(SEXP p)
{
  dc_dataset *ds = (dc_dataset *)handle(p, "deltacells_dataset");
  dc_dataset_info info;
  DCR_CHECK(dc_dataset_info_get(ds, &info), "dc_dataset_info_get");
  SEXP out = PROTECT(Rf_allocVector(STRSXP, info.n_genes));
  for (uint32_t g = 0; g < info.n_genes; g++) {
    const char *name = NULL;
    DCR_CHECK(dc_dataset_var_name(ds, g, &name), "dc_dataset_var_name");
    SET_STRING_ELT(out, g, Rf_mkCharCE(name, CE_UTF8));
  }
  UNPROTECT(1);
  return out;
}

static SEXP dcr_gene_order(SEXP p)
{
  dc_dataset *ds = (dc_dataset *)handle(p, "deltacells_dataset");
  dc_dataset_info info;
  DCR_CHECK(dc_dataset_info_get(ds, &info), "dc_dataset_info_get");
  SEXP out = PROTECT(Rf_allocVector(INTSXP, info.n_genes));
  DCR_CHECK(dc_dataset_gene_order(ds, INTEGER(out), info.n_genes), "dc_dataset_gene_order");
  UNPROTECT(1);
  return out;
}

/* Cells, 1-based (integer or double vector of whole numbers >= 1, no NA), as 0-based
 * uint64 (R_alloc). */
static uint64_t *cells_arg(SEXP cells, R_xlen_t *n_out)
{
  if (TYPEOF(cells) != REALSXP && TYPEOF(cells) != INTSXP)
    dcr_error("'cells' must be a numeric vector of 1-based cell numbers");
  R_xlen_t n = XLENGTH(cells);
  uint64_t *c = (uint64_t *)R_alloc(n ? n : 1, sizeof *c);
  for (R_xlen_t k = 0; k < n; k++) {
    double v;
    if (TYPEOF(cells) == INTSXP) {
      v = INTEGER(cells)[k] == NA_INTEGER ? NAN : INTEGER(cells)[k];
    } else {
      v = REAL(cells)[k];
    }
    if (ISNAN(v) || !(v >= 1) || v > DCR_EXACT_DOUBLE || v != floor(v))
      dcr_error("cells[%ld] is not a 1-based cell number (a whole number >= 1)", (long)k + 1);
    c[k] = (uint64_t)v - 1;
  }
  *n_out = n;
  return c;
}

/* list(p, i, x), the CSC slots of a genes x cells dgCMatrix, from a CSR gather of `rows`
 * cells: `indptr` (rows + 1 offsets, at most INT32_MAX), the gene indices already in `i`
 * (protected by the caller) and the `nnz` int32 counts `vals`. */
static SEXP csc_slots(uint64_t rows, const int64_t *indptr, SEXP i, const int32_t *vals, uint64_t nnz)
{
  SEXP pp = PROTECT(Rf_allocVector(INTSXP, (R_xlen_t)rows + 1));
  for (uint64_t k = 0; k <= rows; k++) INTEGER(pp)[k] = (int)indptr[k];
  SEXP x = PROTECT(Rf_allocVector(REALSXP, (R_xlen_t)nnz));
  for (uint64_t k = 0; k < nnz; k++) REAL(x)[k] = vals[k];
  const char *names[] = {"p", "i", "x"};
  SEXP out = PROTECT(named_list(3, names));
  SET_VECTOR_ELT(out, 0, pp);
  SET_VECTOR_ELT(out, 1, i);
  SET_VECTOR_ELT(out, 2, x);
  UNPROTECT(3);
  return out;
}

/* Cells (1-based) -> list(p, i, x): CSR rows = cells, i.e. the CSC slots of the
 * genes x cells matrix. */
static SEXP dcr_read_cells(SEXP p, SEXP cells)
{
  dc_dataset *ds = (dc_dataset *)handle(p, "deltacells_dataset");
  R_xlen_t n;
  uint64_t *c = cells_arg(cells, &n);
  if (n > INT32_MAX - 1) dcr_error("%ld cells are more columns than a dgCMatrix holds", (long)n);
  uint64_t nnz = 0;
  DCR_CHECK(dc_dataset_batch_nnz(ds, c, (size_t)n, &nnz), "dc_dataset_batch_nnz");
  if (nnz > INT32_MAX) dcr_error("%.0f nonzeros are more than a dgCMatrix holds", (double)nnz);
  int64_t *indptr = (int64_t *)R_alloc(n + 1, sizeof *indptr);
  SEXP i = PROTECT(Rf_allocVector(INTSXP, (R_xlen_t)nnz));
  int32_t *vals = (int32_t *)R_alloc(nnz ? nnz : 1, sizeof *vals);
  int32_t dummy = 0;
  uint64_t got = 0;
  DCR_CHECK(dc_dataset_gather(ds, c, (size_t)n, DC_INT32, indptr, nnz ? INTEGER(i) : &dummy,
                              vals, nnz, &got),
            "dc_dataset_gather");
  SEXP out = csc_slots((uint64_t)n, indptr, i, vals, nnz);
  UNPROTECT(1);
  return out;
}

/* ---------------------------------------------------------------------------------------
 * Batches of cells (dc_dataset_batches): the iterator in an external pointer
 * ------------------------------------------------------------------------------------- */

/* An iterator over 1-based `cells` in batches of batch_size rows, read_ahead batches
 * prepared ahead: an external pointer "deltacells_batches" (freed by dcr_close or the
 * garbage collector), which also keeps the dataset's external pointer reachable. */
static SEXP dcr_batches(SEXP p, SEXP cells, SEXP batch_size, SEXP read_ahead)
{
  dc_dataset *ds = (dc_dataset *)handle(p, "deltacells_dataset");
  R_xlen_t n;
  uint64_t *c = cells_arg(cells, &n);
  size_t bs = (size_t)int64_arg(batch_size, "batch_size", 1, INT32_MAX - 1);
  uint32_t ra = (uint32_t)int64_arg(read_ahead, "read_ahead", 0, UINT32_MAX);
  /* The external pointer first, so that an allocation failure cannot strand the iterator. */
  SEXP out = PROTECT(R_MakeExternalPtr(NULL, Rf_install("deltacells_batches"), p));
  R_RegisterCFinalizerEx(out, batches_finalizer, TRUE);
  dc_batches *b = NULL;
  DCR_CHECK(dc_dataset_batches(ds, c, (size_t)n, bs, ra, &b), "dc_dataset_batches");
  R_SetExternalPtrAddr(out, b);
  UNPROTECT(1);
  return out;
}

/* The next batch as list(p, i, x) (CSR rows = the batch's cells, i.e. the CSC slots of a
 * genes x cells dgCMatrix), or NULL at the end. A batch whose tiles cannot be read is
 * consumed by the library (dc_batches_next after a failed peek) and its error raised. */
static SEXP dcr_batches_next(SEXP bp)
{
  dc_batches *b = (dc_batches *)handle(bp, "deltacells_batches");
  uint64_t rows = 0, nnz = 0, got_rows = 0, got = 0;
  dc_status s = dc_batches_peek(b, &rows, &nnz);
  if (s != DC_OK) {
    SEXP msg = PROTECT(Rf_mkCharCE(dc_last_error(), CE_UTF8));
    (void)dc_batches_next(b, DC_INT32, NULL, NULL, NULL, 0, &got_rows, &got); /* consume it */
    dcr_raise(s, "dc_batches_peek", msg);
  }
  if (rows == 0) return R_NilValue;
  if (rows > INT32_MAX - 1) dcr_error("%.0f rows are more columns than a dgCMatrix holds", (double)rows);
  if (nnz > INT32_MAX) {
    batches_finalizer(bp); /* the batch cannot be handed out, nor skipped: the iterator ends */
    dcr_unsupported("a batch of %.0f nonzeros is more than a dgCMatrix holds (2^31 - 1); the "
                    "iterator is closed: use a smaller batch_size", (double)nnz);
  }
  int64_t *indptr = (int64_t *)R_alloc(rows + 1, sizeof *indptr);
  SEXP i = PROTECT(Rf_allocVector(INTSXP, (R_xlen_t)nnz));
  int32_t *vals = (int32_t *)R_alloc(nnz ? nnz : 1, sizeof *vals);
  int32_t dummy = 0;
  DCR_CHECK(dc_batches_next(b, DC_INT32, indptr, nnz ? INTEGER(i) : &dummy, vals, nnz, &got_rows,
                            &got),
            "dc_batches_next");
  if (got_rows != rows || got != nnz)
    dcr_error("the batch changed between peek (%.0f rows, %.0f nonzeros) and next (%.0f, %.0f)",
              (double)rows, (double)nnz, (double)got_rows, (double)got);
  SEXP out = csc_slots(rows, indptr, i, vals, nnz);
  UNPROTECT(1);
  return out;
}

/* dc_dataset_shuffled_order -> all cells, 1-based (doubles). `seed` is a whole number up to
 * 2^53 (R has no 64-bit integers). */
static SEXP dcr_shuffled_order(SEXP p, SEXP seed, SEXP window_tiles)
{
  dc_dataset *ds = (dc_dataset *)handle(p, "deltacells_dataset");
  uint64_t sd = (uint64_t)int64_arg(seed, "seed", 0, DCR_EXACT_DOUBLE);
  uint32_t w = (uint32_t)int64_arg(window_tiles, "window_tiles", 0, UINT32_MAX);
  dc_dataset_info info;
  DCR_CHECK(dc_dataset_info_get(ds, &info), "dc_dataset_info_get");
  if ((double)info.n_cells > (double)R_XLEN_T_MAX) dcr_error("more cells than an R vector holds");
  uint64_t *order = (uint64_t *)R_alloc(info.n_cells ? info.n_cells : 1, sizeof *order);
  DCR_CHECK(dc_dataset_shuffled_order(ds, sd, w, order, (size_t)info.n_cells),
            "dc_dataset_shuffled_order");
  SEXP out = PROTECT(Rf_allocVector(REALSXP, (R_xlen_t)info.n_cells));
  for (uint64_t k = 0; k < info.n_cells; k++) REAL(out)[k] = (double)order[k] + 1;
  UNPROTECT(1);
  return out;
}

/* ---------------------------------------------------------------------------------------
 * Arrow C stream -> list of R vectors
 * ------------------------------------------------------------------------------------- */

/* A stream, its schema and the batches read so far; released by arrow_holder_free, or by
 * the finalizer of the external pointer holding it if an R error intervenes. */
typedef struct {
  struct ArrowArrayStream stream;
  struct ArrowSchema schema;
  struct ArrowArray *batches;
  size_t n_batches, cap;
} arrow_holder;

static void arrow_holder_free(arrow_holder *h)
{
  if (!h) return;
  for (size_t b = 0; b < h->n_batches; b++)
    if (h->batches[b].release) h->batches[b].release(&h->batches[b]);
  free(h->batches);
  if (h->schema.release) h->schema.release(&h->schema);
  if (h->stream.release) h->stream.release(&h->stream);
  free(h);
}

static void arrow_holder_finalizer(SEXP p)
{
  arrow_holder_free((arrow_holder *)R_ExternalPtrAddr(p));
  R_ClearExternalPtr(p);
}

static int bit(const void *bits, int64_t i)
{
  return (((const uint8_t *)bits)[i >> 3] >> (i & 7)) & 1;
}

static int is_valid(const struct ArrowArray *a, int64_t i)
{
  const void *v = a->n_buffers > 0 ? a->buffers[0] : NULL;
  return a->null_count == 0 || v == NULL || bit(v, a->offset + i);
}

/* R kinds of Arrow columns: K_INT64 is int64 / uint64 (double or character, int64 mode). */
enum col_kind { K_INT, K_DOUBLE, K_INT64, K_LOGICAL, K_STRING, K_NULL };

/* The R kind of an Arrow format string (NULL error message on success). */
static enum col_kind kind_of(const char *f, const char **err)
{
  *err = NULL;
  if (!strcmp(f, "c") || !strcmp(f, "C") || !strcmp(f, "s") || !strcmp(f, "S") || !strcmp(f, "i"))
    return K_INT;
  if (!strcmp(f, "I") || !strcmp(f, "f") || !strcmp(f, "g")) return K_DOUBLE;
  if (!strcmp(f, "l") || !strcmp(f, "L")) return K_INT64;
  if (!strcmp(f, "b")) return K_LOGICAL;
  if (!strcmp(f, "u") || !strcmp(f, "U")) return K_STRING;
  if (!strcmp(f, "n")) return K_NULL;
  *err = f;
  return K_NULL;
}

/* Value i of a numeric column of up to 32 bits, or a float, as a double (exact). */
static double num_at(const char *f, const struct ArrowArray *a, int64_t i)
{
  int64_t j = a->offset + i;
  const void *d = a->buffers[1];
  switch (f[0]) {
  case 'c': return ((const int8_t *)d)[j];
  case 'C': return ((const uint8_t *)d)[j];
  case 's': return ((const int16_t *)d)[j];
  case 'S': return ((const uint16_t *)d)[j];
  case 'i': return ((const int32_t *)d)[j];
  case 'I': return ((const uint32_t *)d)[j];
  case 'f': return ((const float *)d)[j];
  default: return ((const double *)d)[j];
  }
}

/* Value i of an integer column of any width as int64 (uint64 above INT64_MAX: *big). */
static int64_t int_at(const char *f, const struct ArrowArray *a, int64_t i, uint64_t *big)
{
  int64_t j = a->offset + i;
  *big = 0;
  if (f[0] == 'l') return ((const int64_t *)a->buffers[1])[j];
  if (f[0] == 'L') {
    uint64_t u = ((const uint64_t *)a->buffers[1])[j];
    if (u > (uint64_t)INT64_MAX) *big = u;
    return (int64_t)(u & (uint64_t)INT64_MAX);
  }
  return (int64_t)num_at(f, a, i);
}

/* An int64 / uint64 value as a double, or an R error if no double equals it. */
static double exact_double(const char *f, const struct ArrowArray *a, int64_t i, const char *col,
                           R_xlen_t row)
{
  uint64_t big;
  int64_t v = int_at(f, a, i, &big);
  double d = big ? (double)big : (double)v;
  int exact;
  if (big) exact = d < 18446744073709551616.0 && (uint64_t)d == big;
  else if (v >= -(INT64_C(1) << 53) && v <= (INT64_C(1) << 53)) exact = 1;
  else exact = d < 9223372036854775808.0 && (int64_t)d == v; /* d >= -2^63 always */
  if (!exact) {
    char text[32];
    if (big) snprintf(text, sizeof text, "%" PRIu64, big);
    else snprintf(text, sizeof text, "%" PRId64, v);
    dcr_unsupported("column '%s', row %ld: the 64-bit integer %s has no exact double (R has "
                    "no 64-bit integer type); options(deltacells.int64 = \"character\") reads "
                    "such columns as exact text",
             col, (long)row + 1, text);
  }
  return d;
}

static SEXP int64_text(const char *f, const struct ArrowArray *a, int64_t i)
{
  uint64_t big;
  int64_t v = int_at(f, a, i, &big);
  char text[32];
  if (big) snprintf(text, sizeof text, "%" PRIu64, big);
  else snprintf(text, sizeof text, "%" PRId64, v);
  return Rf_mkChar(text);
}

static SEXP str_at(const char *f, const struct ArrowArray *a, int64_t i)
{
  int64_t j = a->offset + i, start, end;
  if (f[0] == 'u') {
    start = ((const int32_t *)a->buffers[1])[j];
    end = ((const int32_t *)a->buffers[1])[j + 1];
  } else {
    start = ((const int64_t *)a->buffers[1])[j];
    end = ((const int64_t *)a->buffers[1])[j + 1];
  }
  if (end < start || end - start > INT32_MAX) dcr_error("a string longer than R allows");
  return Rf_mkCharLenCE((const char *)a->buffers[2] + start, (int)(end - start), CE_UTF8);
}

static SEXPTYPE sexptype(enum col_kind k, int int64_mode)
{
  switch (k) {
  case K_INT: return INTSXP;
  case K_DOUBLE: return REALSXP;
  case K_INT64: return int64_mode ? STRSXP : REALSXP;
  case K_STRING: return STRSXP;
  default: return LGLSXP;
  }
}

/* Writes rows [at, at + a->length) of `out` (allocated by sexptype) from array a. */
static void fill_plain(SEXP out, enum col_kind k, int int64_mode, const char *f,
                       const struct ArrowArray *a, R_xlen_t at, const char *col)
{
  for (int64_t r = 0; r < a->length; r++) {
    int ok = is_valid(a, r);
    switch (k) {
    case K_INT: INTEGER(out)[at + r] = ok ? (int)num_at(f, a, r) : NA_INTEGER; break;
    case K_DOUBLE: REAL(out)[at + r] = ok ? num_at(f, a, r) : NA_REAL; break;
    case K_INT64:
      if (int64_mode) SET_STRING_ELT(out, at + r, ok ? int64_text(f, a, r) : NA_STRING);
      else REAL(out)[at + r] = ok ? exact_double(f, a, r, col, at + r) : NA_REAL;
      break;
    case K_LOGICAL: LOGICAL(out)[at + r] = ok ? bit(a->buffers[1], a->offset + r) : NA_LOGICAL; break;
    case K_STRING: SET_STRING_ELT(out, at + r, ok ? str_at(f, a, r) : NA_STRING); break;
    case K_NULL: LOGICAL(out)[at + r] = NA_LOGICAL; break;
    }
  }
}

/* The levels of a dictionary: its values as text (integers in decimal, exactly). */
static SEXP dictionary_levels(const struct ArrowSchema *s, const struct ArrowArray *d, const char *col)
{
  const char *err;
  enum col_kind k = kind_of(s->format, &err);
  if (err || k == K_NULL || k == K_LOGICAL)
    dcr_error("column '%s': dictionary values of Arrow type '%s' are not supported", col, s->format);
  if (k == K_STRING || k == K_INT64) {
    SEXP v = PROTECT(Rf_allocVector(STRSXP, (R_xlen_t)d->length));
    fill_plain(v, k, 1, s->format, d, 0, col);
    UNPROTECT(1);
    return v;
  }
  SEXP v = PROTECT(Rf_allocVector(sexptype(k, 0), (R_xlen_t)d->length));
  fill_plain(v, k, 0, s->format, d, 0, col);
  SEXP levels = PROTECT(Rf_coerceVector(v, STRSXP));
  UNPROTECT(2);
  return levels;
}

static int same_levels(SEXP a, SEXP b)
{
  if (XLENGTH(a) != XLENGTH(b)) return 0;
  for (R_xlen_t i = 0; i < XLENGTH(a); i++)
    if (strcmp(CHAR(STRING_ELT(a, i)), CHAR(STRING_ELT(b, i))) != 0) return 0;
  return 1;
}

/* A dictionary column of all batches as a factor (one dictionary for all batches). */
static SEXP factor_column(arrow_holder *h, int c, R_xlen_t n_rows)
{
  const struct ArrowSchema *cs = h->schema.children[c];
  const char *name = cs->name ? cs->name : "";
  const char *err;
  enum col_kind kk = kind_of(cs->format, &err);
  if (err || (kk != K_INT && kk != K_INT64))
    dcr_error("column '%s': dictionary indices of Arrow type '%s' are not supported", name, cs->format);
  SEXP codes = PROTECT(Rf_allocVector(INTSXP, n_rows));
  SEXP levels = R_NilValue;
  int n_prot = 1;
  R_xlen_t at = 0;
  for (size_t b = 0; b < h->n_batches; b++) {
    const struct ArrowArray *a = h->batches[b].children[c];
    if (!a->dictionary) dcr_error("column '%s': a dictionary column without a dictionary", name);
    SEXP lv = PROTECT(dictionary_levels(cs->dictionary, a->dictionary, name));
    n_prot++;
    if (levels == R_NilValue) levels = lv;
    else if (!same_levels(levels, lv))
      dcr_error("column '%s': the dictionary changes between batches (not supported)", name);
    for (int64_t r = 0; r < a->length; r++) {
      if (!is_valid(a, r)) {
        INTEGER(codes)[at + r] = NA_INTEGER;
        continue;
      }
      uint64_t big;
      int64_t code = int_at(cs->format, a, r, &big);
      if (big || code < 0 || code >= XLENGTH(lv))
        dcr_error("column '%s', row %ld: dictionary index out of range", name, (long)(at + r) + 1);
      INTEGER(codes)[at + r] = (int)code + 1;
    }
    at += (R_xlen_t)a->length;
  }
  if (levels == R_NilValue) levels = Rf_allocVector(STRSXP, 0);
  PROTECT(levels);
  n_prot++;
  Rf_setAttrib(codes, R_LevelsSymbol, levels);
  Rf_setAttrib(codes, R_ClassSymbol, Rf_mkString("factor"));
  UNPROTECT(n_prot);
  return codes;
}

/* The schema's metadata (Arrow C format: int32 count, then int32-length-prefixed key and
 * value bytes) as a named character vector, or NULL. */
static SEXP schema_metadata(const struct ArrowSchema *s)
{
  const char *m = s->metadata;
  if (!m) return R_NilValue;
  int32_t n, len;
  memcpy(&n, m, 4);
  m += 4;
  if (n <= 0) return R_NilValue;
  SEXP vals = PROTECT(Rf_allocVector(STRSXP, n));
  SEXP keys = PROTECT(Rf_allocVector(STRSXP, n));
  for (int32_t k = 0; k < n; k++) {
    memcpy(&len, m, 4);
    SET_STRING_ELT(keys, k, Rf_mkCharLenCE(m + 4, len, CE_UTF8));
    m += 4 + len;
    memcpy(&len, m, 4);
    SET_STRING_ELT(vals, k, Rf_mkCharLenCE(m + 4, len, CE_UTF8));
    m += 4 + len;
  }
  Rf_setAttrib(vals, R_NamesSymbol, keys);
  UNPROTECT(2);
  return vals;
}

/* Reads the stream's schema into h (a record batch schema, or an R error). */
static void read_schema(arrow_holder *h)
{
  struct ArrowArrayStream *st = &h->stream;
  int rc = st->get_schema(st, &h->schema);
  if (rc != 0) {
    const char *m = st->get_last_error(st);
    dcr_error("Arrow stream get_schema failed (%d): %s", rc, m ? m : "");
  }
  if (strcmp(h->schema.format, "+s") != 0) dcr_error("the Arrow stream does not carry record batches");
}

/* Reads the next batch of the stream into h->batches[h->n_batches]; 0 at the end. */
static int read_batch(arrow_holder *h)
{
  struct ArrowArrayStream *st = &h->stream;
  if (h->n_batches == h->cap) {
    size_t cap = h->cap ? 2 * h->cap : 16;
    struct ArrowArray *nb = (struct ArrowArray *)realloc(h->batches, cap * sizeof *nb);
    if (!nb) dcr_error("out of memory reading an Arrow stream");
    h->batches = nb;
    h->cap = cap;
  }
  struct ArrowArray *a = &h->batches[h->n_batches];
  a->release = NULL;
  int rc = st->get_next(st, a);
  if (rc != 0) {
    const char *m = st->get_last_error(st);
    dcr_error("Arrow stream get_next failed (%d): %s", rc, m ? m : "");
  }
  if (!a->release) return 0;
  h->n_batches++;
  return 1;
}

/* Reads the whole stream into h (schema, then every batch). */
static void read_stream(arrow_holder *h)
{
  read_schema(h);
  while (read_batch(h)) {
  }
}

/* Whether int32 column c of the batches read into h holds a valid -2^31: R's integers
 * cannot (that bit pattern is NA_integer_), so such a column is read as double, exactly. */
static int holds_int_min(const arrow_holder *h, int c)
{
  if (strcmp(h->schema.children[c]->format, "i") != 0) return 0;
  for (size_t b = 0; b < h->n_batches; b++) {
    const struct ArrowArray *a = h->batches[b].children[c];
    const int32_t *d = (const int32_t *)a->buffers[1];
    for (int64_t r = 0; r < a->length; r++)
      if (d[a->offset + r] == INT32_MIN && is_valid(a, r)) return 1;
  }
  return 0;
}

/* The batches read into h as a named list of columns (attributes "n_rows", and "metadata"
 * when the schema has any): utf8 -> character, integers up to 32 bits -> integer, 64-bit
 * integers -> double (checked exact) or character (int64_mode 1), floats -> double, bool
 * -> logical, dictionary -> factor; nulls -> NA. An int32 column holding -2^31 (R's
 * NA_integer_) is read as double, so that no value turns into NA. */
static SEXP batches_to_list(arrow_holder *h, int int64_mode)
{
  const struct ArrowSchema *sc = &h->schema;
  R_xlen_t n_rows = 0;
  for (size_t b = 0; b < h->n_batches; b++) n_rows += (R_xlen_t)h->batches[b].length;

  int n_cols = (int)sc->n_children;
  SEXP out = PROTECT(Rf_allocVector(VECSXP, n_cols));
  SEXP names = PROTECT(Rf_allocVector(STRSXP, n_cols));
  for (int c = 0; c < n_cols; c++) {
    const struct ArrowSchema *cs = sc->children[c];
    const char *name = cs->name ? cs->name : "";
    SET_STRING_ELT(names, c, Rf_mkCharCE(name, CE_UTF8));
    if (cs->dictionary) {
      SET_VECTOR_ELT(out, c, factor_column(h, c, n_rows));
      continue;
    }
    const char *err;
    enum col_kind k = kind_of(cs->format, &err);
    if (err) dcr_error("column '%s': Arrow type '%s' is not supported", name, err);
    if (k == K_INT && holds_int_min(h, c)) k = K_DOUBLE; /* -2^31 is R's NA_integer_ */
    SEXP v = PROTECT(Rf_allocVector(sexptype(k, int64_mode), n_rows));
    R_xlen_t at = 0;
    for (size_t b = 0; b < h->n_batches; b++) {
      fill_plain(v, k, int64_mode, cs->format, h->batches[b].children[c], at, name);
      at += (R_xlen_t)h->batches[b].length;
    }
    SET_VECTOR_ELT(out, c, v);
    UNPROTECT(1);
  }
  Rf_setAttrib(out, R_NamesSymbol, names);
  Rf_setAttrib(out, Rf_install("n_rows"), Rf_ScalarReal((double)n_rows));
  Rf_setAttrib(out, Rf_install("metadata"), schema_metadata(sc));
  UNPROTECT(2);
  return out;
}

static SEXP stream_to_list(arrow_holder *h, int int64_mode)
{
  read_stream(h);
  return batches_to_list(h, int64_mode);
}

/* A fresh holder kept alive (and released on GC) by *keep, which the caller protects. */
static arrow_holder *new_holder(SEXP *keep)
{
  arrow_holder *h = (arrow_holder *)calloc(1, sizeof *h);
  if (!h) dcr_error("out of memory");
  *keep = R_MakeExternalPtr(h, Rf_install("deltacells_arrow"), R_NilValue);
  PROTECT(*keep);
  R_RegisterCFinalizerEx(*keep, arrow_holder_finalizer, TRUE);
  UNPROTECT(1);
  return h;
}

/* After a library call that filled h->stream: convert, then release everything. */
static SEXP finish_stream(SEXP keep, arrow_holder *h, int int64_mode)
{
  SEXP out = PROTECT(stream_to_list(h, int64_mode));
  arrow_holder_free(h);
  R_ClearExternalPtr(keep);
  UNPROTECT(1);
  return out;
}

static SEXP dcr_obs(SEXP p, SEXP columns, SEXP int64)
{
  dc_dataset *ds = (dc_dataset *)handle(p, "deltacells_dataset");
  size_t n = 0;
  const char *const *cols = strings_arg(columns, &n, "columns");
  int mode = int64_mode_arg(int64);
  SEXP keep;
  arrow_holder *h = new_holder(&keep);
  PROTECT(keep);
  DCR_CHECK(dc_dataset_obs(ds, cols, n, &h->stream), "dc_dataset_obs");
  SEXP out = finish_stream(keep, h, mode);
  UNPROTECT(1);
  return out;
}

static SEXP dcr_var_table(SEXP p, SEXP int64)
{
  dc_dataset *ds = (dc_dataset *)handle(p, "deltacells_dataset");
  int mode = int64_mode_arg(int64);
  SEXP keep;
  arrow_holder *h = new_holder(&keep);
  PROTECT(keep);
  DCR_CHECK(dc_dataset_var_table(ds, &h->stream), "dc_dataset_var_table");
  SEXP out = finish_stream(keep, h, mode);
  UNPROTECT(1);
  return out;
}

/* ---------------------------------------------------------------------------------------
 * ChromData
 * ------------------------------------------------------------------------------------- */

static SEXP dcr_cd_open(SEXP path, SEXP options)
{
  const char *cpath = string_arg(path, "path");
  size_t n_options = 0;
  const char *const *opts = strings_arg(options, &n_options, "options");
  dc_chromdata *cd = NULL;
  DCR_CHECK(dc_chromdata_open_opts(cpath, opts, n_options, &cd), "dc_chromdata_open_opts");
  SEXP p = PROTECT(R_MakeExternalPtr(cd, Rf_install("deltacells_chromdata"), R_NilValue));
  R_RegisterCFinalizerEx(p, chromdata_finalizer, TRUE);
  UNPROTECT(1);
  return p;
}

static SEXP dcr_cd_info(SEXP p)
{
  dc_chromdata_info i;
  DCR_CHECK(dc_chromdata_info_get((dc_chromdata *)handle(p, "deltacells_chromdata"), &i),
            "dc_chromdata_info_get");
  const char *names[] = {"format_major", "format_minor", "layout", "n_spots", "n_bins",
                         "n_traces", "n_cells", "n_chroms", "has_coords", "has_cell_id",
                         "n_runs", "n_row_groups", "has_source_row", "coord_bits"};
  SEXP out = PROTECT(named_list(14, names));
  SET_VECTOR_ELT(out, 0, Rf_ScalarInteger((int)i.format_major));
  SET_VECTOR_ELT(out, 1, Rf_ScalarInteger((int)i.format_minor));
  SET_VECTOR_ELT(out, 2, Rf_ScalarInteger(i.layout));
  SET_VECTOR_ELT(out, 3, Rf_ScalarReal((double)i.n_spots));
  SET_VECTOR_ELT(out, 4, Rf_ScalarReal((double)i.n_bins));
  SET_VECTOR_ELT(out, 5, Rf_ScalarReal((double)i.n_traces));
  SET_VECTOR_ELT(out, 6, Rf_ScalarReal((double)i.n_cells));
  SET_VECTOR_ELT(out, 7, Rf_ScalarReal((double)i.n_chroms));
  SET_VECTOR_ELT(out, 8, Rf_ScalarLogical(i.has_coords != 0));
  SET_VECTOR_ELT(out, 9, Rf_ScalarLogical(i.has_cell_id != 0));
  SET_VECTOR_ELT(out, 10, Rf_ScalarReal((double)i.n_runs));
  SET_VECTOR_ELT(out, 11, Rf_ScalarReal((double)i.n_row_groups));
  SET_VECTOR_ELT(out, 12, Rf_ScalarLogical(i.has_source_row != 0));
  SET_VECTOR_ELT(out, 13, Rf_ScalarInteger(i.coord_bits));
  UNPROTECT(1);
  return out;
}

/* what: 0 trace, 1 cell, 2 chrom, 3 table, 4 spots (id = original_order, TRUE/FALSE),
 * 5 keys, 6 categories (id = table, columns = column name). */
static SEXP dcr_cd_query(SEXP p, SEXP what, SEXP id, SEXP columns, SEXP int64)
{
  dc_chromdata *cd = (dc_chromdata *)handle(p, "deltacells_chromdata");
  int w = (int)int64_arg(what, "what", 0, 6);
  size_t n = 0;
  const char *const *cols = (w == 6 || w == 3 || w == 5) ? NULL : strings_arg(columns, &n, "columns");
  const char *s = w == 4 ? NULL : string_arg(id, w == 2 ? "name" : w == 3 ? "name" : w == 5 ? "kind" : w == 6 ? "table" : "id");
  int original = w == 4 ? flag_arg(id, "original_order") : 0;
  const char *col = w == 6 ? string_arg(columns, "column") : NULL;
  int mode = int64_mode_arg(int64);
  SEXP keep;
  arrow_holder *h = new_holder(&keep);
  PROTECT(keep);
  dc_status st;
  const char *fn;
  switch (w) {
  case 0: st = dc_chromdata_get_trace(cd, s, cols, n, &h->stream); fn = "dc_chromdata_get_trace"; break;
  case 1: st = dc_chromdata_get_cell(cd, s, cols, n, &h->stream); fn = "dc_chromdata_get_cell"; break;
  case 2: st = dc_chromdata_get_chrom(cd, s, cols, n, &h->stream); fn = "dc_chromdata_get_chrom"; break;
  case 3: st = dc_chromdata_table(cd, s, &h->stream); fn = "dc_chromdata_table"; break;
  case 4:
    st = dc_chromdata_read_spots(cd, original, cols, n, &h->stream);
    fn = "dc_chromdata_read_spots";
    break;
  case 5: st = dc_chromdata_keys(cd, s, &h->stream); fn = "dc_chromdata_keys"; break;
  default: st = dc_chromdata_categories(cd, s, col, &h->stream); fn = "dc_chromdata_categories"; break;
  }
  if (st != DC_OK) dcr_fail(st, fn);
  SEXP out = finish_stream(keep, h, mode);
  UNPROTECT(1);
  return out;
}


/* ---------------------------------------------------------------------------------------
 * Pass-through content (C API 1.1 §5.1): attributes as JSON text, arrays, results tables
 * ------------------------------------------------------------------------------------- */

/* The value of key `key` in Arrow metadata bytes (int32 count, then int32-length keys and
 * values), as an R string, or R_NilValue. */
static SEXP metadata_value(const char *m, const char *key)
{
  if (!m) return R_NilValue;
  int32_t n, kl, vl;
  memcpy(&n, m, 4);
  const char *at = m + 4;
  for (int32_t i = 0; i < n; i++) {
    memcpy(&kl, at, 4);
    const char *k = at + 4;
    memcpy(&vl, k + kl, 4);
    const char *v = k + kl + 4;
    if ((size_t)kl == strlen(key) && memcmp(k, key, (size_t)kl) == 0)
      return Rf_ScalarString(Rf_mkCharLenCE(v, vl, CE_UTF8));
    at = v + vl;
  }
  return R_NilValue;
}

/* The elements of an array batch (one column "value": primitive or nested fixed-size
 * lists) as list(values = R vector row-major, shape = JSON text of the shape). */
static SEXP array_values(arrow_holder *h)
{
  const struct ArrowSchema *col = h->schema.n_children == 1 ? h->schema.children[0] : NULL;
  if (!col) dcr_error("an array batch has one column");
  SEXP shape = PROTECT(metadata_value(col->metadata, "shape"));
  const struct ArrowSchema *leaf = col;
  int64_t per_row = 1;
  while (leaf->format[0] == '+' && leaf->format[1] == 'w') {
    per_row *= strtoll(leaf->format + 3, NULL, 10);
    leaf = leaf->children[0];
  }
  const char *err;
  enum col_kind k = kind_of(leaf->format, &err);
  if (err || k == K_STRING || k == K_NULL) dcr_unsupported("array elements of Arrow type '%s'", leaf->format);
  R_xlen_t n = 0;
  for (size_t b = 0; b < h->n_batches; b++) n += (R_xlen_t)(h->batches[b].length * per_row);
  SEXP out = PROTECT(Rf_allocVector(k == K_INT ? INTSXP : k == K_LOGICAL ? LGLSXP : REALSXP, n));
  R_xlen_t at = 0;
  for (size_t b = 0; b < h->n_batches; b++) {
    const struct ArrowArray *a = h->batches[b].children[0];
    int64_t start = h->batches[b].offset + a->offset, count = h->batches[b].length;
    const struct ArrowSchema *s = col;
    while (s->format[0] == '+' && s->format[1] == 'w') {
      int64_t size = strtoll(s->format + 3, NULL, 10);
      a = a->children[0];
      start = start * size + a->offset;
      count *= size;
      s = s->children[0];
    }
    for (int64_t i = 0; i < count; i++, at++) {
      int64_t j = start + i;
      if (k == K_INT) INTEGER(out)[at] = (int)num_at(leaf->format, a, j - a->offset);
      else if (k == K_LOGICAL) LOGICAL(out)[at] = bit(a->buffers[1], j);
      else if (k == K_INT64) {
        uint64_t big;
        int64_t v = int_at(leaf->format, a, j - a->offset, &big);
        REAL(out)[at] = big ? (double)big : (double)v;
      } else REAL(out)[at] = num_at(leaf->format, a, j - a->offset);
    }
  }
  SEXP res = PROTECT(Rf_allocVector(VECSXP, 2));
  SET_VECTOR_ELT(res, 0, out);
  SET_VECTOR_ELT(res, 1, shape);
  UNPROTECT(3);
  return res;
}

/* what 0: dc_chromdata_attrs (JSON text); 1: dc_chromdata_array (list(values, shape));
 * 2: dc_chromdata_result_table (columns). `path`: character vector (may be empty). */
static SEXP dcr_cd_content(SEXP p, SEXP what, SEXP kind, SEXP path, SEXP int64)
{
  dc_chromdata *cd = (dc_chromdata *)handle(p, "deltacells_chromdata");
  int w = (int)int64_arg(what, "what", 0, 2);
  const char *ckind = w == 2 ? NULL : string_arg(kind, "kind");
  size_t n = 0;
  const char *const *cpath = strings_arg(path, &n, "path");
  int mode = int64_mode_arg(int64);
  if (w == 0) {
    uint8_t *json = NULL;
    size_t len = 0;
    DCR_CHECK(dc_chromdata_attrs(cd, ckind, cpath, n, &json, &len), "dc_chromdata_attrs");
    SEXP out = PROTECT(Rf_allocVector(STRSXP, 1));
    SET_STRING_ELT(out, 0, Rf_mkCharLenCE((const char *)json, (int)len, CE_UTF8));
    dc_bytes_free(json, len);
    UNPROTECT(1);
    return out;
  }
  SEXP keep;
  arrow_holder *h = new_holder(&keep);
  PROTECT(keep);
  dc_status st = w == 1 ? dc_chromdata_array(cd, ckind, cpath, n, &h->stream)
                        : dc_chromdata_result_table(cd, cpath, n, &h->stream);
  if (st != DC_OK) dcr_fail(st, w == 1 ? "dc_chromdata_array" : "dc_chromdata_result_table");
  SEXP out;
  if (w == 1) {
    read_stream(h);
    out = PROTECT(array_values(h));
    arrow_holder_free(h);
    R_ClearExternalPtr(keep);
    UNPROTECT(1);
  } else {
    out = finish_stream(keep, h, mode);
  }
  UNPROTECT(1);
  return out;
}

/* Iteration over a store in batches of whole runs (what 0: dc_chromdata_iter_traces) or
 * cell segments (1: dc_chromdata_iter_cells): an external pointer "deltacells_stream"
 * holding the stream (released by dcr_close or the garbage collector); dcr_stream_next
 * reads it batch by batch. */
static SEXP dcr_cd_iter(SEXP p, SEXP what, SEXP batch, SEXP columns)
{
  dc_chromdata *cd = (dc_chromdata *)handle(p, "deltacells_chromdata");
  int w = (int)int64_arg(what, "what", 0, 1);
  uint64_t n = (uint64_t)int64_arg(batch, "batch", 1, DCR_EXACT_DOUBLE);
  size_t n_cols = 0;
  const char *const *cols = strings_arg(columns, &n_cols, "columns");
  arrow_holder *h = (arrow_holder *)calloc(1, sizeof *h);
  if (!h) dcr_error("out of memory");
  SEXP keep = PROTECT(R_MakeExternalPtr(h, Rf_install("deltacells_stream"), R_NilValue));
  R_RegisterCFinalizerEx(keep, arrow_holder_finalizer, TRUE);
  if (w == 0)
    DCR_CHECK(dc_chromdata_iter_traces(cd, n, cols, n_cols, &h->stream), "dc_chromdata_iter_traces");
  else
    DCR_CHECK(dc_chromdata_iter_cells(cd, n, cols, n_cols, &h->stream), "dc_chromdata_iter_cells");
  read_schema(h);
  UNPROTECT(1);
  return keep;
}

/* The next batch of a "deltacells_stream" as a list of columns (as stream_to_list), or
 * NULL at the end (the stream is then released). */
static SEXP dcr_stream_next(SEXP p, SEXP int64)
{
  arrow_holder *h = (arrow_holder *)handle(p, "deltacells_stream");
  int mode = int64_mode_arg(int64);
  for (size_t b = 0; b < h->n_batches; b++)
    if (h->batches[b].release) h->batches[b].release(&h->batches[b]);
  h->n_batches = 0;
  if (!read_batch(h)) {
    arrow_holder_finalizer(p);
    return R_NilValue;
  }
  SEXP out = PROTECT(batches_to_list(h, mode));
  h->batches[0].release(&h->batches[0]);
  h->n_batches = 0;
  UNPROTECT(1);
  return out;
}

/* ---------------------------------------------------------------------------------------
 * Writing: dgCMatrix (genes x cells) + obs data.frame -> dataset
 * ------------------------------------------------------------------------------------- */

/* One Arrow array (a column, a dictionary, or the struct batch) with malloc'ed buffers. */
typedef struct {
  void *bufs[3];
  const void *ptrs[3];
  struct ArrowArray *child_mem; /* children / dictionary storage */
  struct ArrowArray **child_ptrs;
} array_priv;

static void release_array(struct ArrowArray *a)
{
  array_priv *pv = (array_priv *)a->private_data;
  for (int64_t c = 0; c < a->n_children; c++)
    if (a->children[c]->release) a->children[c]->release(a->children[c]);
  if (a->dictionary && a->dictionary->release) a->dictionary->release(a->dictionary);
  if (pv) {
    for (int b = 0; b < 3; b++) free(pv->bufs[b]);
    free(pv->child_mem);
    free(pv->child_ptrs);
    free(pv);
  }
  a->release = NULL;
}

/* Initialises *a as released-able with room for n_buffers; returns its private part. */
static array_priv *init_array(struct ArrowArray *a, int64_t length, int64_t n_buffers)
{
  memset(a, 0, sizeof *a);
  array_priv *pv = (array_priv *)calloc(1, sizeof *pv);
  if (!pv) return NULL;
  a->length = length;
  a->n_buffers = n_buffers;
  a->buffers = pv->ptrs;
  a->private_data = pv;
  a->release = release_array;
  return pv;
}

static void release_schema(struct ArrowSchema *s)
{
  for (int64_t c = 0; c < s->n_children; c++) {
    if (s->children[c]->release) s->children[c]->release(s->children[c]);
    free(s->children[c]);
  }
  free(s->children);
  if (s->dictionary) {
    if (s->dictionary->release) s->dictionary->release(s->dictionary);
    free(s->dictionary);
  }
  free((void *)s->format);
  free((void *)s->name);
  s->release = NULL;
}

static int init_schema(struct ArrowSchema *s, const char *format, const char *name)
{
  memset(s, 0, sizeof *s);
  s->format = strdup(format);
  s->name = strdup(name);
  s->flags = ARROW_FLAG_NULLABLE;
  s->release = release_schema;
  return s->format && s->name;
}

/* A validity bitmap for n rows from flags (1 valid); NULL if all valid or on OOM (*oom). */
static uint8_t *validity(const int *valid, R_xlen_t n, int64_t *null_count, int *oom)
{
  int64_t nulls = 0;
  for (R_xlen_t i = 0; i < n; i++) nulls += !valid[i];
  *null_count = nulls;
  if (!nulls) return NULL;
  uint8_t *bits = (uint8_t *)calloc((size_t)(n + 7) / 8 + 1, 1);
  if (!bits) { *oom = 1; return NULL; }
  for (R_xlen_t i = 0; i < n; i++)
    if (valid[i]) bits[i >> 3] |= (uint8_t)(1u << (i & 7));
  return bits;
}

/* A utf8 array of R strings (NA -> null). Returns 0 on OOM. */
static int utf8_array(struct ArrowArray *a, SEXP strs)
{
  R_xlen_t n = XLENGTH(strs);
  array_priv *pv = init_array(a, n, 3);
  if (!pv) return 0;
  int *valid = (int *)R_alloc(n ? n : 1, sizeof *valid);
  size_t total = 0;
  for (R_xlen_t i = 0; i < n; i++) {
    valid[i] = STRING_ELT(strs, i) != NA_STRING;
    if (valid[i]) total += strlen(Rf_translateCharUTF8(STRING_ELT(strs, i)));
  }
  if (total > INT32_MAX) dcr_error("more than 2 GiB of text in one column");
  int oom = 0;
  pv->bufs[0] = validity(valid, n, &a->null_count, &oom);
  int32_t *offsets = (int32_t *)malloc((size_t)(n + 1) * sizeof *offsets);
  char *chars = (char *)malloc(total ? total : 1);
  pv->bufs[1] = offsets;
  pv->bufs[2] = chars;
  if (oom || !offsets || !chars) return 0;
  size_t at = 0;
  offsets[0] = 0;
  for (R_xlen_t i = 0; i < n; i++) {
    if (valid[i]) {
      const char *s = Rf_translateCharUTF8(STRING_ELT(strs, i));
      size_t len = strlen(s);
      memcpy(chars + at, s, len);
      at += len;
    }
    offsets[i + 1] = (int32_t)at;
  }
  for (int b = 0; b < 3; b++) pv->ptrs[b] = pv->bufs[b];
  return 1;
}

/* R checks of one data.frame column, before anything is allocated: its type, then its
 * length against *n_rows (set by the first column, when *n_rows < 0). */
static void check_column(SEXP col, const char *name, R_xlen_t *n_rows)
{
  SEXP klass = Rf_getAttrib(col, R_ClassSymbol);
  if (Rf_isFactor(col)) {
    SEXP levels = Rf_getAttrib(col, R_LevelsSymbol);
    if (TYPEOF(levels) != STRSXP) dcr_error("column '%s': a factor without character levels", name);
    for (R_xlen_t i = 0; i < XLENGTH(levels); i++)
      if (STRING_ELT(levels, i) == NA_STRING) dcr_error("column '%s': NA is not a valid factor level", name);
    R_xlen_t n_levels = XLENGTH(levels);
    for (R_xlen_t i = 0; i < XLENGTH(col); i++) {
      int code = INTEGER(col)[i];
      if (code != NA_INTEGER && (code < 1 || code > n_levels))
        dcr_error("column '%s', row %ld: factor code %d is not a level (1..%ld)", name, (long)i + 1,
                 code, (long)n_levels);
    }
  } else if (TYPEOF(col) != STRSXP && TYPEOF(col) != INTSXP && TYPEOF(col) != REALSXP &&
             TYPEOF(col) != LGLSXP) {
    dcr_error("column '%s': R type '%s' is not supported (factor, character, numeric, "
             "integer or logical)", name, Rf_type2char(TYPEOF(col)));
  } else if (Rf_inherits(col, "integer64")) {
    dcr_error("column '%s': bit64::integer64 is not supported (convert it to double or character)", name);
  } else if (klass != R_NilValue) {
    /* Date, POSIXct, difftime, ...: written as their bare numbers they would come back as
     * something else; the caller decides (as.numeric, as.character or format). */
    dcr_error("column '%s': R class '%s' is not supported (convert it to numeric or character)",
             name, TYPEOF(klass) == STRSXP && XLENGTH(klass) > 0 ? CHAR(STRING_ELT(klass, 0)) : "?");
  }
  if (*n_rows < 0) *n_rows = XLENGTH(col);
  if (XLENGTH(col) != *n_rows)
    dcr_error("column '%s' has %ld rows, the first column %ld", name, (long)XLENGTH(col), (long)*n_rows);
}

/* Column `col` of the data frame as child array + schema (checked by check_column).
 * Returns 0 on OOM. */
static int column_array(struct ArrowArray *a, struct ArrowSchema *s, SEXP col, const char *name)
{
  R_xlen_t n = XLENGTH(col);
  if (Rf_isFactor(col)) {
    if (!init_schema(s, "i", name)) return 0;
    s->dictionary = (struct ArrowSchema *)calloc(1, sizeof *s->dictionary);
    if (!s->dictionary || !init_schema(s->dictionary, "u", "")) return 0;
    array_priv *pv = init_array(a, n, 2);
    if (!pv) return 0;
    int *valid = (int *)R_alloc(n ? n : 1, sizeof *valid);
    for (R_xlen_t i = 0; i < n; i++) valid[i] = INTEGER(col)[i] != NA_INTEGER;
    int oom = 0;
    pv->bufs[0] = validity(valid, n, &a->null_count, &oom);
    int32_t *codes = (int32_t *)malloc((size_t)(n ? n : 1) * sizeof *codes);
    pv->bufs[1] = codes;
    pv->child_mem = (struct ArrowArray *)calloc(1, sizeof *pv->child_mem);
    if (oom || !codes || !pv->child_mem) return 0;
    for (R_xlen_t i = 0; i < n; i++) codes[i] = valid[i] ? INTEGER(col)[i] - 1 : 0;
    pv->ptrs[0] = pv->bufs[0];
    pv->ptrs[1] = codes;
    a->dictionary = pv->child_mem;
    return utf8_array(a->dictionary, Rf_getAttrib(col, R_LevelsSymbol));
  }
  if (TYPEOF(col) == STRSXP) {
    if (!init_schema(s, "u", name)) return 0;
    return utf8_array(a, col);
  }
  int t = TYPEOF(col);
  if (!init_schema(s, t == INTSXP ? "i" : t == REALSXP ? "g" : "b", name)) return 0;
  array_priv *pv = init_array(a, n, 2);
  if (!pv) return 0;
  int *valid = (int *)R_alloc(n ? n : 1, sizeof *valid);
  for (R_xlen_t i = 0; i < n; i++)
    valid[i] = t == INTSXP ? INTEGER(col)[i] != NA_INTEGER
               : t == LGLSXP ? LOGICAL(col)[i] != NA_LOGICAL
                             : !R_IsNA(REAL(col)[i]);
  int oom = 0;
  pv->bufs[0] = validity(valid, n, &a->null_count, &oom);
  size_t bytes = t == INTSXP ? (size_t)n * 4 : t == REALSXP ? (size_t)n * 8 : (size_t)(n + 7) / 8;
  void *data = calloc(bytes ? bytes : 1, 1);
  pv->bufs[1] = data;
  if (oom || !data) return 0;
  if (t == INTSXP) memcpy(data, INTEGER(col), (size_t)n * 4);
  else if (t == REALSXP) memcpy(data, REAL(col), (size_t)n * 8);
  else
    for (R_xlen_t i = 0; i < n; i++)
      if (valid[i] && LOGICAL(col)[i]) ((uint8_t *)data)[i >> 3] |= (uint8_t)(1u << (i & 7));
  pv->ptrs[0] = pv->bufs[0];
  pv->ptrs[1] = data;
  return 1;
}

/* A batch + schema under construction, released by GC if an R error intervenes. */
typedef struct {
  struct ArrowArray batch;
  struct ArrowSchema schema;
} batch_holder;

static void batch_holder_finalizer(SEXP p)
{
  batch_holder *b = (batch_holder *)R_ExternalPtrAddr(p);
  if (b) {
    if (b->batch.release) b->batch.release(&b->batch);
    if (b->schema.release) b->schema.release(&b->schema);
    free(b);
  }
  R_ClearExternalPtr(p);
}

/* A named list of columns (a data.frame) -> struct batch in *b (every column's R checks
 * done before allocation). `what` names the table in errors. */
static void build_batch(batch_holder *b, SEXP df, const char *what)
{
  if (TYPEOF(df) != VECSXP) dcr_error("'%s' must be a data.frame (a list of columns)", what);
  int n_cols = (int)XLENGTH(df);
  SEXP names = Rf_getAttrib(df, R_NamesSymbol);
  if (n_cols > 0 && (TYPEOF(names) != STRSXP || XLENGTH(names) != n_cols))
    dcr_error("'%s' must have column names", what);
  for (int c = 0; c < n_cols; c++)
    if (STRING_ELT(names, c) == NA_STRING) dcr_error("'%s': column %d has no name (NA)", what, c + 1);
  R_xlen_t n_rows = -1;
  for (int c = 0; c < n_cols; c++)
    check_column(VECTOR_ELT(df, c), Rf_translateCharUTF8(STRING_ELT(names, c)), &n_rows);
  if (n_rows < 0) n_rows = 0;
  int ok = init_schema(&b->schema, "+s", "");
  b->schema.flags = 0;
  array_priv *pv = init_array(&b->batch, n_rows, 1);
  if (!ok || !pv) dcr_error("out of memory");
  b->schema.children = (struct ArrowSchema **)calloc(n_cols ? n_cols : 1, sizeof(void *));
  pv->child_mem = (struct ArrowArray *)calloc(n_cols ? n_cols : 1, sizeof *pv->child_mem);
  pv->child_ptrs = (struct ArrowArray **)calloc(n_cols ? n_cols : 1, sizeof(void *));
  if (!b->schema.children || !pv->child_mem || !pv->child_ptrs) dcr_error("out of memory");
  b->batch.children = pv->child_ptrs;
  for (int c = 0; c < n_cols; c++) {
    struct ArrowSchema *cs = (struct ArrowSchema *)calloc(1, sizeof *cs);
    if (!cs) dcr_error("out of memory");
    b->schema.children[c] = cs;
    b->schema.n_children = c + 1;
    pv->child_ptrs[c] = &pv->child_mem[c];
    b->batch.n_children = c + 1;
    if (!column_array(&pv->child_mem[c], cs, VECTOR_ELT(df, c),
                      Rf_translateCharUTF8(STRING_ELT(names, c))))
      dcr_error("out of memory building the '%s' batch", what);
  }
}

/* A batch holder kept alive (and released on GC) by *keep, which the caller protects. */
static batch_holder *new_batch(SEXP *keep)
{
  batch_holder *b = (batch_holder *)calloc(1, sizeof *b);
  if (!b) dcr_error("out of memory");
  *keep = R_MakeExternalPtr(b, Rf_install("deltacells_batch"), R_NilValue);
  PROTECT(*keep);
  R_RegisterCFinalizerEx(*keep, batch_holder_finalizer, TRUE);
  UNPROTECT(1);
  return b;
}

/* On failure: copy the message, free the writer (abandoning the write: nothing is left at
 * the target), then raise. */
static void check_writer(dc_status s, const char *fn, SEXP wkeep)
{
  if (s != DC_OK) {
    SEXP msg = PROTECT(Rf_mkCharCE(dc_last_error(), CE_UTF8));
    if (R_ExternalPtrTag(wkeep) == Rf_install("deltacells_cd_writer")) cd_writer_finalizer(wkeep);
    else writer_finalizer(wkeep);
    dcr_raise(s, fn, msg);
    UNPROTECT(1);
  }
}

/* The CSC slots of a genes x cells dgCMatrix, checked so that every read below is in
 * bounds: p[0] = 0, p non-decreasing, p[n] = length(i) = length(x); i in [0, n_genes);
 * x whole counts in 1..2^31-1 (explicit zeros are dropped by the R caller). */
static void check_csc(SEXP p, SEXP i, SEXP x, int64_t n_genes)
{
  if (TYPEOF(p) != INTSXP || TYPEOF(i) != INTSXP || TYPEOF(x) != REALSXP)
    dcr_error("the matrix must be a dgCMatrix (slots p, i integer; x double)");
  R_xlen_t n = XLENGTH(p) - 1, nnz = XLENGTH(x);
  if (n < 0 || INTEGER(p)[0] != 0) dcr_error("the matrix's column pointers (slot p) must start at 0");
  if (XLENGTH(i) != nnz) dcr_error("the matrix's slots i and x differ in length");
  for (R_xlen_t c = 0; c < n; c++)
    if (INTEGER(p)[c + 1] < INTEGER(p)[c])
      dcr_error("the matrix's column pointers (slot p) decrease at column %ld", (long)c + 1);
  if ((R_xlen_t)INTEGER(p)[n] != nnz)
    dcr_error("the matrix's last column pointer (%d) is not the number of nonzeros (%ld)",
             INTEGER(p)[n], (long)nnz);
  for (R_xlen_t k = 0; k < nnz; k++) {
    if (INTEGER(i)[k] < 0 || INTEGER(i)[k] >= n_genes)
      dcr_error("matrix entry %ld: row %d is outside 1..%.0f", (long)k + 1, INTEGER(i)[k] + 1,
               (double)n_genes);
    double v = REAL(x)[k];
    if (!(v >= 1 && v <= INT32_MAX) || v != floor(v))
      dcr_error("matrix entry %ld (%g) is not a count (a whole number in 1..2^31-1)", (long)k + 1, v);
  }
}

/* Appends the cells of the checked slots in blocks: indptr rebased by the library. */
static void append_cells(dc_writer *w, SEXP wkeep, SEXP p, SEXP i, SEXP x)
{
  R_xlen_t n_cells = XLENGTH(p) - 1;
  const R_xlen_t block = 65536;
  int64_t *indptr = (int64_t *)R_alloc(block + 1, sizeof *indptr);
  int32_t *vals = NULL;
  size_t vals_cap = 0;
  for (R_xlen_t c0 = 0; c0 < n_cells; c0 += block) {
    R_xlen_t c1 = c0 + block < n_cells ? c0 + block : n_cells;
    for (R_xlen_t c = c0; c <= c1; c++) indptr[c - c0] = INTEGER(p)[c];
    size_t m = (size_t)(indptr[c1 - c0] - indptr[0]);
    if (m > vals_cap) {
      vals = (int32_t *)R_alloc(m, sizeof *vals);
      vals_cap = m;
    }
    for (size_t k = 0; k < m; k++) vals[k] = (int32_t)REAL(x)[indptr[0] + k];
    int32_t none = 0;
    check_writer(dc_writer_append_csr(w, (uint64_t)(c1 - c0), indptr,
                                      m ? INTEGER(i) + indptr[0] : &none, m ? vals : &none),
                 "dc_writer_append_csr", wkeep);
  }
}

/* A table argument (a list of columns, or NULL) as a batch of `rows` rows, built before
 * any library call; *keep (protected by the caller) holds it. NULL for NULL. */
static batch_holder *table_arg(SEXP df, const char *what, R_xlen_t rows, const char *rows_are,
                               SEXP *keep)
{
  *keep = R_NilValue;
  if (Rf_isNull(df)) return NULL;
  batch_holder *b = new_batch(keep);
  PROTECT(*keep);
  build_batch(b, df, what); /* R errors (bad column types) before any library call */
  if (b->batch.length != rows)
    dcr_error("'%s' has %ld rows, the matrix %ld %s", what, (long)b->batch.length, (long)rows,
              rows_are);
  UNPROTECT(1);
  return b;
}

/* Writes a dgCMatrix (genes x cells; slots i, p, x) with optional var names, obs and var
 * table. params: list(codes = DC_WRITER_* integer codes, values = double). */
static SEXP dcr_write(SEXP path, SEXP n_genes, SEXP p, SEXP i, SEXP x, SEXP var_names,
                      SEXP obs, SEXP var, SEXP params, SEXP options)
{
  const char *cpath = string_arg(path, "path");
  size_t n_options = 0;
  const char *const *opts = strings_arg(options, &n_options, "options");
  int64_t genes = int64_arg(n_genes, "n_genes", 0, UINT32_MAX);
  check_csc(p, i, x, genes);
  size_t n_names = 0;
  const char *const *names = strings_arg(var_names, &n_names, "var_names");
  params_arg pa = params_of(params);
  SEXP bkeep, vkeep;
  batch_holder *b = table_arg(obs, "obs", XLENGTH(p) - 1, "cells (columns)", &bkeep);
  PROTECT(bkeep);
  batch_holder *v = table_arg(var, "var", (R_xlen_t)genes, "genes (rows)", &vkeep);
  PROTECT(vkeep);

  dc_writer *w = NULL;
  DCR_CHECK(dc_writer_create_opts(cpath, (uint32_t)genes, opts, n_options, &w),
            "dc_writer_create_opts");
  SEXP wkeep = PROTECT(R_MakeExternalPtr(w, Rf_install("deltacells_writer"), R_NilValue));
  R_RegisterCFinalizerEx(wkeep, writer_finalizer, TRUE);
  for (R_xlen_t k = 0; k < pa.n; k++)
    check_writer(dc_writer_set(w, pa.codes[k], (int64_t)pa.values[k]), "dc_writer_set", wkeep);
  if (names) check_writer(dc_writer_set_var_names(w, names, n_names), "dc_writer_set_var_names", wkeep);
  append_cells(w, wkeep, p, i, x);
  if (b) {
    dc_status s = dc_writer_append_obs(w, &b->batch, &b->schema); /* batch moved in */
    batch_holder_finalizer(bkeep);                                  /* schema released */
    check_writer(s, "dc_writer_append_obs", wkeep);
  }
  if (v) {
    dc_status s = dc_writer_set_var_table(w, &v->batch, &v->schema); /* batch moved in */
    batch_holder_finalizer(vkeep);                                     /* schema released */
    check_writer(s, "dc_writer_set_var_table", wkeep);
  }
  check_writer(dc_writer_finish(w), "dc_writer_finish", wkeep);
  writer_finalizer(wkeep);
  UNPROTECT(3);
  return R_NilValue;
}


/* An array of cd_write(cellm =, binm =, results =) as the one-column batch of
 * dc_chromdata_array: list(values = double | integer | logical vector in row-major order,
 * shape = double vector); nested fixed-size lists, the shape in the field metadata (freed
 * by the caller after the library call: *meta). */
static void build_array_batch(batch_holder *b, SEXP x, const char *what, char **meta)
{
  if (TYPEOF(x) != VECSXP || XLENGTH(x) != 2) dcr_error("'%s': expected list(values, shape)", what);
  SEXP v = VECTOR_ELT(x, 0), shape = VECTOR_ELT(x, 1);
  int t = TYPEOF(v);
  if (t != REALSXP && t != INTSXP && t != LGLSXP)
    dcr_error("'%s': an array holds numbers or logicals, not %s", what, Rf_type2char(t));
  if (TYPEOF(shape) != REALSXP || XLENGTH(shape) < 1 || XLENGTH(shape) > 8)
    dcr_error("'%s': the shape has 1 to 8 dimensions", what);
  double total = 1;
  for (R_xlen_t d = 0; d < XLENGTH(shape); d++) total *= REAL(shape)[d];
  if (total != (double)XLENGTH(v)) dcr_error("'%s': the shape does not match the values", what);
  for (R_xlen_t i = 0; i < XLENGTH(v); i++)
    if ((t == REALSXP && R_IsNA(REAL(v)[i])) || (t == INTSXP && INTEGER(v)[i] == NA_INTEGER) ||
        (t == LGLSXP && LOGICAL(v)[i] == NA_LOGICAL))
      dcr_error("'%s': arrays have no NA (element %ld)", what, (long)i + 1);
  int nd = (int)XLENGTH(shape);
  int ok = init_schema(&b->schema, "+s", "");
  b->schema.flags = 0;
  array_priv *pv = init_array(&b->batch, (int64_t)REAL(shape)[0], 1);
  if (!ok || !pv) dcr_error("out of memory");
  /* the struct owns the top list; each level owns the next (child_mem) */
  struct ArrowArray *top = (struct ArrowArray *)calloc(1, sizeof *top);
  struct ArrowSchema *ts = (struct ArrowSchema *)calloc(1, sizeof *ts);
  pv->child_mem = top;
  pv->child_ptrs = (struct ArrowArray **)calloc(1, sizeof(void *));
  b->schema.children = (struct ArrowSchema **)calloc(1, sizeof(void *));
  if (!top || !ts || !pv->child_ptrs || !b->schema.children) dcr_error("out of memory");
  pv->child_ptrs[0] = top;
  b->batch.children = pv->child_ptrs;
  b->batch.n_children = 1;
  b->schema.children[0] = ts;
  b->schema.n_children = 1;
  struct ArrowArray *a = top;
  struct ArrowSchema *s = ts;
  double rows = REAL(shape)[0];
  for (int d = 1; d < nd; d++) {
    char fmt[32];
    snprintf(fmt, sizeof fmt, "+w:%.0f", REAL(shape)[d]);
    if (!init_schema(s, fmt, d == 1 ? "value" : "item")) dcr_error("out of memory");
    array_priv *lp = init_array(a, (int64_t)rows, 1);
    if (!lp) dcr_error("out of memory");
    lp->child_mem = (struct ArrowArray *)calloc(1, sizeof *lp->child_mem);
    lp->child_ptrs = (struct ArrowArray **)calloc(1, sizeof(void *));
    s->children = (struct ArrowSchema **)calloc(1, sizeof(void *));
    if (!lp->child_mem || !lp->child_ptrs || !s->children) dcr_error("out of memory");
    s->children[0] = (struct ArrowSchema *)calloc(1, sizeof *s);
    if (!s->children[0]) dcr_error("out of memory");
    s->n_children = 1;
    lp->child_ptrs[0] = lp->child_mem;
    a->children = lp->child_ptrs;
    a->n_children = 1;
    if (d > 1) s->flags = 0;
    a = lp->child_mem;
    s = s->children[0];
    rows *= REAL(shape)[d];
  }
  if (!init_schema(s, t == REALSXP ? "g" : t == INTSXP ? "i" : "b", nd == 1 ? "value" : "item"))
    dcr_error("out of memory");
  if (nd > 1) s->flags = 0;
  ts->flags = 0;
  array_priv *vp = init_array(a, XLENGTH(v), 2);
  if (!vp) dcr_error("out of memory");
  size_t bytes = t == REALSXP ? (size_t)XLENGTH(v) * 8 : t == INTSXP ? (size_t)XLENGTH(v) * 4 : ((size_t)XLENGTH(v) + 7) / 8;
  void *data = calloc(bytes ? bytes : 1, 1);
  if (!data) dcr_error("out of memory");
  if (t == REALSXP) memcpy(data, REAL(v), bytes);
  else if (t == INTSXP) memcpy(data, INTEGER(v), bytes);
  else
    for (R_xlen_t i = 0; i < XLENGTH(v); i++)
      if (LOGICAL(v)[i]) ((uint8_t *)data)[i >> 3] |= (uint8_t)(1u << (i & 7));
  vp->bufs[1] = data;
  vp->ptrs[1] = data;
  /* field metadata {"shape": "[d0,d1,...]"} */
  char text[256];
  int at = snprintf(text, sizeof text, "[");
  for (int d = 0; d < nd; d++) at += snprintf(text + at, sizeof text - (size_t)at, "%s%.0f", d ? "," : "", REAL(shape)[d]);
  snprintf(text + at, sizeof text - (size_t)at, "]");
  int32_t count = 1, kl = 5, vl = (int32_t)strlen(text);
  char *m = (char *)malloc(12 + 5 + (size_t)vl);
  if (!m) dcr_error("out of memory");
  memcpy(m, &count, 4);
  memcpy(m + 4, &kl, 4);
  memcpy(m + 8, "shape", 5);
  memcpy(m + 13, &vl, 4);
  memcpy(m + 17, text, (size_t)vl);
  ts->metadata = m;
  *meta = m;
}

/* One extra part of cd_write: list(op, key, kind, data) with op 0 = bins, 1 = bin tracks,
 * 2 = intervals, 3 = points (data a table; key / kind strings or NULL); 4 = set_table
 * (key "traces" / "cells", data a table); 5 = add_array (kind "cellm" / "binm", key, data
 * list(values, shape)); 6 = add_result (key = the path, a character vector; kind = the
 * attributes as JSON; data a table, list(values, shape) or NULL; `op 7` below); 7 = set_json
 * (kind, key or NULL, data = the JSON text); 8 = set_categories (key = the column, data a
 * one-column table). Checked before the writer is created (check_extra), applied by
 * cd_writer_extra in order. */
static void check_extra(SEXP e)
{
  if (TYPEOF(e) != VECSXP || XLENGTH(e) != 4) dcr_error("'extras': each entry must be list(op, key, kind, table)");
  int op = (int)int64_arg(VECTOR_ELT(e, 0), "op", 0, 8);
  SEXP key = VECTOR_ELT(e, 1), kind = VECTOR_ELT(e, 2);
  size_t n;
  if (op == 6) strings_arg(key, &n, "path");
  else if (op >= 2 && !(op == 7 && Rf_isNull(key))) string_arg(key, "key");
  if (!Rf_isNull(kind)) string_arg(kind, "kind");
  if (op == 7) string_arg(VECTOR_ELT(e, 3), "json");
}

/* Applies extras of op 4 to 8 (the content of C API 1.1 §6.1). */
static void cd_writer_content(dc_chromdata_writer *w, SEXP wkeep, SEXP e, int op)
{
  SEXP key = VECTOR_ELT(e, 1), kind = VECTOR_ELT(e, 2), data = VECTOR_ELT(e, 3);
  if (op == 7) {
    check_writer(dc_chromdata_writer_set_json(w, string_arg(kind, "kind"),
                                              Rf_isNull(key) ? NULL : string_arg(key, "key"),
                                              string_arg(data, "json")),
                 "dc_chromdata_writer_set_json", wkeep);
    return;
  }
  size_t n = 0;
  const char *const *path = op == 6 ? strings_arg(key, &n, "path") : NULL;
  const char *ckey = op == 6 ? NULL : string_arg(key, "key");
  const char *ckind = Rf_isNull(kind) ? NULL : string_arg(kind, "kind");
  if (op == 6 && Rf_isNull(data)) {
    check_writer(dc_chromdata_writer_add_result(w, path, n, ckind, NULL, NULL),
                 "dc_chromdata_writer_add_result", wkeep);
    return;
  }
  SEXP bkeep;
  batch_holder *b = new_batch(&bkeep);
  PROTECT(bkeep);
  char *meta = NULL;
  int is_array = op == 5 || (op == 6 && !Rf_inherits(data, "data.frame"));
  if (is_array) build_array_batch(b, data, ckey ? ckey : "results", &meta);
  else build_batch(b, data, ckey ? ckey : "results");
  dc_status s;
  const char *fn;
  switch (op) {
  case 4: s = dc_chromdata_writer_set_table(w, ckey, &b->batch, &b->schema); fn = "dc_chromdata_writer_set_table"; break;
  case 5: s = dc_chromdata_writer_add_array(w, ckind, ckey, &b->batch, &b->schema); fn = "dc_chromdata_writer_add_array"; break;
  case 6: s = dc_chromdata_writer_add_result(w, path, n, ckind, &b->batch, &b->schema); fn = "dc_chromdata_writer_add_result"; break;
  default: s = dc_chromdata_writer_set_categories(w, ckey, &b->batch, &b->schema); fn = "dc_chromdata_writer_set_categories"; break;
  }
  if (meta) {
    b->schema.children[0]->metadata = NULL;
    free(meta);
  }
  batch_holder_finalizer(bkeep);
  check_writer(s, fn, wkeep);
  UNPROTECT(1);
}

static void cd_writer_extra(dc_chromdata_writer *w, SEXP wkeep, SEXP e)
{
  int op = (int)int64_arg(VECTOR_ELT(e, 0), "op", 0, 8);
  if (op >= 4) {
    cd_writer_content(w, wkeep, e, op);
    return;
  }
  SEXP key = VECTOR_ELT(e, 1), kind = VECTOR_ELT(e, 2);
  const char *ckey = op >= 2 ? string_arg(key, "key") : NULL;
  const char *ckind = Rf_isNull(kind) ? NULL : string_arg(kind, "kind");
  SEXP bkeep;
  batch_holder *b = new_batch(&bkeep);
  PROTECT(bkeep);
  build_batch(b, VECTOR_ELT(e, 3), op == 0 ? "bins" : op == 1 ? "bin_tracks" : ckey);
  dc_status s;
  const char *fn;
  if (op == 0) {
    s = dc_chromdata_writer_set_bins(w, &b->batch, &b->schema); /* batch moved in */
    fn = "dc_chromdata_writer_set_bins";
  } else if (op == 1) {
    s = dc_chromdata_writer_set_bin_tracks(w, &b->batch, &b->schema);
    fn = "dc_chromdata_writer_set_bin_tracks";
  } else {
    s = dc_chromdata_writer_add_table(w, op == 2 ? "intervals" : "points", ckey, ckind,
                                      &b->batch, &b->schema);
    fn = "dc_chromdata_writer_add_table";
  }
  batch_holder_finalizer(bkeep); /* schema released */
  check_writer(s, fn, wkeep);
  UNPROTECT(1);
}

/* Writes a spot data.frame (chrom, start, end, trace_id, [cell_id], [x, y, z], ...) as a
 * ChromData store at a path or URL. params: list(codes = DC_CDW_* codes, values); extras:
 * list of cd_writer_extra entries (bins first); options: "key=value" strings or NULL. */
static SEXP dcr_cd_write(SEXP path, SEXP spots, SEXP params, SEXP extras, SEXP options)
{
  const char *cpath = string_arg(path, "path");
  size_t n_options = 0;
  const char *const *opts = strings_arg(options, &n_options, "options");
  params_arg pa = params_of(params);
  if (TYPEOF(extras) != VECSXP) dcr_error("'extras' must be a list");
  for (R_xlen_t k = 0; k < XLENGTH(extras); k++) check_extra(VECTOR_ELT(extras, k));
  SEXP bkeep;
  batch_holder *b = new_batch(&bkeep);
  PROTECT(bkeep);
  build_batch(b, spots, "spots"); /* R errors (bad column types) before any library call */

  dc_chromdata_writer *w = NULL;
  DCR_CHECK(dc_chromdata_writer_create_opts(cpath, opts, n_options, &w),
            "dc_chromdata_writer_create_opts");
  SEXP wkeep = PROTECT(R_MakeExternalPtr(w, Rf_install("deltacells_cd_writer"), R_NilValue));
  R_RegisterCFinalizerEx(wkeep, cd_writer_finalizer, TRUE);
  for (R_xlen_t k = 0; k < pa.n; k++)
    check_writer(dc_chromdata_writer_set(w, pa.codes[k], (int64_t)pa.values[k]),
                 "dc_chromdata_writer_set", wkeep);
  for (R_xlen_t k = 0; k < XLENGTH(extras); k++) cd_writer_extra(w, wkeep, VECTOR_ELT(extras, k));
  dc_status s = dc_chromdata_writer_append(w, &b->batch, &b->schema); /* batch moved in */
  batch_holder_finalizer(bkeep);                                       /* schema released */
  check_writer(s, "dc_chromdata_writer_append", wkeep);
  check_writer(dc_chromdata_writer_finish(w), "dc_chromdata_writer_finish", wkeep);
  cd_writer_finalizer(wkeep);
  UNPROTECT(2);
  return R_NilValue;
}

static SEXP dcr_versions(void)
{
  const char *names[] = {"version", "abi_version", "header_abi_version"};
  SEXP out = PROTECT(named_list(3, names));
  SET_VECTOR_ELT(out, 0, Rf_mkString(dc_version()));
  SET_VECTOR_ELT(out, 1, Rf_ScalarInteger((int)dc_abi_version()));
  SET_VECTOR_ELT(out, 2, Rf_ScalarInteger(DC_ABI_VERSION));
  UNPROTECT(1);
  return out;
}

static SEXP dcr_init(SEXP ns)
{
  if (TYPEOF(ns) != ENVSXP) dcr_error("dcr_init needs the package namespace");
  dcr_namespace = ns;
  R_PreserveObject(ns);
  return R_NilValue;
}

static const R_CallMethodDef call_methods[] = {
    {"dcr_init", (DL_FUNC)&dcr_init, 1},
    {"dcr_versions", (DL_FUNC)&dcr_versions, 0},
    {"dcr_open", (DL_FUNC)&dcr_open, 2},
    {"dcr_close", (DL_FUNC)&dcr_close, 1},
    {"dcr_info", (DL_FUNC)&dcr_info, 1},
    {"dcr_set", (DL_FUNC)&dcr_set, 3},
    {"dcr_genes", (DL_FUNC)&dcr_genes, 1},
    {"dcr_gene_order", (DL_FUNC)&dcr_gene_order, 1},
    {"dcr_read_cells", (DL_FUNC)&dcr_read_cells, 2},
    {"dcr_batches", (DL_FUNC)&dcr_batches, 4},
    {"dcr_batches_next", (DL_FUNC)&dcr_batches_next, 1},
    {"dcr_shuffled_order", (DL_FUNC)&dcr_shuffled_order, 3},
    {"dcr_obs", (DL_FUNC)&dcr_obs, 3},
    {"dcr_var_table", (DL_FUNC)&dcr_var_table, 2},
    {"dcr_write", (DL_FUNC)&dcr_write, 10},
    {"dcr_cd_open", (DL_FUNC)&dcr_cd_open, 2},
    {"dcr_cd_info", (DL_FUNC)&dcr_cd_info, 1},
    {"dcr_cd_query", (DL_FUNC)&dcr_cd_query, 5},
    {"dcr_cd_iter", (DL_FUNC)&dcr_cd_iter, 4},
    {"dcr_stream_next", (DL_FUNC)&dcr_stream_next, 2},
    {"dcr_cd_write", (DL_FUNC)&dcr_cd_write, 5},
    {"dcr_cd_content", (DL_FUNC)&dcr_cd_content, 5},
    {NULL, NULL, 0}};

void R_init_deltacells(DllInfo *dll)
{
  R_registerRoutines(dll, NULL, call_methods, NULL, NULL);
  R_useDynamicSymbols(dll, FALSE);
  R_forceSymbols(dll, TRUE);
}
