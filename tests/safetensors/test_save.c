/* test_save.c: st_writer_save is atomic. A save that fails (missing directory, write error,
 * target a directory) returns -1 with a message naming the path, leaves the old file (if
 * any) untouched and no temporary file behind; a save that succeeds replaces the old file
 * whole. Each case runs in a fresh directory. */
#include "safetensors/st_test.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "st-save-XXXXXX";

static int count_entries(const char *path) {
  DIR *d = opendir(path);
  if (!d)
    return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  closedir(d);
  return n;
}

static void write_bytes(const char *path, const void *buf, size_t len) {
  FILE *f = fopen(path, "wb");
  CHECK(f && fwrite(buf, 1, len, f) == len && fclose(f) == 0, "writing %s", path);
}

/* The whole file, malloc'd (NULL if it cannot be read). */
static unsigned char *read_bytes(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  size_t cap = 1 << 16;
  unsigned char *buf = malloc(cap);
  *len = fread(buf, 1, cap, f);
  fclose(f);
  return buf;
}

static StWriter *small_writer(const float *data, int n) {
  StWriter *wr = st_writer_create();
  int64_t shape[] = {n};
  char err[256];
  CHECK(st_writer_add(wr, "w", DT_F32, 1, shape, data, sizeof(float) * (size_t)n, err,
                      sizeof err) == 0,
        "%s", err);
  CHECK(st_writer_meta(wr, "k", "v") == 0, "meta");
  return wr;
}

static void test_missing_directory(void) {
  char path[256];
  snprintf(path, sizeof path, "%s/no/such/dir/w.safetensors", dir);
  float data[4] = {1, 2, 3, 4};
  StWriter *wr = small_writer(data, 4);
  char err[512] = "";
  CHECK(st_writer_save(wr, path, err, sizeof err) == -1, "save into a missing directory succeeded");
  CHECK(strstr(err, path) && strstr(err, "No such file or directory"), "message: %s", err);
  CHECK(access(path, F_OK) != 0, "%s exists", path);
  CHECK(count_entries(dir) == 0, "the save left %d entries behind", count_entries(dir));
  st_writer_destroy(wr);
}

static void test_replace(void) {
  char path[256];
  snprintf(path, sizeof path, "%s/w.safetensors", dir);
  unsigned char junk[10000];
  memset(junk, 'x', sizeof junk);
  write_bytes(path, junk, sizeof junk);
  CHECK(chmod(path, 0640) == 0, "chmod: %s", strerror(errno));

  float data[4] = {1, 2, 3, 4};
  StWriter *wr = small_writer(data, 4);
  char err[512] = "";
  CHECK(st_writer_save(wr, path, err, sizeof err) == 0, "save over an existing file: %s", err);
  void *expect = NULL;
  size_t expect_len = 0, len = 0;
  CHECK(st_writer_to_memory(wr, &expect, &expect_len, err, sizeof err) == 0, "%s", err);
  unsigned char *got = read_bytes(path, &len);
  CHECK(got && len == expect_len && memcmp(got, expect, len) == 0,
        "the file is not exactly the new contents (%zu bytes, expected %zu)", len, expect_len);
  struct stat st;
  CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0640,
        "mode of the replaced file not kept: %o", (unsigned)(st.st_mode & 0777));
  CHECK(count_entries(dir) == 1, "%d entries in the directory, expected only the file",
        count_entries(dir));
  free(got);
  free(expect);
  st_writer_destroy(wr);
  CHECK(unlink(path) == 0, "unlink");

  /* A new file is readable by others, unlike mkstemp's 0600. */
  wr = small_writer(data, 4);
  CHECK(st_writer_save(wr, path, err, sizeof err) == 0, "save of a new file: %s", err);
  CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0644, "new file has mode %o",
        (unsigned)(st.st_mode & 0777));
  StFile *f = st_open(path, err, sizeof err);
  CHECK(f && st_count(f) == 1 && st_find(f, "w"), "reading the saved file: %s", err);
  st_close(f);
  st_writer_destroy(wr);
  CHECK(unlink(path) == 0, "unlink");
}

/* A write that fails halfway (file size limit, as on a full disk) keeps the old file. */
static void test_write_failure(void) {
  char path[256];
  snprintf(path, sizeof path, "%s/w.safetensors", dir);
  const char *old = "the old contents";
  write_bytes(path, old, strlen(old));

  float data[1024] = {0};
  StWriter *wr = small_writer(data, 1024);
  struct rlimit saved, small;
  CHECK(getrlimit(RLIMIT_FSIZE, &saved) == 0, "getrlimit");
  small = saved;
  small.rlim_cur = 1000;
  void (*handler)(int) = signal(SIGXFSZ, SIG_IGN); /* get EFBIG, not a signal */
  CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0, "setrlimit: %s", strerror(errno));
  char err[512] = "";
  int rc = st_writer_save(wr, path, err, sizeof err);
  CHECK(setrlimit(RLIMIT_FSIZE, &saved) == 0, "restoring the limit: %s", strerror(errno));
  signal(SIGXFSZ, handler);

  CHECK(rc == -1, "a save past the file size limit succeeded");
  CHECK(strstr(err, path) && strstr(err, "File too large"), "message: %s", err);
  size_t len = 0;
  unsigned char *got = read_bytes(path, &len);
  CHECK(got && len == strlen(old) && memcmp(got, old, len) == 0, "the old file was changed");
  CHECK(count_entries(dir) == 1, "%d entries in the directory: a temporary file was left",
        count_entries(dir));
  free(got);
  st_writer_destroy(wr);
  CHECK(unlink(path) == 0, "unlink");
}

/* A directory is refused before anything is created (outfile.h). */
static void test_target_is_directory(void) {
  char path[256];
  snprintf(path, sizeof path, "%s/sub", dir);
  CHECK(mkdir(path, 0755) == 0, "mkdir: %s", strerror(errno));
  float data[4] = {0};
  StWriter *wr = small_writer(data, 4);
  char err[512] = "";
  CHECK(st_writer_save(wr, path, err, sizeof err) == -1, "saving onto a directory succeeded");
  CHECK(strstr(err, path) && strstr(err, "Is a directory"), "message: %s", err);
  CHECK(count_entries(dir) == 1 && count_entries(path) == 0, "something was left behind");
  st_writer_destroy(wr);
  CHECK(rmdir(path) == 0, "rmdir");
}

/* A path without a directory part writes next to the working directory's files. */
static void test_relative_name(void) {
  float data[2] = {5, 6};
  StWriter *wr = small_writer(data, 2);
  char err[512] = "", cwd[4096];
  CHECK(getcwd(cwd, sizeof cwd) && chdir(dir) == 0, "chdir");
  CHECK(st_writer_save(wr, "plain.safetensors", err, sizeof err) == 0, "relative save: %s", err);
  CHECK(count_entries(".") == 1 && unlink("plain.safetensors") == 0,
        "relative save left other files");
  CHECK(chdir(cwd) == 0, "chdir back");
  st_writer_destroy(wr);
}

int main(void) {
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_missing_directory();
  test_replace();
  test_write_failure();
  test_target_is_directory();
  test_relative_name();
  if (rmdir(dir) != 0)
    CHECK(0, "cannot remove %s: %s", dir, strerror(errno));
  return st_test_result("safetensors_save");
}
