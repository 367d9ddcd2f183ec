# R interface of libdeltacells. Every function calls one routine of the C shim
# (src/deltacells_r.c), which calls the C API; nothing here reads or writes the formats.

.onLoad <- function(libname, pkgname) {
  .Call(dcr_init, environment(.onLoad))
  v <- .Call(dcr_versions)
  if (v$abi_version != v$header_abi_version) {
    stop(sprintf("libdeltacells ABI %d does not match the header's ABI %d",
                 v$abi_version, v$header_abi_version))
  }
}

# Called by the C shim after a library call failed: an R error condition of class
# "deltacells_error" carrying the status code, its name and the library's message.
.dc_stop <- function(status, status_name, message, fn) {
  cond <- structure(
    class = c(paste0("deltacells_", tolower(sub("^DC_ERR_", "", status_name))),
              "deltacells_error", "error", "condition"),
    list(message = sprintf("%s: %s: %s", fn, status_name, message),
         call = sys.call(-1), status = status, status_name = status_name,
         detail = message))
  stop(cond)
}

# Codes of the DC_DATASET_* and DC_WRITER_* parameters (include/deltacells.h).
.dataset_params <- c(threads = 0L, tile_cache = 1L, verify_crc = 2L, cache_bytes = 3L)
.cd_writer_params <- c(memory_budget = 0L, coord_float32 = 1L, layout = 2L, overwrite = 3L,
                       threads = 4L)
.layouts <- c(flat = 0L, partitioned = 1L, primary_coords = 2L)
.writer_params <- c(tile_size = 0L, n_chunks = 1L, zstd_level = 2L, threads = 3L,
                    overwrite = 4L, obs_tiles_per_file = 5L, obs_max_categories = 6L)

dc_version <- function() .Call(dcr_versions)

# ---------------------------------------------------------------------------------------
# Datasets

dc_open <- function(path) {
  structure(list(ptr = .Call(dcr_open, path.expand(path)), path = path),
            class = "deltacells_dataset")
}

dc_close <- function(x) {
  .Call(dcr_close, x$ptr)
  invisible(NULL)
}

dc_info <- function(ds) .Call(dcr_info, ds$ptr)

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
  args <- list(threads = threads, tile_cache = tile_cache, verify_crc = verify_crc,
               cache_bytes = cache_bytes)
  for (p in names(args)) {
    if (!is.null(args[[p]])) .Call(dcr_set, ds$ptr, .dataset_params[[p]], as.numeric(args[[p]]))
  }
  invisible(ds)
}

dc_genes <- function(ds) {
  if (!dc_info(ds)$has_var_names) return(NULL)
  .Call(dcr_genes, ds$ptr)
}

dc_gene_order <- function(ds) {
  if (!dc_info(ds)$has_gene_order) return(NULL)
  .Call(dcr_gene_order, ds$ptr) + 1L
}

dc_read_cells <- function(ds, cells, genes_by_cells = TRUE) {
  cells <- as.numeric(cells)
  slots <- .Call(dcr_read_cells, ds$ptr, cells)
  n_genes <- dc_info(ds)$n_genes
  # Rows of the library's CSR result are cells: exactly the columns of a genes x cells CSC.
  m <- new("dgCMatrix", i = slots$i, p = slots$p, x = slots$x,
           Dim = c(as.integer(n_genes), length(cells)),
           Dimnames = list(dc_genes(ds), NULL))
  if (genes_by_cells) m else t(m)
}

# Batches (C API section 3.1): the minimal layer over the .Call wrappers; not exported.
# `cells` are 1-based. .dc_batches_next returns a genes x rows dgCMatrix, NULL at the end;
# a batch that fails raises its error and is consumed (iterating goes on with the next).
.dc_batches <- function(ds, cells, batch_size, read_ahead = 0) {
  structure(list(ptr = .Call(dcr_batches, ds$ptr, as.numeric(cells), batch_size, read_ahead),
                 n_genes = dc_info(ds)$n_genes, genes = dc_genes(ds)),
            class = "deltacells_batches")
}

.dc_batches_peek <- function(b) {
  v <- .Call(dcr_batches_peek, b$ptr)
  list(n_rows = v[[1]], nnz = v[[2]])
}

.dc_batches_next <- function(b) {
  slots <- .Call(dcr_batches_next, b$ptr)
  if (is.null(slots)) return(NULL)
  new("dgCMatrix", i = slots$i, p = slots$p, x = slots$x,
      Dim = c(as.integer(b$n_genes), length(slots$p) - 1L), Dimnames = list(b$genes, NULL))
}

.dc_batches_close <- function(b) {
  .Call(dcr_close, b$ptr)
  invisible(NULL)
}

.dc_shuffled_order <- function(ds, seed, window_tiles = 1) {
  .Call(dcr_shuffled_order, ds$ptr, seed, window_tiles)
}

.as_data_frame <- function(cols) {
  n <- attr(cols, "n_rows")
  attr(cols, "n_rows") <- NULL
  structure(cols, class = "data.frame", row.names = .set_row_names(as.integer(n)))
}

dc_obs <- function(ds, columns = NULL) .as_data_frame(.Call(dcr_obs, ds$ptr, columns))

dc_var_table <- function(ds) .as_data_frame(.Call(dcr_var_table, ds$ptr))

dc_write <- function(mat, path, obs = NULL, var_names = rownames(mat), tile_size = NULL,
                     n_chunks = NULL, zstd_level = NULL, threads = NULL, overwrite = FALSE) {
  if (!inherits(mat, "dgCMatrix")) mat <- methods::as(mat, "CsparseMatrix")
  if (!inherits(mat, "dgCMatrix")) stop("'mat' must be a dgCMatrix (genes x cells)")
  if (!is.null(obs)) {
    if (!is.data.frame(obs)) stop("'obs' must be a data.frame")
    if (nrow(obs) != ncol(mat)) stop("'obs' must have one row per cell (column of 'mat')")
  }
  params <- list(tile_size = tile_size, n_chunks = n_chunks, zstd_level = zstd_level,
                 threads = threads, overwrite = as.numeric(isTRUE(overwrite)))
  params <- params[!vapply(params, is.null, TRUE)]
  params <- stats::setNames(as.numeric(unlist(params)), .writer_params[names(params)])
  if (!is.null(var_names)) var_names <- as.character(var_names)
  .Call(dcr_write, path.expand(path), as.numeric(nrow(mat)), mat@p, mat@i, mat@x, var_names,
        if (is.null(obs)) NULL else as.list(obs), params)
  invisible(path)
}

# ---------------------------------------------------------------------------------------
# ChromData

cd_open <- function(path) {
  structure(list(ptr = .Call(dcr_cd_open, path.expand(path)), path = path),
            class = "deltacells_chromdata")
}

cd_close <- function(x) dc_close(x)

cd_info <- function(cd) .Call(dcr_cd_info, cd$ptr)

print.deltacells_chromdata <- function(x, ...) {
  i <- cd_info(x)
  cat(sprintf("<ChromData %d.%d store %s: %.0f spots, %.0f traces, %.0f cells>\n",
              i$format_major, i$format_minor, x$path, i$n_spots, i$n_traces, i$n_cells))
  invisible(x)
}

cd_trace <- function(cd, id, columns = NULL)
  .as_data_frame(.Call(dcr_cd_query, cd$ptr, 0L, as.character(id), columns))

cd_cell <- function(cd, id, columns = NULL)
  .as_data_frame(.Call(dcr_cd_query, cd$ptr, 1L, as.character(id), columns))

cd_chrom <- function(cd, name, columns = NULL)
  .as_data_frame(.Call(dcr_cd_query, cd$ptr, 2L, as.character(name), columns))

cd_table <- function(cd, name)
  .as_data_frame(.Call(dcr_cd_query, cd$ptr, 3L, name, NULL))

cd_spots <- function(cd, original_order = FALSE, columns = NULL)
  .as_data_frame(.Call(dcr_cd_query, cd$ptr, 4L, isTRUE(original_order), columns))

cd_keys <- function(cd, kind) .as_data_frame(.Call(dcr_cd_query, cd$ptr, 5L, kind, NULL))[[1]]

cd_categories <- function(cd, table, column)
  .as_data_frame(.Call(dcr_cd_query, cd$ptr, 6L, table, column))[[1]]

cd_write <- function(spots, path, layout = c("primary_coords", "partitioned", "flat"),
                     coord_float32 = FALSE, memory_budget = NULL, threads = NULL,
                     overwrite = FALSE, bins = NULL, bin_tracks = NULL, intervals = list(),
                     points = list()) {
  if (!is.data.frame(spots)) stop("'spots' must be a data.frame")
  layout <- match.arg(layout)
  params <- list(memory_budget = memory_budget, coord_float32 = as.numeric(isTRUE(coord_float32)),
                 layout = .layouts[[layout]], overwrite = as.numeric(isTRUE(overwrite)),
                 threads = threads)
  params <- params[!vapply(params, is.null, TRUE)]
  params <- stats::setNames(as.numeric(unlist(params)), .cd_writer_params[names(params)])
  table_of <- function(x, what) {
    if (!is.data.frame(x)) stop(sprintf("'%s' must be a data.frame", what))
    as.list(x)
  }
  named <- function(x, what) {
    if (!is.list(x) || (length(x) && (is.null(names(x)) || any(names(x) == ""))))
      stop(sprintf("'%s' must be a named list of tables", what))
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
      kind <- as.character(x$kind)
      x <- x$table
    }
    extras <- c(extras, list(list(2L, key, kind, table_of(x, paste0("intervals$", key)))))
  }
  for (key in names(named(points, "points")))
    extras <- c(extras, list(list(3L, key, NULL, table_of(points[[key]], paste0("points$", key)))))
  .Call(dcr_cd_write, path.expand(path), as.list(spots), params, extras)
  invisible(path)
}
