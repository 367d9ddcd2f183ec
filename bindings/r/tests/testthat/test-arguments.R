# Bad arguments to every entry point: each ends in an R error of class deltacells_error
# raised from the user's call -- never a crash, a warning, or a .Call shown to the user.
# The second part calls the shim's routines directly (as deltacells:::.Call could), with
# NULL, NA, NaN, negative, non-integer, huge and wrong-typed values.

bad_values <- list(NULL, NA, NA_real_, NaN, -1, 1.5, Inf, 2^60, "a", TRUE, list(1), c(1, 2),
                   character(0), NA_character_, new.env())

small_dataset <- function() {
  m <- Matrix::sparseMatrix(i = c(1, 3, 2, 4), j = c(1, 1, 2, 3), x = c(5, 1, 2, 7),
                            dims = c(4, 3), dimnames = list(paste0("g", 1:4), NULL))
  path <- file.path(tempdir(), "args.dc")
  dc_write(m, path, obs = data.frame(n = 1:3), overwrite = TRUE)
  dc_open(path)
}

small_store <- function() {
  spots <- data.frame(chrom = "chr1", start = c(0L, 100L), end = c(100L, 200L),
                      trace_id = c("a", "a"), x = c(1, NaN), y = 0, z = 0)
  path <- file.path(tempdir(), "args.cdz")
  cd_write(spots, path, overwrite = TRUE)
  cd_open(path)
}

# f(value) must fail with a deltacells_error whose call is not the shim's.
expect_arg_error <- function(f, value, label) {
  e <- tryCatch({ f(value); NULL }, deltacells_error = function(e) e,
                error = function(e) structure(list(message = conditionMessage(e)), class = "other"),
                warning = function(w) structure(list(message = conditionMessage(w)), class = "other"))
  ok <- inherits(e, "deltacells_error")
  call <- if (ok) paste(deparse(conditionCall(e)), collapse = " ") else ""
  expect(ok && !grepl(".Call|structure\\(", call),
         sprintf("%s with %s: %s", label, paste(deparse(value), collapse = " "),
                 if (is.null(e)) "no error" else if (!ok) paste("not a deltacells_error:", e$message)
                 else paste("call is", call)))
}

test_that("exported dataset functions refuse bad arguments", {
  ds <- small_dataset()
  for (v in bad_values) {
    expect_arg_error(dc_open, v, "dc_open(path)")
    expect_arg_error(function(v) dc_info(v), v, "dc_info(ds)")
    expect_arg_error(function(v) dc_genes(v), v, "dc_genes(ds)")
    expect_arg_error(function(v) dc_read_cells(v, 1), v, "dc_read_cells(ds)")
    if (!is.numeric(v) || length(v) != 1 || (is.finite(v) && v >= 1 && v == trunc(v) && v <= 3))
      NULL
    else expect_arg_error(function(v) dc_read_cells(ds, v), v, "dc_read_cells(cells)")
    if (!isTRUE(v)) expect_arg_error(function(v) dc_read_cells(ds, 1, genes_by_cells = v), v,
                                     "genes_by_cells")
    if (!is.null(v)) {
      expect_arg_error(function(v) dc_set(ds, threads = v), v, "dc_set(threads)")
      if (!identical(v, character(0)))  # character(0): all columns
        expect_arg_error(function(v) dc_obs(ds, columns = v), v, "dc_obs(columns)")
      expect_arg_error(function(v) dc_batches(ds, batch_size = v), v, "dc_batches(batch_size)")
      expect_arg_error(function(v) dc_batches(ds, read_ahead = v), v, "dc_batches(read_ahead)")
      expect_arg_error(function(v) dc_shuffled_order(ds, seed = v), v, "dc_shuffled_order(seed)")
      expect_arg_error(function(v) dc_shuffled_order(ds, 1, window_tiles = v), v,
                       "dc_shuffled_order(window_tiles)")
      expect_arg_error(function(v) dc_write(Matrix::Diagonal(2), file.path(tempdir(), "x.dc"),
                                            tile_size = v), v, "dc_write(tile_size)")
    }
    expect_arg_error(function(v) dc_write(v, file.path(tempdir(), "x.dc")), v, "dc_write(mat)")
    expect_arg_error(function(v) dc_next_batch(v), v, "dc_next_batch(it)")
    expect_arg_error(function(v) dc_has_next(v), v, "dc_has_next(it)")
    expect_arg_error(function(v) dc_close(v), v, "dc_close(x)")
    expect_arg_error(function(v) dc_for_each_batch(ds, v), v, "dc_for_each_batch(FUN)")
  }
  # Columns whose R class would be lost (Date, POSIXct, ...) are refused, not written as
  # bare numbers.
  m3 <- Matrix::sparseMatrix(i = 1:3, j = 1:3, x = 1, dims = c(3, 3))
  e <- expect_error(dc_write(m3, file.path(tempdir(), "x.dc"),
                             obs = data.frame(day = as.Date("2024-01-01") + 0:2)),
                    class = "deltacells_invalid_argument")
  expect_match(conditionMessage(e), "column 'day': R class 'Date' is not supported")
  expect_false(file.exists(file.path(tempdir(), "x.dc")))
  # 1-based numbers in R's own errors; the library's out-of-range status kept.
  e <- expect_error(dc_read_cells(ds, c(1, 4)), class = "deltacells_out_of_range")
  expect_match(conditionMessage(e), "cells\\[2\\] = 4 is past the last cell: the dataset has 3 cells")
  expect_equal(deparse(conditionCall(e)), "dc_read_cells(ds, c(1, 4))")
  e <- expect_error(dc_read_cells(ds, 0), class = "deltacells_invalid_argument")
  expect_match(conditionMessage(e), "cells\\[1\\] = 0 is not a 1-based cell number")
  dc_close(ds)
  e <- expect_error(dc_read_cells(ds, 1), "closed")
  expect_equal(deparse(conditionCall(e)), "dc_read_cells(ds, 1)")
})

test_that("exported ChromData functions refuse bad arguments", {
  cd <- small_store()
  for (v in bad_values) {
    expect_arg_error(cd_open, v, "cd_open(path)")
    expect_arg_error(function(v) cd_info(v), v, "cd_info(cd)")
    if (!identical(v, "a")) {  # "a" is a trace of the store
      expect_arg_error(function(v) cd_trace(cd, v), v, "cd_trace(id)")
      expect_arg_error(function(v) cd_cell(cd, v), v, "cd_cell(id)")
      expect_arg_error(function(v) cd_chrom(cd, v), v, "cd_chrom(name)")
      expect_arg_error(function(v) cd_table(cd, v), v, "cd_table(name)")
      expect_arg_error(function(v) cd_keys(cd, v), v, "cd_keys(kind)")
      expect_arg_error(function(v) cd_categories(cd, "spots", v), v, "cd_categories(column)")
    }
    if (!is.null(v)) {
      if (!identical(v, character(0)))  # character(0): all columns
        expect_arg_error(function(v) cd_trace(cd, "a", columns = v), v, "cd_trace(columns)")
      expect_arg_error(function(v) cd_write(v, file.path(tempdir(), "x.cdz")), v, "cd_write(spots)")
      expect_arg_error(function(v) cd_write(data.frame(a = 1), file.path(tempdir(), "x.cdz"),
                                            threads = v), v, "cd_write(threads)")
    }
    if (!is.logical(v) || length(v) != 1 || is.na(v))
      expect_arg_error(function(v) cd_spots(cd, original_order = v), v, "cd_spots(original_order)")
    if (!is.null(v)) expect_arg_error(function(v) cd_iter_traces(cd, batch = v), v, "cd_iter_traces(batch)")
    expect_arg_error(function(v) cd_next(v), v, "cd_next(it)")
    expect_arg_error(function(v) cd_close(v), v, "cd_close(x)")
  }
  e <- expect_error(cd_write(data.frame(chrom = "chr1", start = 0L, end = 1L, trace_id = "a",
                                        seen = as.POSIXct("2024-01-01", tz = "UTC")),
                             file.path(tempdir(), "x.cdz")),
                    class = "deltacells_invalid_argument")
  expect_match(conditionMessage(e), "column 'seen': R class 'POSIXct' is not supported")
  # Closing an iterator ends it; closing twice is harmless.
  it <- cd_iter_traces(cd, batch = 1)
  dc_close(it)
  expect_null(cd_next(it))
  dc_close(it)
  expect_false(file.exists(file.path(tempdir(), "x.cdz")))
  cd_close(cd)
})

test_that("the shim's routines refuse bad arguments when called directly", {
  ds <- small_dataset()
  cd <- small_store()
  dsp <- ds$ptr
  cdp <- cd$ptr
  sym <- function(name) get(name, envir = asNamespace("deltacells"))
  call_shim <- function(name, ...) .Call(sym(name), ...)
  params <- list(codes = integer(0), values = numeric(0))
  df <- list(a = 1:2)
  shim_cases <- list(
    dcr_open = function(v) call_shim("dcr_open", v, NULL),
    dcr_open_options = function(v) call_shim("dcr_open", ds$path, v),
    dcr_info = function(v) call_shim("dcr_info", v),
    dcr_set_param = function(v) call_shim("dcr_set", dsp, v, 1),
    dcr_set_value = function(v) call_shim("dcr_set", dsp, 0L, v),
    dcr_genes = function(v) call_shim("dcr_genes", v),
    dcr_gene_order = function(v) call_shim("dcr_gene_order", v),
    dcr_read_cells = function(v) call_shim("dcr_read_cells", dsp, v),
    dcr_batches_cells = function(v) call_shim("dcr_batches", dsp, v, 1, 1),
    dcr_batches_size = function(v) call_shim("dcr_batches", dsp, 1, v, 1),
    dcr_batches_ahead = function(v) call_shim("dcr_batches", dsp, 1, 1, v),
    dcr_batches_next = function(v) call_shim("dcr_batches_next", v),
    dcr_shuffled_seed = function(v) call_shim("dcr_shuffled_order", dsp, v, 1),
    dcr_shuffled_window = function(v) call_shim("dcr_shuffled_order", dsp, 1, v),
    dcr_obs = function(v) call_shim("dcr_obs", dsp, v, 0L),
    dcr_obs_int64 = function(v) call_shim("dcr_obs", dsp, NULL, v),
    dcr_var_table = function(v) call_shim("dcr_var_table", v, 0L),
    dcr_write_n_genes = function(v) call_shim("dcr_write", file.path(tempdir(), "y.dc"), v,
                                              c(0L, 1L), 0L, 1, NULL, NULL, NULL, params, NULL),
    dcr_write_p = function(v) call_shim("dcr_write", file.path(tempdir(), "y.dc"), 4, v, 0L, 1,
                                        NULL, NULL, NULL, params, NULL),
    dcr_write_i = function(v) call_shim("dcr_write", file.path(tempdir(), "y.dc"), 4, c(0L, 1L),
                                        v, 1, NULL, NULL, NULL, params, NULL),
    dcr_write_x = function(v) call_shim("dcr_write", file.path(tempdir(), "y.dc"), 4, c(0L, 1L),
                                        0L, v, NULL, NULL, NULL, params, NULL),
    dcr_write_obs = function(v) call_shim("dcr_write", file.path(tempdir(), "y.dc"), 4,
                                          c(0L, 1L), 0L, 1, NULL, list(v), NULL, params, NULL),
    dcr_write_var = function(v) call_shim("dcr_write", file.path(tempdir(), "y.dc"), 4,
                                          c(0L, 1L), 0L, 1, NULL, NULL, list(v), params, NULL),
    dcr_write_params = function(v) call_shim("dcr_write", file.path(tempdir(), "y.dc"), 4,
                                             c(0L, 1L), 0L, 1, NULL, NULL, NULL, v, NULL),
    dcr_write_options = function(v) call_shim("dcr_write", file.path(tempdir(), "y.dc"), 4,
                                              c(0L, 1L), 0L, 1, NULL, NULL, NULL, params, v),
    dcr_cd_info = function(v) call_shim("dcr_cd_info", v),
    dcr_cd_query_what = function(v) call_shim("dcr_cd_query", cdp, v, "a", NULL, 0L),
    dcr_cd_query_id = function(v) call_shim("dcr_cd_query", cdp, 0L, v, NULL, 0L),
    dcr_cd_query_spots = function(v) call_shim("dcr_cd_query", cdp, 4L, v, NULL, 0L),
    dcr_cd_query_cats = function(v) call_shim("dcr_cd_query", cdp, 6L, "spots", v, 0L),
    dcr_cd_iter_what = function(v) call_shim("dcr_cd_iter", cdp, v, 1, NULL),
    dcr_cd_iter_batch = function(v) call_shim("dcr_cd_iter", cdp, 0L, v, NULL),
    dcr_cd_iter_columns = function(v) call_shim("dcr_cd_iter", cdp, 0L, 1, v),
    dcr_stream_next = function(v) call_shim("dcr_stream_next", v, 0L),
    dcr_stream_next_int64 = function(v) call_shim("dcr_stream_next",
                                                  call_shim("dcr_cd_iter", cdp, 0L, 1, NULL), v),
    dcr_cd_write_spots = function(v) call_shim("dcr_cd_write", file.path(tempdir(), "y.cdz"), v,
                                               params, list(), NULL),
    dcr_cd_write_extras = function(v) call_shim("dcr_cd_write", file.path(tempdir(), "y.cdz"),
                                                df, params, list(v), NULL),
    dcr_cd_write_params = function(v) call_shim("dcr_cd_write", file.path(tempdir(), "y.cdz"),
                                                df, v, list(), NULL),
    dcr_cd_write_options = function(v) call_shim("dcr_cd_write", file.path(tempdir(), "y.cdz"),
                                                 df, params, list(), v))
  for (name in names(shim_cases)) {
    for (v in c(bad_values, list(list(codes = 1L, values = NaN), list(1L, NULL, NULL, df),
                                 c(0L, 5L), c(0L, -1L), list(a = 1:3, b = 1:2),
                                 structure(list(1:2), names = NA_character_),
                                 list(a = NULL), list(a = new.env()), list(a = 1:2, b = NULL),
                                 list(a = as.Date("2024-01-01")),
                                 factor(c("a", "b"))[c(1, 3)],
                                 structure(c(1L, 7L), levels = "a", class = "factor")))) {
      r <- tryCatch({ shim_cases[[name]](v); "ok" }, error = function(e) e)
      if (!identical(r, "ok")) expect_s3_class(r, "deltacells_error")
    }
  }
  unlink(file.path(tempdir(), c("y.dc", "y.cdz")), recursive = TRUE)  # TRUE is a valid n_genes
  # Genuinely wrong values must fail (not "ok"):
  expect_error(call_shim("dcr_set", dsp, 0L, NaN), class = "deltacells_invalid_argument")
  expect_error(call_shim("dcr_set", dsp, NA_integer_, 1), class = "deltacells_invalid_argument")
  expect_error(call_shim("dcr_read_cells", dsp, 2^60), class = "deltacells_invalid_argument")
  expect_error(call_shim("dcr_batches", dsp, 1, 0, 1), class = "deltacells_invalid_argument")
  expect_error(call_shim("dcr_batches", dsp, 1, 1, 2^40), class = "deltacells_invalid_argument")
  expect_error(call_shim("dcr_batches", dsp, 4, 1, 1), class = "deltacells_out_of_range")
  expect_error(call_shim("dcr_batches_next", dsp), class = "deltacells_invalid_argument")
  expect_error(call_shim("dcr_shuffled_order", dsp, 2^60, 1), class = "deltacells_invalid_argument")
  expect_error(call_shim("dcr_write", file.path(tempdir(), "y.dc"), 4, c(0L, 5L), 0L, 1, NULL,
                         NULL, NULL, params, NULL), "last column pointer")
  expect_error(call_shim("dcr_write", file.path(tempdir(), "y.dc"), NaN, c(0L, 1L), 0L, 1,
                         NULL, NULL, NULL, params, NULL), "n_genes")
  expect_error(call_shim("dcr_write", file.path(tempdir(), "y.dc"), 4, c(0L, 1L), 9L, 1,
                         NULL, NULL, NULL, params, NULL), "outside")
  expect_error(call_shim("dcr_write", file.path(tempdir(), "y.dc"), 4, c(0L, 1L), 0L, 1,
                         NULL, NULL, list(a = 1:3), params, NULL), "'var' has 3 rows")
  expect_error(call_shim("dcr_cd_write", file.path(tempdir(), "y.cdz"),
                         list(f = structure(c(1L, 7L), levels = "a", class = "factor")),
                         params, list(), NULL), "not a level")
  expect_false(file.exists(file.path(tempdir(), "y.dc")))
  expect_false(file.exists(file.path(tempdir(), "y.cdz")))
  dc_close(ds)
  cd_close(cd)
})
