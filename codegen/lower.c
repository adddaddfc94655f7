/* lower.c: kernel groups -> the Plan that runs them.
 *
 * Each group becomes one kernel (its text from emit_cuda.c):
 *   GEMM groups: the matrix-product template (gemm_wq.cuh for weight-only quantized B, whose
 *     codes and scales load-time steps pack; gemm_sm80.cuh for f16/bf16 with K % 8 == 0,
 *     gemm_sm90.cuh above 64 rows on sm_90, gemm_simt.cuh otherwise), one variant per tile
 *     configuration (decode / small / prefill), chosen by the runtime from M;
 *   rowwise groups: a per-row loop;
 *   single groups (backward graphs): one op alone, a template of kernels/grad.cuh.
 * Kernels whose generated text is identical (the same block inlined in every layer) are
 * emitted once. Constant tensors the kernels read are computed by load-time prep steps.
 * Pre-quantized fp8 weights are bound as their codes; their values are an f8_dequant step,
 * and an fp8 product of the codes' type reads the stored rows as they are (f8_rows).
 */
#include "gen.h"

#include <string.h>

#include "ir/size_limits.h"
#include "kernels/gemm_host.h"
#include "passes/memplan.h"

/* ---- tensors ---- */

static int new_tensor(Gen *G, PlanTensorKind kind, const Node *n) {
  GROW(G->tensors, G->nt, G->capt);
  PlanTensor *t = &G->tensors[G->nt];
  *t = (PlanTensor){.kind = kind, .dtype = n->dtype, .rank = n->shape.rank, .first = -1, .last = -1, .alias = -1};
  memcpy(t->dims, n->shape.d, sizeof(Dim) * (size_t)n->shape.rank);
  return G->nt++;
}

static int prep_step(Gen *G, Node *n);

/* A load-time step computing n's value from the tensors args[n->nargs]; returns its tensor. */
static int add_prep(Gen *G, const Node *n, const int *args) {
  int t = new_tensor(G, PT_DERIVED, n);
  GROW(G->prep, G->nprep, G->capprep);
  PrepStep *s = &G->prep[G->nprep++];
  *s = (PrepStep){.op = n->op, .out = t, .nargs = n->nargs, .ival = {n->ival[0], n->ival[1]}, .fval = n->fval};
  memcpy(s->args, args, sizeof(int) * (size_t)n->nargs);
  return t;
}

/* A load-time step op(args) over plan tensors, with ival i0, i1; its shape by the IR's rule
 * (a failure is reported at node `at`). Returns its tensor. */
static int tensor_step(Gen *G, const Node *at, Op op, DType dtype, const int *args, int nargs, int64_t i0, int64_t i1) {
  Node operands[8], *ptrs[8];
  for (int i = 0; i < nargs; i++) {
    const PlanTensor *t = &G->tensors[args[i]];
    operands[i] = (Node){.dtype = t->dtype, .shape = {.rank = t->rank}};
    memcpy(operands[i].shape.d, t->dims, sizeof(Dim) * (size_t)t->rank);
    ptrs[i] = &operands[i];
  }
  Node n = {.op = op, .dtype = dtype, .nargs = nargs, .ival = {i0, i1}};
  char why[256];
  if (!ir_infer_shape(G->g, op, ptrs, nargs, &n, &n.shape, why, sizeof why))
    return fail(G, at, "%s", why);
  return add_prep(G, &n, args);
}

/* A pre-quantized fp8 weight (ir/prequant.h): its codes, the tensor bound from the checkpoint
 * (u8 in the weight's shape), and its scales as stored, f32 [rows, 1] (step f8_scales: the
 * runtime uploads the scales it kept when it bound the weight). */
static int stored_tensors(Gen *G, const Node *w, int *codes, int *scales) {
  if (G->codes_of[w->id] < 0) {
    Node bytes = {.dtype = DT_U8, .shape = w->shape};
    int t = new_tensor(G, PT_WEIGHT, &bytes);
    G->tensors[t].name = w->name;
    G->tensors[t].stored = w->stored;
    G->tensors[t].scale = w->scale;
    int s = tensor_step(G, w, OP_F8_SCALES, DT_F32, &t, 1, 0, 0);
    if (s < 0)
      return -1;
    G->codes_of[w->id] = t, G->scales_of[w->id] = s;
  }
  *codes = G->codes_of[w->id], *scales = G->scales_of[w->id];
  return 0;
}

int gen_tensor_for(Gen *G, Node *n) {
  if (G->tensor_of[n->id] >= 0)
    return G->tensor_of[n->id];
  int t;
  if (n->op == OP_INPUT) {
    t = new_tensor(G, PT_INPUT, n);
    G->tensors[t].index = (int)n->ival[0];
    G->tensors[t].name = n->name;
  } else if (n->op == OP_WEIGHT && n->stored != DT_NONE) {
    /* its value, code * scale in f32, wherever the program reads it (interp.c) */
    int args[2];
    if (stored_tensors(G, n, &args[0], &args[1]) != 0 ||
        (t = tensor_step(G, n, OP_F8_DEQUANT, DT_F32, args, 2, n->stored == DT_F8E5M2, 0)) < 0)
      return -1;
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
    args[i] = gen_tensor_for(G, n->args[i]);
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
      return fail(G, n, "a load-time interleave of several operands is not supported");
    break;
  default:
    if (!is_elementwise(n) || !tname(n->dtype))
      return fail(G, n, "computing %s at load time is not supported", op_info[n->op].name);
  }
  if (n->op == OP_MATMUL && (n->args[0]->shape.rank > 2))
    return fail(G, n, "a load-time matrix product of rank > 2 is not supported");

  /* the prep kernels compute in double and store f32/f16/bf16; slices and concatenations are
   * byte copies of any type */
  if (!tname(n->dtype) && n->op != OP_SLICE && n->op != OP_CONCAT)
    return fail(G, n, "computing %s values at load time is not supported", dtype_name(n->dtype));
  if (n->op == OP_MATMUL && G->g->prec.type[PREC_WEIGHTS] != DT_NONE) {
    /* a folded bias b @ W^T: the reference quantizes W here too; ffn_prep_matmul does, given
     * the bits and the group in ival */
    DType wq = G->g->prec.type[PREC_WEIGHTS];
    Node q = *n;
    q.ival[0] = wq == DT_I8 ? 8 : 4, q.ival[1] = wq == DT_I4 ? G->g->prec.group : 0;
    return add_prep(G, &q, args);
  }
  return add_prep(G, n, args);
}

/* The load-time steps that quantize and pack B of GEMM k under `precision weights i8|i4`
 * (rule and layout: kernels/quant.cuh); sets k->wq_codes and k->wq_scales. */
static int wq_prep(Gen *G, Kgen *k, int bits, int group) {
  Node *b = k->gr->b_nk;
  int args[2] = {gen_tensor_for(G, b), -1};
  if (args[0] < 0)
    return -1;
  Node sc = {.op = OP_WQ_SCALE, .dtype = DT_F32, .nargs = 1, .ival = {bits, group}}, pk = sc;
  pk.op = OP_WQ_PACK, pk.dtype = DT_U8, pk.nargs = 2;
  Node *nodes[2] = {b, &sc};
  char why[256];
  if (!ir_infer_shape(G->g, OP_WQ_SCALE, nodes, 1, &sc, &sc.shape, why, sizeof why) ||
      !ir_infer_shape(G->g, OP_WQ_PACK, nodes, 2, &pk, &pk.shape, why, sizeof why))
    return fail(G, k->gr->mm, "%s", why);
  args[1] = k->wq_scales = add_prep(G, &sc, args);
  k->wq_codes = add_prep(G, &pk, args);
  return 0;
}

/* ---- B of fp8 GEMMs ---- */

/* B's rows as codes (u8 [R, C]) and scales (f32 [R, 1]), plan tensors. */
typedef struct {
  int codes, scales;
} F8Rows;

/* x [R, C] (or, with cols, the columns of b [K, N]) quantized row by row from its values
 * (kernels/numfmt.cuh, the contract at the top of interp.c). */
static int f8_quantize(Gen *G, Node *x, bool cols, DType t, F8Rows *out) {
  int v = gen_tensor_for(G, x);
  if (v >= 0 && cols)
    v = tensor_step(G, x, OP_TRANSPOSE, x->dtype, &v, 1, 0, 0);
  if (v < 0 || (out->scales = tensor_step(G, x, OP_F8_SCALE, DT_F32, &v, 1, t == DT_F8E5M2, 0)) < 0)
    return -1;
  int args[2] = {v, out->scales};
  return (out->codes = tensor_step(G, x, OP_F8_PACK, DT_U8, args, 2, t == DT_F8E5M2, 0)) < 0 ? -1 : 0;
}

enum { ROWS_STORED = 1, ROWS_OTHER = 2 };

/* Which rows of x [R, C] (with cols: which columns of b = x [K, N]) are whole stored rows of
 * pre-quantized weights of type t, by the reference's rule (interp.c: stored_row_scales and
 * stored_col_scales): a weight of rank 2, moved by transposes, slices (of columns of a
 * [R, C], or of a [K, N]'s output columns), concatenations along rows and interleaving.
 * ROWS_STORED, ROWS_OTHER or both (a slice of columns of b counts all it slices). */
static int stored_rows(const Node *x, DType t, bool cols) {
  int which = 0;
  switch (x->op) {
  case OP_WEIGHT:
    return !cols && x->stored == t && x->shape.rank == 2 ? ROWS_STORED : ROWS_OTHER;
  case OP_TRANSPOSE:
    return stored_rows(x->args[0], t, !cols);
  case OP_SLICE:
    return stored_rows(x->args[0], t, cols);
  case OP_CONCAT:
  case OP_INTERLEAVE:
    if (x->op == OP_CONCAT ? x->ival[0] != (cols ? 1 : 0) : cols)
      return ROWS_OTHER;
    for (int i = 0; i < x->nargs; i++)
      which |= stored_rows(x->args[i], t, cols);
    return which;
  default:
    return ROWS_OTHER;
  }
}

/* Rows [off, off + len) of a 2-D plan tensor: transposed, sliced, transposed back. */
static int row_range(Gen *G, const Node *at, int t, int64_t off, int64_t len) {
  DType dt = G->tensors[t].dtype;
  if ((t = tensor_step(G, at, OP_TRANSPOSE, dt, &t, 1, 0, 0)) < 0 || (t = tensor_step(G, at, OP_SLICE, dt, &t, 1, off, len)) < 0)
    return -1;
  return tensor_step(G, at, OP_TRANSPOSE, dt, &t, 1, 0, 0);
}

/* B's rows for x (cols: b's columns), following the moves of stored_rows with mirror steps over
 * the codes and over the scales, so that a stored row keeps its codes and scale exactly as
 * the checkpoint has them; what holds no stored row is quantized from its values. */
static int f8_rows(Gen *G, Node *x, DType t, bool cols, F8Rows *out) {
  int which = stored_rows(x, t, cols);
  if (which == ROWS_OTHER)
    return f8_quantize(G, x, cols, t, out);
  switch (x->op) {
  case OP_WEIGHT:
    return stored_tensors(G, x, &out->codes, &out->scales);
  case OP_TRANSPOSE:
    return f8_rows(G, x->args[0], t, !cols, out);
  case OP_SLICE: {
    F8Rows all;
    if (!cols && which != ROWS_STORED) /* per row: codes for some, a fresh max over the slice for others */
      return fail(G, x, "an fp8 product whose weight is a slice along K of pre-quantized and other rows together "
                  "is not supported by the GPU code generator");
    if (f8_rows(G, x->args[0], t, cols, &all) != 0)
      return -1;
    if (!cols) { /* a slice of every row's codes; each keeps its scale */
      out->scales = all.scales;
      out->codes = tensor_step(G, x, OP_SLICE, DT_U8, &all.codes, 1, x->ival[0], x->ival[1]);
      return out->codes < 0 ? -1 : 0;
    }
    out->codes = row_range(G, x, all.codes, x->ival[0], x->ival[1]);
    out->scales = out->codes < 0 ? -1 : row_range(G, x, all.scales, x->ival[0], x->ival[1]);
    return out->scales < 0 ? -1 : 0;
  }
  case OP_CONCAT:
  case OP_INTERLEAVE: {
    int codes[8], scales[8];
    if (x->nargs > 8)
      return fail(G, x, "a load-time %s with more than 8 operands is not supported", op_info[x->op].name);
    for (int i = 0; i < x->nargs; i++) {
      F8Rows part;
      if (f8_rows(G, x->args[i], t, cols, &part) != 0)
        return -1;
      codes[i] = part.codes, scales[i] = part.scales;
    }
    int n = x->nargs;
    if (x->op == OP_INTERLEAVE && n > 1) { /* it stacks its operands first */
      if ((codes[0] = tensor_step(G, x, OP_CONCAT, DT_U8, codes, n, 0, 0)) < 0 ||
          (scales[0] = tensor_step(G, x, OP_CONCAT, DT_F32, scales, n, 0, 0)) < 0)
        return -1;
      n = 1;
    }
    int64_t i0 = x->op == OP_CONCAT ? 0 : x->ival[0], i1 = x->op == OP_CONCAT ? 0 : x->ival[1];
    if ((out->codes = tensor_step(G, x, x->op, DT_U8, codes, n, i0, i1)) < 0)
      return -1;
    return (out->scales = tensor_step(G, x, x->op, DT_F32, scales, n, i0, i1)) < 0 ? -1 : 0;
  }
  default: /* stored_rows finds stored rows under the ops above only */
    return fail(G, x, "internal error: stored fp8 rows under %s", op_info[x->op].name);
  }
}

/* The load-time steps that make B of fp8 GEMM k (kernels/numfmt.cuh): its codes and scales
 * per row (an output column), quantized from its values, or, for rows that are stored rows of
 * pre-quantized weights of the product's type, those rows' codes and scales as stored. */
static int f8_prep(Gen *G, Kgen *k) {
  F8Rows b;
  if (f8_rows(G, k->gr->b_nk, k->f8, false, &b) != 0)
    return -1;
  k->f8_b = b.codes, k->f8_sb = b.scales;
  return 0;
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

/* The rowwise kernel with this text, a variant per form (its entry point @ followed by the
 * form's name; cfg.bm: rows per block, for the launch's grid), emitted under the heading
 * "kernel NAME: what" if it is new; returns its index. */
static int rowwise_kernel(Gen *G, const char *body, int64_t n, const RowForm *forms, int nforms, Op op, const char *what) {
  PlanKernel pk = {.kind = KK_ROWWISE, .nvariants = nforms, .n = n, .op = op};
  for (int f = 0; f < nforms; f++) {
    pk.variants[f] = (KernelVariant){.threads = forms[f].threads, .max_m = forms[f].max_m};
    pk.variants[f].cfg.name = forms[f].name[0] ? forms[f].name + 1 : "rowwise";
    pk.variants[f].cfg.bm = forms[f].threads / forms[f].tpr;
  }
  bool is_new;
  int kernel = add_kernel(G, body, &pk, &is_new);
  if (is_new) {
    char name[32];
    snprintf(name, sizeof name, "k%d", kernel);
    buf_printf(&G->src, "\n// kernel %s: %s\n", name, what);
    emit_named(&G->src, name, body);
    for (int f = 0; f < nforms; f++)
      G->kernels[kernel].variants[f].func = arena_printf(G->g->arena, "%s%s", name, forms[f].name);
  }
  return kernel;
}

/* The run-time step that quantizes A of fp8 GEMM k row by row (fp8.cuh) into two scratch
 * tensors, its codes and its row scales; sets k->f8_a and k->f8_sa. */
static int f8_quant_a(Gen *G, Kgen *k) {
  Node *a = k->gr->a;
  int src = gen_tensor_for(G, a);
  if (src < 0)
    return -1;
  Node codes = {.dtype = DT_U8, .shape = a->shape}, scales = {.dtype = DT_F32, .shape = a->shape}, stats = scales;
  scales.shape.rank--;
  stats.shape.d[stats.shape.rank - 1] = dim_static(2);
  k->f8_a = new_tensor(G, PT_SCRATCH, &codes);
  k->f8_sa = new_tensor(G, PT_SCRATCH, &scales);
  k->f8_stats = k->gr->stats > 0 ? new_tensor(G, PT_SCRATCH, &stats) : -1;
  int64_t K = a->shape.d[a->shape.rank - 1].size;
  int vec; /* 8: K % 16 == 0 */
  RowForm forms[ROW_MAX_FORMS];
  int nforms = rowwise_forms(K, &vec, forms);
  Buf body = {0};
  for (int f = 0; f < nforms; f++)
    buf_printf(&body,
               "extern \"C\" __global__ void __launch_bounds__(%d, 1) @%s(const __grid_constant__ ffn::KArgs a) {\n"
               "  ffn::pdl_entry();\n  __shared__ float red[%d];\n"
               "  ffn::quant_rows_f8<%s, %d, %d, %d, %lldLL>((const %s *)a.p[0], (ffn::u8 *)a.p[1], (float *)a.p[2], %s, "
               "a.m, red);\n}\n",
               forms[f].threads, forms[f].name, forms[f].threads / 32, gen_ctype(a->dtype), k->f8 == DT_F8E5M2,
               forms[f].threads, forms[f].tpr, (long long)K, gen_ctype(a->dtype),
               k->f8_stats >= 0 ? "(float *)a.p[3]" : "nullptr");
  char what[128];
  snprintf(what, sizeof what, "%s activations to %s codes and row scales, K = %lld", dtype_name(a->dtype),
           dtype_name(k->f8), (long long)K);
  int kernel = rowwise_kernel(G, body.s, K, forms, nforms, OP_COUNT, what);
  Kgen q = {.G = G, .gr = k->gr, .nslots = k->f8_stats >= 0 ? 4 : 3, .slot_tensor = {src, k->f8_a, k->f8_sa, k->f8_stats}};
  add_step(G, kernel, &q, &a->shape);
  buf_free(&body);
  return 0;
}

/* ---- GEMM groups ---- */

/* Whether tile configuration c is compiled for a GEMM: tensor cores (tc) for 16-bit types with
 * 16-byte rows, f32 (and odd K) on the FMA path. On sm_90 the wgmma kernels (their TMA forms:
 * FFN_GEMM_SM90T, the persistent SM90P and the clustered SM90C) take M > 64; at
 * decode sizes the mma.sync ones are as fast or faster (kernels/NOTES.md), so both kinds are
 * compiled and the runtime picks by M. */
static bool config_used(const ffn_gemm_config *c, bool tc, bool hopper, int wq_bits, bool f8) {
  bool small = c->max_m > 0 && c->max_m <= 64;
  bool tma = c->kind == FFN_GEMM_SM90T || c->kind == FFN_GEMM_SM90C;
  /* fp8: Hopper runs mma.sync with fp8 operands in software (through f16), so its wgmma
   * kernels serve small M too; the mma.sync ones stay for comparison (FFNC_GEMM_VARIANT) */
  if (f8 && hopper)
    return tma || c->kind == FFN_GEMM_SM90P || (c->kind == FFN_GEMM_SM80 && small);
  if (wq_bits) /* quantized B: gemm_wqdl / gemm_wqd / gemm_wq on every arch, the tile depth by the
                 code width */
    return (c->kind == FFN_GEMM_WQ || c->kind == FFN_GEMM_WQD) && c->bk == (wq_bits == 8 ? 32 : 64);
  if (c->kind == FFN_GEMM_WQ || c->kind == FFN_GEMM_WQD)
    return false;
  if (!tc)
    return c->kind == FFN_GEMM_SIMT;
  if (hopper)
    return (c->kind == FFN_GEMM_SM80 && small) || (tma && !small) || c->kind == FFN_GEMM_SM90P;
  return c->kind == FFN_GEMM_SM80;
}

/* Configuration c's entry in body and its variant in pk (its regime as this product's streams
 * and element type make it: ffn_gemm_regime). */
static void add_gemm_variant(Kgen *k, const ffn_gemm_config *c, bool ext, bool sixteen_bit, bool dq, PlanKernel *pk,
                             Buf *body) {
  emit_gemm_entry(k, c, ext, 0, body);
  ffn_gemm_config cfg = *c; /* the regime this product serves with it */
  cfg.max_m = ffn_gemm_regime(c, (int)k->gr->streams, sixteen_bit);
  pk->variants[pk->nvariants++] = (KernelVariant){.threads = c->threads,
                                                  .smem = (int)ffn_gemm_smem_bytes(c, (int)dtype_bytes(k->gr->a->dtype, 1)),
                                                  .max_m = cfg.max_m, .cfg = cfg, .ext_stats = ext, .dq = dq};
}

/* Weight-only quantized products of many rows (prefill) run as bf16 products of the weights
 * dequantized into the workspace just before (KernelVariant.dq, kernels/runtime.cuh:
 * ffn_wq_dequant): the quantized kernels decode each weight once per 64-token tile, so above
 * dq_min_rows rows they run at a seventh of the tensor cores' rate. Where the dequantization
 * (the weights read as codes, written and read again as bf16) costs less than that, measured on
 * an H100 (kernels/NOTES.md, thirtieth session): i4 from 65 rows (8B sublayer at 128 tokens 377
 * against 524 us, at 64 the quantized kernels' 284 against ~370), i8 from 160 (at 128 tokens 429
 * against 379 us, at 256 ~440 against 690; the 70B's crossing near 190, the 8B's near 145). For
 * bf16 activations (bf16 holds any scaled level; f16 could overflow) with rows of 16-byte
 * multiples (K % 8 == 0: TMA and cp.async). */
static int dq_min_rows(int bits) { return bits == 8 ? 160 : 65; }
static bool dq_variants(const Kgen *k) {
  int64_t K = k->gr->a->shape.d[k->gr->a->shape.rank - 1].size;
  return k->wq_bits && k->gr->a->dtype == DT_BF16 && K % 8 == 0 && (k->G->c->arch == 90 || k->G->c->arch == 80);
}

/* The mixed-input variant (KernelVariant.mx) of a product that has dq variants, on sm_90: the TMA
 * mid tile (the width that fits the product, as for bf16) whose producer warpgroup turns the codes
 * into bf16 tiles in shared memory (gemm_sm90.cuh: sm90_wq_producer), so that the weights cross HBM
 * once, as codes, and the workspace holds no bf16 copy. It takes the rows from MX_MIN_ROWS to
 * MX_MAX_ROWS, one row tile: its producer, not the tensor cores, sets its pace (kernels/NOTES.md,
 * thirty-first to thirty-third sessions: 8B int4 at 128 tokens 232 us against the dq path's 378, at
 * 512 819 against 492), so from two row tiles on tmar (i4, below) or the dq variants take over,
 * and under FFNC_WQ_MIX=0; the quantized kernels keep up to 64. Its codes' ring takes the shared
 * memory that MX_STAGES bf16 stages leave (wqmx_code_stages). gemm_sm90p.cuh has the persistent
 * form (WQ), not compiled into plans while it loses to dq. */
enum { MX_MIN_ROWS = 65, MX_MAX_ROWS = 128, MX_STAGES = 4 };
static void add_mx_variant(Kgen *k, PlanKernel *pk, Buf *body) {
  static const char *const names[][2] = {{"tma_128x128x64", "tmaq_128x128x64"}, {"tma_128x224x64", "tmaq_128x224x64"}};
  int ncfg;
  const ffn_gemm_config *table = ffn_gemm_configs(&ncfg);
  for (int i = 0; i < ncfg && pk->nvariants < PLAN_MAX_VARIANTS; i++)
    for (int j = 0; j < 2; j++) {
      if (strcmp(table[i].name, names[j][0]) != 0 || !ffn_gemm_config_fits(&table[i], (long long)k->gr->streams * k->ncols, false))
        continue;
      ffn_gemm_config c = table[i];
      c.name = names[j][1];
      c.max_m = MX_MAX_ROWS;
      if (c.stages > MX_STAGES)
        c.stages = MX_STAGES;
      int base = (int)ffn_gemm_smem_bytes(&c, 2), cs = wqmx_code_stages(c.bn, k->wq_bits, FFN_SM90_MAX_SMEM - base);
      if (cs < 2)
        continue;
      int smem = base + cs * wqmx_stage_bytes(c.bn, k->wq_bits); /* as gemm_sm90_smem_bytes */
      emit_gemm_entry(k, &c, false, k->wq_bits, body);
      pk->variants[pk->nvariants++] = (KernelVariant){.threads = c.threads, .smem = smem, .max_m = c.max_m, .cfg = c, .mx = true};
    }
}

/* The i4 product with the codes as wgmma's register operand (KernelVariant.mx with the
 * configuration tmar_128x128x64; kernels/gemm_wqrs.cuh): tiles of 128 tokens x 128 merged columns,
 * the codes converted in the consumers' registers, no bf16 copy in shared memory. Groups of whole
 * 64-k tiles only (G = 0, a multiple of 64, or one group over K). After the mixed-input tile, it
 * takes the rows from MX_MAX_ROWS + 1 to RS_MAX_ROWS, where it beats the dequantized path
 * (kernels/NOTES.md, thirty-seventh session, H100, 8B int4 sublayer: 192 tokens 324 against 443
 * us, 256 330 / 427, 384 458 / 473, 512 514 / 540; at 128 the mixed tile's 173 against 188, at
 * 768 the dq path's 674 against 856). The runtime launches it as an `mx` variant (A's tensor map,
 * no B map), so FFNC_WQ_MIX=0 turns it off too. */
enum { RS_STAGES = 8, RS_MAX_ROWS = 512 };
static void add_rs_variant(Kgen *k, PlanKernel *pk, Buf *body) {
  int64_t K = k->gr->a->shape.d[k->gr->a->shape.rank - 1].size, G = k->wq_group;
  if (k->wq_bits != 4 || !(G <= 0 || G % 64 == 0 || G >= K) || pk->nvariants >= PLAN_MAX_VARIANTS)
    return;
  int ncfg;
  const ffn_gemm_config *table = ffn_gemm_configs(&ncfg);
  for (int i = 0; i < ncfg; i++)
    if (strcmp(table[i].name, "tma_128x128x64") == 0) {
      ffn_gemm_config c = table[i];
      c.name = "tmar_128x128x64";
      c.stages = RS_STAGES;
      c.max_m = RS_MAX_ROWS;
      emit_wqrs_entry(k, &c, body);
      pk->variants[pk->nvariants++] =
          (KernelVariant){.threads = c.threads, .smem = wqrs_smem_bytes(c.bm, c.stages), .max_m = c.max_m, .cfg = c, .mx = true};
      return;
    }
}

/* The dq variants: the 16-bit tensor-core configurations a bf16 product takes from dq_min_rows
 * rows (on sm_90 the TMA mid tile and the two persistent ones, no clusters; on sm_80 the 128 x 256
 * tile), after the quantized kernels, whose regimes now end just below. */
static void add_dq_variants(Kgen *k, PlanKernel *pk, Buf *body) {
  int ncfg;
  const ffn_gemm_config *table = ffn_gemm_configs(&ncfg);
  bool hopper = k->G->c->arch == 90;
  int first = pk->nvariants;
  if (hopper) {
    add_mx_variant(k, pk, body);
    add_rs_variant(k, pk, body);
  }
  for (int i = 0; i < ncfg && pk->nvariants < PLAN_MAX_VARIANTS; i++) {
    const ffn_gemm_config *c = &table[i];
    bool mid_or_more = c->max_m == 0 || c->max_m >= dq_min_rows(k->wq_bits);
    bool persistent_or_mid = !hopper || c->kind == FFN_GEMM_SM90P || (c->kind == FFN_GEMM_SM90T && c->max_m > 0);
    if (!config_used(c, true, hopper, 0, false) || !mid_or_more || !persistent_or_mid ||
        !ffn_gemm_config_takes(c, false) || !ffn_gemm_config_fits(c, (long long)k->gr->streams * k->ncols, false))
      continue;
    add_gemm_variant(k, c, c->max_m == 0 && k->gr->stats > 0, true, true, pk, body);
  }
  int below = hopper ? MX_MIN_ROWS : dq_min_rows(k->wq_bits); /* where the next variants start */
  for (int v = 0; v < first && pk->nvariants > first; v++)
    if (pk->variants[v].max_m == 0 || pk->variants[v].max_m >= below)
      pk->variants[v].max_m = pk->variants[v].cfg.max_m = below - 1;
}

/* The GEMM kernel's description, and its text in body: the epilogue functor, then an entry
 * point per tile configuration. */
static PlanKernel gemm_kernel(Kgen *k, Buf *body) {
  Group *gr = k->gr;
  DType t = gr->a->dtype;
  int64_t K = gr->a->shape.d[gr->a->shape.rank - 1].size;
  bool tc = ((t == DT_BF16 || t == DT_F16) && K % 8 == 0 && !k->wq_bits) || k->f8;
  /* k counts 16-bit units for fp8 (pairs of codes, GemmArgs) */
  PlanKernel pk = {.kind = KK_GEMM, .n = k->ncols, .k = k->f8 ? K / 2 : K, .streams = gr->streams,
                   .splittable = tc || k->wq_bits, .op = OP_COUNT, .wq_bits = k->wq_bits,
                   .wq_group = k->wq_group};
  if (gr->nodes.len == 1 && gr->stores.len == 1 && gr->stores.items[0] == gr->mm && !k->wq_bits && !k->f8)
    pk.op = OP_MATMUL; /* slots: A, B, the product */
  emit_gemm_functor(k, body);
  int ncfg;
  const ffn_gemm_config *table = ffn_gemm_configs(&ncfg);
  if (gr->b_kn) { /* B as the weight lies: the persistent kernel's B_KN form, for every M */
    /* the ping-pong 128 x 128 tile (the rule), and the cooperative 128 x 256 (a candidate:
     * FFNC_GEMM_VARIANT=tmap_coopkn_128x256x64) */
    static const char *const kn[][2] = {{"tmap_pp_128x128x64", "tmap_ppkn_128x128x64"},
                                        {"tmap_coop_128x256x64", "tmap_coopkn_128x256x64"}};
    pk.op = OP_COUNT; /* the bench's cuBLASLt stand-in (tools/cmd_bench.c) takes B as [N, K] */
    for (int j = 0; j < 2; j++)
      for (int i = 0; i < ncfg; i++) {
        if (strcmp(table[i].name, kn[j][0]) != 0)
          continue;
        ffn_gemm_config c = table[i];
        c.name = kn[j][1];
        bool ext = gr->stats > 0; /* as below: ffn_row_stats for the configurations of any M */
        emit_gemm_entry(k, &c, ext, 0, body);
        pk.variants[pk.nvariants++] = (KernelVariant){.threads = c.threads, .smem = (int)ffn_gemm_smem_bytes(&c, 2),
                                                      .max_m = 0, .cfg = c, .ext_stats = ext, .b_kn = true};
      }
    return pk;
  }
  for (int i = 0; i < ncfg && pk.nvariants < PLAN_MAX_VARIANTS; i++) {
    const ffn_gemm_config *c = &table[i];
    if (!config_used(c, tc, k->G->c->arch == 90, k->wq_bits, k->f8 != DT_NONE) || !ffn_gemm_config_takes(c, k->f8 != DT_NONE) ||
        !ffn_gemm_config_fits(c, (long long)gr->streams * k->ncols, k->f8 != DT_NONE))
      continue;
    /* for the largest M every column of tiles would recompute A's row statistics (about 10% of
     * the GEMM, kernels/NOTES.md): ffn_row_stats computes them once, just before. Up to 512
     * rows the extra launch costs more than it saves (measured: 128 tokens 3-7% slower). */
    bool ext = tc && c->max_m == 0 && gr->stats > 0 && !k->f8; /* fp8: the quantizer's statistics */
    add_gemm_variant(k, c, ext, tc && !k->f8 && !k->wq_bits, false, &pk, body);
  }
  if (dq_variants(k))
    add_dq_variants(k, &pk, body);
  return pk;
}

static void lower_gemm(Gen *G, Group *gr) {
  Kgen k = {.G = G, .gr = gr, .full = gr->shape, .f8_stats = -1};
  k.ncols = gr->shape.d[gr->shape.rank - 1].size;
  int64_t K = gr->a->shape.d[gr->a->shape.rank - 1].size;
  if (k.ncols > FFN_MAX_DIM || K > FFN_MAX_DIM) { /* each is within it, a concatenation may not be */
    fail(G, gr->mm, "a matrix product with N = %lld, K = %lld is above the kernels' 32-bit limit of 2147483647",
         (long long)k.ncols, (long long)K);
    return;
  }
  /* fp8: B's codes at load time, A's just before the product (passes/precision.c has checked
   * that B is constant and K a multiple of 16) */
  DType mm = G->g->prec.type[PREC_MATMUL];
  if (mm == DT_F8E4M3 || mm == DT_F8E5M2) {
    k.f8 = mm;
    if (f8_prep(G, &k) != 0)
      return;
    if (G->act_codes_of[gr->a->id] >= 0) /* written by A's own kernel (f8_fused_consumer) */
      k.f8_a = G->act_codes_of[gr->a->id], k.f8_sa = G->act_scales_of[gr->a->id];
    else if (f8_quant_a(G, &k) != 0)
      return;
  }
  /* weight-only quantization applies where the reference applies it: a constant B */
  DType wq = G->g->prec.type[PREC_WEIGHTS];
  if (wq != DT_NONE && ir_is_const(gr->mm->args[1])) {
    k.wq_bits = wq == DT_I8 ? 8 : 4;
    k.wq_group = wq == DT_I4 ? G->g->prec.group : 0;
    if (wq_prep(G, &k, k.wq_bits, k.wq_group) != 0)
      return;
  }
  Buf body = {0};
  PlanKernel pk = gemm_kernel(&k, &body);
  bool is_new;
  int kernel = add_kernel(G, body.s, &pk, &is_new);
  if (is_new) { /* name it and emit it */
    char name[32];
    snprintf(name, sizeof name, "k%d", kernel);
    emit_gemm_text(&k, name, pk.splittable, body.s);
    for (int v = 0; v < pk.nvariants; v++)
      G->kernels[kernel].variants[v].func = arena_printf(G->g->arena, "%s_%s", name, pk.variants[v].cfg.name);
  }
  add_step(G, kernel, &k, &gr->a->shape);
  buf_free(&body);
}

/* ---- all-reduce (tensor parallel): a step of its own, the runtime's collective ---- */

static void lower_allreduce(Gen *G, Group *gr) {
  Node *n = gr->nodes.items[0];
  int src = gen_tensor_for(G, n->args[0]), dst = gen_tensor_for(G, n);
  if (src < 0 || dst < 0)
    return;
  GROW(G->steps, G->nsteps, G->capsteps);
  G->steps[G->nsteps++] = (PlanStep){.kind = STEP_ALLREDUCE, .src = src, .dst = dst, .kernel = -1,
                                     .ranks = (int)n->ival[0]};
}

/* ---- rowwise groups ---- */

/* Whether rowwise group gr's one stored value n is read by nothing but fp8 product(s) as A, with
 * no folded norm (whose epilogue would want A's row statistics, which the quantizer pass
 * computes) and is no program output: then the rowwise kernel writes A's codes and scales
 * itself (emit_rowwise_f8_kernel), and the product's quantizer pass (f8_quant_a) goes. */
static bool f8_fused_consumer(Gen *G, const Group *gr) {
  DType f8 = G->g->prec.type[PREC_MATMUL];
  if ((f8 != DT_F8E4M3 && f8 != DT_F8E5M2) || gr->stores.len != 1)
    return false;
  Node *n = gr->stores.items[0];
  if (n->shape.rank != gr->shape.rank || (n->dtype != DT_BF16 && n->dtype != DT_F16 && n->dtype != DT_F32))
    return false;
  for (int i = 0; i < G->g->noutputs; i++)
    if (G->g->outputs[i].node == n)
      return false;
  int as_a = 0;
  for (int i = 0; i < G->c->ngroups; i++) {
    const Group *q = G->c->groups[i];
    bool gemm_a = q->kind == GK_GEMM && q->a == n;
    if (gemm_a && q->stats > 0)
      return false;
    as_a += gemm_a;
    for (int j = 0; j < q->nodes.len; j++) { /* any other read: only the product itself may take n */
      const Node *m = q->nodes.items[j];
      for (int a = 0; a < m->nargs; a++)
        if (m->args[a] == n && !(gemm_a && m == q->mm && a == 0))
          return false;
    }
  }
  return as_a > 0;
}

/* Whether value o of group gr is computed from the operand in plan tensor t (read, not computed
 * by the kernel). */
static bool computed_from(const Gen *G, const Group *gr, const Node *o, int t) {
  for (int i = 0; i < o->nargs; i++) {
    const Node *a = o->args[i];
    if (a->group == gr->id ? computed_from(G, gr, a, t) : G->tensor_of[a->id] == t)
      return true;
  }
  return false;
}

static bool same_elements(const PlanTensor *a, const PlanTensor *b) {
  if (a->dtype != b->dtype || a->rank != b->rank)
    return false;
  for (int d = 0; d < a->rank; d++)
    if (!dim_eq(a->dims[d], b->dims[d]))
      return false;
  return true;
}

/* Whether the kernel may write over operand tensor t: a scratch tensor, or a saved tensor of the
 * keep backward (an input "saved.NAME"), which a call with FFN_GRAD_CONSUME_SAVED gives up. */
static bool writable_operand(const PlanTensor *t) {
  return t->kind == PT_SCRATCH || (t->kind == PT_INPUT && t->name && strncmp(t->name, "saved.", 6) == 0);
}

/* A kernel of elementwise ops alone (no statistic: one pass, in which each thread reads an
 * element of every full-shape operand before it writes the same element of each result) may
 * write a result over a writable operand of the same type and shape that the result is computed
 * from: plan tensor alias, which memplan honours where this step is the operand's last reader
 * (over an input only where the call allows it). The keep backward's SwiGLU derivative writes
 * dgate over dh, and with FFN_GRAD_CONSUME_SAVED its other two results over the saved gate and
 * up products: [T, F] buffers less. */
static void mark_in_place(Gen *G, const Group *gr, const Kgen *k) {
  for (int i = 0; i < gr->nodes.len; i++)
    if (!is_elementwise(gr->nodes.items[i]))
      return;
  bool taken[FFN_KARGS_SLOTS] = {false};
  for (int j = 0; j < k->nslots; j++) /* results are not operands */
    for (int s = 0; s < gr->stores.len; s++)
      taken[j] |= k->slot_tensor[j] == G->tensor_of[((const Node *)gr->stores.items[s])->id];
  for (int s = 0; s < gr->stores.len; s++) {
    const Node *o = gr->stores.items[s];
    PlanTensor *to = &G->tensors[G->tensor_of[o->id]];
    for (int j = 0; j < k->nslots && to->kind == PT_SCRATCH && to->alias < 0; j++) {
      int t = k->slot_tensor[j];
      if (!taken[j] && writable_operand(&G->tensors[t]) && same_elements(&G->tensors[t], to) &&
          computed_from(G, gr, o, t))
        to->alias = t, taken[j] = true;
    }
  }
}

static void lower_rowwise(Gen *G, Group *gr) {
  Kgen k = {.G = G, .gr = gr, .full = gr->shape, .f8_stats = -1};
  k.ncols = gr->shape.rank ? gr->shape.d[gr->shape.rank - 1].size : 1;
  if (gr->shape.rank && gr->shape.d[gr->shape.rank - 1].sym >= 0) {
    fail(G, gr->nodes.items[0], "a rowwise kernel over the dynamic dim %s is not supported",
         G->g->dims[gr->shape.d[gr->shape.rank - 1].sym].name);
    return;
  }
  int64_t N = k.ncols;
  RowForm forms[ROW_MAX_FORMS];
  int nforms = rowwise_forms(N, &k.vec, forms);
  Buf body = {0};
  char what[128];
  snprintf(what, sizeof what, "rowwise over [M, %lld]", (long long)N);
  DType f8 = G->g->prec.type[PREC_MATMUL];
  if (f8_fused_consumer(G, gr)) { /* the stored value is an fp8 product's A: write its codes */
    Node *n = gr->stores.items[0];
    Node codes = {.dtype = DT_U8, .shape = n->shape}, scales = {.dtype = DT_F32, .shape = n->shape};
    scales.shape.rank--;
    G->act_codes_of[n->id] = new_tensor(G, PT_SCRATCH, &codes);
    G->act_scales_of[n->id] = new_tensor(G, PT_SCRATCH, &scales);
    emit_rowwise_f8_kernel(&k, forms, nforms, G->act_codes_of[n->id], G->act_scales_of[n->id], f8, &body);
    snprintf(what, sizeof what, "rowwise over [M, %lld], stored as %s codes and row scales", (long long)N,
             dtype_name(f8));
  } else {
    emit_rowwise_kernel(&k, forms, nforms, &body);
    mark_in_place(G, gr, &k);
  }
  Op op = gr->nodes.len == 1 && gr->stores.len == 1 ? ((Node *)gr->nodes.items[0])->op : OP_COUNT;
  int kernel = rowwise_kernel(G, body.s, N, forms, nforms, op, what);
  add_step(G, kernel, &k, &gr->shape);
  buf_free(&body);
}

/* ---- single groups: an op of backward graphs alone in a kernel (kernels/grad.cuh) ---- */

/* Whether dims [from, to) of s are static; their product in *n. */
static bool static_dims(const Shape *s, int from, int to, int64_t *n) {
  *n = 1;
  for (int d = from; d < to; d++) {
    if (s->d[d].sym >= 0)
      return false;
    *n *= s->d[d].size;
  }
  return true;
}

/* A weight gradient a^T b runs on the tensor cores when both operands have one 16-bit type
 * (passes/grad.c rounds the gradient to the forward's type so that they do) and the columns of each
 * are whole 16-byte chunks (K % 8 == N % 8 == 0; any K, N, token count above that: tails are
 * zero-filled by 16-byte chunk): on sm_90 on wgmma (grad_sm90.cuh: matmul_at_sm90, with matmul_at_tc
 * kept as a second variant, wgrad_sm90_kernel), on sm_80 on mma.sync (grad.cuh: matmul_at_tc). Else
 * on the FMA units in f32 (matmul_at). */
static bool at_on_tensor_cores(const Node *n, int64_t K, int64_t N) {
  DType t = n->args[0]->dtype;
  return (t == DT_BF16 || t == DT_F16) && n->args[1]->dtype == t && K % 8 == 0 && N % 8 == 0;
}

/* The wgmma forms of a weight gradient: the plan's result, then, for an f32 result, those that
 * write a caller's gradient tensor directly (runtime/grad.c: bf16, and f32 or bf16 with the
 * product added to what it holds), so that no f32 copy is staged and converted after. */
static const struct {
  const char *suffix;
  DType out;
  bool accumulate;
} wgrad_forms[] = {{"", DT_NONE, false}, {"_bf16", DT_BF16, false}, {"_f32acc", DT_F32, true}, {"_bf16acc", DT_BF16, true}};

/* The kernel of a weight gradient on sm_90: entry points on the same slots, matmul_at_sm90 on
 * wgmma (kernels/grad_sm90.cuh, the tiles of ffn_wgrad_config; operands a and b, args.p[0] and [1],
 * read through the tensor maps of the second argument, runtime/exec.c: wgrad_maps), the variant the runtime launches,
 * then `mma_call` (matmul_at_tc), kept for comparison (FFNC_WGRAD=mma, runtime/exec.c), then the
 * direct forms of wgrad_forms (variants with `out` set, same tiles). */
static int wgrad_sm90_kernel(Gen *G, const Node *n, const char *mma_call, int64_t K, int64_t N, const char *what) {
  const ffn_gemm_config *c = ffn_wgrad_config();
  const char *t = gen_ctype(n->args[0]->dtype);
  int nforms = n->dtype == DT_F32 ? (int)(sizeof wgrad_forms / sizeof wgrad_forms[0]) : 1;
  PlanKernel pk = {.kind = KK_ROWWISE, .n = N, .k = K, .op = OP_MATMUL_AT};
  Buf body = {0};
  for (int f = 0; f < nforms; f++) {
    DType out = wgrad_forms[f].out ? wgrad_forms[f].out : n->dtype;
    KernelVariant *v = &pk.variants[pk.nvariants++];
    *v = (KernelVariant){.threads = c->threads, .smem = (int)ffn_gemm_smem_bytes(c, 2), .cfg = *c,
                         .out = wgrad_forms[f].out, .accumulate = wgrad_forms[f].accumulate};
    v->cfg.name = arena_printf(G->g->arena, "%s%s", c->name, wgrad_forms[f].suffix);
    buf_printf(&body,
               "extern \"C\" __global__ void __launch_bounds__(%d, 1) @_%s(const __grid_constant__ ffn::KArgs args, "
               "const __grid_constant__ ffn::TmaMaps t) {\n"
               "  extern __shared__ __align__(128) char smem[];\n"
               "  ffn::pdl_entry();\n"
               "  ffn::matmul_at_sm90<%d, %d, %d, %d, %s, %s>(&t, (%s *)args.p[2], "
               "args.m, %lld, %lld, args.splits, args.ws, args.counters, smem);\n}\n",
               c->threads, v->cfg.name, c->bm, c->bn, c->bk, c->stages, v->accumulate ? "true" : "false", t,
               gen_ctype(out), (long long)K, (long long)N);
    if (f == 0) {
      buf_printf(&body, "extern \"C\" __global__ void __launch_bounds__(256) @_mma(const __grid_constant__ ffn::KArgs args) {\n"
                 "  ffn::pdl_entry();\n  %s;\n}\n", mma_call);
      pk.variants[pk.nvariants++] = (KernelVariant){.threads = 256, .cfg.name = "mma"};
    }
  }
  bool is_new;
  int kernel = add_kernel(G, body.s, &pk, &is_new);
  if (is_new) {
    char name[32];
    snprintf(name, sizeof name, "k%d", kernel);
    buf_printf(&G->src, "\n// kernel %s: %s\n", name, what);
    emit_named(&G->src, name, body.s);
    for (int v = 0; v < pk.nvariants; v++)
      G->kernels[kernel].variants[v].func = arena_printf(G->g->arena, "%s_%s", name, pk.variants[v].cfg.name);
  }
  buf_free(&body);
  return kernel;
}

/* What lower_single's cases decide: the template call, its comment, the launch's rows and
 * threads, and the dims the rowwise form is sized by. */
typedef struct {
  char call[256], what[160];
  Shape rows;        /* the launch's rows: x's leading dims (all but the last) unless a case says */
  int64_t C, K, N;
  int threads;
  bool wgmma;        /* a weight gradient on sm_90: wgrad_sm90_kernel */
} Single;

static bool single_matmul_at(Gen *G, const Node *n, Single *o) {
  const Shape *xs = &n->args[0]->shape, *bs = &n->args[1]->shape;
  if (!static_dims(xs, xs->rank - 1, xs->rank, &o->K) || !static_dims(bs, bs->rank - 1, bs->rank, &o->N)) {
    fail(G, n, "matmul_at with a dynamic inner dim is not supported by the GPU code generator yet");
    return false;
  }
  long long K = o->K, N = o->N;
  if (K > FFN_MAX_DIM || N > FFN_MAX_DIM) {
    fail(G, n, "matmul_at with K = %lld, N = %lld is above the kernels' 32-bit limit", K, N);
    return false;
  }
  bool tc = at_on_tensor_cores(n, K, N);
  o->wgmma = tc && G->c->arch == 90;
  const char *tx = gen_ctype(n->args[0]->dtype), *tb = gen_ctype(n->args[1]->dtype), *to = gen_ctype(n->dtype);
  snprintf(o->call, sizeof o->call, "ffn::%s<%s, %s%s%s>((const %s *)args.p[0], (const %s *)args.p[1], (%s *)args.p[2], "
           "args.m, %lld, %lld)", tc ? "matmul_at_tc" : "matmul_at", tx, tc ? "" : tb, tc ? "" : ", ", to, tx, tb, to, K, N);
  snprintf(o->what, sizeof o->what, "matmul_at%s: [M, %lld]^T [M, %lld] -> [%lld, %lld], summed over M",
           o->wgmma ? " (wgmma; mma.sync as _mma)" : tc ? " (tensor cores)" : "", K, N, K, N);
  return true;
}

/* sum_to over a prefix of x's dims (the rows: sum_rows) or a suffix (along each row: sum_cols) */
static bool single_sum_to(Gen *G, const Node *n, Single *o) {
  const Shape *xs = &n->args[0]->shape;
  const char *tx = gen_ctype(n->args[0]->dtype), *to = gen_ctype(n->dtype);
  int lead = xs->rank - (int)n->ival[0], p = 0, q = xs->rank;
  bool summed[FFN_MAX_RANK]; /* x's leading dims, and the result's dims whose bit is set */
  for (int d = 0; d < xs->rank; d++)
    summed[d] = d < lead || (n->ival[1] >> (d - lead) & 1);
  while (p < xs->rank && summed[p])
    p++; /* [0, p): a prefix summed */
  while (q > 0 && summed[q - 1])
    q--; /* [q, rank): a suffix summed */
  bool cols = q == xs->rank && p > 0, rowsum = p == 0 && q < xs->rank && q > 0;
  for (int d = p; cols && d < xs->rank; d++)
    cols = !summed[d];
  for (int d = 0; rowsum && d < q; d++)
    rowsum = !summed[d];
  if (cols && static_dims(xs, p, xs->rank, &o->C)) { /* x [rows, C] -> [C]: over the rows (tokens) */
    long long C = o->C;
    o->rows.rank = p + 1;
    snprintf(o->call, sizeof o->call, "ffn::sum_rows<%s, %s, %d>((const %s *)args.p[0], (%s *)args.p[1], args.m, %lldLL)",
             tx, to, o->threads, tx, to, C);
    snprintf(o->what, sizeof o->what, "sum_to: [M, %lld] -> [%lld], summed over M", C, C);
    return true;
  }
  if (rowsum && static_dims(xs, q, xs->rank, &o->C)) { /* x [rows, C] -> [rows]: along each row */
    long long C = o->C;
    o->rows.rank = q + 1;
    o->threads = C >= 256 ? 256 : C >= 128 ? 128 : C >= 64 ? 64 : 32;
    snprintf(o->call, sizeof o->call, "ffn::sum_cols<%s, %s>((const %s *)args.p[0], (%s *)args.p[1], args.m, %lldLL)", tx,
             to, tx, to, C);
    snprintf(o->what, sizeof o->what, "sum_to: [M, %lld] -> [M], summed along the rows", C);
    return true;
  }
  fail(G, n, "sum_to of a rank-%d value to rank %lld (dims 0x%llx) is not supported by the GPU code generator yet: "
             "only sums over leading or over trailing static dims", xs->rank, (long long)n->ival[0],
       (unsigned long long)n->ival[1]);
  return false;
}

static bool single_transpose(Gen *G, const Node *n, Single *o) {
  const Shape *xs = &n->args[0]->shape;
  const char *tx = gen_ctype(n->args[0]->dtype);
  if (xs->rank != 2 || !static_dims(xs, 1, 2, &o->C)) {
    fail(G, n, "a transpose computed at run time of a rank-%d value or with a dynamic last dim is not supported by "
               "the GPU code generator yet", xs->rank);
    return false;
  }
  if (n->args[0]->dtype != n->dtype) {
    fail(G, n, "internal error: a transpose that changes the element type");
    return false;
  }
  snprintf(o->call, sizeof o->call, "ffn::transpose<%s>((const %s *)args.p[0], (%s *)args.p[1], args.m, %lldLL)", tx, tx,
           tx, (long long)o->C);
  snprintf(o->what, sizeof o->what, "transpose: [M, %lld] -> [%lld, M]", (long long)o->C, (long long)o->C);
  return true;
}

/* An op of a backward graph alone in a kernel: an entry point that calls its template of
 * grad.cuh with the shapes as constants, on the operands and the result (slots in that order);
 * KArgs.m is the product of the leading dims of the first operand. A form the templates do not
 * cover fails with the reason. */
static void lower_single(Gen *G, Group *gr) {
  Node *n = gr->nodes.items[0];
  for (int i = 0; i <= n->nargs; i++) {
    const Node *v = i < n->nargs ? n->args[i] : n;
    if (!tname(v->dtype)) {
      fail(G, n, "%s of %s values is not supported by the GPU code generator yet", op_info[n->op].name,
           dtype_name(v->dtype));
      return;
    }
  }
  Single o = {.rows = n->args[0]->shape, .threads = 256};
  bool ok = n->op == OP_MATMUL_AT  ? single_matmul_at(G, n, &o)
            : n->op == OP_SUM_TO   ? single_sum_to(G, n, &o)
            : n->op == OP_TRANSPOSE ? single_transpose(G, n, &o)
                                    : (fail(G, n, "internal error: %s reached the single-op generator", op_info[n->op].name),
                                       false);
  if (!ok)
    return;
  Kgen k = {.G = G, .gr = gr, .full = gr->shape, .f8_stats = -1};
  for (int i = 0; i < n->nargs; i++)
    if ((k.slot_tensor[k.nslots++] = gen_tensor_for(G, n->args[i])) < 0)
      return;
  if ((k.slot_tensor[k.nslots++] = gen_tensor_for(G, n)) < 0)
    return;
  if (o.wgmma) {
    add_step(G, wgrad_sm90_kernel(G, n, o.call, o.K, o.N, o.what), &k, &o.rows);
    return;
  }
  Buf body = {0};
  buf_printf(&body, "extern \"C\" __global__ void __launch_bounds__(%d) @(const __grid_constant__ ffn::KArgs args) {\n"
             "  ffn::pdl_entry();\n  %s;\n}\n", o.threads, o.call);
  RowForm form = {o.threads, o.threads, "", 0}; /* a block per row, or its own grid (exec.c) */
  int kernel = rowwise_kernel(G, body.s, o.C ? o.C : o.N, &form, 1, n->op, o.what);
  add_step(G, kernel, &k, &o.rows);
  buf_free(&body);
}

/* ---- the whole program ---- */

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
    int src = gen_tensor_for(G, n);
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

/* The generated program copied into a Plan of its own arena. */
static Plan *plan_of(Gen *G) {
  Graph *g = G->g;
  Plan *p = calloc(1, sizeof *p);
  p->arena = arena_create();
  Arena *a = p->arena;
  p->model = arena_strdup(a, g->model ? g->model : "model");
  p->arch = arena_printf(a, "sm_%d", G->c->arch);
  p->tp = G->c->tp > 1 ? G->c->tp : 1;
  p->tp_rank = G->c->tp > 1 ? G->c->tp_rank : 0;
  p->ndims = g->ndims;
  p->dim_names = arena_alloc(a, sizeof(char *) * (size_t)(g->ndims + 1));
  for (int i = 0; i < g->ndims; i++)
    p->dim_names[i] = arena_strdup(a, g->dims[i].name);
  for (int i = 0; i < g->nodes.len; i++)
    p->ninputs += GRAPH_NODE(g, i)->op == OP_INPUT;
  p->noutputs = g->noutputs;
  p->ntensors = G->nt;
  p->tensors = arena_alloc(a, sizeof(PlanTensor) * (size_t)(G->nt + 1));
  for (int i = 0; i < G->nt; i++) {
    p->tensors[i] = G->tensors[i];
    if (G->tensors[i].name)
      p->tensors[i].name = arena_strdup(a, G->tensors[i].name);
    if (G->tensors[i].scale) /* the graph's arena goes with the graph */
      p->tensors[i].scale = arena_strdup(a, G->tensors[i].scale);
  }
  p->nprep = G->nprep;
  p->prep = arena_alloc(a, sizeof(PrepStep) * (size_t)(G->nprep + 1));
  memcpy(p->prep, G->prep, sizeof(PrepStep) * (size_t)G->nprep);
  p->nkernels = G->nk;
  p->kernels = arena_alloc(a, sizeof(PlanKernel) * (size_t)(G->nk + 1));
  for (int i = 0; i < G->nk; i++) {
    p->kernels[i] = G->kernels[i];
    for (int v = 0; v < G->kernels[i].nvariants; v++) { /* the names may be in the graph's arena */
      p->kernels[i].variants[v].func = arena_strdup(a, G->kernels[i].variants[v].func);
      const char *cfg = G->kernels[i].variants[v].cfg.name;
      p->kernels[i].variants[v].cfg.name = cfg ? arena_strdup(a, cfg) : NULL;
    }
  }
  p->nsteps = G->nsteps;
  p->steps = arena_alloc(a, sizeof(PlanStep) * (size_t)(G->nsteps + 1));
  memcpy(p->steps, G->steps, sizeof(PlanStep) * (size_t)G->nsteps);
  p->cuda_source = arena_strdup(a, G->src.s);
  return p;
}

static void gen_free(Gen *G) {
  for (int i = 0; i < G->ndedup; i++)
    free(G->dedup[i].body);
  free(G->dedup);
  free(G->tensor_of);
  free(G->codes_of);
  free(G->scales_of);
  free(G->act_codes_of);
  free(G->act_scales_of);
  free(G->tensors);
  free(G->prep);
  free(G->kernels);
  free(G->steps);
  buf_free(&G->src);
}

int codegen_cuda(Compile *c, Plan **out) {
  Graph *g = c->g;
  Gen G = {.c = c, .g = g};
  G.tensor_of = ffn_xmalloc(sizeof(int) * (size_t)(g->next_id + 1));
  G.codes_of = ffn_xmalloc(sizeof(int) * (size_t)(g->next_id + 1));
  G.scales_of = ffn_xmalloc(sizeof(int) * (size_t)(g->next_id + 1));
  G.act_codes_of = ffn_xmalloc(sizeof(int) * (size_t)(g->next_id + 1));
  G.act_scales_of = ffn_xmalloc(sizeof(int) * (size_t)(g->next_id + 1));
  for (int i = 0; i <= g->next_id; i++)
    G.tensor_of[i] = G.codes_of[i] = G.scales_of[i] = G.act_codes_of[i] = G.act_scales_of[i] = -1;
  emit_prelude(&G);
  for (int i = 0; i < g->nodes.len; i++) /* every input, used or not, is part of the interface */
    if (GRAPH_NODE(g, i)->op == OP_INPUT)
      gen_tensor_for(&G, GRAPH_NODE(g, i));
  plan_outputs(&G);
  for (int i = 0; i < c->ngroups && G.rc == 0; i++) {
    if (c->groups[i]->kind == GK_GEMM)
      lower_gemm(&G, c->groups[i]);
    else if (c->groups[i]->kind == GK_ALLREDUCE)
      lower_allreduce(&G, c->groups[i]);
    else if (c->groups[i]->kind == GK_SINGLE)
      lower_single(&G, c->groups[i]);
    else
      lower_rowwise(&G, c->groups[i]);
  }
  if (G.rc == 0)
    plan_copies(&G);
  int rc = G.rc;
  if (rc == 0) {
    *out = plan_of(&G);
    memplan_lifetimes(*out);
  }
  gen_free(&G);
  return rc;
}
