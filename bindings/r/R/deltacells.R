# R interface of libdeltacells. Every function calls routines of the C shim
# (src/deltacells_r.c), which calls the C API; nothing here reads or writes the formats.
# What this file adds is R's conventions: 1-based numbers, dimnames and row.names, NA for
# missing values, and errors raised from the user's call.

.onLoad <- function(libname, pkgname) {
  .Call(dcr_init, environment(.onLoad))
  v <- .Call(dcr_versions)
  if (v$abi_version != v$header_abi_version) {
    stop(sprintf("libdeltacells ABI %d does not match the header's ABI %d",
                 v$abi_version, v$header_abi_version))
  }
}

# ---------------------------------------------------------------------------------------
# Errors

# The call the user made: the outermost frame running a function of this package (so an
# error inside dc_read_cells -> dc_info is reported as dc_read_cells(...), and never as the
# shim's .Call or a helper).
.user_call <- function() {
  ns <- environment(.user_call)
  for (i in seq_len(sys.nframe() - 1L)) {
    if (identical(environment(sys.function(i)), ns)) return(sys.call(i))
  }
  NULL
}

.dc_condition <- function(status_name, message, status = NA_integer_, detail = message) {
  structure(
    class = c(paste0("deltacells_", tolower(sub("^DC_ERR_", "", status_name))),
              "deltacells_error", "error", "condition"),
    list(message = message, call = .user_call(), status = status,
         status_name = status_name, detail = detail))
}

.status_codes <- c(DC_ERR_INVALID_ARGUMENT = 1L, DC_ERR_NOT_FOUND = 3L, DC_ERR_UNSUPPORTED = 6L,
                   DC_ERR_OUT_OF_RANGE = 7L, DC_ERR_INTERNAL = 12L)

# Called by the C shim after a library call failed: an R error condition of class
# "deltacells_error" (and e.g. "deltacells_not_found") carrying the status code, its name
# and the library's message.
.dc_stop <- function(status, status_name, message, fn) {
  stop(.dc_condition(status_name, sprintf("%s: %s: %s", fn, status_name, message),
                     status = status, detail = message))
}

# An error found in R or in the shim before any library call (a bad argument, a value R
# cannot represent): same classes as the library's DC_ERR_INVALID_ARGUMENT unless told.
.dc_arg_stop <- function(message, status_name = "DC_ERR_INVALID_ARGUMENT") {
  stop(.dc_condition(status_name, message, status = .status_codes[[status_name]]))
}

.check_string <- function(x, what) {
  if (!is.character(x) || length(x) != 1L || is.na(x))
    .dc_arg_stop(sprintf("'%s' must be a single string (not NA)", what))
  x
}

.check_flag <- function(x, what) {
  if (!is.logical(x) || length(x) != 1L || is.na(x))
    .dc_arg_stop(sprintf("'%s' must be TRUE or FALSE", what))
  x
}

# NULL, or a single whole number in [lo, hi], as a double (the shim checks again).
.check_count <- function(x, what, lo = 0, hi = 2^53) {
  if (is.null(x)) return(NULL)
  if (!is.numeric(x) || length(x) != 1L || is.na(x) || !is.finite(x) || x != trunc(x) ||
      x < lo || x > hi)
    .dc_arg_stop(sprintf("'%s' must be a single whole number in %s..%s", what,
                         format(lo, scientific = FALSE), format(hi, scientific = FALSE)))
  as.numeric(x)
}

# Cells, 1-based, checked against the dataset's n_cells (errors name the 1-based number).
.check_cells <- function(cells, n_cells) {
  if (!is.numeric(cells))
    .dc_arg_stop("'cells' must be a numeric vector of 1-based cell numbers")
  bad <- which(is.na(cells) | cells < 1 | cells != trunc(cells))
  if (length(bad))
    .dc_arg_stop(sprintf("cells[%d] = %s is not a 1-based cell number", bad[1], cells[bad[1]]))
  past <- which(cells > n_cells)
  if (length(past))
    .dc_arg_stop(sprintf("cells[%d] = %s is past the last cell: the dataset has %.0f cells (1-based)",
                         past[1], format(cells[past[1]], scientific = FALSE), n_cells),
                 "DC_ERR_OUT_OF_RANGE")
  as.numeric(cells)
}

# The handle of a dataset / store object, with an R error for anything else.
.ds_ptr <- function(ds) {
  if (!inherits(ds, "deltacells_dataset")) .dc_arg_stop("'ds' must be a dataset opened by dc_open()")
  ds[["ptr"]]
}

.cd_ptr <- function(cd) {
  if (!inherits(cd, "deltacells_chromdata")) .dc_arg_stop("'cd' must be a store opened by cd_open()")
  cd[["ptr"]]
}

# How 64-bit integer columns are read (option deltacells.int64): "double" (default; a
# value a double cannot hold exactly is an error) or "character" (exact decimal text).
.int64_mode <- function() {
  mode <- getOption("deltacells.int64", "double")
  if (identical(mode, "double")) 0L
  else if (identical(mode, "character")) 1L
  else .dc_arg_stop("option deltacells.int64 must be \"double\" or \"character\"")
}

# Codes of the DC_DATASET_* / DC_WRITER_* / DC_CDW_* parameters (include/deltacells.h).
.dataset_params <- c(threads = 0L, tile_cache = 1L, verify_crc = 2L, cache_bytes = 3L)
.cd_writer_params <- c(memory_budget = 0L, coord_float32 = 1L, layout = 2L, overwrite = 3L,
                       threads = 4L)
.layouts <- c(flat = 0L, partitioned = 1L, primary_coords = 2L)
.writer_params <- c(tile_size = 0L, n_chunks = 1L, zstd_level = 2L, threads = 3L,
                    overwrite = 4L, obs_tiles_per_file = 5L, obs_max_categories = 6L)

# list(codes, values) of the parameters given (non-NULL), as the shim takes them.
.params <- function(values, codes) {
  values <- values[!vapply(values, is.null, TRUE)]
  list(codes = unname(codes[names(values)]), values = as.numeric(unlist(values, use.names = FALSE)))
}

dc_version <- function() .Call(dcr_versions)

# ---------------------------------------------------------------------------------------
# Tables: Arrow streams (as lists of columns) -> data.frames

# The name of the index column a table's metadata records: "deltacells.index", else the
# first string entry of pandas' "index_columns"; NULL if neither.
.index_from_metadata <- function(meta) {
  if (is.null(meta)) return(NULL)
  if (!is.na(meta["deltacells.index"])) return(unname(meta["deltacells.index"]))
  pandas <- meta["pandas"]
  if (!is.na(pandas)) {
    m <- regmatches(pandas, regexec("\"index_columns\"\\s*:\\s*\\[\\s*\"((?:[^\"\\\\]|\\\\.)*)\"",
                                    pandas, perl = TRUE))[[1]]
    if (length(m) == 2L) return(gsub("\\\\(.)", "\\1", m[2]))
  }
  NULL
}

# AnnData's default name of the index column, used by the converter and by dc_write.
.default_index <- "_index"

# A list of columns from the shim -> data.frame. With index_name (a column holding unique,
# non-missing strings), that column becomes the row.names and its name the attribute
# "index_name".
.as_data_frame <- function(cols, index_name = NULL) {
  n <- attr(cols, "n_rows")
  attr(cols, "n_rows") <- NULL
  attr(cols, "metadata") <- NULL
  row_names <- .set_row_names(as.integer(n))
  if (!is.null(index_name) && index_name %in% names(cols)) {
    idx <- as.character(cols[[index_name]])
    if (!anyNA(idx) && !anyDuplicated(idx)) {
      cols[[index_name]] <- NULL
      row_names <- idx
    } else {
      index_name <- NULL  # kept as a column: row.names must be unique and not NA
    }
  } else {
    index_name <- NULL
  }
  df <- structure(cols, class = "data.frame", row.names = row_names)
  if (!is.null(index_name)) attr(df, "index_name") <- index_name
  df
}

# ---------------------------------------------------------------------------------------
# Datasets

# Options of a path or URL (C API section 7): a named character vector or list
# (c(aws_region = "eu-west-1")) or "key=value" strings, as "key=value" strings.
.dc_options <- function(options) {
  if (is.null(options) || length(options) == 0L) return(NULL)
  if (is.list(options)) options <- unlist(options)
  if (!is.character(options) && !is.numeric(options))
    .dc_arg_stop("'options' must be a named character vector, a named list or \"key=value\" strings")
  if (anyNA(options)) .dc_arg_stop("'options' must not contain NA")
  keys <- names(options)
  if (is.null(keys)) keys <- rep("", length(options))
  values <- as.character(options)
  ifelse(nzchar(keys), paste0(keys, "=", values), values)
}

# A local path is expanded (~); a URL is passed as given.
.dc_location <- function(path) {
  if (grepl("^[A-Za-z][A-Za-z0-9+.-]*://", path)) path else path.expand(path)
}

dc_open <- function(path, options = NULL) {
  path <- .check_string(path, "path")
  ptr <- .Call(dcr_open, .dc_location(path), .dc_options(options))
  cache <- new.env(parent = emptyenv())
  structure(list(ptr = ptr, path = path, cache = cache), class = "deltacells_dataset")
}

# Releases a dataset, a store or an iterator at once (the garbage collector would later).
dc_close <- function(x) {
  if (inherits(x, c("deltacells_dataset", "deltacells_chromdata"))) {
    .Call(dcr_close, x[["ptr"]])
  } else if (inherits(x, c("deltacells_batches", "deltacells_cd_iter"))) {
    if (!is.null(x$state$ptr)) .Call(dcr_close, x$state$ptr)
    x$state$done <- TRUE
  } else {
    .dc_arg_stop("'x' must be a dataset (dc_open), a store (cd_open) or an iterator (dc_batches, cd_iter_traces, cd_iter_cells)")
  }
  invisible(NULL)
}

dc_info <- function(ds) .Call(dcr_info, .ds_ptr(ds))

dim.deltacells_dataset <- function(x) {
  i <- dc_info(x)
  c(i$n_genes, i$n_cells)
}

print.deltacells_dataset <- function(x, ...) {
  i <- dc_info(x)
  cat(sprintf("<deltacells dataset %s: %.0f genes x %.0f cells, %.0f nonzeros, %.0f tiles>\n",
              x$path, i$n_genes, i$n_cells, i$nnz, i$n_tiles))
  invisible(x)
}

dc_set <- function(ds, threads = NULL, tile_cache = NULL, verify_crc = NULL, cache_bytes = NULL) {
  args <- list(threads = .check_count(threads, "threads", 0, 2^31 - 1),
               tile_cache = .check_count(tile_cache, "tile_cache", 0, 2^31 - 1),
               cache_bytes = .check_count(cache_bytes, "cache_bytes", 0, 2^53),
               verify_crc = if (is.null(verify_crc)) NULL
                            else as.numeric(.check_flag(as.logical(verify_crc), "verify_crc")))
  for (p in names(args)) {
    if (!is.null(args[[p]])) .Call(dcr_set, .ds_ptr(ds), .dataset_params[[p]], args[[p]])
  }
  invisible(ds)
}

# Gene names (var_names.txt), in dataset column order; NULL if the dataset has none.
dc_genes <- function(ds) {
  .ds_ptr(ds)
  cache <- ds$cache
  if (exists("genes", envir = cache, inherits = FALSE)) return(cache$genes)
  genes <- if (dc_info(ds)$has_var_names) .Call(dcr_genes, .ds_ptr(ds)) else NULL
  cache$genes <- genes
  genes
}

dc_gene_order <- function(ds) {
  if (!dc_info(ds)$has_gene_order) return(NULL)
  .Call(dcr_gene_order, .ds_ptr(ds)) + 1L
}

# The obs index (cell names, e.g. barcodes), read once and kept with the handle; NULL when
# the dataset has no obs or its obs has no index column (see .obs_index).
dc_cell_names <- function(ds) .obs_index(ds)$values

# The obs index: list(name, values), or NULL. Its column is "_index" (AnnData's default
# name, written by the converter and by dc_write). Read once per handle.
.obs_index <- function(ds) {
  .ds_ptr(ds)
  cache <- ds$cache
  if (exists("obs_index", envir = cache, inherits = FALSE)) return(cache$obs_index)
  index <- NULL
  if (dc_info(ds)$has_obs) {
    cols <- tryCatch(.Call(dcr_obs, .ds_ptr(ds), .default_index, .int64_mode()),
                     deltacells_not_found = function(e) NULL)
    if (!is.null(cols))
      index <- list(name = .default_index, values = as.character(cols[[1]]))
  }
  cache$obs_index <- index
  index
}

`%||%` <- function(a, b) if (is.null(a)) b else a

# Cells -> dgCMatrix, genes x cells (or cells x genes), with dimnames: genes = var names,
# cells = the obs index (when the dataset has them).
dc_read_cells <- function(ds, cells, genes_by_cells = TRUE) {
  info <- dc_info(ds)
  cells <- .check_cells(cells, info$n_cells)
  .check_flag(genes_by_cells, "genes_by_cells")
  slots <- .Call(dcr_read_cells, .ds_ptr(ds), cells)
  cell_names <- dc_cell_names(ds)
  # Rows of the library's CSR result are cells: exactly the columns of a genes x cells CSC.
  m <- new("dgCMatrix", i = slots$i, p = slots$p, x = slots$x,
           Dim = c(as.integer(info$n_genes), length(cells)),
           Dimnames = list(dc_genes(ds), if (is.null(cell_names)) NULL else cell_names[cells]))
  if (genes_by_cells) m else t(m)
}

# Obs as a data.frame: row.names = the obs index (its column name in attr "index_name"),
# categories as factors, missing values NA.
dc_obs <- function(ds, columns = NULL) {
  if (!is.null(columns) && (!is.character(columns) || anyNA(columns)))
    .dc_arg_stop("'columns' must be a character vector (no NA) or NULL")
  index <- .obs_index(ds)$name
  want <- if (is.null(columns) || is.null(index)) columns else unique(c(index, columns))
  cols <- .Call(dcr_obs, .ds_ptr(ds), want, .int64_mode())
  df <- .as_data_frame(cols, .index_from_metadata(attr(cols, "metadata")) %||% index)
  if (!is.null(columns)) {
    keep <- setdiff(columns, attr(df, "index_name"))
    df <- df[keep]
    if (!is.null(index) && index %in% names(cols)) attr(df, "index_name") <- index
  }
  df
}

# The gene table as a data.frame (rows in dataset column order): row.names = its stored
# index (pandas metadata or "_index" column), kept as attr "index_name".
dc_var_table <- function(ds) {
  cols <- .Call(dcr_var_table, .ds_ptr(ds), .int64_mode())
  index <- .index_from_metadata(attr(cols, "metadata"))
  if (is.null(index) && .default_index %in% names(cols)) index <- .default_index
  .as_data_frame(cols, index)
}

dc_write <- function(mat, path, obs = NULL, var = NULL, var_names = rownames(mat),
                     tile_size = NULL, n_chunks = NULL, zstd_level = NULL, threads = NULL,
                     overwrite = FALSE, options = NULL) {
  path <- .check_string(path, "path")
  options <- .dc_options(options)
  if (!methods::is(mat, "Matrix") && !is.matrix(mat))
    .dc_arg_stop("'mat' must be a sparse (dgCMatrix) or dense matrix, genes x cells")
  if (!inherits(mat, "dgCMatrix")) mat <- methods::as(methods::as(mat, "CsparseMatrix"), "generalMatrix")
  if (!inherits(mat, "dgCMatrix")) mat <- methods::as(mat, "dMatrix")
  if (!inherits(mat, "dgCMatrix")) .dc_arg_stop("'mat' must be a dgCMatrix (genes x cells)")
  mat <- Matrix::drop0(mat)  # explicit zeros: a dataset stores nonzero counts only
  if (!is.null(obs)) {
    if (!is.data.frame(obs)) .dc_arg_stop("'obs' must be a data.frame")
    if (nrow(obs) != ncol(mat))
      .dc_arg_stop(sprintf("'obs' must have one row per cell (column of 'mat'): %d rows, %d cells",
                           nrow(obs), ncol(mat)))
  }
  # The cell names (obs row.names, else colnames(mat)) are stored as the obs index column.
  cell_names <- if (is.null(obs)) colnames(mat)
                else if (.row_names_info(obs) < 0L) NULL  # automatic row.names: no names
                else rownames(obs)
  if (!is.null(cell_names)) {
    index <- .default_index
    if (!is.null(obs) && index %in% names(obs))
      .dc_arg_stop(sprintf("'obs' has a column '%s', the name the cell names (row.names) are stored under", index))
    index_col <- stats::setNames(list(as.character(cell_names)), index)
    obs <- if (is.null(obs)) index_col else c(index_col, as.list(obs))
  }
  if (!is.null(var)) {
    if (!is.data.frame(var)) .dc_arg_stop("'var' must be a data.frame")
    if (nrow(var) != nrow(mat))
      .dc_arg_stop(sprintf("'var' must have one row per gene (row of 'mat'): %d rows, %d genes",
                           nrow(var), nrow(mat)))
    # The gene names (var row.names, else rownames(mat)) are stored as its index column.
    gene_names <- if (.row_names_info(var) < 0L) rownames(mat) else rownames(var)
    if (!is.null(gene_names)) {
      if (.default_index %in% names(var))
        .dc_arg_stop(sprintf("'var' has a column '%s', the name the gene names (row.names) are stored under",
                             .default_index))
      var <- c(stats::setNames(list(as.character(gene_names)), .default_index), as.list(var))
    }
  }
  if (!is.null(var_names)) var_names <- as.character(var_names)
  params <- .params(list(tile_size = .check_count(tile_size, "tile_size", 1),
                         n_chunks = .check_count(n_chunks, "n_chunks", 1),
                         zstd_level = .check_count(zstd_level, "zstd_level", -2^31, 2^31 - 1),
                         threads = .check_count(threads, "threads", 0, 2^31 - 1),
                         overwrite = as.numeric(.check_flag(overwrite, "overwrite"))),
                    .writer_params)
  .Call(dcr_write, .dc_location(path), as.numeric(nrow(mat)), mat@p, mat@i, mat@x, var_names,
        if (is.null(obs)) NULL else as.list(obs), if (is.null(var)) NULL else as.list(var),
        params, options)
  invisible(path)
}

# ---------------------------------------------------------------------------------------
# Iterating over the cells of a dataset in batches

# An iterator over `cells` (1-based, any order, repeats allowed; default all cells in
# order) in batches of batch_size cells, on the library's batches iterator
# (dc_dataset_batches): while R works on one batch, the next read_ahead batches are read
# and decompressed on the library's threads. dc_next_batch() returns each batch as a
# dgCMatrix (dimnames as dc_read_cells), then NULL; the iterator's memory is released at
# the end, by dc_close(it), or by the garbage collector.
dc_batches <- function(ds, cells = NULL, batch_size = 1024L, genes_by_cells = TRUE,
                       read_ahead = 2L) {
  info <- dc_info(ds)
  cells <- if (is.null(cells)) seq_len(info$n_cells) else .check_cells(cells, info$n_cells)
  batch_size <- .check_count(batch_size, "batch_size", 1, 2^31 - 1)
  .check_flag(genes_by_cells, "genes_by_cells")
  read_ahead <- .check_count(read_ahead, "read_ahead", 1, 64)
  state <- new.env(parent = emptyenv())
  state$ptr <- .Call(dcr_batches, .ds_ptr(ds), as.numeric(cells), batch_size, read_ahead)
  state$n_genes <- info$n_genes
  state$genes <- dc_genes(ds)
  state$cell_names <- dc_cell_names(ds)
  state$cells <- as.numeric(cells)
  state$batch_size <- batch_size
  state$genes_by_cells <- genes_by_cells
  state$next_start <- 1
  state$done <- length(cells) == 0L
  structure(list(state = state), class = "deltacells_batches")
}

length.deltacells_batches <- function(x) {
  as.integer(ceiling(length(x$state$cells) / x$state$batch_size))
}

print.deltacells_batches <- function(x, ...) {
  s <- x$state
  cat(sprintf("<deltacells batches: %d cells in %d batches of up to %.0f; next: %s>\n",
              length(s$cells), length(x), s$batch_size,
              if (!dc_has_next(x)) "done" else sprintf("cells[%.0f]", s$next_start)))
  invisible(x)
}

dc_has_next <- function(it) {
  if (!inherits(it, "deltacells_batches")) .dc_arg_stop("'it' must come from dc_batches()")
  !isTRUE(it$state$done) && it$state$next_start <= length(it$state$cells)
}

# The next batch, or NULL after the last. A batch whose tiles cannot be read raises its
# error and is skipped: the next call returns the batch after it (as the C iterator does).
dc_next_batch <- function(it) {
  if (!inherits(it, "deltacells_batches")) .dc_arg_stop("'it' must come from dc_batches()")
  s <- it$state
  if (!dc_has_next(it)) return(NULL)
  start <- s$next_start
  end <- min(start + s$batch_size - 1, length(s$cells))
  s$next_start <- end + 1  # consumed even if reading it fails (the library skips it too)
  slots <- .Call(dcr_batches_next, s$ptr)
  if (s$next_start > length(s$cells)) dc_close(it)  # the read-ahead's memory, at once
  if (is.null(slots) || length(slots$p) - 1L != end - start + 1)
    .dc_arg_stop(sprintf("the batches iterator ended at cells[%.0f] (expected %.0f rows)", start,
                         end - start + 1), "DC_ERR_INTERNAL")
  m <- new("dgCMatrix", i = slots$i, p = slots$p, x = slots$x,
           Dim = c(as.integer(s$n_genes), as.integer(end - start + 1)),
           Dimnames = list(s$genes, if (is.null(s$cell_names)) NULL
                                    else s$cell_names[s$cells[start:end]]))
  if (s$genes_by_cells) m else t(m)
}

# FUN(batch, ...) for each batch of dc_batches(ds, cells, batch_size); the results as a
# list (like lapply). The iterator is released when FUN fails too.
dc_for_each_batch <- function(ds, FUN, ..., cells = NULL, batch_size = 1024L,
                              genes_by_cells = TRUE, read_ahead = 2L) {
  FUN <- tryCatch(match.fun(FUN), error = function(e)
    .dc_arg_stop("'FUN' must be a function (or the name of one)"))
  it <- dc_batches(ds, cells, batch_size, genes_by_cells, read_ahead)
  on.exit(dc_close(it))
  out <- vector("list", length(it))
  k <- 0L
  while (!is.null(m <- dc_next_batch(it))) {
    k <- k + 1L
    out[[k]] <- FUN(m, ...)
  }
  out
}

# A block-shuffled order of all cells (1-based), the same for the same seed on every
# platform (dc_dataset_shuffled_order): the tiles in a random order, the cells shuffled
# within windows of window_tiles tiles, so that a batch reads few tiles. For dc_batches.
dc_shuffled_order <- function(ds, seed, window_tiles = 1L) {
  seed <- .check_count(seed, "seed", 0, 2^53)
  window_tiles <- .check_count(window_tiles, "window_tiles", 1, 2^32 - 1)
  .Call(dcr_shuffled_order, .ds_ptr(ds), seed, window_tiles)
}

# ---------------------------------------------------------------------------------------
# ChromData

cd_open <- function(path, options = NULL) {
  path <- .check_string(path, "path")
  ptr <- .Call(dcr_cd_open, .dc_location(path), .dc_options(options))
  structure(list(ptr = ptr, path = path), class = "deltacells_chromdata")
}

cd_close <- function(x) dc_close(x)

cd_info <- function(cd) .Call(dcr_cd_info, .cd_ptr(cd))

print.deltacells_chromdata <- function(x, ...) {
  i <- cd_info(x)
  cat(sprintf("<ChromData %d.%d store %s: %.0f spots, %.0f traces, %.0f cells>\n",
              i$format_major, i$format_minor, x$path, i$n_spots, i$n_traces, i$n_cells))
  invisible(x)
}

# The NA rule: ChromData stores a missing coordinate as NaN (coordinates are never null),
# so NaN in x, y, z and layers/<key>/x|y|z is read as NA, like every Arrow null. In other
# floating-point columns a NaN is a stored value and stays NaN.
.coords_na <- function(df) {
  for (name in grep("^(x|y|z|layers/.+/(x|y|z))$", names(df), value = TRUE)) {
    v <- df[[name]]
    if (is.double(v)) {
      v[is.nan(v)] <- NA_real_
      df[[name]] <- v
    }
  }
  df
}

.cd_id <- function(id, what) {
  if ((!is.character(id) && !is.numeric(id)) || length(id) != 1L || is.na(id))
    .dc_arg_stop(sprintf("'%s' must be a single id (a string, or a number for integer ids)", what))
  if (is.numeric(id)) format(id, scientific = FALSE, trim = TRUE) else id
}

.check_columns <- function(columns) {
  if (!is.null(columns) && (!is.character(columns) || anyNA(columns)))
    .dc_arg_stop("'columns' must be a character vector (no NA), \"coords\", or NULL (all)")
  columns
}

cd_trace <- function(cd, id, columns = NULL) {
  cols <- .Call(dcr_cd_query, .cd_ptr(cd), 0L, .cd_id(id, "id"), .check_columns(columns), .int64_mode())
  .coords_na(.as_data_frame(cols))
}

cd_cell <- function(cd, id, columns = NULL) {
  cols <- .Call(dcr_cd_query, .cd_ptr(cd), 1L, .cd_id(id, "id"), .check_columns(columns), .int64_mode())
  .coords_na(.as_data_frame(cols))
}

cd_chrom <- function(cd, name, columns = NULL) {
  cols <- .Call(dcr_cd_query, .cd_ptr(cd), 2L, .check_string(name, "name"), .check_columns(columns),
                .int64_mode())
  .coords_na(.as_data_frame(cols))
}

cd_table <- function(cd, name) {
  cols <- .Call(dcr_cd_query, .cd_ptr(cd), 3L, .check_string(name, "name"), NULL, .int64_mode())
  .as_data_frame(cols)
}

cd_spots <- function(cd, original_order = FALSE, columns = NULL) {
  cols <- .Call(dcr_cd_query, .cd_ptr(cd), 4L, .check_flag(original_order, "original_order"),
                .check_columns(columns), .int64_mode())
  .coords_na(.as_data_frame(cols))
}

cd_keys <- function(cd, kind) {
  cols <- .Call(dcr_cd_query, .cd_ptr(cd), 5L, .check_string(kind, "kind"), NULL, .int64_mode())
  as.character(cols[[1]])
}

cd_categories <- function(cd, table, column) {
  cols <- .Call(dcr_cd_query, .cd_ptr(cd), 6L, .check_string(table, "table"),
                .check_string(column, "column"), .int64_mode())
  cols[[1]]
}

# Iteration over a store in batches of whole traces (runs: one trace in one cell and
# chromosome) or whole cells, in stored order, reading row group by row group: cd_next
# returns each batch as a data.frame (as cd_trace does), then NULL.
cd_iter_traces <- function(cd, batch = 100, columns = NULL) .cd_iter(cd, 0L, batch, columns)

cd_iter_cells <- function(cd, batch = 10, columns = NULL) .cd_iter(cd, 1L, batch, columns)

.cd_iter <- function(cd, what, batch, columns) {
  ptr <- .Call(dcr_cd_iter, .cd_ptr(cd), what, .check_count(batch, "batch", 1),
               .check_columns(columns))
  state <- new.env(parent = emptyenv())
  state$ptr <- ptr
  state$done <- FALSE
  structure(list(state = state, what = if (what == 0L) "traces" else "cells"),
            class = "deltacells_cd_iter")
}

cd_next <- function(it) {
  if (!inherits(it, "deltacells_cd_iter"))
    .dc_arg_stop("'it' must come from cd_iter_traces() or cd_iter_cells()")
  s <- it$state
  if (s$done) return(NULL)
  cols <- .Call(dcr_stream_next, s$ptr, .int64_mode())
  if (is.null(cols)) {
    s$done <- TRUE
    return(NULL)
  }
  .coords_na(.as_data_frame(cols))
}

print.deltacells_cd_iter <- function(x, ...) {
  cat(sprintf("<ChromData iterator over %s%s>\n", x$what, if (x$state$done) ": done" else ""))
  invisible(x)
}

cd_write <- function(spots, path, layout = c("primary_coords", "partitioned", "flat"),
                     coord_float32 = FALSE, memory_budget = NULL, threads = NULL,
                     overwrite = FALSE, bins = NULL, bin_tracks = NULL, intervals = list(),
                     points = list(), traces = NULL, cells = NULL, cellm = NULL, binm = NULL,
                     results = NULL, uns = NULL, contacts = NULL, links = NULL,
                     options = NULL) {
  if (!is.data.frame(spots)) .dc_arg_stop("'spots' must be a data.frame")
  path <- .check_string(path, "path")
  options <- .dc_options(options)
  layout <- match.arg(layout)
  params <- .params(list(memory_budget = .check_count(memory_budget, "memory_budget", 1),
                         coord_float32 = as.numeric(.check_flag(coord_float32, "coord_float32")),
                         layout = .layouts[[layout]],
                         overwrite = as.numeric(.check_flag(overwrite, "overwrite")),
                         threads = .check_count(threads, "threads", 0, 2^31 - 1)),
                    .cd_writer_params)
  table_of <- function(x, what) {
    if (!is.data.frame(x)) .dc_arg_stop(sprintf("'%s' must be a data.frame", what))
    as.list(x)
  }
  named <- function(x, what) {
    if (!is.list(x) || (length(x) && (is.null(names(x)) || any(names(x) == ""))))
      .dc_arg_stop(sprintf("'%s' must be a named list of tables", what))
    x
  }
  extras <- list()
  if (!is.null(bins)) extras <- c(extras, list(list(0L, NULL, NULL, table_of(bins, "bins"))))
  if (!is.null(bin_tracks))
    extras <- c(extras, list(list(1L, NULL, NULL, table_of(bin_tracks, "bin_tracks"))))
  for (key in names(named(intervals, "intervals"))) {
    x <- intervals[[key]]
    kind <- "domain"
    if (!is.data.frame(x)) {
      if (!is.list(x) || is.null(x$table) || length(x$kind) != 1L)
        .dc_arg_stop(sprintf("'intervals$%s' must be a data.frame or list(table =, kind =)", key))
      kind <- as.character(x$kind)
      x <- x$table
    }
    extras <- c(extras, list(list(2L, key, kind, table_of(x, paste0("intervals$", key)))))
    if (!is.data.frame(intervals[[key]]) && !is.null(intervals[[key]]$source_result))
      extras <- c(extras, list(list(7L, key, "intervals",
                                    .json_out(list(source_result = intervals[[key]]$source_result)))))
  }
  for (key in names(named(points, "points")))
    extras <- c(extras, list(list(3L, key, NULL, table_of(points[[key]], paste0("points$", key)))))
  extras <- c(extras, .content_extras(traces, cells, cellm, binm, results, uns, contacts, links))
  .Call(dcr_cd_write, .dc_location(path), as.list(spots), params, extras, options)
  invisible(path)
}
