/* cuda.c: kernel groups -> CUDA C++ source and the Plan that runs it.
 *
 * Each group becomes one kernel, written as a small body of generated code plugged into a
 * device template from kernels/:
 *   GEMM groups: an epilogue functor for the matrix-product template (gemm_sm80.cuh for
 *     f16/bf16 with K % 8 == 0, gemm_simt.cuh otherwise), one __global__ function per tile
 *     configuration (decode / small / prefill), chosen by the runtime from M;
 *   rowwise groups: a per-row loop (statistics first when the group holds a norm).
 * Kernels whose generated text is identical (the same block inlined in every layer) are
 * emitted once. Tensor pointers reach a kernel through KArgs.p[], in the order the launch
 * step lists them; everything else (N, K, eps...) is a compile-time constant.
 */
#include "codegen.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm_host.h"
#include "passes/memplan.h"

/* ---- growable arrays ---- */

#define GROW(arr, len, cap)                                       \
  do {                                                            \
    if ((len) == (cap)) {                                         \
      (cap) = (cap) ? (cap) * 2 : 16;                             \
      void *p_ = realloc((arr), sizeof(*(arr)) * (size_t)(cap));  \
      if (!p_)                                                    \
        abort();                                                  \
      (arr) = p_;                                                 \
    }                                                             \
  } while (0)

typedef struct {
  char *body; /* generated text without the kernel's name */
  int kernel;
} Dedup;

typedef struct {
  Compile *c;
  Graph *g;
  int *tensor_of; /* node id -> plan tensor, -1 */
  PlanTensor *tensors;
  int nt, capt;
  PrepStep *prep;
  int nprep, capprep;
  PlanKernel *kernels;
  int nk, capk;
  PlanStep *steps;
  int nsteps, capsteps;
  Dedup *dedup;
  int ndedup, capdedup;
  Buf src;
  int rc;
} Gen;

static int fail(Gen *G, const Node *n, const char *fmt, const char *arg) {
  char msg[256];
  snprintf(msg, sizeof msg, fmt, arg);
  if (n && n->loc.line)
    diag_error(G->c->diags, G->c->src, n->loc, "%s", msg);
  else
    diag_plain(G->c->diags, "%s", msg);
  G->rc = -1;
  return -1;
}

static const char *tname(DType t) { /* storage suffix of ld_/st_ helpers */
  switch (t) {
  case DT_F32: return "f32";
  case DT_BF16: return "bf16";
  case DT_F16: return "f16";
  default: return NULL;
  }
}

/* ---- tensors ---- */

static int new_tensor(Gen *G, PlanTensorKind kind, const Node *n) {
  GROW(G->tensors, G->nt, G->capt);
  PlanTensor *t = &G->tensors[G->nt];
  *t = (PlanTensor){.kind = kind, .dtype = n->dtype, .rank = n->shape.rank, .first = -1, .last = -1};
  memcpy(t->dims, n->shape.d, sizeof(Dim) * (size_t)n->shape.rank);
  return G->nt++;
}

static int prep_step(Gen *G, Node *n);

/* The plan tensor holding node n's value (created on first use). */
static int tensor_for(Gen *G, Node *n) {
  if (G->tensor_of[n->id] >= 0)
    return G->tensor_of[n->id];
  int t;
  if (n->op == OP_INPUT) {
    t = new_tensor(G, PT_INPUT, n);
    G->tensors[t].index = (int)n->ival[0];
    G->tensors[t].name = n->name;
  } else if (n->op == OP_WEIGHT) {
    t = new_tensor(G, PT_WEIGHT, n);
    G->tensors[t].name = n->name;
  } else if (ir_is_const(n)) {
    t = prep_step(G, n);
  } else {
    t = new_tensor(G, PT_SCRATCH, n);
  }
  G->tensor_of[n->id] = t;
  return t;
}

/* A load-time step computing const node n; returns its tensor. */
static int prep_step(Gen *G, Node *n) {
  int args[8];
  if (n->nargs > 8)
    return fail(G, n, "a load-time %s with more than 8 operands is not supported", op_info[n->op].name);
  for (int i = 0; i < n->nargs; i++) {
    args[i] = tensor_for(G, n->args[i]);
    if (args[i] < 0)
      return -1;
  }
  switch (n->op) {
  case OP_SCALAR:
  case OP_TRANSPOSE:
  case OP_SLICE:
  case OP_CONCAT:
  case OP_ROWSUM:
  case OP_MATMUL:
    break;
  case OP_INTERLEAVE:
    if (n->nargs != 1)
      return fail(G, n, "a load-time %s of several operands is not supported", "interleave");
    break;
  default:
    if (!is_elementwise(n) || !tname(n->dtype))
      return fail(G, n, "computing %s at load time is not supported", op_info[n->op].name);
  }
  if (n->op == OP_MATMUL && (n->args[0]->shape.rank > 2))
    return fail(G, n, "a load-time matrix product of rank > 2 is not supported%s", "");
  /* the prep kernels compute in double and store f32/f16/bf16; slices and concatenations are
   * byte copies of any type */
  if (!tname(n->dtype) && n->op != OP_SLICE && n->op != OP_CONCAT)
    return fail(G, n, "computing %s values at load time is not supported", dtype_name(n->dtype));
  int t = new_tensor(G, PT_DERIVED, n);
  GROW(G->prep, G->nprep, G->capprep);
  PrepStep *s = &G->prep[G->nprep++];
  *s = (PrepStep){.op = n->op, .out = t, .nargs = n->nargs, .ival = {n->ival[0], n->ival[1]}, .fval = n->fval};
  memcpy(s->args, args, sizeof(int) * (size_t)n->nargs);
  return t;
}

/* ---- kernel bodies ---- */

/* Per-group state while generating one kernel. */
typedef struct {
  Gen *G;
  Group *gr;
  int slot_tensor[30]; /* KArgs.p[i] -> plan tensor */
  int nslots;
  char **name;         /* node id -> local variable name (current scope chain) */
  int nvars;
  Shape full;          /* the group's element shape */
  int64_t ncols;       /* its last dim */
} Kgen;

static int slot(Kgen *k, int tensor) {
  for (int i = 0; i < k->nslots; i++)
    if (k->slot_tensor[i] == tensor)
      return i;
  if (k->nslots == 30) {
    fail(k->G, NULL, "a kernel reads more than 30 tensors; split the expression%s", "");
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
    char t[64];
    snprintf(t, sizeof t, "%.9g", (double)f);
    bool point = strpbrk(t, ".e") != NULL;
    snprintf(buf, len, "%s%sf", t, point ? "" : ".0");
  }
}

typedef enum { SC_ROW, SC_ELEM } ScopeKind;

/* A scope of generated code: per row, or per element (inside the column loop). */
typedef struct Scope {
  ScopeKind kind;
  struct Scope *parent; /* where per-row values live, for an element scope */
  Buf *out;
  const char *indent;
  char **memo;          /* node id -> variable in this scope */
  const char *col;      /* column index expression */
  int line;             /* the last #line emitted into out */
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
  if (s->memo[o->id])
    return s->memo[o->id];
  if (o->op == OP_SCALAR) {
    char lit[64];
    literal(lit, sizeof lit, o->fval);
    return s->memo[o->id] = arena_strdup(g->arena, lit);
  }
  int t = tensor_for(k->G, o);
  const char *ty = tname(o->dtype);
  if (t < 0 || !ty) {
    fail(k->G, o, "reading %s tensors in a kernel is not supported", dtype_name(o->dtype));
    return "0.f";
  }
  int sl = slot(k, t);
  char idx[96];
  const Shape *os = &o->shape;
  bool full = shape_eq(os, &k->full), scalar = shape_is_static(os) && shape_static_numel(os) == 1;
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
  buf_printf(s->out, "%sconst float %s = ffn::ld_%s(a->p[%d], %s);\n", s->indent, var, ty, sl, idx);
  return s->memo[o->id] = var;
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

/* Variable holding member n's value in scope s (emitting its computation if needed). Members
 * that are statistics or norms are set up by the group's generator before this is called. */
static const char *value(Kgen *k, Scope *s, Node *n) {
  Graph *g = k->G->g;
  if (n->group != k->gr->id)
    return load(k, s, n);
  if (s->memo[n->id])
    return s->memo[n->id];
  if (s->parent && s->parent->memo[n->id]) /* a per-row value (a statistic, say) */
    return s->parent->memo[n->id];
  if (s->kind == SC_ELEM && is_row_shaped(k, n) && s->parent)
    return value(k, s->parent, n);
  const char *args[3];
  for (int i = 0; i < n->nargs && i < 3 && n->op != OP_SLICE; i++)
    args[i] = value(k, s, n->args[i]);
  char *var = arena_printf(g->arena, "t%d", k->nvars++);
  char expr[512];
  if (op_info[n->op].cls == OPC_UNARY) {
    const char *fmt = unary_fmt(n);
    if (n->op == OP_SQUARE)
      snprintf(expr, sizeof expr, fmt, args[0], args[0]);
    else
      snprintf(expr, sizeof expr, fmt, args[0]);
  } else if (op_info[n->op].cls == OPC_BINARY) {
    snprintf(expr, sizeof expr, "%s(%s, %s)", binary_op(n->op), args[0], args[1]);
  } else if (n->op == OP_SLICE) {
    /* reads its operand (in memory) at a column offset */
    Node *o = n->args[0];
    int t = tensor_for(k->G, o);
    int sl = slot(k, t);
    int64_t ld = o->shape.d[o->shape.rank - 1].size;
    snprintf(expr, sizeof expr, "ffn::ld_%s(a->p[%d], row * %lldLL + %lld + %s)", tname(o->dtype), sl, (long long)ld,
             (long long)n->ival[0], s->col);
  } else {
    fail(k->G, n, "internal error: %s reached the elementwise generator", op_info[n->op].name);
    return "0.f";
  }
  emit_line(k, s, n);
  buf_printf(s->out, "%sconst float %s = %s;\n", s->indent, var, expr);
  return s->memo[n->id] = var;
}

/* Stores of the group's stored members, given their variables in element scope `es` (or, for
 * per-row members, in row scope `rs`). */
static void emit_stores_rowwise(Kgen *k, Scope *es, Scope *rs, Buf *out, const char *indent) {
  /* values first, then the stored tensors' slots: a kernel's operands come before its results
   * in KArgs.p[] (PlanKernel.op relies on it) */
  for (int i = 0; i < k->gr->stores.len; i++) {
    Node *n = k->gr->stores.items[i];
    const char *v = is_row_shaped(k, n) ? value(k, rs, n) : value(k, es, n);
    int sl = slot(k, tensor_for(k->G, n));
    const char *ty = tname(n->dtype);
    if (is_row_shaped(k, n))
      buf_printf(out, "%sif (threadIdx.x == 0) ffn::st_%s(a->p[%d], row, %s);\n", indent, ty, sl, v);
    else
      buf_printf(out, "%sffn::st_%s(a->p[%d], i, %s);\n", indent, ty, sl, v);
  }
}

static char **new_memo(Gen *G) { return arena_alloc(G->g->arena, sizeof(char *) * (size_t)(G->g->next_id + 1)); }

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

static void gen_epilogue(Kgen *k, Buf *out) {
  Group *gr = k->gr;
  Gen *G = k->G;
  Buf rowb = {0}, elb = {0};
  Scope rs = {SC_ROW, NULL, &rowb, "    ", new_memo(G), "col", 0};
  Scope es = {SC_ELEM, &rs, &elb, "        ", new_memo(G), "(col + e)", 0};
  bool n_even = k->ncols % 2 == 0;
  /* the stream values, and the statistics of A's rows */
  for (int s = 0; s < gr->streams; s++) {
    char *v = arena_printf(G->g->arena, "v[%d][e]", s);
    es.memo[gr->stream[s]->id] = v;
  }
  for (int i = 0; i < gr->nodes.len; i++) {
    Node *n = gr->nodes.items[i];
    if (n->op == OP_RMS_RSTD || n->op == OP_LN_MEAN || n->op == OP_LN_RSTD) {
      char expr[256], *var = arena_printf(G->g->arena, "t%d", k->nvars++);
      emit_line(k, &rs, n);
      buf_printf(&rowb, "    const float %s = %s;\n", var, stat_expr(k, n, expr, sizeof expr));
      rs.memo[n->id] = var;
    }
  }
  /* compute every stored member (and what it needs), element by element */
  Buf stores = {0};
  for (int i = 0; i < gr->stores.len; i++) {
    Node *n = gr->stores.items[i];
    const char *ty = tname(n->dtype);
    if (!ty) {
      fail(G, n, "storing %s values is not supported by the GPU code generator yet", dtype_name(n->dtype));
      continue;
    }
    /* the value first, then the stored tensor's slot: operands come before results */
    const char *v = is_row_shaped(k, n) ? value(k, &rs, n) : value(k, &es, n);
    int sl = slot(k, tensor_for(G, n));
    if (is_row_shaped(k, n)) {
      buf_printf(&stores, "    if (col == 0) ffn::st_%s(a->p[%d], row, %s);\n", ty, sl, v);
      continue;
    }
    buf_printf(&elb, "        o%d[e] = %s;\n", i, v);
    if (n_even)
      buf_printf(&stores,
                 "    if (ncols == 2) ffn::st2_%s(a->p[%d], base, o%d[0], o%d[1]);\n"
                 "    else ffn::st_%s(a->p[%d], base, o%d[0]);\n",
                 ty, sl, i, i, ty, sl, i);
    else
      buf_printf(&stores, "    for (int e = 0; e < ncols; ++e) ffn::st_%s(a->p[%d], base + e, o%d[e]);\n", ty, sl, i);
  }
  buf_printf(out,
             "  __device__ __forceinline__ void operator()(int row, int col, int ncols, const float (&v)[%d][2],\n"
             "                                             float rsum, float rsumsq) const {\n"
             "    (void)rsum; (void)rsumsq;\n"
             "    const long long base = (long long)row * %lldLL + col;\n",
             gr->streams, (long long)k->ncols);
  buf_puts(out, rowb.s ? rowb.s : "");
  for (int i = 0; i < gr->stores.len; i++)
    buf_printf(out, "    float o%d[2] = {0.f, 0.f};\n", i);
  buf_puts(out, "#pragma unroll\n    for (int e = 0; e < 2; ++e) {\n      if (e < ncols) {\n"
                "        const long long i = base + e;\n        (void)i;\n");
  buf_puts(out, elb.s ? elb.s : "");
  buf_puts(out, "      }\n    }\n");
  buf_puts(out, stores.s ? stores.s : "");
  buf_puts(out, "  }\n");
  buf_free(&rowb);
  buf_free(&elb);
  buf_free(&stores);
}

/* ---- kernels and dedup ---- */

/* The kernel with this generated text: an existing one (*is_new false) or a new one. */
static int add_kernel(Gen *G, const char *body, PlanKernel *pk, bool *is_new) {
  *is_new = false;
  for (int i = 0; i < G->ndedup; i++)
    if (strcmp(G->dedup[i].body, body) == 0)
      return G->dedup[i].kernel;
  GROW(G->kernels, G->nk, G->capk);
  int idx = G->nk++;
  G->kernels[idx] = *pk;
  GROW(G->dedup, G->ndedup, G->capdedup);
  G->dedup[G->ndedup++] = (Dedup){strdup(body), idx};
  *is_new = true;
  return idx;
}

static void add_step(Gen *G, int kernel, Kgen *k, const Shape *rows_of) {
  GROW(G->steps, G->nsteps, G->capsteps);
  PlanStep *s = &G->steps[G->nsteps++];
  *s = (PlanStep){.kind = STEP_LAUNCH, .kernel = kernel, .nargs = k->nslots};
  memcpy(s->args, k->slot_tensor, sizeof(int) * (size_t)k->nslots);
  s->nrowdims = rows_of->rank ? rows_of->rank - 1 : 0;
  memcpy(s->rowdims, rows_of->d, sizeof(Dim) * (size_t)s->nrowdims);
}

static void gen_gemm(Gen *G, Group *gr) {
  Kgen k = {.G = G, .gr = gr, .full = gr->shape};
  k.ncols = gr->shape.d[gr->shape.rank - 1].size;
  DType t = gr->a->dtype;
  int64_t K = gr->a->shape.d[gr->a->shape.rank - 1].size;
  slot(&k, tensor_for(G, gr->a));
  slot(&k, tensor_for(G, gr->b_nk));
  Buf body = {0};
  buf_printf(&body, "struct Epi_@ {\n  const ffn::KArgs *a;\n");
  gen_epilogue(&k, &body);
  buf_puts(&body, "};\n");
  /* tensor cores for 16-bit types with 16-byte rows; f32 (and odd K) on the FMA path. On sm_90
   * the wgmma kernels take M > 64; at decode sizes the mma.sync ones are as fast or faster
   * (kernels/NOTES.md), so both kinds are compiled and the runtime picks by M. */
  bool tc = (t == DT_BF16 || t == DT_F16) && K % 8 == 0;
  const char *ctype = t == DT_BF16 ? "ffn::bf16" : t == DT_F16 ? "ffn::f16" : "float";
  PlanKernel pk = {.kind = KK_GEMM, .n = k.ncols, .k = K, .streams = gr->streams, .splittable = tc, .op = OP_COUNT};
  if (gr->nodes.len == 1 && gr->stores.len == 1 && gr->stores.items[0] == gr->mm)
    pk.op = OP_MATMUL; /* slots: A, B, the product */
  int ncfg;
  const ffn_gemm_config *table = ffn_gemm_configs(&ncfg);
  for (int i = 0; i < ncfg && pk.nvariants < 6; i++) {
    const ffn_gemm_config *c = &table[i];
    bool hopper = G->c->arch == 90;
    bool small = c->max_m > 0 && c->max_m <= 64;
    /* (FFN_GEMM_SM90P, the persistent kernels, ran faster in isolation but made the whole
     * Llama-8B sublayer 8.6% slower at 8192 tokens: bench/results/bench_persistent_trial.txt.
     * Not used until that is understood.) */
    bool use = !tc ? c->kind == FFN_GEMM_SIMT
                   : hopper ? (c->kind == FFN_GEMM_SM80 && small) || (c->kind == FFN_GEMM_SM90 && !small)
                            : c->kind == FFN_GEMM_SM80;
    if (!use)
      continue;
    const char *tmpl = c->kind == FFN_GEMM_SM80    ? "gemm_sm80"
                       : c->kind == FFN_GEMM_SM90  ? "gemm_sm90"
                       : c->kind == FFN_GEMM_SM90P ? "gemm_sm90_persistent"
                                                   : "gemm_simt";
    /* for the largest M every column of tiles would recompute A's row statistics (about 10% of
     * the GEMM, kernels/NOTES.md): ffn_row_stats computes them once, just before. Up to 512
     * rows the extra launch costs more than it saves (measured: 128 tokens 3-7% slower). */
    bool ext = tc && c->max_m == 0 && gr->stats > 0;
    int stats = ext ? 0 : gr->stats;
    char params[160];
    if (c->kind == FFN_GEMM_SM80)
      snprintf(params, sizeof params, "%d, %d, %d, %d, %d, %d, %d, %d, %s", c->bm, c->bn, c->bk, c->wm, c->wn,
               c->stages, gr->streams, stats, ctype);
    else if (c->kind == FFN_GEMM_SM90)
      snprintf(params, sizeof params, "%d, %d, %d, %d, %d, %d, %s, %d, %d", c->bm, c->bn, c->bk, c->stages,
               gr->streams, stats, ctype, c->bm / c->wm, c->min_blocks);
    else if (c->kind == FFN_GEMM_SM90P) /* ping-pong consumers (wm == bm) */
      snprintf(params, sizeof params, "%d, %d, %d, %d, %d, %d, %s, %s", c->bm, c->bn, c->bk, c->stages, gr->streams,
               stats, ctype, c->wm == c->bm ? "true" : "false");
    else
      snprintf(params, sizeof params, "%d, %d, %d, %d, %d, %d, %d, %s", c->bm, c->bn, c->bk, c->wm, c->wn,
               gr->streams, stats, ctype);
    char epi[128];
    if (ext)
      snprintf(epi, sizeof epi, "ffn::WithRowStats<Epi_@, %d>{epi, a.rowstats}", gr->streams);
    else
      snprintf(epi, sizeof epi, "epi");
    buf_printf(&body,
               "extern \"C\" __global__ void __launch_bounds__(%d, %d) @_%s(const __grid_constant__ ffn::KArgs a) {\n"
               "  extern __shared__ __align__(128) char smem[];\n"
               "  ffn::GemmArgs g;\n"
               "  g.A = a.p[0]; g.B = a.p[1]; g.M = (int)a.m; g.N = %lld; g.K = %lld;\n"
               "  g.splits = a.splits; g.ws = a.ws; g.counters = a.counters;\n"
               "  const Epi_@ epi{&a};\n"
               "  ffn::%s<%s>(g, %s, smem);\n}\n",
               c->threads, c->min_blocks, c->name, (long long)k.ncols, (long long)K, tmpl, params, epi);
    KernelVariant *v = &pk.variants[pk.nvariants++];
    *v = (KernelVariant){.func = NULL, .threads = c->threads, .smem = (int)ffn_gemm_smem_bytes(c), .max_m = c->max_m,
                         .cfg = *c, .ext_stats = ext};

  }
  bool is_new;
  int kernel = add_kernel(G, body.s, &pk, &is_new);
  if (is_new) { /* name it and emit it */
    char name[32];
    snprintf(name, sizeof name, "k%d", kernel);
    buf_printf(&G->src, "\n// kernel %s: GEMM, %d stream%s of %lld columns, K = %lld, %s; from %s:%d\n", name,
               gr->streams, gr->streams > 1 ? "s" : "", (long long)k.ncols, (long long)K,
               tc ? "tensor cores" : "FMA", G->g->file ? G->g->file : "?", gr->mm->loc.line);
    for (const char *p = body.s; *p; p++) {
      if (*p == '@')
        buf_puts(&G->src, name);
      else
        buf_printf(&G->src, "%c", *p);
    }
    for (int v = 0; v < pk.nvariants; v++)
      G->kernels[kernel].variants[v].func = arena_printf(G->g->arena, "%s_%s", name, pk.variants[v].cfg.name);
  }
  add_step(G, kernel, &k, &gr->a->shape);
  buf_free(&body);
}

/* ---- rowwise groups ---- */

static bool is_stat_or_norm(Op op) {
  return op == OP_RMS_RSTD || op == OP_LN_MEAN || op == OP_LN_RSTD || op == OP_RMSNORM || op == OP_LAYERNORM;
}

static void gen_rowwise(Gen *G, Group *gr) {
  Kgen k = {.G = G, .gr = gr, .full = gr->shape};
  k.ncols = gr->shape.rank ? gr->shape.d[gr->shape.rank - 1].size : 1;
  if (gr->shape.rank && gr->shape.d[gr->shape.rank - 1].sym >= 0) {
    fail(G, gr->nodes.items[0], "a rowwise kernel over the dynamic dim %s is not supported",
         G->g->dims[gr->shape.d[gr->shape.rank - 1].sym].name);
    return;
  }
  long long N = (long long)k.ncols;
  Buf body = {0}, rowb = {0}, elb = {0};
  Scope rs = {SC_ROW, NULL, &rowb, "    ", new_memo(G), "col", 0};
  /* statistics first: one pass (two for layernorm) over the row per statistic */
  for (int i = 0; i < gr->nodes.len; i++) {
    Node *n = gr->nodes.items[i];
    if (!is_stat_or_norm(n->op))
      continue;
    Buf pass = {0};
    Scope ps = {SC_ELEM, NULL, &pass, "      ", new_memo(G), "col", 0};
    const char *x = value(&k, &ps, n->args[0]);
    int id = k.nvars++;
    bool ln = n->op == OP_LAYERNORM || n->op == OP_LN_MEAN || n->op == OP_LN_RSTD;
    char eps[64];
    literal(eps, sizeof eps, n->fval);
    buf_printf(&rowb, "    float s%d = 0.f;\n    for (int col = threadIdx.x; col < %lld; col += blockDim.x) {\n"
                      "      const long long i = row * %lldLL + col;\n      (void)i;\n%s      s%d += %s%s%s;\n    }\n"
                      "    s%d = ffn::block_sum(s%d, red);\n",
               id, N, N, pass.s ? pass.s : "", id, x, ln ? "" : " * ", ln ? "" : x, id, id);
    if (ln) {
      /* second pass for the variance around the mean, as the reference computes it */
      Buf pass2 = {0};
      Scope ps2 = {SC_ELEM, NULL, &pass2, "      ", new_memo(G), "col", 0};
      const char *x2 = value(&k, &ps2, n->args[0]);
      buf_printf(&rowb, "    const float mean%d = s%d / %lld.0f;\n    float q%d = 0.f;\n"
                        "    for (int col = threadIdx.x; col < %lld; col += blockDim.x) {\n"
                        "      const long long i = row * %lldLL + col;\n      (void)i;\n%s"
                        "      const float d = %s - mean%d;\n      q%d += d * d;\n    }\n"
                        "    q%d = ffn::block_sum(q%d, red);\n"
                        "    const float rstd%d = 1.0f / sqrtf(q%d / %lld.0f + %s);\n",
                 id, id, N, id, N, N, pass2.s ? pass2.s : "", x2, id, id, id, id, id, id, N, eps);
      buf_free(&pass2);
    } else {
      buf_printf(&rowb, "    const float rstd%d = 1.0f / sqrtf(s%d / %lld.0f + %s);\n", id, id, N, eps);
    }
    buf_free(&pass);
    /* the statistic's own value */
    char *var = arena_printf(G->g->arena, "t%d", k.nvars++);
    if (n->op == OP_RMS_RSTD || n->op == OP_LN_RSTD)
      buf_printf(&rowb, "    const float %s = rstd%d;\n", var, id);
    else if (n->op == OP_LN_MEAN)
      buf_printf(&rowb, "    const float %s = mean%d;\n", var, id);
    else {
      /* a norm: per element, computed in the element scope below */
      char *rstd = arena_printf(G->g->arena, "rstd%d", id), *mean = ln ? arena_printf(G->g->arena, "mean%d", id) : NULL;
      n->aux = arena_alloc(G->g->arena, sizeof(char *) * 2);
      ((char **)n->aux)[0] = rstd;
      ((char **)n->aux)[1] = mean;
      continue;
    }
    rs.memo[n->id] = var;
  }
  Scope es = {SC_ELEM, &rs, &elb, "      ", new_memo(G), "col", 0};
  /* norms are per element: x * rstd * g (+ b), or (x - mean) * rstd * g (+ b) */
  for (int i = 0; i < gr->nodes.len; i++) {
    Node *n = gr->nodes.items[i];
    if (n->op != OP_RMSNORM && n->op != OP_LAYERNORM)
      continue;
    char **st = n->aux;
    const char *x = value(&k, &es, n->args[0]), *gain = value(&k, &es, n->args[1]);
    const char *bias = n->nargs == 3 ? value(&k, &es, n->args[2]) : NULL;
    char *var = arena_printf(G->g->arena, "t%d", k.nvars++);
    emit_line(&k, &es, n);
    if (st[1])
      buf_printf(&elb, "      const float %s = (%s - %s) * %s * %s%s%s;\n", var, x, st[1], st[0], gain, bias ? " + " : "",
                 bias ? bias : "");
    else
      buf_printf(&elb, "      const float %s = %s * %s * %s%s%s;\n", var, x, st[0], gain, bias ? " + " : "",
                 bias ? bias : "");
    es.memo[n->id] = var;
  }
  Buf stores = {0};
  emit_stores_rowwise(&k, &es, &rs, &stores, "      ");
  int threads = N >= 256 ? 256 : N >= 128 ? 128 : N >= 64 ? 64 : 32;
  buf_printf(&body,
             "extern \"C\" __global__ void __launch_bounds__(%d) @(const __grid_constant__ ffn::KArgs args) {\n"
             "  __shared__ float red[64];\n  (void)red;\n  const ffn::KArgs *a = &args;\n"
             "  for (long long row = blockIdx.x; row < a->m; row += gridDim.x) {\n%s"
             "    for (int col = threadIdx.x; col < %lld; col += blockDim.x) {\n"
             "      const long long i = row * %lldLL + col;\n      (void)i;\n%s%s"
             "    }\n  }\n}\n",
             threads, rowb.s ? rowb.s : "", N, N, elb.s ? elb.s : "", stores.s ? stores.s : "");
  PlanKernel pk = {.kind = KK_ROWWISE, .nvariants = 1, .n = N, .op = OP_COUNT};
  if (gr->nodes.len == 1 && gr->stores.len == 1)
    pk.op = ((Node *)gr->nodes.items[0])->op;
  pk.variants[0] = (KernelVariant){.threads = threads};
  pk.variants[0].cfg.name = "rowwise";
  bool is_new;
  int kernel = add_kernel(G, body.s, &pk, &is_new);
  if (is_new) {
    char name[32];
    snprintf(name, sizeof name, "k%d", kernel);
    buf_printf(&G->src, "\n// kernel %s: rowwise over [%s, %lld]\n", name, "M", N);
    for (const char *p = body.s; *p; p++) {
      if (*p == '@')
        buf_puts(&G->src, name);
      else
        buf_printf(&G->src, "%c", *p);
    }
    G->kernels[kernel].variants[0].func = arena_printf(G->g->arena, "%s", name);
  }
  add_step(G, kernel, &k, &gr->shape);
  buf_free(&body);
  buf_free(&rowb);
  buf_free(&elb);
  buf_free(&stores);
}

/* ---- the whole program ---- */

static void emit_prelude(Gen *G) {
  buf_printf(&G->src, "// generated by ffnc %s for %s, target sm_%d; do not edit\n", FFNC_VERSION,
             G->g->file ? G->g->file : "?", G->c->arch);
  buf_puts(&G->src, "// element-type codes shared with the host (ir/ir.h); op codes come from ops.def\n");
#define X(e, n, b, st, f) buf_printf(&G->src, "#define DT_%s %d\n", #e, DT_##e);
  FFN_DTYPES(X)
#undef X
  buf_puts(&G->src, "#include \"ewise.cuh\"\n#include \"gemm_sm80.cuh\"\n#include \"gemm_simt.cuh\"\n#include \"prep.cuh\"\n");
  if (G->c->arch == 90)
    buf_puts(&G->src, "#include \"gemm_sm90.cuh\"\n");
}

static int plan_outputs(Gen *G) {
  /* outputs computed by a kernel are written straight into the caller's buffer; an output
   * that is an input, a weight or another output's value is a copy at the end */
  Graph *g = G->g;
  for (int i = 0; i < g->noutputs; i++) {
    Node *n = g->outputs[i].node;
    if (n->group >= 0 && G->tensor_of[n->id] < 0) {
      int t = new_tensor(G, PT_OUTPUT, n);
      G->tensors[t].index = i;
      G->tensors[t].name = g->outputs[i].name;
      G->tensor_of[n->id] = t;
    }
  }
  return 0;
}

static void plan_copies(Gen *G) {
  Graph *g = G->g;
  for (int i = 0; i < g->noutputs; i++) {
    Node *n = g->outputs[i].node;
    int src = tensor_for(G, n);
    if (src < 0)
      continue;
    if (G->tensors[src].kind == PT_OUTPUT && G->tensors[src].index == i)
      continue;
    int dst = new_tensor(G, PT_OUTPUT, n);
    G->tensors[dst].index = i;
    G->tensors[dst].name = g->outputs[i].name;
    GROW(G->steps, G->nsteps, G->capsteps);
    G->steps[G->nsteps++] = (PlanStep){.kind = STEP_COPY, .src = src, .dst = dst, .kernel = -1};
  }
}

int codegen_cuda(Compile *c, Plan **out) {
  Graph *g = c->g;
  Gen G = {.c = c, .g = g};
  G.tensor_of = malloc(sizeof(int) * (size_t)(g->next_id + 1));
  if (!G.tensor_of)
    abort();
  for (int i = 0; i <= g->next_id; i++)
    G.tensor_of[i] = -1;
  emit_prelude(&G);
  for (int i = 0; i < g->nodes.len; i++) /* every input, used or not, is part of the interface */
    if (GRAPH_NODE(g, i)->op == OP_INPUT)
      tensor_for(&G, GRAPH_NODE(g, i));
  plan_outputs(&G);
  for (int i = 0; i < c->ngroups && G.rc == 0; i++) {
    if (c->groups[i]->kind == GK_GEMM)
      gen_gemm(&G, c->groups[i]);
    else
      gen_rowwise(&G, c->groups[i]);
  }
  if (G.rc == 0)
    plan_copies(&G);
  int rc = G.rc;
  if (rc == 0) {
    Plan *p = calloc(1, sizeof *p);
    p->arena = arena_create();
    Arena *a = p->arena;
    p->model = arena_strdup(a, g->model ? g->model : "model");
    p->arch = arena_printf(a, "sm_%d", c->arch);
    p->ndims = g->ndims;
    p->dim_names = arena_alloc(a, sizeof(char *) * (size_t)(g->ndims + 1));
    for (int i = 0; i < g->ndims; i++)
      p->dim_names[i] = arena_strdup(a, g->dims[i].name);
    for (int i = 0; i < g->nodes.len; i++)
      p->ninputs += GRAPH_NODE(g, i)->op == OP_INPUT;
    p->noutputs = g->noutputs;
    p->ntensors = G.nt;
    p->tensors = arena_alloc(a, sizeof(PlanTensor) * (size_t)(G.nt + 1));
    for (int i = 0; i < G.nt; i++) {
      p->tensors[i] = G.tensors[i];
      if (G.tensors[i].name)
        p->tensors[i].name = arena_strdup(a, G.tensors[i].name);
    }
    p->nprep = G.nprep;
    p->prep = arena_alloc(a, sizeof(PrepStep) * (size_t)(G.nprep + 1));
    memcpy(p->prep, G.prep, sizeof(PrepStep) * (size_t)G.nprep);
    p->nkernels = G.nk;
    p->kernels = arena_alloc(a, sizeof(PlanKernel) * (size_t)(G.nk + 1));
    for (int i = 0; i < G.nk; i++) {
      p->kernels[i] = G.kernels[i];
      for (int v = 0; v < G.kernels[i].nvariants; v++)
        p->kernels[i].variants[v].func = arena_strdup(a, G.kernels[i].variants[v].func);
    }
    p->nsteps = G.nsteps;
    p->steps = arena_alloc(a, sizeof(PlanStep) * (size_t)(G.nsteps + 1));
    memcpy(p->steps, G.steps, sizeof(PlanStep) * (size_t)G.nsteps);
    p->cuda_source = arena_strdup(a, G.src.s);
    memplan_lifetimes(p);
    *out = p;
  }
  for (int i = 0; i < G.ndedup; i++)
    free(G.dedup[i].body);
  free(G.dedup);
  free(G.tensor_of);
  free(G.tensors);
  free(G.prep);
  free(G.kernels);
  free(G.steps);
  buf_free(&G.src);
  return rc;
}
