/* grad_api_test.c: ffn_model_run_grad on the GPU against the CPU reference.
 *
 *   grad_api_test [MODEL.ffn] [--direct N]      (default examples/llama3_tiny.ffn)
 *
 * The model's backward graph, random weights, and for each token count (FFNC_TEST_TOKENS,
 * default 1, 7, 64, 1000) fresh random inputs and output gradients; every gradient the call
 * gives is compared with the reference interpreter's (the source's backward graph, gpu_util.h's
 * gradient tolerances, those of bf16 for bf16 tensors) in six ways:
 *
 *   f32 accumulate     f32 tensors holding random values (the gradient's own scale): v + grad
 *   mixed accumulate   even gradients bf16, odd f32, random values: v + grad
 *   bf16 accumulate    bf16 tensors holding random values: v + grad
 *   bf16 write         poisoned (NaN bytes) first: grad
 *   f32 write          in place, poisoned first, gradient 1 not wanted (data NULL): grad
 *   CUDA graph         f32 accumulate captured after a warm-up call (global capture mode: an
 *                      allocation inside would fail the capture), replayed twice: v + 2 grad
 *
 * --direct N: the weight gradients that the wgrad kernels write straight into the caller's tensor
 * (runtime/grad.c: grad_plan_direct) against the staged path: every case but f32 write runs
 * twice from the same values, with FFNC_GRAD_DIRECT=0 (staged) and without (direct), both are
 * compared with the reference, and each gradient must be the same bits in both. N is how many
 * gradients each of those calls writes directly on sm_90 (checked; 0 on other GPUs, whose
 * kernels have no direct forms, and under FFNC_WGRAD=mma).
 *
 * Every CUDA call is checked and named when it fails. The seed is printed (FFNC_TEST_SEED
 * replays it). Exits 77 (skip) where there is no GPU.
 */
#include "gpu/gpu_util.h"
#include "runtime/grad.h"

static const CuApi *cu;

#define CUCALL(call)                                                                 \
  do {                                                                               \
    CUresult r_ = (call);                                                            \
    if (r_ != CUDA_SUCCESS) {                                                        \
      const char *name_ = "?";                                                       \
      cu->cuGetErrorName(r_, &name_);                                                \
      printf("FAIL: %s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, name_);      \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

enum { CASE_F32_ACC, CASE_MIXED_ACC, CASE_BF16_ACC, CASE_BF16_WRITE, CASE_F32_WRITE, CASE_GRAPH, NCASES };
static const char *case_name[NCASES] = {"f32 accumulate", "mixed accumulate", "bf16 accumulate", "bf16 write",
                                        "f32 write",      "CUDA graph x2"};

static DType dst_type(int c, int i) {
  if (c == CASE_BF16_WRITE || c == CASE_BF16_ACC || (c == CASE_MIXED_ACC && i % 2 == 0))
    return DT_BF16;
  return DT_F32;
}

static bool accumulates(int c) { return c == CASE_F32_ACC || c == CASE_MIXED_ACC || c == CASE_BF16_ACC || c == CASE_GRAPH; }

static double rms_of(const RefTensor *r) {
  double s = 0;
  int64_t n = ref_numel(r);
  for (int64_t j = 0; j < n; j++)
    s += (double)r->data[j] * r->data[j];
  return n ? sqrt(s / (double)n) : 0;
}

/* One case at one token count: 0 if every gradient matches. With keep, the gradients as the
 * call left them are kept there (malloc'd, NULL where not wanted) rather than freed. */
static int run_case(int c, ffn_model *m, const Graph *g, CUstream stream, const DLTensor *din, int nin,
                    const RefTensor *ref, uint64_t seed, const char *tokens_label, void **keep) {
  int ng = g->noutputs;
  DLTensor grads[64];
  CUdeviceptr dev[64] = {0};
  void *init[64] = {0}, *host[64] = {0};
  size_t bytes[64];
  bool accumulate = accumulates(c);
  for (int i = 0; i < ng; i++) {
    DType dt = dst_type(c, i);
    int64_t n = ref_numel(&ref[i]);
    bytes[i] = dtype_bytes(dt, (size_t)n);
    host[i] = malloc(bytes[i] + 16);
    if (bytes[i])
      CUCALL(cu->cuMemAlloc(&dev[i], bytes[i]));
    if (accumulate) { /* values of the gradient's own scale, so both terms count */
      size_t nb;
      char name[300];
      snprintf(name, sizeof name, "init.%s", g->outputs[i].name);
      init[i] = randinit_tensor(name, seed + (uint64_t)c, dt, n, 0.0, rms_of(&ref[i]) + 1e-3, &nb);
      if (bytes[i])
        CUCALL(cu->cuMemcpyHtoDAsync(dev[i], init[i], bytes[i], stream));
    } else if (bytes[i]) {
      CUCALL(cu->cuMemsetD8Async(dev[i], 0xff, bytes[i], stream)); /* NaN: an unwritten element fails */
    }
    grads[i] = (DLTensor){(void *)dev[i], {kDLCUDA, 0}, ref[i].rank, dl_of(dt), (int64_t *)ref[i].shape, NULL, 0};
  }
  if (c == CASE_F32_WRITE && ng > 1)
    grads[1].data = NULL;
  unsigned flags = accumulate ? FFN_GRAD_ACCUMULATE : 0;
  int rounds = 1;
  if (c == CASE_GRAPH) {
    /* a warm-up call makes the workspace; the values are set again before the graph runs */
    if (ffn_model_run_grad(m, stream, din, nin, grads, ng, flags) != FFN_OK) {
      printf("FAIL %s %s: warm-up: %s\n", tokens_label, case_name[c], ffn_last_error());
      return -1;
    }
    for (int i = 0; i < ng; i++)
      if (bytes[i])
        CUCALL(cu->cuMemcpyHtoDAsync(dev[i], init[i], bytes[i], stream));
    CUgraph graph;
    CUgraphExec exec;
    CUCALL(cu->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    ffn_status s = ffn_model_run_grad(m, stream, din, nin, grads, ng, flags);
    CUresult end = cu->cuStreamEndCapture(stream, &graph);
    if (s != FFN_OK) {
      printf("FAIL %s %s: captured call: %s\n", tokens_label, case_name[c], ffn_last_error());
      return -1;
    }
    CUCALL(end);
    CUCALL(cu->cuGraphInstantiate(&exec, graph, 0));
    rounds = 2;
    for (int k = 0; k < rounds; k++)
      CUCALL(cu->cuGraphLaunch(exec, stream));
    CUCALL(cu->cuStreamSynchronize(stream));
    CUCALL(cu->cuGraphExecDestroy(exec));
    CUCALL(cu->cuGraphDestroy(graph));
  } else if (ffn_model_run_grad(m, stream, din, nin, grads, ng, flags) != FFN_OK) {
    printf("FAIL %s %s: %s\n", tokens_label, case_name[c], ffn_last_error());
    return -1;
  }
  for (int i = 0; i < ng; i++)
    if (bytes[i])
      CUCALL(cu->cuMemcpyDtoHAsync(host[i], dev[i], bytes[i], stream));
  CUCALL(cu->cuStreamSynchronize(stream));
  int rc = 0;
  DType narrow = narrowest_type(g);
  for (int i = 0; i < ng; i++) {
    if (!grads[i].data)
      continue;
    DType dt = dst_type(c, i);
    RefTensor want = ref[i];
    int64_t n = ref_numel(&ref[i]);
    want.data = malloc(sizeof(float) * (size_t)n + 16);
    for (int64_t j = 0; j < n; j++)
      want.data[j] = (float)((accumulate ? dtype_load(dt, init[i], (size_t)j) : 0.0) + rounds * (double)ref[i].data[j]);
    char label[160];
    snprintf(label, sizeof label, "%s %s %s", tokens_label, case_name[c], dt == DT_BF16 ? "(bf16)" : "(f32)");
    Tolerance tol = tolerance_of(g, dt == DT_BF16 ? DT_BF16 : narrow, true);
    rc |= compare_one(label, "source", g->outputs[i].name, tol, dt, host[i], &want);
    free(want.data);
  }
  for (int i = 0; i < ng; i++) {
    if (dev[i])
      CUCALL(cu->cuMemFree(dev[i]));
    free(init[i]);
    if (keep)
      keep[i] = grads[i].data ? host[i] : (free(host[i]), NULL);
    else
      free(host[i]);
  }
  return rc;
}

/* How many gradients a call of case c writes directly (grad_plan_direct on its tensors' types
 * and mode, as ffn_model_run_grad decides; the pointers are never dereferenced). */
static int direct_count(int c, const ffn_model *m, const DLTensor *din, int nin, const RefTensor *ref, int ng) {
  DLTensor grads[64];
  GradTarget t[64];
  int64_t dims[64];
  for (int i = 0; i < ng; i++)
    grads[i] = (DLTensor){(void *)(uintptr_t)4096, {kDLCUDA, 0}, ref[i].rank, dl_of(dst_type(c, i)),
                          (int64_t *)ref[i].shape, NULL, 0};
  unsigned flags = accumulates(c) ? FFN_GRAD_ACCUMULATE : 0;
  if (grad_check_call(m->prog->plan, din, nin, grads, ng, flags, t, dims) != FFN_OK) {
    printf("FAIL: %s: %s\n", case_name[c], ffn_last_error());
    return -1;
  }
  return grad_plan_direct(m->prog->plan, t, ng, flags);
}

/* --direct: case c staged (FFNC_GRAD_DIRECT=0), then direct, from the same values: both right,
 * the same bits, and `expect` gradients written directly. */
static int run_direct(int c, ffn_model *m, const Graph *g, CUstream stream, const DLTensor *din, int nin,
                      const RefTensor *ref, uint64_t seed, const char *tokens_label, int expect) {
  int ng = g->noutputs, n = direct_count(c, m, din, nin, ref, ng), rc = 0;
  if (n != expect) {
    printf("FAIL %s %s: %d gradients written directly, expected %d\n", tokens_label, case_name[c], n, expect);
    rc = 1;
  }
  void *staged[64] = {0}, *direct[64] = {0};
  char label[96];
  snprintf(label, sizeof label, "%s staged", tokens_label);
  setenv("FFNC_GRAD_DIRECT", "0", 1);
  rc |= run_case(c, m, g, stream, din, nin, ref, seed, label, staged) != 0;
  unsetenv("FFNC_GRAD_DIRECT");
  snprintf(label, sizeof label, "%s direct", tokens_label);
  rc |= run_case(c, m, g, stream, din, nin, ref, seed, label, direct) != 0;
  for (int i = 0; i < ng; i++) {
    DType dt = dst_type(c, i);
    int64_t numel = ref_numel(&ref[i]);
    for (int64_t j = 0; staged[i] && direct[i] && j < numel; j++)
      if (memcmp((char *)staged[i] + dtype_bytes(dt, (size_t)j), (char *)direct[i] + dtype_bytes(dt, (size_t)j),
                 dtype_bytes(dt, 1)) != 0) {
        printf("FAIL %s %s: %s element %lld: staged %.9g, direct %.9g (%s; not the same bits)\n", tokens_label,
               case_name[c], g->outputs[i].name, (long long)j, dtype_load(dt, staged[i], (size_t)j),
               dtype_load(dt, direct[i], (size_t)j), dtype_name(dt));
        rc = 1;
        break;
      }
    free(staged[i]);
    free(direct[i]);
  }
  if (!rc)
    printf("ok %s %s: %d gradients direct, the same bits as staged\n", tokens_label, case_name[c], n);
  return rc;
}

int main(int argc, char **argv) {
  require_gpu();
  const char *model = "examples/llama3_tiny.ffn";
  int direct = -1; /* --direct N: gradients each call writes directly on sm_90 */
  for (int a = 1; a < argc; a++)
    if (strcmp(argv[a], "--direct") == 0 && a + 1 < argc)
      direct = atoi(argv[++a]);
    else
      model = argv[a];
  size_t len;
  char *path = source_path(model), *text = source_text(model, &len);
  Diags d;
  diags_init(&d);
  DriverOptions dopt = {.sm = 90, .opt_level = 3, .grad = true};
  Graph *g = driver_model_graph(text, len, path, &dopt, &d);
  if (!g) {
    printf("FAIL: %s", d.text);
    return 1;
  }
  ffn_options *o;
  ffn_program *prog;
  ffn_model *m;
  ffn_options_create(&o);
  ffn_options_set_grad(o, 1);
  if (ffn_program_compile(text, len, path, o, &prog) != FFN_OK || ffn_model_create(prog, 0, &m) != FFN_OK) {
    printf("FAIL: compile or create: %s\n", ffn_last_error());
    return 1;
  }
  printf("%s (backward graph): %d kernels, %d gradients\n", path, ffn_program_num_kernels(prog),
         ffn_program_num_outputs(prog));
  if (direct >= 0 && (strcmp(m->prog->plan->arch, "sm_90") != 0 || m->wgrad_mma)) {
    printf("%s, FFNC_WGRAD %s: no direct forms, every gradient staged\n", m->prog->plan->arch,
           m->wgrad_mma ? "mma" : "unset");
    direct = 0;
  }
  uint64_t seed = test_seed();
  TensorSet w = {0};
  make_weights(g, seed, &w);
  if (bind_weights(m, &w) != 0)
    return 1;
  cu = cu_api(NULL, 0);
  CUdevice dev;
  CUcontext ctx;
  CUstream stream;
  CUCALL(cu->cuDeviceGet(&dev, 0));
  CUCALL(cu->cuDevicePrimaryCtxRetain(&ctx, dev));
  CUCALL(cu->cuCtxPushCurrent(ctx));
  CUCALL(cu->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  if (!getenv("FFNC_TEST_TOKENS"))
    setenv("FFNC_TEST_TOKENS", "1,7,64,1000", 1);
  int64_t tokens[16];
  int nt = test_tokens(tokens, 16), failed = 0;
  for (int k = 0; k < nt; k++) {
    TensorSet in = {0};
    make_inputs(g, tokens[k], seed + 1000 + (uint64_t)k, &in);
    RefTensor ref[64] = {0};
    char label[64];
    snprintf(label, sizeof label, "T=%lld", (long long)tokens[k]);
    if (reference(g, &w, &in, ref) != 0)
      return 1;
    DLTensor din[64];
    CUdeviceptr dptr[64] = {0};
    for (int i = 0; i < in.n; i++) {
      const RawTensor *t = &in.items[i].t;
      if (t->nbytes) {
        CUCALL(cu->cuMemAlloc(&dptr[i], t->nbytes));
        CUCALL(cu->cuMemcpyHtoD(dptr[i], t->data, t->nbytes));
      }
      din[i] = (DLTensor){(void *)dptr[i], {kDLCUDA, 0}, t->rank, dl_of(t->dtype), (int64_t *)t->shape, NULL, 0};
    }
    for (int c = 0; c < NCASES; c++)
      if (direct < 0)
        failed += run_case(c, m, g, stream, din, in.n, ref, seed + 7 * (uint64_t)k, label, NULL) != 0;
      else if (c != CASE_F32_WRITE) /* written in place either way */
        failed += run_direct(c, m, g, stream, din, in.n, ref, seed + 7 * (uint64_t)k, label, direct) != 0;
    for (int i = 0; i < in.n; i++)
      if (dptr[i])
        CUCALL(cu->cuMemFree(dptr[i]));
    for (int i = 0; i < g->noutputs; i++)
      ref_free(&ref[i]);
    set_free(&in);
  }
  CUCALL(cu->cuStreamDestroy(stream));
  ffn_model_destroy(m);
  ffn_program_destroy(prog);
  ffn_options_destroy(o);
  CUCALL(cu->cuCtxPopCurrent(&ctx));
  CUCALL(cu->cuDevicePrimaryCtxRelease(dev));
  set_free(&w);
  graph_destroy(g);
  diags_free(&d);
  free(text);
  free(path);
  printf("%s\n", failed ? "FAILED" : "PASSED");
  return failed ? 1 : 0;
}
