/* aot_load_test.c: ffn_program_load (no GPU, no NVRTC) reads back what ffn_program_save
 * wrote (the plan and every image, in order), and refuses damaged files, files of an ffnc with
 * another op table or kernel ABI and files of an older AOT format with a clear error instead
 * of crashing or loading them. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "plan_util.h"
#include "codegen/driver.h"
#include "runtime/rt.h"
#include "runtime/safetensors.h"

static void write_bytes(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, len, f) != len) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
  fclose(f);
}

static unsigned char *read_bytes(const char *path, size_t *len) {
  char *text, err[512];
  if (read_file(path, &text, len, err, sizeof err) != 0) {
    fprintf(stderr, "%s\n", err);
    exit(1);
  }
  return (unsigned char *)text;
}

/* Loading path fails with a message that contains want. */
static void expect_refused(const char *path, const char *want, int line) {
  ffn_program *p = NULL;
  ffn_status s = ffn_program_load(path, &p);
  CHECK(s != FFN_OK && !p, "line %d: loaded a file that should be refused", line);
  CHECK(strstr(ffn_last_error(), want), "line %d: error \"%s\" does not say \"%s\"", line, ffn_last_error(), want);
  ffn_program_destroy(p);
}

/* A file of AOT format fmt holding plan json and one image, as ffnc writes them (format 1: the
 * image as "image"; 2: "image.0" and ffnc.images). */
static void write_aot(const char *path, const char *fmt, const char *json, const void *image, size_t len) {
  StWriter *w = st_writer_create();
  int64_t size = (int64_t)len;
  char err[512];
  bool v1 = strcmp(fmt, "ffnc-aot-1") == 0;
  int rc = st_writer_meta(w, "ffnc.format", fmt) | st_writer_meta(w, "ffnc.version", FFNC_VERSION) |
           st_writer_meta(w, "ffnc.arch", "sm_90") | st_writer_meta(w, "ffnc.image", "cubin") |
           st_writer_meta(w, "ffnc.plan", json);
  if (!v1)
    rc |= st_writer_meta(w, "ffnc.images", "1");
  rc |= st_writer_add(w, v1 ? "image" : "image.0", DT_U8, 1, &size, image, len, err, sizeof err);
  rc |= st_writer_save(w, path, err, sizeof err);
  CHECK(rc == 0, "writing %s: %s", path, err);
  st_writer_destroy(w);
}

int main(void) {
  static unsigned char image[64] = "not really a cubin", image2[48] = "another module";
  Image images[2] = {{image, sizeof image, false}, {image2, sizeof image2, false}};
  ffn_program prog = {.plan = compile_plan("examples/llama3_tiny.ffn"), .images = images, .nimages = 2};
  const char *good = "aot_load_good.ffnc", *bad = "aot_load_bad.ffnc";
  CHECK(ffn_program_save(&prog, good) == FFN_OK, "save: %s", ffn_last_error());

  ffn_program *back = NULL;
  CHECK(ffn_program_load(good, &back) == FFN_OK, "load: %s", ffn_last_error());
  if (back) {
    CHECK(back->nimages == 2, "%d images, expected 2", back->nimages);
    for (int i = 0; i < back->nimages && i < 2; i++)
      CHECK(back->images[i].size == images[i].size &&
                memcmp(back->images[i].image, images[i].image, images[i].size) == 0 && !back->images[i].ptx,
            "image %d differs", i);
    CHECK(back->plan->nsteps == prog.plan->nsteps, "plan differs");
  }
  ffn_program_destroy(back);

  /* stale: the same file with another ABI hash in its plan */
  char *json = plan_to_json(prog.plan);
  json_t *root = json_loads(json, 0, NULL);
  json_object_set_new(root, "abi", json_string("0000000000000000"));
  char *stale = json_dumps(root, JSON_COMPACT);
  write_aot(bad, "ffnc-aot-2", stale, image, sizeof image);
  expect_refused(bad, "built by an incompatible ffnc", __LINE__);
  expect_refused(bad, "rebuild it with `ffnc build`", __LINE__);
  free(stale);

  /* an older format (one image), even with a plan this ffnc would take */
  write_aot(bad, "ffnc-aot-1", json, image, sizeof image);
  expect_refused(bad, "built by an incompatible ffnc (AOT format ffnc-aot-1", __LINE__);
  expect_refused(bad, "rebuild it with `ffnc build`", __LINE__);
  write_aot(bad, "ffnc-aot-2", json, image, sizeof image); /* the same file in this format loads */
  CHECK(ffn_program_load(bad, &back) == FFN_OK && back->nimages == 1, "format 2, one image: %s", ffn_last_error());
  ffn_program_destroy(back);
  free(json);
  json_decref(root);

  /* damaged: truncated anywhere, or bytes overwritten */
  size_t len;
  unsigned char *bytes = read_bytes(good, &len);
  for (size_t n = 0; n < len; n += len / 61 + 1) {
    write_bytes(bad, bytes, n);
    expect_refused(bad, bad, __LINE__); /* every message names the file */
  }
  unsigned char *copy = malloc(len);
  srand(5);
  for (int i = 0; i < 300; i++) {
    memcpy(copy, bytes, len);
    size_t at = 8 + (size_t)rand() % (len - sizeof image - sizeof image2 - 8); /* the header, not the images */
    copy[at] = (unsigned char)"{}[]\":,0x "[rand() % 10];
    if (copy[at] == bytes[at])
      continue;
    write_bytes(bad, copy, len);
    ffn_program *p = NULL;
    if (ffn_program_load(bad, &p) != FFN_OK)
      CHECK(strstr(ffn_last_error(), bad), "damaged file: the error \"%s\" does not name the file", ffn_last_error());
    ffn_program_destroy(p); /* some damage (inside a name or a number) still loads: then it must be usable */
  }
  free(copy);
  free(bytes);
  remove(good);
  remove(bad);
  plan_destroy(prog.plan);
  return check_result("aot_load_test");
}
