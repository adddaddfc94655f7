/* ir.c: graph construction, the shape rules, the text form and the verifier. */
#include "ir.h"

#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "kernels/quant.cuh"

const OpInfo op_info[OP_COUNT] = {
#define OP(e, name, mn, mx, cls) [OP_##e] = {name, mn, mx, OPC_##cls},
#include "ops.def"
#undef OP
};

const char *const prec_class_names[PREC_COUNT] = {"default", "accumulate", "norm", "matmul", "weights"};

Op op_from_name(const char *name) {
  for (int i = 0; i < OP_COUNT; i++)
    if (strcmp(op_info[i].name, name) == 0)
      return (Op)i;
  return OP_COUNT;
}

/* ---- shapes ---- */

bool shape_eq(const Shape *a, const Shape *b) {
  if (a->rank != b->rank)
    return false;
  for (int i = 0; i < a->rank; i++)
    if (!dim_eq(a->d[i], b->d[i]))
      return false;
  return true;
}

bool shape_is_static(const Shape *s) {
  for (int i = 0; i < s->rank; i++)
    if (s->d[i].sym >= 0)
      return false;
  return true;
}

int64_t shape_static_numel(const Shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++)
    if (s->d[i].sym < 0)
      n *= s->d[i].size;
  return n;
}

const char *shape_str(const Graph *g, const Shape *s, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = 0;
#define PUT(...) used += (size_t)snprintf(buf + used, used < len ? len - used : 0, __VA_ARGS__)
  PUT("[");
  for (int i = 0; i < s->rank; i++) {
    if (i)
      PUT(", ");
    if (s->d[i].sym >= 0)
      PUT("%s", g && s->d[i].sym < g->ndims ? g->dims[s->d[i].sym].name : "?");
    else
      PUT("%lld", (long long)s->d[i].size);
  }
  PUT("]");
#undef PUT
  return buf;
}

/* ---- graph ---- */

Graph *graph_create(const char *model, const char *file) {
  Arena *a = arena_create();
  Graph *g = arena_alloc(a, sizeof *g);
  g->arena = a;
  g->model = model ? arena_strdup(a, model) : NULL;
  g->file = file ? arena_strdup(a, file) : NULL;
  return g;
}

void graph_destroy(Graph *g) {
  if (g)
    arena_destroy(g->arena);
}

int graph_find_dim(const Graph *g, const char *name) {
  for (int i = 0; i < g->ndims; i++)
    if (strcmp(g->dims[i].name, name) == 0)
      return i;
  return -1;
}

int graph_add_dim(Graph *g, const char *name, SrcLoc loc) {
  DimSym *dims = arena_alloc(g->arena, sizeof(DimSym) * (size_t)(g->ndims + 1));
  if (g->ndims)
    memcpy(dims, g->dims, sizeof(DimSym) * (size_t)g->ndims);
  dims[g->ndims] = (DimSym){arena_strdup(g->arena, name), loc};
  g->dims = dims;
  return g->ndims++;
}

void graph_add_output(Graph *g, const char *name, Node *n) {
  if (g->noutputs == g->capoutputs) { /* the old array stays in the arena: at most as much again */
    g->capoutputs = g->capoutputs ? 2 * g->capoutputs : 8;
    Output *outs = arena_alloc(g->arena, sizeof(Output) * (size_t)g->capoutputs);
    if (g->noutputs)
      memcpy(outs, g->outputs, sizeof(Output) * (size_t)g->noutputs);
    g->outputs = outs;
  }
  g->outputs[g->noutputs++] = (Output){arena_strdup(g->arena, name), n};
}

static bool args_const(Node *const *args, int nargs) {
  for (int i = 0; i < nargs; i++)
    if (!args[i]->konst)
      return false;
  return true;
}

Node *ir_node(Graph *g, Op op, DType dt, Shape shape, Node **args, int nargs, SrcLoc loc) {
  Node *n = arena_alloc(g->arena, sizeof *n);
  n->op = op;
  n->id = g->next_id++;
  n->dtype = dt;
  n->shape = shape;
  n->nargs = nargs;
  if (nargs) {
    n->args = arena_alloc(g->arena, sizeof(Node *) * (size_t)nargs);
    memcpy(n->args, args, sizeof(Node *) * (size_t)nargs);
  }
  n->loc = loc;
  n->sublayer = -1;
  n->group = -1;
  n->konst = op == OP_WEIGHT || op == OP_SCALAR || (op != OP_INPUT && nargs > 0 && args_const(args, nargs));
  ptrvec_push(g->arena, &g->nodes, n);
  return n;
}

Node *ir_input(Graph *g, const char *name, Shape shape, DType dt, SrcLoc loc) {
  Node *n = ir_node(g, OP_INPUT, dt, shape, NULL, 0, loc);
  n->name = arena_strdup(g->arena, name);
  return n;
}

Node *ir_weight(Graph *g, const char *tensor, Shape shape, DType dt, SrcLoc loc, Node **conflict) {
  *conflict = NULL;
  for (int i = 0; i < g->nodes.len; i++) {
    Node *n = GRAPH_NODE(g, i);
    if (n->op != OP_WEIGHT || n->dead || strcmp(n->name, tensor) != 0)
      continue;
    if (n->dtype == dt && shape_eq(&n->shape, &shape))
      return n;
    *conflict = n;
    return NULL;
  }
  Node *n = ir_node(g, OP_WEIGHT, dt, shape, NULL, 0, loc);
  n->name = arena_strdup(g->arena, tensor);
  return n;
}

Node *ir_scalar(Graph *g, double v, DType dt, SrcLoc loc) {
  Node *n = ir_node(g, OP_SCALAR, dt, (Shape){0}, NULL, 0, loc);
  n->fval = v;
  return n;
}

void ir_set_arg(Node *n, int i, Node *arg) {
  n->args[i] = arg;
  n->konst = n->op != OP_INPUT && args_const(n->args, n->nargs);
}

void ir_replace_uses(Graph *g, Node *from, Node *to) {
  for (int i = 0; i < g->nodes.len; i++) {
    Node *n = GRAPH_NODE(g, i);
    for (int j = 0; j < n->nargs; j++)
      if (n->args[j] == from)
        ir_set_arg(n, j, to);
  }
  for (int i = 0; i < g->noutputs; i++)
    if (g->outputs[i].node == from)
      g->outputs[i].node = to;
}

void ir_replace_uses_batch(Graph *g, Node *const *from, Node *const *to, int n) {
  if (n == 0)
    return;
  Node **map = ffn_xcalloc((size_t)g->next_id + 1, sizeof *map);
  for (int i = 0; i < n; i++)
    map[from[i]->id] = to[i];
  for (int i = 0; i < g->nodes.len; i++) {
    Node *u = GRAPH_NODE(g, i);
    for (int j = 0; j < u->nargs; j++) {
      Node *a = u->args[j];
      while (a->id <= g->next_id && map[a->id])
        a = map[a->id];
      if (a != u->args[j])
        ir_set_arg(u, j, a);
    }
  }
  for (int i = 0; i < g->noutputs; i++)
    while (map[g->outputs[i].node->id])
      g->outputs[i].node = map[g->outputs[i].node->id];
  free(map);
}

/* ---- shape rules ---- */

#define FAIL(...)                        \
  do {                                   \
    snprintf(err, errlen, __VA_ARGS__);  \
    return false;                        \
  } while (0)

static bool infer_broadcast(const Graph *g, const Shape *a, const Shape *b, Shape *out, char *err, size_t errlen) {
  int rank = a->rank > b->rank ? a->rank : b->rank;
  if (rank > FFN_MAX_RANK)
    FAIL("rank %d is more than the %d dims ffnc supports", rank, FFN_MAX_RANK);
  out->rank = rank;
  for (int i = 0; i < rank; i++) {
    int ia = a->rank - rank + i, ib = b->rank - rank + i;
    Dim da = ia >= 0 ? a->d[ia] : dim_static(1), db = ib >= 0 ? b->d[ib] : dim_static(1);
    if (dim_eq(da, db))
      out->d[i] = da;
    else if (da.sym < 0 && da.size == 1)
      out->d[i] = db;
    else if (db.sym < 0 && db.size == 1)
      out->d[i] = da;
    else {
      char sa[128], sb[128];
      FAIL("cannot broadcast %s with %s", shape_str(g, a, sa, sizeof sa), shape_str(g, b, sb, sizeof sb));
    }
  }
  return true;
}

static const char *dim_str(const Graph *g, Dim d, char *buf, size_t len) {
  Shape one = {1, {d}};
  shape_str(g, &one, buf, len);
  return buf;
}

static bool check_norm_param(const Graph *g, const char *what, const Shape *x, const Shape *p, char *err, size_t errlen) {
  char sx[128], sd[128], sp[128];
  if (x->rank < 1)
    FAIL("normalization needs a tensor of rank >= 1, got %s", shape_str(g, x, sx, sizeof sx));
  if (p->rank != 1 || !dim_eq(p->d[0], x->d[x->rank - 1]))
    FAIL("the %s of a norm over %s must have shape %s, got %s", what, shape_str(g, x, sx, sizeof sx),
         dim_str(g, x->d[x->rank - 1], sd, sizeof sd), shape_str(g, p, sp, sizeof sp));
  return true;
}

/* The shape rules of the OTHER ops with more to check than a rank: each sets *out, or says why
 * not in err and returns false. */
#define INFER_ARGS const Graph *g, Op op, Node *const *args, int nargs, const Node *proto, Shape *out, char *err, size_t errlen

static bool infer_matmul(INFER_ARGS) {
  (void)op, (void)nargs, (void)proto;
  char sa[128], sb[128];
  const Shape *a = &args[0]->shape, *b = &args[1]->shape;
  if (a->rank < 1 || b->rank != 2)
    FAIL("matrix product needs [..., K] @ [K, N], got %s @ %s", shape_str(g, a, sa, sizeof sa),
         shape_str(g, b, sb, sizeof sb));
  if (!dim_eq(a->d[a->rank - 1], b->d[0]))
    FAIL("matrix product needs equal inner dimensions, got %s @ %s", shape_str(g, a, sa, sizeof sa),
         shape_str(g, b, sb, sizeof sb));
  *out = *a;
  out->d[a->rank - 1] = b->d[1];
  return true;
}

static bool infer_matmul_at(INFER_ARGS) {
  (void)op, (void)nargs, (void)proto;
  char sa[128], sb[128];
  const Shape *a = &args[0]->shape, *b = &args[1]->shape;
  bool ok = a->rank >= 1 && b->rank == a->rank;
  for (int i = 0; ok && i < a->rank - 1; i++)
    ok = dim_eq(a->d[i], b->d[i]);
  if (!ok)
    FAIL("matmul_at needs [..., K] and [..., N] with equal leading dims, got %s and %s",
         shape_str(g, a, sa, sizeof sa), shape_str(g, b, sb, sizeof sb));
  *out = (Shape){2, {a->d[a->rank - 1], b->d[b->rank - 1]}};
  return true;
}

static bool infer_slice(INFER_ARGS) {
  (void)op, (void)nargs;
  char sa[128];
  const Shape *a = &args[0]->shape;
  if (a->rank < 1)
    FAIL("cannot slice a scalar");
  Dim last = a->d[a->rank - 1];
  if (last.sym >= 0)
    FAIL("cannot split the dynamic dim %s", g->dims[last.sym].name);
  int64_t off = proto ? proto->ival[0] : 0, len = proto ? proto->ival[1] : 0;
  if (off < 0 || len <= 0 || off + len > last.size)
    FAIL("slice [%lld, %lld) is outside the last dim of %s", (long long)off, (long long)(off + len),
         shape_str(g, a, sa, sizeof sa));
  *out = *a;
  out->d[a->rank - 1] = dim_static(len);
  return true;
}

static bool infer_sum_to(INFER_ARGS) {
  (void)op, (void)nargs;
  char sa[128];
  const Shape *a = &args[0]->shape;
  int rank = proto ? (int)proto->ival[0] : 0;
  int64_t mask = proto ? proto->ival[1] : 0;
  if (rank < 0 || rank > a->rank || mask < 0 || mask >= ((int64_t)1 << rank))
    FAIL("sum_to rank %d (dims %lld) does not fit %s", rank, (long long)mask, shape_str(g, a, sa, sizeof sa));
  out->rank = rank;
  for (int i = 0; i < rank; i++)
    out->d[i] = mask >> i & 1 ? dim_static(1) : a->d[a->rank - rank + i];
  return true;
}

static bool infer_concat(INFER_ARGS) {
  (void)op;
  char sa[128], sb[128];
  const Shape *a = &args[0]->shape;
  int axis = proto ? (int)proto->ival[0] : 0;
  if (axis < 0 || axis >= a->rank)
    FAIL("concat axis %d is outside rank %d", axis, a->rank);
  *out = *a;
  for (int i = 1; i < nargs; i++) {
    const Shape *b = &args[i]->shape;
    bool ok = b->rank == a->rank;
    for (int d = 0; ok && d < a->rank; d++)
      ok = d == axis ? b->d[d].sym < 0 : dim_eq(a->d[d], b->d[d]);
    if (!ok || a->d[axis].sym >= 0)
      FAIL("cannot concatenate %s and %s along dim %d", shape_str(g, a, sa, sizeof sa),
           shape_str(g, b, sb, sizeof sb), axis);
    out->d[axis].size += b->d[axis].size;
  }
  return true;
}

static bool infer_interleave(INFER_ARGS) {
  (void)op;
  char sa[128], sb[128];
  const Shape *a = &args[0]->shape;
  int64_t group = proto ? proto->ival[0] : 0, streams = proto ? proto->ival[1] : 0, rows = 0;
  for (int i = 0; i < nargs; i++) {
    const Shape *b = &args[i]->shape;
    if (b->rank != 2 || b->d[0].sym >= 0 || !dim_eq(b->d[1], a->d[1]))
      FAIL("interleave needs static [N, K] operands with equal K, got %s and %s", shape_str(g, a, sa, sizeof sa),
           shape_str(g, b, sb, sizeof sb));
    rows += b->d[0].size;
  }
  if (group <= 0 || streams <= 0 || rows % (streams * group) != 0)
    FAIL("interleave of %lld rows into %lld blocks needs blocks that are a multiple of %lld rows",
         (long long)rows, (long long)streams, (long long)group);
  *out = *a;
  out->d[0].size = rows;
  return true;
}

/* OP_WQ_SCALE, OP_WQ_PACK */
static bool infer_wq(INFER_ARGS) {
  (void)nargs;
  char sa[128];
  const Shape *a = &args[0]->shape;
  int64_t bits = proto ? proto->ival[0] : 0, group = proto ? proto->ival[1] : -1;
  if (a->rank != 2 || !shape_is_static(a))
    FAIL("weight quantization needs a static [R, K] operand, got %s", shape_str(g, a, sa, sizeof sa));
  if ((bits != 8 && bits != 4) || group < 0)
    FAIL("weight quantization to %lld bits with group %lld is not defined", (long long)bits, (long long)group);
  int64_t R = a->d[0].size, K = a->d[1].size, ng = bits == 8 ? 1 : wq_ngroups(K, group);
  if (op == OP_WQ_PACK) {
    const Shape *s = &args[1]->shape;
    if (s->rank != 2 || !shape_is_static(s) || s->d[0].size != R || s->d[1].size != ng)
      FAIL("weight codes of %s need scales [%lld, %lld]", shape_str(g, a, sa, sizeof sa), (long long)R, (long long)ng);
  }
  if (op == OP_WQ_SCALE)
    *out = (Shape){2, {dim_static(R), dim_static(ng)}};
  else /* whole 512-byte tiles (kernels/quant.cuh) */
    *out = (Shape){2, {dim_static(wq_code_rows(R)), dim_static(wq_row_bytes(K, (int)bits))}};
  return true;
}

/* OP_F8_SCALE, OP_F8_PACK: an fp8 weight quantized at prepare */
static bool infer_f8(INFER_ARGS) {
  (void)nargs, (void)proto;
  char sa[128];
  const Shape *a = &args[0]->shape;
  if (a->rank != 2 || !shape_is_static(a))
    FAIL("fp8 weight quantization needs a static [R, K] operand, got %s", shape_str(g, a, sa, sizeof sa));
  int64_t R = a->d[0].size, K = a->d[1].size;
  if (op == OP_F8_PACK) {
    const Shape *s = &args[1]->shape;
    if (s->rank != 2 || !shape_is_static(s) || s->d[0].size != R || s->d[1].size != 1)
      FAIL("fp8 codes of %s need scales [%lld, 1]", shape_str(g, a, sa, sizeof sa), (long long)R);
  }
  *out = (Shape){2, {dim_static(R), dim_static(op == OP_F8_SCALE ? 1 : K)}};
  return true;
}

/* OP_F8_SCALES, OP_F8_DEQUANT: a pre-quantized fp8 weight */
static bool infer_f8_stored(INFER_ARGS) {
  (void)nargs, (void)proto;
  char sa[128];
  const Shape *a = &args[0]->shape;
  if (!shape_is_static(a))
    FAIL("a pre-quantized weight has a static shape, got %s", shape_str(g, a, sa, sizeof sa));
  int64_t R = a->rank ? a->d[0].size : 1;
  if (op == OP_F8_DEQUANT) {
    const Shape *s = &args[1]->shape;
    if (s->rank != 2 || !shape_is_static(s) || s->d[0].size != R || s->d[1].size != 1)
      FAIL("fp8 codes %s need scales [%lld, 1]", shape_str(g, a, sa, sizeof sa), (long long)R);
  }
  *out = op == OP_F8_SCALES ? (Shape){2, {dim_static(R), dim_static(1)}} : *a;
  return true;
}

bool ir_infer_shape(const Graph *g, Op op, Node *const *args, int nargs, const Node *proto, Shape *out, char *err,
                    size_t errlen) {
  char sa[128];
  if (nargs < op_info[op].min_args || nargs > op_info[op].max_args)
    FAIL("%s takes %d to %d operands, got %d", op_info[op].name, op_info[op].min_args, op_info[op].max_args, nargs);
  switch (op_info[op].cls) {
  case OPC_LEAF:
    FAIL("%s has no operands to infer a shape from", op_info[op].name);
  case OPC_UNARY:
    *out = args[0]->shape;
    return true;
  case OPC_BINARY:
    return infer_broadcast(g, &args[0]->shape, &args[1]->shape, out, err, errlen);
  case OPC_OTHER:
    break;
  }
  const Shape *a = &args[0]->shape;
  switch (op) { /* no default: a new OTHER op without a shape rule is a -Wswitch warning */
#define LEAF_OP(e, name) case OP_##e:
#define UNARY_OP(e, math, dsl) case OP_##e:
#define BINARY_OP(e, math, dsl) case OP_##e:
#include "ops.def"
#undef LEAF_OP
#undef UNARY_OP
#undef BINARY_OP
    break; /* by class, above */
  case OP_MATMUL: return infer_matmul(g, op, args, nargs, proto, out, err, errlen);
  case OP_MATMUL_AT: return infer_matmul_at(g, op, args, nargs, proto, out, err, errlen);
  case OP_SLICE: return infer_slice(g, op, args, nargs, proto, out, err, errlen);
  case OP_SUM_TO: return infer_sum_to(g, op, args, nargs, proto, out, err, errlen);
  case OP_CONCAT: return infer_concat(g, op, args, nargs, proto, out, err, errlen);
  case OP_INTERLEAVE: return infer_interleave(g, op, args, nargs, proto, out, err, errlen);
  case OP_WQ_SCALE:
  case OP_WQ_PACK: return infer_wq(g, op, args, nargs, proto, out, err, errlen);
  case OP_F8_SCALE:
  case OP_F8_PACK: return infer_f8(g, op, args, nargs, proto, out, err, errlen);
  case OP_F8_SCALES:
  case OP_F8_DEQUANT: return infer_f8_stored(g, op, args, nargs, proto, out, err, errlen);
  case OP_TRANSPOSE:
    if (a->rank != 2)
      FAIL("transpose (^T) needs a 2-D tensor, got %s", shape_str(g, a, sa, sizeof sa));
    *out = (Shape){2, {a->d[1], a->d[0]}};
    return true;
  case OP_RMSNORM:
  case OP_LAYERNORM:
    if (!check_norm_param(g, "gain", a, &args[1]->shape, err, errlen))
      return false;
    if (nargs == 3 && !check_norm_param(g, "bias", a, &args[2]->shape, err, errlen))
      return false;
    *out = *a;
    return true;
  case OP_RMS_RSTD:
  case OP_LN_MEAN:
  case OP_LN_RSTD:
    if (a->rank < 1)
      FAIL("row statistics need a tensor of rank >= 1");
    *out = *a;
    out->d[a->rank - 1] = dim_static(1);
    return true;
  case OP_ALLREDUCE:
    if (a->rank < 1)
      FAIL("an all-reduce needs a tensor of rank >= 1");
    if (proto && proto->ival[0] < 2)
      FAIL("an all-reduce needs at least 2 ranks, got %lld", (long long)proto->ival[0]);
    *out = *a;
    return true;
  case OP_ROWSUM:
    if (a->rank < 1)
      FAIL("rowsum needs a tensor of rank >= 1");
    *out = *a;
    out->rank--;
    return true;
  }
  FAIL("no shape rule for %s", op_info[op].name);
}
#undef INFER_ARGS

/* ---- text form ---- */

static void print_dims_header(const Graph *g, FILE *out) {
  for (int i = 0; i < g->ndims; i++)
    fprintf(out, "dim %s\n", g->dims[i].name);
}

/* s in double quotes, with the DSL's own escapes */
static void print_quoted(const char *s, FILE *out) {
  fputc('"', out);
  for (const char *p = s; *p; p++)
    fprintf(out, *p == '"' || *p == '\\' ? "\\%c" : "%c", *p);
  fputc('"', out);
}

/* An op's parameters after its operands (eps=, offset= ...). */
static void print_params(const Node *n, FILE *out) {
  switch (n->op) {
  case OP_RMSNORM:
  case OP_LAYERNORM:
    fprintf(out, " eps=%.9g", n->fval);
    break;
  case OP_SLICE:
    fprintf(out, " offset=%lld len=%lld", (long long)n->ival[0], (long long)n->ival[1]);
    break;
  case OP_CONCAT:
    fprintf(out, " axis=%lld", (long long)n->ival[0]);
    break;
  case OP_SUM_TO:
    fprintf(out, " rank=%lld dims=%lld", (long long)n->ival[0], (long long)n->ival[1]);
    break;
  case OP_INTERLEAVE:
    fprintf(out, " group=%lld streams=%lld", (long long)n->ival[0], (long long)n->ival[1]);
    break;
  case OP_RMS_RSTD:
  case OP_LN_RSTD:
    fprintf(out, " eps=%.9g", n->fval);
    break;
  case OP_ALLREDUCE:
    fprintf(out, " ranks=%lld", (long long)n->ival[0]);
    break;
  case OP_WQ_SCALE:
  case OP_WQ_PACK:
    fprintf(out, " bits=%lld group=%lld", (long long)n->ival[0], (long long)n->ival[1]);
    break;
  case OP_F8_SCALE:
  case OP_F8_PACK:
  case OP_F8_DEQUANT:
    fprintf(out, " %s", n->ival[0] ? "e5m2" : "e4m3");
    break;
  case OP_MATMUL: /* no parameters; an OTHER op must say here which it prints */
  case OP_TRANSPOSE:
  case OP_MATMUL_AT:
  case OP_LN_MEAN:
  case OP_ROWSUM:
  case OP_F8_SCALES:
#define LEAF_OP(e, name) case OP_##e:
#define UNARY_OP(e, math, dsl) case OP_##e:
#define BINARY_OP(e, math, dsl) case OP_##e:
#include "ops.def"
#undef LEAF_OP
#undef UNARY_OP
#undef BINARY_OP
    break;
  }
}

static void print_node(const Graph *g, const Node *n, FILE *out) {
  char buf[256];
  fprintf(out, "%%%d = %s", n->id, op_info[n->op].name);
  if (n->op == OP_INPUT || n->op == OP_WEIGHT) {
    fputc(' ', out);
    print_quoted(n->name, out);
  }
  if (n->op == OP_WEIGHT && n->stored != DT_NONE) {
    fprintf(out, " %s scale ", dtype_name(n->stored));
    print_quoted(n->scale, out);
  }
  if (n->op == OP_SCALAR)
    fprintf(out, " %.9g", n->fval);
  for (int j = 0; j < n->nargs; j++)
    fprintf(out, "%s%%%d", j ? ", " : " ", n->args[j]->id);
  print_params(n, out);
  fprintf(out, " : %s %s", shape_str(g, &n->shape, buf, sizeof buf), dtype_name(n->dtype));
  if (n->sublayer >= 0)
    fprintf(out, " sublayer=%d", n->sublayer);
  if (n->group >= 0)
    fprintf(out, " kernel=%d", n->group);
  if (n->var)
    fprintf(out, "  # %s", n->var);
  fputc('\n', out);
}

void ir_print(const Graph *g, FILE *out) {
  fprintf(out, "model %s\n", g->model ? g->model : "?");
  print_dims_header(g, out);
  for (int c = 0; c < PREC_COUNT; c++) {
    if (g->prec.type[c] == DT_NONE)
      continue;
    fprintf(out, "precision %s %s", prec_class_names[c], dtype_name(g->prec.type[c]));
    if (c == PREC_WEIGHTS && g->prec.group)
      fprintf(out, " group=%d", g->prec.group);
    fputc('\n', out);
  }
  for (int i = 0; i < g->nfuse; i++)
    fprintf(out, "fuse ffn %d..%d\n", g->fuse[i].first, g->fuse[i].last);
  for (int i = 0; i < g->nodes.len; i++)
    if (!GRAPH_NODE(g, i)->dead)
      print_node(g, GRAPH_NODE(g, i), out);
  for (int i = 0; i < g->noutputs; i++)
    fprintf(out, "output %s = %%%d\n", g->outputs[i].name, g->outputs[i].node->id);
}

/* ---- verifier ---- */

#define VFAIL(...)                       \
  do {                                   \
    snprintf(err, errlen, __VA_ARGS__);  \
    return -1;                           \
  } while (0)

#define CHECK(cond, ...)                                                             \
  if (!(cond)) {                                                                     \
    int k = snprintf(err, errlen, "%%%d (%s): ", n->id,                              \
                     n->op >= 0 && n->op < OP_COUNT ? op_info[n->op].name : "?");   \
    snprintf(err + k, errlen > (size_t)k ? errlen - (size_t)k : 0, __VA_ARGS__);     \
    return false;                                                                    \
  }

/* n's operands: live nodes defined before it (pos: id -> position + 1 of the live nodes seen),
 * and after kernel fusion (passes/fuse.c) run-time ones computed by this kernel or an earlier one */
static bool verify_operands(const Graph *g, const Node *n, const int *pos, char *err, size_t errlen) {
  for (int j = 0; j < n->nargs; j++) {
    const Node *a = n->args[j];
    CHECK(a && a->id >= 0 && a->id < g->next_id && pos[a->id] && GRAPH_NODE(g, pos[a->id] - 1) == a,
          "operand %d is not a live node defined before it", j);
    if (n->group >= 0 && !a->konst && op_info[a->op].cls != OPC_LEAF) {
      CHECK(a->group >= 0, "operand %d (%%%d) is computed by no kernel", j, a->id);
      CHECK(a->group <= n->group, "operand %d (%%%d) is computed by kernel %d, after this node's kernel %d", j, a->id,
            a->group, n->group);
    }
  }
  return true;
}

/* n's const flag, its shape against its operands', and the flags only some ops may carry */
static bool verify_facts(const Graph *g, const Node *n, char *err, size_t errlen) {
  char why[256], s1[128], s2[128];
  bool k = n->op == OP_WEIGHT || n->op == OP_SCALAR || (n->op != OP_INPUT && n->nargs > 0 && args_const(n->args, n->nargs));
  CHECK(n->konst == k, "const flag is stale");
  if (op_info[n->op].cls == OPC_LEAF) {
    CHECK(n->op != OP_SCALAR || n->shape.rank == 0, "scalar with rank %d", n->shape.rank);
    CHECK(n->op == OP_SCALAR || n->name, "has no name");
  } else {
    Shape s;
    CHECK(ir_infer_shape(g, n->op, n->args, n->nargs, n, &s, why, sizeof why), "%s", why);
    CHECK(shape_eq(&s, &n->shape), "shape %s, but the operands give %s", shape_str(g, &n->shape, s1, sizeof s1),
          shape_str(g, &s, s2, sizeof s2));
  }
  if (n->op == OP_WEIGHT && n->stored != DT_NONE)
    CHECK((n->stored == DT_F8E4M3 || n->stored == DT_F8E5M2) && n->scale && n->dtype == DT_F32,
          "a pre-quantized weight holds f8e4m3 or f8e5m2 codes, names its scale tensor and has the value type f32");
  CHECK(n->op == OP_WEIGHT || (n->stored == DT_NONE && !n->scale), "only weights are stored pre-quantized");
  if (n->op == OP_INTERLEAVE || n->op == OP_ROWSUM) /* concat also joins the gradients of chunks */
    CHECK(n->konst, "load-time op applied to a run-time value");
  CHECK(n->op != OP_ALLREDUCE || !n->konst, "an all-reduce of a load-time value (each rank computes it alone)");
  CHECK(n->op != OP_WQ_SCALE && n->op != OP_WQ_PACK && n->op != OP_F8_SCALE && n->op != OP_F8_PACK &&
            n->op != OP_F8_SCALES && n->op != OP_F8_DEQUANT,
        "weight packing for the GPU appears in a graph");
  return true;
}

/* one live node, after the node of id last_id */
static bool verify_node(const Graph *g, const Node *n, int last_id, const int *pos, char *err, size_t errlen) {
  CHECK(n->op >= 0 && n->op < OP_COUNT, "unknown op %d", n->op);
  CHECK(n->id > last_id && n->id < g->next_id, "id out of order (previous %d)", last_id);
  CHECK(n->nargs >= op_info[n->op].min_args && n->nargs <= op_info[n->op].max_args,
        "has %d operands, the op takes %d to %d", n->nargs, op_info[n->op].min_args, op_info[n->op].max_args);
  CHECK(n->dtype > DT_NONE && n->dtype < DT_COUNT, "has no element type");
  CHECK(n->shape.rank >= 0 && n->shape.rank <= FFN_MAX_RANK, "bad rank %d", n->shape.rank);
  for (int d = 0; d < n->shape.rank; d++)
    CHECK(n->shape.d[d].sym < g->ndims && (n->shape.d[d].sym >= 0 || n->shape.d[d].size >= 0), "bad dim %d", d);
  return verify_operands(g, n, pos, err, errlen) && verify_facts(g, n, err, errlen);
}
#undef CHECK

int ir_verify(const Graph *g, char *err, size_t errlen) {
  int *pos = calloc((size_t)g->next_id + 1, sizeof(int)); /* id -> position + 1 of live nodes */
  if (!pos)
    VFAIL("out of memory");
  int rc = -1, last_id = -1;
  for (int i = 0; i < g->nodes.len; i++) {
    const Node *n = GRAPH_NODE(g, i);
    if (n->dead)
      continue;
    if (!verify_node(g, n, last_id, pos, err, errlen))
      goto out;
    last_id = n->id;
    pos[n->id] = i + 1;
  }
  if (g->noutputs == 0) {
    snprintf(err, errlen, "graph has no outputs");
    goto out;
  }
  for (int i = 0; i < g->noutputs; i++) {
    Node *o = g->outputs[i].node;
    if (!o || !pos[o->id] || GRAPH_NODE(g, pos[o->id] - 1) != o) {
      snprintf(err, errlen, "output %s is not a live node", g->outputs[i].name);
      goto out;
    }
  }
  rc = 0;
out:
  free(pos);
  return rc;
}

void ir_compact(Graph *g) {
  /* Reachability from the outputs (order-independent, so it also works between a pass
   * appending nodes and the toposort); inputs are the model's interface and stay. */
  size_t edges = 0;
  for (int i = 0; i < g->nodes.len; i++)
    edges += (size_t)GRAPH_NODE(g, i)->nargs;
  bool *live = ffn_xcalloc((size_t)g->next_id + 1, sizeof(bool));
  Node **stack = ffn_xmalloc(sizeof(Node *) * (edges + (size_t)g->nodes.len + (size_t)g->noutputs + 1));
  int sp = 0;
  for (int i = 0; i < g->noutputs; i++)
    stack[sp++] = g->outputs[i].node;
  for (int i = 0; i < g->nodes.len; i++)
    if (GRAPH_NODE(g, i)->op == OP_INPUT)
      stack[sp++] = GRAPH_NODE(g, i);
  while (sp) {
    Node *n = stack[--sp];
    if (live[n->id])
      continue;
    live[n->id] = true;
    for (int j = 0; j < n->nargs; j++)
      if (!live[n->args[j]->id])
        stack[sp++] = n->args[j];
  }
  int k = 0;
  for (int i = 0; i < g->nodes.len; i++) {
    Node *n = GRAPH_NODE(g, i);
    if (live[n->id] && !n->dead)
      g->nodes.items[k++] = n;
  }
  g->nodes.len = k;
  free(live);
  free(stack);
}

int ir_toposort(Graph *g) {
  int n = g->nodes.len;
  /* state by id: 0 new, 1 on the stack, 2 placed */
  unsigned char *state = ffn_xcalloc((size_t)g->next_id + 1, 1);
  Node **order = ffn_xmalloc(sizeof(Node *) * (size_t)(n + 1));
  Node **stack = ffn_xmalloc(sizeof(Node *) * (size_t)(n + 1));
  int *next_arg = ffn_xmalloc(sizeof(int) * (size_t)(n + 1));
  int placed = 0;
  for (int i = 0; i < n; i++) {
    Node *root = GRAPH_NODE(g, i);
    if (state[root->id])
      continue;
    int sp = 0;
    stack[sp] = root;
    next_arg[sp++] = 0;
    state[root->id] = 1;
    while (sp) {
      Node *top = stack[sp - 1];
      if (next_arg[sp - 1] < top->nargs) {
        Node *a = top->args[next_arg[sp - 1]++];
        if (state[a->id] == 0) {
          state[a->id] = 1;
          stack[sp] = a;
          next_arg[sp++] = 0;
        }
        continue;
      }
      state[top->id] = 2;
      order[placed++] = top;
      sp--;
    }
  }
  for (int i = 0; i < placed; i++) {
    g->nodes.items[i] = order[i];
    order[i]->id = i;
  }
  g->nodes.len = placed;
  g->next_id = placed;
  free(state);
  free(order);
  free(stack);
  free(next_arg);
  return 0;
}
