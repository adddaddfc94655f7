/* analyze_test.c: `ffnc analyze` on models whose answer is known.
 *
 *   analyze_test FFNC DEVICE DIR
 *
 * independent.ffn gets weights under which its four sublayers read and write disjoint
 * columns (small down weights, so they meet only through the RMS statistic): every M[i, j]
 * and the error of fusing all four must be about 0, and the greedy selection under 1e-3
 * must fuse the whole chain. dependent.ffn (same shapes, random weights) must show clear
 * dependency and error, and nothing may be selected under 1e-3. The precision report of an f32
 * program without a policy is ~0, that of dependent_i8.ffn (int8 weights) clearly not, and
 * small. DEVICE is cpu or gpu (the
 * gpu run exits 77 where there is none). Random values come from a seed printed first.
 */
#include "gpu/gpu_util.h"

#include <jansson.h>
#include "runtime/safetensors.h"
#include <errno.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static uint64_t rng;
static double uniform(void) { /* splitmix64 -> [-1, 1) */
  uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (double)((z ^ (z >> 31)) >> 11) / 4503599627370496.0 - 1.0;
}

static void add(StWriter *w, const char *name, int rank, int64_t d0, int64_t d1, float *v) {
  char err[256];
  int64_t shape[2] = {d0, d1};
  size_t n = (size_t)(d0 * (rank == 2 ? d1 : 1));
  if (st_writer_add(w, name, DT_F32, rank, shape, v, n * sizeof(float), err, sizeof err) != 0) {
    printf("FAIL: %s\n", err);
    exit(1);
  }
}

/* Weights of independent.ffn (structured) or dependent.ffn (dense), and 16 calibration rows. */
static void write_files(const char *dir, bool structured) {
  enum { D = 64, F = 32, L = 4, ROWS = 16 };
  static float g[L][D], w1[L][F * D], w2[L][D * F], x[ROWS * D];
  StWriter *w = st_writer_create();
  char name[64], path[4096], err[256];
  for (int l = 0; l < L; l++) {
    for (int d = 0; d < D; d++)
      g[l][d] = (float)(1.0 + 0.2 * uniform());
    for (int f = 0; f < F; f++)
      for (int d = 0; d < D; d++) {
        bool reads = d / 8 == l, writes = d / 8 == 4 + l;
        w1[l][f * D + d] = !structured || reads ? (float)(uniform() / 4) : 0.f;
        w2[l][d * F + f] = !structured ? (float)(uniform() / 4) : writes ? (float)(1e-3 * uniform()) : 0.f;
      }
    snprintf(name, sizeof name, "l%d.norm", l), add(w, name, 1, D, 0, g[l]);
    snprintf(name, sizeof name, "l%d.up", l), add(w, name, 2, F, D, w1[l]);
    snprintf(name, sizeof name, "l%d.down", l), add(w, name, 2, D, F, w2[l]);
  }
  snprintf(path, sizeof path, "%s/w.safetensors", dir);
  if (st_writer_save(w, path, err, sizeof err) != 0)
    printf("FAIL: %s\n", err), exit(1);
  st_writer_destroy(w);
  for (int i = 0; i < ROWS * D; i++)
    x[i] = (float)uniform();
  w = st_writer_create();
  add(w, "x", 2, ROWS, D, x);
  snprintf(path, sizeof path, "%s/calib.safetensors", dir);
  if (st_writer_save(w, path, err, sizeof err) != 0)
    printf("FAIL: %s\n", err), exit(1);
  st_writer_destroy(w);
}

static json_t *analyze(const char *ffnc, const char *device, const char *dir, const char *model) {
  char cmd[12000], json[4200];
  snprintf(json, sizeof json, "%s/%s.json", dir, model);
  snprintf(cmd, sizeof cmd,
           "'%s' analyze '%s/tests/passes/analyze/%s.ffn' --weights '%s/w.safetensors' --input "
           "'%s/calib.safetensors' --device %s --max-error 1e-3 --json '%s' --plot '%s/%s'",
           ffnc, getenv("FFNC_SOURCE_DIR"), model, dir, dir, device, json, dir, model);
  int rc = system(cmd);
  json_error_t e;
  json_t *root = rc == 0 ? json_load_file(json, 0, &e) : NULL;
  if (!root)
    printf("FAIL: `%s` exited %d\n", cmd, rc), exit(1);
  return root;
}

static int check(const char *what, bool ok, double v, const char *bound) {
  printf("%s %s: %.3g (%s)\n", ok ? "ok  " : "FAIL", what, v, bound);
  return !ok;
}

int main(int argc, char **argv) {
  if (argc != 4)
    return fprintf(stderr, "usage: analyze_test FFNC cpu|gpu DIR\n"), 2;
  if (strcmp(argv[2], "gpu") == 0)
    require_gpu();
  if (mkdir(argv[3], 0755) != 0 && errno != EEXIST)
    return printf("FAIL: cannot create %s: %s\n", argv[3], strerror(errno)), 1;
  const char *env = getenv("FFNC_TEST_SEED");
  rng = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
  printf("seed %llu (FFNC_TEST_SEED replays it)\n", (unsigned long long)rng);
  int failed = 0;
  for (int structured = 1; structured >= 0; structured--) {
    const char *model = structured ? "independent" : "dependent";
    write_files(argv[3], structured);
    json_t *r = analyze(argv[1], argv[2], argv[3], model);
    double mmax = 0, mmin = INFINITY;
    json_t *m = json_object_get(r, "dependency"), *row, *v;
    size_t i, j;
    json_array_foreach(m, i, row) json_array_foreach(row, j, v) if (json_is_number(v)) {
      mmax = fmax(mmax, json_number_value(v));
      mmin = fmin(mmin, json_number_value(v));
    }
    json_t *cand = json_object_get(r, "candidates");
    json_t *all = json_array_get(cand, json_array_size(cand) - 1); /* the longest: 0..4 */
    double err = json_number_value(json_object_get(all, "rel_l2"));
    json_t *sel = json_object_get(json_object_get(r, "selection"), "runs");
    int nsel = (int)json_array_size(sel);
    printf("%s: M in [%.3g, %.3g], fusing 0..4: rel_l2 %.3g, %d run(s) selected\n", model, mmin, mmax, err, nsel);
    if (structured) {
      failed += check("independent: max M[i, j]", mmax < 1e-4, mmax, "< 1e-4");
      failed += check("independent: error of fusing 0..4", err < 1e-4, err, "< 1e-4");
      json_t *s0 = json_array_get(sel, 0);
      bool whole = nsel == 1 && json_integer_value(json_object_get(s0, "first")) == 0 &&
                   json_integer_value(json_object_get(s0, "last")) == 4;
      failed += check("independent: selection is `fuse ffn 0..4`", whole, nsel, "runs selected");
    } else {
      failed += check("dependent: min M[i, j]", mmin > 1e-2, mmin, "> 1e-2");
      failed += check("dependent: error of fusing 0..4", err > 1e-2, err, "> 1e-2");
      failed += check("dependent: nothing selected under 1e-3", nsel == 0, nsel, "runs selected");
    }
    /* the precision report: an f32 program without a policy is its own reference */
    double prec = json_number_value(json_object_get(
        json_array_get(json_object_get(json_object_get(r, "precision"), "outputs"), 0), "rel_l2"));
    failed += check("f32 without a policy: precision error", prec < 1e-5, prec, "< 1e-5");
    json_decref(r);
  }
  /* int8 weights (per output channel, 127 levels): visible, and far below the model's own scale */
  json_t *r = analyze(argv[1], argv[2], argv[3], "dependent_i8");
  double prec = json_number_value(json_object_get(
      json_array_get(json_object_get(json_object_get(r, "precision"), "outputs"), 0), "rel_l2"));
  failed += check("int8 weights: precision error", prec > 1e-4 && prec < 5e-2, prec, "in (1e-4, 5e-2)");
  json_decref(r);
  printf("%s\n", failed ? "FAILED" : "PASSED");
  return failed ? 1 : 0;
}
