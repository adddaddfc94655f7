/* normfold.c: fold a norm into the matrix product that reads it.
 *
 *   rmsnorm(x, g) @ W^T  =  rstd(x) * (x @ (W*g)^T)                 rstd = 1/sqrt(mean(x^2)+eps)
 *   layernorm(x, g, b) @ W^T
 *                        =  rstd(x) * (x @ (W*g)^T - mean(x) * c) + W b,   c[n] = sum_k W[n,k] g[k]
 *
 * W*g, c and W b are computed once at load time (W b plus the product's own bias, if it has
 * one: merge_addends); rstd and mean are per-row statistics that
 * the matrix-product kernel accumulates from the rows of x it reads anyway, so the
 * normalized activations are never written to memory. The rounding differs from the
 * unfused form (the gain is rounded into W instead of into h) by about one ulp of the
 * storage type, well inside the tolerance of that type.
 */
#include "passes.h"

#include <stdlib.h>

/* The statistics nodes made so far, by (op, x, eps): open addressing, cap a power of two.
 * A scan of the whole graph per product made the pass quadratic in the layers (147 s for
 * 10,000 Llama layers). */
struct StatTable {
  Node **slot;
  int cap, len;
};

static bool same_stat(const Node *n, Op op, const Node *x, double eps) {
  return !n->dead && n->op == op && n->args[0] == x && n->fval == eps;
}

static size_t stat_hash(Op op, const Node *x, int cap) {
  return ((size_t)x->id * 0x9E3779B1u + (size_t)op) & (size_t)(cap - 1);
}

static void stat_insert(struct StatTable *t, Node *n) {
  if (2 * (t->len + 1) > t->cap) {
    struct StatTable big = {ffn_xcalloc((size_t)(t->cap ? 2 * t->cap : 64), sizeof(Node *)), t->cap ? 2 * t->cap : 64, 0};
    for (int i = 0; i < t->cap; i++)
      if (t->slot[i])
        stat_insert(&big, t->slot[i]);
    free(t->slot);
    *t = big;
  }
  size_t i = stat_hash(n->op, n->args[0], t->cap);
  while (t->slot[i])
    i = (i + 1) & (size_t)(t->cap - 1);
  t->slot[i] = n;
  t->len++;
}

/* One statistics node per (op, x, eps), shared by every product that reads the same rows.
 * Outside pass_normfold (ffn_fusion, a few calls) there is no table: scan the graph. */
static Node *stat(Compile *c, Op op, Node *x, const Node *norm) {
  struct StatTable *t = c->stats;
  if (t && t->cap) {
    for (size_t i = stat_hash(op, x, t->cap); t->slot[i]; i = (i + 1) & (size_t)(t->cap - 1))
      if (same_stat(t->slot[i], op, x, norm->fval))
        return t->slot[i];
  }
  for (int i = 0; !t && i < c->g->nodes.len; i++)
    if (same_stat(GRAPH_NODE(c->g, i), op, x, norm->fval))
      return GRAPH_NODE(c->g, i);
  Node *n = pass_new(c, op, DT_F32, &x, 1, norm);
  if (t)
    stat_insert(t, n);
  return n;
}

Node *norm_matmul(Compile *c, Node *x, const Node *norm, Node *w_nk, const Node *mm) {
  Node *args[2] = {x, pass_new(c, OP_TRANSPOSE, w_nk->dtype, &w_nk, 1, NULL)};
  Node *prod = pass_new(c, OP_MATMUL, mm->dtype, args, 2, mm);
  prod->var = NULL;
  if (norm->op == OP_RMSNORM) {
    args[0] = prod, args[1] = stat(c, OP_RMS_RSTD, x, norm);
    return pass_new(c, OP_MUL, mm->dtype, args, 2, mm);
  }
  Node *colsum = pass_new(c, OP_ROWSUM, DT_F32, &w_nk, 1, NULL);
  Node *mean = stat(c, OP_LN_MEAN, x, norm);
  Node *rstd = stat(c, OP_LN_RSTD, x, norm);
  args[0] = mean, args[1] = colsum;
  Node *shift = pass_new(c, OP_MUL, DT_F32, args, 2, mm);
  args[0] = prod, args[1] = shift;
  Node *centered = pass_new(c, OP_SUB, mm->dtype, args, 2, mm);
  args[0] = centered, args[1] = rstd;
  return pass_new(c, OP_MUL, mm->dtype, args, 2, mm);
}

static Node *fold(Compile *c, Node *mm) {
  Node *h = mm->args[0], *x = h->args[0], *gain = h->args[1];
  if (!ir_is_const(gain) || ir_is_const(x) || x->dtype != h->dtype || h->nargs > 3)
    return NULL;
  Node *b_nk = matmul_b_nk(c, mm);
  Node *args[2] = {b_nk, gain};
  Node *scaled = pass_new(c, OP_MUL, b_nk->dtype, args, 2, NULL); /* [N, K] * [K] */
  Node *y = norm_matmul(c, x, h, scaled, mm);
  if (h->op == OP_LAYERNORM && h->nargs == 3) {
    /* the layernorm bias goes through the product once: b @ W^T, a [N] vector */
    args[0] = h->args[2], args[1] = mm->args[1];
    Node *bias = pass_new(c, OP_MATMUL, DT_F32, args, 2, NULL);
    args[0] = y, args[1] = bias;
    y = pass_new(c, OP_ADD, mm->dtype, args, 2, mm);
  }
  return y;
}

/* The constant operand of a binary add n (the other one in *rest), or NULL unless exactly one
 * operand is constant. */
static Node *const_addend(Node *n, Node **rest) {
  if (n->dead || n->op != OP_ADD || ir_is_const(n))
    return NULL;
  int k = ir_is_const(n->args[0]) ? 0 : 1;
  if (!ir_is_const(n->args[k]) || ir_is_const(n->args[1 - k]))
    return NULL;
  *rest = n->args[1 - k];
  return n->args[k];
}

/* (y + c1) + c2 with both c constant (the folded bias W b and the product's own bias b1)
 * becomes y + (c1 + c2): the sum is computed once at load time, in f32, and the product's
 * epilogue loads one vector per column instead of two. Only where y + c1 is read by nothing
 * else and the shape stays that of the sum. Returns how many sums were merged. */
static int merge_addends(Compile *c) {
  Graph *g = c->g;
  Users u = users_build(g);
  int len = g->nodes.len, nrep = 0;
  Node **from = ffn_xmalloc(sizeof(Node *) * (size_t)(len + 1)), **to = ffn_xmalloc(sizeof(Node *) * (size_t)(len + 1));
  for (int i = 0; i < len; i++) {
    Node *n = GRAPH_NODE(g, i), *m, *y;
    Node *c2 = const_addend(n, &m), *c1 = c2 ? const_addend(m, &y) : NULL;
    if (!c1 || m->id >= u.n || u.is_output[m->id] || u.by_id[m->id].len != 1)
      continue;
    Node *args[2] = {c1, c2};
    Node *sum = pass_new(c, OP_ADD, DT_F32, args, 2, NULL);
    args[0] = y, args[1] = sum;
    Node *r = pass_new(c, OP_ADD, n->dtype, args, 2, n);
    if (!shape_eq(&r->shape, &n->shape)) { /* [N, 1] + [N]: a bigger constant, not ours */
      r->dead = sum->dead = true;
      continue;
    }
    r->var = n->var;
    from[nrep] = n, to[nrep++] = r;
    n->dead = m->dead = true;
  }
  ir_replace_uses_batch(g, from, to, nrep);
  users_free(&u);
  free(from);
  free(to);
  return nrep;
}

int pass_normfold(Compile *c) {
  Graph *g = c->g;
  /* fp8 quantizes the normalized rows themselves; keep them. This also keeps the gain out of
   * pre-quantized weights, whose stored codes an fp8 product reads as they are (interp.c):
   * folding g into them would need new codes. Under every other policy such a weight is an
   * ordinary f32 value (code * scale, cast to the activations' type) and folds like any. */
  if (g->prec.type[PREC_MATMUL] == DT_F8E4M3 || g->prec.type[PREC_MATMUL] == DT_F8E5M2)
    return 0;
  int len = g->nodes.len, nrep = 0;
  Node **from = ffn_xmalloc(sizeof(Node *) * (size_t)(len + 1)), **to = ffn_xmalloc(sizeof(Node *) * (size_t)(len + 1));
  struct StatTable stats = {0};
  c->stats = &stats;
  for (int i = 0; i < len; i++) { /* statistics nodes already there (a second run) are shared too */
    Node *n = GRAPH_NODE(g, i);
    if (!n->dead && (n->op == OP_RMS_RSTD || n->op == OP_LN_MEAN || n->op == OP_LN_RSTD))
      stat_insert(&stats, n);
  }
  for (int i = 0; i < len; i++) {
    Node *mm = GRAPH_NODE(g, i);
    if (mm->dead || mm->op != OP_MATMUL || !ir_is_const(mm->args[1]))
      continue;
    Op a = mm->args[0]->op;
    if (a != OP_RMSNORM && a != OP_LAYERNORM)
      continue;
    Node *y = fold(c, mm);
    if (!y)
      continue;
    y->var = mm->var;
    from[nrep] = mm, to[nrep++] = y; /* replaced all at once below: one walk, not one per product */
    mm->dead = true;
  }
  ir_replace_uses_batch(g, from, to, nrep);
  if (nrep)
    merge_addends(c);
  c->stats = NULL;
  free(stats.slot);
  free(from);
  free(to);
  ir_compact(g);
  return ir_toposort(g);
}
