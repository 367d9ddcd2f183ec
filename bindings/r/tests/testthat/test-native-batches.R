# The .Call layer of batches (C API section 3.1): every batch equals dc_read_cells of its
# cells; peek; bad arguments; the iterator outlives the dataset; shuffled orders.

test_that("batches equal reads of the same cells", {
  set.seed(3)
  m <- Matrix::rsparsematrix(30, 57, 0.2, rand.x = function(n) rpois(n, 4) + 1)
  m <- methods::as(m, "CsparseMatrix")
  path <- file.path(tempdir(), "batches.dc")
  dc_write(m, path, tile_size = 10, n_chunks = 2, zstd_level = 3, overwrite = TRUE)
  ds <- dc_open(path)
  dc_set(ds, cache_bytes = 1e6)
  cells <- c(57, 1, 3, 3, 20, 44, 12, 9, 50, 2, 31)
  b <- deltacells:::.dc_batches(ds, cells, batch_size = 4, read_ahead = 2)
  expect_equal(deltacells:::.dc_batches_peek(b), list(n_rows = 4, nnz = sum(m[, cells[1:4]] != 0)))
  got <- list()
  while (!is.null(x <- deltacells:::.dc_batches_next(b))) got[[length(got) + 1]] <- x
  expect_equal(length(got), 3)
  expect_equal(as.matrix(do.call(cbind, got)), as.matrix(m[, cells]), ignore_attr = TRUE)
  expect_equal(deltacells:::.dc_batches_peek(b)$n_rows, 0)
  deltacells:::.dc_batches_close(b)

  expect_error(deltacells:::.dc_batches(ds, cells, batch_size = 0), "batch_size")
  expect_error(deltacells:::.dc_batches(ds, c(1, 58), batch_size = 2), "cells\\[2\\] = 58")

  # The iterator keeps the dataset alive.
  b <- deltacells:::.dc_batches(ds, 5:9, batch_size = 5)
  dc_close(ds)
  expect_equal(as.matrix(deltacells:::.dc_batches_next(b)), as.matrix(m[, 5:9]), ignore_attr = TRUE)

  ds <- dc_open(path)
  o <- deltacells:::.dc_shuffled_order(ds, 42, 2)
  expect_equal(sort(o), 1:57)
  expect_equal(deltacells:::.dc_shuffled_order(ds, 42, 2), o)
  dc_close(ds)
})
