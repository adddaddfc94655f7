// ewise.cuh: what generated epilogues and rowwise kernels are written with: the kernel
// argument block, element loads and stores per storage type, explicit casts and block
// reductions (conversions and activations come from common.cuh). Compiled by NVRTC without
// any system or CUDA header.
#pragma once
#include "abi.cuh"
#include "common.cuh"

namespace ffn {

// KArgs, the argument block of every generated kernel, is in abi.cuh.

// Loads of constants (weights and what ffn_model_prepare derives from them), which no kernel
// writes: a non-volatile asm without a memory clobber, so the compiler may hoist them above stores
// and merge repeated ones (a GEMM epilogue reads each column's bias once for all its rows instead
// of after every store).
__device__ __forceinline__ float ldc_f32(const void *p, long long i) {
  float v;
  asm("ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"((const float *)p + i));
  return v;
}
__device__ __forceinline__ u16 ldc_u16(const void *p, long long i) {
  unsigned short v;
  asm("ld.global.nc.u16 %0, [%1];" : "=h"(v) : "l"((const u16 *)p + i));
  return v;
}
__device__ __forceinline__ float ldc_bf16(const void *p, long long i) { return bf16_bits_to_f32(ldc_u16(p, i)); }
__device__ __forceinline__ float ldc_f16(const void *p, long long i) { return f16_bits_to_f32(ldc_u16(p, i)); }

// An epilogue whose row statistics come from memory (ffn_row_stats, runtime.cuh) rather than from
// the GEMM, which then runs with STATS = 0: for large M, where every column of tiles would
// recompute them. They were written by an earlier launch, so the read-only loads (ldc_) apply.
template <class Epi, int S> struct WithRowStats {
  const Epi &epi;
  const float *stats;
  typedef typename Epi::Row Row;
  __device__ __forceinline__ Row prep(int row, float, float) const {
    return epi.prep(row, ldc_f32(stats, 2 * row), ldc_f32(stats, 2 * row + 1));
  }
  __device__ __forceinline__ void apply(const Row &r, int row, int col, int ncols, const float (&v)[S][2]) const {
    epi.apply(r, row, col, ncols, v);
  }
  __device__ __forceinline__ void operator()(int row, int col, int ncols, const float (&v)[S][2], float, float) const {
    apply(prep(row, 0.f, 0.f), row, col, ncols, v);
  }
};

// ---- loads (to f32) and stores (round to nearest even) ----

// Activations: coherent loads, but also through a non-volatile asm without a memory clobber, so that
// the compiler may move them above the stores of other elements: an unrolled column loop of a
// rowwise kernel then has all its loads in flight at once instead of one per store (it cannot know
// that the output does not alias the input). What this assumes of the generated code: a kernel
// reads an element of an activation only before any thread of the kernel writes it (outputs that
// share a buffer with an input are written element for element, after the reads, by the thread
// that read them), so a load moved, or merged with an earlier one of the same address, sees the
// same value.
__device__ __forceinline__ float ld_f32(const void *p, long long i) {
  float v;
  asm("ld.global.f32 %0, [%1];" : "=f"(v) : "l"((const float *)p + i));
  return v;
}
__device__ __forceinline__ u16 ld_u16(const void *p, long long i) {
  unsigned short v;
  asm("ld.global.u16 %0, [%1];" : "=h"(v) : "l"((const u16 *)p + i));
  return v;
}
__device__ __forceinline__ float ld_bf16(const void *p, long long i) { return bf16_bits_to_f32(ld_u16(p, i)); }
__device__ __forceinline__ float ld_f16(const void *p, long long i) { return f16_bits_to_f32(ld_u16(p, i)); }

__device__ __forceinline__ void st_f32(void *p, long long i, float v) { ((float *)p)[i] = v; }
__device__ __forceinline__ void st_bf16(void *p, long long i, float v) { ((u16 *)p)[i] = f32_to_bf16_bits(v); }
__device__ __forceinline__ void st_f16(void *p, long long i, float v) { ((u16 *)p)[i] = f32_to_f16_bits(v); }

// Two adjacent elements; i even and the tensor 4-byte aligned (8 for f32).
__device__ __forceinline__ void st2_f32(void *p, long long i, float a, float b) {
  *(float2 *)((float *)p + i) = make_float2(a, b);
}
__device__ __forceinline__ void st2_bf16(void *p, long long i, float a, float b) { *(u32 *)((u16 *)p + i) = pack_bf16x2(a, b); }
__device__ __forceinline__ void st2_f16(void *p, long long i, float a, float b) { *(u32 *)((u16 *)p + i) = pack_f16x2(a, b); }

// An explicit cast inside a kernel: round to the type and back (also a value as a stored tensor of
// the type would give it to a later load, for kernels that use it without storing it).
__device__ __forceinline__ float round_f32(float x) { return x; }
__device__ __forceinline__ float round_bf16(float x) { return bf16_bits_to_f32(f32_to_bf16_bits(x)); }
__device__ __forceinline__ float round_f16(float x) { return f16_bits_to_f32(f32_to_f16_bits(x)); }

// ---- reductions over a block (every thread gets the total) ----

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

// Block-wide maximum of v (as block_sum; red reusable after it). NaN is skipped, as fmaxf does.
__device__ __forceinline__ float block_max(float v, float *red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  if (lane == 0)
    red[warp] = v;
  __syncthreads();
  float t = lane < nwarps ? red[lane] : 0.0f;
  t = warp_max(t);
  __syncthreads();
  return t;
}

} // namespace ffn
