/* passes_semantics_test.c: the optimized IR computes what the source says.
 *
 *   passes_semantics_test MODEL.ffn [--grad]
 *
 * Runs the CPU reference on the model's graph (the front end's, with any requested FFN
 * Fusion applied: that changes the function) and on the graph after every pass
 * (norm folding, gate/up merging, slice sinking, fusion, precision) with the same random
 * weights and fresh random inputs, and compares the outputs with the tolerance of their
 * element type. The passes round differently (a gain rounded into a weight instead of into
 * the activations; values inside a kernel kept in f32), so results agree to about an ulp of
 * the storage type, not bit for bit. With --grad, the same for the model's backward graph (the
 * one the GPU runs for ffnc run --grad: passes/grad.c, then the pipeline). Needs no GPU.
 */
#include "gpu/gpu_util.h"

static int compare(const char *label, const RefTensor *a, const RefTensor *b, const char *name, const Graph *g,
                   DType narrow) {
  /* the optimized graph against the source: the source reference's tolerance */
  Tolerance tol = tolerance_of(g, narrow, true);
  int64_t n = ref_numel(a);
  if (n != ref_numel(b) || a->dtype != b->dtype) {
    printf("FAIL %s %s: shapes or types differ\n", label, name);
    return -1;
  }
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = (double)a->data[i] - b->data[i];
    num += d * d;
    den += (double)a->data[i] * a->data[i];
  }
  double rel = den > 0 ? sqrt(num / den) : sqrt(num);
  bool ok = rel <= tol.norm; /* NaN fails */
  printf("%s %s %s: rel_l2 %.3g (tol %.0e)\n", ok ? "ok  " : "FAIL", label, name, rel, tol.norm);
  return ok ? 0 : -1;
}

int main(int argc, char **argv) {
  if (argc < 2 || (argc > 2 && strcmp(argv[2], "--grad") != 0)) {
    fprintf(stderr, "usage: passes_semantics_test MODEL.ffn [--grad]\n");
    return 2;
  }
  size_t len;
  char *path = source_path(argv[1]), *text = source_text(argv[1], &len);
  Diags d;
  diags_init(&d);
  DriverOptions o = {.sm = 90, .opt_level = 3, .grad = argc > 2};
  Graph *g0 = driver_model_graph(text, len, path, &o, &d), *g1 = NULL;
  if (!g0 || driver_compile(text, len, path, &o, &d, NULL, &g1) != 0) {
    printf("FAIL: %s", d.text ? d.text : "compile failed\n");
    return 1;
  }
  int failed = 0;
  TensorSet w = {0};
  make_weights(g0, 42, &w);
  int64_t tokens[] = {7, 33};
  for (int k = 0; k < 2; k++) {
    TensorSet in = {0};
    make_inputs(g0, tokens[k], 7 + (uint64_t)k, &in);
    RefTensor r0[64] = {0}, r1[64] = {0};
    if (reference(g0, &w, &in, r0) != 0 || reference(g1, &w, &in, r1) != 0) {
      failed++;
    } else {
      char label[64];
      snprintf(label, sizeof label, "%s T=%lld", argv[1], (long long)tokens[k]);
      for (int i = 0; i < g0->noutputs; i++)
        failed += compare(label, &r0[i], &r1[i], g0->outputs[i].name, g0, narrowest_type(g0)) != 0;
    }
    for (int i = 0; i < g0->noutputs; i++) {
      ref_free(&r0[i]);
      ref_free(&r1[i]);
    }
    set_free(&in);
  }
  set_free(&w);
  graph_destroy(g0);
  graph_destroy(g1);
  diags_free(&d);
  free(text);
  free(path);
  return failed ? 1 : 0;
}
