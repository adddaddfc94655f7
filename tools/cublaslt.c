/* cublaslt.c: cuBLASLt for the bench: the matrix-product ceiling and the baselines.
 *
 * Our tensors are row-major with weights stored [N, K]; cuBLASLt is column-major. A
 * row-major D[M, N] is a column-major [N, M], and D^T = B . A^T, so every call is the "TN"
 * product with cuBLASLt's A = our B (transposed) and cuBLASLt's B = our A: m = N, n = M.
 * That is also the layout cuBLASLt's fp8 kernels require.
 */
#include "cublaslt.h"

#include <cublasLt.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "runtime/rt.h"

#define LT_FUNCS(X)                                                                                      \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetVersion) X(cublasLtMatmulDescCreate)                \
  X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate)          \
  X(cublasLtMatrixLayoutDestroy) X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)   \
  X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)           \
  X(cublasLtGetStatusString)

#define WORKSPACE (64u << 20)
#define CACHE 64

typedef struct {
  DType t;
  int M, N, K, epi, fp8, beta;
  cublasLtMatmulAlgo_t algo;
} Algo;

struct Lt {
#define X(f) __typeof__(&f) f;
  LT_FUNCS(X)
#undef X
  cublasLtHandle_t h;
  CUdeviceptr ws;
  char version[32];
  Algo cache[CACHE];
  int ncache;
};

Lt *lt_create(char *why, size_t len) {
  const CuApi *cu = cu_api(why, len);
  if (!cu)
    return NULL;
  void *lib = dlopen("libcublasLt.so.13", RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    lib = dlopen("libcublasLt.so", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(why, len, "cannot load libcublasLt.so.13 (%s)", dlerror());
    return NULL;
  }
  Lt *lt = calloc(1, sizeof *lt);
#define X(f)                                                                   \
  if (!(*(void **)&lt->f = dlsym(lib, #f))) {                                  \
    snprintf(why, len, "libcublasLt has no %s", #f);                           \
    free(lt);                                                                  \
    return NULL;                                                               \
  }
  LT_FUNCS(X)
#undef X
  if (lt->cublasLtCreate(&lt->h) != CUBLAS_STATUS_SUCCESS || cu->cuMemAlloc(&lt->ws, WORKSPACE) != CUDA_SUCCESS) {
    snprintf(why, len, "cublasLtCreate or its workspace allocation failed");
    free(lt);
    return NULL;
  }
  size_t v = lt->cublasLtGetVersion();
  snprintf(lt->version, sizeof lt->version, "%zu.%zu.%zu", v / 10000, v / 100 % 100, v % 100);
  return lt;
}

void lt_destroy(Lt *lt) {
  if (!lt)
    return;
  const CuApi *cu = cu_api(NULL, 0);
  cu->cuMemFree(lt->ws);
  lt->cublasLtDestroy(lt->h);
  free(lt);
}

const char *lt_version(const Lt *lt) { return lt->version; }

static cudaDataType_t cuda_type(DType t) {
  return t == DT_BF16 ? CUDA_R_16BF : t == DT_F16 ? CUDA_R_16F : CUDA_R_32F;
}

#define LT_CHECK(call)                                                                                \
  do {                                                                                                \
    cublasStatus_t s_ = (call);                                                                       \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                \
      snprintf(err, errlen, "%s failed: %s", #call, lt->cublasLtGetStatusString(s_));                 \
      goto out;                                                                                       \
    }                                                                                                 \
  } while (0)

static int matmul(Lt *lt, CUstream stream, DType t, bool fp8, int M, int N, int K, CUdeviceptr a, CUdeviceptr b,
                  CUdeviceptr d, CUdeviceptr c, LtEpilogue epi, CUdeviceptr bias, char *err, size_t errlen) {
  int rc = -1;
  cublasLtMatmulDesc_t op = NULL;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL, ld = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  cudaDataType_t in = fp8 ? CUDA_R_8F_E4M3 : cuda_type(t), outt = fp8 ? CUDA_R_16BF : cuda_type(t);
  cublasOperation_t tr = CUBLAS_OP_T, nt = CUBLAS_OP_N;
  float alpha = 1, beta = c ? 1 : 0;
  LT_CHECK(lt->cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  LT_CHECK(lt->cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &tr, sizeof tr));
  LT_CHECK(lt->cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof nt));
  if (epi != LT_EPI_NONE) {
    cublasLtEpilogue_t e = epi == LT_EPI_BIAS ? CUBLASLT_EPILOGUE_BIAS
                           : epi == LT_EPI_GELU_BIAS ? CUBLASLT_EPILOGUE_GELU_BIAS
                                                     : CUBLASLT_EPILOGUE_RELU_BIAS;
    void *bp = (void *)bias;
    LT_CHECK(lt->cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
    LT_CHECK(lt->cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp));
    cudaDataType_t bt = cuda_type(t);
    LT_CHECK(lt->cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
  }
  LT_CHECK(lt->cublasLtMatrixLayoutCreate(&la, in, K, N, K)); /* our B [N, K] row-major */
  LT_CHECK(lt->cublasLtMatrixLayoutCreate(&lb, in, K, M, K)); /* our A [M, K] row-major */
  LT_CHECK(lt->cublasLtMatrixLayoutCreate(&lc, outt, N, M, N));
  LT_CHECK(lt->cublasLtMatrixLayoutCreate(&ld, outt, N, M, N));
  Algo *hit = NULL;
  for (int i = 0; i < lt->ncache; i++) {
    Algo *x = &lt->cache[i];
    if (x->t == t && x->M == M && x->N == N && x->K == K && x->epi == (int)epi && x->fp8 == fp8 && x->beta == (c != 0))
      hit = x;
  }
  if (!hit) {
    uint64_t wsz = WORKSPACE;
    LT_CHECK(lt->cublasLtMatmulPreferenceCreate(&pref));
    LT_CHECK(lt->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, sizeof wsz));
    cublasLtMatmulHeuristicResult_t res;
    int n = 0;
    LT_CHECK(lt->cublasLtMatmulAlgoGetHeuristic(lt->h, op, la, lb, lc, ld, pref, 1, &res, &n));
    if (n < 1) {
      snprintf(err, errlen, "cuBLASLt has no algorithm for %dx%dx%d", M, N, K);
      goto out;
    }
    hit = &lt->cache[lt->ncache < CACHE ? lt->ncache++ : CACHE - 1];
    *hit = (Algo){t, M, N, K, (int)epi, fp8, c != 0, res.algo};
  }
  LT_CHECK(lt->cublasLtMatmul(lt->h, op, &alpha, (void *)b, la, (void *)a, lb, &beta, (void *)(c ? c : d), lc,
                              (void *)d, ld, &hit->algo, (void *)lt->ws, WORKSPACE, (cudaStream_t)stream));
  rc = 0;
out:
  if (pref)
    lt->cublasLtMatmulPreferenceDestroy(pref);
  if (la)
    lt->cublasLtMatrixLayoutDestroy(la);
  if (lb)
    lt->cublasLtMatrixLayoutDestroy(lb);
  if (lc)
    lt->cublasLtMatrixLayoutDestroy(lc);
  if (ld)
    lt->cublasLtMatrixLayoutDestroy(ld);
  if (op)
    lt->cublasLtMatmulDescDestroy(op);
  return rc;
}

int lt_matmul(Lt *lt, CUstream stream, DType t, int M, int N, int K, CUdeviceptr a, CUdeviceptr b, CUdeviceptr d,
              CUdeviceptr c, LtEpilogue epi, CUdeviceptr bias, char *err, size_t errlen) {
  return matmul(lt, stream, t, false, M, N, K, a, b, d, c, epi, bias, err, errlen);
}

int lt_matmul_fp8(Lt *lt, CUstream stream, int M, int N, int K, CUdeviceptr a, CUdeviceptr b, CUdeviceptr d, char *err,
                  size_t errlen) {
  return matmul(lt, stream, DT_BF16, true, M, N, K, a, b, d, 0, LT_EPI_NONE, 0, err, errlen);
}
