/* tp.c: tensor parallel (`--tp N --tp-rank R`): the graph becomes rank R's share of the
 * program over N ranks (Megatron-style sharding of every residual FFN sublayer).
 *
 * A residual FFN sublayer (the form ffn_fusion.c recognizes, or the folded form a fused
 * run leaves)
 *     y = x + act(...) @ Bd [+ bd]          Bd const [F, D], act [..., F]
 * becomes, with the rank's columns C = [R*F/N, (R+1)*F/N):
 *     y = x + allreduce(act_C(...) @ Bd[C, :]) [+ bd]
 * act_C is act computed on the columns C only: the column slice is pushed down through the
 * elementwise ops to the products that make the columns (each product x @ B reads B[:, C]:
 * the column-parallel gate/up projections; a chunk of a [2F] product reads its own
 * columns of it, so gate and up stay paired), through per-column biases (sliced) and past
 * per-row values (norm statistics, computed on every rank from the whole row). The down
 * product reads the rows C of Bd (row-parallel); its [T, D] partial sums are added over the
 * ranks by one ALLREDUCE, then the down bias and the residual are added once. A value that
 * is not elementwise (a norm of the F-wide value, say) is computed whole and sliced, so the
 * result is exact whatever act is. After FFN Fusion a fused run is one sublayer: one
 * all-reduce. Everything outside the sublayers is computed redundantly on every rank.
 *
 * The weight slices are load-time SLICE/TRANSPOSE ops straight on the stored tensors:
 * rows C of an up weight W [F, K] (read as W^T) are slice(W^T, C); columns C of a down
 * weight Wd [D, F] are slice(Wd, C). normfold and gateup run after this pass, so the gain
 * folding and the gate/up interleave apply to the rank's slices only.
 *
 * It runs after ffn_fusion (so that a fused run is sharded as one sublayer) and before
 * normfold and gateup (which rewrite the products this pass slices), at every -O level: it
 * changes what the program computes (one rank's share).
 */
#include "passes.h"

#include "../kernels/abi.cuh" /* FFN_GATEUP_GROUP */

#include <stdlib.h>

enum { MAX_MEMO = 256 };

typedef struct {
  Compile *c;
  int64_t len; /* columns per rank: F / N */
  int products; /* column-parallel products made */
  const Node *codes; /* a pre-quantized weight one of them reads as stored codes */
  struct {
    Node *n, *v;
    int64_t off;
  } memo[MAX_MEMO];
  int nmemo;
} Shard;

static Node *slice(Compile *c, Node *n, int64_t off, int64_t len) {
  Node proto = {.ival = {off, len}};
  return pass_new(c, OP_SLICE, n->dtype, &n, 1, &proto);
}

static Node *transpose(Compile *c, Node *n) {
  if (n->op == OP_TRANSPOSE)
    return n->args[0];
  return pass_new(c, OP_TRANSPOSE, n->dtype, &n, 1, NULL);
}

static int64_t last_dim(const Node *n) {
  const Shape *s = &n->shape;
  return s->rank ? (s->d[s->rank - 1].sym < 0 ? s->d[s->rank - 1].size : -1) : 0;
}

/* A product reading a pre-quantized weight as its stored fp8 codes (interp.c's contract):
 * slicing would need the runtime to slice the codes and their per-row scales together. */
static const Node *stored_codes_weight(const Graph *g, const Node *b) {
  while (b->op == OP_TRANSPOSE || b->op == OP_SLICE)
    b = b->args[0];
  return b->op == OP_WEIGHT && b->stored != DT_NONE && b->stored == g->prec.type[PREC_MATMUL] ? b : NULL;
}

/* Columns [off, off + sh->len) of n (whose last dim is wider). */
static Node *shard(Shard *sh, Node *n, int64_t off) {
  Compile *c = sh->c;
  for (int i = 0; i < sh->nmemo; i++)
    if (sh->memo[i].n == n && sh->memo[i].off == off)
      return sh->memo[i].v;
  Node *v;
  if (ir_is_const(n)) {
    v = slice(c, n, off, sh->len); /* load time */
  } else if (n->op == OP_SLICE) {
    v = shard(sh, n->args[0], n->ival[0] + off);
  } else if (n->op == OP_MATMUL && ir_is_const(n->args[1])) {
    Node *args[2] = {n->args[0], slice(c, n->args[1], off, sh->len)};
    v = pass_new(c, OP_MATMUL, n->dtype, args, 2, n);
    sh->products++;
    if (!sh->codes)
      sh->codes = stored_codes_weight(c->g, n->args[1]);
  } else if (is_elementwise(n)) {
    Node *args[2];
    int64_t w = last_dim(n);
    for (int i = 0; i < n->nargs; i++) { /* operands that broadcast along the columns stay whole */
      Node *a = n->args[i];
      args[i] = a->shape.rank > 0 && last_dim(a) == w ? shard(sh, a, off) : a;
    }
    v = pass_new(c, n->op, n->dtype, args, n->nargs, n);
  } else {
    v = slice(c, n, off, sh->len); /* computed whole on every rank */
  }
  v->var = n->var;
  if (sh->nmemo < MAX_MEMO)
    sh->memo[sh->nmemo++] = (typeof(sh->memo[0])){n, v, off};
  return v;
}

typedef struct {
  Node *x, *res, *dsum, *down, *dbias;
} Sublayer;

/* Is r = x + act @ Bd [+ bd] with Bd const [F, D] and act computed at run time? */
static bool match(Node *r, Sublayer *s) {
  for (int side = 0; side < 2; side++) {
    *s = (Sublayer){.res = r};
    if (residual_down(r, side, &s->x, &s->dsum, &s->down, &s->dbias) && !ir_is_const(s->x) && !ir_is_const(s->down->args[0]) && ir_is_const(s->down->args[1]) &&
        s->down->args[1]->shape.rank == 2 && s->down->args[1]->shape.d[0].sym < 0)
      return true;
  }
  return false;
}

/* Rank R's share of sublayer s; NULL if it has no column-parallel product (not an FFN). */
static Node *shard_sublayer(Compile *c, const Sublayer *s, int64_t len, int *rc) {
  Shard *sh = ffn_xcalloc(1, sizeof *sh);
  *sh = (Shard){.c = c, .len = len};
  int64_t off = (int64_t)c->tp_rank * len;
  Node *act = shard(sh, s->down->args[0], off);
  Node *y = NULL;
  if (sh->codes) {
    diag_error(c->diags, c->src, s->down->loc,
               "tensor parallel: the pre-quantized weight `%s` is read as stored %s codes; slicing it is not "
               "supported yet", sh->codes->var ? sh->codes->var : sh->codes->name, dtype_name(sh->codes->stored));
    c->broken = true;
  } else if (sh->products > 0) {
    Node *bd = s->down->args[1]; /* [F, D]: its rows C, as columns of the stored [D, F] */
    Node *rows = transpose(c, slice(c, transpose(c, bd), off, len));
    Node *args[2] = {act, rows};
    Node *part = pass_new(c, OP_MATMUL, s->down->dtype, args, 2, s->down);
    Node proto = {.ival = {c->tp}};
    Node *d = pass_new(c, OP_ALLREDUCE, s->down->dtype, &part, 1, &proto);
    d->loc = s->down->loc;
    if (s->dbias) {
      args[0] = d, args[1] = s->dbias;
      d = pass_new(c, OP_ADD, s->dsum->dtype, args, 2, s->dsum);
    }
    bool x_first = s->res->args[0] == s->x;
    args[0] = x_first ? s->x : d, args[1] = x_first ? d : s->x;
    y = pass_new(c, OP_ADD, s->res->dtype, args, 2, s->res);
    y->var = s->res->var;
  }
  free(sh);
  *rc = c->broken ? -1 : 0;
  return y;
}

int pass_tp(Compile *c) {
  Graph *g = c->g;
  if (c->tp <= 1)
    return 0;
  int len = g->nodes.len;
  for (int i = 0; i < len; i++) {
    Node *r = GRAPH_NODE(g, i);
    Sublayer s;
    if (r->dead || !match(r, &s))
      continue;
    int64_t f = s.down->args[1]->shape.d[0].size;
    if (f % c->tp != 0 || (f / c->tp) % FFN_GATEUP_GROUP != 0) {
      diag_error(c->diags, c->src, s.down->loc,
                 "tensor parallel over %d ranks: this FFN sublayer's hidden width F = %lld is not a multiple of %d",
                 c->tp, (long long)f, c->tp * FFN_GATEUP_GROUP);
      diag_note(c->diags, "each rank computes F/N columns of the up/gate projections, and the kernels interleave "
                          "gate and up rows in groups of %d, so F/N must be a multiple of %d",
                FFN_GATEUP_GROUP, FFN_GATEUP_GROUP);
      return -1;
    }
    const Node *w = stored_codes_weight(g, s.down->args[1]);
    if (w) {
      diag_error(c->diags, c->src, s.down->loc,
                 "tensor parallel: the pre-quantized weight `%s` is read as stored %s codes; slicing it is not "
                 "supported yet", w->var ? w->var : w->name, dtype_name(w->stored));
      return -1;
    }
    int rc;
    Node *y = shard_sublayer(c, &s, f / c->tp, &rc);
    if (rc != 0)
      return -1;
    if (!y)
      continue; /* no projection to shard: computed whole on every rank */
    ir_replace_uses(g, r, y);
    r->dead = true;
  }
  ir_compact(g);
  return ir_toposort(g);
}
