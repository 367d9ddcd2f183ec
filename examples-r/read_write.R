# Write a sparse count matrix (genes x cells) with cell annotations as a deltacells dataset,
# then read some cells and the annotations back.
#   Rscript examples-r/read_write.R
library(deltacells)

counts <- Matrix::rsparsematrix(200, 50, 0.05, rand.x = function(n) rpois(n, 3) + 1)
rownames(counts) <- paste0("gene", 1:200)
obs <- data.frame(cell_type = factor(sample(c("T", "B", "NK"), 50, replace = TRUE)),
                  n_genes = as.integer(Matrix::colSums(counts > 0)),
                  row.names = sprintf("cell%02d", 1:50))   # stored as the obs index

path <- file.path(tempdir(), "example.dc")
dc_write(counts, path, obs = obs, tile_size = 16, overwrite = TRUE)

ds <- dc_open(path)
print(ds)                                   # <deltacells dataset ...: 200 genes x 50 cells ...>
m <- dc_read_cells(ds, c(50, 1, 2))         # genes x cells dgCMatrix, 1-based cells
stopifnot(all(m == counts[, c(50, 1, 2)]),
          identical(colnames(m), c("cell50", "cell01", "cell02")),   # dimnames
          identical(rownames(m), rownames(counts)))
cells_by_genes <- dc_read_cells(ds, 1:5, genes_by_cells = FALSE)
stopifnot(identical(dim(cells_by_genes), c(5L, 200L)))
a <- dc_obs(ds)                             # row.names = the stored index
stopifnot(identical(as.character(a$cell_type), as.character(obs$cell_type)),
          identical(a$n_genes, obs$n_genes), identical(rownames(a), rownames(obs)))
print(table(a$cell_type))

# Iterate over all cells in batches of 16 (the last one shorter).
it <- dc_batches(ds, batch_size = 16)
total <- 0
while (!is.null(b <- dc_next_batch(it))) total <- total + sum(b)
stopifnot(total == sum(counts))
depth <- unlist(dc_for_each_batch(ds, Matrix::colSums, batch_size = 16))
stopifnot(identical(names(depth), rownames(obs)))

# Errors are R conditions of class "deltacells_error" carrying the library's status.
e <- tryCatch(dc_read_cells(ds, 51), deltacells_error = function(e) e)
cat("expected error:", conditionMessage(e), "\n")
stopifnot(e$status_name == "DC_ERR_OUT_OF_RANGE")
