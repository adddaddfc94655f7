/* tp_test.c: tensor parallel on the CPU. For N = 2 and 4 ranks, the ranks' graphs (the tp
 * pass, --tp N --tp-rank R) run in lockstep by interp_run_tp equal the unsharded program on
 * the reference interpreter, for Llama-style (SwiGLU, RMSNorm), GPT-style (biases, layernorm,
 * GELU) and FFN-fused models of 3 layers, at T = 1, 7, 64; every rank gets the same bits.
 *
 * Tolerance, relative to the largest output magnitude: the interpreter rounds every value to
 * its node's type, so the sharded program differs from the unsharded one only where it
 * rounds differently: each rank's partial down product is rounded to the down product's type
 * before the sum (N roundings instead of one), and everything after propagates that. In f32,
 * 1e-5 (about 100 f32 ulps over 3 layers; observed ~1e-7); in bf16 (values stored in bf16),
 * 8 * 2^-8 (a few bf16 ulps, compounded over 3 layers: a sum near a rounding boundary rounds
 * the other way; observed up to ~2.6 ulps).
 * The interpreter stores values as floats, so there is no all-f64 comparison.
 */
#include "codegen/driver.h"
#include "ir/interp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LLAMA(T, FUSE)                                                               \
  "model llama\ndim T\ndim D = 64\ndim F = 128\n" FUSE "input x : [T, D] " T "\n"     \
  "block mlp(x, i) {\n"                                                              \
  "  weight g  : [D]    " T " = \"l{i}.g\"\n"                                        \
  "  weight wg : [F, D] " T " = \"l{i}.wg\"\n"                                       \
  "  weight wu : [F, D] " T " = \"l{i}.wu\"\n"                                       \
  "  weight wd : [D, F] " T " = \"l{i}.wd\"\n"                                       \
  "  h = rmsnorm(x, g, 1e-5)\n"                                                      \
  "  return x + (silu(h @ wg^T) * (h @ wu^T)) @ wd^T\n"                             \
  "}\n"                                                                              \
  "for i in 0..3 {\n  x = mlp(x, i)\n}\noutput x\n"

static const char gpt[] =
    "model gpt\ndim T\ndim D = 64\ndim F = 256\ninput x : [T, D] f32\n"
    "block mlp(x, i) {\n"
    "  weight g  : [D]    f32 = \"l{i}.g\"\n"
    "  weight b  : [D]    f32 = \"l{i}.b\"\n"
    "  weight w1 : [D, F] f32 = \"l{i}.w1\"\n"
    "  weight b1 : [F]    f32 = \"l{i}.b1\"\n"
    "  weight w2 : [F, D] f32 = \"l{i}.w2\"\n"
    "  weight b2 : [D]    f32 = \"l{i}.b2\"\n"
    "  h = layernorm(x, g, b, 1e-5)\n"
    "  u = gelu(h @ w1 + b1)\n"
    "  return x + (u @ w2 + b2)\n"
    "}\n"
    "for i in 0..3 {\n  x = mlp(x, i)\n}\noutput x\n";

/* Random tensors, made on first lookup from the graph's declarations. */
typedef struct {
  const Graph *g;
  int64_t tokens;
  char *names[64];
  void *data[64];
  DType dtype[64];
  int64_t shape[64][FFN_MAX_RANK];
  int rank[64];
  int n;
} Store;

static unsigned rng = 12345;
static double uniform(void) {
  rng = rng * 1103515245u + 12345u;
  return ((rng >> 8) & 0xFFFF) / 32768.0 - 1.0;
}

static int lookup(void *ctx, const char *name, RawTensor *out) {
  Store *s = ctx;
  int k = 0;
  while (k < s->n && strcmp(s->names[k], name) != 0)
    k++;
  if (k == s->n) {
    const Node *decl = NULL;
    for (int i = 0; i < s->g->nodes.len && !decl; i++) {
      const Node *n = GRAPH_NODE(s->g, i);
      if ((n->op == OP_WEIGHT || n->op == OP_INPUT) && strcmp(n->name, name) == 0)
        decl = n;
    }
    if (!decl || s->n == 64)
      return -1;
    int64_t numel = 1;
    s->rank[k] = decl->shape.rank;
    for (int d = 0; d < decl->shape.rank; d++)
      numel *= s->shape[k][d] = decl->shape.d[d].sym >= 0 ? s->tokens : decl->shape.d[d].size;
    double scale = decl->op == OP_INPUT ? 1 : decl->shape.rank == 2 ? 1 / sqrt((double)s->shape[k][1]) : 0.5;
    double base = decl->shape.rank == 1 && strstr(name, ".g") ? 1 : 0; /* gains near 1 */
    s->dtype[k] = decl->dtype;
    s->data[k] = malloc(dtype_bytes(decl->dtype, (size_t)numel));
    for (int64_t i = 0; i < numel; i++)
      dtype_store(decl->dtype, s->data[k], (size_t)i, base + scale * uniform());
    s->names[k] = strdup(name);
    s->n++;
  }
  int64_t numel = 1;
  out->dtype = s->dtype[k];
  out->rank = s->rank[k];
  for (int d = 0; d < s->rank[k]; d++)
    numel *= out->shape[d] = s->shape[k][d];
  out->data = s->data[k];
  out->nbytes = dtype_bytes(s->dtype[k], (size_t)numel);
  return 0;
}

static void store_free(Store *s) {
  for (int i = 0; i < s->n; i++)
    free(s->names[i]), free(s->data[i]);
}

static Graph *graph(const char *src, int tp, int rank) {
  DriverOptions o = {.sm = 90, .opt_level = 3, .tp = tp, .tp_rank = rank};
  Diags d;
  diags_init(&d);
  Graph *g = driver_model_graph(src, strlen(src), "tp.ffn", &o, &d);
  if (!g)
    fprintf(stderr, "%s", d.text ? d.text : "compile failed\n");
  diags_free(&d);
  return g;
}

static int allreduces(const Graph *g) {
  int n = 0;
  for (int i = 0; i < g->nodes.len; i++)
    n += GRAPH_NODE(g, i)->op == OP_ALLREDUCE;
  return n;
}

static int failures;

static void check(const char *what, const char *src, int ranks, int64_t tokens, double tol, int want_allreduces) {
  Graph *whole = graph(src, 1, 0), *g[4] = {0};
  for (int r = 0; r < ranks; r++)
    g[r] = graph(src, ranks, r);
  Store st = {.g = whole, .tokens = tokens};
  InterpSources srcs = {lookup, &st, lookup, &st};
  RefTensor want = {0}, got[4] = {0};
  char err[512];
  if (!whole || !g[ranks - 1] || interp_run(whole, &srcs, &want, err, sizeof err) != 0 ||
      interp_run_tp((const Graph *const *)g, ranks, &srcs, got, err, sizeof err) != 0) {
    fprintf(stderr, "FAIL %s N=%d T=%lld: %s\n", what, ranks, (long long)tokens, err);
    failures++;
    goto out;
  }
  double maxref = 0, maxdiff = 0;
  int64_t n = ref_numel(&want);
  for (int64_t i = 0; i < n; i++) {
    maxref = fmax(maxref, fabs(want.data[i]));
    maxdiff = fmax(maxdiff, fabs((double)got[0].data[i] - want.data[i]));
  }
  bool same = true;
  for (int r = 1; r < ranks; r++)
    same &= memcmp(got[r].data, got[0].data, sizeof(float) * (size_t)n) == 0;
  int ar = allreduces(g[0]);
  bool ok = same && maxdiff <= tol * maxref && ar == want_allreduces;
  printf("%s %s N=%d T=%lld: max |diff| / max |ref| = %.3g (tol %.3g), %d all-reduces, ranks %s\n",
         ok ? "ok  " : "FAIL", what, ranks, (long long)tokens, maxdiff / maxref, tol, ar,
         same ? "identical" : "DIFFER");
  failures += !ok;
out:
  ref_free(&want);
  for (int r = 0; r < ranks; r++)
    ref_free(&got[r]), graph_destroy(g[r]);
  graph_destroy(whole);
  store_free(&st);
}

/* F % N != 0, or F/N not a multiple of the gate/up interleave group: a compile error. */
static void check_refused(void) {
  Diags d;
  diags_init(&d);
  DriverOptions o = {.sm = 90, .opt_level = 3, .tp = 3, .tp_rank = 0};
  const char *src = LLAMA("f32", "");
  Graph *g = driver_model_graph(src, strlen(src), "tp.ffn", &o, &d);
  bool ok = !g && d.text && strstr(d.text, "not a multiple of 24");
  printf("%s F=128 over 3 ranks refused: %s\n", ok ? "ok  " : "FAIL", d.text ? d.text : "(no error)\n");
  failures += !ok;
  graph_destroy(g);
  diags_free(&d);
}

int main(void) {
  static const int64_t tokens[] = {1, 7, 64};
  for (int ni = 0; ni < 2; ni++) {
    int ranks = ni ? 4 : 2;
    for (int t = 0; t < 3; t++) {
      check("llama f32", LLAMA("f32", ""), ranks, tokens[t], 1e-5, 3);
      check("llama bf16", LLAMA("bf16", ""), ranks, tokens[t], 8.0 / 256, 3);
      check("gpt f32", gpt, ranks, tokens[t], 1e-5, 3);
      check("llama fused 0..3", LLAMA("f32", "fuse ffn 0..3\n"), ranks, tokens[t], 1e-5, 1);
    }
  }
  check_refused();
  return failures ? 1 : 0;
}
