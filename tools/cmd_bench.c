/* cmd_bench.c: `ffnc bench FILE.ffn... --tokens N[,N...]`.
 *
 * Measures, in one process on one card:
 *   the ceilings: device-to-device copy bandwidth (bytes read + written) and cuBLASLt's bf16
 *     (and fp8 e4m3 where the card has it) matrix-product rate at 8192^3 on random data;
 *   for each model and token count, three variants on the same weights and inputs:
 *     ffnc      the compiled model (fused kernels);
 *     eager     what an eager framework runs: every matrix product a cuBLASLt call, every
 *               other op (norm, activation, gate*up, residual add) a kernel of its own (the
 *               -O0 plan, its products swapped for cuBLASLt);
 *     cublaslt  the same with cuBLASLt's own fused epilogues where they apply (bias,
 *               bias+GELU, bias+ReLU, residual as beta*C), on the bench's own copy of the -O0
 *               plan: folding a step into a product moves a write earlier, and the copy's
 *               tensor lifetimes are adjusted for it (a compiled program is never rewritten);
 *   each checked against the others before timing (a fast wrong kernel is a failure), then
 *   timed with CUDA events after warm-up, median of many runs, inputs rotated across buffers
 *   that together exceed L2, with and without CUDA graph replay for small token counts.
 * Reports time, TFLOP/s, GB/s, the floor (max of FLOPs / measured GEMM rate, bf16 or fp8 as
 * the products are, and the fewest bytes, the weights as held, / measured bandwidth), the
 * fraction of the floor reached and the speedups; writes JSON with every number and a gnuplot
 * script for the plot (rendered here if gnuplot is installed).
 */
#include "bench.h"
#include "cli.h"
#include "codegen/driver.h"
#include "cublaslt.h"
#include "ir/size_limits.h"
#include "runtime/randinit.h"
#include "runtime/dlpack_dtype.h"
#include "runtime/rt.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/quant.cuh" /* after <math.h> */

#ifndef FFNC_GIT_COMMIT
#define FFNC_GIT_COMMIT "unknown"
#endif


enum { V_FFNC, V_EAGER, V_CUBLASLT, NVARIANTS };
static const char *const variant_names[NVARIANTS] = {"ffnc", "eager", "cublaslt"};

typedef enum { A_OURS, A_SKIP, A_GEMM } ActKind;
typedef struct {
  ActKind kind;
  int a, b, out, bias, resid; /* plan tensors; bias/resid -1 if none */
  LtEpilogue epi;
} Action;

typedef struct {
  const char *file;
  Graph *g; /* the source, for FLOPs, bytes and tensor names */
  DType type;
  ffn_program *prog[NVARIANTS];  /* by variant: -O3, -O0, the bench's copy of the -O0 plan */
  ffn_model *model[NVARIANTS];
  CUdeviceptr *wdev;
  int nw;
  Action *act[NVARIANTS]; /* per step of the -O0 plan (eager, cublaslt) */
} Model;

typedef struct {
  int64_t tokens;
  int variant;
  bool graph;
  double us, tflops, gbps, floor_us, frac, vs_eager, vs_lt;
  double check_err;
  bool check_ok;
} Result;

static const CuApi *cu;
static Lt *lt;
static char errbuf[1024];

/* ---- random data (fast; the values only need the right scale) ---- */

static uint64_t rng_state = 0x853c49e6748fea9bull;
static inline uint32_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 11);
}

/* Uniform values with the given mean and standard deviation, stored as dt. */
void *random_buffer(DType dt, size_t n, double mean, double std) {
  void *p = malloc(dtype_bytes(dt, n) + 16);
  if (!p) {
    cli_error("bench: out of host memory");
    exit(EXIT_USER);
  }
  float half = (float)(std * 1.7320508);
  for (size_t i = 0; i < n; i++) {
    float v = (float)mean + half * ((float)rnd() * (2.0f / 2097152.0f) - 1.0f);
    if (dt == DT_F32)
      ((float *)p)[i] = v;
    else if (dt == DT_BF16)
      ((uint16_t *)p)[i] = f32_to_bf16_bits(v);
    else if (dt == DT_F16)
      ((uint16_t *)p)[i] = f32_to_f16_bits(v);
    else if (dt == DT_F8E4M3)
      ((uint8_t *)p)[i] = f32_to_f8e4m3_bits(v);
    else
      dtype_store(dt, p, i, v);
  }
  return p;
}

void *random_weight(const Graph *g, const Node *w, int64_t shape[FFN_MAX_RANK], size_t *numel, DLDataType *dl) {
  *numel = 1;
  for (int d = 0; d < w->shape.rank; d++)
    *numel *= (size_t)(shape[d] = w->shape.d[d].size);
  if (!dtype_to_dl(w->dtype, dl)) {
    cli_error("bench: weight '%s' is %s, which DLPack tensors cannot carry", w->name, dtype_name(w->dtype));
    exit(EXIT_USER);
  }
  double mean, std;
  randinit_weight_scale(g, w, &mean, &std);
  return random_buffer(w->dtype, *numel, mean, std);
}

static CUdeviceptr upload(const void *host, size_t bytes) {
  CUdeviceptr d;
  CK(cu->cuMemAlloc(&d, bytes + 16));
  CK(cu->cuMemcpyHtoD(d, host, bytes));
  return d;
}

/* ---- timing ---- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Median microseconds of reps runs (after warm-up), each between two events. */
double time_runs(RunFn fn, void *ctx, int rotations, int reps, CUstream s) {
  return time_runs_after(NULL, fn, ctx, rotations, reps, s);
}

double time_runs_after(RunFn pre, RunFn fn, void *ctx, int rotations, int reps, CUstream s) {
  const CuApi *cu = cu_api(NULL, 0); /* ffnc tune times with it too, without cmd_bench's */
  for (int i = 0; i < 3; i++) {
    if (pre)
      pre(ctx, i % rotations, s);
    fn(ctx, i % rotations, s);
  }
  CUevent *ev = malloc(sizeof(CUevent) * (size_t)(2 * reps));
  for (int i = 0; i < 2 * reps; i++)
    CK(cu->cuEventCreate(&ev[i], CU_EVENT_DEFAULT));
  for (int i = 0; i < reps; i++) {
    if (pre)
      pre(ctx, i % rotations, s);
    CK(cu->cuEventRecord(ev[2 * i], s));
    fn(ctx, i % rotations, s);
    CK(cu->cuEventRecord(ev[2 * i + 1], s));
  }
  CK(cu->cuStreamSynchronize(s));
  double *t = malloc(sizeof(double) * (size_t)reps);
  for (int i = 0; i < reps; i++) {
    float ms;
    CK(cu->cuEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
    t[i] = ms * 1000.0;
  }
  qsort(t, (size_t)reps, sizeof(double), cmp_double);
  double med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
  for (int i = 0; i < 2 * reps; i++)
    cu->cuEventDestroy(ev[i]);
  free(ev);
  free(t);
  return med;
}

/* ---- ceilings ---- */

typedef struct {
  CUdeviceptr src, dst;
  size_t bytes;
} CopyCtx;

static void run_copy(void *p, int rot, CUstream s) {
  CopyCtx *c = p;
  (void)rot;
  CK(cu->cuMemcpyDtoDAsync(c->dst, c->src, c->bytes, s));
}

typedef struct {
  bool fp8;
  int n;
  CUdeviceptr a, b, d;
} GemmCtx;

static void run_gemm(void *p, int rot, CUstream s) {
  GemmCtx *g = p;
  (void)rot;
  int rc = g->fp8 ? lt_matmul_fp8(lt, s, g->n, g->n, g->n, g->a, g->b, g->d, errbuf, sizeof errbuf)
                  : lt_matmul(lt, s, DT_BF16, g->n, g->n, g->n, g->a, g->b, g->d, 0, LT_EPI_NONE, 0, errbuf,
                              sizeof errbuf);
  if (rc != 0) {
    cli_error("bench: %s", errbuf);
    exit(EXIT_DEVICE);
  }
}

typedef struct {
  double copy_gbps, bf16_tflops, fp8_tflops;
} Ceilings;

static Ceilings measure_ceilings(CUstream s, int major, int minor) {
  Ceilings c = {0};
  CopyCtx cc = {.bytes = (size_t)1 << 30};
  CK(cu->cuMemAlloc(&cc.src, cc.bytes));
  CK(cu->cuMemAlloc(&cc.dst, cc.bytes));
  CK(cu->cuMemsetD32Async(cc.src, 0x3f800000u, cc.bytes / 4, s));
  double us = time_runs(run_copy, &cc, 1, 20, s);
  c.copy_gbps = 2.0 * (double)cc.bytes / (us * 1e-6) / 1e9;
  cu->cuMemFree(cc.src);
  cu->cuMemFree(cc.dst);
  int n = 8192;
  for (int fp8 = 0; fp8 < 2; fp8++) {
    if (fp8 && major * 10 + minor < 89)
      break;
    DType t = fp8 ? DT_F8E4M3 : DT_BF16;
    size_t elems = (size_t)n * n;
    void *h = random_buffer(t, elems, 0, fp8 ? 1.0 : 0.02);
    GemmCtx g = {fp8, n, upload(h, dtype_bytes(t, elems)), upload(h, dtype_bytes(t, elems)), 0};
    free(h);
    CK(cu->cuMemAlloc(&g.d, elems * 2));
    us = time_runs(run_gemm, &g, 1, 10, s);
    double tf = 2.0 * n * (double)n * n / (us * 1e-6) / 1e12;
    if (fp8)
      c.fp8_tflops = tf;
    else
      c.bf16_tflops = tf;
    cu->cuMemFree(g.a);
    cu->cuMemFree(g.b);
    cu->cuMemFree(g.d);
  }
  return c;
}

/* ---- the baselines' plan: which -O0 steps cuBLASLt takes over ---- */

static int readers(const Plan *p, int t, int *only) {
  int n = 0;
  for (int s = 0; s < p->nsteps; s++) {
    const PlanStep *ps = &p->steps[s];
    if (ps->kind != STEP_LAUNCH)
      continue;
    const PlanKernel *k = &p->kernels[ps->kernel];
    int nin = k->op < OP_COUNT ? ps->nargs - 1 : ps->nargs; /* the last slot of a one-op kernel is its result */
    for (int j = 0; j < nin; j++)
      if (ps->args[j] == t) {
        *only = s;
        n++;
        break;
      }
  }
  return n;
}

static bool is_col_vector(const Plan *p, int t, int64_t n) {
  const PlanTensor *pt = &p->tensors[t];
  return (pt->kind == PT_WEIGHT || pt->kind == PT_DERIVED) && pt->rank == 1 && pt->dims[0].sym < 0 &&
         pt->dims[0].size == n;
}

static bool same_shape(const Plan *p, int a, int b) {
  const PlanTensor *x = &p->tensors[a], *y = &p->tensors[b];
  if (x->rank != y->rank)
    return false;
  for (int d = 0; d < x->rank; d++)
    if (!dim_eq(x->dims[d], y->dims[d]))
      return false;
  return true;
}

/* The one step after a GEMM that reads its result t as `op(t, other)` (or op(t)), if t has
 * no other reader and is scratch. Returns the step or -1; sets *other. */
static int follower(const Plan *p, int t, Op op, int *other) {
  int s;
  if (p->tensors[t].kind != PT_SCRATCH || readers(p, t, &s) != 1)
    return -1;
  const PlanStep *ps = &p->steps[s];
  const PlanKernel *k = &p->kernels[ps->kernel];
  if (k->kind != KK_ROWWISE || k->op != op)
    return -1;
  int nin = ps->nargs - 1;
  if (op == OP_ADD && nin == 2 && (ps->args[0] == t || ps->args[1] == t)) {
    *other = ps->args[0] == t ? ps->args[1] : ps->args[0];
    return s;
  }
  if (op != OP_ADD && nin == 1 && ps->args[0] == t) {
    *other = -1;
    return s;
  }
  return -1;
}

/* Folding step f into GEMM step s moves the write of f's result to s: its lifetime must start
 * there, or the memory plan could give it bytes that s still reads. A residual read at s
 * must already exist then. */
static bool fold_ok(Plan *p, int s, int result, int resid) {
  if (resid >= 0 && p->tensors[resid].kind == PT_SCRATCH && p->tensors[resid].first >= s)
    return false;
  return true;
}

static void moved_write(Plan *p, int s, int result) {
  if (p->tensors[result].kind == PT_SCRATCH && p->tensors[result].first > s)
    p->tensors[result].first = s;
}

/* What runs each step of a -O0 plan: its own kernel, cuBLASLt, or nothing (folded into a
 * cuBLASLt epilogue, only with epilogues; then p's lifetimes are adjusted: p must be the
 * bench's own copy). */
static Action *plan_actions(Plan *p, bool epilogues) {
  Action *act = calloc((size_t)p->nsteps + 1, sizeof(Action));
  for (int s = 0; s < p->nsteps; s++) {
    const PlanStep *ps = &p->steps[s];
    if (act[s].kind == A_SKIP)
      continue;
    act[s].kind = A_OURS;
    if (ps->kind != STEP_LAUNCH)
      continue;
    const PlanKernel *k = &p->kernels[ps->kernel];
    DType t = p->tensors[ps->args[0]].dtype;
    if (k->kind != KK_GEMM || k->op != OP_MATMUL || k->streams != 1 || p->tensors[ps->args[1]].dtype != t ||
        (t != DT_BF16 && t != DT_F16 && t != DT_F32))
      continue;
    Action *a = &act[s];
    *a = (Action){A_GEMM, ps->args[0], ps->args[1], ps->args[2], -1, -1, LT_EPI_NONE};
    if (!epilogues)
      continue;
    int other, f;
    /* bias, then an activation; or a residual (beta * C) */
    if ((f = follower(p, a->out, OP_ADD, &other)) >= 0 && is_col_vector(p, other, k->n) && p->tensors[other].dtype == t) {
      a->bias = other;
      a->epi = LT_EPI_BIAS;
      a->out = p->steps[f].args[p->steps[f].nargs - 1];
      moved_write(p, s, a->out);
      act[f].kind = A_SKIP;
      int g2;
      if ((g2 = follower(p, a->out, OP_GELU_TANH, &other)) >= 0 || (g2 = follower(p, a->out, OP_RELU, &other)) >= 0) {
        a->epi = p->kernels[p->steps[g2].kernel].op == OP_RELU ? LT_EPI_RELU_BIAS : LT_EPI_GELU_BIAS;
        a->out = p->steps[g2].args[p->steps[g2].nargs - 1];
        moved_write(p, s, a->out);
        act[g2].kind = A_SKIP;
        continue;
      }
    }
    if ((f = follower(p, a->out, OP_ADD, &other)) >= 0 && same_shape(p, other, a->out) && p->tensors[other].dtype == t &&
        fold_ok(p, s, p->steps[f].args[p->steps[f].nargs - 1], other)) {
      a->resid = other;
      a->out = p->steps[f].args[p->steps[f].nargs - 1];
      moved_write(p, s, a->out);
      act[f].kind = A_SKIP;
    }
  }
  return act;
}

/* ---- running the variants ---- */

typedef struct {
  Model *md;
  int variant;
  int nin, nout;
  DLTensor (*in)[16], (*out)[16]; /* [rotation][i] */
} RunCtx;

static void run_variant(void *p, int rot, CUstream s) {
  RunCtx *r = p;
  Model *md = r->md;
  ffn_status st;
  if (r->variant == V_FFNC) {
    st = ffn_model_run(md->model[V_FFNC], s, r->in[rot], r->nin, r->out[rot], r->nout);
  } else {
    const Action *act = md->act[r->variant];
    ExecRun run;
    st = exec_begin(md->model[r->variant], s, r->in[rot], r->nin, r->out[rot], r->nout, &run);
    const Plan *plan = md->prog[r->variant]->plan;
    for (int i = 0; i < plan->nsteps && st == FFN_OK; i++) {
      const Action *a = &act[i];
      if (a->kind == A_OURS)
        st = exec_step(&run, i);
      else if (a->kind == A_GEMM) {
        const PlanKernel *k = &plan->kernels[plan->steps[i].kernel];
        int64_t m = run.choice[i].m;
        run.chain = false; /* cuBLASLt's kernel comes between */
        if (m > 0 && lt_matmul(lt, s, plan->tensors[a->a].dtype, (int)m, (int)k->n, (int)k->k, run.ptr[a->a],
                               run.ptr[a->b], run.ptr[a->out], a->resid >= 0 ? run.ptr[a->resid] : 0, a->epi,
                               a->bias >= 0 ? run.ptr[a->bias] : 0, errbuf, sizeof errbuf) != 0)
          st = rt_error(FFN_ERR_CUDA, "%s", errbuf);
      }
    }
    st = exec_end(&run, st);
  }
  if (st != FFN_OK) {
    cli_error("bench: %s: %s: %s", md->file, variant_names[r->variant], ffn_last_error());
    exit(cli_status_exit(st));
  }
}

typedef struct {
  RunCtx *rc;
  CUgraphExec *exec;
} GraphCtx;

static void run_graph(void *p, int rot, CUstream s) {
  GraphCtx *g = p;
  CK(cu->cuGraphLaunch(g->exec[rot], s));
}

/* ---- models ---- */

/* A program of the same plan and image that the bench may rewrite: the plan through its JSON
 * form (as ffn_program_load reads it), the images copied. */
static ffn_status program_copy(const ffn_program *src, ffn_program **out) {
  char err[512];
  char *json = plan_to_json(src->plan);
  Plan *plan = plan_from_json(json, err, sizeof err);
  free(json);
  if (!plan)
    return rt_error(FFN_ERR_IO, "copying the -O0 plan: %s", err);
  ffn_program *p = calloc(1, sizeof *p);
  p->plan = plan;
  p->images = calloc((size_t)src->nimages, sizeof *p->images);
  for (int i = 0; p->images && i < src->nimages; i++) {
    Image *im = &p->images[i];
    *im = src->images[i];
    if (!(im->image = malloc(src->images[i].size + 1)))
      break;
    memcpy(im->image, src->images[i].image, src->images[i].size);
    ((char *)im->image)[src->images[i].size] = 0;
    p->nimages = i + 1;
  }
  if (p->nimages != src->nimages) {
    ffn_program_destroy(p);
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "copying the -O0 program: out of host memory");
  }
  *out = p;
  return FFN_OK;
}

static ffn_status compile_model(Model *md, const CompileArgs *base) {
  for (int i = 0; i < 2; i++) {
    CompileArgs ca = *base;
    ca.file = md->file;
    ca.opt_level = i == 0 ? base->opt_level : 0;
    ffn_options *o;
    ffn_status s = cli_options(&ca, &o);
    if (s == FFN_OK)
      s = ffn_program_compile_file(md->file, o, &md->prog[i]);
    ffn_options_destroy(o);
    if (s != FFN_OK)
      return s;
  }
  return program_copy(md->prog[V_EAGER], &md->prog[V_CUBLASLT]);
}

static void setup_model(Model *md) {
  for (int i = 0; i < NVARIANTS; i++)
    if (ffn_model_create(md->prog[i], 0, &md->model[i]) != FFN_OK) {
      cli_error("bench: %s", ffn_last_error());
      exit(EXIT_DEVICE);
    }
  /* random weights of the right scale, on the device once, bound to both models */
  Graph *g = md->g;
  md->wdev = calloc((size_t)g->nodes.len + 1, sizeof(CUdeviceptr));
  for (int i = 0; i < g->nodes.len; i++) {
    Node *n = GRAPH_NODE(g, i);
    if (n->op != OP_WEIGHT)
      continue;
    int64_t shape[FFN_MAX_RANK];
    size_t numel;
    DLDataType dl;
    void *h = random_weight(g, n, shape, &numel, &dl);
    CUdeviceptr d = upload(h, dtype_bytes(n->dtype, numel));
    free(h);
    md->wdev[md->nw++] = d;
    DLTensor t = {(void *)d, {kDLCUDA, 0}, n->shape.rank, dl, shape, NULL, 0};
    for (int m = 0; m < NVARIANTS; m++)
      if (ffn_model_bind_weight(md->model[m], n->name, &t) != FFN_OK) {
        cli_error("bench: %s", ffn_last_error());
        exit(EXIT_USER);
      }
  }
  for (int m = 0; m < NVARIANTS; m++)
    if (ffn_model_prepare(md->model[m]) != FFN_OK) {
      cli_error("bench: %s", ffn_last_error());
      exit(EXIT_DEVICE);
    }
  md->act[V_EAGER] = plan_actions(md->prog[V_EAGER]->plan, false); /* reads the plan only */
  md->act[V_CUBLASLT] = plan_actions(md->prog[V_CUBLASLT]->plan, true);
}

/* The bytes a weight occupies on the device: under `precision weights i8|i4` a matrix is held
 * as its codes and f32 scales (kernels/quant.cuh), under `precision matmul f8e4m3|f8e5m2` (or
 * stored so) as one-byte codes and an f32 scale a row; norm gains and biases stay as they are. */
static double weight_bytes(const Graph *g, const Node *n, int64_t numel) {
  DType w = g->prec.type[PREC_WEIGHTS];
  int64_t K = n->shape.rank == 2 ? n->shape.d[1].size : 1, R = numel / (K ? K : 1);
  if (dtype_is_f8(n->stored) || (n->shape.rank == 2 && dtype_is_f8(g->prec.type[PREC_MATMUL])))
    return (double)numel + 4.0 * (double)R;
  if (n->shape.rank != 2 || (w != DT_I8 && w != DT_I4))
    return (double)dtype_bytes(n->dtype, (size_t)numel);
  int bits = w == DT_I8 ? 8 : 4;
  return (double)wq_code_rows(R) * (double)wq_row_bytes(K, (int)bits) + 4.0 * (double)R * (double)(bits == 8 ? 1 : wq_ngroups(K, g->prec.group));
}

/* FLOPs of the source's matrix products, and the fewest bytes a call must move (every
 * weight, input and output once), for `tokens` in every dynamic dim. */
static void work(const Graph *g, int64_t tokens, double *flops, double *bytes) {
  *flops = *bytes = 0;
  for (int i = 0; i < g->nodes.len; i++) {
    Node *n = GRAPH_NODE(g, i);
    int64_t numel = 1;
    for (int d = 0; d < n->shape.rank; d++)
      numel *= n->shape.d[d].sym >= 0 ? tokens : n->shape.d[d].size;
    if (n->op == OP_WEIGHT || n->op == OP_INPUT)
      *bytes += n->op == OP_WEIGHT ? weight_bytes(g, n, numel) : (double)dtype_bytes(n->dtype, (size_t)numel);
    if (n->op == OP_MATMUL && !ir_is_const(n)) {
      int64_t k = n->args[1]->shape.d[0].size;
      *flops += 2.0 * (double)numel * (double)k;
    }
  }
  for (int i = 0; i < g->noutputs; i++) {
    Node *n = g->outputs[i].node;
    int64_t numel = 1;
    for (int d = 0; d < n->shape.rank; d++)
      numel *= n->shape.d[d].sym >= 0 ? tokens : n->shape.d[d].size;
    *bytes += (double)dtype_bytes(n->dtype, (size_t)numel);
  }
}

double rel_err(const void *a, const void *b, DType t, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double x = dtype_load(t, a, i), y = dtype_load(t, b, i);
    num += (x - y) * (x - y);
    den += y * y;
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* The results of one token count: times t[graph][variant] against the work's floor. */
static void add_results(const Model *md, int64_t tokens, const Ceilings *ceil, double t[2][NVARIANTS], int ngraph,
                        const double *err, const bool *ok, Result *res, int *nres) {
  double flops, bytes;
  work(md->g, tokens, &flops, &bytes);
  /* fp8 products against the measured fp8 GEMM rate, where there is one */
  double rate = dtype_is_f8(md->g->prec.type[PREC_MATMUL]) && ceil->fp8_tflops > 0 ? ceil->fp8_tflops : ceil->bf16_tflops;
  double floor_us = 0; /* 0: not known (--no-ceilings) */
  if (ceil->copy_gbps > 0 && rate > 0)
    floor_us = fmax(flops / (rate * 1e12), bytes / (ceil->copy_gbps * 1e9)) * 1e6;
  if (ceil->copy_gbps > 0 && md->type == DT_F32)
    floor_us = bytes / (ceil->copy_gbps * 1e9) * 1e6; /* no measured f32 GEMM ceiling: bandwidth only */
  for (int gr = 0; gr < ngraph; gr++)
    for (int v = 0; v < NVARIANTS; v++) {
      double us = t[gr][v];
      res[(*nres)++] = (Result){tokens,
                                v,
                                gr == 1,
                                us,
                                flops / (us * 1e-6) / 1e12,
                                bytes / (us * 1e-6) / 1e9,
                                floor_us,
                                floor_us / us,
                                t[gr][V_EAGER] / us,
                                t[gr][V_CUBLASLT] / us,
                                err[v],
                                ok[v]};
    }
}

/* A call's device buffers: inputs rotated across enough copies to exceed L2 (at most 16),
 * outputs per variant and rotation. */
typedef struct {
  int rotations, nin, nout;
  DLTensor in[NVARIANTS][16][16], out[NVARIANTS][16][16]; /* [variant][rotation][i] */
  int64_t in_shape[16][FFN_MAX_RANK], out_shape[16][FFN_MAX_RANK];
  DType out_type[16];
  size_t out_numel[16];
  CUdeviceptr bufs[4096];
  int nbufs;
} Io;

static int rotations_for(const Graph *g, int64_t tokens, size_t l2) {
  size_t in_bytes = 0;
  for (int i = 0; i < g->nodes.len; i++) {
    Node *n = GRAPH_NODE(g, i);
    if (n->op == OP_INPUT) {
      size_t numel = 1;
      for (int d = 0; d < n->shape.rank; d++)
        numel *= (size_t)(n->shape.d[d].sym >= 0 ? tokens : n->shape.d[d].size);
      in_bytes += dtype_bytes(n->dtype, numel);
    }
  }
  int rotations = (int)(2 * l2 / (in_bytes ? in_bytes : 1)) + 1;
  return rotations > 16 ? 16 : rotations;
}

/* Random inputs of rotation r, shared by every variant. */
static void alloc_inputs(Model *md, int64_t tokens, int r, Io *io) {
  Graph *g = md->g;
  int k = 0;
  for (int i = 0; i < g->nodes.len; i++) {
    Node *n = GRAPH_NODE(g, i);
    if (n->op != OP_INPUT)
      continue;
    size_t numel = 1;
    for (int d = 0; d < n->shape.rank; d++)
      numel *= (size_t)(io->in_shape[k][d] = n->shape.d[d].sym >= 0 ? tokens : n->shape.d[d].size);
    void *h = random_buffer(n->dtype, numel, 0, 1);
    CUdeviceptr d = upload(h, dtype_bytes(n->dtype, numel));
    free(h);
    io->bufs[io->nbufs++] = d;
    ffn_tensor_info info;
    ffn_program_input_info(md->prog[V_FFNC], k, &info);
    for (int v = 0; v < NVARIANTS; v++)
      io->in[v][r][k] = (DLTensor){(void *)d, {kDLCUDA, 0}, n->shape.rank, info.dtype, io->in_shape[k], NULL, 0};
    k++;
  }
}

/* Output buffers of rotation r, one per variant. */
static int alloc_outputs(Model *md, int r, Io *io) {
  for (int i = 0; i < io->nout; i++) {
    ffn_tensor_info info;
    ffn_program_output_info(md->prog[V_FFNC], i, &info);
    int nd;
    if (ffn_model_output_shape(md->model[V_FFNC], i, io->in[0][r], io->nin, io->out_shape[i], &nd) != FFN_OK) {
      cli_error("bench: %s", ffn_last_error());
      return -1;
    }
    size_t numel = 1;
    for (int d = 0; d < nd; d++)
      numel *= (size_t)io->out_shape[i][d];
    io->out_type[i] = md->g->outputs[i].node->dtype;
    io->out_numel[i] = numel;
    for (int v = 0; v < NVARIANTS; v++) {
      CUdeviceptr d;
      CK(cu->cuMemAlloc(&d, dtype_bytes(io->out_type[i], numel) + 16));
      io->bufs[io->nbufs++] = d;
      io->out[v][r][i] = (DLTensor){(void *)d, {kDLCUDA, 0}, nd, info.dtype, io->out_shape[i], NULL, 0};
    }
  }
  return 0;
}

/* Every variant's outputs against the others' (the eager one against ffnc): the largest
 * relative error of each, and whether it is within tolerance. */
static void check_variants(Model *md, Io *io, RunCtx *rc, CUstream s, double err[NVARIANTS], bool ok[NVARIANTS]) {
  void *host[NVARIANTS][16];
  for (int v = 0; v < NVARIANTS; v++) {
    for (int i = 0; i < io->nout; i++)
      CK(cu->cuMemsetD8Async((CUdeviceptr)io->out[v][0][i].data, 0xff,
                             dtype_bytes(io->out_type[i], io->out_numel[i]), s));
    run_variant(&rc[v], 0, s);
  }
  CK(cu->cuStreamSynchronize(s));
  for (int v = 0; v < NVARIANTS; v++)
    for (int i = 0; i < io->nout; i++) {
      size_t bytes = dtype_bytes(io->out_type[i], io->out_numel[i]);
      host[v][i] = malloc(bytes + 16);
      CK(cu->cuMemcpyDtoH(host[v][i], (CUdeviceptr)io->out[v][0][i].data, bytes));
    }
  /* the eager variant rounds after every op; with i4 weights it also quantizes other weights
   * (-O3 folds the norm's gain into them first): two valid i4 results, each ~2% from the
   * unquantized one (measured 2.1-2.4e-2 apart on the Llama-3 sublayers) */
  double tol = md->type == DT_F32 ? 1e-4 : md->g->prec.type[PREC_WEIGHTS] == DT_I4 ? 6e-2 : 2e-2;
  for (int v = 0; v < NVARIANTS; v++) {
    int other = v == V_EAGER ? V_FFNC : V_EAGER;
    err[v] = 0;
    for (int i = 0; i < io->nout; i++) {
      double e = rel_err(host[v][i], host[other][i], io->out_type[i], io->out_numel[i]);
      if (e > err[v] || e != e)
        err[v] = e;
    }
    ok[v] = err[v] <= tol;
  }
  for (int v = 0; v < NVARIANTS; v++)
    for (int i = 0; i < io->nout; i++)
      free(host[v][i]);
}

/* Median time of replaying a CUDA graph per rotation, captured after the warm-up runs of the
 * plain timing sized the workspace. */
static double time_graphs(RunCtx *rc, int rotations, int reps, CUstream s) {
  GraphCtx gc = {rc, calloc((size_t)rotations, sizeof(CUgraphExec))};
  CUgraph graphs[16];
  for (int r = 0; r < rotations; r++) {
    CK(cu->cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    run_variant(rc, r, s);
    CK(cu->cuStreamEndCapture(s, &graphs[r]));
    CK(cu->cuGraphInstantiate(&gc.exec[r], graphs[r], 0));
  }
  double us = time_runs(run_graph, &gc, rotations, reps, s);
  for (int r = 0; r < rotations; r++) {
    cu->cuGraphExecDestroy(gc.exec[r]);
    cu->cuGraphDestroy(graphs[r]);
  }
  free(gc.exec);
  return us;
}

/* Measures one model at one token count; appends results. */
static int bench_tokens(Model *md, int64_t tokens, const Ceilings *ceil, int reps, bool graphs, size_t l2, CUstream s,
                        Result *res, int *nres) {
  Io *io = calloc(1, sizeof *io);
  if (!io) {
    cli_error("bench: out of host memory");
    exit(EXIT_USER);
  }
  io->nin = ffn_program_num_inputs(md->prog[V_FFNC]);
  io->nout = ffn_program_num_outputs(md->prog[V_FFNC]);
  if (io->nin > 16 || io->nout > 16) {
    cli_error("bench: at most 16 inputs and outputs");
    free(io);
    return -1;
  }
  io->rotations = rotations_for(md->g, tokens, l2);
  int rc_ = 0;
  for (int r = 0; r < io->rotations && rc_ == 0; r++) {
    alloc_inputs(md, tokens, r, io);
    rc_ = alloc_outputs(md, r, io);
  }
  if (rc_ == 0) {
    RunCtx rc[NVARIANTS];
    for (int v = 0; v < NVARIANTS; v++)
      rc[v] = (RunCtx){md, v, io->nin, io->nout, io->in[v], io->out[v]};
    double err[NVARIANTS];
    bool ok[NVARIANTS];
    check_variants(md, io, rc, s, err, ok); /* correctness first */
    double t[2][NVARIANTS] = {{0}};
    for (int gr = 0; gr < (graphs ? 2 : 1); gr++)
      for (int v = 0; v < NVARIANTS; v++)
        t[gr][v] = gr ? time_graphs(&rc[v], io->rotations, reps, s) : time_runs(run_variant, &rc[v], io->rotations, reps, s);
    add_results(md, tokens, ceil, t, graphs ? 2 : 1, err, ok, res, nres);
    rc_ = (ok[0] && ok[1] && ok[2]) ? 0 : -1;
  }
  for (int i = 0; i < io->nbufs; i++)
    cu->cuMemFree(io->bufs[i]);
  free(io);
  return rc_;
}

/* ---- output ---- */

static void print_results(const Model *md, const Result *r, int n) {
  printf("\n%s (%s)\n", md->file, dtype_name(md->type));
  printf("%s\n", ffn_model_tuning(md->model[V_FFNC])); /* `ffnc tune`'s choices, or why none */
  if (md->g->prec.type[PREC_WEIGHTS] != DT_NONE) /* cuBLASLt has no weight-only i8/i4 path here */
    printf("(precision weights %s: eager and cublaslt run ffnc's quantized GEMMs, only their other ops differ; the "
           "floor counts the packed weights)\n", dtype_name(md->g->prec.type[PREC_WEIGHTS]));
  printf("%7s  %-9s %-5s %10s %8s %8s %10s %6s %8s %8s  %s\n", "tokens", "variant", "graph", "time_us", "TFLOP/s",
         "GB/s", "floor_us", "%floor", "vs_eager", "vs_lt", "check");
  for (int i = 0; i < n; i++) {
    char floor[16] = "-", frac[16] = "-"; /* no floor without the measured ceilings */
    if (r[i].floor_us > 0) {
      snprintf(floor, sizeof floor, "%.1f", r[i].floor_us);
      snprintf(frac, sizeof frac, "%.0f%%", 100 * r[i].frac);
    }
    printf("%7lld  %-9s %-5s %10.1f %8.1f %8.0f %10s %6s %7.2fx %7.2fx  %s (%.1e)\n", (long long)r[i].tokens,
           variant_names[r[i].variant], r[i].graph ? "yes" : "no", r[i].us, r[i].tflops, r[i].gbps, floor, frac,
           r[i].vs_eager, r[i].vs_lt, r[i].check_ok ? "ok" : "MISMATCH", r[i].check_err);
  }
}

static void write_plot(const char *prefix, Model *models, Result **res, int *nres, int nmodels) {
  char path[4096];
  snprintf(path, sizeof path, "%s.dat", prefix);
  FILE *f = fopen(path, "w");
  if (!f)
    return;
  for (int m = 0; m < nmodels; m++)
    for (int v = 0; v < NVARIANTS; v++) {
      fprintf(f, "# %s %s\n", models[m].file, variant_names[v]);
      for (int i = 0; i < nres[m]; i++)
        if (res[m][i].variant == v && !res[m][i].graph)
          fprintf(f, "%lld %.6g %.6g\n", (long long)res[m][i].tokens, res[m][i].us, res[m][i].frac);
      fprintf(f, "\n\n");
    }
  fclose(f);
  snprintf(path, sizeof path, "%s.gp", prefix);
  f = fopen(path, "w");
  if (!f)
    return;
  const char *base = strrchr(prefix, '/') ? strrchr(prefix, '/') + 1 : prefix;
  fprintf(f, "set terminal pngcairo noenhanced size %d,500 font ',10'\nset output '%s.png'\n",
          420 * (nmodels < 4 ? nmodels : 4) + 100, base);
  fprintf(f, "set multiplot layout 1,%d title 'fraction of the floor (max of FLOPs / cuBLASLt bf16 or fp8 rate, bytes / copy "
             "bandwidth) reached; higher is better'\nset logscale x 2\nset xlabel 'tokens'\n"
             "set ylabel 'fraction of floor'\nset yrange [0:1.1]\nset key bottom right\nset grid\n",
          nmodels);
  for (int m = 0; m < nmodels; m++) {
    const char *name = strrchr(models[m].file, '/') ? strrchr(models[m].file, '/') + 1 : models[m].file;
    fprintf(f, "set title '%s'\nplot ", name);
    for (int v = 0; v < NVARIANTS; v++)
      fprintf(f, "%s'%s.dat' index %d using 1:3 with linespoints title '%s'", v ? ", " : "", base, m * NVARIANTS + v,
              variant_names[v]);
    fprintf(f, "\n");
  }
  fprintf(f, "unset multiplot\n");
  fclose(f);
}

static void write_json(const char *path, const char *card, int sms, const Ceilings *c, Model *models, Result **res,
                       int *nres, int nmodels) {
  char nvrtc[128], driver[128];
  ffn_runtime_versions(nvrtc, sizeof nvrtc, driver, sizeof driver);
  time_t now = time(NULL);
  char date[64];
  strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
  json_t *root = json_pack("{s:s, s:s, s:s, s:s, s:i, s:s, s:s, s:s}", "ffnc", FFNC_VERSION, "commit", FFNC_GIT_COMMIT,
                           "date", date, "card", card, "sms", sms, "driver", driver, "nvrtc", nvrtc, "cublaslt",
                           lt_version(lt));
  json_object_set_new(root, "ceilings", json_pack("{s:f, s:f, s:f}", "copy_gbps", c->copy_gbps, "bf16_tflops",
                                                  c->bf16_tflops, "fp8_e4m3_tflops", c->fp8_tflops));
  json_t *ms = json_array();
  for (int m = 0; m < nmodels; m++) {
    json_t *rs = json_array();
    for (int i = 0; i < nres[m]; i++) {
      Result *r = &res[m][i];
      json_array_append_new(
          rs, json_pack("{s:I, s:s, s:b, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:b}", "tokens", (json_int_t)r->tokens,
                        "variant", variant_names[r->variant], "graph", r->graph, "time_us", r->us, "tflops", r->tflops,
                        "gbps", r->gbps, "floor_us", r->floor_us, "fraction_of_floor", r->frac, "speedup_vs_eager",
                        r->vs_eager, "speedup_vs_cublaslt", r->vs_lt, "check_rel_err", r->check_err, "check_ok",
                        r->check_ok));
    }
    json_array_append_new(ms, json_pack("{s:s, s:s, s:i, s:o}", "model", models[m].file, "dtype",
                                        dtype_name(models[m].type), "kernels", ffn_program_num_kernels(models[m].prog[0]),
                                        "results", rs));
  }
  json_object_set_new(root, "models", ms);
  if (json_dump_file(root, path, JSON_INDENT(1)) != 0)
    cli_error("bench: cannot write %s", path);
  json_decref(root);
}

typedef struct {
  CompileArgs ca;
  const char *files[32], *json, *plot;
  int nfiles, reps;
  int64_t tokens[32];
  int ntokens;
  bool compile_only, graphs, ceilings, grad;
} BenchArgs;

static const char usage[] =
    "usage: ffnc bench FILE.ffn... --tokens N[,N...] [--json OUT.json] [--plot PREFIX] [--reps N]\n"
    "                  [--no-graphs] [--no-ceilings] [--compile-only] [--arch sm_XX] [-O0..-O3]\n"
    "                  [--precision KEY=TYPE]... [--ffn-fusion A..B]... [--tp N] [--grad [--keep]] [-v]\n"
    "Times each model (up to 32) against an eager cuBLASLt baseline and cuBLASLt with its fused epilogues,\n"
    "after measuring the card's copy bandwidth and cuBLASLt bf16/fp8 GEMM rate; prints a table, writes JSON\n"
    "(--json) and PREFIX.dat/.gp for gnuplot (--plot; PREFIX.png too where gnuplot is installed).\n"
    "--tokens: up to 32 token counts; --reps: timed runs per variant (median; default 30).\n"
    "--no-graphs: plain launches only (no CUDA graph rows). --no-ceilings: skip measuring the card (faster);\n"
    "the floor and %floor columns read '-'.\n"
    "--compile-only compiles every variant into the kernel cache and needs no GPU.\n"
    "--tp N: tensor parallel instead: each model's N ranks on devices 0..N-1 (NCCL: $FFNC_NCCL_LIBRARY, else\n"
    "libnccl.so.2) against the whole program on device 0, checked, timed, with NCCL's all-reduce of a [T, D]\n"
    "tensor alone (the communication ceiling) and each rank's weight bytes.\n"
    "--grad: training instead: the forward alone, the backward graph (which recomputes the forward) alone and\n"
    "both, gradients into tensors of each weight's type, with the peak extra memory of a step beyond the\n"
    "parameters and gradients (workspaces, load-time weight copies, x, y and dy); --json writes them;\n"
    "with --compile-only, the programs and backward graphs into the kernel cache. --keep: the keep policy\n"
    "(default: recompute): the training forward writes the saved tensors (the products the backward reads) and\n"
    "the backward graph reads them instead of recomputing; they count in the extra memory (saved_MiB).\n";

enum { O_TOKENS, O_JSON, O_PLOT, O_REPS, O_NO_GRAPHS, O_NO_CEILINGS, O_COMPILE_ONLY, O_GRAD, O_KEEP };

static const CliOpt bench_opts[] = {CLI_OPT("--tokens", "N[,N...]", O_TOKENS),
                                    CLI_OPT("--json", "OUT.json", O_JSON),
                                    CLI_OPT("--plot", "PREFIX", O_PLOT),
                                    CLI_OPT("--reps", "N", O_REPS),
                                    CLI_OPT("--no-graphs", NULL, O_NO_GRAPHS),
                                    /* for runs under compute-sanitizer: fractions of the floor are then meaningless */
                                    CLI_OPT("--no-ceilings", NULL, O_NO_CEILINGS),
                                    CLI_OPT("--compile-only", NULL, O_COMPILE_ONLY),
                                    CLI_OPT("--grad", NULL, O_GRAD),
                                    CLI_OPT("--keep", NULL, O_KEEP),
                                    CLI_PASS_OPTIONS,
                                    CLI_TARGET_OPTIONS,
                                    {0}};

/* One option of bench's own; 0, or -1 after a message. */
static int bench_option(int id, const char *v, BenchArgs *b) {
  long long reps;
  switch (id) {
  case O_TOKENS: return cli_int_list("bench", "--tokens", v, 1, FFN_MAX_DIM, b->tokens, 32, &b->ntokens);
  case O_JSON: b->json = v; return 0;
  case O_PLOT: b->plot = v; return 0;
  case O_REPS:
    if (cli_int("bench", "--reps", v, 1, 100000, &reps) != 0)
      return -1;
    b->reps = (int)reps;
    return 0;
  case O_NO_GRAPHS: b->graphs = false; return 0;
  case O_NO_CEILINGS: b->ceilings = false; return 0;
  case O_COMPILE_ONLY: b->compile_only = true; return 0;
  case O_GRAD: b->grad = true; return 0;
  case O_KEEP: b->ca.keep = true; return 0;
  default: return cli_compile_option("bench", id, v, &b->ca) < 0 ? -1 : 0;
  }
}

/* Parses the command line; returns -1 to go on, else the exit status. */
static int parse_bench_args(int argc, char **argv, BenchArgs *b) {
  const char *v;
  CliParser p;
  cli_parser_init(&p, "bench", bench_opts, argc, argv);
  for (int id; (id = cli_next(&p, &v)) != CLI_END;) {
    if (id == CLI_HELP)
      return fputs(usage, stdout), 0;
    if (id == CLI_BAD)
      return EXIT_USAGE;
    if (id == CLI_ARG && b->nfiles == 32)
      return cli_error("bench: more than 32 models"), EXIT_USAGE;
    if (id == CLI_ARG)
      b->files[b->nfiles++] = v;
    else if (bench_option(id, v, b) != 0)
      return EXIT_USAGE;
  }
  if (!b->nfiles || (!b->ntokens && !b->compile_only)) {
    cli_error("bench: usage: ffnc bench FILE.ffn... --tokens N[,N...]");
    return EXIT_USAGE;
  }
  return -1;
}

/* Every model's programs; returns -1, or the exit status of a failure. */
static int compile_models(const BenchArgs *b, Model *models) {
  for (int m = 0; m < b->nfiles; m++) {
    models[m].file = b->files[m];
    CompileArgs one = b->ca;
    one.file = b->files[m];
    int status;
    models[m].g = cli_frontend(&one, &status);
    if (!models[m].g)
      return status;
    models[m].type = DT_F32;
    for (int i = 0; i < models[m].g->noutputs; i++)
      if (dtype_bits(models[m].g->outputs[i].node->dtype) < 32)
        models[m].type = models[m].g->outputs[i].node->dtype;
    fprintf(stderr, "bench: compiling %s\n", b->files[m]);
    ffn_status s = compile_model(&models[m], &b->ca);
    if (s != FFN_OK)
      return cli_fail("bench", NULL, s);
  }
  return -1;
}

typedef struct {
  CUdevice dev;
  CUcontext ctx;
  char card[256];
  int sms, l2, major, minor;
} Device;

static Device open_device(void) {
  Device d;
  CK(cu->cuDeviceGet(&d.dev, 0));
  CK(cu->cuDevicePrimaryCtxRetain(&d.ctx, d.dev));
  CK(cu->cuCtxPushCurrent(d.ctx));
  CK(cu->cuDeviceGetName(d.card, sizeof d.card, d.dev));
  CK(cu->cuDeviceGetAttribute(&d.sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d.dev));
  CK(cu->cuDeviceGetAttribute(&d.l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, d.dev));
  CK(cu->cuDeviceGetAttribute(&d.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d.dev));
  CK(cu->cuDeviceGetAttribute(&d.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d.dev));
  return d;
}

static void print_ceilings(const Device *d, const Ceilings *c) {
  printf("%s, %d SMs, L2 %d MB; ffnc %s (%s)\n", d->card, d->sms, d->l2 >> 20, FFNC_VERSION, FFNC_GIT_COMMIT);
  if (c->copy_gbps <= 0) {
    printf("ceilings: not measured (--no-ceilings): no floors\n");
    return;
  }
  printf("ceilings: copy %.0f GB/s (read + write), cuBLASLt bf16 %.0f TFLOP/s", c->copy_gbps, c->bf16_tflops);
  if (c->fp8_tflops > 0)
    printf(", fp8 e4m3 %.0f TFLOP/s", c->fp8_tflops);
  printf(" (8192^3)\n");
}

/* PREFIX.png from PREFIX.gp where gnuplot is installed. */
static void render_plot(const char *plot) {
  char cmd[8300];
  const char *slash = strrchr(plot, '/');
  char dir[4096] = ".";
  if (slash)
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - plot), plot);
  snprintf(cmd, sizeof cmd, "command -v gnuplot >/dev/null 2>&1 && cd '%s' && gnuplot '%s.gp'", dir,
           slash ? slash + 1 : plot);
  if (system(cmd) != 0)
    fprintf(stderr, "bench: gnuplot not found here; render the plot with `gnuplot %s.gp` next to %s.dat\n", plot,
            plot);
}

/* ---- main ---- */

/* --grad: the ceilings, then bench_grad.c. */
static int run_bench_grad(const BenchArgs *b) {
  Device d = open_device();
  char why[512];
  if (!(lt = lt_create(why, sizeof why))) {
    cli_error("bench: %s", why);
    return EXIT_DEVICE;
  }
  CUstream s;
  CK(cu->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  Ceilings c = b->ceilings ? measure_ceilings(s, d.major, d.minor) : (Ceilings){0};
  print_ceilings(&d, &c);
  int rc = bench_grad(&b->ca, b->files, b->nfiles, b->tokens, b->ntokens, b->reps, b->json, d.card, c.bf16_tflops, s);
  lt_destroy(lt);
  cu->cuStreamDestroy(s);
  CUcontext popped;
  cu->cuCtxPopCurrent(&popped);
  return rc;
}

/* The option combinations bench refuses: an exit status, or -1 when b is fine. */
static int refused_combination(BenchArgs *b) {
  if (cli_check_tp("bench", &b->ca, true) != 0)
    return EXIT_USAGE;
  if (b->ca.tp_rank_given)
    return cli_error("bench: --tp-rank: ffnc bench --tp N runs all the ranks together"), EXIT_USAGE;
  if (b->ca.keep && !b->grad)
    return cli_error("bench: --keep is a policy of training: it needs --grad"), EXIT_USAGE;
  if (b->grad && (b->ca.tp > 1 || b->plot))
    return cli_error("bench: --grad with --tp or --plot: not yet"), EXIT_USAGE;
  if (b->ca.tp > 1 && (b->json || b->plot || b->compile_only))
    return cli_error("bench: --tp with --json, --plot or --compile-only: not yet"), EXIT_USAGE;
  return -1;
}

/* Each model at each token count, printed as it finishes; then the JSON and the plot. Returns
 * whether a variant's output disagreed with the others. */
static bool bench_models(const BenchArgs *b, Model *models, const Device *d, const Ceilings *c, CUstream s) {
  Result **res = calloc((size_t)b->nfiles, sizeof(Result *));
  int *nres = calloc((size_t)b->nfiles, sizeof(int));
  bool failed = false;
  if (!res || !nres) {
    cli_error("bench: out of host memory");
    exit(EXIT_USER);
  }
  for (int m = 0; m < b->nfiles; m++) {
    setup_model(&models[m]);
    if (!(res[m] = calloc((size_t)b->ntokens * 2 * NVARIANTS + 1, sizeof(Result)))) {
      cli_error("bench: out of host memory");
      exit(EXIT_USER);
    }
    for (int k = 0; k < b->ntokens; k++)
      failed |= bench_tokens(&models[m], b->tokens[k], c, b->reps, b->graphs && b->tokens[k] <= 128, (size_t)d->l2, s,
                             res[m], &nres[m]) != 0;
    print_results(&models[m], res[m], nres[m]);
    fflush(stdout);
    for (int i = 0; i < NVARIANTS; i++)
      ffn_model_destroy(models[m].model[i]);
    for (int i = 0; i < models[m].nw; i++)
      cu->cuMemFree(models[m].wdev[i]);
  }
  if (b->json)
    write_json(b->json, d->card, d->sms, c, models, res, nres, b->nfiles);
  if (b->plot) {
    write_plot(b->plot, models, res, nres, b->nfiles);
    render_plot(b->plot);
  }
  for (int m = 0; m < b->nfiles; m++)
    free(res[m]);
  free(res);
  free(nres);
  return failed;
}

int cmd_bench(int argc, char **argv) {
  BenchArgs b = {.ca = {.opt_level = 3}, .reps = 30, .graphs = true, .ceilings = true};
  int rc = parse_bench_args(argc, argv, &b);
  if (rc >= 0 || (rc = refused_combination(&b)) >= 0)
    return rc;
  if (b.grad && b.compile_only)
    return bench_grad_compile(&b.ca, b.files, b.nfiles);
  char why[512];
  if (b.ca.tp > 1 && (rc = cli_check_tp_devices("bench", b.ca.tp)) != 0) /* before spending time compiling */
    return rc;
  if (!b.compile_only && !(cu = cu_api(why, sizeof why))) {
    cli_error("bench: %s", why);
    return EXIT_DEVICE;
  }
  if (b.ca.tp > 1)
    return bench_tp(&b.ca, b.files, b.nfiles, b.tokens, b.ntokens, b.reps);
  if (b.grad)
    return run_bench_grad(&b);
  Model *models = calloc((size_t)b.nfiles, sizeof(Model));
  if (!models)
    return cli_error("bench: out of host memory"), EXIT_USER;
  if ((rc = compile_models(&b, models)) >= 0)
    return rc;
  if (b.compile_only) {
    printf("compiled %d model%s (ffnc and -O0 plans) into the kernel cache\n", b.nfiles, b.nfiles > 1 ? "s" : "");
    return 0;
  }
  Device d = open_device();
  if (!(lt = lt_create(why, sizeof why))) {
    cli_error("bench: %s", why);
    return EXIT_DEVICE;
  }
  CUstream s;
  CK(cu->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  Ceilings c = b.ceilings ? measure_ceilings(s, d.major, d.minor) : (Ceilings){0};
  print_ceilings(&d, &c);
  bool failed = bench_models(&b, models, &d, &c, s);
  lt_destroy(lt);
  cu->cuStreamDestroy(s);
  CUcontext popped;
  cu->cuCtxPopCurrent(&popped);
  if (failed)
    cli_error("bench: a variant's output disagreed with the others (see MISMATCH above)");
  return failed ? EXIT_USER : 0;
}
