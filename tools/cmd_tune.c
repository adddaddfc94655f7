/* cmd_tune.c: `ffnc tune FILE.ffn [--tokens N[,N...]] [--weights W] [--vs-cublaslt]`:
 * ffn_model_tune on GPU 0, the choices saved in the kernel cache for later runs
 * (runtime/tune.c); with --vs-cublaslt, each GEMM kernel's times beside cuBLASLt's plain GEMM of
 * the same shape, timed the same way (one launch after an L2 flush, the median). */
#include "bench.h"
#include "cli.h"
#include "cublaslt.h"
#include "include/ffn.h"
#include "runtime/randinit.h"
#include "runtime/dlpack_dtype.h"

#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: ffnc tune FILE.ffn [--tokens N[,N...]] [--weights W.safetensors] [--arch sm_XX] [-O0..-O3]\n"
    "                 [--precision KEY=TYPE]... [--ffn-fusion A..B]... [-v]\n"
    "Times every tile configuration each GEMM kernel of FILE was compiled with, and the split-K factors it\n"
    "can take, on GPU 0 at each token count (default 1,16,64,128,256,512,1024,4096,8192; at most 32), on\n"
    "random activations with the weights of --weights (random weights of the right scale without it), and\n"
    "saves the fastest per count in the kernel cache ($FFNC_CACHE_DIR), keyed by the device, the driver,\n"
    "this ffnc and the kernel. Later runs of the program on such a device use them for a call's token\n"
    "count (the largest tuned count at or below it; the built-in rule below the first); FFNC_NO_TUNE=1\n"
    "turns that off. A line per GEMM on stderr as it is done, the table on stdout. -v: the NVRTC step, and\n"
    "which tuned choices existed before.\n"
    "--vs-cublaslt: then time cuBLASLt's plain GEMM (no epilogue) at each kernel's M, N (both streams of a\n"
    "gate/up pair) and K, in its type (bf16, f16, f32; fp8 e4m3 for fp8 products; bf16 for weight-only\n"
    "int8/int4, which cuBLASLt lacks), the same way (one launch after an L2 flush, median), and print each\n"
    "kernel's rate, its fused epilogue included, as a fraction of cuBLASLt's.\n";

enum { O_TOKENS, O_WEIGHTS, O_VS_CUBLASLT };

/* What tuning measured for one GEMM kernel, kept for --vs-cublaslt. */
typedef struct {
  char kernel[16], dtype[16];
  int64_t n, k, rows[32];
  int streams, nb;
  double us[32], rule_us[32];
} Measured;

typedef struct {
  Measured *m;
  int n;
} Report;

static void keep(Report *r, const ffn_tune_progress *p) {
  Measured *m = realloc(r->m, sizeof *m * (size_t)(r->n + 1));
  if (!m)
    return; /* the comparison leaves this kernel out; tuning goes on */
  r->m = m;
  Measured *x = &m[r->n++];
  *x = (Measured){.n = p->n, .k = p->k, .streams = p->streams, .nb = p->nbuckets < 32 ? p->nbuckets : 32};
  snprintf(x->kernel, sizeof x->kernel, "%s", p->kernel);
  snprintf(x->dtype, sizeof x->dtype, "%s", p->dtype);
  for (int b = 0; b < x->nb; b++)
    x->rows[b] = p->rows[b], x->us[b] = p->us[b], x->rule_us[b] = p->default_us[b];
}

static void report(void *user, const ffn_tune_progress *p) {
  if (user)
    keep(user, p);
  fprintf(stderr, "tune: [%d/%d] %s %s N %lld%s K %lld:", p->gemm, p->gemms, p->kernel, p->dtype, (long long)p->n,
          p->streams == 2 ? "x2" : "", (long long)p->k);
  for (int b = 0; b < p->nbuckets; b++)
    fprintf(stderr, " %lld %s/%d %.1fus%s", (long long)p->rows[b], p->config[b], p->splits[b], p->us[b],
            p->us[b] < p->default_us[b] ? "*" : "");
  fprintf(stderr, " (%.1f s)\n", p->seconds);
  printf("%s: %s, N %lld x %d streams, K %lld\n", p->kernel, p->dtype, (long long)p->n, p->streams, (long long)p->k);
  printf("  %7s  %-20s %6s %10s %10s %7s\n", "rows", "config", "splits", "time_us", "rule_us", "gain");
  for (int b = 0; b < p->nbuckets; b++)
    printf("  %7lld  %-20s %6d %10.1f %10.1f %6.2fx\n", (long long)p->rows[b], p->config[b], p->splits[b], p->us[b],
           p->default_us[b], p->us[b] > 0 ? p->default_us[b] / p->us[b] : 1.0);
  fflush(stdout);
}

/* Random weights of the right scale (randinit_weight_scale) for every weight of g, bound to m. */
static int bind_random(ffn_model *m, const Graph *g) {
  for (int i = 0; i < g->nodes.len; i++) {
    Node *n = GRAPH_NODE(g, i);
    if (n->op != OP_WEIGHT)
      continue;
    if (n->stored != DT_NONE)
      return cli_error("tune: weight '%s' is pre-quantized (%s codes with scales): give its checkpoint with --weights",
                       n->name, dtype_name(n->stored)),
             EXIT_USER;
    int64_t shape[FFN_MAX_RANK], numel = 1;
    for (int d = 0; d < n->shape.rank; d++)
      numel *= shape[d] = n->shape.d[d].size;
    double mean, std;
    randinit_weight_scale(g, n, &mean, &std);
    DLDataType dl;
    if (!dtype_to_dl(n->dtype, &dl))
      return cli_error("tune: weight '%s' is %s, which DLPack tensors cannot carry", n->name, dtype_name(n->dtype)),
             EXIT_USER;
    void *h = random_buffer(n->dtype, (size_t)numel, mean, std); /* the bench's: fast, the right scale */
    DLTensor t = {h, {kDLCPU, 0}, n->shape.rank, dl, shape, NULL, 0};
    ffn_status s = ffn_model_bind_weight(m, n->name, &t);
    free(h);
    if (s != FFN_OK)
      return cli_error("tune: %s", ffn_last_error()), cli_status_exit(s);
  }
  return 0;
}

typedef struct {
  CompileArgs ca;
  const char *wpath;
  int64_t tokens[32];
  int ntokens;
  bool vs_cublaslt;
} TuneArgs;

/* The command line into a; -1 to go on, else the exit status (0 after --help). */
static int tune_args(int argc, char **argv, TuneArgs *a) {
  static const CliOpt opts[] = {CLI_OPT("--tokens", "N[,N...]", O_TOKENS),
                                CLI_OPT("--weights", "W.safetensors", O_WEIGHTS),
                                CLI_OPT("--vs-cublaslt", NULL, O_VS_CUBLASLT),
                                CLI_MANY("--precision", "KEY=TYPE", CO_PRECISION),
                                CLI_MANY("--ffn-fusion", "A..B", CO_FFN_FUSION),
                                CLI_TARGET_OPTIONS,
                                {0}};
  const char *v;
  CliParser p;
  cli_parser_init(&p, "tune", opts, argc, argv);
  for (int id; (id = cli_next(&p, &v)) != CLI_END;) {
    if (id == CLI_HELP)
      return fputs(usage, stdout), 0;
    if (id == CLI_BAD || cli_compile_option("tune", id, v, &a->ca) < 0)
      return EXIT_USAGE;
    if (id == O_TOKENS && cli_int_list("tune", "--tokens", v, 1, 2147483647, a->tokens, 32, &a->ntokens) != 0)
      return EXIT_USAGE;
    if (id == O_WEIGHTS)
      a->wpath = v;
    else if (id == O_VS_CUBLASLT)
      a->vs_cublaslt = true;
    else if (id == CLI_ARG && a->ca.file)
      return cli_error("tune: unexpected argument '%s' (one FILE.ffn)", v), EXIT_USAGE;
    else if (id == CLI_ARG)
      a->ca.file = v;
  }
  if (!a->ca.file)
    return cli_error("tune: usage: ffnc tune FILE.ffn [--tokens N[,N...]] [--weights W.safetensors] "
                     "[--vs-cublaslt]"),
           EXIT_USAGE;
  return -1;
}

/* ---- --vs-cublaslt ---- */

static const CuApi *cu; /* for CK (bench.h) */

typedef struct {
  Lt *lt;
  DType t;
  bool fp8;
  int M, N, K;
  CUdeviceptr a, b, d, flush;
  size_t flush_bytes;
} LtRun;

static int lt_run(LtRun *r, CUstream s, char *err, size_t len) {
  return r->fp8 ? lt_matmul_fp8(r->lt, s, r->M, r->N, r->K, r->a, r->b, r->d, err, len)
                : lt_matmul(r->lt, s, r->t, r->M, r->N, r->K, r->a, r->b, r->d, 0, LT_EPI_NONE, 0, err, len);
}

static void run_lt(void *ctx, int rot, CUstream s) {
  (void)rot;
  char err[512];
  if (lt_run(ctx, s, err, sizeof err) != 0) { /* it ran once before timing: cannot fail here but by the device */
    cli_error("tune: %s", err);
    exit(EXIT_DEVICE);
  }
}

static void run_flush(void *ctx, int rot, CUstream s) {
  LtRun *r = ctx;
  CK(cu->cuMemsetD32Async(r->flush, (unsigned)rot, r->flush_bytes / 4, s));
}

/* n bytes of random values of type t at d (a 4 MiB pattern repeated; variance 1 for floats,
 * fp8 codes of magnitude below 1). Nonzero on device out of memory. */
static int alloc_random(CUdeviceptr *d, DType t, size_t n) {
  if (cu->cuMemAlloc(d, n ? n : 16) != CUDA_SUCCESS)
    return *d = 0, -1;
  size_t chunk = n < ((size_t)4 << 20) ? n : (size_t)4 << 20, esize = dtype_bytes(t, 1);
  void *h = random_buffer(t, chunk / esize, 0, t == DT_F8E4M3 ? 0.5 : 1.0);
  for (size_t off = 0; off < n; off += chunk)
    CK(cu->cuMemcpyHtoD(*d + off, h, n - off < chunk ? n - off : chunk));
  free(h);
  return 0;
}

/* Kernel x's rows against cuBLASLt; one line each. */
static void compare_kernel(LtRun *r, const Measured *x, CUstream s) {
  DType t = dtype_from_name(x->dtype);
  r->fp8 = t == DT_F8E4M3 || t == DT_F8E5M2;
  r->t = r->fp8 ? DT_F8E4M3 : t;
  if (x->nb < 1)
    return;
  if (r->t != DT_BF16 && r->t != DT_F16 && r->t != DT_F32 && !r->fp8) {
    printf("  %-5s %s: no cuBLASLt GEMM of this type\n", x->kernel, x->dtype);
    return;
  }
  int64_t maxm = x->rows[x->nb - 1], N = x->n * x->streams;
  size_t out = r->fp8 ? 2 : dtype_bytes(r->t, 1);
  r->N = (int)N, r->K = (int)x->k;
  r->a = r->b = r->d = 0;
  if (alloc_random(&r->a, r->t, dtype_bytes(r->t, (size_t)(maxm * x->k))) ||
      alloc_random(&r->b, r->t, dtype_bytes(r->t, (size_t)(N * x->k))) ||
      cu->cuMemAlloc(&r->d, (size_t)maxm * (size_t)N * out) != CUDA_SUCCESS) {
    printf("  %-5s: not enough device memory for cuBLASLt's operands at %lld rows\n", x->kernel, (long long)maxm);
    r->d = 0;
  }
  for (int b = 0; b < x->nb && r->d; b++) {
    char err[512];
    r->M = (int)x->rows[b];
    if (lt_run(r, s, err, sizeof err) != 0) {
      printf("  %-5s %7lld: cuBLASLt: %s\n", x->kernel, (long long)x->rows[b], err);
      continue;
    }
    double us = time_runs_after(run_flush, run_lt, r, 1 << 20, 15, s);
    double tflop = 2e-6 * (double)r->M * (double)N * (double)x->k; /* TFLOP/s once divided by us */
    printf("  %-5s %7lld %6lld %6lld %-7s %9.1f %7.1f %9.1f %9.1f %7.1f %7.0f%% %7.0f%%\n", x->kernel,
           (long long)x->rows[b], (long long)N, (long long)x->k, r->fp8 ? "fp8" : dtype_name(r->t), x->rule_us[b],
           tflop / x->rule_us[b], x->us[b], us, tflop / us, 100 * us / x->rule_us[b], 100 * us / x->us[b]);
  }
  cu->cuMemFree(r->a), cu->cuMemFree(r->b), cu->cuMemFree(r->d);
}

/* The tuned kernels' times against cuBLASLt's plain GEMM of the same shape, on GPU 0. The exit
 * status. */
static int vs_cublaslt(const Report *rep) {
  char why[512];
  if (!(cu = cu_api(why, sizeof why)))
    return cli_error("tune: --vs-cublaslt: %s", why), EXIT_DEVICE;
  CUdevice dev;
  CUcontext ctx;
  CK(cu->cuDeviceGet(&dev, 0));
  CK(cu->cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cu->cuCtxPushCurrent(ctx));
  LtRun r = {.lt = lt_create(why, sizeof why)};
  if (!r.lt) {
    CUcontext c;
    cu->cuCtxPopCurrent(&c);
    cu->cuDevicePrimaryCtxRelease(dev);
    return cli_error("tune: --vs-cublaslt: %s", why), EXIT_DEVICE;
  }
  int l2 = 0;
  CUstream s;
  CK(cu->cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev));
  r.flush_bytes = 2 * (size_t)(l2 > (1 << 20) ? l2 : 1 << 20);
  CK(cu->cuMemAlloc(&r.flush, r.flush_bytes));
  CK(cu->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  printf("vs cuBLASLt %s: its plain GEMM (no epilogue) at each kernel's M, N, K; both one launch after an L2 "
         "flush, median of 15\n", lt_version(r.lt));
  printf("  %-5s %7s %6s %6s %-7s %9s %7s %9s %9s %7s %8s %8s\n", "gemm", "rows", "N", "K", "type", "rule_us",
         "TFLOP/s", "tuned_us", "lt_us", "TFLOP/s", "rule", "tuned");
  for (int i = 0; i < rep->n; i++)
    compare_kernel(&r, &rep->m[i], s);
  printf("  (rule, tuned: ffnc's rate as a fraction of cuBLASLt's; ffnc's includes its fused epilogue)\n");
  CK(cu->cuStreamSynchronize(s));
  cu->cuStreamDestroy(s);
  cu->cuMemFree(r.flush);
  lt_destroy(r.lt);
  CUcontext c;
  cu->cuCtxPopCurrent(&c);
  cu->cuDevicePrimaryCtxRelease(dev);
  return 0;
}

int cmd_tune(int argc, char **argv) {
  TuneArgs a = {.ca = {.opt_level = 3}};
  int rc = tune_args(argc, argv, &a);
  if (rc >= 0)
    return rc;
  char why[1024];
  if (ffn_device_count(why, sizeof why) == 0) /* before spending time compiling */
    return cli_error("tune: %s; tuning measures on the GPU", why), EXIT_DEVICE;
  int status = 0;
  Graph *g = a.wpath ? NULL : cli_frontend(&a.ca, &status); /* the weights' names, shapes and scales */
  if (!a.wpath && !g)
    return status;
  ffn_options *o = NULL;
  ffn_program *prog = NULL;
  ffn_model *m = NULL;
  Report rep = {0};
  ffn_status s = cli_options(&a.ca, &o);
  if (s == FFN_OK)
    s = ffn_program_compile_file(a.ca.file, o, &prog);
  if (s == FFN_OK)
    s = ffn_model_create(prog, 0, &m);
  if (s != FFN_OK) {
    cli_error("tune: %s", ffn_last_error());
    status = cli_status_exit(s);
    goto out;
  }
  if (a.ca.verbose)
    fprintf(stderr, "tune: before: %s\n", ffn_model_tuning(m));
  if (a.wpath && (s = ffn_model_bind_weights_file(m, a.wpath)) != FFN_OK) {
    cli_error("tune: %s", ffn_last_error());
    status = cli_status_exit(s);
    goto out;
  }
  if (!a.wpath && (status = bind_random(m, g)) != 0)
    goto out;
  if ((s = ffn_model_prepare(m)) == FFN_OK)
    s = ffn_model_tune(m, a.ntokens ? a.tokens : NULL, a.ntokens, report, a.vs_cublaslt ? &rep : NULL);
  if (s != FFN_OK) {
    cli_error("tune: %s", ffn_last_error());
    status = cli_status_exit(s);
    goto out;
  }
  printf("%s\n", ffn_model_tuning(m));
  if (a.vs_cublaslt)
    status = vs_cublaslt(&rep);
out:
  free(rep.m);
  ffn_model_destroy(m);
  ffn_program_destroy(prog);
  ffn_options_destroy(o);
  graph_destroy(g);
  return status;
}
