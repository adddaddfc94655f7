/* randinit.c: see randinit.h. */
#include "randinit.h"
#include "../ir/fnv.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  uint64_t s;
} Rng;

static uint64_t rng_next(Rng *r) { /* splitmix64 */
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double rng_normal(Rng *r) {
  double u1 = ((double)(rng_next(r) >> 11) + 0.5) / 9007199254740992.0;
  double u2 = (double)(rng_next(r) >> 11) / 9007199254740992.0;
  return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

static uint64_t hash_name(const char *s, uint64_t seed) {
  return ffn_fnv_str(s, FFN_FNV_OFFSET ^ (seed * 0x9e3779b97f4a7c15ull));
}

/* Whether n reads the gradient of an output (an input `grad.*` of a backward graph); seen[id]
 * marks the nodes already walked. */
static bool reads_gradient(const Node *n, bool *seen) {
  if (seen[n->id])
    return false;
  seen[n->id] = true;
  if (n->op == OP_INPUT)
    return strncmp(n->name, "grad.", 5) == 0;
  for (int i = 0; i < n->nargs; i++)
    if (reads_gradient(n->args[i], seen))
      return true;
  return false;
}

/* The product's inner dimension as the forward's, so that the forward, its recompute backward
 * and its keep backward (which runs no forward product, only dgrad ones) draw the same values:
 * a forward product A op(W) has inner dimension op(W)'s rows; its dgrad dY op(W)^T reads W the
 * other way, and the forward's inner dimension is its operand's columns. */
static int64_t forward_inner(const Graph *g, const Node *mm) {
  const Node *b = mm->args[1];
  bool *seen = calloc((size_t)g->next_id + 1, sizeof(bool));
  bool dgrad = seen && reads_gradient(mm->args[0], seen);
  free(seen);
  return b->shape.d[dgrad && b->shape.rank > 1 ? 1 : 0].size;
}

void randinit_weight_scale(const Graph *g, const Node *w, double *mean, double *std) {
  *mean = 0;
  *std = 0.1;
  for (int i = 0; i < g->nodes.len; i++) {
    const Node *n = GRAPH_NODE(g, i);
    if (n->op == OP_MATMUL) {
      const Node *b = n->args[1], *read = b->op == OP_TRANSPOSE ? b->args[0] : b;
      if (read->op == OP_CAST) /* a pre-quantized weight, dequantized for the product */
        read = read->args[0];
      if (read == w) {
        int64_t k = forward_inner(g, n);
        *std = 1.0 / sqrt((double)(k > 0 ? k : 1));
        return;
      }
    }
    if ((n->op == OP_RMSNORM || n->op == OP_LAYERNORM) && n->args[1] == w) {
      *mean = 1.0;
      return;
    }
  }
}

void *randinit_tensor(const char *name, uint64_t seed, DType dt, int64_t numel, double mean, double std, size_t *nbytes) {
  *nbytes = numel < 0 ? SIZE_MAX : dtype_bytes(dt, (size_t)numel); /* saturated: malloc fails */
  void *p = *nbytes == SIZE_MAX ? NULL : malloc(*nbytes ? *nbytes : 1);
  if (!p)
    return NULL;
  Rng r = {hash_name(name, seed)};
  for (int64_t i = 0; i < numel; i++)
    dtype_store(dt, p, (size_t)i, mean + std * rng_normal(&r));
  return p;
}

int randinit_prequant(const Node *w, uint64_t seed, double mean, double std, void **codes, size_t *codes_bytes,
                      float **scale) {
  int64_t rows = w->shape.rank ? w->shape.d[0].size : 1, cols = 1;
  for (int d = 1; d < w->shape.rank; d++)
    cols *= w->shape.d[d].size;
  size_t nbytes;
  float *v = randinit_tensor(w->name, seed, DT_F32, rows * cols, mean, std, &nbytes);
  uint8_t *q = malloc((size_t)(rows * cols > 0 ? rows * cols : 1));
  float *s = malloc(sizeof(float) * (size_t)(rows > 0 ? rows : 1));
  if (!v || !q || !s) {
    free(v);
    free(q);
    free(s);
    return -1;
  }
  double fmax_t = w->stored == DT_F8E4M3 ? 448.0 : 57344.0;
  for (int64_t r = 0; r < rows; r++) {
    double amax = 0;
    for (int64_t k = 0; k < cols; k++)
      amax = fmax(amax, fabs(v[r * cols + k]));
    s[r] = amax > 0 ? (float)(amax / fmax_t) : 1.0f;
    for (int64_t k = 0; k < cols; k++)
      dtype_store(w->stored, q, (size_t)(r * cols + k), v[r * cols + k] / (double)s[r]);
  }
  free(v);
  *codes = q;
  *codes_bytes = (size_t)(rows * cols);
  *scale = s;
  return 0;
}
