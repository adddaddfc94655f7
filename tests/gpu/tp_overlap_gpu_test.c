/* tp_overlap_gpu_test.c: calls cut into row blocks (runtime/tp_overlap.c) on one GPU (label gpu;
 * two ranks are gpu_multi's: tp_run_test.sh with FFNC_TP_BLOCKS, tp_api_test.c).
 *
 *  - Llama-tiny whole (TP 1) with 3 blocks forced against the same model run whole, at T = 1,
 *    64, 1000, 4096 (3 blocks from 64 rows: each its own workspace), also with split-K 3 on
 *    every GEMM (each block its own tile counters), and captured into a CUDA graph and replayed.
 *  - The side stream, where NCCL is found: rank 0's share of Llama-tiny over 2 ranks given a
 *    one-rank communicator on this GPU (past ffn_model_set_communicator's check, which wants
 *    2 ranks), so each all-reduce is NCCL's over one rank (the identity): its runs in blocks
 *    (all-reduces on the side stream, forked and joined with events) against the same runs
 *    whole, as the policy cuts them (4 blocks at T = 4096) and in 5 forced blocks, and captured: the capture ends only if
 *    the side stream joined the caller's. What this cannot show is a missing wait between the
 *    streams: one rank's all-reduce changes nothing (gpu_multi's outputs would).
 */
#include "check.h"
#include "gpu_util.h"
#include "runtime/rt.h"
#include "tp_util.h"

enum { D = 256 };

#define CU(call) CHECK((call) == CUDA_SUCCESS, "%s", #call)

/* y = m(x) for T tokens on a stream of m's device; captured: the call captured into a graph
 * (after a warm-up call, as a caller would), the graph launched twice. */
static void run(ffn_model *m, int64_t T, const uint16_t *x, uint16_t *y, bool captured) {
  const CuApi *cu = m->cu;
  size_t bytes = 2 * (size_t)(T * D);
  CUstream stream;
  CUdeviceptr dx, dy;
  CU(cu->cuCtxPushCurrent(m->ctx));
  CU(cu->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CU(cu->cuMemAlloc(&dx, bytes + 16));
  CU(cu->cuMemAlloc(&dy, bytes + 16));
  CU(cu->cuMemcpyHtoD(dx, x, bytes));
  CU(cu->cuMemsetD8Async(dy, 0xff, bytes, stream)); /* NaN: rows no block wrote fail */
  int64_t shape[2] = {T, D};
  DLTensor in = {(void *)dx, {kDLCUDA, m->device}, 2, dl_of(DT_BF16), shape, NULL, 0};
  DLTensor out = {(void *)dy, {kDLCUDA, m->device}, 2, dl_of(DT_BF16), shape, NULL, 0};
  CHECK(ffn_model_run(m, stream, &in, 1, &out, 1) == FFN_OK, "T=%lld: %s", (long long)T, ffn_last_error());
  if (captured) {
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    CU(cu->cuMemsetD8Async(dy, 0xff, bytes, stream));
    CU(cu->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    ffn_status s = ffn_model_run(m, stream, &in, 1, &out, 1);
    CUresult end = cu->cuStreamEndCapture(stream, &graph);
    CHECK(s == FFN_OK, "T=%lld: captured call: %s", (long long)T, ffn_last_error());
    CHECK(end == CUDA_SUCCESS, "T=%lld: cuStreamEndCapture: %d (a stream not joined?)", (long long)T, (int)end);
    if (s == FFN_OK && end == CUDA_SUCCESS) {
      CU(cu->cuGraphInstantiate(&exec, graph, 0));
      for (int k = 0; k < 2; k++)
        CU(cu->cuGraphLaunch(exec, stream));
      CU(cu->cuGraphExecDestroy(exec));
    }
    if (graph)
      CU(cu->cuGraphDestroy(graph));
  }
  CU(cu->cuStreamSynchronize(stream));
  CU(cu->cuMemcpyDtoH(y, dy, bytes));
  CU(cu->cuMemFree(dx));
  CU(cu->cuMemFree(dy));
  CU(cu->cuStreamDestroy(stream));
  CUcontext c;
  CU(cu->cuCtxPopCurrent(&c));
}

static double rel_l2(const uint16_t *a, const uint16_t *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double u = bf16_bits_to_f32(a[i]), v = bf16_bits_to_f32(b[i]);
    num += (u - v) * (u - v), den += v * v;
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* m in blocks (m->tp_blocks as set) against whole (never cut), captured or not, at T tokens:
 * the outputs agree, and the blocks ran (a workspace each). */
static void compare(const char *what, ffn_model *m, ffn_model *whole, int64_t T, bool captured) {
  size_t n = (size_t)(T * D);
  uint16_t *x = malloc(2 * n), *y = malloc(2 * n), *ref = malloc(2 * n);
  for (size_t i = 0; i < n; i++)
    x[i] = f32_to_bf16_bits((float)((int64_t)(i * 7919 % 2001) - 1000) / 1000.0f);
  run(whole, T, x, ref, false);
  run(m, T, x, y, captured);
  int64_t starts[TP_MAX_BLOCKS + 1];
  int blocks = tp_row_blocks(T, m->tp_blocks, m->reduces, starts);
  double e = rel_l2(y, ref, n);
  /* blocks of other row counts may pick other GEMM tiles: bf16 outputs a rounding apart */
  CHECK(e < 1e-2, "%s T=%lld (%d blocks%s): rel_l2 %.3g against the call whole", what, (long long)T, blocks,
        captured ? ", captured" : "", e);
  CHECK(m->pool->nws >= blocks, "%s T=%lld: %d blocks but %d workspaces", what, (long long)T, blocks, m->pool->nws);
  printf("%s T=%lld: %d block%s%s, rel_l2 %.3g against the call whole\n", what, (long long)T, blocks,
         blocks == 1 ? "" : "s", captured ? ", captured" : "", e);
  free(x), free(y), free(ref);
}

static ffn_model *model(const ffn_program *p, const ffn_program *whole, int tp_blocks) {
  ffn_model *m;
  CHECK(ffn_model_create(p, 0, &m) == FFN_OK, "%s", ffn_last_error());
  tp_bind_weights(m, whole);
  m->tp_blocks = tp_blocks;
  return m;
}

static const int64_t tokens[] = {1, 64, 1000, 4096};
enum { NTOKENS = sizeof tokens / sizeof tokens[0] };

/* TP 1: the row blocks alone (no all-reduce: nothing on a side stream). */
static void whole_program(const ffn_program *whole, int splits) {
  ffn_model *m = model(whole, whole, 3), *ref = model(whole, whole, -1);
  m->gemm_splits = splits;
  char what[64];
  snprintf(what, sizeof what, "TP 1, 3 blocks forced%s", splits ? ", split-K 3" : "");
  for (int k = 0; k < NTOKENS; k++)
    compare(what, m, ref, tokens[k], false);
  compare(what, m, ref, 1000, true);
  ffn_model_destroy(m);
  ffn_model_destroy(ref);
}

/* A share with a one-rank communicator: the all-reduces on the side stream. */
static void side_stream(const ffn_program *share, const ffn_program *whole, const NcclApi *nccl) {
  ffn_model *m = model(share, whole, 0), *ref = model(share, whole, -1);
  NcclComm comm[2];
  for (int i = 0; i < 2; i++) {
    ffn_model *mi = i ? ref : m;
    int device = 0;
    CU(mi->cu->cuCtxPushCurrent(mi->ctx));
    CHECK(nccl->CommInitAll(&comm[i], 1, &device) == NCCL_SUCCESS, "ncclCommInitAll over device 0");
    CUcontext c;
    CU(mi->cu->cuCtxPopCurrent(&c));
    mi->comm = comm[i]; /* one rank for a share of two: the test's own reach past the check */
  }
  CHECK(m->reduces && m->row_dim >= 0, "the share cannot be cut (row dim %d)", m->row_dim);
  for (int k = 0; k < NTOKENS; k++)
    compare("share, 1-rank NCCL, the policy", m, ref, tokens[k], false);
  compare("share, 1-rank NCCL, the policy", m, ref, 4096, true);
  m->tp_blocks = 5;
  for (int k = 0; k < NTOKENS; k++)
    compare("share, 1-rank NCCL, 5 blocks forced", m, ref, tokens[k], k == NTOKENS - 2);
  ffn_model_destroy(m);
  ffn_model_destroy(ref);
  for (int i = 0; i < 2; i++)
    nccl->CommDestroy(comm[i]);
}

int main(void) {
  require_gpu();
  char *path = source_path("examples/llama3_tiny.ffn");
  ffn_program *whole = compile_tp(path, 1, 0), *share = compile_tp(path, 2, 0);
  whole_program(whole, 0);
  whole_program(whole, 3);
  char why[1024];
  const NcclApi *nccl = nccl_api(why, sizeof why);
  if (nccl)
    side_stream(share, whole, nccl);
  else
    printf("no NCCL here (%s): the side stream is gpu_multi's\n", why);
  ffn_program_destroy(share);
  ffn_program_destroy(whole);
  free(path);
  return check_result("tp_overlap_gpu_test");
}
