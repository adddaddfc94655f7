/* gpu_threads_test.c: one prepared model run from several host threads at once, each on its
 * own stream, with different token counts and inputs; every result is checked against the
 * program's reference. Exercises the workspace pool (exec.c) under concurrency.
 */
#include "gpu/gpu_util.h"
#include "runtime/rt.h"

#include <pthread.h>
#include <time.h>

#define NCASES 8
#define NTHREADS 4
#define RUNS 12

typedef struct {
  TensorSet in;
  RefTensor ref[8];
} Case;

static Case cases[NCASES];
static ffn_model *model;
static Graph *graph;
static const CuApi *cu;
static CUcontext ctx;
static int failures;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

#define CK(call)                                                          \
  do {                                                                    \
    CUresult r_ = (call);                                                 \
    if (r_ != CUDA_SUCCESS) {                                             \
      printf("FAIL: %s -> %d\n", #call, (int)r_);                         \
      pthread_mutex_lock(&lock);                                          \
      failures++;                                                         \
      pthread_mutex_unlock(&lock);                                        \
      return NULL;                                                        \
    }                                                                     \
  } while (0)

static void *worker(void *arg) {
  int t = (int)(intptr_t)arg;
  CK(cu->cuCtxPushCurrent(ctx));
  CUstream stream;
  CK(cu->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  for (int k = 0; k < RUNS; k++) {
    Case *c = &cases[(t * 3 + k) % NCASES];
    DLTensor din[8], dout[8];
    for (int i = 0; i < c->in.n; i++) {
      RawTensor *r = &c->in.items[i].t;
      CUdeviceptr p;
      CK(cu->cuMemAlloc(&p, r->nbytes + 16));
      CK(cu->cuMemcpyHtoDAsync(p, r->data, r->nbytes, stream));
      din[i] = (DLTensor){(void *)p, {kDLCUDA, 0}, r->rank, dl_of(r->dtype), r->shape, NULL, 0};
    }
    void *host[8];
    for (int i = 0; i < graph->noutputs; i++) {
      size_t bytes = dtype_bytes(c->ref[i].dtype, (size_t)ref_numel(&c->ref[i]));
      CUdeviceptr p;
      CK(cu->cuMemAlloc(&p, bytes + 16));
      CK(cu->cuMemsetD8Async(p, 0xff, bytes, stream));
      dout[i] = (DLTensor){(void *)p, {kDLCUDA, 0}, c->ref[i].rank, dl_of(c->ref[i].dtype), c->ref[i].shape, NULL, 0};
      host[i] = malloc(bytes + 16);
    }
    if (ffn_model_run(model, stream, din, c->in.n, dout, graph->noutputs) != FFN_OK) {
      printf("FAIL: run: %s\n", ffn_last_error());
      pthread_mutex_lock(&lock);
      failures++;
      pthread_mutex_unlock(&lock);
      return NULL;
    }
    for (int i = 0; i < graph->noutputs; i++)
      CK(cu->cuMemcpyDtoHAsync(host[i], (CUdeviceptr)dout[i].data,
                               dtype_bytes(c->ref[i].dtype, (size_t)ref_numel(&c->ref[i])), stream));
    CK(cu->cuStreamSynchronize(stream));
    for (int i = 0; i < graph->noutputs; i++) {
      char label[64];
      snprintf(label, sizeof label, "thread %d run %d T=%lld", t, k, (long long)c->ref[i].shape[0]);
      if (compare_one(label, "program", graph->outputs[i].name, tolerance_for(narrowest_type(graph), false),
                      c->ref[i].dtype, host[i], &c->ref[i]) != 0) {
        pthread_mutex_lock(&lock);
        failures++;
        pthread_mutex_unlock(&lock);
      }
      free(host[i]);
      cu->cuMemFree((CUdeviceptr)dout[i].data);
    }
    for (int i = 0; i < c->in.n; i++)
      cu->cuMemFree((CUdeviceptr)din[i].data);
  }
  cu->cuStreamDestroy(stream);
  CUcontext c;
  cu->cuCtxPopCurrent(&c);
  return NULL;
}

int main(void) {
  require_gpu();
  size_t len;
  char *path = source_path("examples/llama3_tiny.ffn"), *text = source_text("examples/llama3_tiny.ffn", &len);
  Diags d;
  diags_init(&d);
  Graph *g = frontend_compile_string(text, len, path, NULL, &d);
  DriverOptions o = {.sm = 90, .opt_level = 3};
  if (!g || driver_compile(text, len, path, &o, &d, NULL, &graph) != 0) {
    printf("FAIL: %s", d.text);
    return 1;
  }
  ffn_program *prog;
  if (ffn_program_compile(text, len, path, NULL, &prog) != FFN_OK || ffn_model_create(prog, 0, &model) != FFN_OK) {
    printf("FAIL: %s\n", ffn_last_error());
    return 1;
  }
  uint64_t seed = test_seed();
  TensorSet w = {0};
  make_weights(g, seed, &w);
  if (bind_weights(model, &w) != 0)
    return 1;
  static const int64_t tokens[NCASES] = {1, 5, 64, 200, 33, 777, 16, 128};
  for (int k = 0; k < NCASES; k++) {
    make_inputs(g, tokens[k], seed + 77 + (uint64_t)k, &cases[k].in);
    if (reference(graph, &w, &cases[k].in, cases[k].ref) != 0)
      return 1;
  }
  cu = cu_api(NULL, 0);
  CUdevice dev;
  cu->cuDeviceGet(&dev, 0);
  cu->cuDevicePrimaryCtxRetain(&ctx, dev);
  pthread_t th[NTHREADS];
  for (int t = 0; t < NTHREADS; t++)
    pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
  for (int t = 0; t < NTHREADS; t++)
    pthread_join(th[t], NULL);
  printf("%d threads x %d runs: %s\n", NTHREADS, RUNS, failures ? "FAILED" : "PASSED");
  ffn_model_destroy(model);
  ffn_program_destroy(prog);
  cu->cuDevicePrimaryCtxRelease(dev);
  return failures ? 1 : 0;
}
