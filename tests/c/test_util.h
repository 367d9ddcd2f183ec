/*
 * Helpers shared by the C tests of datasets and Arrow streams (test_dataset.c,
 * test_arrow_streams.c): assertions in the style of test_tile.c (print file:line and the
 * failing expression, exit non-zero on the first failure, "N passed, 0 failed" at the end),
 * status checks that also check dc_last_error(), temporary directories and small file
 * utilities. Header-only; each test defines TEST_NAME before including it.
 *
 * The pass counter is atomic: the tests check results from several pthreads.
 */
#ifndef DC_TEST_UTIL_H
#define DC_TEST_UTIL_H

#include "deltacells.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef TEST_NAME
#error "define TEST_NAME before including test_util.h"
#endif

/* ------------------------------------------------------------------------------------------ */
/* Assertions                                                                                 */
/* ------------------------------------------------------------------------------------------ */

static atomic_ulong g_passed;
static const char *g_context = ""; /* the test case running (main thread), printed on failure */
static char *g_tmp_root;            /* the test's temporary directory, removed on failure too */

static inline int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

_Noreturn static inline void fail_at(const char *file, int line, const char *fmt, ...)
{
  va_list ap;
  fprintf(stderr, "%s:%d: FAILED [%s]: ", file, line, g_context);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n" TEST_NAME ": %lu passed, 1 failed\n", (unsigned long)atomic_load(&g_passed));
  if (g_tmp_root) {
    if (getenv("DC_TEST_KEEP")) /* to look at what the test wrote */
      fprintf(stderr, "kept %s (DC_TEST_KEEP)\n", g_tmp_root);
    else
      nftw(g_tmp_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  }
  exit(1);
}

#define FAIL(...) fail_at(__FILE__, __LINE__, __VA_ARGS__)
#define PASS() atomic_fetch_add(&g_passed, 1)

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (!(cond))                                                                               \
      FAIL("%s (dc_last_error: \"%s\")", #cond, dc_last_error());                              \
    PASS();                                                                                    \
  } while (0)

#define CHECK_U64(actual, expected)                                                            \
  do {                                                                                         \
    unsigned long long a_ = (unsigned long long)(actual);                                      \
    unsigned long long e_ = (unsigned long long)(expected);                                    \
    if (a_ != e_)                                                                              \
      FAIL("%s is %llu, expected %s = %llu", #actual, a_, #expected, e_);                      \
    PASS();                                                                                    \
  } while (0)

#define CHECK_I64(actual, expected)                                                            \
  do {                                                                                         \
    long long a_ = (long long)(actual);                                                        \
    long long e_ = (long long)(expected);                                                      \
    if (a_ != e_)                                                                              \
      FAIL("%s is %lld, expected %s = %lld", #actual, a_, #expected, e_);                      \
    PASS();                                                                                    \
  } while (0)

#define CHECK_STR(actual, expected)                                                            \
  do {                                                                                         \
    const char *a_ = (actual);                                                                 \
    const char *e_ = (expected);                                                               \
    if (a_ == NULL || e_ == NULL || strcmp(a_, e_) != 0)                                       \
      FAIL("%s is \"%s\", expected %s = \"%s\"", #actual, a_ ? a_ : "(NULL)", #expected,       \
           e_ ? e_ : "(NULL)");                                                                \
    PASS();                                                                                    \
  } while (0)

static inline int contains_ci(const char *hay, const char *needle)
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
static inline void expect_status(dc_status got, dc_status expected, const char *word, const char *call,
                          const char *file, int line)
{
  const char *msg = dc_last_error();
  if (got != expected)
    fail_at(file, line, "%s\n    returned %s (%d), expected %s (%d); dc_last_error: \"%s\"", call,
            dc_status_name(got), (int)got, dc_status_name(expected), (int)expected,
            msg ? msg : "(NULL)");
  if (expected != DC_OK && getenv("DC_TEST_VERBOSE")) /* to review the messages */
    fprintf(stderr, "%s:%d: %s: %s\n", file, line, dc_status_name(got), msg ? msg : "(NULL)");
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
  PASS();
}

#define EXPECT(call, expected) expect_status((call), (expected), NULL, #call, __FILE__, __LINE__)
#define EXPECT_OK(call) expect_status((call), DC_OK, NULL, #call, __FILE__, __LINE__)
#define EXPECT_ERR(call, expected, word)                                                       \
  expect_status((call), (expected), (word), #call, __FILE__, __LINE__)

/* ------------------------------------------------------------------------------------------ */
/* Memory                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static inline void *xmalloc(size_t n)
{
  void *p = malloc(n ? n : 1);
  if (!p)
    FAIL("out of memory (%zu bytes)", n);
  return p;
}

static inline void *xcalloc(size_t n, size_t size)
{
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p)
    FAIL("out of memory (%zu x %zu bytes)", n, size);
  return p;
}

static inline char *xstrdup(const char *s)
{
  size_t n = strlen(s) + 1;
  char *p = xmalloc(n);
  memcpy(p, s, n);
  return p;
}

/* A printf into a new heap string. */
static inline char *xasprintf(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0)
    FAIL("vsnprintf failed");
  char *p = xmalloc((size_t)n + 1);
  va_start(ap, fmt);
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return p;
}

/* splitmix64: deterministic test data. */
typedef struct {
  uint64_t s;
} rng_t;

static inline uint64_t rng_next(rng_t *r)
{
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static inline uint64_t rng_below(rng_t *r, uint64_t n) { return n ? rng_next(r) % n : 0; }

/* ------------------------------------------------------------------------------------------ */
/* Files and temporary directories                                                            */
/* ------------------------------------------------------------------------------------------ */

/* A new private directory under $TMPDIR (or /tmp), removed when a check fails (unless
 * DC_TEST_KEEP is set); the test removes it at the end with remove_tree. */
static inline char *make_temp_dir(const char *prefix)
{
  const char *base = getenv("TMPDIR");
  if (!base || !*base)
    base = "/tmp";
  char *tmpl = xasprintf("%s/%s.XXXXXX", base, prefix);
  if (!mkdtemp(tmpl))
    FAIL("mkdtemp(%s): %s", tmpl, strerror(errno));
  g_tmp_root = tmpl;
  return tmpl;
}

/* rm -rf path (no error when it does not exist). */
static inline void remove_tree(const char *path)
{
  struct stat st;
  if (lstat(path, &st) != 0)
    return;
  if (nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
    FAIL("could not remove %s: %s", path, strerror(errno));
}

static inline int path_exists(const char *path)
{
  struct stat st;
  return lstat(path, &st) == 0;
}

/* The whole file, NUL-terminated (*len excludes the NUL). */
static inline char *read_file(const char *path, size_t *len)
{
  FILE *f = fopen(path, "rb");
  if (!f)
    FAIL("open %s: %s", path, strerror(errno));
  if (fseek(f, 0, SEEK_END) != 0)
    FAIL("seek %s", path);
  long n = ftell(f);
  if (n < 0 || fseek(f, 0, SEEK_SET) != 0)
    FAIL("tell %s", path);
  char *buf = xmalloc((size_t)n + 1);
  if (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n)
    FAIL("read %s", path);
  fclose(f);
  buf[n] = '\0';
  if (len)
    *len = (size_t)n;
  return buf;
}

static inline void write_file(const char *path, const void *data, size_t len)
{
  FILE *f = fopen(path, "wb");
  if (!f)
    FAIL("create %s: %s", path, strerror(errno));
  if (len && fwrite(data, 1, len, f) != len)
    FAIL("write %s", path);
  if (fclose(f) != 0)
    FAIL("close %s", path);
}

/* Copies the regular file src to dst. */
static inline void copy_file(const char *src, const char *dst)
{
  size_t len;
  char *data = read_file(src, &len);
  write_file(dst, data, len);
  free(data);
}

/* Names in directory `dir` starting with `prefix` (other than . and ..). */
static inline int count_entries(const char *dir, const char *prefix)
{
  DIR *d = opendir(dir);
  if (!d)
    FAIL("opendir %s: %s", dir, strerror(errno));
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
      n++;
  }
  closedir(d);
  return n;
}

#endif /* DC_TEST_UTIL_H */
