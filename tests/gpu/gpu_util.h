/* gpu_util.h: what the GPU tests share: a model with random weights bound on the device and
 * kept in host memory for the CPU reference, fresh random inputs, and the comparison.
 *
 * Every check compares the GPU result with the CPU reference interpreter (ir/interp.c) on
 * fresh random inputs (never zeros); ffn_model_run_host poisons the outputs with NaN bytes
 * before the run, so an element the kernels never wrote fails the comparison.
 */
#ifndef FFNC_GPU_UTIL_H
#define FFNC_GPU_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "codegen/driver.h"
#include "include/ffn.h"
#include "ir/interp.h"
#include "runtime/dlpack_dtype.h"
#include "runtime/randinit.h"
#include "runtime/safetensors.h"
#include "plan_util.h" /* source_path */

#define SKIP 77

/* Tolerances: the norm-wise relative error ||gpu - ref|| / ||ref||, and per element
 * |gpu - ref| <= rtol*|ref| + atol*rms(ref), by the narrowest floating type the model computes
 * in, against two references:
 *   the program's:  the reference interpreter on the optimized IR that was compiled (the same
 *                   values rounded at the same places; only f32-vs-f64 arithmetic differs);
 *   the source's:   the reference interpreter on the front end's IR (also the rounding
 *                   differences of the passes: gains rounded into weights, values kept in
 *                   f32 inside kernels; passes_semantics_test checks those alone).
 */
typedef struct {
  double norm, rtol, atol;
  /* 16-bit: a few elements may be off by more, up to rare_atol x rms(ref) (a fraction `rare` of
   * them, at least one): a stored intermediate one ulp apart (below) moves an output by up to
   * an ulp of the values it came from, which the per-element bound does not cover where a
   * residual add cancels or where a gradient is a product of several rounded values. Measured
   * on the H200: -O0 llama3_tiny at 4096 tokens, 1 element in 10^6 off by 0.025 rms; the
   * weight gradients of Llama/Phi-3, up to 9 of 196608 elements off by up to 0.19 rms. A wrong
   * kernel is off by O(rms) on many elements. */
  double rare_atol, rare;
} Tolerance;

static inline Tolerance tolerance_for(DType t, bool source) {
  if (t == DT_F32)
    return (Tolerance){1e-5, 1e-4, 1e-5, 0, 0};
  /* 16-bit: outputs a stored value rounds differently in one ulp (2^-8 for bf16) where the GPU's
   * f32 sums and the reference's f64 sums fall on either side of a rounding boundary, and
   * stacked layers carry such flips on; measured on the H200: bf16 rel_l2 about 1e-3 against
   * the program's reference, up to 3e-3 at one token, 8e-3 against the source's. */
  if (t == DT_F16)
    return source ? (Tolerance){3e-3, 5e-2, 2e-2, 5e-2, 1e-5} : (Tolerance){2e-3, 2e-2, 1e-2, 5e-2, 1e-5};
  return source ? (Tolerance){1.5e-2, 1e-1, 5e-2, 0.1, 1e-5} : (Tolerance){1e-2, 5e-2, 2e-2, 0.1, 1e-5}; /* bf16 */
}

/* Whether g is a backward graph (passes/grad.c): it has the inputs grad.OUTPUT, a name no program
 * can give an input (identifiers have no '.'). */
static inline bool is_backward_graph(const Graph *g) {
  for (int i = 0; i < g->nodes.len; i++)
    if (GRAPH_NODE(g, i)->op == OP_INPUT && strncmp(GRAPH_NODE(g, i)->name, "grad.", 5) == 0)
      return true;
  return false;
}

/* The tolerance of the gradients of a backward graph whose narrowest type is t. They are f32,
 * computed from the forward values the graph recomputes in the program's types, so they carry
 * the forward values' differences (tolerance_for, above) through the backward chain, plus f32
 * sums over the tokens (matmul_at, sum_to: up to 1000 terms each, summed in order by one thread)
 * against the reference's f64 ones, and the cancellation of the norms' backward (u - mean(u) -
 * xhat mean(u xhat)): f32 ten times looser than forward f32 values; 16-bit as the forward values
 * against the source, which already covers the differences of the passes. Measured on the H200
 * (12 models, T = 1..1000): bf16 rel_l2 0.24-0.7% against the program's reference, up to 1.2%
 * against the source's; a few weight-gradient elements (the `rare` allowance) beyond the
 * per-element bound, all within 0.5 rms: up to 72 of 180224 (4e-4), against either reference.
 * A 16-bit forward value rounded the other way moves a few output gradients dy_t, and at few
 * tokens a weight gradient (a sum of few outer products dy_t x_t^T) carries each along a row.
 * Since the products of 16-bit graphs read the gradient rounded to 16 bits (passes/grad.c), a
 * gradient near a rounding boundary may round the other way too, one more such move; the bounds
 * are unchanged until measured (grad_precision_test bounds the rule itself against f32). */
static inline Tolerance tolerance_grad(DType t, bool source) {
  if (t == DT_F32)
    return (Tolerance){1e-4, 1e-3, 1e-4, 0, 0};
  if (t == DT_F16)
    return source ? (Tolerance){5e-3, 5e-2, 2e-2, 0.5, 1e-2} : (Tolerance){3e-3, 5e-2, 2e-2, 0.5, 1e-2};
  return source ? (Tolerance){3e-2, 1e-1, 5e-2, 0.5, 1e-2} : (Tolerance){1.5e-2, 1e-1, 5e-2, 0.5, 1e-2}; /* bf16 */
}

/* The tolerance for g's outputs. Under `precision weights i8|i4` the program's reference and
 * the GPU see the same quantized weights (kernels/quant.cuh), so what remains is f32 against f64
 * accumulation and output rounding, as without quantization: the same tolerance. (At prefill
 * sizes with bf16 activations, codegen/lower.c: dq_min_rows, the GPU rounds each q * s to bf16
 * first, ir/interp.c: about 1e-3 rel_l2 more, within bf16's 1e-2.) The source's reference
 * quantizes other weights: the front end's W instead of the norm gain folded into it
 * (W * g, quantized per column and group: other levels), so it differs by a quantization error
 * of its own, measured on the CPU (passes_semantics_test, these test models): rel_l2 7e-3 (f16)
 * to 1.2e-2 (bf16) for i8, 0.09-0.15 for i4 (15 levels). The source comparison then only
 * catches gross errors: rel_l2 3e-2 (i8) and 0.3 (i4), elements within 0.3 / 1.0 rms. */
static inline Tolerance tolerance_of(const Graph *g, DType narrow, bool source) {
  Tolerance t = is_backward_graph(g) ? tolerance_grad(narrow, source) : tolerance_for(narrow, source);
  DType w = g->prec.type[PREC_WEIGHTS], mm = g->prec.type[PREC_MATMUL];
  /* fp8 products: the GPU makes the reference's codes bit for bit from the same stored values
   * (kernels/numfmt.cuh), but a stored activation one 16-bit ulp away from the reference's (f32
   * against f64 arithmetic upstream, as above) lands on another fp8 code about once in 16 (2^-8
   * against the codes' 2^-4 spacing of e4m3), which moves that element by up to 6%, and every
   * later product quantizes the difference again. So layer after layer the GPU's result and the
   * reference's become two equally valid fp8 results that differ by about the quantization
   * noise (measured on the H200: rel_l2 0.2-0.4% after one layer, 1-2% after two). Against them
   * only a norm bound and gross per-element errors here; what fp8 must get right is checked by
   * fp8_quality: the GPU no less accurate than the reference against the unquantized result. */
  if (mm == DT_F8E4M3)
    t = source ? (Tolerance){5e-2, 1.0, 0.4, 0, 0} : (Tolerance){4e-2, 1.0, 0.4, 0, 0};
  /* e5m2: codes twice as far apart, a flip moves an element twice as far (measured, 1,000 random
   * programs: seed 451, stacked e5m2 products, rel_l2 0.059 between two valid results) */
  if (mm == DT_F8E5M2)
    t = source ? (Tolerance){1e-1, 1.0, 0.8, 0, 0} : (Tolerance){8e-2, 1.0, 0.8, 0, 0};
  if (source && w == DT_I8)
    t = (Tolerance){3e-2, 0.3, 0.3, 0, 0};
  if (source && w == DT_I4)
    t = (Tolerance){0.3, 1.0, 1.0, 0, 0};
  return t;
}

/* The narrowest floating type any value of g has (scalars aside). */
static inline DType narrowest_type(const Graph *g) {
  DType t = DT_F32;
  for (int i = 0; i < g->nodes.len; i++) {
    DType d = GRAPH_NODE(g, i)->dtype;
    if (GRAPH_NODE(g, i)->op != OP_SCALAR && dtype_is_float(d) && dtype_bits(d) < dtype_bits(t))
      t = d;
    if (d == DT_BF16 && t == DT_F16)
      t = DT_BF16; /* fewer mantissa bits */
  }
  return t;
}

static inline void require_gpu(void) {
  char why[512];
  if (ffn_device_count(why, sizeof why) == 0) {
    printf("SKIP: %s\n", why);
    exit(SKIP);
  }
}

/* Token counts to test: FFNC_TEST_TOKENS="1,7,64" overrides (compute-sanitizer runs use a
 * short list). */
static inline int test_tokens(int64_t *out, int max) {
  const char *env = getenv("FFNC_TEST_TOKENS");
  /* decode (mma.sync), the mid regime (M <= 512), prefill; none a multiple of the tiles but 64 */
  static const int64_t dflt[] = {1, 7, 64, 300, 1000, 4096};
  if (!env || !*env) {
    memcpy(out, dflt, sizeof dflt);
    return (int)(sizeof dflt / sizeof dflt[0]);
  }
  int n = 0;
  for (const char *p = env; *p && n < max;) {
    out[n++] = strtoll(p, (char **)&p, 10);
    if (*p == ',')
      p++;
  }
  return n;
}

typedef struct {
  char *name;
  RawTensor t;
} Named;

typedef struct {
  Named *items;
  int n;
} TensorSet;

static inline int set_lookup(void *ctx, const char *name, RawTensor *out) {
  TensorSet *s = ctx;
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->items[i].name, name) == 0) {
      *out = s->items[i].t;
      return 0;
    }
  return -1;
}

static inline void set_add(TensorSet *s, const char *name, DType dt, int rank, const int64_t *shape, void *data,
                           size_t nbytes) {
  s->items = realloc(s->items, sizeof(Named) * (size_t)(s->n + 1));
  Named *it = &s->items[s->n++];
  it->name = strdup(name);
  it->t = (RawTensor){.dtype = dt, .rank = rank, .data = data, .nbytes = nbytes};
  memcpy(it->t.shape, shape, sizeof(int64_t) * (size_t)rank);
}

/* Rank `rank`'s share of the program at path over `ranks` ranks (1, 0: the whole program);
 * exits on a compile error. */
static inline ffn_program *compile_tp(const char *path, int ranks, int rank) {
  ffn_options *o;
  ffn_program *p = NULL;
  ffn_options_create(&o);
  ffn_options_set_tensor_parallel(o, ranks, rank);
  if (ffn_program_compile_file(path, o, &p) != FFN_OK) {
    fprintf(stderr, "%s: %s\n", path, ffn_last_error());
    exit(1);
  }
  ffn_options_destroy(o);
  return p;
}

static inline void set_free(TensorSet *s) {
  for (int i = 0; i < s->n; i++) {
    free(s->items[i].name);
    free((void *)s->items[i].t.data);
  }
  free(s->items);
  *s = (TensorSet){0};
}

static inline DLDataType dl_of(DType t) {
  DLDataType d = {kDLOpaqueHandle, 0, 0}; /* no DLPack type: the run refuses the tensor by name */
  dtype_to_dl(t, &d);
  return d;
}

/* The seed of a test's random weights and inputs: FFNC_TEST_SEED to replay a failure, else
 * from the time and pid. Printed either way, so a failing run says how to replay it. */
static inline uint64_t test_seed(void) {
  const char *env = getenv("FFNC_TEST_SEED");
  uint64_t seed = env && *env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
  printf("seed %llu (replay with FFNC_TEST_SEED=%llu)\n", (unsigned long long)seed, (unsigned long long)seed);
  return seed;
}

/* Random weights for every weight of g (seeded), in host memory. */
static inline void make_weights(const Graph *g, uint64_t seed, TensorSet *w) {
  for (int i = 0; i < g->nodes.len; i++) {
    Node *n = GRAPH_NODE(g, i);
    if (n->op != OP_WEIGHT)
      continue;
    int64_t shape[FFN_MAX_RANK], numel = 1;
    for (int d = 0; d < n->shape.rank; d++)
      numel *= shape[d] = n->shape.d[d].size;
    double mean, std;
    randinit_weight_scale(g, n, &mean, &std);
    size_t nbytes;
    if (n->stored != DT_NONE) { /* pre-quantized: codes and a [rows, 1] f32 scale */
      void *codes;
      float *scale;
      if (randinit_prequant(n, seed, mean, std, &codes, &nbytes, &scale) != 0)
        abort();
      int64_t sshape[2] = {n->shape.rank ? n->shape.d[0].size : 1, 1};
      int srank = 2;
      if (strstr(n->scale, "per_tensor")) {
        /* a scale named *per_tensor*: one scale [] for the tensor, the largest row scale, so most
         * rows' largest code is below the format's max (quantizing their values again would
         * give other codes: the GPU must use the stored ones) */
        float top = 0;
        for (int64_t r = 0; r < sshape[0]; r++)
          top = scale[r] > top ? scale[r] : top;
        for (int64_t j = 0; j < numel; j++) {
          int64_t r = sshape[0] ? j / (numel / sshape[0]) : 0;
          dtype_store(n->stored, codes, (size_t)j, dtype_load(n->stored, codes, (size_t)j) * scale[r] / top);
        }
        scale[0] = top, sshape[0] = 1, srank = 0;
      }
      set_add(w, n->name, n->stored, n->shape.rank, shape, codes, nbytes);
      set_add(w, n->scale, DT_F32, srank, sshape, scale, sizeof(float) * (size_t)sshape[0]);
      continue;
    }
    void *p = randinit_tensor(n->name, seed, n->dtype, numel, mean, std, &nbytes);
    set_add(w, n->name, n->dtype, n->shape.rank, shape, p, nbytes);
  }
}

/* Fresh random inputs with every dynamic dim = tokens. */
static inline void make_inputs(const Graph *g, int64_t tokens, uint64_t seed, TensorSet *in) {
  for (int i = 0; i < g->nodes.len; i++) {
    Node *n = GRAPH_NODE(g, i);
    if (n->op != OP_INPUT)
      continue;
    int64_t shape[FFN_MAX_RANK], numel = 1;
    for (int d = 0; d < n->shape.rank; d++)
      numel *= shape[d] = n->shape.d[d].sym >= 0 ? tokens : n->shape.d[d].size;
    size_t nbytes;
    void *p = randinit_tensor(n->name, seed, n->dtype, numel, 0.0, 1.0, &nbytes);
    set_add(in, n->name, n->dtype, n->shape.rank, shape, p, nbytes);
  }
}

/* fp8 checkpoints (pre-quantized weights: codes and scales) bind from a file, as they ship. */
static inline int bind_weights_through_file(ffn_model *m, const TensorSet *w) {
  char path[] = "/tmp/ffnc-weights-XXXXXX", err[512];
  int fd = mkstemp(path);
  if (fd < 0) {
    printf("FAIL: mkstemp\n");
    return -1;
  }
  close(fd);
  StWriter *st = st_writer_create();
  int rc = 0;
  for (int i = 0; i < w->n && rc == 0; i++) {
    const RawTensor *t = &w->items[i].t;
    rc = st_writer_add(st, w->items[i].name, t->dtype, t->rank, t->shape, t->data, t->nbytes, err, sizeof err);
  }
  if (rc == 0)
    rc = st_writer_save(st, path, err, sizeof err);
  st_writer_destroy(st);
  if (rc != 0)
    printf("FAIL: writing the weights: %s\n", err);
  else if (ffn_model_bind_weights_file(m, path) != FFN_OK) {
    printf("FAIL: bind %s: %s\n", path, ffn_last_error());
    rc = -1;
  }
  unlink(path);
  return rc;
}

static inline int bind_weights(ffn_model *m, const TensorSet *w) {
  bool checkpoint = false;
  for (int i = 0; i < w->n; i++)
    checkpoint |= w->items[i].t.dtype == DT_F8E4M3 || w->items[i].t.dtype == DT_F8E5M2;
  if (checkpoint) {
    if (bind_weights_through_file(m, w) != 0)
      return -1;
    if (ffn_model_prepare(m) != FFN_OK) {
      printf("FAIL: prepare: %s\n", ffn_last_error());
      return -1;
    }
    return 0;
  }
  for (int i = 0; i < w->n; i++) {
    const RawTensor *t = &w->items[i].t;
    DLTensor d = {(void *)t->data, {kDLCPU, 0}, t->rank, dl_of(t->dtype), (int64_t *)t->shape, NULL, 0};
    if (ffn_model_bind_weight(m, w->items[i].name, &d) != FFN_OK) {
      printf("FAIL: bind %s: %s\n", w->items[i].name, ffn_last_error());
      return -1;
    }
  }
  if (ffn_model_prepare(m) != FFN_OK) {
    printf("FAIL: prepare: %s\n", ffn_last_error());
    return -1;
  }
  return 0;
}

static int compare_one(const char *label, const char *which, const char *name, Tolerance tol, DType dt,
                       const void *out, const RefTensor *ref) {
  int64_t n = ref_numel(ref), bad = 0, rare = 0, first_bad = -1, at_max = -1;
  double num = 0, den = 0, maxerr = 0;
  for (int64_t j = 0; j < n; j++)
    den += (double)ref->data[j] * ref->data[j];
  double rms = n ? sqrt(den / (double)n) : 0;
  for (int64_t j = 0; j < n; j++) {
    double o = dtype_load(dt, out, (size_t)j), r = ref->data[j], e = fabs(o - r);
    if (!(e <= tol.rtol * fabs(r) + tol.atol * rms)) { /* NaN fails too */
      if (first_bad < 0)
        first_bad = j;
      if (e <= tol.rtol * fabs(r) + tol.rare_atol * rms)
        rare++; /* a rounding flip upstream: a few allowed, below */
      else
        bad++;
    }
    num += (o - r) * (o - r);
    if (e > maxerr || (e != e && maxerr == maxerr)) {
      maxerr = e;
      at_max = j;
    }
  }
  double rel = den > 0 ? sqrt(num / den) : sqrt(num);
  int64_t max_rare = tol.rare > 0 ? (int64_t)fmax(1, tol.rare * (double)n) : 0;
  bool ok = bad == 0 && rare <= max_rare && rel <= tol.norm;
  printf("%s %s %s vs %s reference: rel_l2 %.3g (tol %.1e), max_abs %.3g at %lld, rms %.3g, %lld/%lld outside tol"
         " (%lld within %.2g rms, %lld allowed)\n",
         ok ? "ok  " : "FAIL", label, name, which, rel, tol.norm, maxerr, (long long)at_max, rms, (long long)(bad + rare),
         (long long)n, (long long)rare, tol.rare_atol, (long long)max_rare);
  if (!ok && first_bad >= 0)
    printf("      first bad element %lld: gpu %.6g ref %.6g\n", (long long)first_bad, dtype_load(dt, out, (size_t)first_bad),
           ref->data[first_bad]);
  if (!ok && at_max >= 0) {
    int64_t cols = ref->rank ? ref->shape[ref->rank - 1] : 1;
    printf("      largest error at element %lld (row %lld, col %lld): gpu %.6g ref %.6g\n", (long long)at_max,
           (long long)(at_max / cols), (long long)(at_max % cols), dtype_load(dt, out, (size_t)at_max), ref->data[at_max]);
  }
  /* FFNC_TEST_ERRMAP=N (debugging): the first N elements off by more than 1e-3 rms, as (row, col) */
  const char *map = getenv("FFNC_TEST_ERRMAP");
  int64_t cols = ref->rank ? ref->shape[ref->rank - 1] : 1, shown = 0, limit = map ? atoll(map) : 0;
  for (int64_t j = 0; j < n && shown < limit && cols > 0; j++) {
    double o = dtype_load(dt, out, (size_t)j), r = ref->data[j];
    if (fabs(o - r) > 1e-3 * rms) {
      printf("      row %lld col %lld: gpu %.6g ref %.6g\n", (long long)(j / cols), (long long)(j % cols), o, r);
      shown++;
    }
  }
  return ok ? 0 : -1;
}

static double rel_l2_of(DType dt, const void *out, const RefTensor *a, const RefTensor *exact) {
  double num = 0, den = 0;
  for (int64_t j = 0; j < ref_numel(exact); j++) {
    double v = out ? dtype_load(dt, out, (size_t)j) : a->data[j], e = exact->data[j];
    num += (v - e) * (v - e);
    den += e * e;
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* fp8: the quantization error of the GPU's result against the unquantized one (the source graph
 * without `precision matmul`) may exceed the reference's own by 15% of it plus 2e-3: the
 * reference's error varies by about that much between equally valid fp8 results (the GPU-vs-
 * reference differences of tolerance_of). */
static int fp8_quality(const char *label, const char *name, DType dt, const void *out, const RefTensor *ref_prog,
                       const RefTensor *exact) {
  double e_gpu = rel_l2_of(dt, out, NULL, exact), e_ref = rel_l2_of(dt, NULL, ref_prog, exact);
  bool ok = e_gpu <= 1.15 * e_ref + 2e-3;
  printf("%s %s %s fp8 error vs unquantized: gpu %.4g, reference %.4g (bound %.4g)\n", ok ? "ok  " : "FAIL", label,
         name, e_gpu, e_ref, 1.15 * e_ref + 2e-3);
  return ok ? 0 : -1;
}

/* Runs m on the inputs (make_inputs order = the program's) and compares every output with the
 * program's and the source's references; returns 0 if both are within tolerance. ref_exact (fp8
 * programs, else NULL): the unquantized reference for fp8_quality. */
static inline int run_and_compare(const char *label, ffn_model *m, const Graph *g, const TensorSet *in,
                                  const RefTensor *ref_prog, const RefTensor *ref_src, const RefTensor *ref_exact) {
  int nout = g->noutputs, nin = in->n;
  DLTensor din[64], dout[64];
  for (int k = 0; k < nin; k++) {
    const RawTensor *t = &in->items[k].t;
    din[k] = (DLTensor){(void *)t->data, {kDLCPU, 0}, t->rank, dl_of(t->dtype), (int64_t *)t->shape, NULL, 0};
  }
  void *bufs[64];
  int64_t shapes[64][FFN_MAX_RANK];
  for (int i = 0; i < nout; i++) {
    int nd;
    if (ffn_model_output_shape(m, i, din, nin, shapes[i], &nd) != FFN_OK) {
      printf("FAIL %s: output shape: %s\n", label, ffn_last_error());
      return -1;
    }
    bufs[i] = malloc(dtype_bytes(ref_src[i].dtype, (size_t)ref_numel(&ref_src[i])) + 16);
    dout[i] = (DLTensor){bufs[i], {kDLCPU, 0}, nd, dl_of(ref_src[i].dtype), shapes[i], NULL, 0};
  }
  int rc = 0;
  if (ffn_model_run_host(m, din, nin, dout, nout) != FFN_OK) {
    printf("FAIL %s: run: %s\n", label, ffn_last_error());
    rc = -1;
  }
  DType narrow = narrowest_type(g);
  for (int i = 0; i < nout && rc == 0; i++) {
    rc |= compare_one(label, "program", g->outputs[i].name, tolerance_of(g, narrow, false), ref_src[i].dtype, bufs[i],
                      &ref_prog[i]);
    rc |= compare_one(label, "source", g->outputs[i].name, tolerance_of(g, narrow, true), ref_src[i].dtype, bufs[i],
                      &ref_src[i]);
    if (ref_exact)
      rc |= fp8_quality(label, g->outputs[i].name, ref_src[i].dtype, bufs[i], &ref_prog[i], &ref_exact[i]);
  }
  for (int i = 0; i < nout; i++)
    free(bufs[i]);
  return rc;
}

static inline int reference(const Graph *g, const TensorSet *w, const TensorSet *in, RefTensor *out);

/* fp8 programs: the source graph's result without `precision matmul` into out; 0 (and nothing)
 * for other programs, 1 when computed, -1 on error. */
static inline int reference_unquantized(Graph *g, const TensorSet *w, const TensorSet *in, RefTensor *out) {
  DType mm = g->prec.type[PREC_MATMUL];
  if (mm != DT_F8E4M3 && mm != DT_F8E5M2)
    return 0;
  g->prec.type[PREC_MATMUL] = DT_NONE;
  int rc = reference(g, w, in, out);
  g->prec.type[PREC_MATMUL] = mm;
  return rc == 0 ? 1 : -1;
}

static inline int reference(const Graph *g, const TensorSet *w, const TensorSet *in, RefTensor *out) {
  InterpSources src = {set_lookup, (void *)w, set_lookup, (void *)in};
  char err[512];
  if (interp_run(g, &src, out, err, sizeof err) != 0) {
    printf("FAIL: reference: %s\n", err);
    return -1;
  }
  return 0;
}

#endif
