/* cublaslt.h: the cuBLASLt calls the bench makes (loaded with dlopen, like the driver). */
#ifndef FFNC_CUBLASLT_H
#define FFNC_CUBLASLT_H

#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>

#include "ir/ir.h"

typedef struct Lt Lt;

typedef enum { LT_EPI_NONE, LT_EPI_BIAS, LT_EPI_GELU_BIAS, LT_EPI_RELU_BIAS } LtEpilogue;

/* Loads libcublasLt and creates a handle with a workspace on the current context. NULL
 * with the reason in why. */
Lt *lt_create(char *why, size_t len);
void lt_destroy(Lt *lt);
const char *lt_version(const Lt *lt);

/* Row-major D[M, N] = epilogue(A[M, K] . B[N, K]^T + beta * C[M, N]) in type t (bf16, f16
 * or f32; f32 accumulation), with an optional bias[N] (type t). c may be 0 (beta 0).
 * Returns 0, or -1 with the failing call in err. */
int lt_matmul(Lt *lt, CUstream stream, DType t, int M, int N, int K, CUdeviceptr a, CUdeviceptr b, CUdeviceptr d,
              CUdeviceptr c, LtEpilogue epi, CUdeviceptr bias, char *err, size_t errlen);
/* fp8 e4m3 inputs, bf16 output (the fp8 ceiling). */
int lt_matmul_fp8(Lt *lt, CUstream stream, int M, int N, int K, CUdeviceptr a, CUdeviceptr b, CUdeviceptr d, char *err,
                  size_t errlen);

#endif
