/* outfile_test.c: outputs (runtime/outfile.h) write through what they should write through
 * and report every failure. Every output was a temporary file renamed onto the path, so
 * `-o /dev/stdout` (as root) or a symlink replaced the node or the link, and a write to
 * /dev/full was reported as success. */
#include "check.h"
#include "runtime/outfile.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/ffnc_outfile_XXXXXX";

static int count_entries(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "test $(ls -A %s | wc -l) -eq", dir);
  int n = 0;
  for (; n < 16; n++) {
    char full[160];
    snprintf(full, sizeof full, "%s %d", cmd, n);
    if (system(full) == 0)
      return n;
  }
  return -1;
}

static void read_back(const char *path, const char *want) {
  char buf[64] = "";
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f)
    fclose(f);
  buf[n] = 0;
  CHECK(strcmp(buf, want) == 0, "%s holds \"%s\", expected \"%s\"", path, buf, want);
}

int main(void) {
  if (!mkdtemp(dir))
    return 1;
  char target[128], link[128], dangling[128], err[512];
  snprintf(target, sizeof target, "%s/target.bin", dir);
  snprintf(link, sizeof link, "%s/link.bin", dir);
  snprintf(dangling, sizeof dangling, "%s/dangling.bin", dir);

  /* a device: written in place, the node stays (/dev/null is a char device to everyone) */
  CHECK(outfile_save("/dev/null", "abc", 3, err, sizeof err) == 0, "/dev/null: %s", err);
  struct stat st;
  CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode), "/dev/null is no longer a device");

  /* a device that fails: the error is reported with the path */
  if (access("/dev/full", W_OK) == 0) {
    CHECK(outfile_save("/dev/full", "abc", 3, err, sizeof err) == -1, "/dev/full: write succeeded");
    CHECK(strstr(err, "/dev/full") && strstr(err, strerror(ENOSPC)), "/dev/full: %s", err);
  }

  /* a regular file: atomic, nothing else left in the directory */
  CHECK(outfile_save(target, "one", 3, err, sizeof err) == 0, "new file: %s", err);
  read_back(target, "one");
  CHECK(count_entries() == 1, "temporary files left: %d entries", count_entries());

  /* a symlink: the target is replaced, the link stays a link */
  CHECK(symlink("target.bin", link) == 0, "symlink: %s", strerror(errno));
  CHECK(outfile_save(link, "two", 3, err, sizeof err) == 0, "through a link: %s", err);
  CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode), "the link was replaced by a file");
  read_back(target, "two");
  CHECK(count_entries() == 2, "temporary files left: %d entries", count_entries());

  /* a dangling symlink is refused, nothing created */
  CHECK(symlink("nowhere.bin", dangling) == 0, "symlink: %s", strerror(errno));
  CHECK(outfile_save(dangling, "x", 1, err, sizeof err) == -1 && strstr(err, "symbolic link"), "dangling: %s", err);
  CHECK(count_entries() == 3, "dangling link: %d entries", count_entries());

  /* a directory is refused */
  CHECK(outfile_save(dir, "x", 1, err, sizeof err) == -1 && strstr(err, strerror(EISDIR)), "directory: %s", err);

  /* an aborted write leaves nothing */
  OutFile o;
  CHECK(outfile_open(&o, target, err, sizeof err) == 0 && outfile_write(&o, "half", 4, err, sizeof err) == 0, "%s", err);
  outfile_abort(&o);
  read_back(target, "two");
  CHECK(count_entries() == 3, "aborted write left files: %d entries", count_entries());

  /* modes: a new file gets 0666 less the umask, like any file a program creates (the
   * temporary file's 0600 from mkstemp used to stay); a replaced file keeps its mode */
  char fresh[128];
  snprintf(fresh, sizeof fresh, "%s/fresh.bin", dir);
  mode_t old_mask = umask(027);
  CHECK(outfile_save(fresh, "new", 3, err, sizeof err) == 0, "fresh: %s", err);
  CHECK(stat(fresh, &st) == 0 && (st.st_mode & 07777) == 0640, "new file under umask 027: mode %o, expected 640",
        (unsigned)(st.st_mode & 07777));
  umask(022);
  CHECK(chmod(target, 0604) == 0, "chmod: %s", strerror(errno));
  CHECK(outfile_save(target, "three", 5, err, sizeof err) == 0, "replace: %s", err);
  CHECK(stat(target, &st) == 0 && (st.st_mode & 07777) == 0604, "replaced file: mode %o, expected 604",
        (unsigned)(st.st_mode & 07777));
  umask(old_mask);

  unlink(fresh), unlink(target), unlink(link), unlink(dangling), rmdir(dir);
  return check_result("outfile_test");
}
