# Fork safety: parallel::mclapply forks R after the library has been used (its thread pool
# started, its caches filled). Every forked worker must read like the parent did, while the
# parent reads too, and none may hang. The mclapply runs inside an mcparallel job collected
# with a timeout, so that a hang is a failure instead of a stuck check.

fork_counts <- function(n_genes, n_cells, seed) {
  set.seed(seed)
  m <- Matrix::rsparsematrix(n_genes, n_cells, 0.15, rand.x = function(n) rpois(n, 5) + 1)
  rownames(m) <- paste0("g", seq_len(n_genes))
  methods::as(m, "CsparseMatrix")
}

collect_or_fail <- function(job, seconds) {
  res <- parallel::mccollect(job, wait = FALSE, timeout = seconds)
  if (is.null(res)) {
    tools::pskill(job$pid, tools::SIGKILL)
    parallel::mccollect(job, wait = TRUE)
    fail(sprintf("forked workers did not finish within %d s (deadlock after fork)", seconds))
  }
  res[[1]]
}

test_that("mclapply workers read a dataset opened before the fork", {
  skip_on_os("windows") # no fork()
  m <- fork_counts(60, 400, seed = 3)
  path <- file.path(tempdir(), "fork.dc")
  dc_write(m, path, tile_size = 25, zstd_level = 3, overwrite = TRUE)
  ds <- dc_open(path)
  dc_set(ds, threads = 2, tile_cache = 2)
  # The parent uses the library first: pool started, caches filled.
  expect_equal(as.matrix(dc_read_cells(ds, 1:120)), as.matrix(m[, 1:120]), ignore_attr = TRUE)

  picks <- lapply(1:6, function(i) sample.int(400, 50, replace = TRUE))
  read_pick <- function(i) {
    dc_set(ds, threads = 2)
    list(cells = as.matrix(dc_read_cells(ds, picks[[i]])), n_genes = dc_info(ds)$n_genes)
  }
  job <- parallel::mcparallel(parallel::mclapply(seq_along(picks), read_pick, mc.cores = 3,
                                                 mc.preschedule = FALSE))
  # The parent reads while its children do.
  for (k in 1:5) {
    cells <- sample.int(400, 80)
    expect_equal(as.matrix(dc_read_cells(ds, cells)), as.matrix(m[, cells]), ignore_attr = TRUE)
  }
  got <- collect_or_fail(job, 180)
  expect_length(got, length(picks))
  for (i in seq_along(picks)) {
    expect_false(inherits(got[[i]], "try-error"), info = paste("worker", i))
    expect_equal(got[[i]]$n_genes, 60)
    expect_equal(got[[i]]$cells, as.matrix(m[, picks[[i]]]), ignore_attr = TRUE)
  }
  # The parent's pool still works.
  expect_equal(as.matrix(dc_read_cells(ds, 400:1)), as.matrix(m[, 400:1]), ignore_attr = TRUE)
  dc_close(ds)
})

test_that("mclapply workers query a ChromData store opened before the fork", {
  skip_on_os("windows")
  stores <- Sys.getenv("DELTACELLS_TEST_STORES")
  skip_if(!nzchar(stores) || !dir.exists(stores), "no ChromData test stores")
  cd <- cd_open(file.path(stores, "main_22.cdz"))
  keys <- head(as.character(cd_categories(cd, "spots", "trace_id")), 6)
  expect_gt(length(keys), 1)
  want <- lapply(keys, function(k) cd_trace(cd, k)) # parent first: pool and caches in use
  job <- parallel::mcparallel(parallel::mclapply(seq_along(keys), function(i) {
    cd_trace(cd, keys[[i]])
  }, mc.cores = 3, mc.preschedule = FALSE))
  expect_equal(cd_trace(cd, keys[[1]]), want[[1]])
  got <- collect_or_fail(job, 180)
  expect_length(got, length(keys))
  for (i in seq_along(keys)) expect_equal(got[[i]], want[[i]], info = keys[[i]])
  cd_close(cd)
})
