# Everything a store holds besides the spots: written by cd_write, read back by cd_cellm,
# cd_binm, cd_result, cd_uns, cd_contacts, cd_links, cd_attrs (C API 1.1, 5.1 and 6.1).

spots <- function() {
  data.frame(chrom = c("chr1", "chr2", "chr1", "chr1"), start = c(0L, 0L, 100L, 0L),
             end = c(100L, 100L, 200L, 100L),
             trace_id = factor(c("b", "a", "a", "b"), levels = c("b", "a", "unused")),
             cell_id = factor(c("c1", "c1", "c0", "c0"), levels = c("c1", "c0")),
             x = c(1, 2, 3, 4), y = 0, z = 0)
}

test_that("factor levels are kept: order and unused levels", {
  path <- file.path(tempdir(), "levels.chromdata.zarr")
  cd_write(spots(), path, overwrite = TRUE, layout = "flat",
           traces = data.frame(trace_id = c("a", "b", "unused"), n = c(1L, 2L, 3L)))
  cd <- cd_open(path)
  expect_equal(as.character(cd_categories(cd, "spots", "trace_id")), c("b", "a", "unused"))
  expect_equal(as.character(cd_categories(cd, "spots", "cell_id")), c("c1", "c0"))
  expect_equal(cd_table(cd, "traces")$n, c(2L, 1L, 3L))
  # canonical order by the level codes: cell c1 first, trace b before a
  s <- cd_spots(cd)
  expect_equal(as.character(s$cell_id[1]), "c1")
  expect_equal(as.character(s$trace_id[1]), "b")
  expect_equal(cd_info(cd)$n_traces, 3)
})

test_that("cellm, binm, results, uns, contacts and links round trip", {
  path <- file.path(tempdir(), "content.cdz")
  pca <- matrix(as.numeric(1:6), nrow = 2)          # 2 cells x 3
  cube <- array(1:12, dim = c(3L, 2L, 2L))          # 3 bins x 2 x 2
  tads <- data.frame(chrom = c("chr1", "chr2"), start = c(0L, 0L), end = c(200L, 100L))
  attr(tads, "provenance") <- list(kind = "tads", params = list(window = 3L))
  big <- matrix(seq(0, 34.5, by = 0.5), nrow = 10)   # 70 elements: a Zarr array in uns
  cd_write(spots(), path, overwrite = TRUE,
           cellm = list(pca = pca), binm = list(cube = cube, flag = c(TRUE, FALSE, TRUE)),
           results = list(tads = tads, dist = matrix(c(0.5, 1, 1.5, 2), 2),
                          ens = cd_mapping(n = 5L, mask = matrix(c(TRUE, FALSE, FALSE, TRUE), 2)),
                          note = list(text = "hi", ratio = NaN)),
           uns = list(a = 1L, big = big, small = c(1L, 2L, 3L), nested = list(name = "x")),
           contacts = data.frame(key = "hic", path = "/nowhere/x.mcool", format = "mcool"),
           links = list(list(key = "rna", path = "/nowhere/rna.h5ad", format = "h5ad")),
           intervals = list(tads = list(table = tads[, 1:3], kind = "domain", source_result = "tads")))
  cd <- cd_open(path)
  expect_equal(cd_cellm(cd, "pca"), pca)
  expect_equal(cd_binm(cd, "cube"), cube)
  expect_equal(cd_binm(cd, "flag"), c(TRUE, FALSE, TRUE))
  got <- cd_result(cd, "tads")
  expect_equal(got$end, c(200L, 100L))
  expect_equal(attr(got, "provenance")$kind, "tads")
  expect_equal(attr(got, "provenance")$params$window, 3L)
  expect_equal(cd_result(cd, "dist"), matrix(c(0.5, 1, 1.5, 2), 2))
  ens <- cd_result(cd, "ens")
  expect_s3_class(ens, "cd_mapping")
  expect_equal(names(ens), c("n", "mask"))
  expect_equal(ens$n, 5L)
  expect_equal(ens$mask, matrix(c(TRUE, FALSE, FALSE, TRUE), 2))
  note <- cd_result(cd, "note")
  expect_equal(note$text, "hi")
  expect_true(is.nan(note$ratio))
  u <- cd_uns(cd)
  expect_equal(u$big, big)
  expect_equal(u$small, c(1L, 2L, 3L))
  expect_equal(u$nested$name, "x")
  expect_equal(cd_attrs(cd, "uns")$big$`__uchrom_type__`, "array_ref")
  expect_equal(cd_contacts(cd)$resolved_path, "/nowhere/x.mcool")
  expect_equal(cd_links(cd)$key, "rna")
  expect_equal(cd_attrs(cd, "intervals", "tads")$source_result, "tads")
  expect_equal(sort(cd_keys(cd, "results")), sort(c("tads", "dist", "ens", "note")))
})

test_that("errors carry their status", {
  path <- file.path(tempdir(), "bad.chromdata.zarr")
  expect_error(cd_write(spots(), path, overwrite = TRUE, cellm = list(pca = matrix(1, 3, 2))),
               class = "deltacells_invalid_argument")
  expect_false(file.exists(path))
  expect_error(cd_write(spots(), path, overwrite = TRUE, cellm = list(pca = c("a", "b"))),
               class = "deltacells_invalid_argument")
  cd_write(spots(), path, overwrite = TRUE)
  cd <- cd_open(path)
  expect_error(cd_result(cd, "nope"), class = "deltacells_not_found")
  expect_error(cd_cellm(cd, "nope"), class = "deltacells_not_found")
})

test_that("cd_open takes options (C API section 7) and URLs", {
  path <- file.path(tempdir(), "opts.chromdata.zarr")
  cd_write(spots(), path, overwrite = TRUE, layout = "flat")
  plain <- cd_info(cd_open(path))
  cd <- cd_open(path, options = c(max_concurrency = 4, timeout_ms = 2000))
  expect_equal(cd_info(cd), plain)
  expect_equal(cd_spots(cd), cd_spots(cd_open(path)))
  e <- expect_error(cd_open(path, options = c(no_such_option = 1)),
                    class = "deltacells_invalid_argument")
  expect_match(conditionMessage(e), "dc_chromdata_open_opts: .*no_such_option")
  # An S3 endpoint that refuses connections: an I/O error naming the URL, not the secret.
  e <- expect_error(cd_open("s3://bucket/x.cdz",
                            options = c(aws_endpoint = "http://127.0.0.1:1", aws_region = "us-east-1",
                                        aws_access_key_id = "id", aws_secret_access_key = "s3cr3t-VALUE",
                                        allow_http = "true", retries = 0)),
                    class = "deltacells_io")
  expect_match(conditionMessage(e), "s3://bucket/x.cdz", fixed = TRUE)
  expect_false(grepl("s3cr3t-VALUE", conditionMessage(e), fixed = TRUE))
})
