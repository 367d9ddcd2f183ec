/*
 * Arrow C data built by hand for the C tests' inputs (the producer side; arrow_table.h is
 * the consumer): arrays of plain C values and record batches over them, with no Arrow
 * library. Every array owns up to three malloc'd buffers and its heap-allocated children;
 * its release callback frees them and marks it released, so valgrind sees each freed once.
 * Self-contained (aborts when out of memory): include after deltacells.h.
 */
#ifndef DC_ARROW_BUILD_H
#define DC_ARROW_BUILD_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  void *mem[3];
} arrow_build_private;

static inline void *arrow_build_alloc(size_t n, size_t size)
{
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) {
    fprintf(stderr, "arrow_build.h: out of memory (%zu x %zu bytes)\n", n, size);
    abort();
  }
  return p;
}

static inline void release_array(struct ArrowArray *a)
{
  for (int64_t i = 0; i < a->n_children; i++) {
    struct ArrowArray *c = a->children[i];
    if (c->release) c->release(c);
    free(c);
  }
  free(a->children);
  arrow_build_private *p = a->private_data;
  for (int i = 0; i < 3; i++) free(p->mem[i]);
  free(p);
  free((void *)a->buffers);
  a->release = NULL;
}

/* A heap array of `length` rows with `n_buffers` (all NULL: no validity bitmap). */
static inline struct ArrowArray *new_array(int64_t length, int64_t n_buffers)
{
  struct ArrowArray *a = arrow_build_alloc(1, sizeof *a);
  a->length = length;
  a->n_buffers = n_buffers;
  a->buffers = arrow_build_alloc((size_t)n_buffers, sizeof(void *));
  a->private_data = arrow_build_alloc(1, sizeof(arrow_build_private));
  a->release = release_array;
  return a;
}

/* A fixed-width array: `n` values of `width` bytes copied from `v`. */
static inline struct ArrowArray *prim_array(const void *v, int64_t n, size_t width)
{
  struct ArrowArray *a = new_array(n, 2);
  arrow_build_private *p = a->private_data;
  p->mem[1] = arrow_build_alloc((size_t)n * width + 1, 1);
  memcpy(p->mem[1], v, (size_t)n * width);
  a->buffers[1] = p->mem[1];
  return a;
}

/* A utf8 array (32-bit offsets) of the NUL-terminated strings `v`. */
static inline struct ArrowArray *utf8_array(const char *const *v, int64_t n)
{
  struct ArrowArray *a = new_array(n, 3);
  arrow_build_private *p = a->private_data;
  int32_t *off = arrow_build_alloc((size_t)n + 1, sizeof *off);
  size_t total = 0;
  for (int64_t i = 0; i < n; i++) total += strlen(v[i]);
  char *data = arrow_build_alloc(total + 1, 1);
  off[0] = 0;
  for (int64_t i = 0; i < n; i++) {
    size_t len = strlen(v[i]);
    memcpy(data + off[i], v[i], len);
    off[i + 1] = off[i] + (int32_t)len;
  }
  p->mem[1] = off;
  p->mem[2] = data;
  a->buffers[1] = off;
  a->buffers[2] = data;
  return a;
}

/* A fixed-size list of `k` over a child (moved in). */
static inline struct ArrowArray *fsl_array(struct ArrowArray *child, int64_t k)
{
  struct ArrowArray *a = new_array(child->length / k, 1);
  a->n_children = 1;
  a->children = arrow_build_alloc(1, sizeof(struct ArrowArray *));
  a->children[0] = child;
  return a;
}

/* A struct array of `n_rows` over `n_cols` moved-in children, on the heap. */
static inline struct ArrowArray *struct_array(int n_cols, struct ArrowArray **cols, int64_t n_rows)
{
  struct ArrowArray *a = new_array(n_rows, 1);
  a->n_children = n_cols;
  a->children = arrow_build_alloc((size_t)n_cols, sizeof(struct ArrowArray *));
  for (int i = 0; i < n_cols; i++) a->children[i] = cols[i];
  return a;
}

/* The same as a value in *out (a record batch handed to the library). */
static inline void batch_of(struct ArrowArray *out, int n_cols, struct ArrowArray **cols, int64_t n_rows)
{
  struct ArrowArray *a = struct_array(n_cols, cols, n_rows);
  *out = *a;
  free(a);
}

#endif
