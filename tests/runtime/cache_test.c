/* cache_test.c: the NVRTC kernel cache and compile-failure reporting (no GPU needed).
 *
 *  - the first compile writes one entry into $FFNC_CACHE_DIR; a second compile of the same
 *    model hits it (no new entry, the same image); another model adds an entry;
 *  - FFNC_NO_CACHE=1 compiles without reading or writing the cache;
 *  - NVRTC rejecting generated code gives FFN_ERR_COMPILE with NVRTC's log and the source with
 *    line numbers.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "include/ffn.h"
#include "runtime/rt.h"

#include "check.h"

static int entries(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    n += strstr(e->d_name, ".bin") != NULL;
  if (d)
    closedir(d);
  return n;
}

static const char *model_a = "model a\ndim T\ninput x : [T, 64] f32\ny = relu(x) * 2\noutput y\n";
static const char *model_b = "model b\ndim T\ninput x : [T, 64] f32\ny = silu(x) + 1\noutput y\n";

static ffn_program *compile(const char *src) {
  ffn_options *o;
  ffn_options_create(&o);
  ffn_options_set_arch(o, "sm_80");
  ffn_program *p = NULL;
  ffn_status s = ffn_program_compile(src, strlen(src), "cache_test.ffn", o, &p);
  ffn_options_destroy(o);
  CHECK(s == FFN_OK, "compile: %s", ffn_last_error());
  return p;
}

int main(void) {
  char dir[] = "/tmp/ffnc-cache-test-XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  setenv("FFNC_CACHE_DIR", dir, 1);
  unsetenv("FFNC_NO_CACHE");
  ffn_program *a1 = compile(model_a);
  CHECK(entries(dir) == 1, "first compile: %d entries, expected 1", entries(dir));
  ffn_program *a2 = compile(model_a);
  CHECK(entries(dir) == 1, "second compile of the same model: %d entries, expected 1", entries(dir));
  CHECK(a1 && a2 && a1->image.size == a2->image.size && memcmp(a1->image.image, a2->image.image, a1->image.size) == 0,
        "the cached image differs from the compiled one");
  ffn_program *b = compile(model_b);
  CHECK(entries(dir) == 2, "another model: %d entries, expected 2", entries(dir));
  setenv("FFNC_NO_CACHE", "1", 1);
  char dir2[] = "/tmp/ffnc-cache-test2-XXXXXX";
  if (!mkdtemp(dir2))
    return 1;
  setenv("FFNC_CACHE_DIR", dir2, 1);
  ffn_program *c = compile(model_a);
  CHECK(entries(dir2) == 0, "FFNC_NO_CACHE=1 wrote %d entries", entries(dir2));
  unsetenv("FFNC_NO_CACHE");

  /* NVRTC rejects broken source: the error carries the log and numbered source */
  Image img;
  ffn_status s = nvrtc_compile("extern \"C\" __global__ void k() {\n  undefined_thing();\n}\n", "broken.cu", "sm_80",
                               false, &img);
  const char *e = ffn_last_error();
  CHECK(s == FFN_ERR_COMPILE, "broken source: status %d", (int)s);
  CHECK(strstr(e, "nvrtcCompileProgram failed") && strstr(e, "undefined_thing") && strstr(e, "    2  "),
        "compile error lacks the log or the numbered source:\n%s", e);

  ffn_program_destroy(a1);
  ffn_program_destroy(a2);
  ffn_program_destroy(b);
  ffn_program_destroy(c);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", dir, dir2);
  if (system(cmd) != 0)
    printf("note: could not remove %s\n", dir);
  return check_result("cache_test");
}
