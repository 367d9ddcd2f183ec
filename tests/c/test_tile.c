/*
 * C tests of the tile functions (section 2 of the C API), through include/deltacells.h and
 * the real shared or static library.
 *
 * Expectations come from the test's own reading of the tile format (deltacells-format-v2:
 * header, chunk table, indptr, streams, exceptions), not from the library:
 *   - a table-driven CRC-32 (zlib/IEEE) to check and re-seal tiles,
 *   - a checker of the layout of every encoded tile,
 *   - a writer of tiles whose zstd frames hold "raw" (stored) blocks, used both as an
 *     independent encoder and to build tiles that break exactly one rule of the format.
 *
 * Every allocation is freed: ctest also runs this program under valgrind.
 */
#include "deltacells.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Assertions: print file:line and exit non-zero on the first failure.                        */
/* ------------------------------------------------------------------------------------------ */

static unsigned long g_passed;
static const char *g_context = ""; /* the test case running, printed on failure */

_Noreturn static void fail_at(const char *file, int line, const char *fmt, ...)
{
  va_list ap;
  fprintf(stderr, "%s:%d: FAILED [%s]: ", file, line, g_context);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\ntest_tile: %lu passed, 1 failed\n", g_passed);
  exit(1);
}

#define FAIL(...) fail_at(__FILE__, __LINE__, __VA_ARGS__)

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (!(cond))                                                                               \
      FAIL("%s", #cond);                                                                       \
    g_passed++;                                                                                \
  } while (0)

#define CHECK_U64(actual, expected)                                                            \
  do {                                                                                         \
    unsigned long long a_ = (unsigned long long)(actual);                                      \
    unsigned long long e_ = (unsigned long long)(expected);                                    \
    if (a_ != e_)                                                                              \
      FAIL("%s is %llu, expected %s = %llu", #actual, a_, #expected, e_);                      \
    g_passed++;                                                                                \
  } while (0)

static int contains_ci(const char *hay, const char *needle)
{
  size_t n = strlen(needle);
  for (; *hay; hay++) {
    size_t i = 0;
    while (i < n && hay[i] && (hay[i] | 0x20) == (needle[i] | 0x20))
      i++;
    if (i == n)
      return 1;
  }
  return n == 0;
}

/* The call must return `expected`; a failure must leave a non-empty one-line message that
 * mentions `word` (the object or rule concerned), when given. */
static void expect_status(dc_status got, dc_status expected, const char *word, const char *call,
                          const char *file, int line)
{
  const char *msg = dc_last_error();
  if (got != expected)
    fail_at(file, line, "%s\n    returned %s (%d), expected %s (%d); dc_last_error: \"%s\"", call,
            dc_status_name(got), (int)got, dc_status_name(expected), (int)expected,
            msg ? msg : "(NULL)");
  if (expected != DC_OK) {
    if (msg == NULL || msg[0] == '\0')
      fail_at(file, line, "%s\n    returned %s but dc_last_error() is empty", call,
              dc_status_name(got));
    if (strchr(msg, '\n') || strchr(msg, '\r'))
      fail_at(file, line, "%s\n    message is not one line: \"%s\"", call, msg);
    if (word && !contains_ci(msg, word))
      fail_at(file, line, "%s\n    returned %s with message \"%s\", which does not mention \"%s\"",
              call, dc_status_name(got), msg, word);
  }
  g_passed++;
}

#define EXPECT(call, expected) expect_status((call), (expected), NULL, #call, __FILE__, __LINE__)
#define EXPECT_ERR(call, expected, word)                                                       \
  expect_status((call), (expected), (word), #call, __FILE__, __LINE__)

/* ------------------------------------------------------------------------------------------ */
/* Small utilities                                                                            */
/* ------------------------------------------------------------------------------------------ */

static void *xmalloc(size_t n)
{
  void *p = malloc(n ? n : 1);
  if (!p)
    FAIL("out of memory (%zu bytes)", n);
  return p;
}

static void *xcalloc(size_t n, size_t size)
{
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p)
    FAIL("out of memory (%zu x %zu bytes)", n, size);
  return p;
}

static void *xrealloc(void *p, size_t n)
{
  void *q = realloc(p, n ? n : 1);
  if (!q)
    FAIL("out of memory (%zu bytes)", n);
  return q;
}

static uint8_t *xdup(const uint8_t *p, size_t n)
{
  uint8_t *q = xmalloc(n);
  if (n)
    memcpy(q, p, n);
  return q;
}

static uint32_t get_u32(const uint8_t *p)
{
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p) { return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }

static void put_u32(uint8_t *p, uint32_t v)
{
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

/* splitmix64: deterministic pseudo-random numbers, fixed seeds */
static uint64_t g_rng;
static uint64_t rnd(void)
{
  uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static uint64_t rnd_below(uint64_t n) { return rnd() % n; }

/* ------------------------------------------------------------------------------------------ */
/* CRC-32 (zlib / IEEE 802.3, reflected polynomial 0xEDB88320)                                */
/* ------------------------------------------------------------------------------------------ */

static uint32_t g_crc_table[256];

static void crc_init(void)
{
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++)
      c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    g_crc_table[i] = c;
  }
}

static uint32_t crc32_ieee(const uint8_t *p, size_t n)
{
  uint32_t c = 0xFFFFFFFFu;
  while (n--)
    c = g_crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

/* ------------------------------------------------------------------------------------------ */
/* Tile layout (deltacells-format-v2)                                                          */
/* ------------------------------------------------------------------------------------------ */

enum {
  H_MAGIC = 0,
  H_VERSION = 8,
  H_FLAGS = 12,
  H_N_CELLS = 16,
  H_NNZ = 24,
  H_N_GENES = 32,
  H_N_CHUNKS = 36,
  H_INDPTR_OFF = 40,
  H_TOTAL_SIZE = 48,
  H_CRC = 56,
  H_RESERVED = 60,
  HEADER_SIZE = 64,
  ENTRY_SIZE = 96
};

/* the 12 uint64 fields of a chunk table entry */
enum {
  E_CELL_LO,
  E_CELL_HI,
  E_NNZ_LO,
  E_NNZ_HI,
  E_GAPS_OFF,
  E_GAPS_LEN,
  E_VALS_OFF,
  E_VALS_LEN,
  E_VEXC_OFF,
  E_VEXC_LEN,
  E_GEXC_OFF,
  E_GEXC_LEN
};

#define ZSTD_MAGIC 0xFD2FB528u
#define ESCAPE 65535u

static size_t entry_at(uint32_t chunk, int field) { return HEADER_SIZE + (size_t)ENTRY_SIZE * chunk + 8u * (size_t)field; }
static uint64_t entry_get(const uint8_t *blob, uint32_t chunk, int field) { return get_u64(blob + entry_at(chunk, field)); }
static void entry_set(uint8_t *blob, uint32_t chunk, int field, uint64_t v) { put_u64(blob + entry_at(chunk, field), v); }

/* Recomputes the CRC of bytes [64, len) after a deliberate change past the header. */
static void reseal(uint8_t *blob, size_t len) { put_u32(blob + H_CRC, crc32_ieee(blob + HEADER_SIZE, len - HEADER_SIZE)); }

/* ------------------------------------------------------------------------------------------ */
/* CSR matrices (rows = cells)                                                                 */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
  uint64_t n_cells;
  uint32_t n_genes;
  int64_t *indptr;  /* n_cells + 1 */
  int32_t *indices;
  int32_t *values;
  uint64_t cap_cells, cap_nnz;
  uint64_t n_added; /* nonzeros including those of the row being built */
} csr_t;

static void csr_init(csr_t *m, uint32_t n_genes)
{
  memset(m, 0, sizeof *m);
  m->n_genes = n_genes;
  m->cap_cells = 16;
  m->cap_nnz = 16;
  m->indptr = xmalloc((m->cap_cells + 1) * sizeof *m->indptr);
  m->indices = xmalloc(m->cap_nnz * sizeof *m->indices);
  m->values = xmalloc(m->cap_nnz * sizeof *m->values);
  m->indptr[0] = 0;
}

static uint64_t csr_nnz(const csr_t *m) { return (uint64_t)m->indptr[m->n_cells]; }

/* Appends a nonzero to the row being built (row n_cells). */
static void csr_add(csr_t *m, int64_t gene, int64_t value)
{
  uint64_t nz = m->n_added++;
  if (nz == m->cap_nnz) {
    m->cap_nnz *= 2;
    m->indices = xrealloc(m->indices, m->cap_nnz * sizeof *m->indices);
    m->values = xrealloc(m->values, m->cap_nnz * sizeof *m->values);
  }
  m->indices[nz] = (int32_t)gene;
  m->values[nz] = (int32_t)value;
}

/* Closes the row being built. */
static void csr_end_row(csr_t *m)
{
  if (m->n_cells + 1 == m->cap_cells) {
    m->cap_cells *= 2;
    m->indptr = xrealloc(m->indptr, (m->cap_cells + 1) * sizeof *m->indptr);
  }
  m->n_cells++;
  m->indptr[m->n_cells] = (int64_t)m->n_added;
}

static void csr_free(csr_t *m)
{
  free(m->indptr);
  free(m->indices);
  free(m->values);
  memset(m, 0, sizeof *m);
}

/* Random counts: mostly small, some up to 65535, and `big_permille` above 65535. */
static int32_t random_count(unsigned big_permille)
{
  uint64_t r = rnd_below(1000);
  if (r < big_permille)
    return (int32_t)(65536 + rnd_below(2147483647u - 65536 + 1));
  r = rnd_below(100);
  if (r < 70)
    return (int32_t)(1 + rnd_below(3));
  if (r < 95)
    return (int32_t)(4 + rnd_below(97));
  return (int32_t)(101 + rnd_below(65535 - 101 + 1));
}

/* A random matrix: `empty_pct` % of cells empty, the others with 1..max_per_cell nonzeros
 * whose gene gaps are at most max_gap. */
static void random_csr(csr_t *m, uint64_t seed, uint64_t n_cells, uint32_t n_genes,
                       uint32_t max_per_cell, uint32_t max_gap, unsigned empty_pct,
                       unsigned big_permille)
{
  g_rng = seed;
  csr_init(m, n_genes);
  for (uint64_t c = 0; c < n_cells; c++) {
    if (rnd_below(100) >= empty_pct) {
      uint64_t k = 1 + rnd_below(max_per_cell);
      uint64_t g = rnd_below(max_gap < n_genes ? max_gap : n_genes);
      for (uint64_t j = 0; j < k && g < n_genes; j++) {
        csr_add(m, (int64_t)g, random_count(big_permille));
        g += 1 + rnd_below(max_gap);
      }
    }
    csr_end_row(m);
  }
}

/* Value and gap exceptions (counts and gaps above 65535) among nonzeros [lo, hi). */
static void count_exceptions(const csr_t *m, uint64_t lo, uint64_t hi, uint64_t *n_vexc,
                             uint64_t *n_gexc)
{
  *n_vexc = *n_gexc = 0;
  for (uint64_t r = 0; r < m->n_cells; r++) {
    for (uint64_t j = (uint64_t)m->indptr[r]; j < (uint64_t)m->indptr[r + 1]; j++) {
      if (j < lo || j >= hi)
        continue;
      int64_t gap = j == (uint64_t)m->indptr[r] ? m->indices[j] : (int64_t)m->indices[j] - m->indices[j - 1];
      *n_gexc += gap > (int64_t)ESCAPE;
      *n_vexc += (uint32_t)m->values[j] > ESCAPE;
    }
  }
}

/* ------------------------------------------------------------------------------------------ */
/* Checks of an encoded tile against the format and the input                                  */
/* ------------------------------------------------------------------------------------------ */

static void check_layout(const uint8_t *b, size_t len, const csr_t *m, uint32_t want_chunks)
{
  uint64_t nnz = csr_nnz(m);
  CHECK(len >= HEADER_SIZE);
  CHECK(memcmp(b + H_MAGIC, "DELTACEL", 8) == 0);
  CHECK_U64(get_u32(b + H_VERSION), 2);
  CHECK_U64(get_u32(b + H_FLAGS), 0);
  CHECK_U64(get_u64(b + H_N_CELLS), m->n_cells);
  CHECK_U64(get_u64(b + H_NNZ), nnz);
  CHECK_U64(get_u32(b + H_N_GENES), m->n_genes);
  CHECK_U64(get_u32(b + H_N_CHUNKS), want_chunks);
  CHECK_U64(get_u64(b + H_TOTAL_SIZE), len);
  CHECK_U64(get_u32(b + H_CRC), crc32_ieee(b + HEADER_SIZE, len - HEADER_SIZE));
  CHECK_U64(get_u32(b + H_RESERVED), 0);

  uint64_t indptr_off = get_u64(b + H_INDPTR_OFF);
  CHECK(indptr_off % 8 == 0);
  CHECK(indptr_off >= HEADER_SIZE + (uint64_t)ENTRY_SIZE * want_chunks);
  uint64_t indptr_end = indptr_off + 8 * (m->n_cells + 1);
  CHECK(indptr_end <= len);
  for (uint64_t i = 0; i <= m->n_cells; i++)
    if ((int64_t)get_u64(b + indptr_off + 8 * i) != m->indptr[i])
      FAIL("stored indptr[%llu] differs from the input", (unsigned long long)i);

  uint64_t cell = 0, nz = 0;
  for (uint32_t c = 0; c < want_chunks; c++) {
    uint64_t lo = entry_get(b, c, E_CELL_LO), hi = entry_get(b, c, E_CELL_HI);
    CHECK_U64(lo, cell);
    CHECK_U64(entry_get(b, c, E_NNZ_LO), nz);
    CHECK(hi >= lo && hi <= m->n_cells);
    CHECK_U64(entry_get(b, c, E_NNZ_LO), m->indptr[lo]);
    CHECK_U64(entry_get(b, c, E_NNZ_HI), m->indptr[hi]);
    for (int s = 0; s < 4; s++) {
      uint64_t off = entry_get(b, c, E_GAPS_OFF + 2 * s), slen = entry_get(b, c, E_GAPS_LEN + 2 * s);
      if (s >= 2 && slen == 0) {
        CHECK_U64(off, 0); /* "writers store 0" */
        continue;
      }
      CHECK(off % 8 == 0);
      CHECK(off >= indptr_end);
      CHECK(slen >= 4 && off + slen <= len);
      CHECK_U64(get_u32(b + off), ZSTD_MAGIC);
    }
    uint64_t nv, ng;
    count_exceptions(m, entry_get(b, c, E_NNZ_LO), entry_get(b, c, E_NNZ_HI), &nv, &ng);
    CHECK((entry_get(b, c, E_VEXC_LEN) > 0) == (nv > 0));
    CHECK((entry_get(b, c, E_GEXC_LEN) > 0) == (ng > 0));
    cell = hi;
    nz = entry_get(b, c, E_NNZ_HI);
  }
  CHECK_U64(cell, m->n_cells);
  CHECK_U64(nz, nnz);
}

static void check_info(const uint8_t *blob, size_t len, int verify_crc, const csr_t *m,
                       uint32_t want_chunks)
{
  dc_tile_info info;
  uint64_t nv, ng;
  count_exceptions(m, 0, csr_nnz(m), &nv, &ng);
  memset(&info, 0xAB, sizeof info);
  EXPECT(dc_tile_inspect(blob, len, verify_crc, &info), DC_OK);
  CHECK_U64(info.version, 2);
  CHECK_U64(info.n_chunks, want_chunks);
  CHECK_U64(info.n_cells, m->n_cells);
  CHECK_U64(info.nnz, csr_nnz(m));
  CHECK_U64(info.n_genes, m->n_genes);
  CHECK_U64(info.n_exceptions, nv + ng);
  CHECK_U64(info.total_size, len);
}

#define SENTINEL_I32 0x5EA15EA1

/* Decodes with the size-query pattern and compares with the input, exactly. */
static void decode_and_compare(const uint8_t *blob, size_t len, const csr_t *m, uint32_t n_threads,
                               int verify_crc, dc_dtype dtype)
{
  uint64_t nnz = csr_nnz(m), got = 12345;
  int64_t *indptr = xmalloc((m->n_cells + 1) * sizeof *indptr);

  if (nnz > 0) {
    /* size query: capacity 0 and no buffers at all, then with only indptr */
    EXPECT_ERR(dc_tile_decode(blob, len, n_threads, verify_crc, dtype, NULL, NULL, NULL, 0, &got),
               DC_ERR_BUFFER_TOO_SMALL, "capacity");
    CHECK_U64(got, nnz);
    got = 0;
    EXPECT(dc_tile_decode(blob, len, n_threads, verify_crc, dtype, indptr, NULL, NULL, 0, &got),
           DC_ERR_BUFFER_TOO_SMALL);
    CHECK_U64(got, nnz);
    got = 0;
    int32_t one_i;
    float one_f;
    EXPECT(dc_tile_decode(blob, len, n_threads, verify_crc, dtype, indptr, &one_i,
                          dtype == DC_INT32 ? (void *)&one_i : (void *)&one_f, nnz - 1, &got),
           DC_ERR_BUFFER_TOO_SMALL);
    CHECK_U64(got, nnz);
  }

  /* one spare element past nnz must stay untouched */
  int32_t *indices = xmalloc((nnz + 1) * sizeof *indices);
  int32_t *values = xmalloc((nnz + 1) * sizeof *values); /* int32_t or float: both 4 bytes */
  indices[nnz] = SENTINEL_I32;
  values[nnz] = SENTINEL_I32;
  got = 12345;
  EXPECT(dc_tile_decode(blob, len, n_threads, verify_crc, dtype, indptr, indices, values, nnz + 1, &got),
         DC_OK);
  CHECK_U64(got, nnz);
  CHECK(indices[nnz] == SENTINEL_I32);
  CHECK(values[nnz] == SENTINEL_I32);
  for (uint64_t i = 0; i <= m->n_cells; i++)
    if (indptr[i] != m->indptr[i])
      FAIL("indptr[%llu] = %lld, expected %lld", (unsigned long long)i, (long long)indptr[i],
           (long long)m->indptr[i]);
  for (uint64_t j = 0; j < nnz; j++) {
    if (indices[j] != m->indices[j])
      FAIL("indices[%llu] = %d, expected %d", (unsigned long long)j, indices[j], m->indices[j]);
    if (dtype == DC_INT32) {
      if (values[j] != m->values[j])
        FAIL("values[%llu] = %d, expected %d", (unsigned long long)j, values[j], m->values[j]);
    } else {
      float f;
      memcpy(&f, &values[j], sizeof f);
      if (f != (float)m->values[j])
        FAIL("float values[%llu] = %.1f, expected %.1f", (unsigned long long)j, (double)f,
             (double)(float)m->values[j]);
    }
  }
  g_passed++;
  free(indptr);
  free(indices);
  free(values);
}

static uint32_t expected_chunks(const csr_t *m, uint32_t n_chunks)
{
  uint64_t k = n_chunks == 0 ? 8 : n_chunks;
  return (uint32_t)(k < m->n_cells ? k : m->n_cells);
}

static uint8_t *encode(const csr_t *m, int32_t level, uint32_t n_chunks, uint32_t n_threads, size_t *len)
{
  uint8_t *blob = NULL;
  *len = 0;
  EXPECT(dc_tile_encode(m->n_cells, m->n_genes, m->indptr, m->indices, m->values, level, n_chunks,
                        n_threads, &blob, len),
         DC_OK);
  CHECK(blob != NULL);
  return blob;
}

/* Encode with 1 and default threads (same bytes), check the layout and inspect, decode as
 * int32 and float32 with 1, default and 3 threads. */
static void roundtrip(const csr_t *m, int32_t level, uint32_t n_chunks)
{
  size_t len, len0;
  uint32_t want = expected_chunks(m, n_chunks);
  uint8_t *blob = encode(m, level, n_chunks, 1, &len);
  uint8_t *blob0 = encode(m, level, n_chunks, 0, &len0);
  CHECK(len == len0 && memcmp(blob, blob0, len) == 0); /* output does not depend on threads */
  dc_bytes_free(blob0, len0);

  check_layout(blob, len, m, want);
  check_info(blob, len, 1, m, want);
  check_info(blob, len, 0, m, want);
  const uint32_t threads[] = {1, 0, 3};
  for (int t = 0; t < 3; t++) {
    decode_and_compare(blob, len, m, threads[t], 1, DC_INT32);
    decode_and_compare(blob, len, m, threads[t], 1, DC_FLOAT32);
  }
  decode_and_compare(blob, len, m, 1, 0, DC_INT32);
  dc_bytes_free(blob, len);
}

/* ------------------------------------------------------------------------------------------ */
/* Round trips                                                                                 */
/* ------------------------------------------------------------------------------------------ */

static void test_roundtrip_random(void)
{
  csr_t m;
  g_context = "round trip: random 300 x 2000, 10% empty cells";
  random_csr(&m, 1, 300, 2000, 60, 80, 10, 2);
  CHECK(csr_nnz(&m) > 1000);
  const uint32_t chunks[] = {1, 2, 3, 0, 8, 299, 300, 1000};
  for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++)
    roundtrip(&m, 1, chunks[i]);
  g_context = "round trip: zstd levels";
  roundtrip(&m, 0, 4);   /* zstd's default */
  roundtrip(&m, -5, 4);  /* a fast negative level */
  roundtrip(&m, 19, 4);  /* what the format's writers use */
  csr_free(&m);

  g_context = "round trip: larger tile, 1000 x 30000";
  random_csr(&m, 2, 1000, 30000, 120, 500, 5, 1);
  roundtrip(&m, 1, 0);
  roundtrip(&m, 1, 7);
  csr_free(&m);

  g_context = "round trip: one cell, one nonzero";
  csr_init(&m, 1);
  csr_add(&m, 0, 1);
  csr_end_row(&m);
  roundtrip(&m, 1, 0);
  roundtrip(&m, 1, 5);
  csr_free(&m);
}

static void test_roundtrip_empty(void)
{
  csr_t m;
  g_context = "round trip: cells without nonzeros";
  csr_init(&m, 10);
  for (int i = 0; i < 5; i++)
    csr_end_row(&m);
  CHECK_U64(csr_nnz(&m), 0);
  roundtrip(&m, 1, 0); /* 5 chunks of 0 nonzeros each */
  roundtrip(&m, 1, 2);

  /* indices / values may be NULL when nnz is 0, in both directions */
  uint8_t *blob = NULL;
  size_t len = 0;
  uint64_t nnz = 99;
  int64_t indptr[6];
  EXPECT(dc_tile_encode(m.n_cells, m.n_genes, m.indptr, NULL, NULL, 1, 0, 0, &blob, &len), DC_OK);
  EXPECT(dc_tile_decode(blob, len, 0, 1, DC_INT32, indptr, NULL, NULL, 0, &nnz), DC_OK);
  CHECK_U64(nnz, 0);
  for (int i = 0; i < 6; i++)
    CHECK(indptr[i] == 0);
  dc_bytes_free(blob, len);
  csr_free(&m);

  g_context = "round trip: empty cells among full ones";
  csr_init(&m, 50);
  csr_end_row(&m);
  csr_add(&m, 3, 4);
  csr_add(&m, 49, 1);
  csr_end_row(&m);
  csr_end_row(&m);
  csr_end_row(&m);
  csr_add(&m, 0, 7);
  csr_end_row(&m);
  csr_end_row(&m);
  roundtrip(&m, 1, 0);
  roundtrip(&m, 1, 3);
  csr_free(&m);

  g_context = "round trip: zero-cell tile";
  csr_init(&m, 7);
  blob = NULL;
  EXPECT(dc_tile_encode(0, 7, m.indptr, NULL, NULL, 1, 0, 0, &blob, &len), DC_OK);
  check_layout(blob, len, &m, 0);
  CHECK_U64(len, HEADER_SIZE + 8); /* header and indptr[0] only */
  check_info(blob, len, 1, &m, 0);
  indptr[0] = 42;
  nnz = 99;
  EXPECT(dc_tile_decode(blob, len, 0, 1, DC_INT32, indptr, NULL, NULL, 0, &nnz), DC_OK);
  CHECK_U64(nnz, 0);
  CHECK(indptr[0] == 0);
  decode_and_compare(blob, len, &m, 1, 1, DC_FLOAT32);
  dc_bytes_free(blob, len);
  csr_free(&m);
}

static void test_roundtrip_large_counts(void)
{
  csr_t m;
  g_context = "round trip: counts 65535, 65536, 2147483647";
  csr_init(&m, 100);
  csr_add(&m, 0, 65535); /* the largest count stored without an exception */
  csr_add(&m, 1, 65536); /* the smallest exception */
  csr_add(&m, 2, 2147483647);
  csr_add(&m, 99, 1);
  csr_end_row(&m);
  csr_end_row(&m);
  csr_add(&m, 5, 2147483647);
  csr_add(&m, 6, 65535);
  csr_add(&m, 7, 65534);
  csr_add(&m, 8, 131071);
  csr_end_row(&m);
  csr_add(&m, 50, 65536);
  csr_end_row(&m);
  for (int i = 0; i < 20; i++) {
    csr_add(&m, i, 1 + i);
    csr_add(&m, 20 + i, 65530 + i); /* 65530 .. 65549 around the escape value */
    csr_end_row(&m);
  }
  uint64_t nv, ng;
  count_exceptions(&m, 0, csr_nnz(&m), &nv, &ng);
  CHECK_U64(nv, 5 + 14);
  CHECK_U64(ng, 0);
  const uint32_t chunks[] = {1, 2, 0, 24};
  for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++)
    roundtrip(&m, 1, chunks[i]);
  csr_free(&m);
}

static void test_roundtrip_gap_exceptions(void)
{
  csr_t m;
  g_context = "round trip: n_genes 200000, gaps above 65535";
  csr_init(&m, 200000);
  csr_add(&m, 65535, 1); /* first gap 65535: no exception */
  csr_end_row(&m);
  csr_add(&m, 65536, 2); /* first gap 65536: exception */
  csr_end_row(&m);
  csr_add(&m, 0, 1); /* three gap exceptions in one cell add up */
  csr_add(&m, 65536, 70000);
  csr_add(&m, 131072, 3);
  csr_add(&m, 131073, 4);
  csr_add(&m, 199999, 5);
  csr_end_row(&m);
  csr_end_row(&m);
  csr_add(&m, 199999, 9); /* the last gene */
  csr_end_row(&m);
  csr_add(&m, 1, 1);
  csr_add(&m, 2, 1);
  csr_add(&m, 70000, 1);
  csr_add(&m, 70001, 100000);
  csr_add(&m, 135536, 1); /* gap 65535 exactly */
  csr_add(&m, 150000, 1);
  csr_end_row(&m);
  for (int i = 0; i < 30; i++) {
    csr_add(&m, i, 1);
    csr_add(&m, 100000 + i, 2);
    csr_end_row(&m);
  }
  uint64_t nv, ng;
  count_exceptions(&m, 0, csr_nnz(&m), &nv, &ng);
  CHECK_U64(ng, 1 + 3 + 1 + 1 + 30);
  CHECK_U64(nv, 2);
  const uint32_t chunks[] = {1, 2, 3, 0, 36};
  for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++)
    roundtrip(&m, 1, chunks[i]);
  csr_free(&m);

  g_context = "round trip: n_genes 2^31, gene 2^31-1";
  csr_init(&m, 2147483648u);
  csr_add(&m, 0, 1);
  csr_add(&m, 2147483647, 2147483647);
  csr_end_row(&m);
  csr_add(&m, 2147483647, 5);
  csr_end_row(&m);
  csr_add(&m, 1000000000, 5);
  csr_add(&m, 2000000000, 5);
  csr_end_row(&m);
  roundtrip(&m, 1, 0);
  roundtrip(&m, 1, 1);
  csr_free(&m);

  g_context = "round trip: random, n_genes 1000000";
  random_csr(&m, 3, 400, 1000000, 30, 70000, 3, 3);
  count_exceptions(&m, 0, csr_nnz(&m), &nv, &ng);
  CHECK(ng > 0);
  roundtrip(&m, 1, 0);
  roundtrip(&m, 1, 5);
  csr_free(&m);
}

/* Decodes into output arrays that start `idx_off` / `val_off` elements past a malloc'd (16-byte
 * aligned) address: the C API asks for no alignment beyond the element type. */
static void decode_misaligned(const uint8_t *blob, size_t len, const csr_t *m, uint32_t n_threads,
                              dc_dtype dtype, size_t ip_off, size_t idx_off, size_t val_off)
{
  uint64_t nnz = csr_nnz(m), got = 0;
  int64_t *ip_buf = xmalloc((m->n_cells + 1 + ip_off) * sizeof *ip_buf);
  int32_t *idx_buf = xmalloc((nnz + idx_off + 1) * sizeof *idx_buf);
  int32_t *val_buf = xmalloc((nnz + val_off + 1) * sizeof *val_buf);
  int64_t *indptr = ip_buf + ip_off;
  int32_t *indices = idx_buf + idx_off, *values = val_buf + val_off;
  indices[nnz] = values[nnz] = SENTINEL_I32;
  if (idx_off)
    idx_buf[0] = SENTINEL_I32;
  if (val_off)
    val_buf[0] = SENTINEL_I32;
  EXPECT(dc_tile_decode(blob, len, n_threads, 1, dtype, indptr, indices, values, nnz, &got), DC_OK);
  CHECK_U64(got, nnz);
  CHECK(memcmp(indptr, m->indptr, (m->n_cells + 1) * sizeof *indptr) == 0);
  CHECK(memcmp(indices, m->indices, nnz * sizeof *indices) == 0);
  uint64_t wrong = 0;
  for (uint64_t j = 0; j < nnz; j++) {
    float f;
    memcpy(&f, &values[j], sizeof f);
    wrong += dtype == DC_INT32 ? values[j] != m->values[j] : f != (float)m->values[j];
  }
  CHECK_U64(wrong, 0);
  CHECK(indices[nnz] == SENTINEL_I32 && values[nnz] == SENTINEL_I32);
  CHECK(!idx_off || idx_buf[0] == SENTINEL_I32);
  CHECK(!val_off || val_buf[0] == SENTINEL_I32);
  free(ip_buf);
  free(idx_buf);
  free(val_buf);
}

/* Chunks large enough for the decoder's bulk paths (hundreds of thousands of nonzeros, many
 * per cell), decoded into outputs of every alignment an int32 array can have. */
static void test_large_chunks_misaligned_outputs(void)
{
  csr_t m;
  size_t len;
  g_context = "large chunks, misaligned outputs";
  random_csr(&m, 9, 3000, 60000, 200, 300, 2, 1); /* ~100 nonzeros per cell */
  CHECK(csr_nnz(&m) > 262144);
  const uint32_t chunks[] = {1, 2};
  for (int k = 0; k < 2; k++) {
    uint8_t *blob = encode(&m, 1, chunks[k], 0, &len);
    for (size_t off = 0; off < 4; off++) {
      decode_misaligned(blob, len, &m, 1, DC_INT32, off, off, (off + 1) % 4);
      decode_misaligned(blob, len, &m, 0, DC_FLOAT32, off % 2, (off + 2) % 4, off);
    }
    dc_bytes_free(blob, len);
  }
  csr_free(&m);

  g_context = "small cells, misaligned outputs";
  random_csr(&m, 10, 500, 3000, 12, 40, 20, 3);
  uint8_t *blob = encode(&m, 1, 3, 0, &len);
  for (size_t off = 0; off < 4; off++)
    decode_misaligned(blob, len, &m, 1, off % 2 ? DC_FLOAT32 : DC_INT32, off, (off + 3) % 4, off);
  dc_bytes_free(blob, len);
  csr_free(&m);
}

/* ------------------------------------------------------------------------------------------ */
/* Exception limit: more than max(1024, nnz/200) of either kind -> DC_ERR_LIMIT                */
/* ------------------------------------------------------------------------------------------ */

/* n_cells cells of `per_cell` nonzeros at genes 70000 + j (the first gap of each cell is an
 * exception when with_gaps); the first n_big nonzeros have count 70000. */
static void limit_csr(csr_t *m, uint64_t n_cells, int per_cell, uint64_t n_big, int with_gaps)
{
  uint64_t k = 0;
  csr_init(m, 100000);
  for (uint64_t c = 0; c < n_cells; c++) {
    for (int j = 0; j < per_cell; j++, k++)
      csr_add(m, (with_gaps ? 70000 : 0) + j, k < n_big ? 70000 : 1 + (int64_t)(k % 5));
    csr_end_row(m);
  }
}

static void expect_encode_limit(const csr_t *m, dc_status expected)
{
  uint8_t *blob = (uint8_t *)&blob; /* must stay untouched on error */
  size_t len = 777;
  dc_status s = dc_tile_encode(m->n_cells, m->n_genes, m->indptr, m->indices, m->values, 1, 0, 0, &blob, &len);
  expect_status(s, expected, expected == DC_ERR_LIMIT ? "65535" : NULL, "dc_tile_encode (limit)", __FILE__, __LINE__);
  if (expected == DC_OK) {
    dc_tile_info info;
    uint64_t nv, ng;
    count_exceptions(m, 0, csr_nnz(m), &nv, &ng);
    EXPECT(dc_tile_inspect(blob, len, 1, &info), DC_OK);
    CHECK_U64(info.n_exceptions, nv + ng);
    decode_and_compare(blob, len, m, 0, 1, DC_INT32);
    dc_bytes_free(blob, len);
  } else {
    CHECK(blob == (uint8_t *)&blob && len == 777);
  }
}

static void test_exception_limit(void)
{
  csr_t m;
  g_context = "limit: 1024 counts above 65535 in 2000 nonzeros (limit 1024)";
  limit_csr(&m, 200, 10, 1024, 0);
  expect_encode_limit(&m, DC_OK);
  csr_free(&m);
  g_context = "limit: 1025 counts above 65535 in 2000 nonzeros";
  limit_csr(&m, 200, 10, 1025, 0);
  expect_encode_limit(&m, DC_ERR_LIMIT);
  csr_free(&m);

  g_context = "limit: 1500 counts above 65535 in 300000 nonzeros (limit nnz/200 = 1500)";
  limit_csr(&m, 3000, 100, 1500, 0);
  expect_encode_limit(&m, DC_OK);
  csr_free(&m);
  g_context = "limit: 1501 counts above 65535 in 300000 nonzeros";
  limit_csr(&m, 3000, 100, 1501, 0);
  expect_encode_limit(&m, DC_ERR_LIMIT);
  csr_free(&m);

  g_context = "limit: 1024 gap and 1024 count exceptions (the limit is per kind)";
  limit_csr(&m, 1024, 1, 1024, 1);
  expect_encode_limit(&m, DC_OK);
  csr_free(&m);
  g_context = "limit: 1025 gaps above 65535";
  limit_csr(&m, 1025, 1, 0, 1);
  expect_encode_limit(&m, DC_ERR_LIMIT);
  csr_free(&m);
}

/* ------------------------------------------------------------------------------------------ */
/* Encoder argument checks                                                                     */
/* ------------------------------------------------------------------------------------------ */

static void expect_encode_error(uint64_t n_cells, uint32_t n_genes, const int64_t *indptr,
                                const int32_t *indices, const int32_t *values, int32_t level,
                                dc_status expected, const char *word, int line)
{
  uint8_t *blob = (uint8_t *)&blob;
  size_t len = 777;
  dc_status s = dc_tile_encode(n_cells, n_genes, indptr, indices, values, level, 0, 0, &blob, &len);
  expect_status(s, expected, word, "dc_tile_encode", __FILE__, line);
  if (blob != (uint8_t *)&blob || len != 777)
    fail_at(__FILE__, line, "dc_tile_encode wrote its out-parameters on failure");
}

#define ENCODE_ERROR(n_cells, n_genes, indptr, indices, values, word)                          \
  expect_encode_error(n_cells, n_genes, indptr, indices, values, 1, DC_ERR_INVALID_ARGUMENT, word, __LINE__)

static void test_encode_invalid(void)
{
  g_context = "encoder: invalid CSR";
  const int64_t ip2[] = {0, 2};
  const int64_t ip3[] = {0, 3};
  const int32_t ones[] = {1, 1, 1};
  const int32_t idx_ok[] = {1, 5, 9};

  { const int32_t idx[] = {5, 3}; ENCODE_ERROR(1, 10, ip2, idx, ones, "3"); }      /* unsorted */
  { const int32_t idx[] = {4, 4}; ENCODE_ERROR(1, 10, ip2, idx, ones, "4"); }      /* duplicate */
  { const int32_t idx[] = {1, 10}; ENCODE_ERROR(1, 10, ip2, idx, ones, "10"); }    /* = n_genes */
  { const int32_t idx[] = {1, 2000000}; ENCODE_ERROR(1, 10, ip2, idx, ones, NULL); }
  { const int32_t idx[] = {-1, 2}; ENCODE_ERROR(1, 10, ip2, idx, ones, "-1"); }    /* negative */
  { const int32_t idx[] = {2, 1, 3}; ENCODE_ERROR(1, 10, ip3, idx, ones, NULL); }  /* unsorted, later */
  { const int32_t val[] = {1, 0, 1}; ENCODE_ERROR(1, 10, ip3, idx_ok, val, "0"); }  /* zero count */
  { const int32_t val[] = {1, 1, -3}; ENCODE_ERROR(1, 10, ip3, idx_ok, val, "-3"); } /* negative count */
  { const int32_t val[] = {INT32_MIN, 1, 1}; ENCODE_ERROR(1, 10, ip3, idx_ok, val, NULL); }
  /* a row may repeat a gene of the previous row: only within a row must indices increase */
  {
    const int64_t ip[] = {0, 2, 3};
    const int32_t idx[] = {1, 5, 1};
    uint8_t *blob = NULL;
    size_t len = 0;
    EXPECT(dc_tile_encode(2, 10, ip, idx, ones, 1, 0, 0, &blob, &len), DC_OK);
    dc_bytes_free(blob, len);
  }
  /* a bad indptr */
  { const int64_t ip[] = {1, 3}; ENCODE_ERROR(1, 10, ip, idx_ok, ones, "indptr"); }
  { const int64_t ip[] = {0, 3, 2}; ENCODE_ERROR(2, 10, ip, idx_ok, ones, "indptr"); }
  { const int64_t ip[] = {0, -1}; ENCODE_ERROR(1, 10, ip, idx_ok, ones, "indptr"); }
  { const int64_t ip[] = {0, 2, -5, 3}; ENCODE_ERROR(3, 10, ip, idx_ok, ones, "indptr"); }
  /* n_genes must be in 1 .. 2^31 */
  ENCODE_ERROR(1, 0, ip3, idx_ok, ones, "n_genes");
  ENCODE_ERROR(1, 2147483649u, ip3, idx_ok, ones, "n_genes");
  ENCODE_ERROR(1, 0xFFFFFFFFu, ip3, idx_ok, ones, "n_genes");
  /* zstd level out of range */
  expect_encode_error(1, 10, ip3, idx_ok, ones, 1000, DC_ERR_INVALID_ARGUMENT, "level", __LINE__);
  expect_encode_error(1, 10, ip3, idx_ok, ones, 23, DC_ERR_INVALID_ARGUMENT, "level", __LINE__);
  expect_encode_error(1, 10, ip3, idx_ok, ones, INT32_MIN, DC_ERR_INVALID_ARGUMENT, "level", __LINE__);
  /* zero cells, but indptr[0] claims nonzeros */
  { const int64_t ip[] = {3}; ENCODE_ERROR(0, 10, ip, idx_ok, ones, "indptr"); }
  /* n_cells + 1 overflows, or the indptr would not fit in memory: refused before any read */
  ENCODE_ERROR(UINT64_MAX, 10, ip3, idx_ok, ones, NULL);
  ENCODE_ERROR(UINT64_MAX / 2, 10, ip3, idx_ok, ones, NULL);
}

/* Extreme but valid thread, chunk and level arguments. */
static void test_extreme_arguments(void)
{
  csr_t m;
  size_t len, len_ref;
  g_context = "extreme arguments";
  random_csr(&m, 8, 50, 500, 20, 30, 10, 5);
  uint8_t *ref = encode(&m, 1, 50, 1, &len_ref);
  /* n_chunks above n_cells gives one chunk per cell; any thread count gives the same bytes */
  uint8_t *blob = encode(&m, 1, UINT32_MAX, UINT32_MAX, &len);
  CHECK(len == len_ref && memcmp(blob, ref, len) == 0);
  decode_and_compare(blob, len, &m, UINT32_MAX, 1, DC_INT32);
  decode_and_compare(blob, len, &m, 64, 1, DC_FLOAT32);
  dc_bytes_free(blob, len);
  dc_bytes_free(ref, len_ref);
  const int32_t levels[] = {22, -131072, 2};
  for (int i = 0; i < 3; i++) {
    blob = encode(&m, levels[i], 3, 0, &len);
    decode_and_compare(blob, len, &m, 0, 1, DC_INT32);
    dc_bytes_free(blob, len);
  }
  csr_free(&m);
}

/* ------------------------------------------------------------------------------------------ */
/* NULL arguments, bad enum values, out-parameters                                             */
/* ------------------------------------------------------------------------------------------ */

static void test_null_arguments(void)
{
  csr_t m;
  size_t len;
  g_context = "NULL arguments";
  random_csr(&m, 4, 20, 100, 10, 10, 0, 0);
  uint8_t *blob = encode(&m, 1, 2, 1, &len);
  uint64_t nnz = csr_nnz(&m);
  int64_t *indptr = xmalloc((m.n_cells + 1) * sizeof *indptr);
  int32_t *indices = xmalloc(nnz * sizeof *indices);
  int32_t *values = xmalloc(nnz * sizeof *values);

  /* dc_tile_inspect(blob, len, verify_crc, info) */
  dc_tile_info info;
  EXPECT_ERR(dc_tile_inspect(NULL, len, 1, &info), DC_ERR_INVALID_ARGUMENT, "blob");
  EXPECT_ERR(dc_tile_inspect(NULL, 0, 1, &info), DC_ERR_INVALID_ARGUMENT, "blob");
  EXPECT_ERR(dc_tile_inspect(blob, len, 1, NULL), DC_ERR_INVALID_ARGUMENT, "info");

  /* dc_tile_decode(blob, len, n_threads, verify_crc, dtype, indptr, indices, values, capacity, nnz_out) */
  uint64_t got = 4242;
  EXPECT_ERR(dc_tile_decode(NULL, len, 0, 1, DC_INT32, indptr, indices, values, nnz, &got),
             DC_ERR_INVALID_ARGUMENT, "blob");
  EXPECT_ERR(dc_tile_decode(NULL, 0, 0, 1, DC_INT32, NULL, NULL, NULL, 0, &got),
             DC_ERR_INVALID_ARGUMENT, "blob");
  EXPECT_ERR(dc_tile_decode(blob, len, 0, 1, DC_INT32, NULL, indices, values, nnz, &got),
             DC_ERR_INVALID_ARGUMENT, "indptr");
  EXPECT_ERR(dc_tile_decode(blob, len, 0, 1, DC_INT32, indptr, NULL, values, nnz, &got),
             DC_ERR_INVALID_ARGUMENT, "indices");
  EXPECT_ERR(dc_tile_decode(blob, len, 0, 1, DC_FLOAT32, indptr, indices, NULL, nnz, &got),
             DC_ERR_INVALID_ARGUMENT, "values");
  EXPECT_ERR(dc_tile_decode(blob, len, 0, 1, DC_INT32, indptr, indices, values, nnz, NULL),
             DC_ERR_INVALID_ARGUMENT, "nnz_out");
  EXPECT_ERR(dc_tile_decode(blob, len, 0, 1, DC_INT32, NULL, NULL, NULL, 0, NULL),
             DC_ERR_INVALID_ARGUMENT, "nnz_out");
  CHECK_U64(got, 4242); /* not written on failure */

  /* a bad dtype, with otherwise valid arguments */
  EXPECT_ERR(dc_tile_decode(blob, len, 0, 1, 7, indptr, indices, values, nnz, &got),
             DC_ERR_INVALID_ARGUMENT, "dtype");
  EXPECT_ERR(dc_tile_decode(blob, len, 0, 1, -1, indptr, indices, values, nnz, &got),
             DC_ERR_INVALID_ARGUMENT, "dtype");
  EXPECT_ERR(dc_tile_decode(blob, len, 0, 1, INT32_MIN, NULL, NULL, NULL, 0, &got),
             DC_ERR_INVALID_ARGUMENT, "dtype");
  CHECK_U64(got, 4242);

  /* dc_tile_encode(n_cells, n_genes, indptr, indices, values, level, n_chunks, n_threads, blob_out, len_out) */
  uint8_t *out = (uint8_t *)&out;
  size_t out_len = 777;
  EXPECT_ERR(dc_tile_encode(m.n_cells, m.n_genes, NULL, m.indices, m.values, 1, 0, 0, &out, &out_len),
             DC_ERR_INVALID_ARGUMENT, "indptr");
  EXPECT_ERR(dc_tile_encode(m.n_cells, m.n_genes, m.indptr, NULL, m.values, 1, 0, 0, &out, &out_len),
             DC_ERR_INVALID_ARGUMENT, "indices");
  EXPECT_ERR(dc_tile_encode(m.n_cells, m.n_genes, m.indptr, m.indices, NULL, 1, 0, 0, &out, &out_len),
             DC_ERR_INVALID_ARGUMENT, "values");
  EXPECT_ERR(dc_tile_encode(m.n_cells, m.n_genes, m.indptr, m.indices, m.values, 1, 0, 0, NULL, &out_len),
             DC_ERR_INVALID_ARGUMENT, "blob_out");
  EXPECT_ERR(dc_tile_encode(m.n_cells, m.n_genes, m.indptr, m.indices, m.values, 1, 0, 0, &out, NULL),
             DC_ERR_INVALID_ARGUMENT, "len_out");
  EXPECT_ERR(dc_tile_encode(0, 5, NULL, NULL, NULL, 1, 0, 0, &out, &out_len),
             DC_ERR_INVALID_ARGUMENT, "indptr"); /* even for zero cells: indptr[0] is read */
  CHECK(out == (uint8_t *)&out && out_len == 777);

  /* dc_bytes_free(NULL, ...) is a no-op */
  dc_bytes_free(NULL, 0);
  dc_bytes_free(NULL, 12345);

  /* dc_tile_inspect writes *info only on success */
  dc_tile_info before, after;
  memset(&before, 0x5A, sizeof before);
  after = before;
  uint8_t *bad = xdup(blob, len);
  bad[0] = 'X';
  EXPECT(dc_tile_inspect(bad, len, 1, &after), DC_ERR_FORMAT);
  CHECK(memcmp(&before, &after, sizeof before) == 0);
  got = 4242;
  EXPECT(dc_tile_decode(bad, len, 0, 1, DC_INT32, indptr, indices, values, nnz, &got), DC_ERR_FORMAT);
  CHECK_U64(got, 4242);
  /* the tile is validated before the capacity is looked at */
  EXPECT(dc_tile_decode(bad, len, 0, 1, DC_INT32, NULL, NULL, NULL, 0, &got), DC_ERR_FORMAT);
  CHECK_U64(got, 4242);
  free(bad);

  free(indptr);
  free(indices);
  free(values);
  dc_bytes_free(blob, len);
  csr_free(&m);
}

/* ------------------------------------------------------------------------------------------ */
/* Corrupted tiles: every check of the reader, with its status and a message                  */
/* ------------------------------------------------------------------------------------------ */

/* The tile must fail dc_tile_inspect and dc_tile_decode (before looking at the capacity)
 * with `expected`, without writing *nnz_out. */
static void expect_bad_tile(const uint8_t *blob, size_t len, int verify_crc, dc_status expected,
                            const char *word, int line)
{
  dc_tile_info info;
  int64_t indptr[64];
  int32_t indices[64], values[64];
  uint64_t got = 4242;
  expect_status(dc_tile_inspect(blob, len, verify_crc, &info), expected, word, "dc_tile_inspect",
                __FILE__, line);
  for (int t = 0; t < 2; t++) {
    expect_status(dc_tile_decode(blob, len, (uint32_t)t, verify_crc, DC_INT32, indptr, indices, values,
                                 0, &got),
                  expected, word, "dc_tile_decode (capacity 0)", __FILE__, line);
    expect_status(dc_tile_decode(blob, len, (uint32_t)t, verify_crc, DC_FLOAT32, NULL, NULL, NULL, 0, &got),
                  expected, word, "dc_tile_decode (size query)", __FILE__, line);
  }
  if (got != 4242)
    fail_at(__FILE__, line, "nnz_out written on failure");
}

#define BAD_TILE(blob, len, status, word)                                                      \
  do {                                                                                         \
    expect_bad_tile(blob, len, 1, status, word, __LINE__);                                     \
    expect_bad_tile(blob, len, 0, status, word, __LINE__);                                     \
  } while (0)

/* Decoding (not inspecting) must fail with `expected`. */
static void expect_decode_error(const uint8_t *blob, size_t len, dc_status expected,
                                const char *word, int line)
{
  dc_tile_info info;
  expect_status(dc_tile_inspect(blob, len, 1, &info), DC_OK, NULL, "dc_tile_inspect", __FILE__, line);
  if (info.n_cells > 1000000 || info.nnz > 10000000)
    fail_at(__FILE__, line, "unexpectedly large tile");
  int64_t *indptr = xmalloc((info.n_cells + 1) * sizeof *indptr);
  int32_t *indices = xmalloc(info.nnz * sizeof *indices);
  int32_t *values = xmalloc(info.nnz * sizeof *values);
  uint64_t got = 4242;
  for (uint32_t t = 0; t < 2; t++) {
    expect_status(dc_tile_decode(blob, len, t, 1, DC_INT32, indptr, indices, values, info.nnz, &got),
                  expected, word, "dc_tile_decode (int32)", __FILE__, line);
    expect_status(dc_tile_decode(blob, len, t, 0, DC_FLOAT32, indptr, indices, values, info.nnz, &got),
                  expected, word, "dc_tile_decode (float32)", __FILE__, line);
  }
  if (got != 4242)
    fail_at(__FILE__, line, "nnz_out written on failure");
  free(indptr);
  free(indices);
  free(values);
}

/* A tile with 3 chunks, value and gap exceptions, an empty cell at a chunk boundary or not. */
static uint8_t *reference_tile(csr_t *m, size_t *len)
{
  random_csr(m, 5, 40, 150000, 12, 20000, 10, 30);
  csr_add(m, 100000, 3); /* at least one gap exception */
  csr_add(m, 100001, 100000);
  csr_end_row(m);
  uint64_t nv, ng;
  count_exceptions(m, 0, csr_nnz(m), &nv, &ng);
  CHECK(nv > 0 && ng > 0);
  uint8_t *blob = encode(m, 1, 3, 1, len);
  CHECK_U64(get_u32(blob + H_N_CHUNKS), 3);
  return blob;
}

static void test_corrupt_header(void)
{
  csr_t m;
  size_t len;
  uint8_t *ref = reference_tile(&m, &len);
  uint8_t *b = xmalloc(len + 16);
#define FRESH() memcpy(b, ref, len)

  g_context = "corrupt: truncated";
  BAD_TILE(ref, len - 1, DC_ERR_FORMAT, "truncated");
  BAD_TILE(ref, 63, DC_ERR_FORMAT, "header");
  BAD_TILE(ref, 0, DC_ERR_FORMAT, NULL);
  for (size_t n = 0; n < len; n++) { /* every prefix */
    dc_tile_info info;
    uint64_t got;
    EXPECT(dc_tile_inspect(ref, n, 0, &info), DC_ERR_FORMAT);
    EXPECT(dc_tile_decode(ref, n, 1, 0, DC_INT32, NULL, NULL, NULL, 0, &got), DC_ERR_FORMAT);
  }
  g_context = "corrupt: trailing bytes";
  FRESH();
  memset(b + len, 0, 16);
  BAD_TILE(b, len + 8, DC_ERR_FORMAT, "total_size");

  g_context = "corrupt: bad magic";
  FRESH();
  b[3] ^= 0x20;
  BAD_TILE(b, len, DC_ERR_FORMAT, "magic");

  g_context = "corrupt: version";
  const uint32_t versions[] = {3, 1, 0, 0xFFFFFFFFu};
  for (int i = 0; i < 4; i++) {
    FRESH();
    put_u32(b + H_VERSION, versions[i]);
    BAD_TILE(b, len, DC_ERR_UNSUPPORTED, "version");
  }

  g_context = "corrupt: flags";
  const uint32_t flags[] = {1, 0x80000000u};
  for (int i = 0; i < 2; i++) {
    FRESH();
    put_u32(b + H_FLAGS, flags[i]);
    BAD_TILE(b, len, DC_ERR_UNSUPPORTED, "flags");
  }

  g_context = "corrupt: reserved";
  FRESH();
  put_u32(b + H_RESERVED, 1);
  BAD_TILE(b, len, DC_ERR_FORMAT, "reserved");

  g_context = "corrupt: total_size";
  const uint64_t sizes[] = {len + 1, len - 1, 0, UINT64_MAX};
  for (int i = 0; i < 4; i++) {
    FRESH();
    put_u64(b + H_TOTAL_SIZE, sizes[i]);
    BAD_TILE(b, len, DC_ERR_FORMAT, "total_size");
  }

  g_context = "corrupt: n_genes";
  FRESH();
  put_u32(b + H_N_GENES, 0);
  BAD_TILE(b, len, DC_ERR_FORMAT, "n_genes");
  FRESH();
  put_u32(b + H_N_GENES, 0x80000001u);
  BAD_TILE(b, len, DC_ERR_FORMAT, "n_genes");
  FRESH(); /* smaller than a stored gene index: only decoding can tell */
  put_u32(b + H_N_GENES, 99999);
  expect_decode_error(b, len, DC_ERR_FORMAT, "n_genes", __LINE__);

  g_context = "corrupt: n_chunks";
  const uint32_t n_chunks[] = {0, 2, 4, 1000, 0xFFFFFFFFu};
  for (int i = 0; i < 5; i++) {
    FRESH();
    put_u32(b + H_N_CHUNKS, n_chunks[i]);
    BAD_TILE(b, len, DC_ERR_FORMAT, "chunk");
  }

  g_context = "corrupt: n_cells";
  const uint64_t n_cells[] = {0, m.n_cells - 1, m.n_cells + 1, 1ull << 40, UINT64_MAX, UINT64_MAX / 8};
  for (int i = 0; i < 6; i++) {
    FRESH();
    put_u64(b + H_N_CELLS, n_cells[i]);
    BAD_TILE(b, len, DC_ERR_FORMAT, NULL);
  }

  g_context = "corrupt: nnz";
  const uint64_t nnzs[] = {0, csr_nnz(&m) - 1, csr_nnz(&m) + 1, UINT64_MAX};
  for (int i = 0; i < 4; i++) {
    FRESH();
    put_u64(b + H_NNZ, nnzs[i]);
    BAD_TILE(b, len, DC_ERR_FORMAT, NULL);
  }

  g_context = "corrupt: indptr_off";
  uint64_t indptr_off = get_u64(ref + H_INDPTR_OFF);
  const uint64_t offs[] = {indptr_off + 1, indptr_off + 4, 64, indptr_off - 8, 0, len, UINT64_MAX - 7};
  for (int i = 0; i < 7; i++) {
    FRESH();
    put_u64(b + H_INDPTR_OFF, offs[i]);
    BAD_TILE(b, len, DC_ERR_FORMAT, NULL);
  }

  g_context = "corrupt: CRC field";
  FRESH();
  b[H_CRC + 2] ^= 0x01;
  expect_bad_tile(b, len, 1, DC_ERR_CHECKSUM, "CRC", __LINE__);
  {
    dc_tile_info info;
    EXPECT(dc_tile_inspect(b, len, 0, &info), DC_OK);
  }
  decode_and_compare(b, len, &m, 0, 0, DC_INT32);

  g_context = "corrupt: zero-cell tile with a chunk";
  {
    csr_t z;
    size_t zlen;
    csr_init(&z, 3);
    uint8_t *zt = NULL;
    EXPECT(dc_tile_encode(0, 3, z.indptr, NULL, NULL, 1, 0, 0, &zt, &zlen), DC_OK);
    put_u32(zt + H_N_CHUNKS, 1);
    BAD_TILE(zt, zlen, DC_ERR_FORMAT, "chunk");
    put_u32(zt + H_N_CHUNKS, 0);
    put_u64(zt + 64, 1); /* indptr[0] = 1 */
    reseal(zt, zlen);
    BAD_TILE(zt, zlen, DC_ERR_FORMAT, "indptr");
    dc_bytes_free(zt, zlen);
    csr_free(&z);
  }
#undef FRESH
  free(b);
  dc_bytes_free(ref, len);
  csr_free(&m);
}

/* Changes past the header, re-sealed with a fresh CRC so that only the structure is wrong. */
static void test_corrupt_structure(void)
{
  csr_t m;
  size_t len;
  uint8_t *ref = reference_tile(&m, &len);
  uint8_t *b = xmalloc(len);
  uint64_t nnz = csr_nnz(&m);
  uint64_t indptr_off = get_u64(ref + H_INDPTR_OFF);
  uint64_t indptr_end = indptr_off + 8 * (m.n_cells + 1);
#define FRESH() memcpy(b, ref, len)
#define SET_ENTRY(c, f, v) entry_set(b, c, f, v)
#define BAD_SEALED(word)                                                                       \
  do {                                                                                         \
    expect_bad_tile(b, len, 0, DC_ERR_FORMAT, word, __LINE__);                                 \
    expect_bad_tile(b, len, 1, DC_ERR_CHECKSUM, "CRC", __LINE__); /* before the re-seal */     \
    reseal(b, len);                                                                            \
    BAD_TILE(b, len, DC_ERR_FORMAT, word);                                                     \
  } while (0)

  /* our CRC agrees with the library's */
  CHECK_U64(crc32_ieee((const uint8_t *)"123456789", 9), 0xCBF43926u);
  FRESH();
  reseal(b, len);
  CHECK(memcmp(b, ref, len) == 0);

  uint64_t c1_lo = entry_get(ref, 1, E_CELL_LO), c1_nlo = entry_get(ref, 1, E_NNZ_LO);
  uint64_t c2_hi = entry_get(ref, 2, E_CELL_HI);

  g_context = "corrupt: chunk table contiguity";
  FRESH(); SET_ENTRY(1, E_CELL_LO, c1_lo + 1); BAD_SEALED("chunk 1");
  FRESH(); SET_ENTRY(1, E_CELL_LO, c1_lo - 1); BAD_SEALED("chunk 1");
  FRESH(); SET_ENTRY(1, E_NNZ_LO, c1_nlo + 1); BAD_SEALED("chunk 1");
  FRESH(); SET_ENTRY(0, E_CELL_HI, c1_lo + 1); BAD_SEALED("chunk");
  FRESH(); SET_ENTRY(0, E_NNZ_HI, c1_nlo - 1); BAD_SEALED("chunk");
  FRESH(); SET_ENTRY(0, E_CELL_LO, 1); BAD_SEALED("chunk 0");
  FRESH(); SET_ENTRY(2, E_CELL_HI, c2_hi - 1); BAD_SEALED("chunk");
  FRESH(); SET_ENTRY(2, E_CELL_HI, c2_hi + 1); BAD_SEALED("chunk 2");
  FRESH(); SET_ENTRY(2, E_NNZ_HI, nnz - 1); BAD_SEALED("chunk");
  FRESH(); SET_ENTRY(2, E_NNZ_HI, nnz + 1); BAD_SEALED("chunk 2");
  FRESH(); SET_ENTRY(1, E_CELL_HI, c1_lo - 1); BAD_SEALED("chunk 1"); /* hi < lo */
  FRESH(); SET_ENTRY(1, E_NNZ_HI, UINT64_MAX); BAD_SEALED("chunk 1");
  /* the same shift of a boundary in both chunks keeps contiguity; indptr disagrees */
  FRESH();
  SET_ENTRY(0, E_NNZ_HI, c1_nlo + 1);
  SET_ENTRY(1, E_NNZ_LO, c1_nlo + 1);
  BAD_SEALED(NULL);

  g_context = "corrupt: indptr";
  FRESH(); put_u64(b + indptr_off, 1); BAD_SEALED("indptr");                    /* indptr[0] != 0 */
  FRESH(); put_u64(b + indptr_off + 8 * m.n_cells, nnz + 1); BAD_SEALED("indptr"); /* != nnz */
  FRESH(); put_u64(b + indptr_off + 8 * m.n_cells, nnz - 1); BAD_SEALED(NULL);
  FRESH(); put_u64(b + indptr_off + 8 * 5, (uint64_t)-1); BAD_SEALED("indptr");     /* decreasing */
  FRESH(); put_u64(b + indptr_off + 8 * 5, nnz + 100); BAD_SEALED("indptr");
  /* monotone, but the chunk boundary no longer matches nnz_lo of chunk 1 */
  FRESH();
  {
    uint64_t c = c1_lo;
    CHECK(m.indptr[c] > m.indptr[c - 1]); /* chunks hold cells with nonzeros at the boundary */
    put_u64(b + indptr_off + 8 * c, (uint64_t)m.indptr[c] - 1);
    BAD_SEALED("indptr");
  }

  g_context = "corrupt: stream offsets and lengths";
  for (uint32_t c = 0; c < 3; c++) {
    for (int s = 0; s < 4; s++) {
      int off_f = E_GAPS_OFF + 2 * s, len_f = E_GAPS_LEN + 2 * s;
      uint64_t off = entry_get(ref, c, off_f), slen = entry_get(ref, c, len_f);
      if (slen == 0)
        continue; /* an absent exception frame */
      FRESH(); SET_ENTRY(c, off_f, off + 1); BAD_SEALED("8-byte");
      FRESH(); SET_ENTRY(c, off_f, off + 8); BAD_SEALED(NULL);
      FRESH(); SET_ENTRY(c, off_f, indptr_off); BAD_SEALED(NULL);   /* inside the indptr */
      FRESH(); SET_ENTRY(c, off_f, indptr_end - 8); BAD_SEALED(NULL);
      FRESH(); SET_ENTRY(c, off_f, 0); BAD_SEALED(NULL);
      FRESH(); SET_ENTRY(c, off_f, (len + 7) / 8 * 8); BAD_SEALED(NULL); /* past the end */
      FRESH(); SET_ENTRY(c, off_f, UINT64_MAX - 7); BAD_SEALED(NULL);
      FRESH(); SET_ENTRY(c, len_f, slen - 1); BAD_SEALED(NULL);
      FRESH(); SET_ENTRY(c, len_f, slen + 1); BAD_SEALED(NULL);
      FRESH(); SET_ENTRY(c, len_f, len); BAD_SEALED(NULL);
      FRESH(); SET_ENTRY(c, len_f, UINT64_MAX); BAD_SEALED(NULL);
      if (s < 2) {
        FRESH(); SET_ENTRY(c, len_f, 0); BAD_SEALED(NULL); /* gaps / vals are never absent */
      }
    }
  }

  g_context = "corrupt: exception frame of another chunk";
  {
    /* chunk 0 (no gap exceptions) points at chunk 2's gexc frame (the cell with gene 100000
     * is last): valid frame, but its positions and the stored gaps of chunk 0 disagree */
    CHECK(entry_get(ref, 0, E_GEXC_LEN) == 0 && entry_get(ref, 2, E_GEXC_LEN) > 0);
    FRESH();
    SET_ENTRY(0, E_GEXC_OFF, entry_get(ref, 2, E_GEXC_OFF));
    SET_ENTRY(0, E_GEXC_LEN, entry_get(ref, 2, E_GEXC_LEN));
    reseal(b, len);
    expect_decode_error(b, len, DC_ERR_FORMAT, "gexc", __LINE__);
  }
#undef FRESH
#undef SET_ENTRY
#undef BAD_SEALED
  free(b);
  dc_bytes_free(ref, len);
  csr_free(&m);
}

/* Decodes a possibly corrupted tile: it must agree with inspect, and never crash or write
 * past the buffers that inspect's sizes call for. Returns the decode status. */
static dc_status decode_any(const uint8_t *blob, size_t len, int verify_crc, uint32_t n_threads)
{
  dc_tile_info info;
  dc_status si = dc_tile_inspect(blob, len, verify_crc, &info);
  uint64_t got = 4242;
  if (si != DC_OK) {
    EXPECT(dc_tile_decode(blob, len, n_threads, verify_crc, DC_INT32, NULL, NULL, NULL, 0, &got), si);
    CHECK_U64(got, 4242);
    return si;
  }
  if (info.n_cells > 1000000 || info.nnz > 10000000)
    FAIL("corrupted tile claims %llu cells / %llu nonzeros and still validates",
         (unsigned long long)info.n_cells, (unsigned long long)info.nnz);
  int64_t *indptr = xmalloc((info.n_cells + 1) * sizeof *indptr);
  int32_t *indices = xmalloc((info.nnz + 1) * sizeof *indices);
  int32_t *values = xmalloc((info.nnz + 1) * sizeof *values);
  indices[info.nnz] = values[info.nnz] = SENTINEL_I32;
  dc_status s = dc_tile_decode(blob, len, n_threads, verify_crc, DC_INT32, indptr, indices, values,
                               info.nnz, &got);
  if (s != DC_OK && s != DC_ERR_FORMAT)
    FAIL("decoding a corrupted tile that inspect accepts gave %s: %s", dc_status_name(s), dc_last_error());
  if (s == DC_OK) {
    CHECK_U64(got, info.nnz);
    /* whatever was decoded obeys the promises of dc_tile_decode */
    CHECK(indptr[0] == 0 && (uint64_t)indptr[info.n_cells] == info.nnz);
    for (uint64_t j = 0; j < info.nnz; j++)
      if (indices[j] < 0 || (uint64_t)indices[j] >= info.n_genes)
        FAIL("decoded gene index %d is outside 0..%u", indices[j], (unsigned)info.n_genes);
  } else {
    expect_status(s, DC_ERR_FORMAT, NULL, "dc_tile_decode (corrupted)", __FILE__, __LINE__);
  }
  CHECK(indices[info.nnz] == SENTINEL_I32 && values[info.nnz] == SENTINEL_I32);
  free(indptr);
  free(indices);
  free(values);
  return s;
}

static void test_corrupt_every_byte(void)
{
  csr_t m;
  size_t len;
  g_context = "corrupt: a byte inside a compressed stream";
  uint8_t *ref = reference_tile(&m, &len);
  uint8_t *b = xmalloc(len);
  /* the middle of the largest stream: inside a zstd block, not in a frame header */
  uint64_t best_off = 0, best_len = 0;
  for (uint32_t c = 0; c < 3; c++)
    for (int s = 0; s < 2; s++)
      if (entry_get(ref, c, E_GAPS_LEN + 2 * s) > best_len) {
        best_len = entry_get(ref, c, E_GAPS_LEN + 2 * s);
        best_off = entry_get(ref, c, E_GAPS_OFF + 2 * s);
      }
  CHECK(best_len > 40);
  for (uint64_t d = 0; d < 8; d++) {
    memcpy(b, ref, len);
    b[best_off + best_len / 2 + d] ^= 0x5A;
    expect_bad_tile(b, len, 1, DC_ERR_CHECKSUM, "CRC", __LINE__);
    {
      dc_tile_info info;
      EXPECT(dc_tile_inspect(b, len, 0, &info), DC_OK); /* inspect decompresses nothing */
    }
    dc_status s = decode_any(b, len, 0, 1);
    CHECK(s == DC_OK || s == DC_ERR_FORMAT);
    decode_any(b, len, 0, 0);
  }

  g_context = "corrupt: every byte, one at a time";
  csr_free(&m);
  dc_bytes_free(ref, len);
  free(b);
  /* a smaller tile so that the sweep stays quick under valgrind */
  random_csr(&m, 6, 12, 70000, 8, 15000, 10, 60);
  ref = encode(&m, 1, 2, 1, &len);
  b = xmalloc(len);
  for (size_t i = 0; i < len; i++) {
    const uint8_t flips[] = {0xFF, 0x01, 0x80};
    for (int f = 0; f < 3; f++) {
      memcpy(b, ref, len);
      b[i] ^= flips[f];
      dc_status s1 = decode_any(b, len, 1, 1);
      if (i >= HEADER_SIZE)
        expect_status(s1, DC_ERR_CHECKSUM, "CRC", "decode_any (verify_crc)", __FILE__, __LINE__);
      dc_status s0 = decode_any(b, len, 0, 1);
      CHECK(s0 == DC_OK || s0 == DC_ERR_FORMAT || s0 == DC_ERR_UNSUPPORTED);
    }
  }
  free(b);
  dc_bytes_free(ref, len);
  csr_free(&m);
}

/* ------------------------------------------------------------------------------------------ */
/* Tiles written by this test, with zstd frames of raw (stored) blocks                         */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
  uint8_t *p;
  size_t len, cap;
} buf_t;

static void buf_put(buf_t *b, const void *src, size_t n)
{
  if (b->len + n > b->cap) {
    b->cap = (b->len + n) * 2 + 64;
    b->p = xrealloc(b->p, b->cap);
  }
  if (n)
    memcpy(b->p + b->len, src, n);
  b->len += n;
}

static void buf_byte(buf_t *b, uint8_t v) { buf_put(b, &v, 1); }

static void buf_le(buf_t *b, uint64_t v, int bytes)
{
  for (int i = 0; i < bytes; i++)
    buf_byte(b, (uint8_t)(v >> (8 * i)));
}

enum { FRAME_RAW, FRAME_NO_SIZE, FRAME_TWICE, FRAME_GARBAGE };

/* One zstd frame (RFC 8878) holding `data` in raw blocks. With a content size: single
 * segment, a 4-byte Frame_Content_Size of `declared`. Without: a 128 KiB window. */
static void zstd_raw_frame(buf_t *b, const uint8_t *data, size_t n, int with_size, uint64_t declared)
{
  buf_le(b, ZSTD_MAGIC, 4);
  if (with_size) {
    buf_byte(b, 0xA0); /* FCS flag 2 (4 bytes), single segment, no checksum, no dictionary */
    buf_le(b, declared, 4);
  } else {
    buf_byte(b, 0x00); /* no content size, window descriptor follows */
    buf_byte(b, 7 << 3); /* window 2^(10+7) = 128 KiB */
  }
  size_t off = 0;
  do {
    size_t size = n - off < 131072 ? n - off : 131072;
    uint32_t last = off + size == n;
    buf_le(b, last | (0u << 1) | ((uint32_t)size << 3), 3); /* raw block */
    buf_put(b, data + off, size);
    off += size;
  } while (off < n);
}

typedef struct {
  uint8_t *data; /* decompressed content */
  size_t len;
  int present;   /* exception frames: 0 = the chunk has none */
  int style;     /* FRAME_* */
  int64_t declare_delta; /* declared content size = len + declare_delta */
} stream_t;

enum { S_GAPS, S_VALS, S_VEXC, S_GEXC };

typedef struct {
  uint64_t cell_lo, cell_hi, nnz_lo, nnz_hi;
  stream_t s[4];
} chunk_t;

typedef struct {
  const csr_t *m;
  uint32_t n_chunks;
  chunk_t *chunks;
} plan_t;

static void set_exceptions(stream_t *s, const uint32_t *pos, const uint32_t *payload, size_t k)
{
  free(s->data);
  s->data = xmalloc(8 * k);
  s->len = 8 * k;
  s->present = 1;
  for (size_t i = 0; i < k; i++) {
    put_u32(s->data + 4 * i, pos[i]);
    put_u32(s->data + 4 * (k + i), payload[i]);
  }
}

/* The streams of a tile per the format: byte-planed uint16 gaps and counts, values above
 * 65535 escaped as 65535 and listed in the exception frames. Cells split evenly. */
static void plan_from_csr(plan_t *p, const csr_t *m, uint32_t k)
{
  p->m = m;
  p->n_chunks = k;
  p->chunks = xcalloc(k, sizeof *p->chunks);
  for (uint32_t c = 0; c < k; c++) {
    chunk_t *ch = &p->chunks[c];
    ch->cell_lo = m->n_cells * c / k;
    ch->cell_hi = m->n_cells * (c + 1) / k;
    ch->nnz_lo = (uint64_t)m->indptr[ch->cell_lo];
    ch->nnz_hi = (uint64_t)m->indptr[ch->cell_hi];
    size_t n = (size_t)(ch->nnz_hi - ch->nnz_lo), kv = 0, kg = 0;
    uint8_t *gaps = xcalloc(2 * n, 1), *vals = xcalloc(2 * n, 1);
    uint32_t *vpos = xmalloc(n * 4), *vpay = xmalloc(n * 4), *gpos = xmalloc(n * 4), *gpay = xmalloc(n * 4);
    for (uint64_t r = ch->cell_lo; r < ch->cell_hi; r++) {
      for (uint64_t j = (uint64_t)m->indptr[r]; j < (uint64_t)m->indptr[r + 1]; j++) {
        size_t q = (size_t)(j - ch->nnz_lo);
        uint32_t gap = (uint32_t)(j == (uint64_t)m->indptr[r] ? m->indices[j] : m->indices[j] - m->indices[j - 1]);
        uint32_t val = (uint32_t)m->values[j];
        if (gap > ESCAPE) {
          gpos[kg] = (uint32_t)q;
          gpay[kg++] = gap - ESCAPE;
          gap = ESCAPE;
        }
        if (val > ESCAPE) {
          vpos[kv] = (uint32_t)q;
          vpay[kv++] = val;
          val = ESCAPE;
        }
        gaps[q] = (uint8_t)gap;
        gaps[n + q] = (uint8_t)(gap >> 8);
        vals[q] = (uint8_t)val;
        vals[n + q] = (uint8_t)(val >> 8);
      }
    }
    ch->s[S_GAPS] = (stream_t){gaps, 2 * n, 1, FRAME_RAW, 0};
    ch->s[S_VALS] = (stream_t){vals, 2 * n, 1, FRAME_RAW, 0};
    if (kv)
      set_exceptions(&ch->s[S_VEXC], vpos, vpay, kv);
    if (kg)
      set_exceptions(&ch->s[S_GEXC], gpos, gpay, kg);
    free(vpos);
    free(vpay);
    free(gpos);
    free(gpay);
  }
}

static void plan_free(plan_t *p)
{
  for (uint32_t c = 0; c < p->n_chunks; c++)
    for (int s = 0; s < 4; s++)
      free(p->chunks[c].s[s].data);
  free(p->chunks);
}

static uint8_t *plan_serialize(const plan_t *p, size_t *len_out)
{
  const csr_t *m = p->m;
  buf_t b = {NULL, 0, 0};
  uint64_t indptr_off = HEADER_SIZE + (uint64_t)ENTRY_SIZE * p->n_chunks;
  uint64_t *where = xcalloc(p->n_chunks * 8, sizeof *where); /* offset, length per stream */
  uint8_t zero[ENTRY_SIZE] = {0};
  for (uint64_t i = 0; i < indptr_off; i += 8)
    buf_put(&b, zero, 8);
  for (uint64_t i = 0; i <= m->n_cells; i++)
    buf_le(&b, (uint64_t)m->indptr[i], 8);
  for (uint32_t c = 0; c < p->n_chunks; c++) {
    for (int s = 0; s < 4; s++) {
      const stream_t *st = &p->chunks[c].s[s];
      if (!st->present)
        continue;
      while (b.len % 8)
        buf_byte(&b, 0);
      size_t start = b.len;
      switch (st->style) {
      case FRAME_RAW:
        zstd_raw_frame(&b, st->data, st->len, 1, (uint64_t)((int64_t)st->len + st->declare_delta));
        break;
      case FRAME_NO_SIZE:
        zstd_raw_frame(&b, st->data, st->len, 0, 0);
        break;
      case FRAME_TWICE:
        zstd_raw_frame(&b, st->data, st->len / 2, 1, st->len / 2);
        zstd_raw_frame(&b, st->data + st->len / 2, st->len - st->len / 2, 1, st->len - st->len / 2);
        break;
      default:
        buf_put(&b, "not a zstd frame", 16);
        break;
      }
      where[8 * c + 2 * s] = start;
      where[8 * c + 2 * s + 1] = b.len - start;
    }
  }
  uint8_t *t = b.p;
  for (uint32_t c = 0; c < p->n_chunks; c++) {
    const chunk_t *ch = &p->chunks[c];
    entry_set(t, c, E_CELL_LO, ch->cell_lo);
    entry_set(t, c, E_CELL_HI, ch->cell_hi);
    entry_set(t, c, E_NNZ_LO, ch->nnz_lo);
    entry_set(t, c, E_NNZ_HI, ch->nnz_hi);
    for (int f = 0; f < 8; f++)
      entry_set(t, c, E_GAPS_OFF + f, where[8 * c + f]);
  }
  memcpy(t + H_MAGIC, "DELTACEL", 8);
  put_u32(t + H_VERSION, 2);
  put_u32(t + H_FLAGS, 0);
  put_u64(t + H_N_CELLS, m->n_cells);
  put_u64(t + H_NNZ, csr_nnz(m));
  put_u32(t + H_N_GENES, m->n_genes);
  put_u32(t + H_N_CHUNKS, p->n_chunks);
  put_u64(t + H_INDPTR_OFF, indptr_off);
  put_u64(t + H_TOTAL_SIZE, b.len);
  put_u32(t + H_RESERVED, 0);
  reseal(t, b.len);
  free(where);
  *len_out = b.len;
  return t;
}

/* A small matrix whose plan is known by heart (n_genes 100000, 2 chunks):
 *   cell 0: genes 3, 70000, 70001   counts 5, 70000, 2   chunk 0: gaps 3, 69997*, 1
 *   cell 1: (empty)                                       vexc {1: 70000}  gexc {1: 4462}
 *   cell 2: genes 10, 20            counts 65535, 1       chunk 1: gaps 10, 10, 99999*
 *   cell 3: gene 99999              count 7               gexc {2: 34464}, no vexc     */
static void small_csr(csr_t *m)
{
  csr_init(m, 100000);
  csr_add(m, 3, 5);
  csr_add(m, 70000, 70000);
  csr_add(m, 70001, 2);
  csr_end_row(m);
  csr_end_row(m);
  csr_add(m, 10, 65535);
  csr_add(m, 20, 1);
  csr_end_row(m);
  csr_add(m, 99999, 7);
  csr_end_row(m);
}

/* Changes the content length of a stream, zero-filling what grows. */
static void resize_stream(stream_t *s, size_t len)
{
  s->data = xrealloc(s->data, len);
  if (len > s->len)
    memset(s->data + s->len, 0, len - s->len);
  s->len = len;
}

static void set_u16_plane(stream_t *s, size_t q, uint32_t v)
{
  size_t n = s->len / 2;
  s->data[q] = (uint8_t)v;
  s->data[n + q] = (uint8_t)(v >> 8);
}

typedef enum { WANT_OK, WANT_INSPECT_FORMAT, WANT_DECODE_FORMAT } want_t;

static void check_crafted(plan_t *p, want_t want, const char *word, int line)
{
  size_t len;
  uint8_t *t = plan_serialize(p, &len);
  if (want == WANT_INSPECT_FORMAT) {
    expect_bad_tile(t, len, 1, DC_ERR_FORMAT, word, line);
    expect_bad_tile(t, len, 0, DC_ERR_FORMAT, word, line);
  } else if (want == WANT_DECODE_FORMAT) {
    expect_decode_error(t, len, DC_ERR_FORMAT, word, line);
  } else {
    uint64_t nv, ng;
    count_exceptions(p->m, 0, csr_nnz(p->m), &nv, &ng);
    dc_tile_info info;
    expect_status(dc_tile_inspect(t, len, 1, &info), DC_OK, NULL, "dc_tile_inspect", __FILE__, line);
    CHECK_U64(info.n_exceptions, nv + ng);
    CHECK_U64(info.n_chunks, p->n_chunks);
    decode_and_compare(t, len, p->m, 1, 1, DC_INT32);
    decode_and_compare(t, len, p->m, 0, 1, DC_FLOAT32);
  }
  free(t);
  plan_free(p);
}

static void test_crafted_tiles(void)
{
  csr_t m;
  plan_t p;

  g_context = "crafted: tiles written by the test decode to their input";
  small_csr(&m);
  plan_from_csr(&p, &m, 2);
  CHECK(p.chunks[0].s[S_VEXC].present && p.chunks[0].s[S_GEXC].present);
  CHECK(!p.chunks[1].s[S_VEXC].present && p.chunks[1].s[S_GEXC].present);
  CHECK_U64(get_u32(p.chunks[0].s[S_GEXC].data + 4), 4462);
  CHECK_U64(get_u32(p.chunks[1].s[S_GEXC].data + 4), 34464);
  check_crafted(&p, WANT_OK, NULL, __LINE__);
  for (uint32_t k = 1; k <= 4; k++) {
    plan_from_csr(&p, &m, k);
    check_crafted(&p, WANT_OK, NULL, __LINE__);
  }
  {
    csr_t r; /* random, with exceptions of both kinds and a stream above one 128 KiB block */
    random_csr(&r, 7, 1000, 1000000, 200, 8000, 5, 4);
    for (int i = 0; i < 10; i++) {
      csr_add(&r, i, 1);
      csr_add(&r, 100000 + i, 2);
      csr_add(&r, 300000 + i, 70000 + i);
      csr_add(&r, 999999 - i, 3);
      csr_end_row(&r);
    }
    CHECK(2 * csr_nnz(&r) > 131072);
    plan_from_csr(&p, &r, 1);
    check_crafted(&p, WANT_OK, NULL, __LINE__);
    plan_from_csr(&p, &r, 5);
    check_crafted(&p, WANT_OK, NULL, __LINE__);
    csr_free(&r);
  }

  g_context = "crafted: frames";
  plan_from_csr(&p, &m, 2); /* content of 2n - 2 bytes */
  p.chunks[0].s[S_GAPS].len -= 2;
  check_crafted(&p, WANT_INSPECT_FORMAT, "gaps", __LINE__);
  plan_from_csr(&p, &m, 2); /* declares 2n, holds 2n - 2: only decompression can tell */
  p.chunks[0].s[S_GAPS].len -= 2;
  p.chunks[0].s[S_GAPS].declare_delta = 2;
  check_crafted(&p, WANT_DECODE_FORMAT, "gaps", __LINE__);
  plan_from_csr(&p, &m, 2);
  resize_stream(&p.chunks[1].s[S_VALS], p.chunks[1].s[S_VALS].len + 2);
  check_crafted(&p, WANT_INSPECT_FORMAT, "vals", __LINE__);
  plan_from_csr(&p, &m, 2);
  p.chunks[1].s[S_VALS].style = FRAME_NO_SIZE;
  check_crafted(&p, WANT_INSPECT_FORMAT, "content size", __LINE__);
  plan_from_csr(&p, &m, 2);
  p.chunks[0].s[S_GAPS].style = FRAME_TWICE;
  check_crafted(&p, WANT_INSPECT_FORMAT, "gaps", __LINE__);
  plan_from_csr(&p, &m, 2);
  p.chunks[1].s[S_VALS].style = FRAME_GARBAGE;
  check_crafted(&p, WANT_INSPECT_FORMAT, "vals", __LINE__);
  plan_from_csr(&p, &m, 2);
  p.chunks[0].s[S_GEXC].style = FRAME_GARBAGE;
  check_crafted(&p, WANT_INSPECT_FORMAT, "gexc", __LINE__);
  plan_from_csr(&p, &m, 2);
  p.chunks[0].s[S_VEXC].style = FRAME_NO_SIZE;
  check_crafted(&p, WANT_INSPECT_FORMAT, "vexc", __LINE__);

  g_context = "crafted: exception frame sizes";
  plan_from_csr(&p, &m, 2); /* 12 bytes: not 8 * k */
  resize_stream(&p.chunks[0].s[S_VEXC], 12);
  check_crafted(&p, WANT_INSPECT_FORMAT, "vexc", __LINE__);
  plan_from_csr(&p, &m, 2); /* k = 4 > n = 3 */
  {
    const uint32_t pos[] = {0, 1, 2, 3}, pay[] = {1, 1, 1, 1};
    set_exceptions(&p.chunks[1].s[S_GEXC], pos, pay, 4);
  }
  check_crafted(&p, WANT_INSPECT_FORMAT, "gexc", __LINE__);

  g_context = "crafted: value exceptions";
  {
    const uint32_t pos0[] = {1, 1}, pay2[] = {70000, 70000};
    plan_from_csr(&p, &m, 2); /* positions must strictly increase */
    set_u16_plane(&p.chunks[0].s[S_VALS], 0, ESCAPE);
    set_exceptions(&p.chunks[0].s[S_VEXC], pos0, pay2, 2);
    check_crafted(&p, WANT_DECODE_FORMAT, "position", __LINE__);
  }
  {
    const uint32_t pos[] = {1, 0}, pay[] = {70000, 70000};
    plan_from_csr(&p, &m, 2);
    set_u16_plane(&p.chunks[0].s[S_VALS], 0, ESCAPE);
    set_exceptions(&p.chunks[0].s[S_VEXC], pos, pay, 2);
    check_crafted(&p, WANT_DECODE_FORMAT, "position", __LINE__);
  }
  {
    const uint32_t pos[] = {3}, pay[] = {70000}; /* position = n */
    plan_from_csr(&p, &m, 2);
    set_exceptions(&p.chunks[0].s[S_VEXC], pos, pay, 1);
    check_crafted(&p, WANT_DECODE_FORMAT, "position", __LINE__);
  }
  {
    const uint32_t bad_counts[] = {65535, 65534, 0, 0x80000000u, 0xFFFFFFFFu};
    for (int i = 0; i < 5; i++) {
      const uint32_t pos[] = {1};
      plan_from_csr(&p, &m, 2);
      set_exceptions(&p.chunks[0].s[S_VEXC], pos, &bad_counts[i], 1);
      check_crafted(&p, WANT_DECODE_FORMAT, "count", __LINE__);
    }
  }
  {
    const uint32_t pos[] = {0}, pay[] = {70000}; /* the stored count there is 5, not 65535 */
    plan_from_csr(&p, &m, 2);
    set_exceptions(&p.chunks[0].s[S_VEXC], pos, pay, 1);
    check_crafted(&p, WANT_DECODE_FORMAT, "65535", __LINE__);
  }
  {
    const uint32_t pos[] = {0}, pay[] = {70000}; /* chunk 1 stores 65535 there: valid */
    plan_from_csr(&p, &m, 2);
    set_exceptions(&p.chunks[1].s[S_VEXC], pos, pay, 1);
    m.values[3] = 70000;
    check_crafted(&p, WANT_OK, NULL, __LINE__);
    m.values[3] = 65535;
  }

  g_context = "crafted: gap exceptions";
  {
    const uint32_t bad_extra[] = {0, 100000, 0xFFFFFFFFu};
    for (int i = 0; i < 3; i++) {
      const uint32_t pos[] = {1};
      plan_from_csr(&p, &m, 2);
      set_exceptions(&p.chunks[0].s[S_GEXC], pos, &bad_extra[i], 1);
      check_crafted(&p, WANT_DECODE_FORMAT, "gap", __LINE__);
    }
  }
  {
    const uint32_t pos[] = {0}, pay[] = {10}; /* the stored gap there is 3, not 65535 */
    plan_from_csr(&p, &m, 2);
    set_exceptions(&p.chunks[0].s[S_GEXC], pos, pay, 1);
    check_crafted(&p, WANT_DECODE_FORMAT, "65535", __LINE__);
  }
  {
    const uint32_t pos[] = {2}, pay[] = {34465}; /* gene 65535 + 34465 = 100000 = n_genes */
    plan_from_csr(&p, &m, 2);
    set_exceptions(&p.chunks[1].s[S_GEXC], pos, pay, 1);
    check_crafted(&p, WANT_DECODE_FORMAT, "n_genes", __LINE__);
  }
  {
    const uint32_t pos[] = {1}, pay[] = {29999}; /* cell 0: 3 + 65535 + 29999 = 95537, then +1 */
    plan_from_csr(&p, &m, 2);
    set_exceptions(&p.chunks[0].s[S_GEXC], pos, pay, 1);
    m.indices[1] = 95537;
    m.indices[2] = 95538;
    check_crafted(&p, WANT_OK, NULL, __LINE__);
    m.indices[1] = 70000;
    m.indices[2] = 70001;
  }
  {
    const uint32_t pos[] = {1}, pay[] = {34461}; /* the later gene of the cell reaches n_genes */
    plan_from_csr(&p, &m, 2);
    set_exceptions(&p.chunks[0].s[S_GEXC], pos, pay, 1);
    check_crafted(&p, WANT_DECODE_FORMAT, "n_genes", __LINE__);
  }

  g_context = "crafted: gaps";
  plan_from_csr(&p, &m, 2); /* cell 2: 10, 10 + 65000 ... */
  set_u16_plane(&p.chunks[1].s[S_GAPS], 0, 65000);
  set_u16_plane(&p.chunks[1].s[S_GAPS], 1, 65000); /* = 130000 >= n_genes */
  check_crafted(&p, WANT_DECODE_FORMAT, "n_genes", __LINE__);
  plan_from_csr(&p, &m, 2); /* a stored 65535 gap without an exception is just 65535 */
  set_u16_plane(&p.chunks[1].s[S_GAPS], 1, 65535);
  m.indices[4] = 10 + 65535;
  check_crafted(&p, WANT_OK, NULL, __LINE__);
  m.indices[4] = 20;

  csr_free(&m);
}

/* Data that breaks the format's rules on the values themselves: a gap of 0 after a cell's
 * first gene (a repeated gene) and a stored count of 0. The format says genes increase within
 * a cell and zeros are never stored; dc_tile_decode promises increasing indices. */
static void test_crafted_repeated_gene_and_zero_count(void)
{
  csr_t m;
  plan_t p;
  size_t len;
  uint8_t *t;
  int64_t indptr[5];
  int32_t indices[6], values[6];
  uint64_t got;

  g_context = "crafted: a repeated gene (gap 0)";
  small_csr(&m);
  plan_from_csr(&p, &m, 2);
  set_u16_plane(&p.chunks[1].s[S_GAPS], 1, 0); /* cell 2: genes 10, 10 */
  t = plan_serialize(&p, &len);
  dc_status s = dc_tile_decode(t, len, 1, 1, DC_INT32, indptr, indices, values, 6, &got);
  expect_status(s, DC_ERR_FORMAT, NULL, "dc_tile_decode (gap 0)", __FILE__, __LINE__);
  free(t);
  plan_free(&p);

  g_context = "crafted: a stored count of 0";
  plan_from_csr(&p, &m, 2);
  set_u16_plane(&p.chunks[1].s[S_VALS], 1, 0); /* cell 2, second count */
  t = plan_serialize(&p, &len);
  s = dc_tile_decode(t, len, 1, 1, DC_INT32, indptr, indices, values, 6, &got);
  expect_status(s, DC_ERR_FORMAT, NULL, "dc_tile_decode (count 0)", __FILE__, __LINE__);
  free(t);
  plan_free(&p);
  csr_free(&m);
}

/* One cell of ~65537 nonzeros: the longest cell whose stored gaps (at most 65535 each) sum
 * below 2^32. Genes up to 2^31 - 1 must come out exact, and larger sums must be refused. */
static void test_long_cells(void)
{
  csr_t m;
  size_t len;
  const uint64_t lens[] = {65536, 65537, 65538, 70001};
  for (int i = 0; i < 4; i++) {
    g_context = "long cell: genes up to 2^31 - 1";
    csr_init(&m, 2147483648u);
    csr_add(&m, 5, 1);
    csr_end_row(&m);
    int64_t step = (int64_t)(2147483647 / lens[i]);
    for (uint64_t j = 0; j < lens[i]; j++)
      csr_add(&m, j + 1 == lens[i] ? 2147483647 : (int64_t)j * step, 1 + (int64_t)(j % 9));
    csr_end_row(&m);
    CHECK_U64(m.indices[csr_nnz(&m) - 1], 2147483647);
    uint8_t *blob = encode(&m, 1, 0, 0, &len);
    decode_and_compare(blob, len, &m, 1, 1, DC_INT32);
    decode_and_compare(blob, len, &m, 0, 1, DC_FLOAT32);
    dc_bytes_free(blob, len);

    g_context = "long cell: stored gaps summing past 2^31 are refused";
    plan_t p;
    plan_from_csr(&p, &m, 1);
    for (uint64_t q = 1; q <= lens[i]; q++) /* every gap of cell 1 stored as 65535 */
      set_u16_plane(&p.chunks[0].s[S_GAPS], q, 65535);
    free(p.chunks[0].s[S_GEXC].data);
    memset(&p.chunks[0].s[S_GEXC], 0, sizeof p.chunks[0].s[S_GEXC]);
    check_crafted(&p, WANT_DECODE_FORMAT, "n_genes", __LINE__);
    csr_free(&m);
  }
}

/* ------------------------------------------------------------------------------------------ */
/* Status names, versions, ABI layout                                                          */
/* ------------------------------------------------------------------------------------------ */

static void test_status_names(void)
{
  g_context = "dc_status_name";
  static const struct {
    dc_status code;
    int value;
    const char *name;
  } codes[] = {
#define CODE(name, value) {name, value, #name}
      CODE(DC_OK, 0),
      CODE(DC_ERR_INVALID_ARGUMENT, 1),
      CODE(DC_ERR_IO, 2),
      CODE(DC_ERR_NOT_FOUND, 3),
      CODE(DC_ERR_FORMAT, 4),
      CODE(DC_ERR_CHECKSUM, 5),
      CODE(DC_ERR_UNSUPPORTED, 6),
      CODE(DC_ERR_OUT_OF_RANGE, 7),
      CODE(DC_ERR_BUFFER_TOO_SMALL, 8),
      CODE(DC_ERR_STATE, 9),
      CODE(DC_ERR_LIMIT, 10),
      CODE(DC_ERR_EXISTS, 11),
      CODE(DC_ERR_INTERNAL, 12),
#undef CODE
  };
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
    CHECK_U64(codes[i].code, codes[i].value); /* the values of the contract */
    const char *name = dc_status_name(codes[i].code);
    CHECK(name != NULL);
    if (strcmp(name, codes[i].name) != 0)
      FAIL("dc_status_name(%d) = \"%s\", expected \"%s\"", codes[i].value, name, codes[i].name);
    CHECK(dc_status_name(codes[i].code) == name); /* static */
  }
  const dc_status unknown[] = {-1, 13, 99, INT32_MAX, INT32_MIN};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    const char *name = dc_status_name(unknown[i]);
    CHECK(name != NULL && name[0] != '\0');
    for (size_t j = 0; j < sizeof codes / sizeof codes[0]; j++)
      CHECK(strcmp(name, codes[j].name) != 0);
    CHECK(strcmp(name, "DC_UNKNOWN_STATUS") == 0);
  }
}

static void test_versions_and_abi(void)
{
  char expected[64];
  g_context = "versions";
  snprintf(expected, sizeof expected, "%d.%d.%d", DC_VERSION_MAJOR, DC_VERSION_MINOR, DC_VERSION_PATCH);
  CHECK(dc_version() != NULL);
  if (strcmp(dc_version(), expected) != 0)
    FAIL("dc_version() = \"%s\", the header says %s", dc_version(), expected);
  CHECK_U64(dc_abi_version(), DC_ABI_VERSION);
  CHECK_U64(DC_ABI_VERSION, 1);

  g_context = "ABI layout";
  CHECK_U64(DC_INT32, 0);
  CHECK_U64(DC_FLOAT32, 1);
  CHECK_U64(sizeof(dc_status), 4);
  CHECK_U64(sizeof(dc_dtype), 4);
  CHECK_U64(offsetof(dc_tile_info, version), 0);
  CHECK_U64(offsetof(dc_tile_info, n_chunks), 4);
  CHECK_U64(offsetof(dc_tile_info, n_cells), 8);
  CHECK_U64(offsetof(dc_tile_info, nnz), 16);
  CHECK_U64(offsetof(dc_tile_info, n_genes), 24);
  CHECK_U64(offsetof(dc_tile_info, n_exceptions), 28);
  CHECK_U64(offsetof(dc_tile_info, total_size), 32);
  CHECK_U64(sizeof(dc_tile_info), 40);
}

int main(void)
{
  crc_init();
  /* no call has failed yet on this thread */
  CHECK(dc_last_error() != NULL && dc_last_error()[0] == '\0');

  test_status_names();
  test_versions_and_abi();
  test_roundtrip_random();
  test_roundtrip_empty();
  test_roundtrip_large_counts();
  test_roundtrip_gap_exceptions();
  test_exception_limit();
  test_encode_invalid();
  test_extreme_arguments();
  test_null_arguments();
  test_corrupt_header();
  test_corrupt_structure();
  test_corrupt_every_byte();
  test_crafted_tiles();
  test_crafted_repeated_gene_and_zero_count();
  test_large_chunks_misaligned_outputs();
  test_long_cells();

  printf("test_tile: %lu passed, 0 failed\n", g_passed);
  return 0;
}
