/* source_file_test.c: read_file (the CLI's and ffn_program_compile_file's reader of .ffn
 * files) refuses what it cannot bound before reading: devices that never end (/dev/zero
 * was read until memory ran out), FIFOs (blocked forever), directories, and files over the
 * limit (a 1.1 GB file was read whole before "too large"). Each refusal must be immediate. */
#include "check.h"
#include "codegen/driver.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void expect_refused(const char *path, const char *why) {
  char *text = NULL, err[512] = "";
  size_t len;
  time_t t0 = time(NULL);
  int rc = read_file(path, &text, &len, err, sizeof err);
  CHECK(rc == -1, "%s: read, expected \"%s\"", path, why);
  CHECK(strstr(err, why) != NULL, "%s: got \"%s\", expected it to say \"%s\"", path, err, why);
  CHECK(time(NULL) - t0 < 5, "%s: took %lld s", path, (long long)(time(NULL) - t0));
  free(text);
}

int main(void) {
  char dir[] = "/tmp/ffnc_source_XXXXXX";
  if (!mkdtemp(dir))
    return 1;
  char fifo[128], big[128], ok[128];
  snprintf(fifo, sizeof fifo, "%s/fifo.ffn", dir);
  snprintf(big, sizeof big, "%s/big.ffn", dir);
  snprintf(ok, sizeof ok, "%s/ok.ffn", dir);

  expect_refused("/dev/zero", "not a regular file");
  expect_refused(dir, "is a directory");
  if (mkfifo(fifo, 0600) == 0)
    expect_refused(fifo, "not a regular file");
  int fd = open(big, O_CREAT | O_WRONLY, 0600); /* sparse: no disk space used */
  CHECK(fd >= 0 && ftruncate(fd, (off_t)1100 << 20) == 0, "sparse file");
  close(fd);
  expect_refused(big, "too large");

  fd = open(ok, O_CREAT | O_WRONLY, 0600);
  CHECK(fd >= 0 && write(fd, "model m\n", 8) == 8, "small file");
  close(fd);
  char *text = NULL, err[512] = "";
  size_t len = 0;
  CHECK(read_file(ok, &text, &len, err, sizeof err) == 0 && len == 8 && strcmp(text, "model m\n") == 0,
        "a regular file reads whole: %s", err);
  free(text);

  unlink(fifo), unlink(big), unlink(ok), rmdir(dir);
  return check_result("source_file_test");
}
