// ewise.cuh: what generated epilogues and rowwise kernels are written with: the kernel
// argument block, element loads and stores per storage type, the activation functions and
// block reductions. Compiled by NVRTC without any system or CUDA header.
#pragma once
#include "common.cuh"

namespace ffn {

// Every generated kernel takes one of these by value (__grid_constant__). The runtime fills
// it with the same layout (runtime/rt.h: KArgs). p[] holds tensor pointers in the order the
// plan's launch step lists them.
struct KArgs {
  void *p[30];
  long long m;        // rows: the product of the leading dims
  int splits;         // GEMM split-K factor
  int pad_;
  float *ws;          // GEMM split-K partials
  unsigned *counters; // GEMM split-K tile counters (zero between launches)
};

// ---- loads (to f32) and stores (round to nearest even) ----

__device__ __forceinline__ float ld_f32(const void *p, long long i) { return ((const float *)p)[i]; }
__device__ __forceinline__ float ld_bf16(const void *p, long long i) {
  return __uint_as_float((unsigned)((const unsigned short *)p)[i] << 16);
}
__device__ __forceinline__ float ld_f16(const void *p, long long i) {
  float f;
  unsigned short h = ((const unsigned short *)p)[i];
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

__device__ __forceinline__ unsigned short f32_to_bf16_rn(float x) {
  unsigned short r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ unsigned short f32_to_f16_rn(float x) {
  unsigned short r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ void st_f32(void *p, long long i, float v) { ((float *)p)[i] = v; }
__device__ __forceinline__ void st_bf16(void *p, long long i, float v) { ((unsigned short *)p)[i] = f32_to_bf16_rn(v); }
__device__ __forceinline__ void st_f16(void *p, long long i, float v) { ((unsigned short *)p)[i] = f32_to_f16_rn(v); }

// Two adjacent elements; i even and the tensor 4-byte aligned (8 for f32).
__device__ __forceinline__ void st2_f32(void *p, long long i, float a, float b) {
  *(float2 *)((float *)p + i) = make_float2(a, b);
}
__device__ __forceinline__ void st2_bf16(void *p, long long i, float a, float b) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
  *(unsigned *)((unsigned short *)p + i) = r;
}
__device__ __forceinline__ void st2_f16(void *p, long long i, float a, float b) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
  *(unsigned *)((unsigned short *)p + i) = r;
}

// An explicit cast inside a kernel: round to the type and back.
__device__ __forceinline__ float round_bf16(float x) { return __uint_as_float((unsigned)f32_to_bf16_rn(x) << 16); }
__device__ __forceinline__ float round_f16(float x) {
  float f;
  unsigned short h = f32_to_f16_rn(x);
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

// ---- activations (accurate library functions: f32 models are checked at 1e-5) ----

__device__ __forceinline__ float ew_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float ew_silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float ew_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
__device__ __forceinline__ float ew_gelu_tanh(float x) {
  return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float ew_relu(float x) { return fmaxf(x, 0.0f); }

// ---- reductions over a block (every thread gets the totals) ----

// red: __shared__ float[64]. Ends with a barrier, so red can be reused at once.
__device__ __forceinline__ float block_sum(float v, float *red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  if (lane == 0)
    red[warp] = v;
  __syncthreads();
  float t = lane < nwarps ? red[lane] : 0.0f;
  t = warp_sum(t);
  __syncthreads();
  return t;
}

} // namespace ffn
