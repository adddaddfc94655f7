/* fuse.c: kernel groups.
 *
 * Walks the graph in order and puts every run-time node into a group, one kernel each:
 *   - each matrix product starts a GEMM group. If the product is read only through its
 *     two column halves (the gate/up form), the group has two streams and its weight rows
 *     are interleaved at load time so one thread holds the gate and up values of an element;
 *   - an elementwise op joins the group of one of its operands (the newest that allows it):
 *     a GEMM group takes it into its epilogue, a rowwise group into its per-row loop. Its
 *     other operands must be readable there: in the group, scalars, per-column vectors,
 *     per-row values, whole tensors of the group's shape already in memory (a residual), or,
 *     for a GEMM, statistics of the rows of its own A operand. A GEMM's epilogue reads at most
 *     one tensor of its shape from memory (a residual): where it would read two, it reads none,
 *     and what reads them goes to a rowwise kernel that reads the product's output instead;
 *   - anything else joins the newest rowwise group of its shape (independent elementwise ops
 *     over the same rows share one kernel) or starts one (norms, elementwise chains, slices
 *     and concatenations along the last dim of tensors in memory). A rowwise kernel makes one
 *     pass over the row per statistic, in order, so a statistic may read earlier ones (the
 *     RMSNorm backward: the mean of dxhat * xhat, where xhat = x * rstd);
 *   - the sums over tokens of backward graphs (matmul_at, sum_to) and transposes computed at
 *     run time are a kernel each (GK_SINGLE), reading their operands from memory.
 * Statistics, and values computed only from statistics and constants (the mean * colsum
 * term of a folded layernorm), are "floating": they have no producer to join, so they are
 * placed by their first user, into the user's kernel when it can compute them there. So are
 * elementwise values of run-time inputs (above -O0), each reader getting a copy of its own.
 * Groups run in creation order and only ever read values of earlier groups, so the order is
 * a valid schedule. A member is written to memory only if a later group or an output reads it.
 */
#include "passes.h"

#include "../kernels/abi.cuh" /* FFN_GATEUP_GROUP */

#include <stdlib.h>
#include <string.h>

typedef enum { BC_NONE, BC_FULL, BC_ROW, BC_COL, BC_SCALAR } Bcast;

/* How a value of shape s is read by a kernel whose elements have shape full. */
static Bcast classify(const Shape *s, const Shape *full) {
  if (shape_eq(s, full))
    return BC_FULL;
  if (shape_is_static(s) && shape_static_numel(s) == 1)
    return BC_SCALAR;
  if (full->rank == 0 || s->rank > full->rank)
    return BC_NONE;
  Dim last = full->d[full->rank - 1];
  /* per column: [N], [1, N], ... */
  bool col = s->rank >= 1 && dim_eq(s->d[s->rank - 1], last);
  for (int i = 0; col && i < s->rank - 1; i++)
    col = s->d[i].sym < 0 && s->d[i].size == 1;
  if (col)
    return BC_COL;
  /* per row: the leading dims of full, then 1 */
  bool row = s->rank == full->rank && s->d[s->rank - 1].sym < 0 && s->d[s->rank - 1].size == 1;
  for (int i = 0; row && i < s->rank - 1; i++)
    row = dim_eq(s->d[i], full->d[i]);
  return row ? BC_ROW : BC_NONE;
}

static bool is_stat(Op op) { return op == OP_RMS_RSTD || op == OP_LN_MEAN || op == OP_LN_RSTD; }
static bool is_norm(Op op) { return op == OP_RMSNORM || op == OP_LAYERNORM; }

typedef struct {
  Compile *c;
  Users users;
  Group **groups;
  int ngroups, cap;
  /* by node id of a matrix product: 1 if its epilogue reads no full-shape operand (epilogue_fits) */
  unsigned char *plain;
  bool regroup; /* a product became plain: the grouping is done again (pass_fuse) */
} Fuser;

static Group *new_group(Fuser *f, GroupKind kind, Shape shape) {
  if (f->ngroups == f->cap) {
    f->cap = f->cap ? f->cap * 2 : 16;
    f->groups = ffn_xrealloc(f->groups, sizeof(Group *) * (size_t)f->cap);
  }
  Group *g = arena_alloc(f->c->g->arena, sizeof *g);
  g->kind = kind;
  g->id = f->ngroups;
  g->shape = shape;
  f->groups[f->ngroups++] = g;
  return g;
}

static void add(Fuser *f, Group *g, Node *n) {
  n->group = g->id;
  ptrvec_push(f->c->g->arena, &g->nodes, n);
}

static Shape row_shape(const Shape *s) {
  Shape r = *s;
  if (r.rank)
    r.d[r.rank - 1] = dim_static(1);
  return r;
}

static bool can_join(Fuser *f, Group *g, Node *n);

/* Whether a row statistic or a norm reads n: a value of inputs read so stays stored by one kernel
 * (a statistic of a value computed in its reader's kernel is not something the generator makes). */
static bool read_by_stat(const Users *us, const Node *n) {
  if (n->id >= us->n)
    return false;
  const PtrVec *u = &us->by_id[n->id];
  for (int j = 0; j < u->len; j++) {
    const Node *r = u->items[j];
    if (is_stat(r->op) || is_norm(r->op))
      return true;
  }
  return false;
}

/* Whether operand a of elementwise o is a value every kernel can read from memory for o: a
 * run-time input, or, in the training forward (weights_as_stored: no gate/up merge) and for a
 * function of one value, an output of the program (its kernel stores it anyway: the saved gate,
 * whose silu is then computed by the up product's epilogue that reads it, not stored by the
 * gate's). */
static bool in_memory(const Fuser *f, const Node *o, const Node *a) {
  if (a->op == OP_INPUT)
    return true;
  if (!f->c->weights_as_stored)
    return false;
  int values = 0;
  for (int i = 0; i < o->nargs; i++)
    values += !ir_is_const(o->args[i]);
  if (values != 1 || ir_is_const(a) || a->id >= f->users.n || !f->users.is_output[a->id] || o->id >= f->users.n)
    return false;
  /* ... and only where every reader of o also reads a value made after it (the up product),
   * whose kernel can take o along; else o stays with a's kernel (GELU in the up's epilogue) */
  const PtrVec *rs = &f->users.by_id[o->id];
  for (int j = 0; j < rs->len; j++) {
    const Node *r = rs->items[j];
    bool later = false;
    for (int i = 0; i < r->nargs; i++)
      later |= r->args[i] != o && !ir_is_const(r->args[i]) && r->args[i]->id > o->id;
    if (!later)
      return false;
  }
  return rs->len > 0;
}

/* How many run-time inputs an elementwise value reads through the elementwise values no kernel
 * has taken (each counted as often as it is read). A value of inputs floats only up to
 * MAX_FLOATING_INPUTS of them: the SwiGLU derivative reads gate and up; a residual stream of saved
 * products (x + d0 + b0 + d1 + ...) would otherwise be recomputed whole by every reader. */
enum { MAX_FLOATING_INPUTS = 2 };
static int input_reads(const Fuser *f, const Node *o) {
  int n = 0;
  for (int i = 0; i < o->nargs && n <= MAX_FLOATING_INPUTS; i++) {
    const Node *a = o->args[i];
    if (in_memory(f, o, a))
      n++;
    else if (a->group < 0 && !ir_is_const(a) && is_elementwise(a))
      n += input_reads(f, a);
  }
  return n;
}

/* Floating: a statistic, or an elementwise value whose operands are all floating, constant,
 * scalar or (above -O0) run-time inputs, that no group has taken yet (see the comment at the
 * top). A value of inputs alone is then computed by the kernel that reads it, from the inputs
 * rather than from a stored copy (the keep backward's silu'(gate) in the dgrad epilogue). */
static bool floating(const Fuser *f, const Node *o) {
  if (o->group >= 0 || ir_is_const(o))
    return false;
  if (is_stat(o->op))
    return true;
  if (!is_elementwise(o))
    return false;
  bool inputs = f->c->opt_level > 0 && !read_by_stat(&f->users, o) && input_reads(f, o) <= MAX_FLOATING_INPUTS;
  for (int i = 0; i < o->nargs; i++)
    if (!ir_is_const(o->args[i]) && !(in_memory(f, o, o->args[i]) && inputs) && !floating(f, o->args[i]))
      return false;
  return true;
}

/* An elementwise value of run-time inputs (and constants) alone: cheap to compute again. */
static bool of_inputs(const Node *n) {
  if (!is_elementwise(n))
    return false;
  bool any = false;
  for (int i = 0; i < n->nargs; i++) {
    if (n->args[i]->op == OP_INPUT)
      any = true;
    else if (!ir_is_const(n->args[i]))
      return false;
  }
  return any;
}

/* Each reader of a value of inputs alone after the first gets a copy of its own, so that every
 * kernel that reads it computes it from the inputs (floating, above) instead of one kernel
 * storing it for the others (the keep backward of SwiGLU: silu(gate), read by the rowwise
 * kernel of silu(gate) * up and by the dgrad epilogue, which already reads gate; 2 bytes an
 * element loaded instead of 2 stored and loaded). The copies are appended, then put in order. */
static int copy_input_values(Compile *c) {
  Graph *gr = c->g;
  Users us = users_build(gr);
  int len = gr->nodes.len, copies = 0;
  for (int i = 0; i < len; i++) {
    Node *a = GRAPH_NODE(gr, i);
    if (a->dead || a->id >= us.n || !of_inputs(a) || read_by_stat(&us, a))
      continue;
    PtrVec *u = &us.by_id[a->id];
    for (int j = us.is_output[a->id] ? 0 : 1; j < u->len; j++) {
      Node *user = u->items[j], *copy = pass_new(c, a->op, a->dtype, a->args, a->nargs, a);
      for (int k = 0; k < user->nargs; k++)
        if (user->args[k] == a)
          user->args[k] = copy;
      copies++;
    }
  }
  users_free(&us);
  return copies && ir_toposort(gr) != 0 ? -1 : 0;
}

/* Pending: a value no kernel computes yet that the kernel reading it must compute: floating,
 * or once floating and left behind when a group was made for one of its operands
 * (place_floating_operands: `mul(ln_mean(x), c)` read by a wider row; the mean gets a kernel,
 * the product is no longer floating, and it must come along with its reader, not be left for a
 * later kernel). */
static bool pending(const Node *o) {
  return o->group < 0 && !ir_is_const(o) && o->op != OP_SCALAR && (is_stat(o->op) || is_elementwise(o));
}

/* Can operand o of a node joining g be read by g's kernel? */
static bool readable(Fuser *f, Group *g, Node *o) {
  if (o->group == g->id)
    return true;
  if (o->op == OP_SCALAR)
    return true;
  if (pending(o))
    return can_join(f, g, o);
  if (!ir_is_const(o) && o->group > g->id)
    return false; /* produced by a later kernel */
  Bcast bc = classify(&o->shape, &g->shape);
  return bc != BC_NONE;
}

/* A concatenation along the last dim that a rowwise kernel of g can read: its operands are in
 * memory (earlier kernels' results, constants). */
static bool concat_readable(const Fuser *f, const Group *g, const Node *n) {
  if (n->ival[0] != n->shape.rank - 1 || !shape_eq(&n->shape, &g->shape))
    return false;
  for (int i = 0; i < n->nargs; i++) {
    const Node *o = n->args[i];
    if (o->op == OP_SCALAR || floating(f, o) || (!ir_is_const(o) && (o->group == g->id || o->group > g->id)))
      return false;
  }
  return true;
}

static bool can_join(Fuser *f, Group *g, Node *n) {
  Shape rs = row_shape(&g->shape);
  bool stat = is_stat(n->op), norm = is_norm(n->op);
  if (g->kind == GK_ALLREDUCE || g->kind == GK_SINGLE)
    return false;
  if (n->op == OP_SLICE) {
    /* a rowwise kernel reads a slice of a tensor in memory at a column offset */
    Node *o = n->args[0];
    return g->kind == GK_ROWWISE && shape_eq(&n->shape, &g->shape) && !ir_is_const(o) && !floating(f, o) &&
           o->group != g->id && o->group <= g->id;
  }
  if (n->op == OP_CONCAT) /* the same, each operand at its column offset */
    return g->kind == GK_ROWWISE && concat_readable(f, g, n);
  if (!is_elementwise(n) && !stat && !norm)
    return false;
  if (stat || norm) {
    Node *x = n->args[0];
    if (g->kind == GK_GEMM) {
      /* statistics of the rows the GEMM reads as A; norms need whole output rows, which a
       * GEMM tile does not have */
      return stat && x == g->a;
    }
    /* (a statistic of a value that reads earlier statistics of the row is one more pass) */
    if (!shape_eq(&x->shape, &g->shape))
      return false;
  } else if (!shape_eq(&n->shape, &g->shape) && !shape_eq(&n->shape, &rs)) {
    return false;
  }
  for (int i = 0; i < n->nargs; i++)
    if (!readable(f, g, n->args[i]))
      return false;
  return true;
}

static void join(Fuser *f, Group *g, Node *n) {
  for (int i = 0; i < n->nargs; i++) /* pending values it reads come along */
    if (pending(n->args[i]))
      join(f, g, n->args[i]);
  add(f, g, n);
  if (g->kind == GK_GEMM && is_stat(n->op)) {
    int need = n->op == OP_RMS_RSTD ? 1 : 2;
    if (g->stats < need)
      g->stats = need;
  }
}

/* The product is read only through exactly its two column halves: two streams. */
static bool two_streams(Fuser *f, Node *mm, Node **halves) {
  PtrVec *us = &f->users.by_id[mm->id];
  Dim last = mm->shape.d[mm->shape.rank - 1];
  if (f->users.is_output[mm->id] || us->len != 2 || last.sym >= 0 || last.size % (2 * FFN_GATEUP_GROUP))
    return false;
  Node *a = us->items[0], *b = us->items[1];
  if (a->op != OP_SLICE || b->op != OP_SLICE)
    return false;
  if (a->ival[0] > b->ival[0]) {
    Node *t = a;
    a = b;
    b = t;
  }
  int64_t half = last.size / 2;
  if (a->ival[0] != 0 || a->ival[1] != half || b->ival[0] != half || b->ival[1] != half)
    return false;
  halves[0] = a;
  halves[1] = b;
  return true;
}

static int unsupported(Compile *c, Node *n, const char *what) {
  diag_error(c->diags, c->src, n->loc, "%s is not supported by the GPU code generator yet", what);
  return -1;
}

/* A backward product reads a 16-bit weight with f32 gradients as A: B, a constant, is widened to
 * f32 once at load time (exact), so the product runs in f32 like A. Not for fp8 products, which
 * quantize B from its values (or use a checkpoint's stored codes) whatever its type. */
static Node *widened_b(Compile *c, Group *g) {
  DType mm = c->g->prec.type[PREC_MATMUL];
  if (g->a->dtype != DT_F32 || g->b_nk->dtype == DT_F32 || !dtype_is_float(g->b_nk->dtype) || mm == DT_F8E4M3 ||
      mm == DT_F8E5M2)
    return g->b_nk;
  return pass_new(c, OP_CAST, DT_F32, &g->b_nk, 1, NULL);
}

/* The [K, N] weight B of a product that would otherwise read it through a load-time transpose (a
 * backward graph's input gradient dX = dY W reads W [N_fwd, K_fwd] so), where the sm_90 persistent
 * GEMM reads it as it lies (kernels/gemm_sm90p.cuh, B_KN): 16-bit A and B of one type, one stream,
 * rows of 16-byte multiples (TMA: N % 8 == 0; the tensor-core path: K % 8 == 0), no fp8 or
 * weight-only quantization, no tensor parallelism, in backward graphs only (forward programs keep
 * their kernels); else NULL, and b_nk as before. No transposed copy
 * is made or kept (kernels/NOTES.md, "dgrad reading the weights as they lie"). */
static Node *weight_as_it_lies(Compile *c, Node *mm, bool two) {
  Node *b = mm->args[1];
  const Precision *pr = &c->g->prec;
  DType t = b->dtype, mmt = pr->type[PREC_MATMUL];
  if (!c->g->backward || c->arch != 90 || c->opt_level == 0 || two || c->tp > 1 || !ir_is_const(b) || b->op == OP_TRANSPOSE ||
      b->shape.rank != 2 || (t != DT_BF16 && t != DT_F16) || mm->args[0]->dtype != t || (mmt != DT_NONE && mmt != t) ||
      pr->type[PREC_WEIGHTS] != DT_NONE)
    return NULL;
  const Dim *k = &b->shape.d[0], *n = &b->shape.d[1];
  if (k->sym >= 0 || n->sym >= 0 || k->size % 8 != 0 || n->size % 8 != 0)
    return NULL;
  return b;
}

static int gemm_group(Fuser *f, Node *mm) {
  Compile *c = f->c;
  if (!ir_is_const(mm->args[1]))
    return unsupported(c, mm, "a matrix product whose right operand is computed at run time");
  Node *halves[2];
  bool two = c->opt_level > 0 && two_streams(f, mm, halves);
  Group *g = new_group(f, GK_GEMM, two ? halves[0]->shape : mm->shape);
  g->mm = mm;
  g->a = mm->args[0];
  g->streams = two ? 2 : 1;
  if ((g->b_kn = weight_as_it_lies(c, mm, two))) {
    add(f, g, mm);
    g->stream[0] = mm;
    return 0;
  }
  add(f, g, mm);
  if (two) {
    for (int s = 0; s < 2; s++) {
      add(f, g, halves[s]);
      g->stream[s] = halves[s];
    }
  } else {
    g->stream[0] = mm;
  }
  return 0;
}

/* The weight operands of the GEMM groups, made once the groups are final (the grouping may be
 * done again: pass_fuse), in group order: [N, K], widened, interleaved for two streams. */
static void gemm_weights(Fuser *f) {
  Compile *c = f->c;
  for (int i = 0; i < f->ngroups; i++) {
    Group *g = f->groups[i];
    if (g->kind != GK_GEMM || g->b_kn)
      continue;
    g->b_nk = matmul_b_nk(c, g->mm);
    g->b_nk = widened_b(c, g);
    if (g->streams == 2) {
      Node proto = {.ival = {FFN_GATEUP_GROUP, 2}};
      g->b_nk = pass_new(c, OP_INTERLEAVE, g->b_nk->dtype, &g->b_nk, 1, &proto);
    }
  }
}

static void find_stores(Fuser *f) {
  Graph *gr = f->c->g;
  for (int i = 0; i < gr->nodes.len; i++) {
    Node *n = GRAPH_NODE(gr, i);
    if (n->group < 0 || n->dead || n->id >= f->users.n)
      continue;
    Group *g = f->groups[n->group];
    if (g->kind == GK_GEMM && g->streams == 2 && n == g->mm)
      continue; /* read only through its halves, in this kernel */
    bool store = f->users.is_output[n->id];
    PtrVec *us = &f->users.by_id[n->id];
    for (int j = 0; j < us->len && !store; j++)
      store = ((Node *)us->items[j])->group != n->group;
    if (store)
      ptrvec_push(gr->arena, &g->stores, n);
  }
}

static int rowwise_group(Fuser *f, Node *n);

static bool is_single(Op op) { return op == OP_MATMUL_AT || op == OP_SUM_TO || op == OP_TRANSPOSE; }

static Group *best_group(Fuser *f, Node *n);

/* A kernel of its own for n. Operands that no kernel computes yet (pending) are computed first,
 * by a kernel that takes them as it would any node (the keep backward's silu(gate) * up beside
 * the SwiGLU derivative from the same saved tensors) or by one of their own. */
static int single_group(Fuser *f, Node *n) {
  for (int i = 0; i < n->nargs; i++) {
    Node *o = n->args[i];
    Group *g = pending(o) && f->c->opt_level > 0 ? best_group(f, o) : NULL;
    if (g)
      join(f, g, o);
    else if (pending(o) && rowwise_group(f, o) != 0)
      return -1;
  }
  add(f, new_group(f, GK_SINGLE, n->shape), n);
  return 0;
}

/* Before a group of element shape `shape` is created for n: pending operands that such a
 * group could not compute get kernels of their own first (so they run before it). */
static int place_floating_operands(Fuser *f, Node *n, const Shape *shape) {
  Shape rs = row_shape(shape);
  for (int i = 0; i < n->nargs; i++) {
    Node *o = n->args[i];
    if (!pending(o))
      continue;
    const Shape *os = is_stat(o->op) ? &o->args[0]->shape : &o->shape;
    bool fits = shape_eq(os, shape) || (!is_stat(o->op) && shape_eq(os, &rs));
    int rc = fits ? place_floating_operands(f, o, shape) : rowwise_group(f, o);
    if (rc != 0)
      return rc;
  }
  return 0;
}

/* A new rowwise group for n. */
static int rowwise_group(Fuser *f, Node *n) {
  Compile *c = f->c;
  Shape shape = is_stat(n->op) || is_norm(n->op) ? n->args[0]->shape : n->shape;
  if (!is_elementwise(n) && !is_stat(n->op) && !is_norm(n->op) && n->op != OP_SLICE && n->op != OP_CONCAT) {
    char what[96];
    snprintf(what, sizeof what, "computing %s at run time", op_info[n->op].name);
    return unsupported(c, n, what);
  }
  if (n->op == OP_CONCAT && n->ival[0] != n->shape.rank - 1)
    return unsupported(c, n, "a concatenation computed at run time along another dim than the last");
  if (shape.rank == 0)
    return unsupported(c, n, "a run-time value of rank 0");
  if (place_floating_operands(f, n, &shape) != 0)
    return -1;
  Group *g = new_group(f, GK_ROWWISE, shape);
  if (n->op == OP_SLICE) {
    add(f, g, n); /* reads its operand (in memory) at a column offset */
    return 0;
  }
  if (n->op == OP_CONCAT && concat_readable(f, g, n)) {
    add(f, g, n); /* reads each operand (in memory) at its column offset */
    return 0;
  }
  if (!can_join(f, g, n))
    return unsupported(c, n, "this broadcasting pattern");
  join(f, g, n);
  return 0;
}

/* Whether g's member m (or n, about to join) may be written to memory: it has a user outside g,
 * as far as is known while the groups are being made, or is an output. */
static bool may_store(Fuser *f, const Group *g, const Node *m) {
  PtrVec *us = &f->users.by_id[m->id];
  bool out = f->users.is_output[m->id];
  for (int j = 0; j < us->len && !out; j++)
    out = ((Node *)us->items[j])->group != g->id;
  return out;
}

/* Counts what member m of g (or n, or a pending value joining with n: join() brings them along)
 * costs g's kernel: the values it reads from memory, into seen, and whether it may be stored. */
static void note_member(Fuser *f, const Group *g, const Node *n, const Node *m, const Node **seen, int *nseen,
                        int *nstores) {
  *nstores += may_store(f, g, m);
  for (int j = 0; j < m->nargs && *nseen + *nstores <= FFN_KARGS_SLOTS; j++) {
    const Node *a = m->args[j];
    if (a->group == g->id || a->op == OP_SCALAR || a == n)
      continue;
    if (pending(a)) {
      note_member(f, g, n, a, seen, nseen, nstores);
      continue;
    }
    bool known = false;
    for (int q = 0; q < *nseen && !known; q++)
      known = seen[q] == a;
    if (!known)
      seen[(*nseen)++] = a;
  }
}

/* Whether rowwise group g, with n joined, stays within a kernel's FFN_KARGS_SLOTS tensors: the
 * distinct values it reads from memory and the members it may store. Independent work (the
 * keep policy's backward graph: each layer's silu(gate) * up from saved tensors) would otherwise
 * pile up in one kernel. */
static bool fits_slots(Fuser *f, Group *g, Node *n) {
  const Node *seen[FFN_KARGS_SLOTS + 2];
  int nseen = 0, nstores = 0;
  for (int i = 0; i <= g->nodes.len && nseen + nstores <= FFN_KARGS_SLOTS; i++)
    note_member(f, g, n, i < g->nodes.len ? g->nodes.items[i] : n, seen, &nseen, &nstores);
  return nseen + nstores <= FFN_KARGS_SLOTS;
}

/* Adds to seen the full-shape values (g's shape, [rows, N]) that member m of GEMM group g (or n, or
 * a pending value joining with it) reads from memory, up to two. Row and column vectors do not
 * count, nor statistics: they read the rows of A in the main loop. */
static void full_reads(const Group *g, const Node *m, const Node **seen, int *nseen) {
  if (m->op == OP_MATMUL || is_stat(m->op))
    return;
  for (int j = 0; j < m->nargs && *nseen < 2; j++) {
    const Node *a = m->args[j];
    if (a->group == g->id || a->op == OP_SCALAR)
      continue;
    if (pending(a)) {
      full_reads(g, a, seen, nseen);
      continue;
    }
    if (shape_eq(&a->shape, &g->shape) && !(*nseen == 1 && seen[0] == a))
      seen[(*nseen)++] = a;
  }
}

/* Whether GEMM group g's epilogue, with n joined, reads at most one full-shape operand from memory
 * (the forward's residual), none once its product is plain. Each such operand costs the epilogue a
 * DRAM latency per column group that the main loop does not hide: the keep backward's dgrad of the
 * down product with the SwiGLU derivative (dh * u * silu'(g), dh * silu(g): reads u and g) took 321
 * us at 1024 tokens where the plain product takes ~195 (kernels/NOTES.md). */
static bool epilogue_fits(const Fuser *f, const Group *g, const Node *n) {
  const Node *seen[2];
  int nseen = 0;
  for (int i = 0; i <= g->nodes.len && nseen < 2; i++)
    full_reads(g, i < g->nodes.len ? g->nodes.items[i] : n, seen, &nseen);
  return nseen <= (f->plain[g->mm->id] ? 0 : 1);
}

/* The newest group that takes n: one of its operands' or, for independent work over the same
 * rows, the newest rowwise group (kept to a modest size, and within a kernel's tensors). When the
 * group it would have been is a GEMM whose epilogue would read a second full-shape operand, the
 * product becomes plain and the grouping is done again: the work that reads those operands goes
 * to a rowwise kernel, which reads the product's output, rather than one operand in the epilogue
 * and the rest, with a second stored value, in the rowwise kernel. */
static Group *best_group(Fuser *f, Node *n) {
  Group *best = NULL, *refused = NULL;
  for (int j = 0; j < n->nargs; j++) {
    int gid = n->args[j]->group;
    if (gid < 0 || (best && gid <= best->id) || !can_join(f, f->groups[gid], n))
      continue;
    Group *g = f->groups[gid];
    if (g->kind == GK_ROWWISE && !fits_slots(f, g, n))
      continue;
    if (g->kind == GK_GEMM && !epilogue_fits(f, g, n)) {
      refused = !refused || gid > refused->id ? g : refused;
      continue;
    }
    best = g;
  }
  if (refused && (!best || refused->id > best->id) && !f->plain[refused->mm->id])
    f->plain[refused->mm->id] = f->regroup = true;
  if (best)
    return best;
  for (int k = f->ngroups - 1; k >= 0; k--) {
    Group *g = f->groups[k];
    if (g->kind != GK_ROWWISE)
      continue;
    return g->nodes.len < 64 && can_join(f, g, n) && fits_slots(f, g, n) ? g : NULL;
  }
  return NULL;
}

/* Whether elementwise n, a function of one value o of a GEMM's epilogue (and constants), is left
 * to its readers instead (pass 0 of make_groups skips it; the first reader's kernel computes it,
 * as it would a floating value): where no reader can join that epilogue, all of them are
 * elementwise (so their kernels can compute n: not a product's operand, not a statistic's), and
 * reading o costs no more than reading n (o is stored for another reader anyway, or is no wider).
 * The epilogue then stores o alone, not o and n: the RMSNorm backward's dxn * g, read only by the
 * norm's rowwise kernel, is no longer an f32 [T, D] buffer beside dxn. */
static bool defer_to_readers(Fuser *f, Node *n) {
  if (f->c->opt_level == 0 || !is_elementwise(n) || n->id >= f->users.n || f->users.is_output[n->id])
    return false;
  Node *o = NULL;
  for (int i = 0; i < n->nargs; i++)
    if (!ir_is_const(n->args[i]) && n->args[i]->op != OP_SCALAR) {
      if (o)
        return false;
      o = n->args[i];
    }
  if (!o || o->group < 0 || f->groups[o->group]->kind != GK_GEMM || o->id >= f->users.n ||
      !shape_eq(&o->shape, &n->shape))
    return false;
  Group *g = f->groups[o->group];
  if (!can_join(f, g, n) ||
      (f->users.by_id[o->id].len < 2 && !f->users.is_output[o->id] && dtype_bytes(o->dtype, 1) > dtype_bytes(n->dtype, 1)))
    return false;
  const PtrVec *rs = &f->users.by_id[n->id];
  for (int j = 0; j < rs->len; j++) {
    Node *r = rs->items[j];
    if (!is_elementwise(r) || can_join(f, g, r))
      return false;
  }
  return rs->len > 0;
}

/* Puts the first len nodes of the graph into groups; stops early when a product becomes plain. */
static int make_groups(Fuser *f, int len) {
  Compile *c = f->c;
  Graph *gr = c->g;
  int rc = 0;
  for (int pass = 0; pass < 2 && rc == 0 && !f->regroup; pass++) {
    /* pass 0 places everything but floating values; pass 1 the floating values no user took */
    for (int i = 0; i < len && rc == 0 && !f->regroup; i++) {
      Node *n = GRAPH_NODE(gr, i);
      if (n->dead || ir_is_const(n) || op_info[n->op].cls == OPC_LEAF || n->group >= 0)
        continue;
      if (pass == 0 && (floating(f, n) || defer_to_readers(f, n)))
        continue;
      if (n->op == OP_ALLREDUCE) { /* a collective between kernels, never inside one */
        rc = pending(n->args[0]) ? rowwise_group(f, n->args[0]) : 0;
        if (rc == 0)
          add(f, new_group(f, GK_ALLREDUCE, n->shape), n);
        continue;
      }
      if (is_single(n->op)) {
        rc = single_group(f, n);
        continue;
      }
      if (n->op == OP_MATMUL) {
        rc = pending(n->args[0]) ? rowwise_group(f, n->args[0]) : 0;
        if (rc == 0)
          rc = gemm_group(f, n);
        continue;
      }
      Group *best = c->opt_level > 0 ? best_group(f, n) : NULL;
      if (best)
        join(f, best, n);
      else
        rc = rowwise_group(f, n);
    }
  }
  return rc;
}

/* Forgets the groups of the first len nodes, to make them again. */
static void clear_groups(Fuser *f, int len) {
  for (int i = 0; i < len; i++)
    GRAPH_NODE(f->c->g, i)->group = -1;
  f->ngroups = 0;
  f->regroup = false;
}

int pass_fuse(Compile *c) {
  Graph *gr = c->g;
  if (c->opt_level > 0 && copy_input_values(c) != 0)
    return -1;
  size_t ids = (size_t)gr->next_id + 1;
  Fuser f = {c, users_build(gr), NULL, 0, 0, ffn_xcalloc(ids, 1), false};
  int len = gr->nodes.len; /* the weight nodes gemm_weights appends are constants: no group */
  int rc = make_groups(&f, len);
  while (rc == 0 && f.regroup) { /* each round makes one more product plain */
    clear_groups(&f, len);
    rc = make_groups(&f, len);
  }
  if (rc == 0) {
    gemm_weights(&f);
    find_stores(&f);
    c->groups = arena_alloc(gr->arena, sizeof(Group *) * (size_t)(f.ngroups + 1));
    if (f.ngroups)
      memcpy(c->groups, f.groups, sizeof(Group *) * (size_t)f.ngroups);
    c->ngroups = f.ngroups;
  }
  free(f.groups);
  free(f.plain);
  users_free(&f.users);
  return rc;
}
