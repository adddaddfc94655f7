/* tune_store_test.c: the file of tuned GEMM choices (runtime/tune.h) and how a run uses one
 * (exec_choose), without a GPU:
 *
 *  - an entry saved and loaded again is the same (rows, configurations, splits, times);
 *  - every truncation of a file, a flipped byte anywhere in it, an empty file and garbage
 *    are refused; so are well-formed files (checksum recomputed) with buckets out of order, a
 *    split above 32, rows of 0, a configuration name with odd bytes, or an unknown line;
 *  - a file made for another device, SM count, driver, ffnc build, kernel, arch, dtype or
 *    shape is refused, saying which, even when it sits at this key's path; under its own key
 *    it is another file (this key finds none);
 *  - the bucket of a call: none below the first, the largest at or below the rows;
 *  - exec_choose: the tuned variant and split from a bucket's rows on (up to twice them, or
 *    as far as the configuration's regime), the heuristic below the first bucket, beyond
 *    that, and for split 0, FFNC_GEMM_VARIANT / FFNC_GEMM_SPLITS (the model's copies)
 *    over both, and a kernel that cannot split stays unsplit.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/rt.h"

#include "check.h"

/* the reason of the last refusal, shown by a failed EXPECT */
static char why[1024];
#define EXPECT(cond) CHECK(cond, "last reason: %s", why)

static TuneKey sample_key(void) {
  TuneKey k = {.sms = 132, .driver = 13000, .n = 14336, .k = 4096, .streams = 2};
  snprintf(k.device, sizeof k.device, "NVIDIA H200");
  snprintf(k.ffnc, sizeof k.ffnc, "0.1.0 (git 0123456789ab)");
  snprintf(k.kernel, sizeof k.kernel, "00112233445566778899aabbccddeeff");
  snprintf(k.arch, sizeof k.arch, "sm_90");
  snprintf(k.dtype, sizeof k.dtype, "bf16");
  return k;
}

static TuneEntry sample_entry(void) {
  TuneEntry e = {.key = sample_key(), .n = 4};
  const struct {
    int64_t rows;
    const char *config;
    int splits;
    double us, dus;
  } b[] = {{1, "sm80_16x128x128", 0, 61.25, 61.25},
           {16, "sm80_16x128x128", 3, 60.5, 63.0},
           {128, "sm90_128x224x64", 0, 100.125, 104.5},
           {8192, "sm90_128x256x64", 1, 2050.0, 2050.0}};
  for (int i = 0; i < e.n; i++) {
    e.b[i] = (TuneBucket){.rows = b[i].rows, .splits = b[i].splits, .us = b[i].us, .default_us = b[i].dus};
    snprintf(e.b[i].config, sizeof e.b[i].config, "%s", b[i].config);
  }
  return e;
}

static uint64_t fnv(const void *data, size_t n) {
  const unsigned char *s = data;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ s[i]) * 1099511628211ull;
  return h;
}

/* text with its sum line replaced by a correct one for its other lines (malloc'd) */
static char *resum(const char *text) {
  const char *sum = strstr(text, "\nsum ");
  size_t body = (size_t)(sum - text) + 1;
  char *out = malloc(body + 32);
  memcpy(out, text, body);
  snprintf(out + body, 32, "sum %016llx\n", (unsigned long long)fnv(out, body));
  return out;
}

/* text with the first occurrence of `from` replaced by `to`, checksum recomputed */
static char *edit(const char *text, const char *from, const char *to) {
  const char *at = strstr(text, from);
  EXPECT(at != NULL);
  size_t n = strlen(text) + strlen(to) + 1;
  char *tmp = malloc(n);
  snprintf(tmp, n, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
  char *out = resum(tmp);
  free(tmp);
  return out;
}

static void write_file(const char *path, const char *data, size_t len) {
  FILE *f = fopen(path, "wb");
  EXPECT(f != NULL);
  EXPECT(fwrite(data, 1, len, f) == len);
  fclose(f);
}

static void test_round_trip(const char *dir) {
  TuneEntry e = sample_entry(), back;
  EXPECT(tune_save(dir, &e, why, sizeof why) == 0);
  EXPECT(tune_load(dir, &e.key, &back, why, sizeof why) == 1);
  EXPECT(back.n == e.n);
  for (int i = 0; i < e.n; i++) {
    EXPECT(back.b[i].rows == e.b[i].rows);
    EXPECT(strcmp(back.b[i].config, e.b[i].config) == 0);
    EXPECT(back.b[i].splits == e.b[i].splits);
    EXPECT(back.b[i].us == e.b[i].us && back.b[i].default_us == e.b[i].default_us); /* exact in %.3f */
  }
  EXPECT(strcmp(back.key.device, "NVIDIA H200") == 0 && back.key.sms == 132);
  /* saved again: replaced in place, no temporary file left behind */
  e.b[0].us = 59.0;
  EXPECT(tune_save(dir, &e, why, sizeof why) == 0);
  EXPECT(tune_load(dir, &e.key, &back, why, sizeof why) == 1 && back.b[0].us == 59.0);
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "test $(ls '%s' | wc -l) -eq 1", dir);
  EXPECT(system(cmd) == 0);
  /* a file only readable as text of the format */
  char *text = tune_format(&e);
  EXPECT(strncmp(text, "ffnc-tune 1\ndevice NVIDIA H200\nsms 132\ndriver 13000\n", 50) == 0);
  EXPECT(strstr(text, "\nbucket 16 sm80_16x128x128 3 60.500 63.000\n") != NULL);
  free(text);
}

static void test_damaged(const char *dir) {
  TuneEntry e = sample_entry(), back;
  char path[4096];
  tune_path(dir, &e.key, path, sizeof path);
  char *text = tune_format(&e);
  size_t len = strlen(text);
  EXPECT(tune_parse(text, len, &e.key, &back, why, sizeof why) == 0);
  for (size_t cut = 0; cut < len; cut++) { /* every truncation */
    write_file(path, text, cut);
    EXPECT(tune_load(dir, &e.key, &back, why, sizeof why) == -1);
  }
  for (size_t i = 0; i < len; i++) { /* a flipped byte anywhere */
    text[i] ^= 0x04;
    write_file(path, text, len);
    int rc = tune_load(dir, &e.key, &back, why, sizeof why);
    if (rc != -1)
      fprintf(stderr, "flipped byte %zu accepted: %s\n", i, why);
    EXPECT(rc == -1);
    text[i] ^= 0x04;
  }
  write_file(path, text, len);
  EXPECT(tune_load(dir, &e.key, &back, why, sizeof why) == 1);
  write_file(path, "\x7f" "ELF garbage\n", 12);
  EXPECT(tune_load(dir, &e.key, &back, why, sizeof why) == -1);
  EXPECT(strstr(why, "not a tuning file") != NULL);
  /* trailing bytes after the sum line */
  char *longer = malloc(len + 8);
  memcpy(longer, text, len);
  memcpy(longer + len, "bucket\n", 7);
  write_file(path, longer, len + 7);
  EXPECT(tune_load(dir, &e.key, &back, why, sizeof why) == -1);
  free(longer);

  /* well-formed, checksum right, values wrong */
  const char *bad[][2] = {
      {"bucket 128 ", "bucket 8 "},                    /* out of order */
      {"bucket 16 ", "bucket 1 "},                     /* a repeated bucket */
      {"sm80_16x128x128 3 ", "sm80_16x128x128 33 "},   /* split above 32 */
      {"sm80_16x128x128 3 ", "sm80_16x128x128 -1 "},   /* negative split */
      {"bucket 1 ", "bucket 0 "},                      /* no rows */
      {"bucket 1 ", "bucket 2147483648 "},             /* above the kernels' limit */
      {"sm90_128x224x64 0", "sm90/../x 0"},            /* a name with odd bytes */
      {"100.125 ", "nan "},                            /* a time that is no number */
      {"100.125 ", "-3 "},                             /* negative time */
      {"2050.000 2050.000", "2050.000"},               /* a field missing */
      {"2050.000 2050.000", "2050.000 2050.000 7"},    /* one too many */
      {"bucket 8192", "budget 8192"},                  /* an unknown line */
      {"ffnc-tune 1", "ffnc-tune 2"},                  /* another format version */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *t = edit(text, bad[i][0], bad[i][1]);
    if (tune_parse(t, strlen(t), &e.key, &back, why, sizeof why) != -1)
      fprintf(stderr, "accepted: %s -> %s\n", bad[i][0], bad[i][1]);
    EXPECT(tune_parse(t, strlen(t), &e.key, &back, why, sizeof why) == -1);
    free(t);
  }
  /* no bucket at all */
  TuneEntry none = e;
  none.n = 0;
  char *t = tune_format(&none);
  EXPECT(tune_parse(t, strlen(t), &e.key, &back, why, sizeof why) == -1 && strstr(why, "no buckets"));
  free(t);
  free(text);
  unlink(path);
}

static void test_foreign(const char *dir) {
  TuneEntry e = sample_entry(), back;
  char mine[4096], theirs[4096];
  EXPECT(tune_save(dir, &e, why, sizeof why) == 0);
  tune_path(dir, &e.key, mine, sizeof mine);
  for (int field = 0; field < 9; field++) {
    TuneKey other = e.key;
    const char *word = NULL;
    switch (field) {
    case 0: snprintf(other.device, sizeof other.device, "NVIDIA A100-SXM4-80GB"), word = "device"; break;
    case 1: other.sms = 108, word = "sms"; break;
    case 2: other.driver = 12080, word = "driver"; break;
    case 3: snprintf(other.ffnc, sizeof other.ffnc, "0.1.0 (git fedcba987654)"), word = "ffnc"; break;
    case 4: other.kernel[0] = 'f', word = "kernel"; break;
    case 5: snprintf(other.arch, sizeof other.arch, "sm_80"), word = "arch"; break;
    case 6: snprintf(other.dtype, sizeof other.dtype, "f16"), word = "dtype"; break;
    case 7: other.k = 4104, word = "shape"; break;
    case 8: other.streams = 1, word = "shape"; break;
    }
    /* another key has another file: nothing to load */
    tune_path(dir, &other, theirs, sizeof theirs);
    EXPECT(strcmp(mine, theirs) != 0);
    EXPECT(tune_load(dir, &other, &back, why, sizeof why) == 0);
    /* this key's file put at the other key's path: refused, naming the field */
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", mine, theirs);
    EXPECT(system(cmd) == 0);
    EXPECT(tune_load(dir, &other, &back, why, sizeof why) == -1);
    char expect[64];
    snprintf(expect, sizeof expect, "made for another %s", word);
    if (!strstr(why, expect))
      fprintf(stderr, "field %d: %s\n", field, why);
    EXPECT(strstr(why, expect) != NULL);
    unlink(theirs);
  }
  EXPECT(tune_load(dir, &e.key, &back, why, sizeof why) == 1);
  unlink(mine);
}

static void test_lookup(void) {
  TuneEntry e = sample_entry();
  EXPECT(tune_lookup(&e, 0) == NULL);
  EXPECT(tune_lookup(&e, 1) == &e.b[0]);
  EXPECT(tune_lookup(&e, 15) == &e.b[0]);
  EXPECT(tune_lookup(&e, 16) == &e.b[1]);
  EXPECT(tune_lookup(&e, 127) == &e.b[1]);
  EXPECT(tune_lookup(&e, 128) == &e.b[2]);
  EXPECT(tune_lookup(&e, 8191) == &e.b[2]);
  EXPECT(tune_lookup(&e, 8192) == &e.b[3]);
  EXPECT(tune_lookup(&e, 1 << 30) == &e.b[3]);
  e.b[0].rows = 4;
  EXPECT(tune_lookup(&e, 3) == NULL);
}

/* A bf16 gate/up GEMM on sm_90 as lower.c compiles it: the small mma.sync variants and the
 * wgmma ones. */
static PlanKernel sample_kernel(bool splittable) {
  const char *names[] = {"sm80_16x128x128", "sm80_32x128x64", "sm80_64x128x64", "sm90_128x224x64", "sm90_128x256x64"};
  PlanKernel k = {.kind = KK_GEMM, .n = 14336, .k = 4096, .streams = 2, .splittable = splittable};
  int n;
  const ffn_gemm_config *t = ffn_gemm_configs(&n);
  for (size_t v = 0; v < sizeof names / sizeof names[0]; v++)
    for (int i = 0; i < n; i++)
      if (strcmp(t[i].name, names[v]) == 0)
        k.variants[k.nvariants++] = (KernelVariant){.func = names[v], .threads = t[i].threads, .max_m = t[i].max_m,
                                                    .cfg = t[i]};
  EXPECT(k.nvariants == 5);
  return k;
}

static void test_choose(void) {
  PlanKernel k = sample_kernel(true);
  Plan plan = {.nkernels = 1, .kernels = &k};
  ffn_program prog = {.plan = &plan};
  ffn_model m = {.prog = &prog, .sms = 132};
  /* untuned: the heuristic */
  for (int64_t rows = 1; rows <= 9000; rows = rows * 3 + 1) {
    LaunchChoice a = exec_choose(&m, &k, rows), h = exec_heuristic(&k, rows, 132, 0);
    EXPECT(a.v == h.v && a.splits == h.splits && a.m == rows);
  }
  EXPECT(strcmp(exec_heuristic(&k, 1, 132, 0).v->cfg.name, "sm80_16x128x128") == 0);
  EXPECT(strcmp(exec_heuristic(&k, 8192, 132, 0).v->cfg.name, "sm90_128x256x64") == 0);
  /* 16 rows: sm90_128x224x64 (regime up to 512 rows), split 2; 1024: sm80_16x128x128 (a
   * 16-row tile), the rule's split; 4096: sm90_128x256x64 (any rows), split 3 */
  TunedKernel t = {.n = 3, .rows = {16, 1024, 4096}, .variant = {3, 0, 4}, .splits = {2, 0, 3}};
  m.tuned = &t;
  LaunchChoice c = exec_choose(&m, &k, 8); /* below the first bucket */
  EXPECT(c.v == exec_heuristic(&k, 8, 132, 0).v && c.splits == exec_heuristic(&k, 8, 132, 0).splits);
  for (int64_t rows = 16; rows <= 512; rows += 31) { /* within twice 16, or the configuration's 512 */
    c = exec_choose(&m, &k, rows);
    EXPECT(c.v == &k.variants[3] && c.splits == 2);
  }
  for (int64_t rows = 513; rows < 1024; rows += 50) { /* beyond both: the rule */
    c = exec_choose(&m, &k, rows);
    EXPECT(c.v == exec_heuristic(&k, rows, 132, 0).v && c.splits == exec_heuristic(&k, rows, 132, 0).splits);
  }
  for (int64_t rows = 1024; rows <= 2048; rows += 100) { /* split 0: the rule's for the variant and rows */
    c = exec_choose(&m, &k, rows);
    EXPECT(c.v == &k.variants[0]);
    EXPECT(c.splits == ffn_gemm_pick_splits((int)rows, 14336, 2, 4096, &k.variants[0].cfg, 132));
  }
  c = exec_choose(&m, &k, 2049); /* a 16-row tile beyond twice its bucket: the rule */
  EXPECT(c.v == exec_heuristic(&k, 2049, 132, 0).v);
  for (int64_t rows = 4096; rows < 1 << 20; rows *= 3) { /* a configuration for any rows: up to any rows */
    c = exec_choose(&m, &k, rows);
    EXPECT(c.v == &k.variants[4] && c.splits == 3);
  }
  /* FFNC_GEMM_VARIANT over the tuned choice, with the heuristic's split for it */
  snprintf(m.gemm_variant, sizeof m.gemm_variant, "sm90_128x256x64");
  c = exec_choose(&m, &k, 100);
  EXPECT(c.v == &k.variants[4] && c.splits == ffn_gemm_pick_splits(100, 14336, 2, 4096, &k.variants[4].cfg, 132));
  /* a list: the first name the kernel has */
  snprintf(m.gemm_variant, sizeof m.gemm_variant, "tmac_128x128x64,sm90_128x256x64,sm80_16x128x128");
  EXPECT(exec_choose(&m, &k, 100).v == &k.variants[4]);
  snprintf(m.gemm_variant, sizeof m.gemm_variant, "sm90_128x256,sm90_128x256x64x");
  EXPECT(exec_choose(&m, &k, 100).v == &k.variants[3]); /* none (prefixes are not names): the tuned one */
  snprintf(m.gemm_variant, sizeof m.gemm_variant, "sm90_128x256x64");
  m.gemm_splits = 5; /* FFNC_GEMM_SPLITS over everything */
  EXPECT(exec_choose(&m, &k, 100).splits == 5 && exec_choose(&m, &k, 1).splits == 5);
  m.gemm_variant[0] = 0;
  c = exec_choose(&m, &k, 100);
  EXPECT(c.v == &k.variants[3] && c.splits == 5);
  m.gemm_splits = 0;
  /* a kernel that cannot split is never split */
  PlanKernel u = sample_kernel(false);
  plan.kernels = &u;
  t.splits[0] = 0;
  c = exec_choose(&m, &u, 100);
  EXPECT(c.v == &u.variants[3] && c.splits == 1);
}

/* A weight gradient on sm_90 as lower.c compiles it (wgrad_sm90_kernel): the wgmma variant, then
 * mma.sync. Its split follows the output's tiles and the tokens; FFNC_WGRAD=mma and
 * FFNC_GEMM_SPLITS (the model's copies) override; the grid is one CTA per work item, at most one
 * per SM. */
static void test_choose_wgrad(void) {
  PlanKernel k = {.kind = KK_ROWWISE, .nvariants = 2, .n = 256, .k = 704, .op = OP_MATMUL_AT}; /* 6 tiles */
  k.variants[0] = (KernelVariant){.func = "k4_wgrad", .threads = 384, .cfg = *ffn_wgrad_config()};
  k.variants[1] = (KernelVariant){.func = "k4_mma", .threads = 256, .cfg = {.name = "mma"}};
  Plan plan = {.nkernels = 1, .kernels = &k};
  ffn_program prog = {.plan = &plan};
  ffn_model m = {.prog = &prog, .sms = 132};
  LaunchChoice c = exec_choose(&m, &k, 1000); /* 16 stages of 64 tokens: 4 splits of 4 (>= 4 per split) */
  EXPECT(c.v == &k.variants[0] && c.splits == 4 && c.m == 1000);
  EXPECT(ffn_wgrad_grid(704, 256, 4, 132) == 24);
  EXPECT(exec_choose(&m, &k, 4096).splits == 16); /* 132 / 6 tiles = 22, at most 16 */
  EXPECT(exec_choose(&m, &k, 64).splits == 1 && exec_choose(&m, &k, 0).splits == 1);
  PlanKernel big = k; /* 14336 x 4096: 1792 tiles, more than the SMs */
  big.k = 14336, big.n = 4096;
  EXPECT(exec_choose(&m, &big, 8192).splits == 1 && ffn_wgrad_grid(14336, 4096, 1, 132) == 132);
  m.gemm_splits = 3;
  EXPECT(exec_choose(&m, &k, 7).splits == 3 && exec_choose(&m, &k, 0).splits == 1); /* no tokens: no workspace */
  m.wgrad_mma = true;
  c = exec_choose(&m, &k, 1000);
  EXPECT(c.v == &k.variants[1] && c.splits == 1 && c.m == 1000);
}

int main(void) {
  char dir[] = "/tmp/ffnc-tune-test-XXXXXX";
  EXPECT(mkdtemp(dir) != NULL);
  test_round_trip(dir);
  test_damaged(dir);
  test_foreign(dir);
  test_lookup();
  test_choose();
  test_choose_wgrad();
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  EXPECT(system(cmd) == 0);
  return check_result("tune_store_test");
}
