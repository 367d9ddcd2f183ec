# Everything a ChromData store holds besides the spots (C API 1.1, sections 5.1 and 6.1):
# cellm / binm arrays, results (tables, arrays, JSON values, mappings, with provenance),
# uns, contacts and links, read as R matrices, arrays, data.frames and lists, and written
# by cd_write(). Arrays are row-major in the store; R arrays are column-major: values are
# transposed on the way in and out, so an R matrix reads back as the same matrix.

.json_in <- function(text) jsonlite::fromJSON(text, simplifyVector = FALSE)

.json_out <- function(x) {
  as.character(jsonlite::toJSON(x, auto_unbox = TRUE, null = "null", na = "null",
                                digits = NA, always_decimal = FALSE))
}

# list(values in row-major order, shape) of an R vector, matrix or array.
.row_major <- function(x, what) {
  if (is.factor(x) || !(is.numeric(x) || is.logical(x)))
    .dc_arg_stop(sprintf("'%s' must be a numeric or logical vector, matrix or array", what))
  if (inherits(x, "integer64"))
    .dc_arg_stop(sprintf("'%s': bit64::integer64 is not supported (convert it to double)", what))
  d <- dim(x)
  if (is.null(d)) d <- length(x)
  v <- if (length(d) > 1L) aperm(x, rev(seq_along(d))) else x
  list(as.vector(v), as.numeric(d))
}

# An R vector / matrix / array from row-major values and a shape.
.from_row_major <- function(values, shape) {
  shape <- as.numeric(shape)
  if (length(shape) <= 1L) return(values)
  aperm(array(values, rev(shape)), rev(seq_along(shape)))
}

# A JSON list of scalars of one type as an R vector; other lists stay lists.
.simplify <- function(x) {
  if (length(x) > 0L && is.null(names(x)) &&
      all(vapply(x, function(e) is.atomic(e) && length(e) == 1L, logical(1)))) {
    types <- unique(vapply(x, typeof, character(1)))
    if (length(types) == 1L || all(types %in% c("integer", "double"))) return(unlist(x))
  }
  x
}

# Tagged JSON (chromdata-zarr.md section 12) to R: float tags to NaN / Inf, tuples and
# dicts to lists, ndarray tags and array references to arrays.
.untag <- function(cd, x) {
  if (!is.list(x)) return(x)
  tag <- x[["__uchrom_type__"]]
  if (!is.null(tag)) {
    return(switch(tag,
      float = switch(x$value, nan = NaN, inf = Inf, `-inf` = -Inf, NA_real_),
      tuple = lapply(x$items, function(e) .untag(cd, e)),
      dict = stats::setNames(lapply(x$items, function(kv) .untag(cd, kv[[2]])),
                             vapply(x$items, function(kv) as.character(kv[[1]]), character(1))),
      ndarray = {
        v <- unlist(lapply(unlist(x$data, recursive = TRUE), function(e) .untag(cd, e)))
        if (grepl("b1$|bool", x$dtype)) v <- as.logical(v)
        .from_row_major(v, unlist(x$shape))
      },
      array_ref = .cd_array(cd, "uns", sub("^uns/", "", x$path)),
      x))
  }
  out <- lapply(x, function(e) .untag(cd, e))
  .simplify(out)
}

# R to tagged JSON: numbers with dim or more than one element -> ndarray tags (the writer
# moves those over 64 elements to Zarr arrays); NaN / Inf -> float tags; NA -> null.
.tag <- function(x, what) {
  if (is.null(x)) return(NULL)
  if (is.factor(x)) x <- as.character(x)
  if (is.data.frame(x)) .dc_arg_stop(sprintf("'%s': a data.frame cannot be stored as JSON", what))
  if (is.list(x)) {
    out <- lapply(seq_along(x), function(i) .tag(x[[i]], what))
    if (!is.null(names(x))) return(stats::setNames(out, names(x)))
    return(out)
  }
  if (is.character(x)) return(if (length(x) == 1L && is.null(dim(x))) x else as.list(x))
  if (!is.numeric(x) && !is.logical(x))
    .dc_arg_stop(sprintf("'%s': values of type %s cannot be stored", what, typeof(x)))
  scalar <- function(v) {
    if (is.na(v) && !is.nan(v)) return(NULL)
    if (is.double(v) && !is.finite(v))
      return(list(`__uchrom_type__` = "float", value = if (is.nan(v)) "nan" else if (v > 0) "inf" else "-inf"))
    v
  }
  if (length(x) == 1L && is.null(dim(x))) return(scalar(x))
  rm <- .row_major(x, what)
  if (anyNA(rm[[1]]) && !all(is.nan(rm[[1]][is.na(rm[[1]])])))
    .dc_arg_stop(sprintf("'%s': arrays cannot hold NA", what))
  dtype <- if (is.logical(x)) "|b1" else if (is.integer(x)) "<i4" else "<f8"
  data <- lapply(rm[[1]], scalar)
  list(`__uchrom_type__` = "ndarray", dtype = dtype, shape = as.list(rm[[2]]), data = data)
}

.cd_array <- function(cd, kind, path) {
  r <- .Call(dcr_cd_content, .cd_ptr(cd), 1L, kind, path, .int64_mode())
  .from_row_major(r[[1]], unlist(.json_in(r[[2]])))
}

cd_attrs <- function(cd, kind, path = character()) {
  kind <- .check_string(kind, "kind")
  if (!is.character(path) || anyNA(path)) .dc_arg_stop("'path' must be a character vector (no NA)")
  .json_in(.Call(dcr_cd_content, .cd_ptr(cd), 0L, kind, path, .int64_mode()))
}

cd_cellm <- function(cd, key) .cd_array(cd, "cellm", .check_string(key, "key"))

cd_binm <- function(cd, key) .cd_array(cd, "binm", .check_string(key, "key"))

cd_result <- function(cd, ...) {
  path <- c(...)
  if (!is.character(path) || !length(path) || anyNA(path))
    .dc_arg_stop("the result is named by its key (then member keys inside mappings)")
  a <- cd_attrs(cd, "results", path)
  value <- switch(a$type,
    table = .as_data_frame(.Call(dcr_cd_content, .cd_ptr(cd), 2L, NULL, path, .int64_mode())),
    array = .cd_array(cd, "results", path),
    json = .untag(cd, a$value),
    mapping = structure(
      stats::setNames(lapply(a$keys, function(k) cd_result(cd, c(path, k))),
                      vapply(a$keys, as.character, character(1))),
      class = "cd_mapping"))
  prov <- a[setdiff(names(a), c("type", "value", "keys"))]
  if (length(prov)) attr(value, "provenance") <- prov
  value
}

cd_mapping <- function(...) structure(list(...), class = "cd_mapping")

cd_uns <- function(cd) .untag(cd, cd_attrs(cd, "uns"))

.records <- function(cd, kind) {
  text <- .Call(dcr_cd_content, .cd_ptr(cd), 0L, kind, character(), .int64_mode())
  r <- jsonlite::fromJSON(text, simplifyVector = TRUE)
  if (!length(r)) return(data.frame(key = character(), path = character(), stringsAsFactors = FALSE))
  r
}

cd_contacts <- function(cd) .records(cd, "contacts")

cd_links <- function(cd) .records(cd, "links")

# cd_write extras (see dcr_cd_write's list(op, key, kind, data)) for the content of C API
# section 6.1.
.content_extras <- function(traces, cells, cellm, binm, results, uns, contacts, links) {
  ex <- list()
  add <- function(op, key, kind, data) ex[[length(ex) + 1L]] <<- list(op, key, kind, data)
  table_of <- function(x, what) {
    if (!is.data.frame(x)) .dc_arg_stop(sprintf("'%s' must be a data.frame", what))
    x <- as.list(x)
    class(x) <- "data.frame"
    x
  }
  if (!is.null(traces)) add(4L, "traces", NULL, table_of(traces, "traces"))
  if (!is.null(cells)) add(4L, "cells", NULL, table_of(cells, "cells"))
  for (kind in c("cellm", "binm")) {
    arrays <- list(cellm = cellm, binm = binm)[[kind]]
    if (!length(arrays)) next
    if (!is.list(arrays) || is.null(names(arrays)) || any(names(arrays) == ""))
      .dc_arg_stop(sprintf("'%s' must be a named list of matrices or arrays", kind))
    for (key in names(arrays)) add(5L, key, kind, .row_major(arrays[[key]], paste0(kind, "$", key)))
  }
  result <- function(path, x) {
    what <- paste0("results$", paste(path, collapse = "$"))
    attrs <- attr(x, "provenance")
    if (is.null(attrs)) attrs <- list()
    if (!is.list(attrs)) .dc_arg_stop(sprintf("'%s': the provenance attribute must be a list", what))
    if (inherits(x, "cd_mapping")) {
      add(6L, path, .json_out(c(list(type = "mapping"), attrs)), NULL)
      if (length(x) && (is.null(names(x)) || any(names(x) == "")))
        .dc_arg_stop(sprintf("'%s': the members of a mapping are named", what))
      for (k in names(x)) result(c(path, k), x[[k]])
    } else if (is.data.frame(x)) {
      add(6L, path, .json_out(c(list(type = "table"), attrs)), table_of(x, what))
    } else if ((is.numeric(x) || is.logical(x)) && !is.null(dim(x))) {
      add(6L, path, .json_out(c(list(type = "array"), attrs)), .row_major(x, what))
    } else {
      attr(x, "provenance") <- NULL
      add(6L, path, .json_out(c(list(type = "json"), attrs, list(value = .tag(x, what)))), NULL)
    }
  }
  if (length(results)) {
    if (!is.list(results) || is.null(names(results)) || any(names(results) == ""))
      .dc_arg_stop("'results' must be a named list")
    for (key in names(results)) result(key, results[[key]])
  }
  if (!is.null(uns)) {
    if (!is.list(uns) || (length(uns) && is.null(names(uns))))
      .dc_arg_stop("'uns' must be a named list")
    add(7L, NULL, "uns", .json_out(if (length(uns)) .tag(uns, "uns") else structure(list(), names = character())))
  }
  for (kind in c("contacts", "links")) {
    recs <- list(contacts = contacts, links = links)[[kind]]
    if (is.null(recs)) next
    if (is.data.frame(recs)) recs <- lapply(seq_len(nrow(recs)), function(i) as.list(recs[i, , drop = FALSE]))
    if (!is.list(recs)) .dc_arg_stop(sprintf("'%s' must be a data.frame or a list of records", kind))
    recs <- lapply(recs, function(r) lapply(r, function(v) if (is.list(v) && length(v) == 1L) v[[1]] else v))
    add(7L, NULL, kind, .json_out(recs))
  }
  ex
}
