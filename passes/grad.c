/* grad.c: reverse-mode differentiation. The program becomes its backward graph, in the same IR:
 *
 *   inputs   the program's inputs and, for each output y, `grad.y` (dL/dy, y's shape and type)
 *   outputs  `grad.<name>` for every input and every weight (dL/d of it, f32)
 *
 * The forward nodes stay (the backward recomputes what it reads from them); the gradient
 * nodes are appended, walking the forward graph from its outputs back, one rule per op
 * (backprop below). Gradients are f32 (the reference computes them in double and rounds each
 * to f32). A unary op `f` differentiates through its derivative op `f_grad` (ops.def, the
 * math next to f's in kernels/opmath.cuh); broadcasting is undone by sum_to, and a weight's
 * gradient is a matmul_at, the sum over tokens. An op without a rule is an error at its line.
 *
 * Precision of the products (the one place a gradient is rounded below f32): the gradient dY
 * entering the products of a 16-bit forward product Y = A B (A and B both bf16, or both f16)
 * is rounded to that type first, as torch's autocast backward does: dA = cast(dY) B^T
 * and dB = A^T cast(dY) then multiply 16-bit operands, both as in the forward, and sum in f32
 * (the reference: in double, rounded to f32). So the GPU runs them on the tensor cores with the
 * weights as stored (codegen: B^T transposed once at load time, 16-bit; matmul_at_tc), and the
 * reference computes exactly what the rule says. f32 products are unchanged.
 *
 * What the forward keeps for the backward is a policy (GradGraph):
 *
 *   GRAD_RECOMPUTE  the backward graph above: it recomputes every forward value it reads from
 *                   the inputs (the default: nothing lives between the two calls)
 *   GRAD_KEEP       the backward graph reads the saved tensors as inputs `saved.NAME` (after
 *                   the grad.OUT inputs) instead of recomputing them
 *   GRAD_FORWARD    the training forward of GRAD_KEEP: the program with the saved tensors as
 *                   extra outputs `saved.NAME` (after its own outputs, in the same order)
 *
 * The rule (keep_walk): save the outputs of the matrix products that the backward graph reads,
 * directly or through values it recomputes; recompute everything else (elementwise ops, norms,
 * their statistics, residual sums) from the inputs and the saved tensors. So the backward runs
 * no forward product again, and keeps no [T, F] value it can get from one pass over saved ones
 * (silu(gate) * up). A product read only through column slices (Phi-3's chunked gate_up, or
 * the gate/up merge later) is saved as the slices the backward reads. Saved tensors keep the
 * type of the value (bf16 for a bf16 product): the backward reads exactly what it would have
 * recomputed, so both policies give bit-identical gradients on the CPU reference.
 * Names (saved_name): `saved.` and the product's weight without ".weight"
 * ("saved.model.layers.0.mlp.gate_proj"), ".K" for chunk K of it, "fused." before the first
 * weight of an FFN Fusion product, ".2", ".3" for a name taken twice.
 */
#include "passes.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  Compile *c;
  Node **grad;    /* by forward node id: dL/d node so far, or NULL */
  bool *need;     /* by id: depends on an input or a weight (has a gradient to pass on) */
  PtrVec *slices; /* by id: the slices of the node whose gradients are known, until it is reached */
} Grad;

static Node *new1(Grad *G, Op op, Node *a) { return pass_new(G->c, op, DT_F32, &a, 1, NULL); }
static Node *new2(Grad *G, Op op, Node *a, Node *b) { return pass_new(G->c, op, DT_F32, (Node *[]){a, b}, 2, NULL); }
static Node *scalar(Grad *G, double v) { return ir_scalar(G->c->g, v, DT_F32, (SrcLoc){0}); }
static Node *with_ival(Grad *G, Op op, Node **args, int nargs, int64_t i0, int64_t i1) {
  Node proto = {.ival = {i0, i1}, .loc = args[0]->loc};
  return pass_new(G->c, op, DT_F32, args, nargs, &proto);
}
/* zeros of x's shape (the gradient of an input or weight the outputs do not read) */
static Node *zeros_like(Grad *G, Node *x) { return new2(G, OP_MUL, x, scalar(G, 0)); }

static void accumulate(Grad *G, Node *x, Node *dx) {
  G->grad[x->id] = G->grad[x->id] ? new2(G, OP_ADD, G->grad[x->id], dx) : dx;
}

/* dy of a broadcast result, summed back to the shape of operand x */
static Node *sum_to(Grad *G, Node *dy, const Node *x) {
  if (shape_eq(&dy->shape, &x->shape))
    return dy;
  int64_t dims = 0;
  for (int i = 0, lead = dy->shape.rank - x->shape.rank; i < x->shape.rank; i++) {
    Dim d = x->shape.d[i], o = dy->shape.d[lead + i];
    if (d.sym < 0 && d.size == 1 && !(o.sym < 0 && o.size == 1))
      dims |= (int64_t)1 << i;
  }
  return with_ival(G, OP_SUM_TO, &dy, 1, x->shape.rank, dims);
}

static Node *transposed(Grad *G, Node *b) { return b->op == OP_TRANSPOSE ? b->args[0] : new1(G, OP_TRANSPOSE, b); }

/* dy as the products of the forward product mm read it: rounded to the type of mm's operands
 * when both have the same 16-bit type (the rule at the top of the file) */
static bool product_16bit(const Node *mm) {
  DType t = mm->args[0]->dtype;
  return (t == DT_BF16 || t == DT_F16) && mm->args[1]->dtype == t;
}

static Node *product_grad(Grad *G, const Node *mm, Node *dy) {
  return product_16bit(mm) ? pass_new(G->c, OP_CAST, mm->args[0]->dtype, &dy, 1, NULL) : dy;
}

/* The gradient da = dy b^T of the 16-bit operand a of a 16-bit product mm, when a is a value
 * of the graph (not an input or a weight, whose gradients are outputs): rounded to a's type, as
 * an autograd of 16-bit tensors holds it (the keep backward's dh = dY Wd of Llama: stored in
 * bf16, half the bytes of f32 between its product and the kernel that reads it). */
static Node *value_grad(Grad *G, const Node *mm, Node *da) {
  const Node *a = mm->args[0];
  if (!product_16bit(mm) || a->op == OP_INPUT || a->op == OP_WEIGHT)
    return da;
  return pass_new(G->c, OP_CAST, a->dtype, &da, 1, NULL);
}

static Node *row_mean(Grad *G, Node *v) { return new1(G, OP_LN_MEAN, v); }

/* y = xhat * gain (+ bias), xhat = (x - mean) * rstd (rmsnorm: mean 0):
 *   dx = rstd * (u - mean(u) - xhat * mean(u * xhat)), u = dy * gain (rmsnorm: no mean(u));
 *   dgain = sum over rows of dy * xhat; dbias = sum over rows of dy. */
static void norm_backward(Grad *G, Node *n, Node *dy) {
  Node *x = n->args[0], *gain = n->args[1];
  bool rms = n->op == OP_RMSNORM;
  Node proto = {.fval = n->fval, .loc = n->loc};
  Node *rstd = pass_new(G->c, rms ? OP_RMS_RSTD : OP_LN_RSTD, DT_F32, &x, 1, &proto);
  Node *centered = rms ? x : new2(G, OP_SUB, x, row_mean(G, x));
  Node *xhat = new2(G, OP_MUL, centered, rstd);
  if (G->need[x->id]) {
    Node *u = new2(G, OP_MUL, dy, gain);
    Node *v = new2(G, OP_MUL, xhat, row_mean(G, new2(G, OP_MUL, u, xhat)));
    Node *w = rms ? new2(G, OP_SUB, u, v) : new2(G, OP_SUB, new2(G, OP_SUB, u, row_mean(G, u)), v);
    accumulate(G, x, new2(G, OP_MUL, w, rstd));
  }
  if (G->need[gain->id])
    accumulate(G, gain, sum_to(G, new2(G, OP_MUL, dy, xhat), gain));
  if (n->nargs > 2 && G->need[n->args[2]->id])
    accumulate(G, n->args[2], sum_to(G, dy, n->args[2]));
}

/* The row statistics that `fuse ffn` leaves (over D = the last dim of x):
 *   d rms_rstd / dx = -rstd^3 x / D,  d ln_rstd / dx = -rstd^3 (x - mean) / D,  d ln_mean / dx = 1 / D */
static void stat_backward(Grad *G, Node *n, Node *dy) {
  Node *x = n->args[0];
  double D = (double)x->shape.d[x->shape.rank - 1].size;
  if (n->op == OP_LN_MEAN) {
    accumulate(G, x, new2(G, OP_ADD, zeros_like(G, x), new2(G, OP_MUL, dy, scalar(G, 1 / D))));
    return;
  }
  Node *cube = new2(G, OP_MUL, n, new2(G, OP_MUL, n, n));
  Node *k = new2(G, OP_MUL, new2(G, OP_MUL, dy, cube), scalar(G, -1 / D));
  Node *centered = n->op == OP_RMS_RSTD ? x : new2(G, OP_SUB, x, row_mean(G, x));
  accumulate(G, x, new2(G, OP_MUL, centered, k));
}

/* columns [at, at + len) of dy along the concatenated dim: a slice (of the transpose, for rows) */
static void concat_backward(Grad *G, Node *n, Node *dy) {
  bool rows = n->ival[0] != n->shape.rank - 1;
  Node *cols = rows ? new1(G, OP_TRANSPOSE, dy) : dy;
  for (int64_t i = 0, at = 0; i < n->nargs; i++) {
    Node *a = n->args[i];
    int64_t len = a->shape.d[n->ival[0]].size;
    Node *part = with_ival(G, OP_SLICE, &cols, 1, at, len);
    if (G->need[a->id])
      accumulate(G, a, rows ? new1(G, OP_TRANSPOSE, part) : part);
    at += len;
  }
}

static Op derivative_op(Op op) {
  char name[64];
  snprintf(name, sizeof name, "%s_grad", op_info[op].name);
  return op_from_name(name);
}

/* the gradient of each operand of n, given dy = dL/dn; -1 after reporting an op with no rule */
static int backprop(Grad *G, Node *n, Node *dy) {
  Node *a = n->nargs > 0 ? n->args[0] : NULL, *b = n->nargs > 1 ? n->args[1] : NULL;
  bool da = a && G->need[a->id], db = b && G->need[b->id];
  switch (n->op) {
  case OP_NEG:
    accumulate(G, a, new1(G, OP_NEG, dy));
    return 0;
  case OP_CAST: /* the rounding passes the gradient through */
    accumulate(G, a, dy);
    return 0;
  case OP_ADD:
  case OP_SUB:
    if (da)
      accumulate(G, a, sum_to(G, dy, a));
    if (db)
      accumulate(G, b, sum_to(G, n->op == OP_SUB ? new1(G, OP_NEG, dy) : dy, b));
    return 0;
  case OP_MUL:
    if (da)
      accumulate(G, a, sum_to(G, new2(G, OP_MUL, dy, b), a));
    if (db)
      accumulate(G, b, sum_to(G, new2(G, OP_MUL, dy, a), b));
    return 0;
  case OP_DIV: /* d(a/b)/db = -(a/b)/b */
    if (da)
      accumulate(G, a, sum_to(G, new2(G, OP_DIV, dy, b), a));
    if (db)
      accumulate(G, b, sum_to(G, new1(G, OP_NEG, new2(G, OP_DIV, new2(G, OP_MUL, dy, n), b)), b));
    return 0;
  case OP_MATMUL: /* y = a b:  da = dy b^T,  db = a^T dy (summed over a's leading dims) */
    if (da || db)
      dy = product_grad(G, n, dy);
    if (da)
      accumulate(G, a, value_grad(G, n, new2(G, OP_MATMUL, dy, transposed(G, b))));
    if (db)
      accumulate(G, b, new2(G, OP_MATMUL_AT, a, dy));
    return 0;
  case OP_TRANSPOSE: /* a weight read as w^T: (x^T dy)^T = dy^T x, summed in w's own layout */
    accumulate(G, a, dy->op == OP_MATMUL_AT ? new2(G, OP_MATMUL_AT, dy->args[1], dy->args[0]) : new1(G, OP_TRANSPOSE, dy));
    return 0;
  case OP_RMSNORM:
  case OP_LAYERNORM:
    norm_backward(G, n, dy);
    return 0;
  case OP_RMS_RSTD:
  case OP_LN_RSTD:
  case OP_LN_MEAN:
    if (a->shape.d[a->shape.rank - 1].sym < 0) {
      stat_backward(G, n, dy);
      return 0;
    }
    break;
  case OP_ROWSUM: /* y[r] = sum_c a[r, c] (the layernorm fold of `fuse ffn`): da[r, c] = dy[r], */
    if (a->shape.rank == 2) { /* broadcast along rows by adding dy to the transpose */
      Node *t = new1(G, OP_TRANSPOSE, a);
      accumulate(G, a, new1(G, OP_TRANSPOSE, new2(G, OP_ADD, zeros_like(G, t), dy)));
      return 0;
    }
    break;
  case OP_CONCAT: /* the weights `fuse ffn` joins: each gets its part of dy */
    if (n->ival[0] == n->shape.rank - 1 || (n->ival[0] == 0 && n->shape.rank == 2)) {
      concat_backward(G, n, dy);
      return 0;
    }
    break;
  case OP_SLICE: /* joined with the other slices of a when a is reached (slices_grad) */
    ptrvec_push(G->c->g->arena, &G->slices[a->id], n);
    return 0;
  default:
    if (op_info[n->op].cls == OPC_UNARY && derivative_op(n->op) != OP_COUNT) {
      accumulate(G, a, new2(G, OP_MUL, dy, new1(G, derivative_op(n->op), a)));
      return 0;
    }
    break;
  }
  diag_error(G->c->diags, G->c->src, n->loc, "cannot differentiate %s: the backward graph has no rule for it",
             op_info[n->op].name);
  return -1;
}

static int by_offset(const void *p, const void *q) {
  const Node *a = *(Node *const *)p, *b = *(Node *const *)q;
  return (a->ival[0] > b->ival[0]) - (a->ival[0] < b->ival[0]);
}

/* dL/dx from the gradients of x's slices, in runs of slices that do not overlap (a chunk is
 * one run): each run is the slices' gradients in order, with zeros between them, joined
 * along the last dim; runs add up. */
static Node *slices_grad(Grad *G, Node *x, PtrVec *slices) {
  qsort(slices->items, (size_t)slices->len, sizeof(Node *), by_offset);
  int64_t width = x->shape.d[x->shape.rank - 1].size;
  int last = x->shape.rank - 1, i = 0;
  Node *sum = NULL;
  while (i < slices->len) {
    Node *parts[64];
    int nparts = 0;
    int64_t at = 0;
    for (; i < slices->len && nparts < 62; i++) {
      Node *s = slices->items[i];
      if (s->ival[0] < at)
        break; /* overlaps: the next run */
      if (s->ival[0] > at)
        parts[nparts++] = zeros_like(G, with_ival(G, OP_SLICE, &x, 1, at, s->ival[0] - at));
      parts[nparts++] = G->grad[s->id];
      at = s->ival[0] + s->ival[1];
    }
    if (at < width)
      parts[nparts++] = zeros_like(G, with_ival(G, OP_SLICE, &x, 1, at, width - at));
    Node *run = nparts == 1 ? parts[0] : with_ival(G, OP_CONCAT, parts, nparts, last, 0);
    sum = sum ? new2(G, OP_ADD, sum, run) : run;
  }
  return sum;
}

/* the new input dL/dy for output y */
static Node *seed(Grad *G, const Output *o) {
  Graph *g = G->c->g;
  const char *name = arena_printf(g->arena, "grad.%s", o->name);
  for (int i = 0; i < g->nodes.len; i++)
    if (GRAPH_NODE(g, i)->op == OP_INPUT && strcmp(GRAPH_NODE(g, i)->name, name) == 0) {
      diag_error(G->c->diags, G->c->src, GRAPH_NODE(g, i)->loc,
                 "input '%s' has the name of the gradient of output '%s' in the backward graph", name, o->name);
      return NULL;
    }
  return ir_input(g, name, o->node->shape, o->node->dtype, o->node->loc);
}

static int backward(Grad *G) {
  Graph *g = G->c->g;
  int nforward = g->nodes.len;
  for (int i = 0; i < nforward; i++) {
    Node *n = GRAPH_NODE(g, i);
    G->need[n->id] = n->op == OP_INPUT || n->op == OP_WEIGHT;
    for (int j = 0; j < n->nargs; j++)
      G->need[n->id] |= G->need[n->args[j]->id];
  }
  for (int i = 0; i < g->noutputs; i++) {
    Node *dy = seed(G, &g->outputs[i]);
    if (!dy)
      return -1;
    if (G->need[g->outputs[i].node->id])
      accumulate(G, g->outputs[i].node, dy);
  }
  for (int i = nforward - 1; i >= 0; i--) {
    Node *n = GRAPH_NODE(g, i);
    if (n->dead || !G->need[n->id])
      continue;
    if (G->slices[n->id].len)
      accumulate(G, n, slices_grad(G, n, &G->slices[n->id]));
    if (G->grad[n->id] && n->nargs && backprop(G, n, G->grad[n->id]) != 0)
      return -1;
  }
  g->noutputs = 0;
  for (int i = 0; i < nforward; i++) {
    Node *n = GRAPH_NODE(g, i);
    if (!n->dead && (n->op == OP_INPUT || n->op == OP_WEIGHT))
      graph_add_output(g, arena_printf(g->arena, "grad.%s", n->name), G->grad[n->id] ? G->grad[n->id] : zeros_like(G, n));
  }
  return 0;
}

/* ---- the keep policy ---- */

/* The weight a product's B operand is read from (through transposes and casts; for the
 * concatenated weights of FFN Fusion, the first one: *direct false), or NULL. */
static const Node *b_weight(const Node *b, bool *direct) {
  *direct = true;
  for (; b && b->op != OP_WEIGHT; b = b->nargs ? b->args[0] : NULL)
    *direct &= b->op == OP_TRANSPOSE || b->op == OP_CAST;
  return b;
}

/* saved.NAME for saved value n (a product, or a slice of one): the rule at the top */
static const char *saved_name(Graph *g, const Node *n, int ordinal, const char **taken, int ntaken) {
  const Node *mm = n->op == OP_SLICE ? n->args[0] : n;
  bool direct;
  const Node *w = b_weight(mm->args[1], &direct);
  char base[600];
  if (w) {
    size_t len = strlen(w->name);
    len -= len > 7 && strcmp(w->name + len - 7, ".weight") == 0 ? 7 : 0;
    snprintf(base, sizeof base, "saved.%s%.*s", direct ? "" : "fused.", (int)len, w->name);
  } else {
    snprintf(base, sizeof base, "saved.product%d", ordinal);
  }
  if (n->op == OP_SLICE && n->ival[0] % n->ival[1] == 0)
    snprintf(base + strlen(base), sizeof base - strlen(base), ".%lld", (long long)(n->ival[0] / n->ival[1]));
  else if (n->op == OP_SLICE)
    snprintf(base + strlen(base), sizeof base - strlen(base), ".at%lld", (long long)n->ival[0]);
  for (int k = 1;; k++) {
    const char *name = k == 1 ? arena_strdup(g->arena, base) : arena_printf(g->arena, "%s.%d", base, k);
    bool free_name = true;
    for (int i = 0; i < ntaken && free_name; i++)
      free_name = strcmp(taken[i], name) != 0;
    if (free_name)
      return name;
  }
}

/* Whether forward value n is saved when the backward reaches it: a product computed at run
 * time, or a slice of one that is read only through slices (sliced[id]: so read). */
static bool saveable(const Node *n, const bool *sliced) {
  if (ir_is_const(n))
    return false;
  if (n->op == OP_MATMUL)
    return true;
  return n->op == OP_SLICE && n->args[0]->op == OP_MATMUL && !ir_is_const(n->args[0]) && sliced[n->args[0]->id];
}

/* The forward values the backward graph saves, in forward order: walked from the gradient
 * outputs, saved values are leaves (what they are computed from is not needed for them). */
static int keep_walk(Graph *g, int first_grad_id, const bool *sliced, Node **saved) {
  bool *seen = ffn_xcalloc((size_t)g->next_id + 1, sizeof(bool)), *keep = ffn_xcalloc((size_t)g->next_id + 1, 1);
  size_t edges = (size_t)g->noutputs + 1;
  for (int i = 0; i < g->nodes.len; i++)
    edges += (size_t)GRAPH_NODE(g, i)->nargs;
  Node **stack = ffn_xmalloc(sizeof(Node *) * edges);
  int sp = 0, n = 0;
  for (int i = 0; i < g->noutputs; i++)
    stack[sp++] = g->outputs[i].node;
  while (sp) {
    Node *v = stack[--sp];
    if (seen[v->id])
      continue;
    seen[v->id] = true;
    if (v->id < first_grad_id && saveable(v, sliced)) {
      keep[v->id] = true;
      continue;
    }
    for (int j = 0; j < v->nargs; j++)
      if (!seen[v->args[j]->id])
        stack[sp++] = v->args[j];
  }
  for (int i = 0; i < g->nodes.len; i++)
    if (keep[GRAPH_NODE(g, i)->id])
      saved[n++] = GRAPH_NODE(g, i);
  free(seen);
  free(keep);
  free(stack);
  return n;
}

/* GRAD_FORWARD: the program's outputs again, then the saved values; the gradient nodes go. */
static void keep_forward(Graph *g, int first_grad_id, const Output *outs, int nouts, Node **saved,
                         const char **names, int nsaved) {
  g->noutputs = 0;
  for (int i = 0; i < nouts; i++)
    graph_add_output(g, outs[i].name, outs[i].node);
  for (int i = 0; i < nsaved; i++)
    graph_add_output(g, names[i], saved[i]);
  for (int i = 0; i < g->nodes.len; i++)
    GRAPH_NODE(g, i)->dead |= GRAPH_NODE(g, i)->id >= first_grad_id; /* the grad.OUT inputs too */
}

/* GRAD_KEEP: each saved value becomes the input saved.NAME, in its place (and with its id, so
 * the order stays topological); what only the saved values needed goes (ir_compact). */
static void keep_backward(Graph *g, Node **saved, const char **names, int nsaved) {
  Node **inputs = ffn_xmalloc(sizeof(Node *) * (size_t)(nsaved + 1));
  for (int i = 0; i < nsaved; i++) {
    inputs[i] = ir_input(g, names[i], saved[i]->shape, saved[i]->dtype, saved[i]->loc);
    inputs[i]->var = saved[i]->var;
  }
  ir_replace_uses_batch(g, saved, inputs, nsaved);
  g->nodes.len -= nsaved; /* the inputs, appended above, move to the places of the values */
  for (int i = 0, k = 0; i < g->nodes.len && k < nsaved; i++)
    if (GRAPH_NODE(g, i) == saved[k]) {
      g->nodes.items[i] = inputs[k];
      inputs[k]->id = saved[k]->id;
      saved[k++]->dead = true;
    }
  free(inputs);
}

/* Forward values read only through slices (chunks), by id. */
static bool *sliced_only(const Graph *g) {
  bool *sliced = ffn_xcalloc((size_t)g->next_id + 1, sizeof(bool)), *other = ffn_xcalloc((size_t)g->next_id + 1, 1);
  for (int i = 0; i < g->nodes.len; i++) {
    Node *n = GRAPH_NODE(g, i);
    for (int j = 0; j < n->nargs; j++)
      (n->op == OP_SLICE ? sliced : other)[n->args[j]->id] = true;
  }
  for (int i = 0; i < g->noutputs; i++)
    other[g->outputs[i].node->id] = true;
  for (int i = 0; i <= g->next_id; i++)
    sliced[i] &= !other[i];
  free(other);
  return sliced;
}

static int keep_policy(Compile *c, GradGraph which, int first_grad_id, const bool *sliced, const Output *outs,
                       int nouts) {
  Graph *g = c->g;
  Node **saved = ffn_xmalloc(sizeof(Node *) * (size_t)(g->nodes.len + 1));
  int nsaved = keep_walk(g, first_grad_id, sliced, saved);
  const char **names = ffn_xmalloc(sizeof(char *) * (size_t)(nsaved + 1));
  for (int i = 0; i < nsaved; i++)
    names[i] = saved_name(g, saved[i], i, names, i);
  if (which == GRAD_FORWARD)
    keep_forward(g, first_grad_id, outs, nouts, saved, names, nsaved);
  else
    keep_backward(g, saved, names, nsaved);
  free(saved);
  free(names);
  return 0;
}

int pass_grad(Compile *c, GradGraph which) {
  Graph *g = c->g;
  /* the gradient nodes get ids from next_id on; the arrays cover them too (seed inputs) */
  int first_grad_id = g->next_id;
  size_t ids = (size_t)g->next_id + (size_t)g->noutputs + 1;
  Grad G = {c, ffn_xcalloc(ids, sizeof(Node *)), ffn_xcalloc(ids, sizeof(bool)), ffn_xcalloc(ids, sizeof(PtrVec))};
  bool *sliced = which == GRAD_RECOMPUTE ? NULL : sliced_only(g);
  int nouts = g->noutputs;
  Output *outs = ffn_xmalloc(sizeof(Output) * (size_t)(nouts + 1));
  memcpy(outs, g->outputs, sizeof(Output) * (size_t)nouts);
  int rc = backward(&G);
  if (rc == 0 && which != GRAD_RECOMPUTE)
    rc = keep_policy(c, which, first_grad_id, sliced, outs, nouts);
  free(G.grad);
  free(G.need);
  free(G.slices);
  free(sliced);
  free(outs);
  if (rc == 0)
    ir_compact(g);
  g->backward = rc == 0 && which != GRAD_FORWARD;
  return rc;
}
