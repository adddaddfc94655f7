/* outfile.c: see outfile.h. */
#define _GNU_SOURCE /* realpath with a NULL buffer is POSIX.1-2008; strndup */
#include "outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int fail(OutFile *o, char *err, size_t errlen, const char *what) {
  snprintf(err, errlen, "%s: %s: %s", o->path, what, strerror(errno));
  outfile_abort(o);
  return -1;
}

/* "DIR/.BASE.XXXXXX" for create_temp: in the target's directory, so that rename is atomic. */
static char *temp_path(const char *path) {
  const char *slash = strrchr(path, '/');
  size_t dir_len = slash ? (size_t)(slash - path) + 1 : 0;
  size_t n = strlen(path) + 16;
  char *tmp = malloc(n);
  if (tmp)
    snprintf(tmp, n, "%.*s.%s.XXXXXX", (int)dir_len, path, path + dir_len);
  return tmp;
}

/* mkstemp, but created with mode 0666 so that the kernel applies the umask, as for any file
 * a program creates: mkstemp's 0600 made every new output private, and the umask cannot be
 * read without setting it (not thread-safe). Replaces the X's of tmp; -1 with errno set. */
static int create_temp(char *tmp) {
  static const char letters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  char *x = tmp + strlen(tmp) - 6;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t r = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid() << 32 ^ (uintptr_t)tmp;
  for (int attempt = 0; attempt < 1000; attempt++) {
    r = r * 6364136223846793005ull + 1442695040888963407ull; /* a collision only costs a retry */
    uint64_t bits = r >> 16;
    for (int i = 0; i < 6; i++, bits /= 62)
      x[i] = letters[bits % 62];
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0666);
    if (fd >= 0 || errno != EEXIST)
      return fd;
  }
  errno = EEXIST;
  return -1;
}

/* Opens a node that must be written in place (device, FIFO). */
static int open_in_place(OutFile *o, char *err, size_t errlen) {
  o->in_place = true;
  o->fd = open(o->path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
  return o->fd < 0 ? fail(o, err, errlen, "cannot open") : 0;
}

int outfile_open(OutFile *o, const char *path, char *err, size_t errlen) {
  *o = (OutFile){.fd = -1, .path = path};
  if (strcmp(path, "-") == 0) {
    o->path = "standard output";
    o->fd = STDOUT_FILENO;
    o->in_place = true;
    return 0;
  }
  struct stat st;
  bool exists = stat(path, &st) == 0; /* follows links: what the data would land in */
  struct stat lst;
  if (!exists && lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode)) {
    errno = ENOENT;
    return fail(o, err, errlen, "a symbolic link to a file that does not exist; refusing to guess where to write");
  }
  if (exists && S_ISDIR(st.st_mode)) {
    errno = EISDIR;
    return fail(o, err, errlen, "cannot write");
  }
  if (exists && !S_ISREG(st.st_mode))
    return open_in_place(o, err, errlen);
  /* A regular file or a new one: the link's target, if a link, is what gets replaced. */
  o->target = exists ? realpath(path, NULL) : strdup(path);
  o->tmp = o->target ? temp_path(o->target) : NULL;
  if (!o->tmp)
    return fail(o, err, errlen, "cannot resolve the path");
  o->fd = create_temp(o->tmp);
  if (o->fd < 0) {
    free(o->tmp);
    o->tmp = NULL;
    return fail(o, err, errlen, "cannot create a temporary file next to it");
  }
  /* a file replaced keeps its mode; a new one has 0666 less the umask from create_temp */
  if (exists && fchmod(o->fd, st.st_mode & 07777) != 0)
    return fail(o, err, errlen, "cannot set the mode of the temporary file");
  return 0;
}

int outfile_write(OutFile *o, const void *data, size_t len, char *err, size_t errlen) {
  const char *p = data;
  while (len > 0) {
    ssize_t k = write(o->fd, p, len);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0) {
      if (k == 0)
        errno = EIO;
      return fail(o, err, errlen, "cannot write");
    }
    p += k;
    len -= (size_t)k;
  }
  return 0;
}

/* Makes the rename durable; the file is complete either way, so this is not an error
 * (some file systems refuse fsync on directories). */
static void sync_dir(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
  int fd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
  if (fd >= 0) {
    (void)fsync(fd);
    (void)close(fd);
  }
  free(dir);
}

int outfile_commit(OutFile *o, char *err, size_t errlen) {
  if (o->in_place) {
    /* stdout stays open for the caller; a device or FIFO is closed and its error checked
     * (a network or full file system may report a failed write only here). */
    int rc = o->fd == STDOUT_FILENO ? 0 : close(o->fd);
    o->fd = -1;
    if (rc != 0)
      return fail(o, err, errlen, "cannot write");
    return 0;
  }
  if (fsync(o->fd) != 0)
    return fail(o, err, errlen, "cannot write (sync)");
  int rc = close(o->fd);
  o->fd = -1;
  if (rc != 0)
    return fail(o, err, errlen, "cannot write (close)");
  if (rename(o->tmp, o->target) != 0)
    return fail(o, err, errlen, "cannot rename the temporary file onto it");
  sync_dir(o->target);
  free(o->tmp);
  free(o->target);
  o->tmp = o->target = NULL;
  return 0;
}

void outfile_abort(OutFile *o) {
  if (o->fd >= 0 && o->fd != STDOUT_FILENO)
    (void)close(o->fd);
  o->fd = -1;
  if (o->tmp)
    (void)unlink(o->tmp);
  free(o->tmp);
  free(o->target);
  o->tmp = o->target = NULL;
}

int outfile_save(const char *path, const void *data, size_t len, char *err, size_t errlen) {
  OutFile o;
  if (outfile_open(&o, path, err, errlen) != 0 || outfile_write(&o, data, len, err, errlen) != 0)
    return -1;
  return outfile_commit(&o, err, errlen);
}
