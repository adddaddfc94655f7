/* diff_gen_test.c: random valid .ffn programs, the passes checked against the source on each.
 *
 *   diff_gen_test [COUNT]      COUNT programs (default 200), of seeds S, S+1, ... from
 *                              test_seed() (FFNC_TEST_SEED, else the time)
 *   FFNC_TEST_SEED=S diff_gen_test 1    replays the program of seed S
 *
 * A program is a block of 2-7 random statements (the elementwise ops of the language, matrix
 * products with weights stored [out, in] and [in, out], rmsnorm and layernorm, chunk and the
 * gated ops on its halves, casts), unrolled by a loop of 1-3 layers, with one to three outputs
 * and, for 16-bit models, sometimes a policy (`precision default`, `accumulate`, `weights i8`
 * or `i4`). The CPU reference runs the model graph (what the source says) and the graph after
 * each pass of -O3 (canon, normfold, gateup, fuse, precision), with the same weights and
 * inputs, and compares every output with the tolerance of the narrowest type (as
 * passes_semantics_test does), widened for 16-bit programs by their own rounding error (see
 * Case). Programs whose source overflows are skipped. Each program is also compiled for sm_90
 * (plan and CUDA text; no NVRTC). A failure prints the program's seed and text, the stage and
 * what differs. Needs no GPU.
 */
#include "gpu/gpu_util.h"
#include "passes/passes.h"

/* ---- random programs ---- */

static uint64_t next(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static int pick(uint64_t *s, int n) { return (int)(next(s) % (uint64_t)n); }

enum { W_D, W_F, W_H, NWIDTHS }; /* the widths of values: D, F and H = F / 2 (chunk's halves) */
static const char *const width_name[NWIDTHS] = {"D", "F", "H"};

typedef struct {
  FILE *out;
  uint64_t *rng;
  const char *type; /* of inputs and weights */
  int nvals, nweights;
  int width[64];    /* of value v<k> ("x" is v0) */
} Gen;

static const char *val(int k) {
  static char names[64][16];
  snprintf(names[k], sizeof names[k], k ? "v%d" : "x", k);
  return names[k];
}

/* A value of width w (-1: any), the newer the likelier. -1 if there is none. */
static int any_value(Gen *g, int w) {
  for (int tries = 0; tries < 8; tries++) {
    int k = g->nvals - 1 - pick(g->rng, g->nvals < 3 ? g->nvals : 3);
    if (w < 0 || g->width[k] == w)
      return k;
  }
  for (int k = g->nvals - 1; k >= 0; k--)
    if (w < 0 || g->width[k] == w)
      return k;
  return -1;
}

static int new_value(Gen *g, int w) {
  g->width[g->nvals] = w;
  return g->nvals++;
}

static const char *weight(Gen *g, const char *shape) {
  static char name[16];
  snprintf(name, sizeof name, "w%d", g->nweights++);
  fprintf(g->out, "  weight %s : [%s] %s = \"l{i}.%s\"\n", name, shape, g->type, name);
  return name;
}

static void gen_unary(Gen *g) {
  static const char *const ops[] = {"relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "square", "-"};
  int a = any_value(g, -1), n = (int)(sizeof ops / sizeof ops[0]);
  const char *op = ops[pick(g->rng, n)];
  int v = new_value(g, g->width[a]);
  fprintf(g->out, "  %s = %s(%s)\n", val(v), op, val(a));
}

static void gen_binary(Gen *g) {
  int a = any_value(g, -1), b = any_value(g, g->width[a]);
  int v = new_value(g, g->width[a]);
  switch (pick(g->rng, 6)) {
  case 0: fprintf(g->out, "  %s = %s + %s\n", val(v), val(a), val(b)); break;
  case 1: fprintf(g->out, "  %s = %s - %s\n", val(v), val(a), val(b)); break;
  case 2: fprintf(g->out, "  %s = %s * %s\n", val(v), val(a), val(b)); break;
  case 3: /* a denominator kept away from zero */
    fprintf(g->out, "  %s = %s / (1.5 + sigmoid(%s))\n", val(v), val(a), val(b)); break;
  case 4: fprintf(g->out, "  %s = 0.5 * %s - %s / 3\n", val(v), val(a), val(b)); break;
  default: fprintf(g->out, "  %s = %s(%s, %s)\n", val(v), pick(g->rng, 2) ? "swiglu" : "geglu", val(a), val(b));
  }
}

static void gen_broadcast(Gen *g) {
  int a = any_value(g, -1);
  const char *s = weight(g, width_name[g->width[a]]);
  int v = new_value(g, g->width[a]);
  fprintf(g->out, "  %s = %s %s %s\n", val(v), val(a), pick(g->rng, 2) ? "*" : "+", s);
}

/* a @ w: w stored [out, in] (read transposed) or [in, out]. */
static void gen_matmul(Gen *g, int a, int to) {
  char shape[16];
  bool out_in = pick(g->rng, 2);
  snprintf(shape, sizeof shape, "%s, %s", width_name[out_in ? to : g->width[a]], width_name[out_in ? g->width[a] : to]);
  const char *w = weight(g, shape);
  int v = new_value(g, to);
  fprintf(g->out, "  %s = %s @ %s%s\n", val(v), val(a), w, out_in ? "^T" : "");
}

static void gen_norm(Gen *g) {
  int a = any_value(g, -1);
  const char *wn = width_name[g->width[a]];
  char gain[16];
  snprintf(gain, sizeof gain, "%s", weight(g, wn));
  int v = new_value(g, g->width[a]);
  const char *eps = pick(g->rng, 2) ? ", 1e-5" : "";
  if (pick(g->rng, 2))
    fprintf(g->out, "  %s = rmsnorm(%s, %s%s)\n", val(v), val(a), gain, eps);
  else if (pick(g->rng, 2))
    fprintf(g->out, "  %s = layernorm(%s, %s, %s%s)\n", val(v), val(a), gain, weight(g, wn), eps);
  else
    fprintf(g->out, "  %s = layernorm(%s, %s)\n", val(v), val(a), gain);
}

static void gen_chunk(Gen *g) {
  int a = any_value(g, W_F);
  if (a < 0) { /* make one */
    gen_matmul(g, any_value(g, -1), W_F);
    a = g->nvals - 1;
  }
  int p = new_value(g, W_H), q = new_value(g, W_H);
  fprintf(g->out, "  %s, %s = chunk(%s, 2)\n", val(p), val(q), val(a));
}

static void gen_cast(Gen *g) {
  int a = any_value(g, -1);
  int v = new_value(g, g->width[a]);
  fprintf(g->out, "  %s = cast(cast(%s, f32), %s)\n", val(v), val(a), g->type);
}

static void gen_block(Gen *g) {
  fprintf(g->out, "block layer(x, i) {\n");
  g->nvals = 1;
  g->width[0] = W_D;
  for (int n = 2 + pick(g->rng, 6); n > 0 && g->nvals < 56; n--) {
    switch (pick(g->rng, 8)) {
    case 0: gen_unary(g); break;
    case 1: gen_binary(g); break;
    case 2: gen_broadcast(g); break;
    case 3: gen_matmul(g, any_value(g, -1), pick(g->rng, NWIDTHS)); break;
    case 4: gen_norm(g); break;
    case 5: gen_chunk(g); break;
    case 6: gen_cast(g); break;
    default: gen_unary(g);
    }
  }
  int last = g->nvals - 1;
  if (g->width[last] != W_D)
    gen_matmul(g, last, W_D), last = g->nvals - 1;
  fprintf(g->out, "  return %s%s\n}\n", pick(g->rng, 3) ? "x + " : "", val(last));
}

/* The text of the program of seed (malloc'd); f32_twin: the same program in f32 throughout,
 * with no precision policy (every pick is made either way, so the two stay the same). */
static char *gen_program(uint64_t seed, bool f32_twin) {
  uint64_t rng = seed;
  char *text;
  size_t len;
  FILE *out = open_memstream(&text, &len);
  static const char *const types[] = {"f32", "bf16", "f16"};
  static const char *const policies[] = {"", "precision default %s\n", "precision weights i8\n",
                                         "precision weights i4 group=32\n", "precision accumulate f32\n"};
  Gen g = {out, &rng, types[pick(&rng, 3)], 0, 0, {0}};
  int policy = pick(&rng, 5), d = 8 << pick(&rng, 4), f = 16 << pick(&rng, 4);
  if (strcmp(g.type, "f32") == 0)
    policy = 0; /* the policies are those of 16-bit models */
  if (policy == 3) { /* i4 groups of 32 input channels */
    d = d < 32 ? 32 : d;
    f = f < 64 ? 64 : f;
  }
  if (f32_twin) {
    g.type = "f32";
    policy = 0;
  }
  fprintf(out, "model gen\ndim T\ndim D = %d\ndim F = %d\ndim H = %d\n", d, f, f / 2);
  fprintf(out, policies[policy], g.type);
  fprintf(out, "input x : [T, D] %s\n", g.type);
  bool second = pick(&rng, 3) == 0;
  if (second)
    fprintf(out, "input r : [T, D] %s\n", g.type);
  gen_block(&g);
  if (second)
    fprintf(out, "h = x * r\n");
  fprintf(out, "for i in 0..%d {\n  x = layer(%s, i)\n}\noutput x\n", 1 + pick(&rng, 3), second ? "x + r" : "x");
  if (second)
    fprintf(out, "output h\n");
  if (pick(&rng, 2))
    fprintf(out, "weight wo : [F, D] %s\ny = tanh(x) @ wo^T\noutput y\n", g.type);
  fclose(out);
  return text;
}

/* ---- the check ---- */

/* A 16-bit program's passes round in other places than its source (values kept in f32
 * inside kernels, gains rounded into weights); where the program amplifies rounding (x^2
 * stacked over layers, say), so does that difference. So the tolerance of a stage against
 * the source is the narrowest type's, plus twice the source's own rounding error: its
 * distance from the same program computed in f32 (its f32 twin). A wrong rewrite is off by
 * far more than either. */
typedef struct {
  uint64_t seed;
  const char *text;
  const Graph *g0;
  const TensorSet *w, *in;
  const RefTensor *r0;    /* the model graph's outputs */
  double source_err[64];  /* per output: rel_l2 of r0 against the f32 twin (0 for f32) */
  DType narrow;
} Case;

static void report(const Case *k, const char *what) {
  printf("FAIL seed %llu (replay: FFNC_TEST_SEED=%llu diff_gen_test 1): %s\nprogram:\n%s\n", (unsigned long long)k->seed,
         (unsigned long long)k->seed, what, k->text);
}

/* ||a - b|| / ||a||; NaN when the element counts differ. */
static double rel_l2(const RefTensor *a, const RefTensor *b) {
  int64_t n = ref_numel(a);
  if (n != ref_numel(b))
    return NAN;
  double num = 0, den = 0;
  for (int64_t e = 0; e < n; e++) {
    double d = a->data[e] - b->data[e];
    num += d * d;
    den += a->data[e] * a->data[e];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* The reference on g after stage against the model graph's outputs. */
static int compare_stage(const Case *k, const Graph *g, const char *stage) {
  RefTensor r[64] = {0};
  char what[512];
  int failed = 0;
  if (reference(g, k->w, k->in, r) != 0) {
    snprintf(what, sizeof what, "the reference fails after %s", stage);
    report(k, what);
    return 1;
  }
  for (int i = 0; i < k->g0->noutputs && !failed; i++) {
    double rel = rel_l2(&k->r0[i], &r[i]), tol = tolerance_of(k->g0, k->narrow, true).norm + 2 * k->source_err[i];
    if (!(rel <= tol)) { /* NaN fails */
      snprintf(what, sizeof what, "after %s, output %s: rel_l2 %.3g (tol %.2g, the source's own error %.2g)", stage,
               k->g0->outputs[i].name, rel, tol, k->source_err[i]);
      report(k, what);
      failed = 1;
    }
  }
  for (int i = 0; i < g->noutputs; i++)
    ref_free(&r[i]);
  return failed;
}

/* The -O3 pipeline run pass by pass on the model graph g (which driver_model_graph built:
 * ffn_fusion has run), each stage verified and compared. */
static int check_passes(const Case *k, Graph *g, Diags *d) {
  static const struct { const char *name; PassFn fn; } passes[] = {
      {"canon", pass_canon}, {"normfold", pass_normfold}, {"gateup", pass_gateup},
      {"fuse", pass_fuse},   {"precision", pass_precision},
  };
  SourceFile src = {"gen.ffn", k->text, strlen(k->text)};
  Compile c = {.g = g, .src = &src, .diags = d, .arch = 90, .opt_level = 3};
  for (size_t p = 0; p < sizeof passes / sizeof passes[0]; p++) {
    char err[512] = "", what[1024];
    if (passes[p].fn(&c) != 0 || c.broken || ir_verify(g, err, sizeof err) != 0) {
      snprintf(what, sizeof what, "pass %s fails: %s%s", passes[p].name, d->text ? d->text : "", err);
      report(k, what);
      return 1;
    }
    if (compare_stage(k, g, passes[p].name))
      return 1;
  }
  return 0;
}

/* The narrower (fewer mantissa bits) of two types narrowest_type gives. */
static DType narrower(DType a, DType b) {
  if (a == DT_BF16 || b == DT_BF16)
    return DT_BF16;
  return a == DT_F16 || b == DT_F16 ? DT_F16 : DT_F32;
}

/* The tensors of s in f32 (exactly: every type here widens to f32 without rounding). */
static void widen(const TensorSet *s, TensorSet *out) {
  for (int i = 0; i < s->n; i++) {
    const RawTensor *t = &s->items[i].t;
    int64_t n = 1;
    for (int d = 0; d < t->rank; d++)
      n *= t->shape[d];
    float *f = malloc(sizeof(float) * (size_t)n);
    for (int64_t e = 0; e < n; e++)
      f[e] = (float)dtype_load(t->dtype, t->data, (size_t)e);
    set_add(out, s->items[i].name, DT_F32, t->rank, t->shape, f, sizeof(float) * (size_t)n);
  }
}

/* The outputs are finite and not near the 16-bit range's end (else the program overflowed:
 * it tests nothing, and is skipped). */
static bool sane(const RefTensor *r, int n) {
  for (int i = 0; i < n; i++)
    for (int64_t e = 0; e < ref_numel(&r[i]); e++)
      if (!(fabs(r[i].data[e]) < 1e4))
        return false;
  return true;
}

/* k->source_err from the f32 twin of k's program. 0, or -1 if the twin does not compile. */
static int source_error(Case *k, Diags *d) {
  char *text = gen_program(k->seed, true);
  DriverOptions o = {.sm = 90, .opt_level = 3};
  Graph *t = driver_model_graph(text, strlen(text), "gen_f32.ffn", &o, d);
  TensorSet w = {0}, in = {0};
  RefTensor r[64] = {0};
  int rc = t && t->noutputs == k->g0->noutputs ? 0 : -1;
  widen(k->w, &w);
  widen(k->in, &in);
  if (rc == 0)
    rc = reference(t, &w, &in, r);
  for (int i = 0; rc == 0 && i < t->noutputs; i++) {
    k->source_err[i] = rel_l2(&r[i], &k->r0[i]);
    ref_free(&r[i]);
  }
  set_free(&w);
  set_free(&in);
  graph_destroy(t);
  free(text);
  return rc;
}

/* 0: passed, 1: failed, 2: skipped (the program overflows). */
static int check_program(uint64_t seed, int64_t tokens) {
  char *text = gen_program(seed, false);
  size_t len = strlen(text);
  Case k = {.seed = seed, .text = text};
  Diags d;
  diags_init(&d);
  DriverOptions o = {.sm = 90, .opt_level = 3};
  Graph *g0 = driver_model_graph(text, len, "gen.ffn", &o, &d), *g1 = NULL, *staged = NULL;
  Plan *plan = NULL;
  int rc = 0;
  if (!g0 || driver_compile(text, len, "gen.ffn", &o, &d, &plan, &g1) != 0) {
    report(&k, d.text ? d.text : "does not compile");
    rc = 1;
  }
  TensorSet w = {0}, in = {0};
  RefTensor r0[64] = {0};
  if (rc == 0) {
    make_weights(g0, seed, &w);
    make_inputs(g0, tokens, seed + 1, &in);
    k = (Case){seed, text, g0, &w, &in, r0, {0}, narrower(narrowest_type(g0), narrowest_type(g1))};
    if (reference(g0, &w, &in, r0) != 0) {
      report(&k, "the reference fails on the model graph");
      rc = 1;
    } else if (!sane(r0, g0->noutputs))
      rc = 2;
    else if (k.narrow != DT_F32 && source_error(&k, &d) != 0) {
      report(&k, "its f32 twin does not compile or run");
      rc = 1;
    }
  }
  if (rc == 0 && (staged = driver_model_graph(text, len, "gen.ffn", &o, &d)))
    rc = check_passes(&k, staged, &d) || compare_stage(&k, g1, "driver_compile");
  for (int i = 0; g0 && i < g0->noutputs; i++)
    ref_free(&r0[i]);
  set_free(&w);
  set_free(&in);
  graph_destroy(g0);
  graph_destroy(g1);
  graph_destroy(staged);
  plan_destroy(plan);
  diags_free(&d);
  free(text);
  return rc;
}

int main(int argc, char **argv) {
  int count = argc > 1 ? atoi(argv[1]) : 200, failed = 0, skipped = 0;
  uint64_t base = test_seed();
  static const int64_t tokens[] = {1, 3, 7, 16};
  for (int i = 0; i < count; i++) {
    uint64_t seed = base + (uint64_t)i;
    int rc = check_program(seed, tokens[seed % 4]);
    printf("%s seed %llu\n", rc == 1 ? "FAIL" : rc == 2 ? "skip (overflows)" : "ok  ", (unsigned long long)seed);
    failed += rc == 1;
    skipped += rc == 2;
  }
  printf("diff_gen_test: %d of %d programs failed, %d skipped (they overflow)\n", failed, count, skipped);
  return failed ? 1 : 0;
}
