/* emit_cuda.c: the CUDA text of the kernels lower.c plans.
 *
 * A kernel is a small body of generated code plugged into a device template from kernels/:
 *   GEMM groups: an epilogue functor (struct Epi_@) for the matrix-product template and one
 *     __global__ entry point per tile configuration;
 *   rowwise groups: a per-row loop (statistics first when the group holds a norm).
 * '@' stands for the kernel's name until lower.c knows whether the text is new. Values are
 * computed in f32; a node's value gets a variable once per scope (a row, or an element).
 */
#include "gen.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm_host.h"

/* ---- kernel bodies ---- */

static int slot(Kgen *k, int tensor) {
  for (int i = 0; i < k->nslots; i++)
    if (k->slot_tensor[i] == tensor)
      return i;
  if (k->nslots == FFN_KARGS_SLOTS) {
    fail(k->G, NULL, "a kernel reads more than %d tensors; split the expression", FFN_KARGS_SLOTS);
    return 0;
  }
  k->slot_tensor[k->nslots] = tensor;
  return k->nslots++;
}

static void literal(char *buf, size_t len, double v) {
  float f = (float)v;
  if (isnan(f))
    snprintf(buf, len, "__int_as_float(0x7fc00000)");
  else if (isinf(f))
    snprintf(buf, len, "__int_as_float(%s)", f > 0 ? "0x7f800000" : "0xff800000");
  else {
    char t[32]; /* "%.9g" of a float: at most 15 characters */
    snprintf(t, sizeof t, "%.9g", (double)f);
    bool point = strpbrk(t, ".e") != NULL;
    snprintf(buf, len, "%s%sf", t, point ? "" : ".0");
  }
}

/* The variables of one scope by node id: an open-addressing table sized to what the kernel
 * uses (an array over the whole graph per scope made compile memory grow with the square of the
 * model), freed with its kernel. */
typedef struct {
  int *ids; /* -1: empty */
  const char **vars;
  int cap, len;
} Memo;

static unsigned memo_hash(const Memo *m, int id) { return ((unsigned)id * 2654435761u) & (unsigned)(m->cap - 1); }

static const char *memo_get(const Memo *m, int id) {
  if (!m->cap)
    return NULL;
  for (unsigned h = memo_hash(m, id);; h = (h + 1) & (unsigned)(m->cap - 1)) {
    if (m->ids[h] == id)
      return m->vars[h];
    if (m->ids[h] < 0)
      return NULL;
  }
}

static const char *memo_put(Memo *m, int id, const char *var);

static void memo_grow(Memo *m) {
  Memo old = *m;
  m->cap = old.cap ? old.cap * 2 : 16;
  m->len = 0;
  m->ids = ffn_xmalloc(sizeof(int) * (size_t)m->cap);
  m->vars = ffn_xmalloc(sizeof(char *) * (size_t)m->cap);
  for (int i = 0; i < m->cap; i++)
    m->ids[i] = -1;
  for (int i = 0; i < old.cap; i++)
    if (old.ids[i] >= 0)
      memo_put(m, old.ids[i], old.vars[i]);
  free(old.ids);
  free(old.vars);
}

/* Records var as node id's variable; returns var. */
static const char *memo_put(Memo *m, int id, const char *var) {
  if (2 * (m->len + 1) > m->cap)
    memo_grow(m);
  unsigned h = memo_hash(m, id);
  while (m->ids[h] >= 0 && m->ids[h] != id)
    h = (h + 1) & (unsigned)(m->cap - 1);
  if (m->ids[h] < 0)
    m->len++;
  m->ids[h] = id;
  m->vars[h] = var;
  return var;
}

static void memo_free(Memo *m) {
  free(m->ids);
  free(m->vars);
  *m = (Memo){0};
}

typedef enum { SC_ROW, SC_ELEM } ScopeKind;

/* A scope of generated code: per row, or per element (inside the column loop). */
typedef struct Scope {
  ScopeKind kind;
  struct Scope *parent; /* where per-row values live, for an element scope */
  Buf *out;
  const char *indent;
  Memo memo;            /* node id -> variable in this scope */
  const char *col;      /* column index expression */
  int line;             /* the last #line emitted into out */
  /* a GEMM epilogue's element scope: the activations it reads are loaded by Epi::load (into src,
   * the struct's fields into fields; pair: an even row length, one load per column pair) */
  Buf *src, *fields;
  bool pair;
} Scope;

static bool is_row_shaped(Kgen *k, const Node *n) {
  if (k->ncols == 1)
    return false;
  const Shape *s = &n->shape;
  return s->rank >= 1 && s->d[s->rank - 1].sym < 0 && s->d[s->rank - 1].size == 1;
}

static void emit_line(Kgen *k, Scope *s, const Node *n) {
  if (n->loc.line > 0 && k->G->g->file && n->loc.line != s->line) {
    s->line = n->loc.line;
    buf_printf(s->out, "#line %d \"", n->loc.line);
    for (const char *p = k->G->g->file; *p; p++)
      buf_printf(s->out, *p == '"' || *p == '\\' ? "\\%c" : "%c", *p);
    buf_puts(s->out, "\"\n");
  }
}

static const char *value(Kgen *k, Scope *s, Node *n);

/* Read an operand that lives in memory (or is a scalar). */
static const char *load(Kgen *k, Scope *s, Node *o) {
  Graph *g = k->G->g;
  const char *known = memo_get(&s->memo, o->id);
  if (known)
    return known;
  if (o->op == OP_SCALAR) {
    char lit[64];
    literal(lit, sizeof lit, o->fval);
    return memo_put(&s->memo, o->id, arena_strdup(g->arena, lit));
  }
  int t = gen_tensor_for(k->G, o);
  const char *ty = tname(o->dtype);
  if (t < 0 || !ty) {
    fail(k->G, o, "reading %s tensors in a kernel is not supported", dtype_name(o->dtype));
    return "0.f";
  }
  int sl = slot(k, t);
  char idx[96];
  const Shape *os = &o->shape;
  bool full = shape_eq(os, &k->full), scalar = shape_is_static(os) && shape_static_numel(os) == 1;
  bool per_col = !full && os->rank >= 1 && dim_eq(os->d[os->rank - 1], k->full.d[k->full.rank - 1]) && !is_row_shaped(k, o);
  if (k->vec && s->kind == SC_ELEM && !scalar && (full || per_col)) { /* from the thread's words */
    uint64_t bit = (uint64_t)1 << sl;
    *(full ? &k->row_slots : &k->col_slots) |= bit;
    k->nc_slots |= ir_is_const(o) ? bit : 0;
    k->pass_slots |= bit;
    char *var = arena_printf(g->arena, "l%d", k->nvars++);
    buf_printf(s->out, "%sconst float %s = ffn::wd_%s<%d>(%s%d, %s);\n", s->indent, var, ty,
               o->dtype != DT_F32 && k->vec > 1 ? 2 : 1, full ? "xr" : "xc", sl, full ? "k" : "e");
    return memo_put(&s->memo, o->id, var);
  }
  if (s->src && s->kind == SC_ELEM && full && !ir_is_const(o)) { /* prefetched: Epi::load */
    char *var = arena_printf(g->arena, "l%d", k->nvars++);
    buf_printf(s->fields, " ffn::u32 %s[%d];", var, o->dtype == DT_F32 ? 2 : 1);
    buf_printf(s->src, "    ffn::ldp%d_%s(a->p[%d], base, ncols, s_.%s);\n", s->pair ? 2 : 1, ty, sl, var);
    buf_printf(s->out, "%sconst float %s = ffn::wp_%s(s_.%s, e);\n", s->indent, var, ty, var);
    return memo_put(&s->memo, o->id, var);
  }
  if (scalar)
    snprintf(idx, sizeof idx, "0");
  else if (full && s->kind == SC_ELEM)
    snprintf(idx, sizeof idx, "i");
  else if (os->rank >= 1 && dim_eq(os->d[os->rank - 1], k->full.d[k->full.rank - 1]) && s->kind == SC_ELEM &&
           !is_row_shaped(k, o))
    snprintf(idx, sizeof idx, "%s", s->col); /* per column */
  else
    snprintf(idx, sizeof idx, "row"); /* per row */
  char *var = arena_printf(g->arena, "l%d", k->nvars++);
  /* constants through the read-only path, free to be hoisted and merged (ewise.cuh: ldc_) */
  buf_printf(s->out, "%sconst float %s = ffn::ld%s_%s(a->p[%d], %s);\n", s->indent, var, ir_is_const(o) ? "c" : "", ty,
             sl, idx);
  return memo_put(&s->memo, o->id, var);
}

static const char *unary_fmt(Node *n) {
  static const char *const fmt[OP_COUNT] = {
#define UNARY_OP(e, math, dsl) [OP_##e] = "ffn::op_" #math "(%s)",
#include "ir/ops.def"
#undef UNARY_OP
  };
  if (n->op == OP_CAST) /* inside a kernel values are f32: the rounding is the cast */
    return n->dtype == DT_BF16 ? "ffn::round_bf16(%s)" : n->dtype == DT_F16 ? "ffn::round_f16(%s)" : "(%s)";
  return fmt[n->op];
}

static const char *binary_op(Op op) {
  static const char *const fn[OP_COUNT] = {
#define BINARY_OP(e, math, dsl) [OP_##e] = "ffn::op_" #math,
#include "ir/ops.def"
#undef BINARY_OP
  };
  return fn[op];
}

/* A norm of the group, per element: x * rstd * g (+ b), or (x - mean) * rstd * g (+ b), its
 * statistics' names in n->aux (emit_row_part). */
static const char *norm_value(Kgen *k, Scope *es, Node *n) {
  char **st = n->aux;
  if (!st || es->kind != SC_ELEM) {
    fail(k->G, n, "internal error: a norm read before its statistics");
    return "0.f";
  }
  const char *x = value(k, es, n->args[0]), *gain = value(k, es, n->args[1]);
  const char *bias = n->nargs == 3 ? value(k, es, n->args[2]) : NULL;
  char *var = arena_printf(k->G->g->arena, "t%d", k->nvars++);
  emit_line(k, es, n);
  if (st[1])
    buf_printf(es->out, "%sconst float %s = (%s - %s) * %s * %s", es->indent, var, x, st[1], st[0], gain);
  else
    buf_printf(es->out, "%sconst float %s = %s * %s * %s", es->indent, var, x, st[0], gain);
  buf_printf(es->out, "%s%s;\n", bias ? " + " : "", bias ? bias : "");
  return memo_put(&es->memo, n->id, var);
}

/* A slice's value: its operand (in memory) read at a column offset. */
static void slice_expr(Kgen *k, Scope *s, Node *n, char *expr, size_t len) {
  Node *o = n->args[0];
  int sl = slot(k, gen_tensor_for(k->G, o));
  int64_t ld = o->shape.d[o->shape.rank - 1].size;
  snprintf(expr, len, "ffn::ld_%s(a->p[%d], row * %lldLL + %lld + %s)", tname(o->dtype), sl, (long long)ld,
           (long long)n->ival[0], s->col);
}

/* A concatenation's value along the last dim: each operand (in memory) read at its own column
 * offset. */
static const char *concat_expr(Kgen *k, Scope *s, Node *n) {
  Buf e = {0};
  int64_t at = 0;
  for (int i = 0; i < n->nargs; i++) {
    Node *o = n->args[i];
    int sl = slot(k, gen_tensor_for(k->G, o));
    int64_t w = o->shape.d[o->shape.rank - 1].size;
    const char *ty = tname(o->dtype);
    if (!ty)
      fail(k->G, n, "concatenating %s values in a kernel is not supported", dtype_name(o->dtype));
    buf_printf(&e, "%s < %lld ? ffn::ld_%s(a->p[%d], row * %lldLL + (%s - %lld)) : ", s->col, (long long)(at + w),
               ty ? ty : "f32", sl, (long long)w, s->col, (long long)at);
    at += w;
  }
  char *text = arena_printf(k->G->g->arena, "(%s0.f)", e.s ? e.s : "");
  buf_free(&e);
  return text;
}

/* Variable holding member n's value in scope s (emitting its computation if needed). Members
 * that are statistics or norms are set up by the group's generator before this is called. */
static const char *value(Kgen *k, Scope *s, Node *n) {
  Graph *g = k->G->g;
  if (n->group != k->gr->id)
    return load(k, s, n);
  const char *known = memo_get(&s->memo, n->id);
  if (known)
    return known;
  if (s->parent && (known = memo_get(&s->parent->memo, n->id))) /* a per-row value (a statistic, say) */
    return known;
  if (s->kind == SC_ELEM && is_row_shaped(k, n) && s->parent)
    return value(k, s->parent, n);
  if (n->op == OP_RMSNORM || n->op == OP_LAYERNORM)
    return norm_value(k, s, n);
  const char *args[3];
  for (int i = 0; i < n->nargs && i < 3 && n->op != OP_SLICE && n->op != OP_CONCAT; i++)
    args[i] = value(k, s, n->args[i]);
  char *var = arena_printf(g->arena, "t%d", k->nvars++);
  char expr[512];
  const char *rhs = expr;
  if (op_info[n->op].cls == OPC_UNARY) {
    const char *fmt = unary_fmt(n);
    if (n->op == OP_SQUARE)
      snprintf(expr, sizeof expr, fmt, args[0], args[0]);
    else
      snprintf(expr, sizeof expr, fmt, args[0]);
  } else if (op_info[n->op].cls == OPC_BINARY) {
    snprintf(expr, sizeof expr, "%s(%s, %s)", binary_op(n->op), args[0], args[1]);
  } else if (n->op == OP_SLICE) {
    slice_expr(k, s, n, expr, sizeof expr);
  } else if (n->op == OP_CONCAT) {
    rhs = concat_expr(k, s, n); /* any length */
  } else {
    fail(k->G, n, "internal error: %s reached the elementwise generator", op_info[n->op].name);
    return "0.f";
  }
  emit_line(k, s, n);
  buf_printf(s->out, "%sconst float %s = %s;\n", s->indent, var, rhs);
  return memo_put(&s->memo, n->id, var);
}

/* ---- GEMM groups ---- */

static const char *stat_expr(Kgen *k, Node *n, char *buf, size_t len) {
  long long K = (long long)k->gr->a->shape.d[k->gr->a->shape.rank - 1].size;
  char eps[64];
  literal(eps, sizeof eps, n->fval);
  if (n->op == OP_RMS_RSTD)
    snprintf(buf, len, "1.0f / sqrtf(rsumsq / %lld.0f + %s)", K, eps);
  else if (n->op == OP_LN_MEAN)
    snprintf(buf, len, "(rsum / %lld.0f)", K);
  else
    snprintf(buf, len, "1.0f / sqrtf(fmaxf(rsumsq / %lld.0f - (rsum / %lld.0f) * (rsum / %lld.0f), 0.0f) + %s)", K, K, K,
             eps);
  return buf;
}

/* The row half of a GEMM epilogue functor: `Row`, every value of the row scope (rowb: lines
 * `const float NAME = EXPR;`), and prep(), which computes them once per row; apply() takes a Row
 * and does a column pair; operator() is the two together, for the templates that call it per
 * pair (gemm_sm90's epilogue calls prep once per row: kernels/ewise.cuh, WithRowStats). */
static void emit_row_state(Buf *out, const char *rowb, int streams) {
  buf_puts(out, "  struct Row {");
  for (const char *p = rowb; (p = strstr(p, "const float ")); ) {
    p += strlen("const float ");
    buf_printf(out, " float %.*s;", (int)strcspn(p, " ="), p);
  }
  buf_puts(out, " };\n  __device__ __forceinline__ Row prep(int row, float rsum, float rsumsq) const {\n"
                "    (void)row; (void)rsum; (void)rsumsq;\n");
  buf_puts(out, rowb);
  buf_puts(out, "    return Row{");
  const char *sep = "";
  for (const char *p = rowb; (p = strstr(p, "const float ")); sep = ", ") {
    p += strlen("const float ");
    buf_printf(out, "%s%.*s", sep, (int)strcspn(p, " ="), p);
  }
  buf_printf(out, "};\n  }\n"
                  "  __device__ __forceinline__ void operator()(int row, int col, int ncols, const float (&v)[%d][2],\n"
                  "                                             float rsum, float rsumsq) const {\n"
                  "    apply(prep(row, rsum, rsumsq), row, col, ncols, v);\n  }\n",
             streams);
}

/* The activation half of a GEMM epilogue functor: `Src`, the activations a column pair reads
 * (srcb: `ffn::ldp*` lines into s_'s fields), and load(), which reads them for a pair, so that
 * gemm_sm90's epilogue can issue them ahead of the stores (kernels/gemm_sm90.cuh, sm90_epilogue);
 * apply() without a Src loads its own. */
static void emit_src_state(Buf *out, const char *srcb, const char *fields, int streams, int64_t ncols) {
  buf_printf(out,
             "  struct Src {%s };\n"
             "  __device__ __forceinline__ Src load(int row, int col, int ncols) const {\n"
             "    Src s_;\n    (void)row; (void)col; (void)ncols;\n",
             fields ? fields : "");
  if (srcb)
    buf_printf(out, "    const long long base = (long long)row * %lldLL + col;\n%s", (long long)ncols, srcb);
  buf_printf(out,
             "    return s_;\n  }\n"
             "  __device__ __forceinline__ void apply(const Row &r_, int row, int col, int ncols,\n"
             "                                        const float (&v)[%d][2]) const {\n"
             "    apply(r_, load(row, col, ncols), row, col, ncols, v);\n  }\n",
             streams);
}

/* The 16-bit outputs 4 columns wide (kernels/gemm_sm90.cuh, sm90_epi_quads): QUADS of them, the
 * columns (NCOLS: whole tiles need no tail code), and when there are some, compute(), apply() for a
 * whole pair with those outputs packed into w_ (a word each, in store order) instead of stored,
 * and store4(), which stores 4 columns of each from two words. PURE: compute() stores nothing
 * itself (no others), so it may run for a row past M, whose words store4 never writes. */
static void emit_quads(Buf *out, int streams, int64_t ncols, int nq, const char *body, const char *others,
                       const char *packs, const char *st4) {
  buf_printf(out, "  static constexpr int QUADS = %d;\n  static constexpr long long NCOLS = %lldLL;\n", nq,
             (long long)ncols);
  buf_printf(out, "  static constexpr bool PURE = %s;\n", others && *others ? "false" : "true");
  if (!nq)
    return;
  buf_printf(out,
             "  __device__ __forceinline__ void compute(const Row &r_, const Src &s_, int row, int col,\n"
             "                                          const float (&v)[%d][2], ffn::u32 (&w_)[%d]) const {\n"
             "    const int ncols = 2;\n%s%s%s  }\n",
             streams, nq, body, others ? others : "", packs);
  buf_printf(out,
             "  __device__ __forceinline__ void store4(int row, int col, const ffn::u32 (&w_)[%d][2]) const {\n"
             "    const long long base = (long long)row * %lldLL + col;\n%s  }\n",
             nq, (long long)ncols, st4);
}

/* The epilogue's code as gen_epilogue collects it: apply()'s stores, compute()'s others, and
 * the 16-bit full-shape stores that compute() packs (packs) and store4() writes (st4). */
typedef struct {
  Buf stores, others, packs, st4;
  int nq; /* packed stores */
} EpiStores;

/* The statistics of A's rows (RMSNorm, LayerNorm) as the row's values. */
static void epi_row_stats(Kgen *k, Scope *rs) {
  for (int i = 0; i < k->gr->nodes.len; i++) {
    Node *n = k->gr->nodes.items[i];
    if (n->op == OP_RMS_RSTD || n->op == OP_LN_MEAN || n->op == OP_LN_RSTD) {
      char expr[256], *var = arena_printf(k->G->g->arena, "t%d", k->nvars++);
      emit_line(k, rs, n);
      buf_printf(rs->out, "    const float %s = %s;\n", var, stat_expr(k, n, expr, sizeof expr));
      memo_put(&rs->memo, n->id, var);
    }
  }
}

/* Every stored member (and what it needs), element by element; stores: apply()'s, others:
 * compute()'s (all but the 16-bit full-shape ones, which it packs and store4() stores). */
static void epi_stores(Kgen *k, Scope *rs, Scope *es, EpiStores *o) {
  Group *gr = k->gr;
  bool n_even = k->ncols % 2 == 0, quads = k->ncols % 4 == 0; /* whole 8-byte groups of 4 columns in each row */
  for (int i = 0; i < gr->stores.len; i++) {
    Node *n = gr->stores.items[i];
    const char *ty = tname(n->dtype);
    if (!ty) {
      fail(k->G, n, "storing %s values is not supported by the GPU code generator yet", dtype_name(n->dtype));
      continue;
    }
    /* the value first, then the stored tensor's slot: operands come before results */
    const char *v = is_row_shaped(k, n) ? value(k, rs, n) : value(k, es, n);
    int sl = slot(k, gen_tensor_for(k->G, n));
    size_t at = o->stores.len;
    if (is_row_shaped(k, n)) {
      buf_printf(&o->stores, "    if (col == 0) ffn::st_%s(a->p[%d], row, %s);\n", ty, sl, v);
      buf_puts(&o->others, o->stores.s + at);
      continue;
    }
    buf_printf(es->out, "        o%d[e] = %s;\n", i, v);
    if (n_even)
      buf_printf(&o->stores,
                 "    if (ncols == 2) ffn::st2_%s(a->p[%d], base, o%d[0], o%d[1]);\n"
                 "    else ffn::st_%s(a->p[%d], base, o%d[0]);\n",
                 ty, sl, i, i, ty, sl, i);
    else
      buf_printf(&o->stores, "    for (int e = 0; e < ncols; ++e) ffn::st_%s(a->p[%d], base + e, o%d[e]);\n", ty, sl, i);
    if (quads && (n->dtype == DT_BF16 || n->dtype == DT_F16)) {
      buf_printf(&o->packs, "    w_[%d] = ffn::pack_%sx2(o%d[0], o%d[1]);\n", o->nq, ty, i, i);
      buf_printf(&o->st4, "    ffn::st4_u16(a->p[%d], base, w_[%d][0], w_[%d][1]);\n", sl, o->nq, o->nq);
      o->nq++;
    } else
      buf_puts(&o->others, o->stores.s + at);
  }
}

/* apply()'s and compute()'s body: the row's values (rowb's), then the element loop (elb). */
static void epi_body(const Kgen *k, const char *rowb, const char *elb, Buf *body) {
  buf_printf(body,
             "    (void)r_; (void)s_; (void)row;\n"
             "    const long long base = (long long)row * %lldLL + col;\n",
             (long long)k->ncols);
  for (const char *p = rowb; p && (p = strstr(p, "const float ")); ) { /* unpack the row's values */
    p += strlen("const float ");
    int n = (int)strcspn(p, " =");
    buf_printf(body, "    const float %.*s = r_.%.*s;\n", n, p, n, p);
  }
  for (int i = 0; i < k->gr->stores.len; i++)
    buf_printf(body, "    float o%d[2] = {0.f, 0.f};\n", i);
  buf_puts(body, "#pragma unroll\n    for (int e = 0; e < 2; ++e) {\n      if (e < ncols) {\n"
                 "        const long long i = base + e;\n        (void)i;\n");
  buf_puts(body, elb ? elb : "");
  buf_puts(body, "      }\n    }\n");
}

static void gen_epilogue(Kgen *k, Buf *out) {
  Group *gr = k->gr;
  Buf rowb = {0}, elb = {0}, srcb = {0}, fields = {0}, body = {0};
  Scope rs = {.kind = SC_ROW, .out = &rowb, .indent = "    ", .col = "col"};
  Scope es = {.kind = SC_ELEM, .parent = &rs, .out = &elb, .indent = "        ", .col = "(col + e)",
              .src = &srcb, .fields = &fields, .pair = k->ncols % 2 == 0};
  for (int s = 0; s < gr->streams; s++) /* the stream values */
    memo_put(&es.memo, gr->stream[s]->id, arena_printf(k->G->g->arena, "v[%d][e]", s));
  epi_row_stats(k, &rs);
  EpiStores o = {0};
  epi_stores(k, &rs, &es, &o);
  emit_row_state(out, rowb.s ? rowb.s : "", gr->streams);
  emit_src_state(out, srcb.s, fields.s, gr->streams, k->ncols);
  epi_body(k, rowb.s, elb.s, &body);
  buf_printf(out,
             "  __device__ __forceinline__ void apply(const Row &r_, const Src &s_, int row, int col, int ncols,\n"
             "                                        const float (&v)[%d][2]) const {\n%s%s  }\n",
             gr->streams, body.s, o.stores.s ? o.stores.s : "");
  emit_quads(out, gr->streams, k->ncols, o.nq, body.s, o.others.s, o.packs.s, o.st4.s);
  Buf *bufs[] = {&body, &o.others, &o.packs, &o.st4, &rowb, &elb, &srcb, &fields, &o.stores};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
    buf_free(bufs[i]);
  memo_free(&rs.memo);
  memo_free(&es.memo);
}

void emit_gemm_functor(Kgen *k, Buf *body) {
  if (k->f8) { /* codes of A and B, then their scales (GemmArgs.sa, .sb) */
    slot(k, k->f8_a);
    slot(k, k->f8_b);
    slot(k, k->f8_sa);
    slot(k, k->f8_sb);
    if (k->f8_stats >= 0) /* slot 4: A's row statistics (fp8.cuh), for the folded norm */
      slot(k, k->f8_stats);
  } else if (k->wq_bits) { /* gemm_wq reads the codes as B and the scales from slot 2 */
    slot(k, gen_tensor_for(k->G, k->gr->a));
    slot(k, k->wq_codes);
    slot(k, k->wq_scales);
  } else {
    slot(k, gen_tensor_for(k->G, k->gr->a));
    slot(k, gen_tensor_for(k->G, k->gr->b_nk ? k->gr->b_nk : k->gr->b_kn));
  }
  buf_printf(body, "struct Epi_@ {\n  const ffn::KArgs *a;\n");
  gen_epilogue(k, body);
  buf_puts(body, "};\n");
}

const char *gen_ctype(DType t) {
  switch (t) {
  case DT_BF16: return "ffn::bf16";
  case DT_F16: return "ffn::f16";
  case DT_F8E4M3: return "ffn::fp8e4m3";
  case DT_F8E5M2: return "ffn::fp8e5m2";
  default: return "float";
  }
}

/* The template's arguments after its tile sizes (S, STATS, the element type...): each template
 * orders them its own way (kernels/gemm_host.h). */
static void gemm_template_args(Kgen *k, const ffn_gemm_config *c, int stats, char *params, size_t len) {
  ffn_gemm_template_args(c, k->gr->streams, stats, gen_ctype(k->f8 ? k->f8 : k->gr->a->dtype), params, len);
}

void emit_gemm_entry(Kgen *k, const ffn_gemm_config *c, bool ext, int wq_mix, Buf *body) {
  Group *gr = k->gr;
  int64_t K = gr->a->shape.d[gr->a->shape.rank - 1].size;
  const char *tmpl = c->kind == FFN_GEMM_SM80   ? "gemm_sm80"
                     : c->kind == FFN_GEMM_SM90 || c->kind == FFN_GEMM_SM90T || c->kind == FFN_GEMM_SM90C ? "gemm_sm90"
                     : c->kind == FFN_GEMM_SM90P                             ? "gemm_sm90_persistent"
                     : c->kind == FFN_GEMM_WQ   ? "gemm_wq"
                     : c->kind == FFN_GEMM_WQD  ? (c->design ? "gemm_wqdl" : "gemm_wqd")
                                                : "gemm_simt";
  char params[160];
  bool f8_stats = k->f8 && k->f8_stats >= 0; /* the quantizer computed A's statistics */
  gemm_template_args(k, c, ext || f8_stats ? 0 : gr->stats, params, sizeof params);
  if (gr->b_kn) /* B [K, N] as the weight lies (gemm_sm90p.cuh: B_KN) */
    snprintf(params + strlen(params), sizeof params - strlen(params), ", true");
  if (wq_mix) /* B's codes turned into bf16 in shared memory (gemm_sm90.cuh, gemm_sm90p.cuh: WQ,
                 after the cluster of 1, or B as [N, K]) */
    snprintf(params + strlen(params), sizeof params - strlen(params), c->kind == FFN_GEMM_SM90P ? ", false, %d" : ", 1, %d",
             wq_mix);
  char epi[128];
  if (ext || f8_stats)
    snprintf(epi, sizeof epi, "ffn::WithRowStats<Epi_@, %d>{epi, %s}", gr->streams,
             f8_stats ? "(const float *)a.p[4]" : "a.rowstats");
  else
    snprintf(epi, sizeof epi, "epi");
  char extra[64] = "", qs[80] = ""; /* gemm_wq, gemm_wqd, gemm_sm90 WQ: the scales (slot 2), the i4 group length */
  if (c->kind == FFN_GEMM_WQ || c->kind == FFN_GEMM_WQD)
    snprintf(extra, sizeof extra, "(const float *)a.p[2], %d, ", k->wq_group);
  if (wq_mix)
    snprintf(qs, sizeof qs, "  g.qs = (const float *)a.p[2]; g.qg = %d;\n", k->wq_group);
  bool tma = ffn_gemm_tma(c); /* A's and B's tensor maps: the second argument */
  char cluster[40] = ""; /* compiled in, so that a plain cuLaunchKernel launches the clusters */
  if (ffn_gemm_cluster(c) > 1)
    snprintf(cluster, sizeof cluster, " __cluster_dims__(%d, 1, 1)", ffn_gemm_cluster(c));
  buf_printf(body,
             "extern \"C\" __global__ void __launch_bounds__(%d, %d)%s @_%s(const __grid_constant__ ffn::KArgs a%s) {\n"
             "  extern __shared__ __align__(128) char smem[];\n"
             "  ffn::pdl_entry();\n"
             "  ffn::GemmArgs g;\n"
             "  g.A = a.p[0]; g.B = a.p[1]; g.M = (int)a.m; g.N = %lld; g.K = %lld;\n"
             "  g.splits = a.splits; g.ws = a.ws; g.counters = a.counters; g.tma = %s;\n"
             "%s%s"
             "  const Epi_@ epi{&a};\n"
             "  ffn::%s<%s>(g, %s%s, smem);\n}\n",
             c->threads, c->min_blocks, cluster, c->name, tma ? ", const __grid_constant__ ffn::TmaMaps t" : "",
             (long long)k->ncols, (long long)(k->f8 ? K / 2 : K), tma ? "&t" : "nullptr",
             k->f8 ? "  g.sa = (const float *)a.p[2]; g.sb = (const float *)a.p[3];\n" : "", qs, tmpl, params, extra, epi);
}

/* The i4 weight-only product with the codes as wgmma's register operand (kernels/gemm_wqrs.cuh,
 * sm_90): c's tile of bm tokens x 128 merged columns, A by TMA (c's tensor map of A), the
 * codes by bulk copies, the row statistics and the wq kernels' epilogue functor in the kernel. */
void emit_wqrs_entry(Kgen *k, const ffn_gemm_config *c, Buf *body) {
  Group *gr = k->gr;
  int64_t K = gr->a->shape.d[gr->a->shape.rank - 1].size;
  buf_printf(body,
             "extern \"C\" __global__ void __launch_bounds__(%d, 1) @_%s(const __grid_constant__ ffn::KArgs a, "
             "const __grid_constant__ ffn::TmaMaps t) {\n"
             "  extern __shared__ __align__(128) char smem[];\n"
             "  ffn::pdl_entry();\n"
             "  ffn::GemmArgs g;\n"
             "  g.A = a.p[0]; g.B = a.p[1]; g.M = (int)a.m; g.N = %lld; g.K = %lld;\n"
             "  g.splits = a.splits; g.ws = a.ws; g.counters = a.counters; g.tma = &t;\n"
             "  g.qs = (const float *)a.p[2]; g.qg = %d;\n"
             "  const Epi_@ epi{&a};\n"
             "  ffn::gemm_wqrs<%d, %d, %d, %d>(g, epi, smem);\n}\n",
             c->threads, c->name, (long long)k->ncols, (long long)K, k->wq_group, c->bm, c->stages, gr->streams,
             gr->stats);
}

/* body with every '@' replaced by the kernel's name. */
void emit_named(Buf *out, const char *name, const char *body) {
  for (const char *p = body; *p; p++) {
    if (*p == '@')
      buf_puts(out, name);
    else
      buf_printf(out, "%c", *p);
  }
}

void emit_gemm_text(Kgen *k, const char *name, bool tc, const char *body) {
  Group *gr = k->gr;
  Gen *G = k->G;
  long long K = (long long)gr->a->shape.d[gr->a->shape.rank - 1].size;
  buf_printf(&G->src, "\n// kernel %s: GEMM, %d stream%s of %lld columns, K = %lld, %s; from %s:%d\n", name,
             gr->streams, gr->streams > 1 ? "s" : "", (long long)k->ncols, K,
             k->f8 ? dtype_name(k->f8) : k->wq_bits == 8 ? "i8 weights" : k->wq_bits == 4 ? "i4 weights" : tc ? "tensor cores" : "FMA",
             G->g->file ? G->g->file : "?", gr->mm->loc.line);
  emit_named(&G->src, name, body);
}

/* ---- rowwise groups ---- */

/* Rows in registers. A rowwise kernel's row loop is a template on its form (RowForm): TPR threads
 * per row, THREADS / TPR rows per block, grid-strided. The row is cut into NV chunks of VEC
 * elements (16 bytes of 16-bit values); thread `lane` of a row takes chunks lane, lane + TPR, ...
 * (CH of them), and holds each full-shaped operand's chunks as raw words (xr<slot>). With
 * `resident` they are read once per row (16 bytes a load, all in flight together) and every pass
 * over the row (sum of squares, the variance, the largest magnitude, the results) runs from
 * registers; else (rows too wide for the registers) each pass reads its chunks again (L1/L2).
 * Per-column operands (a norm's gain: xc<slot>) are read per chunk in each pass, from L1: held
 * across passes they cost the registers that let more rows be in flight (8B fp8 RMSNorm, the
 * form of two rows per block: 70 registers with the gain held, 54 without). Reductions stay
 * within a row's threads (ewise.cuh: row_sum, row_max): shuffles for a warp per row, named
 * barriers for more. Results are stored a chunk at a time (ewise.cuh: stv_, fp8.cuh: st_f8_codes).
 *
 * The forms: a block per row for few rows (decode: every thread of the block on the one row, as
 * before); for many, rows of at most 4 chunks per thread: a warp per row up to N = 1024
 * (16-bit), TPR = 128 and two rows per block at 4096. A row of more than 256 chunks also gets a
 * block of up to 1024 threads for the first ROWWISE_ONE_ROWS_MAX rows (decode), at most 4 chunks
 * a thread: its code is unrolled over 4 chunks, not 8-16 (one block runs it after a product has
 * evicted it from the caches, so its size is fetch time: kernels/NOTES.md, twenty-second
 * session), and its loads and conversions spread over four times the warps. */

enum { ROW_WIDE_CHUNKS = 4, ROW_RESIDENT_WORDS = 64 };
/* Up to ROWWISE_ONE_ROWS_MAX rows the 1024-thread form (where there is one), up to
 * ROWWISE_BLOCK_ROWS_MAX a block of 256 per row (the rows' latency decides), beyond, several rows
 * per block. */
enum { ROWWISE_ONE_ROWS_MAX = 16, ROWWISE_BLOCK_ROWS_MAX = 256, ROW_ONE_THREADS = 1024 };

static int pow2_at_least(int64_t x) {
  int p = 1;
  while (p < x && p < 1 << 30)
    p *= 2;
  return p;
}

int rowwise_forms(int64_t n, int *vec, RowForm forms[ROW_MAX_FORMS]) {
  *vec = n % 8 == 0 ? 8 : n % 4 == 0 ? 4 : n % 2 == 0 ? 2 : 1;
  int64_t nv = n / *vec;
  int tpr = pow2_at_least(nv), nf = 0;
  if (tpr > 256 && nv <= (int64_t)ROW_ONE_THREADS * ROW_WIDE_CHUNKS) {
    int one = tpr < ROW_ONE_THREADS ? tpr : ROW_ONE_THREADS;
    forms[nf++] = (RowForm){one, one, "_one", ROWWISE_ONE_ROWS_MAX};
  }
  tpr = tpr < 32 ? 32 : tpr > 256 ? 256 : tpr;
  int wide = pow2_at_least((nv + ROW_WIDE_CHUNKS - 1) / ROW_WIDE_CHUNKS);
  wide = wide < 32 ? 32 : wide > tpr ? tpr : wide;
  bool rows = !(wide == tpr && tpr == 256);
  forms[nf++] = (RowForm){tpr, tpr, "", rows ? ROWWISE_BLOCK_ROWS_MAX : 0};
  if (rows)
    forms[nf++] = (RowForm){256, wide, "_rows", 0};
  return nf;
}

static DType slot_dtype(Kgen *k, int sl) { return k->G->tensors[k->slot_tensor[sl]].dtype; }
static int chunk_words(Kgen *k, DType t) { return t == DT_F32 ? k->vec : k->vec > 1 ? k->vec / 2 : 1; }

/* Whether the words of every full-shaped operand of the group, at max_chunks chunks per thread,
 * fit in ROW_RESIDENT_WORDS registers: counted from the group's operands before any text is
 * generated. */
static bool rows_fit(Kgen *k) {
  Group *gr = k->gr;
  int words = 0;
  for (int i = 0; i < gr->nodes.len; i++) {
    Node *n = gr->nodes.items[i];
    if (n->op == OP_SLICE || n->op == OP_CONCAT) /* read at offsets, in every pass */
      continue;
    for (int j = 0; j < n->nargs; j++) {
      Node *o = n->args[j];
      bool seen = false;
      for (int p = 0; p < i && !seen; p++)
        for (int q = 0; q < ((Node *)gr->nodes.items[p])->nargs; q++)
          seen |= ((Node *)gr->nodes.items[p])->args[q] == o;
      for (int q = 0; q < j; q++)
        seen |= n->args[q] == o;
      const Shape *os = &o->shape;
      if (seen || o->group == gr->id || o->op == OP_SCALAR || !shape_eq(os, &k->full))
        continue;
      words += k->max_chunks * chunk_words(k, o->dtype);
    }
  }
  return words <= ROW_RESIDENT_WORDS;
}

/* Chunk u of the thread: v, and vl, the index its loads use: the last chunk for a lane past the
 * row's end, so that every load is in bounds. The loads come before the test that ends the loop
 * (NVVM may hoist the inline-asm loads above a branch: compute-sanitizer saw a gain read 16 bytes
 * past its end when the lanes past the row loaded behind the test). */
#define CHUNK_INDEX "const int v = u * TPR + lane, vl = v < NV ? v : NV - 1; (void)vl;"

/* Loads of chunk u (index vl) of the row (cols: per-column) operands in `slots` into xr<slot> /
 * xc<slot>: at word u * W of the thread's words, or per_chunk into a chunk's own. */
static void emit_chunk_loads(Kgen *k, Buf *out, uint64_t slots, bool cols, bool per_chunk, const char *indent) {
  for (int sl = 0; sl < k->nslots; sl++) {
    if (!(slots >> sl & 1) || (bool)(k->col_slots >> sl & 1) != cols)
      continue;
    DType t = slot_dtype(k, sl);
    int words = chunk_words(k, t), bytes = k->vec * (int)dtype_bytes(t, 1);
    if (per_chunk)
      buf_printf(out, "%sffn::u32 %s%d[%d];\n", indent, cols ? "xc" : "xr", sl, words);
    buf_printf(out, "%sffn::ld_words<%d, %s>(a->p[%d], %s * %dLL, &%s%d[%s]);\n", indent, bytes,
               k->nc_slots >> sl & 1 ? "true" : "false", sl, cols ? "vl" : "(row * NV + vl)", bytes, cols ? "xc" : "xr",
               sl, per_chunk ? "0" : arena_printf(k->G->g->arena, "u * %d", words));
  }
}

/* The resident words of the row operands (k->row_slots), every chunk of the thread. */
static void emit_resident_loads(Kgen *k, Buf *out) {
  if (!k->row_slots)
    return;
  for (int sl = 0; sl < k->nslots; sl++)
    if (k->row_slots >> sl & 1)
      buf_printf(out, "    ffn::u32 xr%d[CH * %d];\n", sl, chunk_words(k, slot_dtype(k, sl)));
  buf_puts(out, "#pragma unroll\n    for (int u = 0; u < CH; ++u) {\n      " CHUNK_INDEX "\n");
  emit_chunk_loads(k, out, k->row_slots, false, false, "      ");
  buf_puts(out, "    }\n");
}

/* A pass over the thread's chunks of the row: `before` per chunk (after its loads, unless the
 * words are resident), `elem` for each of its VEC elements (col, i: the element's column and
 * index; k: its place in the words), `after` per chunk. Reads the operands of k->pass_slots. */
static void emit_pass(Kgen *k, Buf *out, const char *before, const char *elem, const char *after) {
  buf_printf(out, "#pragma unroll%s\n    for (int u = 0; u < CH; ++u) {\n", k->resident ? "" : " 4");
  buf_puts(out, "      " CHUNK_INDEX "\n");
  if (!k->resident)
    emit_chunk_loads(k, out, k->pass_slots, false, true, "      ");
  emit_chunk_loads(k, out, k->pass_slots, true, true, "      ");
  buf_puts(out, "      if (CH * TPR != NV && v >= NV) break;\n");
  buf_puts(out, before ? before : "");
  buf_printf(out, "#pragma unroll\n      for (int e = 0; e < VEC; ++e) {\n"
                  "        const int col = v * VEC + e, k = %s; // k: the element's place in the row's words\n"
                  "        const long long i = row * %lldLL + col;\n        (void)col; (void)k; (void)i;\n",
             k->resident ? "u * VEC + e" : "e", (long long)k->ncols);
  buf_puts(out, elem ? elem : "");
  buf_puts(out, "      }\n");
  buf_puts(out, after ? after : "");
  buf_puts(out, "    }\n");
  k->pass_slots = 0;
}

static bool is_stat_or_norm(Op op) {
  return op == OP_RMS_RSTD || op == OP_LN_MEAN || op == OP_LN_RSTD || op == OP_RMSNORM || op == OP_LAYERNORM;
}

#define ELEM_INDENT "        "

/* x, the operand of statistic or norm n, computed in a pass of its own (its text into pass). It
 * may read the row's earlier statistics (row scope rs: the mean of dxhat * xhat in the RMSNorm
 * backward reads rstd), each pass then one more over the row. */
static const char *stat_operand(Kgen *k, Scope *rs, Node *n, Buf *pass) {
  Scope ps = {.kind = SC_ELEM, .parent = rs, .out = pass, .indent = ELEM_INDENT, .col = "col"};
  k->pass_slots = 0;
  const char *x = value(k, &ps, n->args[0]);
  memo_free(&ps.memo);
  return x;
}

/* The statistics of norm or statistic n: rstd<id> (and mean<id> for layernorm), one pass over
 * the row for the sum of squares, two for layernorm (the variance around the mean, as the
 * reference computes it), one for a mean alone (ln_mean). Returns id. */
static int emit_row_stats(Kgen *k, Scope *rs, Node *n, bool ln) {
  long long N = (long long)k->ncols;
  Buf *rowb = rs->out, pass = {0};
  const char *x = stat_operand(k, rs, n, &pass);
  int id = k->nvars++;
  char eps[64];
  literal(eps, sizeof eps, n->fval);
  buf_printf(&pass, ln ? ELEM_INDENT "s%d += %s;\n" : ELEM_INDENT "s%d += %s * %s;\n", id, x, x);
  buf_printf(rowb, "    float s%d = 0.f;\n", id);
  emit_pass(k, rowb, NULL, pass.s, NULL);
  buf_printf(rowb, "    s%d = ffn::row_sum<TPR, THREADS>(s%d, red);\n", id, id);
  buf_free(&pass);
  if (!ln) {
    buf_printf(rowb, "    const float rstd%d = 1.0f / sqrtf(s%d / %lld.0f + %s);\n", id, id, N, eps);
    return id;
  }
  buf_printf(rowb, "    const float mean%d = s%d / %lld.0f;\n", id, id, N);
  if (n->op == OP_LN_MEAN)
    return id;
  Buf pass2 = {0};
  const char *x2 = stat_operand(k, rs, n, &pass2);
  buf_printf(&pass2, ELEM_INDENT "const float d = %s - mean%d;\n" ELEM_INDENT "q%d += d * d;\n", x2, id, id);
  buf_printf(rowb, "    float q%d = 0.f;\n", id);
  emit_pass(k, rowb, NULL, pass2.s, NULL);
  buf_printf(rowb, "    q%d = ffn::row_sum<TPR, THREADS>(q%d, red);\n", id, id);
  buf_printf(rowb, "    const float rstd%d = 1.0f / sqrtf(q%d / %lld.0f + %s);\n", id, id, N, eps);
  buf_free(&pass2);
  return id;
}

/* Per-row code: the statistics first. A statistic's own value goes into row scope rs; a norm is
 * per element, so its statistics' names wait in the node (n->aux: rstd, mean) for norm_value. */
static void emit_row_part(Kgen *k, Scope *rs) {
  Arena *arena = k->G->g->arena;
  for (int i = 0; i < k->gr->nodes.len; i++) {
    Node *n = k->gr->nodes.items[i];
    if (!is_stat_or_norm(n->op))
      continue;
    bool ln = n->op == OP_LAYERNORM || n->op == OP_LN_MEAN || n->op == OP_LN_RSTD;
    int id = emit_row_stats(k, rs, n, ln);
    char *var = arena_printf(arena, "t%d", k->nvars++);
    if (n->op == OP_RMS_RSTD || n->op == OP_LN_RSTD)
      buf_printf(rs->out, "    const float %s = rstd%d;\n", var, id);
    else if (n->op == OP_LN_MEAN)
      buf_printf(rs->out, "    const float %s = mean%d;\n", var, id);
    else {
      char **st = n->aux = arena_alloc(arena, sizeof(char *) * 2);
      st[0] = arena_printf(arena, "rstd%d", id);
      st[1] = ln ? arena_printf(arena, "mean%d", id) : NULL;
      continue;
    }
    memo_put(&rs->memo, n->id, var);
  }
}

/* The group's norms, per element, first (their operands' slots before the stored tensors'). */
static void emit_norms(Kgen *k, Scope *es) {
  for (int i = 0; i < k->gr->nodes.len; i++) {
    Node *n = k->gr->nodes.items[i];
    if (n->op == OP_RMSNORM || n->op == OP_LAYERNORM)
      value(k, es, n);
  }
}

/* Starts a rowwise kernel: rows_fit decides whether its words are resident. */
static void begin_rowwise(Kgen *k, const RowForm *forms, int nforms) {
  int64_t nv = k->ncols / k->vec;
  int tpr = forms[0].tpr;
  for (int f = 1; f < nforms; f++)
    tpr = forms[f].tpr < tpr ? forms[f].tpr : tpr;
  k->max_chunks = (int)((nv + tpr - 1) / tpr);
  k->resident = rows_fit(k);
  k->row_slots = k->col_slots = k->nc_slots = k->pass_slots = 0;
}

/* The row loop (a template on the form) around the per-row code rowb and the passes after it
 * (passes), then the per-row stores (rstores); then an entry point per form. */
static void emit_row_loop(Kgen *k, const RowForm *forms, int nforms, const char *rowb, const char *passes,
                          const char *rstores, Buf *body) {
  long long N = (long long)k->ncols;
  buf_printf(body,
             "template <int THREADS, int TPR> __device__ __forceinline__ void @_row_loop(const ffn::KArgs *a, float *red) {\n"
             "  constexpr int VEC = %d, NV = %lld; // the row in NV chunks of VEC elements\n"
             "  constexpr int CH = (NV + TPR - 1) / TPR, RPB = THREADS / TPR; // chunks per thread, rows per block\n"
             "  const int lane = threadIdx.x %% TPR;\n  (void)red;\n",
             k->vec, N / k->vec);
  buf_puts(body, "  for (long long row0 = (long long)blockIdx.x * RPB; row0 < a->m; row0 += (long long)gridDim.x * RPB) {\n"
                 "    // a row past m (the last block's) reads the last row again and stores nothing\n"
                 "    const long long r = row0 + threadIdx.x / TPR, row = r < a->m ? r : a->m - 1;\n"
                 "    const bool live = r < a->m;\n    (void)live;\n");
  if (k->resident)
    emit_resident_loads(k, body);
  buf_puts(body, rowb ? rowb : "");
  buf_puts(body, passes ? passes : "");
  buf_puts(body, rstores ? rstores : "");
  buf_puts(body, "  }\n}\n");
  for (int f = 0; f < nforms; f++)
    buf_printf(body,
               "extern \"C\" __global__ void __launch_bounds__(%d, 1) @%s(const __grid_constant__ ffn::KArgs args) {\n"
               "  ffn::pdl_entry();\n  __shared__ float red[%d];\n  @_row_loop<%d, %d>(&args, red);\n}\n",
               forms[f].threads, forms[f].name, forms[f].threads / 32, forms[f].threads, forms[f].tpr);
}

void emit_rowwise_kernel(Kgen *k, const RowForm *forms, int nforms, Buf *body) {
  Buf rowb = {0}, elb = {0}, before = {0}, after = {0}, passes = {0}, rstores = {0};
  begin_rowwise(k, forms, nforms);
  Scope rs = {.kind = SC_ROW, .out = &rowb, .indent = "    ", .col = "col"};
  emit_row_part(k, &rs);
  Scope es = {.kind = SC_ELEM, .parent = &rs, .out = &elb, .indent = ELEM_INDENT, .col = "col"};
  k->pass_slots = 0;
  emit_norms(k, &es);
  /* values first, then the stored tensors' slots: a kernel's operands come before its results
   * in KArgs.p[] (PlanKernel.op relies on it) */
  for (int i = 0; i < k->gr->stores.len; i++) {
    Node *n = k->gr->stores.items[i];
    bool per_row = is_row_shaped(k, n);
    const char *v = per_row ? value(k, &rs, n) : value(k, &es, n);
    int sl = slot(k, gen_tensor_for(k->G, n));
    const char *ty = tname(n->dtype);
    if (per_row) {
      buf_printf(&rstores, "    if (lane == 0 && live) ffn::st_%s(a->p[%d], row, %s);\n", ty, sl, v);
      continue;
    }
    buf_printf(&before, "      float o%d[VEC];\n", i);
    buf_printf(&elb, ELEM_INDENT "o%d[e] = %s;\n", i, v);
    buf_printf(&after, "      if (live) ffn::stv_%s<VEC>(a->p[%d], row * %lldLL + v * VEC, o%d);\n", ty, sl,
               (long long)k->ncols, i);
  }
  emit_pass(k, &passes, before.s, elb.s, after.s);
  emit_row_loop(k, forms, nforms, rowb.s, passes.s, rstores.s, body);
  buf_free(&rowb);
  buf_free(&elb);
  buf_free(&before);
  buf_free(&after);
  buf_free(&passes);
  buf_free(&rstores);
  memo_free(&rs.memo);
  memo_free(&es.memo);
}

/* The rowwise kernel of a group whose one stored value n is read only as A of an fp8 product
 * (lower.c: f8_fused_consumer): instead of n it writes A's codes and row scales, the quantizer's
 * (kernels/fp8.cuh) rule applied to n as its storage type would hold it, so neither n nor a
 * quantizer pass goes through memory. The row's values are computed twice: once for the largest
 * magnitude, once for the codes (from the words in registers, or L1/L2 for rows too wide). */
void emit_rowwise_f8_kernel(Kgen *k, const RowForm *forms, int nforms, int codes, int scales, DType f8, Buf *body) {
  Node *n = k->gr->stores.items[0];
  Buf rowb = {0}, elb = {0}, amax = {0}, code = {0}, passes = {0}, after = {0};
  begin_rowwise(k, forms, nforms);
  Scope rs = {.kind = SC_ROW, .out = &rowb, .indent = "    ", .col = "col"};
  emit_row_part(k, &rs);
  Scope es = {.kind = SC_ELEM, .parent = &rs, .out = &elb, .indent = ELEM_INDENT, .col = "col"};
  k->pass_slots = 0;
  emit_norms(k, &es);
  const char *v = value(k, &es, n), *ty = tname(n->dtype);
  uint64_t slots = k->pass_slots;
  int sc = slot(k, codes), ss = slot(k, scales), e5m2 = f8 == DT_F8E5M2;
  buf_printf(&amax, "%s" ELEM_INDENT "amax = fmaxf(amax, fabsf(ffn::round_%s(%s)));\n", elb.s ? elb.s : "", ty, v);
  buf_printf(&code, "%s" ELEM_INDENT "o[e] = ffn::round_%s(%s);\n", elb.s ? elb.s : "", ty, v);
  buf_puts(&passes, "    float amax = 0.f;\n");
  emit_pass(k, &passes, NULL, amax.s, NULL);
  buf_printf(&passes, "    amax = ffn::row_max<TPR, THREADS>(amax, red);\n"
                      "    const float sc = ffn_f8_scale((double)amax, %d), rc = __frcp_rn(sc);\n"
                      "    if (lane == 0 && live) ffn::st_f32(a->p[%d], row, sc);\n", e5m2, ss);
  buf_printf(&after, "      if (live) ffn::st_f8_codes<VEC, %d>(a->p[%d], row * %lldLL + v * VEC, o, sc, rc);\n", e5m2, sc,
             (long long)k->ncols);
  k->pass_slots = slots;
  emit_pass(k, &passes, "      float o[VEC];\n", code.s, after.s);
  emit_row_loop(k, forms, nforms, rowb.s, passes.s, NULL, body);
  buf_free(&rowb);
  buf_free(&elb);
  buf_free(&amax);
  buf_free(&code);
  buf_free(&passes);
  buf_free(&after);
  memo_free(&rs.memo);
  memo_free(&es.memo);
}

/* ---- the whole program ---- */

void emit_prelude(Gen *G) {
  buf_printf(&G->src, "// generated by ffnc %s for %s, target sm_%d; do not edit\n", FFNC_VERSION,
             G->g->file ? G->g->file : "?", G->c->arch);
  buf_puts(&G->src, "// element-type codes shared with the host (ir/ir.h); op codes come from ops.def\n");
#define X(e, n, b, st, f) buf_printf(&G->src, "#define DT_%s %d\n", #e, DT_##e);
  FFN_DTYPES(X)
#undef X
  buf_puts(&G->src, "#include \"ewise.cuh\"\n#include \"gemm_sm80.cuh\"\n#include \"gemm_simt.cuh\"\n#include \"runtime.cuh\"\n");
  if (G->c->arch == 90)
    buf_puts(&G->src, "#include \"gemm_sm90.cuh\"\n#include \"gemm_sm90p.cuh\"\n");
  if (G->g->prec.type[PREC_WEIGHTS] != DT_NONE)
    buf_puts(&G->src, G->c->arch == 90 ? "#include \"gemm_wqdl.cuh\"\n#include \"gemm_wqrs.cuh\"\n"
                                       : "#include \"gemm_wqdl.cuh\"\n"); /* and gemm_wqd.cuh, gemm_wq.cuh */
  for (int i = 0; i < G->c->ngroups; i++)
    if (G->c->groups[i]->kind == GK_SINGLE) { /* a backward graph's sums over tokens */
      buf_puts(&G->src, G->c->arch == 90 ? "#include \"grad.cuh\"\n#include \"grad_sm90.cuh\"\n" : "#include \"grad.cuh\"\n");
      break;
    }
  DType mm = G->g->prec.type[PREC_MATMUL];
  if (mm == DT_F8E4M3 || mm == DT_F8E5M2)
    buf_puts(&G->src, "#include \"fp8.cuh\"\n");

}

