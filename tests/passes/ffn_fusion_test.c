/* ffn_fusion_test.c: the fused form computes dsl.md's definition of FFN Fusion.
 *
 *   ffn_fusion_test FUSED.ffn SUM.ffn LAUNCHES
 *
 * FUSED requests `fuse ffn A..B`; SUM writes the definition out by hand, y = x + sum_i
 * FFN_i(x), with the same weight names. The CPU reference runs the model graph of each
 * (f32, double arithmetic) on the same random weights and fresh inputs; they must agree to
 * f32 rounding (the fused form rounds W*g into its weights and sums in another order).
 * FUSED without its requests must differ clearly (the pass did fuse: no silent skip), and
 * the compiled FUSED program must have LAUNCHES kernel launches (two per fused run: the
 * gate/up product with its activation, the down product with the residual) and keep each
 * weight matrix once after ffn_model_prepare (originals freed). Seed printed.
 */
#include "gpu/gpu_util.h"

#include <time.h>
#include <unistd.h>

static double rel_l2(const RefTensor *a, const RefTensor *b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < ref_numel(a); i++) {
    double d = (double)a->data[i] - b->data[i];
    num += d * d;
    den += (double)b->data[i] * b->data[i];
  }
  return sqrt(num / den);
}

static Graph *load(const char *rel, bool fused, Diags *d, char **text, size_t *len) {
  char *path = source_path(rel);
  *text = source_text(rel, len);
  DriverOptions o = {.sm = 90, .opt_level = 3};
  Graph *g = fused ? driver_model_graph(*text, *len, path, &o, d) : frontend_compile_string(*text, *len, path, NULL, d);
  if (!g) {
    printf("FAIL: %s", d->text);
    exit(1);
  }
  free(path);
  return g;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: ffn_fusion_test FUSED.ffn SUM.ffn LAUNCHES\n");
    return 2;
  }
  const char *env = getenv("FFNC_TEST_SEED");
  uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
  printf("seed %llu (FFNC_TEST_SEED replays it)\n", (unsigned long long)seed);
  Diags d;
  diags_init(&d);
  char *tf, *ts, *tu;
  size_t lf, ls, lu;
  Graph *fused = load(argv[1], true, &d, &tf, &lf), *sum = load(argv[2], true, &d, &ts, &ls);
  Graph *unfused = load(argv[1], false, &d, &tu, &lu);
  int failed = 0;

  Plan *plan = NULL;
  DriverOptions o = {.sm = 90, .opt_level = 3};
  if (driver_compile(tf, lf, argv[1], &o, &d, &plan, NULL) != 0) {
    printf("FAIL: compile: %s", d.text);
    return 1;
  }
  int launches = 0;
  for (int i = 0; i < plan->nsteps; i++)
    launches += plan->steps[i].kind == STEP_LAUNCH;
  bool ok = launches == atoi(argv[3]);
  printf("%s %s: %d launches (expected %s)\n", ok ? "ok  " : "FAIL", argv[1], launches, argv[3]);
  failed += !ok;
  /* after ffn_model_prepare the model holds each weight matrix once: the matrices kept for the
   * run (concatenated, folded, interleaved) have exactly the bytes of the checkpoint's */
  size_t kept = 0, weights = 0;
  for (int t = 0; t < plan->ntensors; t++) {
    const PlanTensor *pt = &plan->tensors[t];
    size_t bytes = pt->rank == 2 ? dtype_bytes(pt->dtype, (size_t)(pt->dims[0].size * pt->dims[1].size)) : 0;
    weights += pt->kind == PT_WEIGHT ? bytes : 0;
    kept += (pt->kind == PT_WEIGHT || pt->kind == PT_DERIVED) && pt->keep ? bytes : 0;
  }
  ok = kept == weights;
  printf("%s %s: matrices resident after prepare %zu bytes, in the weights file %zu\n", ok ? "ok  " : "FAIL",
         argv[1], kept, weights);
  failed += !ok;
  plan_destroy(plan);

  TensorSet w = {0};
  make_weights(sum, seed, &w);
  int64_t tokens[] = {1, 7, 33};
  for (int k = 0; k < 3; k++) {
    TensorSet in = {0};
    make_inputs(sum, tokens[k], seed + 1 + (uint64_t)k, &in);
    RefTensor rf[8] = {0}, rs[8] = {0}, ru[8] = {0};
    if (reference(fused, &w, &in, rf) || reference(sum, &w, &in, rs) || reference(unfused, &w, &in, ru))
      return 1;
    for (int i = 0; i < sum->noutputs; i++) {
      double e = rel_l2(&rf[i], &rs[i]), u = rel_l2(&ru[i], &rs[i]);
      /* f32 values, double arithmetic: a few ulps of f32 apart at most */
      bool same = e <= 1e-6, differs = u > 1e-3;
      printf("%s T=%lld %s: fused vs definition rel_l2 %.3g (tol 1e-6); unfused vs definition %.3g (> 1e-3)\n",
             same && differs ? "ok  " : "FAIL", (long long)tokens[k], sum->outputs[i].name, e, u);
      failed += !(same && differs);
      ref_free(&rf[i]);
      ref_free(&rs[i]);
      ref_free(&ru[i]);
    }
    set_free(&in);
  }
  set_free(&w);
  graph_destroy(fused);
  graph_destroy(sum);
  graph_destroy(unfused);
  diags_free(&d);
  free(tf);
  free(ts);
  free(tu);
  printf("%s\n", failed ? "FAILED" : "PASSED");
  return failed ? 1 : 0;
}
