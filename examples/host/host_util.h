/* host_util.h: what both host examples do once they have a program: load it on device 0,
 * bind the weights, run once on a stream of their own, print a checksum of each output. */
#ifndef HOST_UTIL_H
#define HOST_UTIL_H

#include <cuda_runtime.h>
#include <ffn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_OK(call)                                                                  \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess) {                                                           \
      fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_));               \
      return 3;                                                                        \
    }                                                                                  \
  } while (0)

static size_t elem_bytes(DLDataType t) { return (size_t)(t.bits * t.lanes + 7) / 8; }

/* f32 -> f16 bits, round to nearest even (finite values of magnitude below 65504). */
static uint16_t f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000, mant = x & 0x7fffff;
  int exp = (int)((x >> 23) & 0xff) - 127 + 15;
  if (exp <= 0) { /* subnormal or zero */
    if (exp < -10)
      return (uint16_t)sign;
    mant |= 0x800000;
    int shift = 14 - exp;
    uint32_t r = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1)))
      r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = ((uint32_t)exp << 10) | (mant >> 13), rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1)))
    r++;
  return (uint16_t)(sign | r);
}

static float f16_to_f32(uint16_t h) {
  int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v = exp == 0 ? ldexpf((float)mant, -24) : exp == 31 ? (mant ? NAN : INFINITY) : ldexpf((float)(mant | 0x400), exp - 25);
  return (h & 0x8000) ? -v : v;
}

/* A value in [-1, 1) as the element type's bits (bf16, f16 or f32), from a counter. */
static void fill_pattern(void *buf, DLDataType t, size_t n) {
  uint32_t s = 12345;
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    float v = (float)(s >> 8) / 8388608.0f - 1.0f;
    uint32_t bits;
    memcpy(&bits, &v, 4);
    if (t.code == kDLFloat && t.bits == 32)
      ((float *)buf)[i] = v;
    else if (t.code == kDLBfloat)
      ((uint16_t *)buf)[i] = (uint16_t)((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
    else
      ((uint16_t *)buf)[i] = f32_to_f16(v);
  }
}

static double to_double(const void *buf, DLDataType t, size_t i) {
  if (t.code == kDLFloat && t.bits == 32)
    return ((const float *)buf)[i];
  if (t.code == kDLBfloat) {
    uint32_t bits = (uint32_t)((const uint16_t *)buf)[i] << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
  }
  return f16_to_f32(((const uint16_t *)buf)[i]);
}

static int run_model(ffn_program *prog, const char *weights, long long tokens) {
  ffn_model *m;
  if (ffn_model_create(prog, 0, &m) != FFN_OK || ffn_model_bind_weights_file(m, weights) != FFN_OK ||
      ffn_model_prepare(m) != FFN_OK) {
    fprintf(stderr, "%s\n", ffn_last_error());
    return 3;
  }
  int nin = ffn_program_num_inputs(prog), nout = ffn_program_num_outputs(prog);
  DLTensor in[16], out[16];
  int64_t in_shape[16][8], out_shape[16][8];
  for (int i = 0; i < nin; i++) {
    ffn_tensor_info info;
    ffn_program_input_info(prog, i, &info);
    size_t n = 1;
    for (int d = 0; d < info.ndim; d++) {
      in_shape[i][d] = info.shape[d] < 0 ? tokens : info.shape[d]; /* every dynamic dim = TOKENS */
      n *= (size_t)in_shape[i][d];
    }
    void *host = malloc(n * elem_bytes(info.dtype) + 1), *dev;
    fill_pattern(host, info.dtype, n);
    CUDA_OK(cudaMalloc(&dev, n * elem_bytes(info.dtype) + 1));
    CUDA_OK(cudaMemcpy(dev, host, n * elem_bytes(info.dtype), cudaMemcpyHostToDevice));
    free(host);
    in[i] = (DLTensor){dev, {kDLCUDA, 0}, info.ndim, info.dtype, in_shape[i], NULL, 0};
  }
  for (int i = 0; i < nout; i++) {
    ffn_tensor_info info;
    ffn_program_output_info(prog, i, &info);
    int nd;
    ffn_model_output_shape(m, i, in, nin, out_shape[i], &nd);
    size_t n = 1;
    for (int d = 0; d < nd; d++)
      n *= (size_t)out_shape[i][d];
    void *dev;
    CUDA_OK(cudaMalloc(&dev, n * elem_bytes(info.dtype) + 1));
    out[i] = (DLTensor){dev, {kDLCUDA, 0}, nd, info.dtype, out_shape[i], NULL, 0};
  }
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  if (ffn_model_run(m, stream, in, nin, out, nout) != FFN_OK) {
    fprintf(stderr, "%s\n", ffn_last_error());
    return 3;
  }
  CUDA_OK(cudaStreamSynchronize(stream));
  int rc = 0;
  for (int i = 0; i < nout; i++) {
    ffn_tensor_info info;
    ffn_program_output_info(prog, i, &info);
    size_t n = 1;
    for (int d = 0; d < out[i].ndim; d++)
      n *= (size_t)out_shape[i][d];
    void *host = malloc(n * elem_bytes(info.dtype) + 1);
    CUDA_OK(cudaMemcpy(host, out[i].data, n * elem_bytes(info.dtype), cudaMemcpyDeviceToHost));
    double sum = 0, sumabs = 0;
    for (size_t j = 0; j < n; j++) {
      double v = to_double(host, info.dtype, j);
      sum += v;
      sumabs += v < 0 ? -v : v;
    }
    if (sumabs != sumabs)
      rc = 1; /* NaN */
    printf("output %s: %zu elements, sum %.9e, sum|x| %.9e\n", info.name, n, sum, sumabs);
    free(host);
    cudaFree(out[i].data);
  }
  for (int i = 0; i < nin; i++)
    cudaFree(in[i].data);
  cudaStreamDestroy(stream);
  ffn_model_destroy(m);
  return rc;
}

#endif
