/* gateup.c: merge the gate and up projections of gated FFNs.
 *
 * Two products of the same activation with constant weights of the same shape,
 *     g = h @ Wg^T,  u = h @ Wu^T,  both read by one elementwise op (silu(g) * u),
 * become one product with the weights concatenated along the output dim, read back through
 * two column slices:
 *     m = h @ concat(Wg, Wu)^T;  g = m[:, :F];  u = m[:, F:]
 * which is exactly the Phi-3 form (one gate_up weight and chunk). The fuse pass then turns
 * "a product read only through its two halves" into one kernel whose epilogue sees the gate
 * and up values of the same element, so the [T, 2F] product is never written.
 *
 * For that, slices must sit directly on the product: a slice of an elementwise op whose
 * users are all slices is rewritten as the op on slices of its operands (per-row and scalar
 * operands need no slicing), e.g. after normfold  chunk(rstd * (x @ W'^T))  becomes
 * rstd * chunk(x @ W'^T).
 *
 * Pre-quantized fp8 weights merge too: concat(Wg, Wu) moves whole stored rows, and the fp8
 * product keeps using each row's codes and scale (interp.c's contract follows rows through
 * concatenation, interleaving and transposes).
 */
#include "passes.h"

#include "../kernels/abi.cuh" /* FFN_GATEUP_GROUP */

#include <stdlib.h>

/* Does some elementwise node read (directly or through elementwise ops) both a and b? */
/* mark[] (next_id + 1 zeros, reused; left zeroed) is scratch. The walk starts at a's
 * position `from` (nothing before it is reached from a or b) and stops where the two meet,
 * so a pass over a deep model does not walk the whole graph per candidate pair. */
static bool meet(const Graph *g, int from, const Node *a, const Node *b, unsigned char *mark) {
  /* mark[id]: 1 reaches from a, 2 from b */
  mark[a->id] |= 1;
  mark[b->id] |= 2;
  bool found = false;
  int i = from;
  for (; i < g->nodes.len && !found; i++) {
    Node *n = GRAPH_NODE(g, i);
    if (n->dead || !is_elementwise(n))
      continue;
    for (int j = 0; j < n->nargs; j++)
      mark[n->id] |= mark[n->args[j]->id];
    found = mark[n->id] == 3;
  }
  mark[a->id] = mark[b->id] = 0;
  for (int k = from; k < i; k++)
    mark[GRAPH_NODE(g, k)->id] = 0;
  return found;
}

static bool only_sliced(const Graph *g, const Node *e) {
  for (int i = 0; i < g->noutputs; i++)
    if (g->outputs[i].node == e)
      return false;
  for (int i = 0; i < g->nodes.len; i++) {
    Node *n = GRAPH_NODE(g, i);
    for (int j = 0; !n->dead && j < n->nargs; j++)
      if (n->args[j] == e && n->op != OP_SLICE)
        return false;
  }
  return true;
}

/* s = slice(op(a, b)) -> op(slice(a), slice(b)); returns the new node or NULL. */
static Node *sink(Compile *c, Node *s) {
  Node *e = s->args[0];
  if (!is_elementwise(e) || ir_is_const(e) || !only_sliced(c->g, e))
    return NULL;
  Node *args[2];
  const Shape *full = &e->shape;
  for (int i = 0; i < e->nargs; i++) {
    Node *o = e->args[i];
    const Shape *os = &o->shape;
    Dim last = full->d[full->rank - 1];
    bool row_or_scalar = os->rank == 0 || (os->d[os->rank - 1].sym < 0 && os->d[os->rank - 1].size == 1 &&
                                           !(last.sym < 0 && last.size == 1));
    if (row_or_scalar)
      args[i] = o;
    else if (os->rank >= 1 && dim_eq(os->d[os->rank - 1], last))
      args[i] = pass_new(c, OP_SLICE, o->dtype, &o, 1, s);
    else
      return NULL;
  }
  Node *n = pass_new(c, e->op, e->dtype, args, e->nargs, e);
  n->var = s->var ? s->var : e->var;
  n->loc = e->loc;
  return n;
}

static void sink_slices(Compile *c) {
  Graph *g = c->g;
  for (bool changed = true; changed;) {
    changed = false;
    for (int i = 0; i < g->nodes.len; i++) {
      Node *s = GRAPH_NODE(g, i);
      if (s->dead || s->op != OP_SLICE)
        continue;
      Node *n = sink(c, s);
      if (n) {
        ir_replace_uses(g, s, n);
        s->dead = true;
        changed = true;
      }
    }
    ir_compact(g);
  }
}

/* next[i]: the position of the next product after i with the same A operand, or -1: the
 * candidates for pairing with i, found without a scan of the rest of the graph. */
static int *next_same_a(const Graph *g, int len) {
  int *next = ffn_xmalloc(sizeof(int) * (size_t)(len + 1)), *last = ffn_xmalloc(sizeof(int) * (size_t)(g->next_id + 1));
  for (int k = 0; k <= g->next_id; k++)
    last[k] = -1;
  for (int i = len - 1; i >= 0; i--) {
    Node *n = GRAPH_NODE(g, i);
    next[i] = -1;
    if (n->op == OP_MATMUL) {
      next[i] = last[n->args[0]->id];
      last[n->args[0]->id] = i;
    }
  }
  free(last);
  return next;
}

int pass_gateup(Compile *c) {
  Graph *g = c->g;
  int len = g->nodes.len; /* nodes appended below are not candidates */
  int *next = next_same_a(g, len), nrep = 0;
  unsigned char *mark = ffn_xcalloc((size_t)g->next_id + 1, 1);
  Node **from = ffn_xmalloc(sizeof(Node *) * (size_t)(2 * len + 1)), **to = ffn_xmalloc(sizeof(Node *) * (size_t)(2 * len + 1));
  /* Uses are replaced after the loop, all at once: operands do not change under it. */
  for (int i = 0; i < len; i++) {
    Node *m1 = GRAPH_NODE(g, i);
    if (m1->dead || m1->op != OP_MATMUL || !ir_is_const(m1->args[1]) || ir_is_const(m1->args[0]))
      continue;
    for (int j = next[i]; j >= 0; j = next[j]) {
      Node *m2 = GRAPH_NODE(g, j);
      if (m2->dead || m2->op != OP_MATMUL || m2->args[0] != m1->args[0] || !ir_is_const(m2->args[1]) ||
          !shape_eq(&m1->args[1]->shape, &m2->args[1]->shape) || m1->args[1]->dtype != m2->args[1]->dtype ||
          m1->dtype != m2->dtype || !meet(g, i, m1, m2, mark))
        continue;
      /* the merged product pays only when the fuse pass can split it into two interleaved
       * streams of FFN_GATEUP_GROUP-column groups */
      Dim n1 = m1->shape.d[m1->shape.rank - 1];
      if (n1.sym >= 0 || n1.size % FFN_GATEUP_GROUP != 0)
        continue;
      Node *parts[2] = {matmul_b_nk(c, m1), matmul_b_nk(c, m2)};
      Node proto = {.ival = {0}};
      Node *cat = pass_new(c, OP_CONCAT, parts[0]->dtype, parts, 2, &proto);
      Node *bt = pass_new(c, OP_TRANSPOSE, cat->dtype, &cat, 1, NULL);
      Node *args[2] = {m1->args[0], bt};
      Node *m = pass_new(c, OP_MATMUL, m1->dtype, args, 2, m1);
      int64_t n = m1->shape.d[m1->shape.rank - 1].size;
      Node *halves[2];
      for (int s = 0; s < 2; s++) {
        Node sl = {.ival = {s * n, n}};
        halves[s] = pass_new(c, OP_SLICE, m->dtype, &m, 1, &sl);
        halves[s]->loc = (s ? m2 : m1)->loc;
        halves[s]->var = (s ? m2 : m1)->var;
      }
      from[nrep] = m1, to[nrep++] = halves[0];
      from[nrep] = m2, to[nrep++] = halves[1];
      m1->dead = m2->dead = true;
      break;
    }
  }
  ir_replace_uses_batch(g, from, to, nrep);
  free(next);
  free(mark);
  free(from);
  free(to);
  /* New nodes were appended after their users; restore topological order. */
  ir_compact(g);
  ir_toposort(g);
  sink_slices(c);
  return ir_toposort(g);
}
