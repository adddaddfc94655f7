/* grad_keep_test.c: the keep policy (passes/grad.c) on the CPU reference.
 *
 * For each model and T = 1, 7, 64, with random inputs, weights and output gradients in the
 * model's own types: the training forward (GRAD_FORWARD) gives the program's outputs bit for bit
 * and the saved tensors; the backward graph that reads them (GRAD_KEEP) gives the same gradients
 * as the one that recomputes (GRAD_RECOMPUTE), bit for bit (the saved tensors hold exactly the
 * values the recomputation rounds to their type). Also: the two graphs' saved-tensor interfaces
 * agree (names, shapes, types, order: after grad.OUT), the names are the documented ones, the
 * keep backward computes no forward product, and missing or misshapen saved tensors are refused
 * naming them. (That the recompute gradients are right is grad_fd_test's job.) */
#include "codegen/driver.h"
#include "interp/util.h"
#include "plan_util.h"
#include "runtime/randinit.h"

static double urand(unsigned *s) { return (double)(*s = *s * 1103515245u + 12345u) / 4294967296.0 * 2 - 1; }

static Graph *graph(const char *label, const char *text, const char *fuse, bool grad, bool keep) {
  FuseRequest fr = {0};
  int nfuse = fuse && sscanf(fuse, "%d..%d", &fr.first, &fr.last) == 2;
  DriverOptions o = {.sm = 90, .fuse = &fr, .nfuse = nfuse, .grad = grad, .keep = keep};
  Diags d;
  diags_init(&d);
  Graph *g = driver_model_graph(text, strlen(text), label, &o, &d);
  if (!g)
    die("%s: %s", label, d.text);
  diags_free(&d);
  return g;
}

/* random values for leaf n in its own type (dynamic dims are T), into st */
static void fill(const Node *n, int64_t T, Store *st, unsigned *seed) {
  int64_t dims[FFN_MAX_RANK], numel = 1;
  for (int d = 0; d < n->shape.rank; d++)
    numel *= dims[d] = n->shape.d[d].sym >= 0 ? T : n->shape.d[d].size;
  double *v = malloc(sizeof(double) * (size_t)(numel + 1));
  for (int64_t k = 0; k < numel; k++)
    v[k] = 0.5 * urand(seed);
  put(st, n->name, n->dtype, n->shape.rank, dims, v);
  free(v);
}

static void put_ref(Store *st, const char *name, const RefTensor *t) {
  int64_t numel = ref_numel(t);
  double *v = malloc(sizeof(double) * (size_t)(numel + 1));
  for (int64_t k = 0; k < numel; k++)
    v[k] = t->data[k];
  put(st, name, t->dtype, t->rank, t->shape, v);
  free(v);
}

static bool same(const RefTensor *a, const RefTensor *b) {
  if (a->rank != b->rank || a->dtype != b->dtype || memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->rank))
    return false;
  return memcmp(a->data, b->data, sizeof(float) * (size_t)ref_numel(a)) == 0;
}

static bool is_saved(const char *name) { return strncmp(name, "saved.", 6) == 0; }

/* The saved inputs of the keep backward graph, in interface order (ival[0]). */
static int saved_inputs(const Graph *g, const Node **out) {
  int n = 0;
  for (int i = 0; i < g->nodes.len; i++)
    if (GRAPH_NODE(g, i)->op == OP_INPUT && is_saved(GRAPH_NODE(g, i)->name))
      out[n++] = GRAPH_NODE(g, i);
  for (int i = 1; i < n; i++) /* insertion by interface index */
    for (int k = i; k > 0 && out[k - 1]->ival[0] > out[k]->ival[0]; k--) {
      const Node *t = out[k];
      out[k] = out[k - 1], out[k - 1] = t;
    }
  return n;
}

/* Interfaces: the forward's outputs are the program's then saved.*, the backward's inputs the
 * program's, grad.OUT, then the same saved.* (names, shapes, types, order); no product of the
 * backward is a forward one (each reads a value computed from an output gradient). */
static void check_interface(const char *label, const Graph *prog, const Graph *fwd, const Graph *keep,
                            const char *want_name) {
  const Node *in[64];
  int nsaved = saved_inputs(keep, in), ninputs = 0;
  CHECK(fwd->noutputs == prog->noutputs + nsaved, "%s: %d forward outputs, expected %d + %d saved", label,
        fwd->noutputs, prog->noutputs, nsaved);
  for (int i = 0; i < keep->nodes.len; i++)
    ninputs += GRAPH_NODE(keep, i)->op == OP_INPUT;
  for (int i = 0; i < nsaved && prog->noutputs + i < fwd->noutputs; i++) {
    const Output *o = &fwd->outputs[prog->noutputs + i];
    CHECK(strcmp(o->name, in[i]->name) == 0 && shape_eq(&o->node->shape, &in[i]->shape) &&
              o->node->dtype == in[i]->dtype && in[i]->ival[0] == ninputs - nsaved + i,
          "%s: saved tensor %d: forward writes %s, backward reads %s (input %lld of %d)", label, i, o->name,
          in[i]->name, (long long)in[i]->ival[0], ninputs);
  }
  for (int i = 0; i < prog->noutputs; i++)
    CHECK(strcmp(fwd->outputs[i].name, prog->outputs[i].name) == 0, "%s: output %d is %s, expected %s", label, i,
          fwd->outputs[i].name, prog->outputs[i].name);
  bool found = !want_name;
  for (int i = 0; i < nsaved && want_name; i++)
    found |= strcmp(in[i]->name, want_name) == 0;
  CHECK(found, "%s: no saved tensor named %s", label, want_name);
  bool *from_grad = calloc((size_t)keep->next_id + 1, 1);
  for (int i = 0; i < keep->nodes.len; i++) {
    const Node *n = GRAPH_NODE(keep, i);
    from_grad[n->id] = n->op == OP_INPUT && strncmp(n->name, "grad.", 5) == 0;
    for (int j = 0; j < n->nargs; j++)
      from_grad[n->id] |= from_grad[n->args[j]->id];
    CHECK(n->op != OP_MATMUL || ir_is_const(n) || from_grad[n->id], "%s: the keep backward recomputes a forward product (%%%d)", label,
          n->id);
  }
  free(from_grad);
}

/* Missing and misshapen saved tensors are refused, naming them. */
static void check_refusals(const char *label, const Graph *keep, Store *w, Store *in) {
  RefTensor out[64];
  char err[512];
  int k = -1;
  for (int i = 0; i < in->n && k < 0; i++)
    k = is_saved(in->e[i].name) ? i : -1;
  if (k < 0)
    return;
  Entry e = in->e[k];
  in->e[k].name = "not.saved";
  CHECK(run(keep, w, in, out, err, sizeof err) != 0 && strstr(err, e.name), "%s: a missing %s: '%s'", label, e.name,
        err);
  in->e[k] = e;
  in->e[k].t.shape[e.t.rank - 1] += 1;
  CHECK(run(keep, w, in, out, err, sizeof err) != 0 && strstr(err, e.name), "%s: a misshapen %s: '%s'", label,
        e.name, err);
  in->e[k] = e;
}

/* Random weights (randinit: `ffnc gen`, the bench, the GPU tests) have the same scale in the
 * program, its training forward and both backward graphs, so weights drawn for one bind to the
 * others with the same values (the keep backward runs only dgrad products, which read the weight
 * the other way round). */
static void check_random_scales(const char *label, const Graph *prog, const Graph *const *others, int n) {
  for (int i = 0; i < prog->nodes.len; i++) {
    const Node *w = GRAPH_NODE(prog, i);
    if (w->op != OP_WEIGHT)
      continue;
    double m0, s0, m1, s1;
    randinit_weight_scale(prog, w, &m0, &s0);
    for (int k = 0; k < n; k++)
      for (int j = 0; j < others[k]->nodes.len; j++) {
        const Node *o = GRAPH_NODE(others[k], j);
        if (o->op != OP_WEIGHT || strcmp(o->name, w->name) != 0)
          continue;
        randinit_weight_scale(others[k], o, &m1, &s1);
        CHECK(m0 == m1 && s0 == s1, "%s: random weight %s: N(%g, %g^2) in the program, N(%g, %g^2) in graph %d",
              label, w->name, m0, s0, m1, s1, k);
      }
  }
}

static void check_model(const char *label, const char *text, const char *fuse, const char *want_name) {
  Graph *prog = graph(label, text, fuse, false, false), *fwd = graph(label, text, fuse, false, true);
  Graph *rec = graph(label, text, fuse, true, false), *keep = graph(label, text, fuse, true, true);
  check_interface(label, prog, fwd, keep, want_name);
  check_random_scales(label, prog, (const Graph *[]){fwd, rec, keep}, 3);
  static const int64_t tokens[] = {1, 7, 64};
  for (int t = 0; t < 3; t++) {
    unsigned seed = 777u + (unsigned)tokens[t];
    Store w = {0}, in = {0};
    for (int i = 0; i < prog->nodes.len; i++) {
      const Node *n = GRAPH_NODE(prog, i);
      if (n->op == OP_WEIGHT || n->op == OP_INPUT)
        fill(n, tokens[t], n->op == OP_WEIGHT ? &w : &in, &seed);
    }
    for (int i = 0; i < rec->nodes.len; i++) /* the output gradients */
      if (GRAPH_NODE(rec, i)->op == OP_INPUT && strncmp(GRAPH_NODE(rec, i)->name, "grad.", 5) == 0)
        fill(GRAPH_NODE(rec, i), tokens[t], &in, &seed);
    RefTensor y[64], yf[64], gr[64], gk[64];
    char err[512];
    CHECK(fwd->noutputs <= 64 && rec->noutputs <= 64, "too many outputs");
    if (run(prog, &w, &in, y, err, sizeof err) != 0 || run(fwd, &w, &in, yf, err, sizeof err) != 0)
      die("%s forward: %s", label, err);
    for (int i = 0; i < prog->noutputs; i++)
      CHECK(same(&y[i], &yf[i]), "%s T=%lld: the training forward's %s differs from the program's", label,
            (long long)tokens[t], prog->outputs[i].name);
    for (int i = prog->noutputs; i < fwd->noutputs; i++)
      put_ref(&in, fwd->outputs[i].name, &yf[i]);
    if (run(rec, &w, &in, gr, err, sizeof err) != 0 || run(keep, &w, &in, gk, err, sizeof err) != 0)
      die("%s backward: %s", label, err);
    CHECK(rec->noutputs == keep->noutputs, "%s: %d gradients with keep, %d with recompute", label, keep->noutputs,
          rec->noutputs);
    for (int i = 0; i < rec->noutputs && i < keep->noutputs; i++)
      CHECK(strcmp(rec->outputs[i].name, keep->outputs[i].name) == 0 && same(&gr[i], &gk[i]),
            "%s T=%lld: %s with keep differs from recompute", label, (long long)tokens[t], rec->outputs[i].name);
    if (t == 1)
      check_refusals(label, keep, &w, &in);
    for (int i = 0; i < prog->noutputs; i++)
      ref_free(&y[i]);
    for (int i = 0; i < fwd->noutputs; i++)
      ref_free(&yf[i]);
    for (int i = 0; i < rec->noutputs; i++)
      ref_free(&gr[i]), ref_free(&gk[i]);
    store_free(&w);
    store_free(&in);
  }
  graph_destroy(prog), graph_destroy(fwd), graph_destroy(rec), graph_destroy(keep);
}

int main(void) {
  static const struct {
    const char *file, *fuse, *name;
  } models[] = {
      {"examples/llama3_tiny.ffn", NULL, "saved.model.layers.3.mlp.up_proj"},
      {"examples/gpt2_tiny.ffn", NULL, "saved.transformer.h.1.mlp.c_fc"},
      {"examples/phi3_tiny.ffn", NULL, "saved.model.layers.1.mlp.gate_up_proj.1"},
      {"examples/llama3_tiny.ffn", "0..3", "saved.fused.model.layers.0.mlp.gate_proj"},
      {"examples/gpt2_tiny.ffn", "0..2", "saved.fused.transformer.h.0.mlp.c_fc"},
      {"tests/gpu/models/layernorm_f32.ffn", NULL, NULL},
  };
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
    char *text = source_text(models[i].file, NULL), label[256];
    snprintf(label, sizeof label, "%s%s%s", models[i].file, models[i].fuse ? " fuse ffn " : "",
             models[i].fuse ? models[i].fuse : "");
    check_model(label, text, models[i].fuse, models[i].name);
    free(text);
  }
  return finish("grad_keep_test");
}
