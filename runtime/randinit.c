/* randinit.c: see randinit.h. */
#include "randinit.h"

#include <math.h>
#include <stdlib.h>

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
  uint64_t h = 1469598103934665603ull ^ (seed * 0x9e3779b97f4a7c15ull);
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

void randinit_weight_scale(const Graph *g, const Node *w, double *mean, double *std) {
  *mean = 0;
  *std = 0.1;
  for (int i = 0; i < g->nodes.len; i++) {
    const Node *n = GRAPH_NODE(g, i);
    if (n->op == OP_MATMUL) {
      const Node *b = n->args[1];
      if (b == w || (b->op == OP_TRANSPOSE && b->args[0] == w)) {
        *std = 1.0 / sqrt((double)(b->shape.d[0].size > 0 ? b->shape.d[0].size : 1));
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
