/* gpu_tune_test.c: autotuning a model on the GPU, the files it saves, and runs that use them.
 *
 *   gpu_tune_test MODEL.ffn
 *
 *  1. a fresh kernel cache directory (FFNC_CACHE_DIR, set before the library first reads it);
 *  2. the model compiled, random weights bound, ffn_model_tune at 1, 7, 64 and 300 rows: one
 *     progress call per GEMM kernel, with sane times; a tune-*.txt file per GEMM kernel;
 *  3. a new model of the program loads every one (ffn_model_tuning), and at each measured
 *     row count the runtime's choice (exec_choose) is the one measured;
 *  4. fresh random inputs at 1, 7, 64, 300 and 1000 tokens, outputs poisoned (NaN bytes), each
 *     output against the CPU reference (gpu_util.h);
 *  5. the files rewritten with choices the built-in rule does not make (another variant, and
 *     split-K 2 or 3 where the kernel can split): loaded, chosen, and the results still right;
 *  6. FFNC_NO_TUNE=1: nothing loaded; one file damaged: it alone is ignored, and said.
 *
 * Exits 77 (skip) where there is no GPU.
 */
#include "gpu/gpu_util.h"

#include <dirent.h>
#include <sys/stat.h>

#include "runtime/rt.h"

static int progress_calls;

static void on_progress(void *user, const ffn_tune_progress *p) {
  int *bad = user;
  progress_calls++;
  printf("tuned %s (%d/%d): N %lld K %lld S %d:", p->kernel, p->gemm, p->gemms, (long long)p->n, (long long)p->k,
         p->streams);
  for (int b = 0; b < p->nbuckets; b++) {
    printf(" %lld %s/%d %.1fus (rule %.1fus)", (long long)p->rows[b], p->config[b], p->splits[b], p->us[b],
           p->default_us[b]);
    /* the choice is never slower than the rule's (it is kept unless another beats it) */
    *bad += !(p->us[b] > 0 && p->us[b] < 1e6 && p->us[b] <= p->default_us[b]);
  }
  printf("\n");
}

static int count_tune_files(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) { /* not the temporary files, tune-*.txt.XXXXXX */
    size_t l = strlen(e->d_name);
    n += strncmp(e->d_name, "tune-", 5) == 0 && l > 9 && strcmp(e->d_name + l - 4, ".txt") == 0;
  }
  if (d)
    closedir(d);
  return n;
}

/* Whether every tuned bucket of every GEMM kernel is what m chooses at those rows. */
static int check_choices(ffn_model *m, const char *dir) {
  const Plan *p = m->prog->plan;
  int bad = 0;
  for (int k = 0; k < p->nkernels; k++) {
    if (p->kernels[k].kind != KK_GEMM)
      continue;
    TuneKey key;
    TuneEntry e;
    char why[1024];
    tune_model_key(m, k, &key);
    if (tune_load(dir, &key, &e, why, sizeof why) != 1) {
      printf("FAIL: k%d: no tuned choices to load: %s\n", k, why);
      bad++;
      continue;
    }
    for (int b = 0; b < e.n; b++) {
      const PlanKernel *pk = &p->kernels[k];
      LaunchChoice c = exec_choose(m, pk, e.b[b].rows);
      int want_splits = !pk->splittable ? 1
                        : e.b[b].splits ? e.b[b].splits
                                        : ffn_gemm_pick_splits((int)e.b[b].rows, (int)pk->n, pk->streams, (int)pk->k,
                                                               &c.v->cfg, m->sms);
      if (strcmp(c.v->cfg.name, e.b[b].config) != 0 || c.splits != want_splits) {
        printf("FAIL: k%d at %lld rows: the runtime chose %s/%d, tuned %s/%d\n", k, (long long)e.b[b].rows,
               c.v->cfg.name, c.splits, e.b[b].config, want_splits);
        bad++;
      }
    }
  }
  return bad;
}

/* Fresh inputs at each token count against the references; the number of failures. */
static int run_all(ffn_model *m, Graph *g, Graph *gp, const TensorSet *w, uint64_t seed, const char *what) {
  static const int64_t tokens[] = {1, 7, 64, 300, 1000};
  int failed = 0;
  for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; i++) {
    TensorSet in = {0};
    make_inputs(g, tokens[i], seed + 1000 + i, &in);
    RefTensor ref[64] = {0}, refp[64] = {0};
    char label[128];
    snprintf(label, sizeof label, "%s T=%lld", what, (long long)tokens[i]);
    if (reference(g, w, &in, ref) != 0 || reference(gp, w, &in, refp) != 0 ||
        run_and_compare(label, m, g, &in, refp, ref, NULL) != 0)
      failed++;
    for (int o = 0; o < g->noutputs; o++) {
      ref_free(&ref[o]);
      ref_free(&refp[o]);
    }
    set_free(&in);
  }
  return failed;
}

static ffn_model *new_model(ffn_program *prog, const TensorSet *w) {
  ffn_model *m;
  if (ffn_model_create(prog, 0, &m) != FFN_OK) {
    printf("FAIL: model: %s\n", ffn_last_error());
    exit(1);
  }
  if (bind_weights(m, w) != 0)
    exit(1);
  printf("%s\n", ffn_model_tuning(m));
  return m;
}

/* Rewrites every GEMM kernel's file with choices the rule does not make at those rows: the
 * next variant, split-K 2 or 3 where the kernel can split (and has the k tiles for it: 2 or
 * more per split, 8 or more for gemm_wq and gemm_wqd). */
static int rewrite_unusual(ffn_model *m, const char *dir) {
  const Plan *p = m->prog->plan;
  for (int k = 0; k < p->nkernels; k++) {
    const PlanKernel *pk = &p->kernels[k];
    if (pk->kind != KK_GEMM)
      continue;
    TuneKey key;
    TuneEntry e;
    char why[1024];
    tune_model_key(m, k, &key);
    if (tune_load(dir, &key, &e, why, sizeof why) != 1)
      return printf("FAIL: k%d: %s\n", k, why), -1;
    for (int b = 0; b < e.n; b++) {
      LaunchChoice h = exec_heuristic(pk, e.b[b].rows, m->sms, m->dram_gbs);
      const KernelVariant *v = &pk->variants[((h.v - pk->variants) + 1 + b) % pk->nvariants];
      int ktiles = (int)((pk->k + v->cfg.bk - 1) / v->cfg.bk);
      snprintf(e.b[b].config, sizeof e.b[b].config, "%s", v->cfg.name);
      if (!pk->splittable) /* gemm_wq: >= 8 k tiles per split, as its rule keeps them */
        e.b[b].splits = 0;
      else if (v->cfg.kind == FFN_GEMM_WQ || v->cfg.kind == FFN_GEMM_WQD)
        e.b[b].splits = ktiles >= 24 ? 3 : ktiles >= 16 ? 2 : 0;
      else
        e.b[b].splits = ktiles >= 12 ? 3 : ktiles >= 4 ? 2 : 0;
    }
    if (tune_save(dir, &e, why, sizeof why) != 0)
      return printf("FAIL: k%d: %s\n", k, why), -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: gpu_tune_test MODEL.ffn\n");
    return 2;
  }
  require_gpu();
  char dir[] = "/tmp/ffnc-tune-gpu-XXXXXX";
  if (!mkdtemp(dir)) {
    printf("FAIL: mkdtemp\n");
    return 1;
  }
  setenv("FFNC_CACHE_DIR", dir, 1);
  unsetenv("FFNC_NO_CACHE");
  unsetenv("FFNC_NO_TUNE");
  unsetenv("FFNC_GEMM_VARIANT");
  unsetenv("FFNC_GEMM_SPLITS");
  size_t len;
  char *path = source_path(argv[1]), *text = source_text(argv[1], &len);
  Diags d;
  diags_init(&d);
  DriverOptions dopt = {.sm = 90, .opt_level = 3};
  Graph *g = driver_model_graph(text, len, path, &dopt, &d), *gp = NULL;
  if (!g || driver_compile(text, len, path, &dopt, &d, NULL, &gp) != 0) {
    printf("FAIL: %s", d.text);
    return 1;
  }
  ffn_program *prog;
  if (ffn_program_compile(text, len, path, NULL, &prog) != FFN_OK) {
    printf("FAIL: compile: %s\n", ffn_last_error());
    return 1;
  }
  int gemms = 0;
  for (int k = 0; k < prog->plan->nkernels; k++)
    gemms += prog->plan->kernels[k].kind == KK_GEMM;
  printf("%s: %d kernels, %d GEMM\n", argv[1], ffn_program_num_kernels(prog), gemms);
  uint64_t seed = test_seed();
  TensorSet w = {0};
  make_weights(g, seed, &w);
  int failed = 0, slow = 0;

  /* 2: tune */
  ffn_model *m = new_model(prog, &w);
  static const int64_t rows[] = {1, 7, 64, 300};
  ffn_status st = ffn_model_tune(m, rows, 4, on_progress, &slow);
  printf("%s\n", ffn_model_tuning(m));
  if (st != FFN_OK) {
    printf("FAIL: tune: %s\n", ffn_last_error());
    return 1;
  }
  if (progress_calls != gemms || slow) {
    printf("FAIL: %d progress calls for %d GEMM kernels, %d bucket(s) slower than the rule or unmeasured\n",
           progress_calls, gemms, slow);
    failed++;
  }
  if (count_tune_files(dir) != gemms) {
    printf("FAIL: %d tune files in %s for %d GEMM kernels\n", count_tune_files(dir), dir, gemms);
    failed++;
  }
  failed += check_choices(m, dir); /* the tuning model uses them at once */
  failed += run_all(m, g, gp, &w, seed, "tuning model");
  ffn_model_destroy(m);

  /* 3, 4: a new model loads them */
  m = new_model(prog, &w);
  char expect[64];
  snprintf(expect, sizeof expect, "tuned GEMM choices: %d of %d", gemms, gemms);
  if (!strstr(ffn_model_tuning(m), expect)) {
    printf("FAIL: expected \"%s\"\n", expect);
    failed++;
  }
  failed += check_choices(m, dir);
  failed += run_all(m, g, gp, &w, seed + 1, "reloaded");
  /* 5: choices the rule does not make */
  if (rewrite_unusual(m, dir) != 0)
    failed++;
  ffn_model_destroy(m);
  m = new_model(prog, &w);
  if (!strstr(ffn_model_tuning(m), expect)) {
    printf("FAIL: expected \"%s\" after rewriting\n", expect);
    failed++;
  }
  failed += check_choices(m, dir);
  failed += run_all(m, g, gp, &w, seed + 2, "unusual choices");
  ffn_model_destroy(m);

  /* 6: FFNC_NO_TUNE, and a damaged file */
  setenv("FFNC_NO_TUNE", "1", 1);
  m = new_model(prog, &w);
  if (!strstr(ffn_model_tuning(m), "not loaded (FFNC_NO_TUNE")) {
    printf("FAIL: FFNC_NO_TUNE=1 did not stop the loading\n");
    failed++;
  }
  for (int k = 0; k < prog->plan->nkernels; k++) /* the rule's choice everywhere */
    for (int64_t r = 1; r <= 2000; r = r * 3 + 1) {
      const PlanKernel *pk = &prog->plan->kernels[k];
      LaunchChoice a = exec_choose(m, pk, r), h = exec_heuristic(pk, r, m->sms, m->dram_gbs);
      if (a.v != h.v || a.splits != h.splits) {
        printf("FAIL: FFNC_NO_TUNE=1: k%d at %lld rows is not the rule's choice\n", k, (long long)r);
        failed++;
      }
    }
  ffn_model_destroy(m);
  unsetenv("FFNC_NO_TUNE");
  for (int k = 0; k < prog->plan->nkernels; k++) {
    if (prog->plan->kernels[k].kind != KK_GEMM)
      continue;
    m = new_model(prog, &w); /* the key needs a model on the device */
    TuneKey key;
    char file[4096];
    tune_model_key(m, k, &key);
    ffn_model_destroy(m);
    tune_path(dir, &key, file, sizeof file);
    FILE *f = fopen(file, "r+b");
    if (!f || fseek(f, 30, SEEK_SET) != 0 || fputc('#', f) == EOF) {
      printf("FAIL: cannot damage %s\n", file);
      failed++;
    }
    if (f)
      fclose(f);
    break;
  }
  m = new_model(prog, &w);
  snprintf(expect, sizeof expect, "tuned GEMM choices: %d of %d", gemms - 1, gemms);
  if (!strstr(ffn_model_tuning(m), expect) || !strstr(ffn_model_tuning(m), "ignored: ")) {
    printf("FAIL: a damaged file: expected \"%s\" and the reason\n", expect);
    failed++;
  }
  failed += run_all(m, g, gp, &w, seed + 3, "one damaged");
  ffn_model_destroy(m);

  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0)
    printf("note: could not remove %s\n", dir);
  ffn_program_destroy(prog);
  set_free(&w);
  graph_destroy(g);
  graph_destroy(gp);
  diags_free(&d);
  free(text);
  free(path);
  printf("%s\n", failed ? "FAILED" : "PASSED");
  return failed ? 1 : 0;
}
