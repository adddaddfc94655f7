/* grad_fd_test.c: the backward graphs of passes/grad.c against central finite differences,
 * on the CPU reference.
 *
 * For a model with outputs y and random output gradients dy, L = sum <dy, y>. For each input
 * and weight p, a random direction v: the backward graph's <grad.p, p+ - p-> must match
 * L(p+) - L(p-), p+- = p +- h v, h = 0.05 / sqrt(numel p) (each rounded to f32 as stored). Values are stored as f32, so
 * the bound is relative (relu away from its kink), |fd - an| <= 2e-3 max(|fd|, |an|) + 5e-5:
 * the f32 rounding of every stored value makes L noisy by about 1e-5 in these models, and the
 * h^2 truncation is below 1e-3. Models are read as f32 (bf16 in the examples becomes f32: a
 * bf16 input cannot be perturbed by h). */
#include "codegen/driver.h"
#include "interp/util.h"
#include "plan_util.h"

enum { T = 3 };

static double urand(unsigned *s) { return (double)(*s = *s * 1103515245u + 12345u) / 4294967296.0 * 2 - 1; }

/* random f32 values in [-0.5, 0.5] for leaf n (dynamic dims are T) */
static void fill(const Node *n, Store *st, unsigned *seed) {
  int64_t dims[FFN_MAX_RANK], numel = 1;
  for (int d = 0; d < n->shape.rank; d++)
    numel *= dims[d] = n->shape.d[d].sym >= 0 ? T : n->shape.d[d].size;
  double *v = malloc(sizeof(double) * (size_t)numel);
  for (int64_t k = 0; k < numel; k++)
    v[k] = 0.5 * urand(seed);
  put(st, n->name, DT_F32, n->shape.rank, dims, v);
  free(v);
}

/* the leaves of g whose names start with prefix */
static void fill_leaves(const Graph *g, const char *prefix, Store *st, unsigned *seed) {
  for (int i = 0; i < g->nodes.len; i++) {
    Node *n = GRAPH_NODE(g, i);
    if ((n->op == OP_INPUT || n->op == OP_WEIGHT) && strncmp(n->name, prefix, strlen(prefix)) == 0)
      fill(n, st, seed);
  }
}

static RawTensor *find(Store *s, const char *name) {
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->e[i].name, name) == 0)
      return &s->e[i].t;
  return NULL;
}

/* L = sum over outputs of <grad.OUT, OUT> */
static double loss(const Graph *g, Store *w, Store *in, Store *seeds) {
  RefTensor out[16];
  char err[512];
  CHECK(g->noutputs <= 16, "too many outputs");
  if (run(g, w, in, out, err, sizeof err) != 0)
    die("forward: %s", err);
  double L = 0;
  for (int i = 0; i < g->noutputs; i++) {
    char name[256];
    snprintf(name, sizeof name, "grad.%s", g->outputs[i].name);
    const float *dy = find(seeds, name)->data;
    for (int64_t k = 0; k < ref_numel(&out[i]); k++)
      L += (double)dy[k] * out[i].data[k];
    ref_free(&out[i]);
  }
  return L;
}

static double worst;

static void check_model(const char *label, const char *text, const char *fuse) {
  char *t = ffn_xstrdup(text);
  for (char *p; (p = strstr(t, "bf16"));) /* "bf16" -> " f32" */
    memcpy(p, " f32", 4);
  FuseRequest fr[2];
  int nfuse = 0;
  if (fuse && sscanf(fuse, "%d..%d", &fr[0].first, &fr[0].last) == 2)
    fr[0].loc = (SrcLoc){0}, nfuse = 1;
  DriverOptions o = {.sm = 90, .fuse = fr, .nfuse = nfuse}, ob = o;
  ob.grad = true;
  Diags d;
  diags_init(&d);
  Graph *g = driver_model_graph(t, strlen(t), label, &o, &d), *gb = driver_model_graph(t, strlen(t), label, &ob, &d);
  if (!g || !gb)
    die("%s: %s", label, d.text);
  unsigned seed = 12345;
  Store w = {0}, seeds = {0};
  fill_leaves(g, "", &w, &seed); /* inputs and weights in one store, served as both */
  fill_leaves(gb, "grad.", &seeds, &seed);
  Store all = seeds;
  for (int i = 0; i < w.n; i++)
    all.e[all.n++] = w.e[i];
  RefTensor grads[64];
  char err[512];
  CHECK(gb->noutputs <= 64, "too many gradients");
  if (run(gb, &all, &all, grads, err, sizeof err) != 0)
    die("%s backward: %s", label, err);
  for (int i = 0; i < gb->noutputs; i++) {
    RawTensor *p = find(&w, gb->outputs[i].name + 5);
    float *val = (float *)p->data, *saved = malloc(p->nbytes), *plus = malloc(p->nbytes), *minus = malloc(p->nbytes);
    memcpy(saved, val, p->nbytes);
    int64_t n = (int64_t)(p->nbytes / 4);
    double an = 0, h = 0.05 / sqrt((double)n); /* |h v| about 0.03 whatever the size */
    for (int64_t k = 0; k < n; k++) {
      double v = urand(&seed);
      plus[k] = (float)(saved[k] + h * v), minus[k] = (float)(saved[k] - h * v);
      an += grads[i].data[k] * ((double)plus[k] - minus[k]);
    }
    memcpy(val, plus, p->nbytes);
    double Lp = loss(g, &w, &w, &seeds);
    memcpy(val, minus, p->nbytes);
    double fd = Lp - loss(g, &w, &w, &seeds);
    memcpy(val, saved, p->nbytes);
    double scale = fmax(fabs(fd), fabs(an)), rel = fabs(fd - an) / (scale + 1e-12);
    worst = scale > 1e-6 && rel > worst ? rel : worst;
    CHECK(fabs(fd - an) <= 2e-3 * scale + 5e-5, "%s %s: finite difference %.9g, backward %.9g (rel %.2g)", label,
          gb->outputs[i].name, fd, an, rel);
    free(saved), free(plus), free(minus);
    ref_free(&grads[i]);
  }
  store_free(&w);
  store_free(&seeds);
  graph_destroy(g);
  graph_destroy(gb);
  diags_free(&d);
  free(t);
}

#define HEAD "model m\ndim T\ndim D = 6\ndim N = 4\ninput x : [T, D] f32\ninput y : [T, D] f32\n"

int main(void) {
  check_model("unary", HEAD "o1 = relu(x + 1) + relu(y - 1) + gelu(y) + gelu_tanh(x) + silu(y)\n"
                            "o2 = sigmoid(x) * tanh(y) - square(x) + (-y) + cast(x, f32)\noutput o1\noutput o2\n", NULL);
  check_model("binary broadcast",
              HEAD "weight w : [D] f32 = \"w\"\nweight c : [1, D] f32 = \"c\"\n"
                   "o = x * w + y / (square(w) + 1.5) - c * 0.5 + (x - y) * x\noutput o\n", NULL);
  check_model("matmul", HEAD "weight a : [D, N] f32 = \"a\"\nweight b : [N, D] f32 = \"b\"\n"
                             "o = (x @ a) @ b + x @ b^T @ b\noutput o\n", NULL);
  check_model("norms", HEAD "weight g : [D] f32 = \"norm.g\"\nweight b : [D] f32 = \"b\"\n"
                            "o = rmsnorm(x, g, 1e-5) + layernorm(y, g, b, 1e-5) * layernorm(x + y, g, 1e-5)\noutput o\n",
              NULL);
  check_model("chunk", HEAD "weight a : [D, 9] f32 = \"a\"\np, q, r = chunk(x @ a, 3)\n"
                            "gate, up = chunk(y, 2)\no = p * silu(r)\noutput o\noutput up\n", NULL);
  const char *examples[] = {"examples/llama3_tiny.ffn", "examples/phi3_tiny.ffn", "examples/gpt2_tiny.ffn"};
  for (int i = 0; i < 3; i++) {
    char *text = source_text(examples[i], NULL);
    check_model(examples[i], text, NULL);
    free(text);
  }
  char *fused = source_text("examples/llama3_tiny.ffn", NULL);
  check_model("llama3_tiny with fuse ffn 0..3", fused, "0..3");
  free(fused);
  fused = source_text("examples/gpt2_tiny.ffn", NULL); /* layernorm with bias: the fold's rowsum */
  check_model("gpt2_tiny with fuse ffn 0..2", fused, "0..2");
  free(fused);
  printf("worst relative error %.3g\n", worst);
  return finish("grad_fd_test");
}
