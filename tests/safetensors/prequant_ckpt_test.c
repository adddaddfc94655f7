/* prequant_ckpt_test.c: pre-quantized fp8 checkpoints through the command line.
 *
 *   prequant_ckpt_test FFNC
 *
 * `ffnc gen` writes codes and [rows, 1] f32 scales; `ffnc run --device cpu` reads them; the
 * result equals, bit for bit, the same model with plain f32 weights holding code * scale
 * (written here from the generated file), and `compare` accepts the fp8 product against it.
 * Then each bad checkpoint is refused with its exact message, exit 1, and no output file. */
#include "check.h"
#include "runtime/safetensors.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *ffnc;

static const char *model =
    "model ckpt\ndim T\ndim D = 32\ndim F = 64\ninput x : [T, D] f32\n"
    "weight g : [D] f32 = \"norm\"\n"
    "weight wu : [F, D] f8e4m3 scale = \"up.weight\"\n"
    "weight wd : [D, F] f8e5m2 scale \"down.scale\" = \"down.weight\"\n"
    "y = x + gelu(rmsnorm(x, g) @ wu^T) @ wd^T\noutput y\n";
static const char *plain =
    "model plain\ndim T\ndim D = 32\ndim F = 64\ninput x : [T, D] f32\n"
    "weight g : [D] f32 = \"norm\"\nweight wu : [F, D] f32 = \"up.weight\"\nweight wd : [D, F] f32 = \"down.weight\"\n"
    "y = x + gelu(rmsnorm(x, g) @ wu^T) @ wd^T\noutput y\n";

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
}

/* Runs `ffnc ARGS`; returns the exit status, its output (both streams) in out. */
static int ffnc_run(char *out, size_t len, const char *args) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "%s %s 2>&1", ffnc, args);
  FILE *p = popen(cmd, "r");
  size_t n = fread(out, 1, len - 1, p);
  out[n] = 0;
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The generated checkpoint with the tensor `name` replaced (dtype DT_NONE: removed). */
static void variant(const char *path, const char *name, DType dt, int rank, const int64_t *shape, const void *data,
                    size_t nbytes) {
  char err[512];
  StFile *f = st_open("ckpt.st", err, sizeof err);
  StWriter *w = st_writer_create();
  for (int i = 0; i < st_count(f); i++) {
    const StTensor *t = st_get(f, i);
    if (strcmp(t->name, name) != 0)
      st_writer_add(w, t->name, t->dtype, t->rank, t->shape, t->data, t->nbytes, err, sizeof err);
  }
  if (dt != DT_NONE)
    st_writer_add(w, name, dt, rank, shape, data, nbytes, err, sizeof err);
  CHECK(st_writer_save(w, path, err, sizeof err) == 0, "%s", err);
  st_writer_destroy(w);
  st_close(f);
}

static void expect_refused(const char *file, const char *want) {
  char out[4096], args[512];
  unlink("bad_out.st");
  snprintf(args, sizeof args, "run ckpt.ffn --weights %s --input in.st --output bad_out.st --device cpu", file);
  int rc = ffnc_run(out, sizeof out, args);
  char line[1024];
  snprintf(line, sizeof line, "ffnc: error: %s\n", want);
  CHECK(rc == 1 && strcmp(out, line) == 0, "%s: exit %d, output:\n%s--- expected:\n%s", file, rc, out, line);
  CHECK(access("bad_out.st", F_OK) != 0, "%s: an output file was written", file);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: prequant_ckpt_test FFNC\n");
    return 2;
  }
  ffnc = argv[1];
  write_text("ckpt.ffn", model);
  write_text("plain.ffn", plain);
  char out[4096], err[512];
  int rc = ffnc_run(out, sizeof out, "gen ckpt.ffn --weights ckpt.st --inputs in.st --dim T=9 --seed 5");
  CHECK(rc == 0, "gen: %s", out);

  /* the generated checkpoint holds codes and [rows, 1] f32 scales */
  StFile *f = st_open("ckpt.st", err, sizeof err);
  CHECK(f, "%s", err);
  if (!f)
    return check_result("prequant_ckpt_test");
  const StTensor *up = st_find(f, "up.weight"), *ups = st_find(f, "up.weight_scale");
  const StTensor *down = st_find(f, "down.weight"), *downs = st_find(f, "down.scale");
  CHECK(up && up->dtype == DT_F8E4M3 && ups && ups->dtype == DT_F32 && ups->rank == 2 && ups->shape[0] == 64 &&
            ups->shape[1] == 1,
        "up.weight and its scale");
  CHECK(down && down->dtype == DT_F8E5M2 && downs && downs->rank == 2 && downs->shape[0] == 32, "down.weight and its scale");

  /* the same model with f32 weights holding code * scale */
  StWriter *w = st_writer_create();
  float *deq[2] = {malloc(64 * 32 * sizeof(float)), malloc(32 * 64 * sizeof(float))};
  const StTensor *codes[2] = {up, down}, *scales[2] = {ups, downs};
  for (int m = 0; m < 2; m++) {
    int64_t rows = codes[m]->shape[0], cols = codes[m]->shape[1];
    for (int64_t r = 0; r < rows; r++)
      for (int64_t k = 0; k < cols; k++)
        deq[m][r * cols + k] =
            (float)dtype_load(codes[m]->dtype, codes[m]->data, (size_t)(r * cols + k)) * ((const float *)scales[m]->data)[r];
    st_writer_add(w, codes[m]->name, DT_F32, 2, codes[m]->shape, deq[m], sizeof(float) * (size_t)(rows * cols), err,
                  sizeof err);
  }
  const StTensor *g = st_find(f, "norm");
  st_writer_add(w, "norm", g->dtype, g->rank, g->shape, g->data, g->nbytes, err, sizeof err);
  CHECK(st_writer_save(w, "plain.st", err, sizeof err) == 0, "%s", err);
  st_writer_destroy(w);
  free(deq[0]);
  free(deq[1]);
  st_close(f);

  rc = ffnc_run(out, sizeof out, "run ckpt.ffn --weights ckpt.st --input in.st --output ckpt_out.st --device cpu");
  CHECK(rc == 0, "run: %s", out);
  rc = ffnc_run(out, sizeof out, "run plain.ffn --weights plain.st --input in.st --output plain_out.st --device cpu");
  CHECK(rc == 0, "run plain: %s", out);
  rc = ffnc_run(out, sizeof out, "compare ckpt_out.st plain_out.st --tol 0");
  CHECK(rc == 0, "dequantized weights differ from code * scale: %s", out);
  /* one fp8 policy for codes of both types: an error, not a re-quantization */
  rc = ffnc_run(out, sizeof out, "run ckpt.ffn --weights ckpt.st --input in.st --output fp8_out.st --device cpu "
                                 "--precision matmul=f8e4m3");
  CHECK(rc == 1 && strstr(out, "weight `wd` holds f8e5m2 codes; `precision matmul f8e4m3` would quantize it again"),
        "mixed fp8 types under one policy: exit %d: %s", rc, out);

  /* bad checkpoints */
  variant("no_scale.st", "up.weight_scale", DT_NONE, 0, NULL, NULL, 0);
  expect_refused("no_scale.st", "weight 'up.weight': its scale tensor 'up.weight_scale' is missing (an f8e4m3 weight "
                                "with `scale` needs one)");
  float s32[32], s64[64];
  for (int i = 0; i < 64; i++)
    s64[i] = 0.01f;
  for (int i = 0; i < 32; i++)
    s32[i] = 0.01f;
  variant("scale_shape.st", "up.weight_scale", DT_F32, 1, (int64_t[]){32}, s32, sizeof s32);
  expect_refused("scale_shape.st", "scale 'up.weight_scale' of weight 'up.weight': shape [32]; expected [64] or [64, 1] "
                                   "(one per output row) or [] or [1] (one for the tensor)");
  variant("scale_dtype.st", "up.weight_scale", DT_I32, 1, (int64_t[]){64}, s64, sizeof s64);
  expect_refused("scale_dtype.st", "scale 'up.weight_scale' of weight 'up.weight': dtype I32; scales are F32, BF16 or F16");
  const char *what[4] = {"(nan) is NaN", "(inf) is infinite", "(0) is zero", "(-0.01) is negative"};
  float val[4] = {NAN, INFINITY, 0.0f, -0.01f};
  for (int b = 0; b < 4; b++) {
    s64[7] = val[b];
    variant("scale_value.st", "up.weight_scale", DT_F32, 2, (int64_t[]){64, 1}, s64, sizeof s64);
    char want[256];
    snprintf(want, sizeof want, "scale 'up.weight_scale' of weight 'up.weight': element 7 %s; scales must be positive "
             "finite numbers", what[b]);
    expect_refused("scale_value.st", want);
  }
  static uint16_t bf16_codes[64 * 32];
  variant("codes_dtype.st", "up.weight", DT_BF16, 2, (int64_t[]){64, 32}, bf16_codes, sizeof bf16_codes);
  expect_refused("codes_dtype.st", "weight 'up.weight': expected shape [64, 32] f8e4m3, got [64, 32] bf16");
  variant("codes_shape.st", "up.weight", DT_F8E4M3, 2, (int64_t[]){32, 64}, bf16_codes, 64 * 32);
  expect_refused("codes_shape.st", "weight 'up.weight': expected shape [64, 32] f8e4m3, got [32, 64] f8e4m3");

  /* fp8 data of the wrong byte size: a header whose offsets give 2047 bytes for 2048 codes */
  static unsigned char buf[8 + 256 + 2047];
  const char *hdr = "{\"up.weight\":{\"dtype\":\"F8_E4M3\",\"shape\":[64,32],\"data_offsets\":[0,2047]}}";
  size_t hl = strlen(hdr);
  for (int i = 0; i < 8; i++)
    buf[i] = (unsigned char)(hl >> (8 * i));
  memcpy(buf + 8, hdr, hl);
  FILE *bf = fopen("codes_size.st", "wb");
  fwrite(buf, 1, 8 + hl + 2047, bf);
  fclose(bf);
  expect_refused("codes_size.st", "codes_size.st: tensor 'up.weight': data_offsets [0, 2047] hold 2047 bytes but shape "
                                  "[64, 32] of F8_E4M3 needs 2048");
  return check_result("prequant_ckpt_test");
}
