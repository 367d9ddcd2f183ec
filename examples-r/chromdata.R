# Query a ChromData store: the spots of a trace, a cell and a chromosome as data.frames.
#   Rscript examples-r/chromdata.R STORE   (a *.chromdata.zarr directory or a .cdz file)
library(deltacells)

args <- commandArgs(trailingOnly = TRUE)
if (length(args) < 1) stop("usage: Rscript chromdata.R STORE")
cd <- cd_open(args[1])
print(cd)
traces <- as.character(cd_categories(cd, "spots", "trace_id"))
tr <- cd_trace(cd, traces[1], columns = "coords")   # keys + x, y, z
print(head(tr))
if (cd_info(cd)$has_cell_id) {
  cells <- as.character(cd_categories(cd, "spots", "cell_id"))
  print(nrow(cd_cell(cd, cells[1])))
}
bins <- cd_table(cd, "bins")
chrom <- cd_chrom(cd, as.character(bins$chrom[1]))
cat(sprintf("%d spots on %s\n", nrow(chrom), as.character(bins$chrom[1])))
