/* I/O fault injection (issue 19, item 4): an LD_PRELOAD shim that makes the Nth
 * open / write / pwrite / fsync / rename / mkdir call (and their variants: open64, openat,
 * creat, writev, pwritev, fdatasync, renameat, renameat2, mkdirat) fail with a chosen errno,
 * as a full or failing disk would. Every other call goes to libc unchanged.
 *
 * Control, in-process (found with dlsym(RTLD_DEFAULT, ...) by fault_driver.c):
 *   void dc_fault_arm(long n, int err)   count calls from now; the nth fails with err
 *                                        (n = 0: only count)
 *   long dc_fault_disarm(void)           stop; returns the calls counted
 *   const char *dc_fault_hit(void)       name of the call that failed ("" if none)
 * or, for a program run under the shim (the CLI converter), from the environment at load:
 *   DC_FAULT_N=n DC_FAULT_ERRNO=err      armed from the start
 *   DC_FAULT_COUNT_FILE=path             at exit, "<calls> <failed call>\n" written there
 *
 * Single fault: only the nth call fails; later calls (the writer's cleanup) succeed. */
#undef _FORTIFY_SOURCE /* glibc would inline open() and clash with the definitions here */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static atomic_int g_armed;
static atomic_long g_calls;
static atomic_long g_fail_at;
static atomic_int g_errno;
static _Atomic(const char *) g_hit = "";

void dc_fault_arm(long n, int err)
{
  atomic_store(&g_armed, 0);
  atomic_store(&g_calls, 0);
  atomic_store(&g_fail_at, n);
  atomic_store(&g_errno, err);
  atomic_store(&g_hit, "");
  atomic_store(&g_armed, 1);
}

long dc_fault_disarm(void)
{
  atomic_store(&g_armed, 0);
  return atomic_load(&g_calls);
}

const char *dc_fault_hit(void) { return atomic_load(&g_hit); }

/* Whether this call (named `what`) is the one to fail; sets errno when it is. */
static int fault(const char *what)
{
  if (!atomic_load(&g_armed))
    return 0;
  long k = atomic_fetch_add(&g_calls, 1) + 1;
  if (k != atomic_load(&g_fail_at))
    return 0;
  atomic_store(&g_hit, what);
  errno = atomic_load(&g_errno);
  return 1;
}

__attribute__((constructor)) static void from_environment(void)
{
  const char *n = getenv("DC_FAULT_N"), *e = getenv("DC_FAULT_ERRNO");
  if (n && *n)
    dc_fault_arm(strtol(n, NULL, 10), e && *e ? (int)strtol(e, NULL, 10) : EIO);
}

__attribute__((destructor)) static void report(void)
{
  const char *path = getenv("DC_FAULT_COUNT_FILE");
  if (!path || !*path || !atomic_load(&g_armed))
    return;
  long calls = dc_fault_disarm();
  FILE *f = fopen(path, "w");
  if (f) {
    fprintf(f, "%ld %s\n", calls, dc_fault_hit()[0] ? dc_fault_hit() : "-");
    fclose(f);
  }
}

/* The next definition of `name` (libc's). */
#define REAL(ret, name, params)                                                                \
  static ret(*real_##name) params;                                                             \
  if (!real_##name)                                                                            \
  real_##name = (ret(*) params)dlsym(RTLD_NEXT, #name)

/* A mode argument is passed only when the file may be created. */
static int takes_mode(int flags) { return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE; }

#define OPEN_LIKE(name)                                                                        \
  int name(const char *path, int flags, ...)                                                   \
  {                                                                                            \
    mode_t mode = 0;                                                                           \
    if (takes_mode(flags)) {                                                                   \
      va_list ap;                                                                              \
      va_start(ap, flags);                                                                     \
      mode = va_arg(ap, mode_t);                                                               \
      va_end(ap);                                                                              \
    }                                                                                          \
    if (fault(#name))                                                                          \
      return -1;                                                                               \
    REAL(int, name, (const char *, int, ...));                                                 \
    return real_##name(path, flags, mode);                                                     \
  }
OPEN_LIKE(open)
OPEN_LIKE(open64)

#define OPENAT_LIKE(name)                                                                      \
  int name(int dir, const char *path, int flags, ...)                                          \
  {                                                                                            \
    mode_t mode = 0;                                                                           \
    if (takes_mode(flags)) {                                                                   \
      va_list ap;                                                                              \
      va_start(ap, flags);                                                                     \
      mode = va_arg(ap, mode_t);                                                               \
      va_end(ap);                                                                              \
    }                                                                                          \
    if (fault(#name))                                                                          \
      return -1;                                                                               \
    REAL(int, name, (int, const char *, int, ...));                                            \
    return real_##name(dir, path, flags, mode);                                                \
  }
OPENAT_LIKE(openat)
OPENAT_LIKE(openat64)

int creat(const char *path, mode_t mode)
{
  if (fault("creat"))
    return -1;
  REAL(int, creat, (const char *, mode_t));
  return real_creat(path, mode);
}

int creat64(const char *path, mode_t mode)
{
  if (fault("creat64"))
    return -1;
  REAL(int, creat64, (const char *, mode_t));
  return real_creat64(path, mode);
}

ssize_t write(int fd, const void *buf, size_t n)
{
  if (fault("write"))
    return -1;
  REAL(ssize_t, write, (int, const void *, size_t));
  return real_write(fd, buf, n);
}

ssize_t writev(int fd, const struct iovec *iov, int n)
{
  if (fault("writev"))
    return -1;
  REAL(ssize_t, writev, (int, const struct iovec *, int));
  return real_writev(fd, iov, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t at)
{
  if (fault("pwrite"))
    return -1;
  REAL(ssize_t, pwrite, (int, const void *, size_t, off_t));
  return real_pwrite(fd, buf, n, at);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t at)
{
  if (fault("pwrite64"))
    return -1;
  REAL(ssize_t, pwrite64, (int, const void *, size_t, off64_t));
  return real_pwrite64(fd, buf, n, at);
}

ssize_t pwritev(int fd, const struct iovec *iov, int n, off_t at)
{
  if (fault("pwritev"))
    return -1;
  REAL(ssize_t, pwritev, (int, const struct iovec *, int, off_t));
  return real_pwritev(fd, iov, n, at);
}

int fsync(int fd)
{
  if (fault("fsync"))
    return -1;
  REAL(int, fsync, (int));
  return real_fsync(fd);
}

int fdatasync(int fd)
{
  if (fault("fdatasync"))
    return -1;
  REAL(int, fdatasync, (int));
  return real_fdatasync(fd);
}

int rename(const char *from, const char *to)
{
  if (fault("rename"))
    return -1;
  REAL(int, rename, (const char *, const char *));
  return real_rename(from, to);
}

int renameat(int fd1, const char *from, int fd2, const char *to)
{
  if (fault("renameat"))
    return -1;
  REAL(int, renameat, (int, const char *, int, const char *));
  return real_renameat(fd1, from, fd2, to);
}

int renameat2(int fd1, const char *from, int fd2, const char *to, unsigned flags)
{
  if (fault("renameat2"))
    return -1;
  REAL(int, renameat2, (int, const char *, int, const char *, unsigned));
  if (!real_renameat2) {
    errno = ENOSYS;
    return -1;
  }
  return real_renameat2(fd1, from, fd2, to, flags);
}

int mkdir(const char *path, mode_t mode)
{
  if (fault("mkdir"))
    return -1;
  REAL(int, mkdir, (const char *, mode_t));
  return real_mkdir(path, mode);
}

int mkdirat(int dir, const char *path, mode_t mode)
{
  if (fault("mkdirat"))
    return -1;
  REAL(int, mkdirat, (int, const char *, mode_t));
  return real_mkdirat(dir, path, mode);
}
