/* tp_api_test.c: tensor parallel through the C API with the host program's own communicators
 * (label gpu_multi: 2 GPUs and NCCL, else skipped): the two ranks of Llama-tiny, each on its
 * own device and host thread, with a communicator the "host program" makes as one process per
 * GPU would (ncclGetUniqueId once, ncclCommInitRank per rank) and hands over with
 * ffn_model_set_communicator. Both ranks' outputs are the same, and they agree with the whole
 * program on device 0 at T = 1, 7, 64, 1000, 4096: run as the row-block policy says (T = 4096
 * in 4 blocks, each block's all-reduce beside the next blocks' kernels: runtime/tp_overlap.c),
 * in 3 blocks forced from 64 rows, whole, and captured into a CUDA graph on each rank's thread
 * (in blocks: the side stream forked and joined inside the capture) and launched. */
#include <pthread.h>

#include "check.h"
#include "gpu_util.h"
#include "runtime/rt.h"
#include "tp_util.h"

enum { RANKS = 2, D = 256 };

static const NcclApi *nccl;
static NcclUniqueId id;

typedef struct {
  ffn_model *m;
  NcclComm comm;
  int rank;
  int64_t tokens;
  const uint16_t *x;
  uint16_t *y;
  bool captured;
  ffn_status status;
  char error[1024];
} Rank;

static ffn_status run(ffn_model *m, int64_t tokens, const uint16_t *x, uint16_t *y) {
  int64_t shape[2] = {tokens, D};
  DLTensor in = {(void *)x, {kDLCPU, 0}, 2, dl_of(DT_BF16), shape, NULL, 0};
  DLTensor out = {y, {kDLCPU, 0}, 2, dl_of(DT_BF16), shape, NULL, 0};
  return ffn_model_run_host(m, &in, 1, &out, 1);
}

#define CU(cu, call)                                                                                  \
  do {                                                                                               \
    CUresult r_ = (call);                                                                            \
    if (r_ != CUDA_SUCCESS)                                                                          \
      return cu_fail((cu), r_, #call);                                                               \
  } while (0)

/* The call captured into a CUDA graph on a stream of the rank's device (after a warm-up call),
 * the graph launched once: what the all-reduces read and write is the graph's. */
static ffn_status run_captured(ffn_model *m, int64_t tokens, const uint16_t *x, uint16_t *y) {
  const CuApi *cu = m->cu;
  size_t bytes = 2 * (size_t)(tokens * D);
  CUstream stream;
  CUdeviceptr dx, dy;
  CUgraph graph;
  CUgraphExec exec;
  int64_t shape[2] = {tokens, D};
  CU(cu, cu->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CU(cu, cu->cuMemAlloc(&dx, bytes));
  CU(cu, cu->cuMemAlloc(&dy, bytes));
  CU(cu, cu->cuMemcpyHtoD(dx, x, bytes));
  DLTensor in = {(void *)dx, {kDLCUDA, m->device}, 2, dl_of(DT_BF16), shape, NULL, 0};
  DLTensor out = {(void *)dy, {kDLCUDA, m->device}, 2, dl_of(DT_BF16), shape, NULL, 0};
  ffn_status s = ffn_model_run(m, stream, &in, 1, &out, 1);
  if (s != FFN_OK)
    return s;
  CU(cu, cu->cuMemsetD8Async(dy, 0xff, bytes, stream)); /* NaN: what the graph does not write */
  CU(cu, cu->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  s = ffn_model_run(m, stream, &in, 1, &out, 1);
  CUresult end = cu->cuStreamEndCapture(stream, &graph);
  if (s != FFN_OK)
    return s;
  CU(cu, end);
  CU(cu, cu->cuGraphInstantiate(&exec, graph, 0));
  CU(cu, cu->cuGraphLaunch(exec, stream));
  CU(cu, cu->cuStreamSynchronize(stream));
  CU(cu, cu->cuMemcpyDtoH(y, dy, bytes));
  CU(cu, cu->cuGraphExecDestroy(exec));
  CU(cu, cu->cuGraphDestroy(graph));
  CU(cu, cu->cuMemFree(dx));
  CU(cu, cu->cuMemFree(dy));
  CU(cu, cu->cuStreamDestroy(stream));
  return FFN_OK;
}

/* A rank's thread: its communicator once (on its device: the model's context current), then
 * its run. */
static void *rank_main(void *p) {
  Rank *r = p;
  r->status = FFN_OK;
  if (!r->comm) {
    CUcontext c;
    r->m->cu->cuCtxPushCurrent(r->m->ctx);
    int e = nccl->CommInitRank(&r->comm, RANKS, id, r->rank);
    r->m->cu->cuCtxPopCurrent(&c);
    r->status = e == NCCL_SUCCESS ? ffn_model_set_communicator(r->m, r->comm) : nccl_fail(nccl, e, "nccl->CommInitRank()");
  }
  if (r->status == FFN_OK && r->captured) {
    CUcontext c;
    r->m->cu->cuCtxPushCurrent(r->m->ctx);
    r->status = run_captured(r->m, r->tokens, r->x, r->y);
    r->m->cu->cuCtxPopCurrent(&c);
  } else if (r->status == FFN_OK) {
    r->status = run(r->m, r->tokens, r->x, r->y);
  }
  if (r->status != FFN_OK)
    snprintf(r->error, sizeof r->error, "%s", ffn_last_error());
  return NULL;
}

int main(void) {
  char why[1024];
  int count = ffn_device_count(why, sizeof why);
  if (count < RANKS) {
    printf("SKIP: %d GPUs (%s)\n", count, count ? "2 needed" : why);
    return SKIP;
  }
  if (!(nccl = nccl_api(why, sizeof why))) {
    printf("SKIP: %s\n", why);
    return SKIP;
  }
  CHECK(nccl->GetUniqueId(&id) == NCCL_SUCCESS, "ncclGetUniqueId");
  char *path = source_path("examples/llama3_tiny.ffn");
  ffn_program *whole = compile_tp(path, 1, 0), *share[RANKS];
  ffn_model *mw;
  CHECK(ffn_model_create(whole, 0, &mw) == FFN_OK, "%s", ffn_last_error());
  tp_bind_weights(mw, whole);
  Rank ranks[RANKS] = {{0}};
  for (int r = 0; r < RANKS; r++) {
    share[r] = compile_tp(path, RANKS, r);
    CHECK(ffn_model_create(share[r], r, &ranks[r].m) == FFN_OK, "%s", ffn_last_error());
    tp_bind_weights(ranks[r].m, whole);
    ranks[r].rank = r;
  }
  static const struct {
    int64_t tokens;
    int blocks; /* ffn_model.tp_blocks: 0 the policy, N forced, -1 whole */
    bool captured;
  } cases[] = {{1, 0, false},    {7, 0, false},     {64, 0, false},   {1000, 0, false}, {4096, 0, false},
               {64, 3, false},   {1000, 3, false},  {4096, -1, false}, {4096, 0, true},  {1000, 3, true},
               {1000, -1, true}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    int64_t T = cases[k].tokens;
    uint16_t *x = malloc(2 * (size_t)(T * D)), *ref = malloc(2 * (size_t)(T * D)), *y[RANKS];
    for (int64_t i = 0; i < T * D; i++)
      x[i] = f32_to_bf16_bits((float)((i * 7919 % 2001) - 1000) / 1000.0f);
    CHECK(run(mw, T, x, ref) == FFN_OK, "whole: %s", ffn_last_error());
    pthread_t th[RANKS];
    for (int r = 0; r < RANKS; r++) {
      y[r] = malloc(2 * (size_t)(T * D));
      ranks[r].tokens = T, ranks[r].x = x, ranks[r].y = y[r], ranks[r].captured = cases[k].captured;
      ranks[r].m->tp_blocks = cases[k].blocks;
      pthread_create(&th[r], NULL, rank_main, &ranks[r]);
    }
    for (int r = 0; r < RANKS; r++) {
      pthread_join(th[r], NULL);
      CHECK(ranks[r].status == FFN_OK, "rank %d: %s", r, ranks[r].error);
    }
    double num = 0, den = 0;
    for (int64_t i = 0; i < T * D; i++) {
      double a = bf16_bits_to_f32(y[0][i]), b = bf16_bits_to_f32(ref[i]);
      num += (a - b) * (a - b), den += b * b;
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    CHECK(memcmp(y[0], y[1], 2 * (size_t)(T * D)) == 0, "T=%lld: the ranks' outputs differ", (long long)T);
    CHECK(rel < 2e-2, "T=%lld: rank 0 against the whole program: rel_l2 %.3g", (long long)T, rel);
    int64_t starts[TP_MAX_BLOCKS + 1];
    printf("T=%lld, %d blocks%s: rank 0 against the whole program: rel_l2 %.3g; ranks equal\n", (long long)T,
           tp_row_blocks(T, cases[k].blocks, true, starts), cases[k].captured ? ", captured" : "", rel);
    for (int r = 0; r < RANKS; r++)
      free(y[r]);
    free(x), free(ref);
  }
  for (int r = 0; r < RANKS; r++) {
    ffn_model_destroy(ranks[r].m); /* then the communicator: it is the host program's */
    if (ranks[r].comm)
      nccl->CommDestroy(ranks[r].comm);
    ffn_program_destroy(share[r]);
  }
  ffn_model_destroy(mw);
  ffn_program_destroy(whole);
  free(path);
  return check_result("tp_api_test");
}
