/* interp.c: the CPU reference interpreter (see interp.h).
 *
 * Nodes are evaluated in graph order. Each value is a float array already rounded to its
 * node's element type; arithmetic is in double, reductions and matrix products accumulate
 * in double, and every result is rounded once with round_to_dtype. A value is freed after
 * its last use, so a model needs memory for its live values only.
 *
 * ---- Quantization contract (the GPU kernels follow these rules exactly, but as noted) -----
 *
 * For `a [M, K] @ b [K, N]` (a's leading dims flattened into M rows):
 *
 * precision weights i8   (only when b is constant: a weight or computed from weights)
 *     per output column n:  s[n] = (float)(max_k |b[k,n]| / 127)   (1 if that max is 0)
 *                           q[k,n] = clamp(rne(b[k,n] / s[n]), -127, 127)
 *                           b[k,n] is replaced by (float)(q[k,n] * s[n])
 * precision weights i4 group=G
 *     as i8 with 7 for 127 and q in [-7, 7], but one scale per (group of G consecutive k,
 *     column n): the k-th row belongs to group k / G; G = 0 means one group over all of K.
 *     A last, shorter group (K % G != 0) gets its own scale like any other.
 *     One exception on the GPU, prefill: a product of many rows of bf16 activations (K % 8 == 0;
 *     codegen/lower.c: dq_min_rows, 65 for i4 and 160 for i8) multiplies bf16((float)(q * s)),
 *     the replaced b rounded once more, to bf16, as `precision matmul bf16` would
 *     (kernels/runtime.cuh: ffn_wq_dequant, then the bf16 tensor-core GEMM): 2^-9 relative per
 *     weight at most, about 1e-3 relative L2 on the product.
 *     The reference keeps (float)(q * s) at every row count; tests/gpu/gpu_util.h's bf16 tolerance
 *     covers the difference. FFNC_WQ_DEQUANT=0 keeps the rule exact at every row count, and so
 *     does the codes-in-registers tile, which sm_90 runs for i4 of whole 64-k groups at 129-512
 *     rows (kernels/gemm_wqrs.cuh: levels times each group's f32 scale, as the decode kernels).
 * precision matmul f32 | f16 | bf16
 *     both operands are rounded to that type (after any weight quantization).
 * precision matmul f8e4m3 | f8e5m2   (FMAX = 448 | 57344)
 *     per row r of a:       sa[r] = (float)(max_k |a[r,k]| / FMAX)   (1 if that max is 0)
 *                           qa[r,k] = round_to_dtype(a[r,k] / sa[r], T)   (saturating RNE)
 *     per column n of b:    sb[n] = (float)(max_k |b[k,n]| / FMAX)   (1 if that max is 0)
 *                           qb[k,n] = round_to_dtype(b[k,n] / sb[n], T)
 *     result[r,n] = round(sa[r] * sb[n] * sum_k qa[r,k] * qb[k,n]), the sum and the
 *     scaling in double.
 *     Pre-quantized weights (`weight w : [N, K] T scale`, ir/prequant.h): the weight's value
 *     is code[n,k] * s[n] in f32 (s[n] its row's scale, or the tensor's one scale). A column
 *     n of b that is a whole stored row of such a weight of type T itself (b = w^T, or w^T
 *     concatenated, interleaved or sliced by columns: the gate/up merge keeps this) is NOT
 *     quantized again: qb[k,n] = code[n,k] and sb[n] = s[n], exactly as stored, so
 *         result[r,n] = round(sa[r] * s[n] * sum_k qa[r,k] * code[n,k]).
 *     Every other column, and every other use of the weight (another policy, elementwise
 *     ops), sees the value code * s like any f32 value.
 *     (GPU: codegen/lower.c follows the same moves in f8_rows, mirroring them over the bound
 *     codes and the f8_scales of each weight; values come from one f8_dequant step. A change
 *     to stored_row_scales / stored_col_scales must be made there too.)
 * Divisions by a scale are done in double with the scale as stored (a float). Without a
 * `precision matmul` or `precision weights` setting the operands are used as they are.
 * `precision accumulate` and `precision norm` do not change the reference: it always
 * accumulates in double, which is what the GPU results are compared against.
 * -----------------------------------------------------------------------------------------
 */
#include "interp.h"
#include "prequant.h"

#include "checked.h"
#include "kernels/numfmt.cuh"
#include "dims.h"
#include "size_limits.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int64_t ref_numel(const RefTensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++)
    n *= t->shape[i];
  return n;
}

void ref_free(RefTensor *t) {
  free(t->data);
  t->data = NULL;
}



static bool raw_shape_valid(const RawTensor *t) {
  if (t->rank < 0 || t->rank > FFN_MAX_RANK)
    return false;
  for (int i = 0; i < t->rank; i++)
    if (t->shape[i] < 0)
      return false;
  return true;
}

/* SIZE_MAX when the product overflows: then it matches no buffer size and no shape. */
static size_t raw_numel(const RawTensor *t) {
  size_t n = 1;
  for (int i = 0; i < t->rank; i++)
    if (ckd_mul_size(&n, n, (size_t)t->shape[i]))
      return SIZE_MAX;
  return n;
}

static int check_nbytes(const char *kind, const char *name, const RawTensor *t, char *err, size_t errlen) {
  size_t need = dtype_bytes(t->dtype, raw_numel(t));
  if (t->nbytes != need || (need && !t->data)) {
    char s[256];
    return ffn_errf(err, errlen, "%s '%s': %s %s needs %zu bytes, got %zu", kind, name,
                ffn_shape_text(t->rank, t->shape, s, sizeof s), dtype_name(t->dtype), need, t->data ? t->nbytes : 0);
  }
  return 0;
}

/* ---- binding ---- */

/* Input n from src: its dims bound into dims (the input that bound each first in bound_by), its
 * shape, type and bytes checked; 0, or -1 with the reason in err. */
static int bind_input(const Graph *g, const Node *n, const InterpSources *src, int64_t *dims, const Node **bound_by,
                      const char **dim_names, char *err, size_t errlen) {
  char want[256], got[256];
  RawTensor t;
  memset(&t, 0, sizeof t);
  if (!src->inputs || src->inputs(src->inputs_ctx, n->name, &t) != 0)
    return ffn_errf(err, errlen, "missing input '%s'", n->name);
  if (!raw_shape_valid(&t))
    return ffn_errf(err, errlen, "input '%s': invalid shape (rank %d)", n->name, t.rank);
  int axis;
  DimsResult bound = dims_bind(n->shape.d, n->shape.rank, t.rank, t.shape, dims, true, &axis);
  if (bound == DIMS_RANK || bound == DIMS_SIZE) {
    char why[600];
    dims_mismatch_str(bound, axis, n->shape.d, n->shape.rank, dim_names, t.rank, t.shape, dims, why, sizeof why);
    return ffn_errf(err, errlen, "input '%s': %s", n->name, why);
  }
  if (t.dtype != n->dtype)
    return ffn_errf(err, errlen, "input '%s': expected %s %s, got %s %s", n->name,
                    shape_str(g, &n->shape, want, sizeof want), dtype_name(n->dtype),
                    ffn_shape_text(t.rank, t.shape, got, sizeof got), dtype_name(t.dtype));
  if (bound == DIMS_LIMIT)
    return ffn_errf(err, errlen, "input '%s': dim %d is %lld, above the limit of %lld (kernels index with 32-bit int)",
                    n->name, axis, (long long)t.shape[axis], (long long)FFN_MAX_DIM);
  int64_t numel;
  ShapeLimit why = shape_check_limits(t.rank, t.shape, &numel);
  if (why != SHAPE_OK)
    return ffn_errf(err, errlen, "input '%s': shape %s is too large: %s", n->name,
                    ffn_shape_text(t.rank, t.shape, got, sizeof got), shape_limit_words(why));
  if (bound == DIMS_CONFLICT) {
    int sym = n->shape.d[axis].sym;
    return ffn_errf(err, errlen, "input '%s': dim %s is %lld here but %lld in input '%s'", n->name, g->dims[sym].name,
                    (long long)t.shape[axis], (long long)dims[sym], bound_by[sym] ? bound_by[sym]->name : n->name);
  }
  for (int d = 0; d < t.rank; d++)
    if (n->shape.d[d].sym >= 0 && !bound_by[n->shape.d[d].sym])
      bound_by[n->shape.d[d].sym] = n;
  return check_nbytes("input", n->name, &t, err, errlen);
}

int interp_bind_dims(const Graph *g, const InterpSources *src, int64_t *dims, char *err, size_t errlen) {
  const Node **bound_by = calloc((size_t)g->ndims + 1, sizeof *bound_by);
  const char **dim_names = calloc((size_t)g->ndims + 1, sizeof *dim_names);
  if (!bound_by || !dim_names) {
    free(bound_by);
    free(dim_names);
    return ffn_errf(err, errlen, "out of host memory");
  }
  for (int i = 0; i < g->ndims; i++)
    dim_names[i] = g->dims[i].name, dims[i] = -1;
  int rc = 0;
  for (int i = 0; i < g->nodes.len && rc == 0; i++) {
    const Node *n = GRAPH_NODE(g, i);
    if (!n->dead && n->op == OP_INPUT)
      rc = bind_input(g, n, src, dims, bound_by, dim_names, err, errlen);
  }
  free(bound_by);
  free(dim_names);
  return rc;
}

int interp_check_weight(const Graph *g, const Node *w, const RawTensor *t, char *err, size_t errlen) {
  if (!t)
    return ffn_errf(err, errlen, "missing weight '%s'", w->name);
  char want[256], got[256];
  if (!shape_is_static(&w->shape))
    return ffn_errf(err, errlen, "weight '%s': declared with dynamic shape %s; weights need static shapes", w->name,
                shape_str(g, &w->shape, want, sizeof want));
  if (!raw_shape_valid(t))
    return ffn_errf(err, errlen, "weight '%s': invalid shape (rank %d)", w->name, t->rank);
  DType as_stored = w->stored != DT_NONE ? w->stored : w->dtype; /* pre-quantized: the codes */
  bool ok = t->rank == w->shape.rank && t->dtype == as_stored;
  for (int d = 0; ok && d < t->rank; d++)
    ok = w->shape.d[d].size == t->shape[d];
  if (!ok)
    return ffn_errf(err, errlen, "weight '%s': expected shape %s %s, got %s %s", w->name,
                shape_str(g, &w->shape, want, sizeof want), dtype_name(as_stored),
                ffn_shape_text(t->rank, t->shape, got, sizeof got), dtype_name(t->dtype));
  return check_nbytes("weight", w->name, t, err, errlen);
}

/* ---- evaluation ---- */

typedef struct {
  const Graph *g;
  const InterpSources *src;
  const int64_t *dims;
  char *err;
  size_t errlen;
  float **row_scale; /* by node id: a pre-quantized weight's scales [rows], once loaded */
  const InterpComm *comm; /* tensor parallel (interp_run_tp), else NULL */
} Ctx;

static float *alloc_values(Ctx *c, const Node *n, int64_t count) {
  size_t bytes;
  bool overflow = count < 0 || ckd_mul_size(&bytes, sizeof(float), (size_t)(count > 0 ? count : 1));
  float *p = overflow ? NULL : malloc(bytes);
  if (!p)
    ffn_errf(c->err, c->errlen, "%%%d (%s): out of host memory for %lld values", n->id, op_info[n->op].name,
         (long long)count);
  return p;
}

/* The node's shape with dynamic dims replaced by their bound sizes. */
static int resolve_shape(Ctx *c, const Node *n, RefTensor *out) {
  out->dtype = n->dtype;
  out->rank = n->shape.rank;
  for (int d = 0; d < n->shape.rank; d++) {
    Dim dim = n->shape.d[d];
    if (dim.sym >= 0 && c->dims[dim.sym] < 0)
      return ffn_errf(c->err, c->errlen, "dim %s is not bound by any input", c->g->dims[dim.sym].name);
    out->shape[d] = dim.sym >= 0 ? c->dims[dim.sym] : dim.size;
  }
  /* Every value's size is checked here, so ref_numel of any evaluated tensor is exact. */
  int64_t numel;
  ShapeLimit why = shape_check_limits(out->rank, out->shape, &numel);
  if (why != SHAPE_OK) {
    char s[256];
    return ffn_errf(c->err, c->errlen, "%%%d (%s): shape %s is too large: %s", n->id, op_info[n->op].name,
                ffn_shape_text(out->rank, out->shape, s, sizeof s), shape_limit_words(why));
  }
  return 0;
}

static void round_all(float *v, int64_t count, DType t) {
  if (t == DT_F32 || t == DT_F64)
    return; /* already floats (f64 values are held as float: ffnc never computes in f64) */
  for (int64_t i = 0; i < count; i++)
    v[i] = (float)round_to_dtype(v[i], t);
}

/* A pre-quantized weight: its value code * scale (f32), its scales kept for the fp8 product. */
static int load_prequant(Ctx *c, const Node *n, RefTensor *out) {
  RawTensor codes, scale;
  memset(&codes, 0, sizeof codes);
  memset(&scale, 0, sizeof scale);
  bool have_codes = c->src->weights && c->src->weights(c->src->weights_ctx, n->name, &codes) == 0;
  bool have_scale = have_codes && c->src->weights(c->src->weights_ctx, n->scale, &scale) == 0;
  PrequantWeight w;
  if (prequant_read(c->g, n, have_codes ? &codes : NULL, have_scale ? &scale : NULL, &w, c->err, c->errlen))
    return -1;
  if (!(out->data = alloc_values(c, n, ref_numel(out)))) {
    prequant_free(&w);
    return -1;
  }
  prequant_dequantize(&w, out->data);
  free(c->row_scale[n->id]); /* loaded again (it is freed after its last use) */
  c->row_scale[n->id] = w.scale;
  return 0;
}

static int load_leaf(Ctx *c, const Node *n, RefTensor *out) {
  RawTensor t;
  memset(&t, 0, sizeof t);
  if (n->op == OP_WEIGHT && n->stored != DT_NONE)
    return load_prequant(c, n, out);
  if (n->op == OP_WEIGHT) {
    bool found = c->src->weights && c->src->weights(c->src->weights_ctx, n->name, &t) == 0;
    if (interp_check_weight(c->g, n, found ? &t : NULL, c->err, c->errlen))
      return -1;
  } else if (!c->src->inputs || c->src->inputs(c->src->inputs_ctx, n->name, &t) != 0) {
    return ffn_errf(c->err, c->errlen, "missing input '%s'", n->name); /* bound before, gone now */
  }
  int64_t count = ref_numel(out);
  if ((size_t)count != raw_numel(&t))
    return ffn_errf(c->err, c->errlen, "input '%s' changed shape during the run", n->name);
  if (!(out->data = alloc_values(c, n, count)))
    return -1;
  /* The stored values are already of the node's type (checked), so they need no rounding.
   * f32 and bf16 (most weights) are converted in bulk; the rest element by element. */
  if (t.dtype == DT_F32) {
    memcpy(out->data, t.data, sizeof(float) * (size_t)count);
  } else if (t.dtype == DT_BF16) {
    const uint8_t *p = t.data;
    for (int64_t i = 0; i < count; i++) {
      uint16_t h;
      memcpy(&h, p + 2 * i, 2);
      out->data[i] = bf16_bits_to_f32(h);
    }
  } else {
    for (int64_t i = 0; i < count; i++)
      out->data[i] = (float)dtype_load(t.dtype, t.data, (size_t)i);
  }
  return 0;
}

/* The scalar math of the elementwise ops, shared with the generated kernels (ops.def). */
#define OPMATH_FLOAT 0
#include "kernels/opmath.cuh"
#include "kernels/quant.cuh"

typedef double (*UnaryFn)(double);
typedef double (*BinaryFn)(double, double);
static const UnaryFn unary_fn[OP_COUNT] = {
#define UNARY_OP(e, math, dsl) [OP_##e] = op_##math,
#include "ops.def"
#undef UNARY_OP
};
static const BinaryFn binary_fn[OP_COUNT] = {
#define BINARY_OP(e, math, dsl) [OP_##e] = op_##math,
#include "ops.def"
#undef BINARY_OP
};

/* numpy-style trailing broadcasting: operand dims are aligned to the right; a dim of 1 (or
 * a missing leading dim) is repeated through a stride of 0. */
static void eval_binary(const Node *n, const RefTensor *a, const RefTensor *b, RefTensor *out) {
  int rank = out->rank;
  int64_t sa[FFN_MAX_RANK] = {0}, sb[FFN_MAX_RANK] = {0}, idx[FFN_MAX_RANK] = {0};
  const RefTensor *ops[2] = {a, b};
  int64_t *strides[2] = {sa, sb};
  for (int k = 0; k < 2; k++) {
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
      int od = d - (rank - ops[k]->rank);
      if (od < 0 || (ops[k]->shape[od] == 1 && out->shape[d] != 1)) {
        strides[k][d] = 0;
      } else {
        strides[k][d] = s;
      }
      if (od >= 0)
        s *= ops[k]->shape[od];
    }
  }
  int64_t count = ref_numel(out);
  if (count == 0)
    return;
  BinaryFn f = binary_fn[n->op];
  if (rank == 0) {
    out->data[0] = (float)round_to_dtype(f(a->data[0], b->data[0]), n->dtype);
    return;
  }
  int64_t inner = out->shape[rank - 1], ia = sa[rank - 1], ib = sb[rank - 1];
  for (int64_t base = 0; base < count; base += inner) {
    int64_t oa = 0, ob = 0;
    for (int d = 0; d < rank - 1; d++)
      oa += idx[d] * sa[d], ob += idx[d] * sb[d];
    for (int64_t j = 0; j < inner; j++)
      out->data[base + j] =
          (float)round_to_dtype(f(a->data[oa + j * ia], b->data[ob + j * ib]), n->dtype);
    for (int d = rank - 2; d >= 0; d--) { /* odometer over the outer dims */
      if (++idx[d] < out->shape[d])
        break;
      idx[d] = 0;
    }
  }
}

/* Row statistics of x[0 .. dim): the mean and sqrt(mean square + eps) for rmsnorm (mean
 * then 0), sqrt(population variance + eps) for layernorm (two passes: the mean first). */
static void row_stats(bool rms, const float *xr, int64_t dim, double eps, double *mean, double *denom) {
  double m = 0, ss = 0;
  if (!rms) {
    for (int64_t i = 0; i < dim; i++)
      m += xr[i];
    m /= (double)dim;
  }
  for (int64_t i = 0; i < dim; i++)
    ss += ((double)xr[i] - m) * ((double)xr[i] - m);
  *mean = m;
  *denom = sqrt(ss / (double)dim + eps);
}

static void eval_norm(const Node *n, const RefTensor *x, const RefTensor *gain, const RefTensor *bias,
                      RefTensor *out) {
  int64_t dim = x->shape[x->rank - 1], rows = dim ? ref_numel(x) / dim : 0;
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x->data + r * dim;
    float *yr = out->data + r * dim;
    double mean, denom;
    row_stats(n->op == OP_RMSNORM, xr, dim, n->fval, &mean, &denom);
    for (int64_t i = 0; i < dim; i++) {
      double y = ((double)xr[i] - mean) / denom * gain->data[i];
      if (bias)
        y += bias->data[i];
      yr[i] = (float)round_to_dtype(y, n->dtype);
    }
  }
}

/* ---- matrix products ---- */

/* Replaces b [K, N] by its weight-quantized value (the contract at the top of the file; the
 * scale and level functions are kernels/quant.cuh's, which the GPU's load-time packing calls
 * too). */
static void quantize_weights(float *b, int64_t K, int64_t N, int qmax, int64_t group) {
  group = wq_group_len(K, group);
  for (int64_t k0 = 0; k0 < K; k0 += group) {
    int64_t k1 = k0 + group < K ? k0 + group : K;
    for (int64_t col = 0; col < N; col++) {
      double amax = 0;
      for (int64_t k = k0; k < k1; k++)
        amax = fmax(amax, fabs(b[k * N + col]));
      float s = wq_scale(amax, qmax);
      for (int64_t k = k0; k < k1; k++)
        b[k * N + col] = (float)(wq_level(b[k * N + col], s, qmax) * (double)s);
    }
  }
}

/* fp8 scaling of a [M, K] by rows (stride_row = K, stride_in = 1) or of b [K, N] by
 * columns (stride_row = 1, stride_in = N): fills scale[count] and quantizes in place. */
static void quantize_fp8(float *v, int64_t count, int64_t len, int64_t stride_row, int64_t stride_in, DType t,
                         double *scale) {
  for (int64_t r = 0; r < count; r++) {
    float *p = v + r * stride_row;
    double amax = 0;
    for (int64_t k = 0; k < len; k++)
      amax = fmax(amax, fabs(p[k * stride_in]));
    float s = ffn_f8_scale(amax, t == DT_F8E5M2);
    for (int64_t k = 0; k < len; k++)
      p[k * stride_in] = (float)round_to_dtype(p[k * stride_in] / (double)s, t);
    scale[r] = s;
  }
}

/* out[M, N] = round(sa[r] * sb[n] * sum_k a[r,k] * b[k,n]) (scales NULL: 1). Blocked so
 * that the double accumulators of a block of rows and columns stay in L1 while b is
 * streamed once per row block: the i-k-j order with a 32 KB working set. Every output
 * element is summed over k in order by exactly one thread, so the result does not depend
 * on the number of threads. */
enum { MM_ROWS = 8, MM_COLS = 512 };

typedef struct {
  const float *a, *b; /* [M, K], [K, N] */
  int64_t K, N, row_begin, row_end;
  const double *sa, *sb;
  float *out;
  DType t;
} MatmulJob;

/* acc[0, cols) += av * brow[0, cols); the constant trip count of full tiles and restrict
 * let compilers vectorize it at -O2. */
static inline void axpy_tile(double *restrict acc, const float *restrict brow, double av, int cols) {
  if (cols == MM_COLS)
    for (int j = 0; j < MM_COLS; j++)
      acc[j] += av * brow[j];
  else
    for (int j = 0; j < cols; j++)
      acc[j] += av * brow[j];
}

static void *matmul_rows(void *arg) {
  const MatmulJob *job = arg;
  const float *a = job->a, *b = job->b;
  int64_t K = job->K, N = job->N;
  double *acc = malloc(sizeof(double) * MM_ROWS * MM_COLS); /* off the (thread) stack */
  if (!acc)
    return arg; /* non-NULL: failed */
  for (int64_t r0 = job->row_begin; r0 < job->row_end; r0 += MM_ROWS) {
    int rows = (int)(job->row_end - r0 < MM_ROWS ? job->row_end - r0 : MM_ROWS);
    for (int64_t n0 = 0; n0 < N; n0 += MM_COLS) {
      int cols = (int)(N - n0 < MM_COLS ? N - n0 : MM_COLS);
      memset(acc, 0, sizeof(double) * MM_ROWS * MM_COLS);
      for (int64_t k = 0; k < K; k++)
        for (int r = 0; r < rows; r++) /* no skipping of zeros: 0 * inf must give NaN */
          axpy_tile(acc + r * MM_COLS, b + k * N + n0, a[(r0 + r) * K + k], cols);
      for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++) {
          double v = acc[r * MM_COLS + j];
          if (job->sa)
            v = job->sa[r0 + r] * job->sb[n0 + j] * v;
          job->out[(r0 + r) * N + n0 + j] = (float)round_to_dtype(v, job->t);
        }
    }
  }
  free(acc);
  return NULL;
}

enum { MAX_THREADS = 32 };

/* FFNC_INTERP_THREADS caps the threads (1: none), e.g. when many tests run at once; read
 * once, like every environment knob (README). */
static int threads_allowed;
static pthread_once_t threads_once = PTHREAD_ONCE_INIT;

static void read_threads(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  const char *env = getenv("FFNC_INTERP_THREADS");
  if (env && *env) {
    char *end;
    long v = strtol(env, &end, 10);
    if (*end == 0 && v >= 1)
      n = v;
  }
  threads_allowed = n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
}

static int max_threads(void) {
  pthread_once(&threads_once, read_threads);
  return threads_allowed;
}

/* Rows are split over threads when the product is big enough to pay for them: the GPU
 * tests check thousands of tokens of small models against this reference (4 layers of
 * D=256, F=704 at 4096 tokens, clang -O2: 3.2 s on one core, 1.3 s on 16). */
static int matmul_f64(const float *a, const float *b, int64_t M, int64_t K, int64_t N, const double *sa,
                      const double *sb, float *out, DType t) {
  int64_t work = M * K * N, blocks = (M + MM_ROWS - 1) / MM_ROWS;
  int nthreads = work < (INT64_C(1) << 24) ? 1 : max_threads();
  if (nthreads > blocks)
    nthreads = (int)(blocks > 0 ? blocks : 1);
  MatmulJob jobs[MAX_THREADS];
  pthread_t tid[MAX_THREADS];
  bool started[MAX_THREADS] = {false};
  int64_t per = (blocks + nthreads - 1) / nthreads * MM_ROWS;
  int rc = 0;
  for (int i = 0; i < nthreads; i++) {
    int64_t begin = i * per, end = begin + per < M ? begin + per : M;
    jobs[i] = (MatmulJob){a, b, K, N, begin < M ? begin : M, end, sa, sb, out, t};
    if (i > 0)
      started[i] = pthread_create(&tid[i], NULL, matmul_rows, &jobs[i]) == 0;
  }
  /* this thread does the first share, and any share whose thread could not start */
  for (int i = 0; i < nthreads; i++)
    if (!started[i] && matmul_rows(&jobs[i]))
      rc = -1;
  for (int i = 1; i < nthreads; i++) {
    void *res = NULL;
    if (started[i] && (pthread_join(tid[i], &res) != 0 || res))
      rc = -1;
  }
  return rc;
}

/* ---- pre-quantized weights in fp8 products ---- */

static void stored_col_scales(const Ctx *c, const Node *b, DType t, double *out);

/* out[R]: for each row of x [R, C], the scale of the stored row of a pre-quantized weight of
 * type t that it is (x a weight, or moved from weights: transposes, concatenations,
 * interleaving, slices of columns), or 0 where it is not one whole stored row's codes. */
static void stored_row_scales(const Ctx *c, const Node *x, DType t, double *out) {
  int64_t R = x->shape.d[0].size;
  for (int64_t r = 0; r < R; r++)
    out[r] = 0;
  if (x->op == OP_WEIGHT) {
    if (x->stored == t && x->shape.rank == 2 && c->row_scale[x->id])
      for (int64_t r = 0; r < R; r++)
        out[r] = c->row_scale[x->id][r];
  } else if (x->op == OP_TRANSPOSE) {
    stored_col_scales(c, x->args[0], t, out);
  } else if (x->op == OP_SLICE) { /* of columns: every row keeps its scale */
    stored_row_scales(c, x->args[0], t, out);
  } else if (x->op == OP_CONCAT && x->ival[0] == 0) {
    for (int i = 0, at = 0; i < x->nargs; at += (int)x->args[i]->shape.d[0].size, i++)
      stored_row_scales(c, x->args[i], t, out + at);
  } else if (x->op == OP_INTERLEAVE) { /* the rows permuted as eval_interleave permutes them */
    double *stacked = malloc(sizeof(double) * (size_t)(R > 0 ? R : 1));
    if (!stacked)
      return; /* all 0: then quantized like computed values */
    for (int i = 0, at = 0; i < x->nargs; at += (int)x->args[i]->shape.d[0].size, i++)
      stored_row_scales(c, x->args[i], t, stacked + at);
    int64_t G = x->ival[0], S = x->ival[1], N = R / S;
    for (int64_t i = 0; i < R; i++) {
      int64_t blk = i / N, row = i % N;
      out[(row / G) * G * S + blk * G + row % G] = stacked[i];
    }
    free(stacked);
  }
}

/* out[N]: for each column of b [K, N], the scale of the stored row it is, or 0 (as above). */
static void stored_col_scales(const Ctx *c, const Node *b, DType t, double *out) {
  int64_t N = b->shape.d[1].size;
  if (b->op == OP_TRANSPOSE) {
    stored_row_scales(c, b->args[0], t, out);
    return;
  }
  for (int64_t n = 0; n < N; n++)
    out[n] = 0;
  if (b->op == OP_SLICE) {
    int64_t full = b->args[0]->shape.d[1].size;
    double *all = malloc(sizeof(double) * (size_t)(full > 0 ? full : 1));
    if (all) {
      stored_col_scales(c, b->args[0], t, all);
      memcpy(out, all + b->ival[0], sizeof(double) * (size_t)N);
      free(all);
    }
  } else if (b->op == OP_CONCAT && b->ival[0] == 1) {
    for (int i = 0, at = 0; i < b->nargs; at += (int)b->args[i]->shape.d[1].size, i++)
      stored_col_scales(c, b->args[i], t, out + at);
  }
}

/* Column n of b [K, N] (in place, stride N) holds code * s: back to the codes, which is
 * exact for the scales prequant.h admits. -1 if a value is not code * s (a bug upstream). */
static int recover_codes(float *col, int64_t K, int64_t N, double s, DType t) {
  for (int64_t k = 0; k < K; k++) {
    float v = col[k * N];
    if (!isfinite(v))
      continue; /* NaN and e5m2's infinities are their own codes */
    double q = round_to_dtype(v / s, t);
    if ((float)((float)q * (float)s) != v)
      return -1;
    col[k * N] = (float)q;
  }
  return 0;
}

static float *copy_values(Ctx *c, const Node *n, const float *src, int64_t count) {
  float *p = alloc_values(c, n, count);
  if (p)
    memcpy(p, src, sizeof(float) * (size_t)count);
  return p;
}

/* The fp8 codes of a matmul's operands in place, with their scales: a's rows into sa, b's columns
 * into sb. Columns that are stored rows of pre-quantized weights of this type keep their codes and
 * scales; the others are quantized like any value. */
static int fp8_operands(Ctx *c, const Node *n, float *qa, float *qb, int64_t M, int64_t K, int64_t N, DType mm,
                        double *sa, double *sb) {
  quantize_fp8(qa, M, K, K, 1, mm, sa);
  double *stored = ir_is_const(n->args[1]) ? sb : NULL;
  if (stored)
    stored_col_scales(c, n->args[1], mm, stored);
  for (int64_t col = 0; col < N; col++) {
    if (!(stored && stored[col] > 0)) {
      quantize_fp8(qb + col, 1, K, 1, N, mm, sb + col);
    } else if (recover_codes(qb + col, K, N, stored[col], mm)) {
      ffn_errf(c->err, c->errlen, "%%%d (matmul): internal error: column %lld is not the stored codes times %g", n->id,
               (long long)col, stored[col]);
      return -1;
    }
  }
  return 0;
}

static int eval_matmul(Ctx *c, const Node *n, const RefTensor *a, const RefTensor *b, RefTensor *out) {
  const Precision *prec = &c->g->prec;
  DType mm = prec->type[PREC_MATMUL], wq = prec->type[PREC_WEIGHTS];
  int64_t K = b->shape[0], N = b->shape[1], M = 1; /* a's leading dims flattened */
  for (int d = 0; d < out->rank - 1; d++)
    M *= out->shape[d];
  const float *pa = a->data, *pb = b->data;
  float *qa = NULL, *qb = NULL;
  double *sa = NULL, *sb = NULL;
  int rc = -1;
  bool quant_b = wq != DT_NONE && ir_is_const(n->args[1]);
  if (quant_b && wq != DT_I8 && wq != DT_I4) {
    ffn_errf(c->err, c->errlen, "%%%d (matmul): precision weights %s is not supported (i8 or i4)", n->id,
         dtype_name(wq));
    goto out;
  }
  bool round_ops = mm == DT_F32 || mm == DT_F16 || mm == DT_BF16;
  bool fp8 = mm == DT_F8E4M3 || mm == DT_F8E5M2;
  if (mm != DT_NONE && !round_ops && !fp8) {
    ffn_errf(c->err, c->errlen, "%%%d (matmul): precision matmul %s is not supported", n->id, dtype_name(mm));
    goto out;
  }
  if (quant_b || round_ops || fp8) {
    if (!(qb = copy_values(c, n, pb, K * N)))
      goto out;
    pb = qb;
  }
  if (round_ops || fp8) {
    if (!(qa = copy_values(c, n, pa, M * K)))
      goto out;
    pa = qa;
  }
  if (quant_b)
    quantize_weights(qb, K, N, wq == DT_I8 ? 127 : 7, wq == DT_I4 ? prec->group : 0);
  if (round_ops) {
    if (a->dtype != mm)
      round_all(qa, M * K, mm);
    if (b->dtype != mm || quant_b)
      round_all(qb, K * N, mm);
  }
  if (fp8) {
    sa = malloc(sizeof(double) * (size_t)(M + 1));
    sb = malloc(sizeof(double) * (size_t)(N + 1));
    if (!sa || !sb) {
      ffn_errf(c->err, c->errlen, "%%%d (matmul): out of host memory", n->id);
      goto out;
    }
    if (fp8_operands(c, n, qa, qb, M, K, N, mm, sa, sb) != 0)
      goto out;
  }
  if (matmul_f64(pa, pb, M, K, N, sa, sb, out->data, n->dtype)) {
    ffn_errf(c->err, c->errlen, "%%%d (matmul): out of host memory", n->id);
    goto out;
  }
  rc = 0;
out:
  free(qa);
  free(qb);
  free(sa);
  free(sb);
  return rc;
}

/* a^T b for a [M, K], b [M, N] (leading dims flattened into M): the product of a's
 * transpose, so that the sum over M is the blocked product's accumulation in double. */
static int eval_matmul_at(Ctx *c, const Node *n, const RefTensor *a, const RefTensor *b, RefTensor *out) {
  int64_t K = out->shape[0], N = out->shape[1], M = K ? ref_numel(a) / K : 0;
  float *at = alloc_values(c, n, M * K);
  if (!at)
    return -1;
  for (int64_t m = 0; m < M; m++)
    for (int64_t k = 0; k < K; k++)
      at[k * M + m] = a->data[m * K + k];
  int rc = matmul_f64(at, b->data, K, M, N, NULL, NULL, out->data, n->dtype);
  free(at);
  return rc ? ffn_errf(c->err, c->errlen, "%%%d (matmul_at): out of host memory", n->id) : 0;
}

/* ---- data movement (values are copied; rounded only if the node's type differs) ---- */

static void eval_transpose(const RefTensor *a, RefTensor *out) {
  int64_t R = a->shape[0], C = a->shape[1];
  /* Small tiles: rows of big weights are 4 KB multiples apart, so the lines of a tile fall
   * into one L1 set; 8 of them per side fit its ways, 32 thrash (measured 2x). */
  enum { TILE = 8 };
  for (int64_t i0 = 0; i0 < R; i0 += TILE)
    for (int64_t j0 = 0; j0 < C; j0 += TILE)
      for (int64_t i = i0; i < i0 + TILE && i < R; i++)
        for (int64_t j = j0; j < j0 + TILE && j < C; j++)
          out->data[j * R + i] = a->data[i * C + j];
}

static void eval_slice(const Node *n, const RefTensor *a, RefTensor *out) {
  int64_t last = a->shape[a->rank - 1], len = n->ival[1], rows = last ? ref_numel(a) / last : 0;
  for (int64_t r = 0; r < rows; r++)
    memcpy(out->data + r * len, a->data + r * last + n->ival[0], sizeof(float) * (size_t)len);
}

static void eval_concat(const Node *n, RefTensor *const *args, RefTensor *out) {
  int axis = (int)n->ival[0];
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; d++)
    outer *= out->shape[d];
  for (int d = axis + 1; d < out->rank; d++)
    inner *= out->shape[d];
  int64_t out_chunk = out->shape[axis] * inner;
  for (int64_t o = 0; o < outer; o++) {
    int64_t at = 0;
    for (int i = 0; i < n->nargs; i++) {
      int64_t chunk = args[i]->shape[axis] * inner;
      memcpy(out->data + o * out_chunk + at, args[i]->data + o * chunk, sizeof(float) * (size_t)chunk);
      at += chunk;
    }
  }
}

/* The operands stacked along dim 0 are R rows, seen as S blocks of N = R/S rows; row n of
 * block s goes to row (n/G)*G*S + s*G + n%G (G = ival[0], S = ival[1]). */
static void eval_interleave(const Node *n, RefTensor *const *args, RefTensor *out) {
  int64_t G = n->ival[0], S = n->ival[1], K = out->shape[1], N = out->shape[0] / S, i = 0;
  for (int a = 0; a < n->nargs; a++)
    for (int64_t r = 0; r < args[a]->shape[0]; r++, i++) {
      int64_t s = i / N, row = i % N, to = (row / G) * G * S + s * G + row % G;
      memcpy(out->data + to * K, args[a]->data + r * K, sizeof(float) * (size_t)K);
    }
}

/* RMS_RSTD, LN_MEAN, LN_RSTD: one statistic per row, [..., D] -> [..., 1]. */
static void eval_row_stat(const Node *n, const RefTensor *x, RefTensor *out) {
  int64_t dim = x->shape[x->rank - 1], rows = ref_numel(out);
  for (int64_t r = 0; r < rows; r++) {
    double mean, denom;
    row_stats(n->op == OP_RMS_RSTD, x->data + r * dim, dim, n->fval, &mean, &denom);
    out->data[r] = (float)round_to_dtype(n->op == OP_LN_MEAN ? mean : 1.0 / denom, n->dtype);
  }
}

/* SUM_TO: each element of x added into the element of out it was broadcast from. */
static int eval_sum_to(Ctx *c, const Node *n, const RefTensor *x, RefTensor *out) {
  int64_t count = ref_numel(out), stride[FFN_MAX_RANK] = {0}, idx[FFN_MAX_RANK] = {0}, s = 1;
  double *acc = calloc((size_t)(count > 0 ? count : 1), sizeof *acc);
  if (!acc)
    return ffn_errf(c->err, c->errlen, "%%%d (sum_to): out of host memory", n->id);
  int lead = x->rank - out->rank;
  for (int d = x->rank - 1; d >= lead; d--) { /* the leading dims and the summed ones: stride 0 */
    stride[d] = out->shape[d - lead] == 1 ? 0 : s;
    s *= out->shape[d - lead];
  }
  for (int64_t i = 0, total = ref_numel(x); i < total; i++) {
    int64_t o = 0;
    for (int d = 0; d < x->rank; d++)
      o += idx[d] * stride[d];
    acc[o] += x->data[i];
    for (int d = x->rank - 1; d >= 0 && ++idx[d] == x->shape[d]; d--) /* odometer */
      idx[d] = 0;
  }
  for (int64_t i = 0; i < count; i++)
    out->data[i] = (float)round_to_dtype(acc[i], n->dtype);
  free(acc);
  return 0;
}

static void eval_rowsum(const Node *n, const RefTensor *a, RefTensor *out) {
  int64_t K = a->shape[a->rank - 1], rows = ref_numel(out);
  for (int64_t r = 0; r < rows; r++) {
    double s = 0;
    for (int64_t k = 0; k < K; k++)
      s += a->data[r * K + k];
    out->data[r] = (float)round_to_dtype(s, n->dtype);
  }
}

static int eval_node(Ctx *c, const Node *n, RefTensor *const *args, RefTensor *out) {
  if (resolve_shape(c, n, out))
    return -1;
  if (n->op == OP_INPUT || n->op == OP_WEIGHT)
    return load_leaf(c, n, out);
  int64_t count = ref_numel(out);
  if (!(out->data = alloc_values(c, n, count)))
    return -1;
  const RefTensor *a = n->nargs ? args[0] : NULL;
  switch (n->op) { /* no default: an op the interpreter misses is a -Wswitch warning */
  case OP_INPUT:
  case OP_WEIGHT:
    break; /* loaded above */
  case OP_SCALAR:
    out->data[0] = (float)round_to_dtype(n->fval, n->dtype);
    return 0;
#define UNARY_OP(e, math, dsl) case OP_##e:
#include "ops.def"
#undef UNARY_OP
    for (int64_t i = 0; i < count; i++)
      out->data[i] = (float)round_to_dtype(unary_fn[n->op](a->data[i]), n->dtype);
    return 0;
#define BINARY_OP(e, math, dsl) case OP_##e:
#include "ops.def"
#undef BINARY_OP
    eval_binary(n, a, args[1], out);
    return 0;
  case OP_MATMUL:
    return eval_matmul(c, n, a, args[1], out);
  case OP_RMSNORM:
  case OP_LAYERNORM:
    eval_norm(n, a, args[1], n->nargs > 2 ? args[2] : NULL, out);
    return 0;
  case OP_RMS_RSTD:
  case OP_LN_MEAN:
  case OP_LN_RSTD:
    eval_row_stat(n, a, out);
    return 0;
  case OP_ROWSUM:
    eval_rowsum(n, a, out);
    return 0;
  case OP_SUM_TO:
    return eval_sum_to(c, n, a, out);
  case OP_MATMUL_AT:
    return eval_matmul_at(c, n, a, args[1], out);
  case OP_TRANSPOSE:
    eval_transpose(a, out);
    break;
  case OP_SLICE:
    eval_slice(n, a, out);
    break;
  case OP_CONCAT:
    eval_concat(n, args, out);
    break;
  case OP_INTERLEAVE:
    eval_interleave(n, args, out);
    break;
  case OP_ALLREDUCE:
    if (!c->comm)
      return ffn_errf(c->err, c->errlen, "%%%d: an all-reduce: this graph is one rank's share of a tensor-parallel "
                                         "program; run the ranks together (interp_run_tp)", n->id);
    memcpy(out->data, a->data, sizeof(float) * (size_t)count);
    return c->comm->allreduce(c->comm->ctx, out->data, count, n->dtype, c->err, c->errlen);
  case OP_WQ_SCALE:
  case OP_WQ_PACK:
  case OP_F8_SCALE:
  case OP_F8_PACK:
  case OP_F8_SCALES:
  case OP_F8_DEQUANT: /* the verifier keeps them out of graphs */
    return ffn_errf(c->err, c->errlen, "%%%d: %s is a GPU packing step, not a graph op", n->id, op_info[n->op].name);
  }
  /* data movement: the values are already rounded to their operands' types */
  for (int i = 0; i < n->nargs; i++)
    if (args[i]->dtype != n->dtype) {
      round_all(out->data, count, n->dtype);
      break;
    }
  return 0;
}

int interp_run(const Graph *g, const InterpSources *src, RefTensor *outputs, char *err, size_t errlen) {
  return interp_run_rank(g, src, NULL, outputs, err, errlen);
}

int interp_run_rank(const Graph *g, const InterpSources *src, const InterpComm *comm, RefTensor *outputs, char *err,
                    size_t errlen) {
  for (int i = 0; i < g->noutputs; i++)
    memset(&outputs[i], 0, sizeof outputs[i]);
  char why[512];
  if (ir_verify(g, why, sizeof why))
    return ffn_errf(err, errlen, "invalid graph: %s", why);

  int count = g->nodes.len, rc = -1;
  int64_t *dims = malloc(sizeof(int64_t) * (size_t)(g->ndims + 1));
  int *pos = malloc(sizeof(int) * (size_t)(g->next_id + 1));
  int *uses = calloc((size_t)count + 1, sizeof(int));
  bool *needed = calloc((size_t)count + 1, sizeof(bool));
  RefTensor *vals = calloc((size_t)count + 1, sizeof(RefTensor));
  float **row_scale = calloc((size_t)g->next_id + 1, sizeof(float *));
  RefTensor *args[64];
  if (!dims || !pos || !uses || !needed || !vals || !row_scale) {
    ffn_errf(err, errlen, "out of host memory");
    goto out;
  }
  if (interp_bind_dims(g, src, dims, err, errlen))
    goto out;
  Ctx c = {g, src, dims, err, errlen, row_scale, comm};

  /* Evaluate only what the outputs need, and count uses among those nodes so that each
   * value is freed right after its last user (ir_use_counts would count unneeded users
   * too, and would allocate in the graph's arena on every run). */
  for (int i = 0; i < count; i++)
    pos[GRAPH_NODE(g, i)->id] = i;
  for (int i = 0; i < g->noutputs; i++) {
    int p = pos[g->outputs[i].node->id];
    needed[p] = true;
    uses[p]++;
  }
  for (int i = count - 1; i >= 0; i--) {
    const Node *n = GRAPH_NODE(g, i);
    if (!needed[i] || n->dead)
      continue;
    for (int j = 0; j < n->nargs; j++) {
      int p = pos[n->args[j]->id];
      needed[p] = true;
      uses[p]++;
    }
  }

  for (int i = 0; i < count; i++) {
    const Node *n = GRAPH_NODE(g, i);
    if (!needed[i] || n->dead)
      continue;
    for (int j = 0; j < n->nargs; j++)
      args[j] = &vals[pos[n->args[j]->id]];
    if (eval_node(&c, n, args, &vals[i]))
      goto out;
    for (int j = 0; j < n->nargs; j++) {
      int p = pos[n->args[j]->id];
      if (--uses[p] == 0)
        ref_free(&vals[p]);
    }
  }

  /* What is left are the outputs; a node named by several outputs is copied for all but
   * its last, which takes the buffer. */
  for (int i = 0; i < g->noutputs; i++) {
    int p = pos[g->outputs[i].node->id];
    outputs[i] = vals[p];
    if (--uses[p] == 0) {
      vals[p].data = NULL;
    } else {
      int64_t numel = ref_numel(&vals[p]);
      outputs[i].data = malloc(sizeof(float) * (size_t)(numel > 0 ? numel : 1));
      if (!outputs[i].data) {
        ffn_errf(err, errlen, "out of host memory copying output '%s'", g->outputs[i].name);
        goto out;
      }
      memcpy(outputs[i].data, vals[p].data, sizeof(float) * (size_t)numel);
    }
  }
  rc = 0;
out:
  if (vals)
    for (int i = 0; i < count; i++)
      ref_free(&vals[i]);
  if (rc)
    for (int i = 0; i < g->noutputs; i++)
      ref_free(&outputs[i]);
  for (int i = 0; row_scale && i <= g->next_id; i++)
    free(row_scale[i]);
  free(row_scale);
  free(dims);
  free(pos);
  free(uses);
  free(needed);
  free(vals);
  return rc;
}
