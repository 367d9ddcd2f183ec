# Round trips through the library against the R objects written, and error conditions.

make_counts <- function(n_genes, n_cells, density = 0.2, seed = 1) {
  set.seed(seed)
  m <- Matrix::rsparsematrix(n_genes, n_cells, density, rand.x = function(n) rpois(n, 4) + 1)
  m[n_genes, 2] <- 70000 # a count above 65535 (a tile exception)
  rownames(m) <- paste0("gene", seq_len(n_genes))
  methods::as(m, "CsparseMatrix")
}

test_that("a matrix with obs round-trips", {
  m <- make_counts(40, 23)
  obs <- data.frame(
    type = factor(sample(c("T", "B", NA), 23, replace = TRUE), levels = c("T", "B", "NK")),
    barcode = sprintf("cell-%02d", 1:23),
    score = c(NA, seq(0.5, 11, by = 0.5)),
    n = c(1:22, NA),
    ok = rep(c(TRUE, FALSE, NA), length.out = 23),
    stringsAsFactors = FALSE)
  path <- file.path(tempdir(), "rt.dc")
  dc_write(m, path, obs = obs, tile_size = 5, n_chunks = 2, zstd_level = 3, overwrite = TRUE)

  ds <- dc_open(path)
  expect_s3_class(ds, "deltacells_dataset")
  expect_equal(dim(ds), c(40, 23))
  info <- dc_info(ds)
  expect_equal(info$n_tiles, 5)
  expect_equal(info$nnz, length(m@x))
  expect_true(info$has_var_names && info$has_obs)
  expect_equal(dc_genes(ds), rownames(m))
  expect_null(dc_gene_order(ds))

  all_cells <- dc_read_cells(ds, seq_len(23))
  expect_s4_class(all_cells, "dgCMatrix")
  expect_equal(as.matrix(all_cells), as.matrix(m))
  expect_equal(rownames(all_cells), rownames(m))

  cells <- c(23, 1, 7, 7, 12)
  sub <- dc_read_cells(ds, cells)
  expect_equal(as.matrix(sub), as.matrix(m[, cells]), ignore_attr = TRUE)
  t_sub <- dc_read_cells(ds, cells, genes_by_cells = FALSE)
  expect_equal(dim(t_sub), c(5L, 40L))
  expect_equal(as.matrix(t_sub), t(as.matrix(m[, cells])), ignore_attr = TRUE)
  expect_equal(dim(dc_read_cells(ds, numeric(0))), c(40L, 0L))

  got <- dc_obs(ds)
  expect_s3_class(got, "data.frame")
  expect_equal(nrow(got), 23)
  expect_equal(names(got), names(obs))
  expect_true(is.factor(got$type))
  expect_equal(as.character(got$type), as.character(obs$type))
  expect_equal(as.character(got$barcode), obs$barcode)
  expect_type(got$score, "double")
  expect_equal(got$score, obs$score)
  expect_type(got$n, "integer")
  expect_equal(got$n, obs$n)
  expect_equal(got$ok, obs$ok)
  expect_equal(names(dc_obs(ds, c("n", "type"))), c("n", "type"))

  dc_set(ds, threads = 1, tile_cache = 0, verify_crc = 1)
  expect_equal(as.matrix(dc_read_cells(ds, 3)), as.matrix(m[, 3, drop = FALSE]), ignore_attr = TRUE)
  dc_close(ds)
  expect_error(dc_info(ds), "closed")
})

test_that("a dataset without names or obs reads back", {
  m <- make_counts(7, 4, density = 0.5, seed = 2)
  rownames(m) <- NULL
  path <- file.path(tempdir(), "plain.dc")
  dc_write(m, path, overwrite = TRUE)
  ds <- dc_open(path)
  expect_null(dc_genes(ds))
  expect_equal(as.matrix(dc_read_cells(ds, 1:4)), as.matrix(m), ignore_attr = TRUE)
  e <- expect_error(dc_obs(ds), class = "deltacells_not_found")
  expect_equal(e$status, 3L)
})

test_that("library errors become deltacells_error conditions", {
  e <- expect_error(dc_open(file.path(tempdir(), "no-such-dataset")),
                    class = "deltacells_not_found")
  expect_s3_class(e, "deltacells_error")
  expect_equal(e$status_name, "DC_ERR_NOT_FOUND")
  expect_match(conditionMessage(e), "dc_dataset_open_opts: DC_ERR_NOT_FOUND: .*no-such-dataset")

  m <- make_counts(5, 3, density = 0.5)
  path <- file.path(tempdir(), "err.dc")
  dc_write(m, path, overwrite = TRUE)
  e <- expect_error(dc_write(m, path), class = "deltacells_exists")
  expect_equal(e$status, 11L)
  ds <- dc_open(path)
  e <- expect_error(dc_read_cells(ds, 4), class = "deltacells_out_of_range")
  expect_match(e$detail, "3")
  expect_error(dc_obs(ds, "nope"), class = "deltacells_not_found")
  expect_error(dc_read_cells(ds, 0), "not a 1-based cell number")

  bad <- m
  bad@x[1] <- 1.5
  expect_error(dc_write(bad, file.path(tempdir(), "bad.dc")), "not a count")
  expect_false(file.exists(file.path(tempdir(), "bad.dc")))
  expect_error(dc_write(m, file.path(tempdir(), "bad.dc"), obs = data.frame(x = 1:2)),
               "one row per cell")
  expect_error(dc_write(m, file.path(tempdir(), "bad.dc"),
                        obs = data.frame(x = I(list(1, 2, 3)))), "not supported")
  expect_false(file.exists(file.path(tempdir(), "bad.dc")))
})

test_that("handles are released by the garbage collector", {
  m <- make_counts(5, 3, density = 0.5)
  path <- file.path(tempdir(), "gc.dc")
  dc_write(m, path, overwrite = TRUE)
  for (k in 1:20) ds <- dc_open(path)
  rm(ds)
  invisible(gc())
  expect_equal(dc_version()$abi_version, dc_version()$header_abi_version)
})

test_that("cd_write writes a store the reader answers from", {
  spots <- data.frame(
    chrom = c("chr2", "chr1", "chr1", "chr1", "chr2", "chr1", "chr1"),
    start = c(500L, 100L, 300L, 100L, 900L, 200L, 700L),
    end = c(600L, 200L, 400L, 200L, 1000L, 300L, 800L),
    trace_id = c("t1", "t2", "t2", "t1", "t2", "t1", "t2"),
    x = as.numeric(1:7), y = 0, z = 0,
    quality = factor(c("good", "bad", "good", "good", NA, "bad", "good")),
    stringsAsFactors = FALSE)
  for (layout in c("primary_coords", "partitioned", "flat")) {
    path <- file.path(tempdir(), paste0("w-", layout, ".cdz"))
    cd_write(spots, path, layout = layout, overwrite = TRUE)
    cd <- cd_open(path)
    expect_equal(cd_info(cd)$n_spots, 7)
    expect_equal(cd_info(cd)$layout, match(layout, c("flat", "partitioned", "primary_coords")) - 1L)
    back <- cd_spots(cd, original_order = TRUE)
    expect_equal(back$x, spots$x)
    expect_equal(as.character(back$trace_id), spots$trace_id)
    expect_equal(as.character(back$quality), as.character(spots$quality))
    expect_equal(sort(cd_trace(cd, "t1")$x), c(1, 4, 6))
    expect_equal(nrow(cd_chrom(cd, "chr1")), 5)
  }
  expect_error(cd_write(spots, path), class = "deltacells_exists")

  # Bins, bin tracks, intervals and points.
  bins <- data.frame(chrom = c("chr1", "chr1", "chr1", "chr1", "chr2", "chr2"),
                     start = c(100L, 200L, 300L, 700L, 500L, 900L),
                     end = c(200L, 300L, 400L, 800L, 600L, 1000L))
  tracks <- data.frame(signal = c(0.5, 1.5, 2.5, 3.5, 4.5, 5.5),
                       label = c("a", "b", "a", "b", "a", "b"), stringsAsFactors = FALSE)
  tads <- data.frame(chrom = c("chr1", "chr2"), start = c(100L, 500L), end = c(400L, 1000L))
  loops <- data.frame(chrom1 = "chr1", start1 = 100L, end1 = 200L,
                      chrom2 = "chr2", start2 = 500L, end2 = 600L)
  fid <- data.frame(x = c(1, 2), y = c(3, 4))
  path2 <- file.path(tempdir(), "w-tables.chromdata.zarr")
  cd_write(spots, path2, overwrite = TRUE, bins = bins, bin_tracks = tracks,
           intervals = list(tads = tads, loops = list(table = loops, kind = "pair")),
           points = list(fiducials = fid))
  cd <- cd_open(path2)
  expect_equal(cd_table(cd, "bin_tracks")$signal, tracks$signal)
  expect_equal(as.character(cd_table(cd, "bin_tracks")$label), tracks$label)
  expect_equal(cd_keys(cd, "intervals"), c("tads", "loops"))
  expect_equal(cd_table(cd, "intervals/loops")$end2, 600L)
  expect_equal(cd_table(cd, "points/fiducials")$y, c(3, 4))
  expect_error(cd_write(spots, file.path(tempdir(), "bad2.cdz"), bin_tracks = tracks),
               class = "deltacells_state")
  expect_error(cd_write(spots, file.path(tempdir(), "bad3.cdz"),
                        intervals = list(x = list(table = tads, kind = "pair"))),
               class = "deltacells_invalid_argument")
  expect_false(file.exists(file.path(tempdir(), "bad2.cdz")))
  expect_error(cd_write(spots[, c("chrom", "x")], file.path(tempdir(), "bad.cdz")),
               class = "deltacells_invalid_argument")
  expect_false(file.exists(file.path(tempdir(), "bad.cdz")))
})

test_that("matrices carry dimnames and tables row.names from the stored index", {
  m <- make_counts(6, 9, density = 0.5, seed = 3)
  colnames(m) <- sprintf("AAAC-%d", 1:9)
  path <- file.path(tempdir(), "names.dc")
  # Cell names from colnames(mat) (no obs given): stored as the obs index column "_index".
  dc_write(m, path, tile_size = 4, overwrite = TRUE)
  ds <- dc_open(path)
  expect_equal(dc_cell_names(ds), colnames(m))
  got <- dc_read_cells(ds, c(9, 2, 2))
  expect_equal(dimnames(got), list(rownames(m), colnames(m)[c(9, 2, 2)]))
  expect_equal(dimnames(dc_read_cells(ds, 1:2, genes_by_cells = FALSE)),
               list(colnames(m)[1:2], rownames(m)))
  obs <- dc_obs(ds)
  expect_equal(rownames(obs), colnames(m))
  expect_equal(attr(obs, "index_name"), "_index")
  expect_equal(ncol(obs), 0L)

  # Cell names from obs row.names (they win over colnames), other columns kept.
  meta <- data.frame(type = factor(rep(c("x", "y", "z"), 3)), depth = as.numeric(1:9),
                     row.names = sprintf("cell%02d", 1:9))
  dc_write(m, path, obs = meta, overwrite = TRUE)
  ds <- dc_open(path)
  got <- dc_obs(ds)
  expect_equal(rownames(got), rownames(meta))
  expect_equal(attr(got, "index_name"), "_index")
  expect_equal(names(got), c("type", "depth"))
  expect_equal(got$depth, meta$depth)
  sub <- dc_obs(ds, "depth")
  expect_equal(names(sub), "depth")
  expect_equal(rownames(sub), rownames(meta))
  expect_equal(colnames(dc_read_cells(ds, 3)), "cell03")
  # The index column's name is taken: a column "_index" is refused.
  expect_error(dc_write(m, path, obs = cbind(meta, `_index` = 1), overwrite = TRUE), "_index")

  # Automatic row.names and no colnames: no cell names, plain numbers.
  dc_write(m, path, obs = data.frame(n = 1:9), overwrite = TRUE)
  ds <- dc_open(path)
  expect_null(dc_cell_names(ds))
  expect_null(colnames(dc_read_cells(ds, 1:3)))
  expect_equal(rownames(dc_obs(ds)), as.character(1:9))
  expect_null(attr(dc_obs(ds), "index_name"))
  expect_error(dc_var_table(ds), class = "deltacells_not_found")

  # A gene table: row.names from rownames(mat) (or its own), columns kept, order kept.
  var <- data.frame(biotype = factor(c("pc", "lnc", "pc", "pc", "mt", "pc")),
                    length = c(1200L, 800L, NA, 5000L, 16569L, 300L))
  dc_write(m, path, var = var, overwrite = TRUE)
  vt <- dc_var_table(dc_open(path))
  expect_equal(rownames(vt), rownames(m))
  expect_equal(attr(vt, "index_name"), "_index")
  expect_equal(as.character(vt$biotype), as.character(var$biotype))
  expect_equal(vt$length, var$length)
  rownames(var) <- paste0("ENSG", 1:6)
  dc_write(m, path, var = var, overwrite = TRUE)
  expect_equal(rownames(dc_var_table(dc_open(path))), rownames(var))
  expect_error(dc_write(m, path, var = var[1:2, ], overwrite = TRUE), "one row per gene")
})

test_that("the index column is found from pandas or deltacells metadata", {
  idx <- deltacells:::.index_from_metadata
  expect_null(idx(NULL))
  expect_equal(idx(c(pandas = '{"index_columns": ["gene_ids"], "columns": []}')), "gene_ids")
  expect_equal(idx(c(pandas = '{"index_columns":["a \\"b\\""]}')), 'a "b"')
  expect_null(idx(c(pandas = '{"index_columns": [{"kind": "range", "start": 0}]}')))
  expect_equal(idx(c(other = "x", deltacells.index = "obs_names")), "obs_names")
  cols <- structure(list(`_index` = c("g1", "g2"), n = 1:2), n_rows = 2,
                    metadata = c(pandas = '{"index_columns": ["_index"]}'))
  df <- deltacells:::.as_data_frame(cols, "_index")
  expect_equal(rownames(df), c("g1", "g2"))
  expect_equal(names(df), "n")
  dup <- deltacells:::.as_data_frame(structure(list(`_index` = c("g", "g")), n_rows = 2), "_index")
  expect_equal(names(dup), "_index")  # not unique: kept as a column
})

test_that("errors name the user's call and 1-based cell numbers", {
  m <- make_counts(5, 4, density = 0.5)
  path <- file.path(tempdir(), "calls.dc")
  dc_write(m, path, overwrite = TRUE)
  e <- expect_error(dc_open(file.path(tempdir(), "nothing-here")), class = "deltacells_not_found")
  expect_equal(deparse(conditionCall(e)), 'dc_open(file.path(tempdir(), "nothing-here"))')
  ds <- dc_open(path)
  e <- expect_error(dc_read_cells(ds, c(4, 5)), class = "deltacells_out_of_range")
  expect_equal(deparse(conditionCall(e)), "dc_read_cells(ds, c(4, 5))")
  expect_match(conditionMessage(e), "cells\\[2\\] = 5 .* 4 cells")
  e <- expect_error(dc_obs(ds), class = "deltacells_not_found")
  expect_equal(deparse(conditionCall(e)), "dc_obs(ds)")
  e <- expect_error(dc_write(m, path), class = "deltacells_exists")
  expect_equal(deparse(conditionCall(e)), "dc_write(m, path)")
})

test_that("batches iterate over any cells with dimnames", {
  m <- make_counts(8, 11, density = 0.4, seed = 4)
  colnames(m) <- paste0("c", 1:11)
  path <- file.path(tempdir(), "batches.dc")
  dc_write(m, path, tile_size = 3, overwrite = TRUE)
  ds <- dc_open(path)
  dc_set(ds, cache_bytes = 1e5)
  it <- dc_batches(ds, batch_size = 4)
  expect_equal(length(it), 3L)
  expect_output(print(it), "11 cells in 3 batches")
  got <- list()
  while (dc_has_next(it)) got[[length(got) + 1]] <- dc_next_batch(it)
  expect_null(dc_next_batch(it))
  expect_equal(vapply(got, ncol, 1L), c(4L, 4L, 3L))
  expect_equal(as.matrix(do.call(cbind, got)), as.matrix(m))
  order <- c(11, 1, 5, 5, 2)
  sums <- dc_for_each_batch(ds, Matrix::colSums, cells = order, batch_size = 2)
  expect_equal(unlist(sums), Matrix::colSums(m)[order])
  rows <- dc_for_each_batch(ds, function(b) rownames(b), batch_size = 100,
                            genes_by_cells = FALSE)
  expect_equal(rows[[1]], colnames(m))
  expect_length(dc_for_each_batch(ds, identity, cells = numeric(0)), 0L)
  expect_error(dc_batches(ds, cells = 12), class = "deltacells_out_of_range")
  for (ra in c(1, 2, 64)) {  # read-ahead changes nothing in the results
    b <- dc_for_each_batch(ds, as.matrix, cells = c(order, 1:11), batch_size = 3, read_ahead = ra)
    expect_equal(do.call(cbind, b), as.matrix(m[, c(order, 1:11)]))
  }

  # A shuffled order: a permutation, the same for the same seed, whole windows of tiles.
  o <- dc_shuffled_order(ds, seed = 42, window_tiles = 2)
  expect_equal(sort(o), 1:11)
  expect_identical(dc_shuffled_order(ds, 42, 2), o)
  expect_false(identical(dc_shuffled_order(ds, 43, 2), o) && identical(dc_shuffled_order(ds, 44, 2), o))
  tile_of <- (o - 1) %/% 3                       # tiles of 3 cells (the last of 2)
  first <- unique(tile_of)[1:2]                   # the first window's two tiles
  n_first <- sum(((1:11) - 1) %/% 3 %in% first)
  expect_true(all(tile_of[seq_len(n_first)] %in% first))
  got <- dc_for_each_batch(ds, identity, cells = o, batch_size = 5)
  expect_equal(colnames(do.call(cbind, got)), colnames(m)[o])

  # The iterator outlives dc_close(ds) and the dataset object; dc_close(it) ends it.
  it <- dc_batches(ds, cells = 5:9, batch_size = 2)
  dc_close(ds)
  rm(ds)
  invisible(gc())
  expect_equal(as.matrix(dc_next_batch(it)), as.matrix(m[, 5:6]))
  dc_close(it)
  expect_false(dc_has_next(it))
  expect_null(dc_next_batch(it))
})

test_that("a batch whose tile is damaged raises its error; iterating goes on", {
  m <- make_counts(8, 9, density = 0.5, seed = 5)
  path <- file.path(tempdir(), "damaged.dc")
  dc_write(m, path, tile_size = 3, overwrite = TRUE)
  tiles <- sort(list.files(file.path(path, "tiles"), full.names = TRUE))
  expect_length(tiles, 3L)
  size <- file.size(tiles[2])
  bytes <- readBin(tiles[2], "raw", size)
  at <- seq(size %/% 2, size - 8)
  bytes[at] <- as.raw(bitwXor(as.integer(bytes[at]), 0x5a))
  writeBin(bytes, tiles[2])
  ds <- dc_open(path)
  it <- dc_batches(ds, batch_size = 3)
  expect_equal(as.matrix(dc_next_batch(it)), as.matrix(m[, 1:3]))
  e <- expect_error(dc_next_batch(it), class = "deltacells_error")
  expect_match(conditionMessage(e), "tile")
  expect_equal(deparse(conditionCall(e)), "dc_next_batch(it)")
  expect_true(dc_has_next(it))
  expect_equal(as.matrix(dc_next_batch(it)), as.matrix(m[, 7:9]))
  expect_null(dc_next_batch(it))
  dc_close(ds)
})

test_that("dc_open and dc_write take URL options (C API section 7)", {
  m <- Matrix::sparseMatrix(i = c(1, 3, 2), j = c(1, 1, 3), x = c(5, 1, 2), dims = c(4, 3))
  path <- file.path(tempdir(), "options.dc")
  # Library settings are accepted for a local path too (and have no effect there).
  dc_write(m, path, overwrite = TRUE, options = c(max_concurrency = 4))
  ds <- dc_open(path, options = list(timeout_ms = 1000, retries = 2))
  expect_equal(as.matrix(dc_read_cells(ds, 1:3)), as.matrix(m), ignore_attr = TRUE)
  dc_close(ds)
  ds <- dc_open(path, options = "max_concurrency=2")
  expect_equal(dim(ds), c(4L, 3L))
  dc_close(ds)
  # An unknown key, a bad value, a malformed URL: invalid arguments naming the culprit.
  e <- expect_error(dc_open("s3://bucket/prefix", options = c(no_such_key = "1")),
                    class = "deltacells_invalid_argument")
  expect_match(conditionMessage(e), "no_such_key")
  expect_error(dc_open("s3://bucket/prefix", options = c(max_concurrency = 0)),
               class = "deltacells_invalid_argument")
  expect_error(dc_open("ftp://host/x"), class = "deltacells_invalid_argument")
  expect_error(dc_write(m, "https://example.org/x.dc", overwrite = TRUE),
               class = "deltacells_unsupported")
  expect_error(dc_open(path, options = c(a = NA)), class = "deltacells_invalid_argument")
  unlink(path, recursive = TRUE)
})
