library(testthat)
library(deltacells)

test_check("deltacells")
