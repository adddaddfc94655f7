/* grad_precision_test.c: what the 16-bit products of backward graphs cost, on the CPU reference.
 *
 * passes/grad.c rounds the gradient entering a bf16 or f16 product to that type (dA = cast(dY)
 * B^T, dB = A^T cast(dY)), so that the GPU runs both on the tensor cores. Here each model's
 * backward graph in bf16 and in f16 is compared with the same model in f32 (every declared
 * type f32, the same values: inputs, weights and output gradients drawn once and rounded to
 * the 16-bit type), gradient by gradient: ||g16 - g32|| / ||g32|| must stay within the bound of
 * its type. The difference is the 16-bit forward values the backward recomputes and reads, plus
 * the rule's rounding of each dY. Measured with / without the rule (2026-12-01, these models and
 * values, T = 64), the worst of each model's gradients: bf16 1.08% / 1.07% (llama3_tiny), 0.69% /
 * 0.67% (phi3_tiny), 0.58% / 0.53% (gpt_bf16); f16 0.14% / 0.14%, 0.086% / 0.086%, 0.069% /
 * 0.064%. The rule costs little beside the forward values' own rounding. Bounds: about 3x the
 * largest measured, per type. */
#include "codegen/driver.h"
#include "interp/util.h"
#include "plan_util.h"

enum { T = 64 };

static double urand(unsigned *s) { return (double)(*s = *s * 1103515245u + 12345u) / 4294967296.0 * 2 - 1; }

/* values for leaf n of the f32 graph, rounded to t: weights ~ 1/sqrt(fan in) (norm gains near
 * 1), inputs and output gradients in [-1, 1] */
static void fill(const Node *n, DType t, Store *narrow, Store *wide, unsigned *seed) {
  int64_t dims[FFN_MAX_RANK], numel = 1;
  for (int d = 0; d < n->shape.rank; d++)
    numel *= dims[d] = n->shape.d[d].sym >= 0 ? T : n->shape.d[d].size;
  double scale = 1;
  if (n->op == OP_WEIGHT && n->shape.rank > 1)
    scale = sqrt(3.0 / (double)n->shape.d[n->shape.rank - 1].size);
  double *v = malloc(sizeof(double) * (size_t)numel);
  for (int64_t k = 0; k < numel; k++)
    v[k] = round_to_dtype(n->op == OP_WEIGHT && n->shape.rank == 1 ? 1 + 0.1 * urand(seed) : scale * urand(seed), t);
  put(narrow, n->name, t, n->shape.rank, dims, v);
  put(wide, n->name, DT_F32, n->shape.rank, dims, v);
  free(v);
}

static double rel_l2(const RefTensor *a, const RefTensor *b) {
  double num = 0, den = 0;
  for (int64_t k = 0; k < ref_numel(b); k++) {
    double d = (double)a->data[k] - b->data[k];
    num += d * d;
    den += (double)b->data[k] * b->data[k];
  }
  return sqrt(num / (den + 1e-300));
}

/* text with every type "bf16" (after a space or a comma, not in a name) made `to` (" f16", " f32") */
static char *retyped(const char *text, const char *to) {
  char *t = ffn_xstrdup(text);
  for (char *p = t + 1; (p = strstr(p, "bf16")); p += 4)
    if (p[-1] == ' ' || p[-1] == ',')
      memcpy(p, to, 4);
  return t;
}

static Graph *backward(const char *label, const char *text, Diags *d) {
  DriverOptions o = {.sm = 90, .grad = true};
  Graph *g = driver_model_graph(text, strlen(text), label, &o, d);
  if (!g)
    die("%s: %s", label, d->text);
  return g;
}

/* the gradients of model `text` (bf16 as written) in type t against f32, each within bound */
static void check_model(const char *label, const char *text, DType t, double bound) {
  char *tn = retyped(text, t == DT_F16 ? " f16" : "bf16"), *tw = retyped(text, " f32");
  Diags d;
  diags_init(&d);
  Graph *gn = backward(label, tn, &d), *gw = backward(label, tw, &d);
  unsigned seed = 4242;
  Store narrow = {0}, wide = {0};
  for (int i = 0; i < gw->nodes.len; i++) {
    Node *n = GRAPH_NODE(gw, i);
    if (n->op == OP_INPUT || n->op == OP_WEIGHT)
      fill(n, t, &narrow, &wide, &seed);
  }
  RefTensor rn[64], rw[64];
  char err[512];
  CHECK(gn->noutputs == gw->noutputs && gw->noutputs <= 64, "%s: gradient counts", label);
  if (run(gn, &narrow, &narrow, rn, err, sizeof err) != 0 || run(gw, &wide, &wide, rw, err, sizeof err) != 0)
    die("%s: %s", label, err);
  double worst = 0;
  for (int i = 0; i < gw->noutputs; i++) {
    CHECK(strcmp(gn->outputs[i].name, gw->outputs[i].name) == 0, "%s: gradient order", label);
    double e = rel_l2(&rn[i], &rw[i]);
    worst = e > worst ? e : worst;
    CHECK(e <= bound, "%s %s %s: rel_l2 %.3g against f32, bound %.1e", label, dtype_name(t), gw->outputs[i].name, e,
          bound);
    ref_free(&rn[i]);
    ref_free(&rw[i]);
  }
  printf("%-28s %-4s worst rel_l2 against f32 %.3g (bound %.1e)\n", label, dtype_name(t), worst, bound);
  store_free(&narrow);
  store_free(&wide);
  graph_destroy(gn);
  graph_destroy(gw);
  diags_free(&d);
  free(tn);
  free(tw);
}

int main(void) {
  static const char *models[] = {"examples/llama3_tiny.ffn", "examples/phi3_tiny.ffn", "tests/gpu/models/gpt_bf16.ffn"};
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
    char *text = source_text(models[i], NULL);
    check_model(models[i], text, DT_BF16, 3e-2);
    check_model(models[i], text, DT_F16, 4e-3);
    free(text);
  }
  return finish("grad_precision_test");
}
