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
