# ChromData queries against the answers the independent Python writer computed with pandas
# (tests/chromdata/make_stores.py). scripts/test-r.sh writes the stores and CSV copies of
# some expected answers to DELTACELLS_TEST_STORES; with DELTACELLS_REQUIRE_STORES=1 (CI) a
# missing directory is a failure, not a skip.

stores <- Sys.getenv("DELTACELLS_TEST_STORES")
if (!nzchar(stores) || !dir.exists(stores)) {
  if (Sys.getenv("DELTACELLS_REQUIRE_STORES") == "1")
    stop("DELTACELLS_TEST_STORES is not set to a directory of test stores")
}

expected <- function(name) {
  utils::read.csv(file.path(stores, "r-expected", name), check.names = FALSE,
                  stringsAsFactors = FALSE, na.strings = "NA")
}

as_plain <- function(df) {
  df[] <- lapply(df, function(v) if (is.factor(v)) as.character(v) else v)
  df
}

test_that("queries equal the pandas answers in every layout", {
  skip_if(!nzchar(stores), "no ChromData test stores (DELTACELLS_TEST_STORES)")
  for (name in c("main_20.chromdata.zarr", "main_21.cdz", "main_22.cdz")) {
    cd <- cd_open(file.path(stores, name))
    expect_s3_class(cd, "deltacells_chromdata")
    info <- cd_info(cd)
    expect_equal(info$format_major, 2L)
    expect_true(info$has_cell_id)

    for (q in list(list(f = cd_trace, id = "t0", cols = "coords", csv = "trace_t0_coords.csv"),
                   list(f = cd_trace, id = "t0", cols = NULL, csv = "trace_t0_all.csv"),
                   list(f = cd_cell, id = "cell0", cols = "coords", csv = "cell_cell0_coords.csv"),
                   list(f = cd_chrom, id = "chr2", cols = "coords", csv = "chrom_chr2_coords.csv"))) {
      got <- q$f(cd, q$id, columns = q$cols)
      want <- expected(q$csv)
      expect_equal(names(got), names(want))
      expect_equal(as_plain(got), want, ignore_attr = TRUE, tolerance = 1e-6)
    }
    t0 <- cd_trace(cd, "t0")
    expect_true(is.factor(t0$trace_id) || is.character(t0$trace_id))
    expect_type(t0[["spot_id"]], "double")          # int64 -> double
    expect_type(t0[["odd name/col"]], "integer")    # int16 -> integer
    expect_type(t0[["spot_tracks/flag"]], "logical")

    expect_equal(nrow(cd_spots(cd)), info$n_spots)
    expect_equal(nrow(cd_spots(cd, original_order = TRUE, columns = "coords")), info$n_spots)
    expect_equal(nrow(cd_table(cd, "bins")), info$n_bins)
    expect_length(cd_keys(cd, "layers"), 2)
    expect_true("t0" %in% as.character(cd_categories(cd, "spots", "trace_id")))
    e <- expect_error(cd_trace(cd, "no such trace"), class = "deltacells_not_found")
    expect_match(conditionMessage(e), "no such trace")
    cd_close(cd)
  }
  expect_error(cd_open(file.path(stores, "missing.cdz")), class = "deltacells_not_found")
})

test_that("missing coordinates are NA; other NaN values stay NaN", {
  spots <- data.frame(chrom = "chr1", start = c(0L, 100L, 200L), end = c(100L, 200L, 300L),
                      trace_id = "t", x = c(1, NA, NaN), y = c(NaN, 2, 3), z = 0,
                      q = c(NaN, NA, 1))
  path <- file.path(tempdir(), "na-rule.cdz")
  cd_write(spots, path, overwrite = TRUE)
  cd <- cd_open(path)
  for (got in list(cd_trace(cd, "t"), cd_spots(cd, original_order = TRUE),
                   cd_chrom(cd, "chr1", columns = "coords"))) {
    expect_identical(got$x, c(1, NA, NA))
    expect_identical(got$y, c(NA, 2, 3))
    expect_false(any(is.nan(got$x)))
  }
  q <- cd_spots(cd, original_order = TRUE)$q
  expect_true(is.nan(q[1]))                       # a stored NaN
  expect_true(is.na(q[2]) && !is.nan(q[2]))       # a null
  expect_equal(q[3], 1)
  if (nzchar(stores)) {
    t0 <- cd_trace(cd_open(file.path(stores, "main_22.cdz")), "t0")
    expect_false(any(is.nan(t0$x) | is.nan(t0$y) | is.nan(t0$z)))
    expect_true(anyNA(t0$x) || anyNA(t0$y) || anyNA(t0$z))
  }
})

test_that("64-bit integers are exact doubles, an error, or exact text", {
  skip_if(!nzchar(stores), "no ChromData test stores (DELTACELLS_TEST_STORES)")
  # spot_id holds 2^53 + 1 and -2^62 (scripts/test-r.sh writes this store with pandas).
  cd <- cd_open(file.path(stores, "big_int64.chromdata.zarr"))
  e <- expect_error(cd_trace(cd, "t0"), class = "deltacells_unsupported")
  expect_match(conditionMessage(e), "column 'spot_id', row [0-9]+: the 64-bit integer 9007199254740993")
  expect_equal(deparse(conditionCall(e)), 'cd_trace(cd, "t0")')
  t1 <- cd_trace(cd, "t1", columns = "spot_id")      # only exact values: doubles
  expect_type(t1$spot_id, "double")
  old <- options(deltacells.int64 = "character")
  on.exit(options(old))
  t0 <- cd_trace(cd, "t0", columns = "spot_id")
  expect_type(t0$spot_id, "character")
  expect_true(all(c("9007199254740993", "-4611686018427387904") %in% t0$spot_id))
  options(deltacells.int64 = "int64")
  expect_error(cd_trace(cd, "t0"), "deltacells.int64")
  options(old)
  # An int32 column holding -2^31 (the bit pattern of NA_integer_) is read as double, exactly;
  # one without it stays integer.
  f0 <- cd_trace(cd, "t0", columns = "fov")$fov
  expect_type(f0, "double")
  expect_true(-2^31 %in% f0)
  expect_false(anyNA(f0))
  expect_type(cd_trace(cd, "t1", columns = "fov")$fov, "integer")
})

test_that("iterating over traces and cells gives every spot once, in batches", {
  spots <- data.frame(chrom = rep(c("chr1", "chr2"), each = 6),
                      start = rep(c(0L, 100L, 200L), 4), end = rep(c(100L, 200L, 300L), 4),
                      trace_id = rep(c("a", "b", "c", "d"), each = 3),
                      cell_id = rep(c("c1", "c2"), each = 6),
                      x = c(1:11, NaN), y = 0, z = 0, n = 1:12)
  path <- file.path(tempdir(), "iter.cdz")
  cd_write(spots, path, overwrite = TRUE)
  cd <- cd_open(path)
  it <- cd_iter_traces(cd, batch = 3, columns = "n")
  expect_output(print(it), "iterator over traces")
  got <- list()
  while (!is.null(df <- cd_next(it))) got[[length(got) + 1]] <- df
  expect_null(cd_next(it))
  expect_equal(vapply(got, nrow, 1L), c(9L, 3L))     # 4 runs of 3 spots, 3 runs a batch
  all <- do.call(rbind, got)
  expect_equal(sort(all$n), 1:12)
  expect_equal(names(all), c("bin_id", "trace_id", "cell_id", "n"))
  cells <- list()
  it <- cd_iter_cells(cd, batch = 1, columns = "coords")
  while (!is.null(df <- cd_next(it))) cells[[length(cells) + 1]] <- df
  expect_equal(length(cells), 2L)
  expect_equal(vapply(cells, function(d) unique(as.character(d$cell_id)), ""), c("c1", "c2"))
  expect_true(is.na(cells[[2]]$x[6]) && !is.nan(cells[[2]]$x[6]))   # the NA rule
  expect_error(cd_iter_traces(cd, batch = 0), class = "deltacells_invalid_argument")
  expect_error(cd_iter_traces(cd, columns = "nope"), class = "deltacells_not_found")
  expect_error(cd_next(list()), class = "deltacells_invalid_argument")
  # An iterator left unfinished is released by the garbage collector.
  it <- cd_iter_traces(cd, batch = 1)
  invisible(cd_next(it))
  rm(it)
  invisible(gc())
})

test_that("cd_write takes a URL and options (C API section 7)", {
  spots <- data.frame(chrom = "chr1", start = c(0L, 100L, 200L), end = c(100L, 200L, 300L),
                      trace_id = c("a", "b", "a"), x = c(1, 2, 3), y = 0, z = 0)
  path <- file.path(tempdir(), "options.cdz")
  # Library settings are accepted for a local path too (and have no effect there).
  cd_write(spots, path, overwrite = TRUE, options = c(max_concurrency = 4))
  cd <- cd_open(path)
  expect_equal(cd_spots(cd, original_order = TRUE)$x, c(1, 2, 3))
  cd_close(cd)
  e <- expect_error(cd_write(spots, "s3://bucket/x.cdz", options = c(no_such_key = "1")),
                    class = "deltacells_invalid_argument")
  expect_match(conditionMessage(e), "no_such_key")
  expect_error(cd_write(spots, "https://example.org/x.cdz"), class = "deltacells_unsupported")
  # A URL whose server is gone: the upload fails with an I/O error naming the URL.
  e <- expect_error(cd_write(spots, "s3://bucket/x.cdz",
                             options = c(aws_endpoint = "http://127.0.0.1:9",
                                         aws_region = "us-east-1", aws_access_key_id = "k",
                                         aws_secret_access_key = "s", allow_http = "true",
                                         retries = 0, timeout_ms = 2000)),
                    class = "deltacells_io")
  expect_match(conditionMessage(e), "s3://bucket/x.cdz", fixed = TRUE)
  unlink(path)
})
