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
  typedef typename Epi::Src Src;
  __device__ __forceinline__ Row prep(int row, float, float) const {
    return epi.prep(row, ldc_f32(stats, 2 * row), ldc_f32(stats, 2 * row + 1));
  }
  __device__ __forceinline__ Src load(int row, int col, int ncols) const { return epi.load(row, col, ncols); }
  __device__ __forceinline__ void apply(const Row &r, const Src &s, int row, int col, int ncols,
                                        const float (&v)[S][2]) const {
    epi.apply(r, s, row, col, ncols, v);
  }
  __device__ __forceinline__ void apply(const Row &r, int row, int col, int ncols, const float (&v)[S][2]) const {
    epi.apply(r, row, col, ncols, v);
  }
  __device__ __forceinline__ void operator()(int row, int col, int ncols, const float (&v)[S][2], float, float) const {
    apply(prep(row, 0.f, 0.f), row, col, ncols, v);
  }
  static constexpr int QUADS = Epi::QUADS; /* templates: Epi has no compute, store4 without 16-bit outputs */
  static constexpr long long NCOLS = Epi::NCOLS;
  static constexpr bool PURE = Epi::PURE;
  template <int Q>
  __device__ __forceinline__ void compute(const Row &r, const Src &s, int row, int col, const float (&v)[S][2],
                                          u32 (&w)[Q]) const {
    epi.compute(r, s, row, col, v, w);
  }
  template <int Q> __device__ __forceinline__ void store4(int row, int col, const u32 (&w)[Q][2]) const {
    epi.store4(row, col, w);
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

// A GEMM epilogue's activation operands, read by Epi::load for the output pair at base (ncols 1 or
// 2), as raw words (the registers they hold are live across a column group: sm90_epilogue issues
// a group's loads before its stores). Volatile, so that they stay where they
// are issued: ptxas cannot move a load above a store it cannot prove apart, so a load issued
// after the stores waits behind them, one DRAM latency per column pair. ldp2_: the pair in one
// load (base even, the tensor aligned: an even row length); ldp1_: element by element. wp_ gives
// element e of the pair.
__device__ __forceinline__ void ldp1_f32(const void *p, long long base, int ncols, u32 (&w)[2]) {
  w[1] = 0u;
  asm volatile("ld.global.b32 %0, [%1];" : "=r"(w[0]) : "l"((const float *)p + base));
  if (ncols == 2) asm volatile("ld.global.b32 %0, [%1];" : "=r"(w[1]) : "l"((const float *)p + base + 1));
}
__device__ __forceinline__ void ldp2_f32(const void *p, long long base, int ncols, u32 (&w)[2]) {
  if (ncols == 2)
    asm volatile("ld.global.v2.b32 {%0, %1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"((const float *)p + base));
  else
    ldp1_f32(p, base, ncols, w);
}
__device__ __forceinline__ float wp_f32(const u32 (&w)[2], int e) { return __uint_as_float(w[e]); }
__device__ __forceinline__ void ldp1_u16(const void *p, long long base, int ncols, u32 (&w)[1]) {
  unsigned short h0, h1 = 0;
  asm volatile("ld.global.u16 %0, [%1];" : "=h"(h0) : "l"((const u16 *)p + base));
  if (ncols == 2) asm volatile("ld.global.u16 %0, [%1];" : "=h"(h1) : "l"((const u16 *)p + base + 1));
  w[0] = (u32)h0 | (u32)h1 << 16;
}
__device__ __forceinline__ void ldp2_u16(const void *p, long long base, int ncols, u32 (&w)[1]) {
  if (ncols == 2)
    asm volatile("ld.global.b32 %0, [%1];" : "=r"(w[0]) : "l"((const u16 *)p + base));
  else
    ldp1_u16(p, base, ncols, w);
}
__device__ __forceinline__ void ldp1_bf16(const void *p, long long b, int n, u32 (&w)[1]) { ldp1_u16(p, b, n, w); }
__device__ __forceinline__ void ldp2_bf16(const void *p, long long b, int n, u32 (&w)[1]) { ldp2_u16(p, b, n, w); }
__device__ __forceinline__ void ldp1_f16(const void *p, long long b, int n, u32 (&w)[1]) { ldp1_u16(p, b, n, w); }
__device__ __forceinline__ void ldp2_f16(const void *p, long long b, int n, u32 (&w)[1]) { ldp2_u16(p, b, n, w); }
__device__ __forceinline__ float wp_bf16(const u32 (&w)[1], int e) { return bf16_bits_to_f32((u16)(w[0] >> (16 * e))); }
__device__ __forceinline__ float wp_f16(const u32 (&w)[1], int e) { return f16_bits_to_f32((u16)(w[0] >> (16 * e))); }

__device__ __forceinline__ void st_f32(void *p, long long i, float v) { ((float *)p)[i] = v; }
__device__ __forceinline__ void st_bf16(void *p, long long i, float v) { ((u16 *)p)[i] = f32_to_bf16_bits(v); }
__device__ __forceinline__ void st_f16(void *p, long long i, float v) { ((u16 *)p)[i] = f32_to_f16_bits(v); }

// Two adjacent elements; i even and the tensor 4-byte aligned (8 for f32).
__device__ __forceinline__ void st2_f32(void *p, long long i, float a, float b) {
  *(float2 *)((float *)p + i) = make_float2(a, b);
}
__device__ __forceinline__ void st2_bf16(void *p, long long i, float a, float b) { *(u32 *)((u16 *)p + i) = pack_bf16x2(a, b); }
__device__ __forceinline__ void st2_f16(void *p, long long i, float a, float b) { *(u32 *)((u16 *)p + i) = pack_f16x2(a, b); }
// Four adjacent 16-bit elements as two packed words (pack_bf16x2, pack_f16x2); i a multiple of 4
// and the tensor 8-byte aligned.
__device__ __forceinline__ void st4_u16(void *p, long long i, u32 lo, u32 hi) { *(uint2 *)((u16 *)p + i) = make_uint2(lo, hi); }

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

// ---- rows in registers (the rowwise kernels' row loops, emit_cuda.c) ----
//
// A row of N elements is cut into chunks of VEC consecutive elements (VEC * size <= 32 bytes);
// the TPR threads of a row take chunks lane, lane + TPR, ... (THREADS / TPR rows per block), and
// hold each operand's chunks as raw 32-bit words: 16-bit elements two to a word (one, with
// VEC == 1), f32 one.

// BYTES (2, 4, 8, 16 or 32) at byte offset off of p into w[0..BYTES/4) (a 16-bit element alone
// in the low half of w[0]). Activations through a non-volatile asm without a memory clobber, as
// ld_u16 (so what it assumes holds here too); constants (NC) through the read-only path, as ldc_.
template <int BYTES, bool NC> __device__ __forceinline__ void ld_words(const void *p, long long off, u32 *w) {
  const char *q = (const char *)p + off;
  if constexpr (BYTES == 32) {
    ld_words<16, NC>(p, off, w);
    ld_words<16, NC>(p, off + 16, w + 4);
  } else if constexpr (BYTES == 16) {
    if constexpr (NC)
      asm("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(q));
    else
      asm("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(q));
  } else if constexpr (BYTES == 8) {
    if constexpr (NC)
      asm("ld.global.nc.v2.u32 {%0,%1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(q));
    else
      asm("ld.global.v2.u32 {%0,%1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(q));
  } else if constexpr (BYTES == 4) {
    if constexpr (NC)
      asm("ld.global.nc.u32 %0, [%1];" : "=r"(w[0]) : "l"(q));
    else
      asm("ld.global.u32 %0, [%1];" : "=r"(w[0]) : "l"(q));
  } else {
    unsigned short h;
    if constexpr (NC)
      asm("ld.global.nc.u16 %0, [%1];" : "=h"(h) : "l"(q));
    else
      asm("ld.global.u16 %0, [%1];" : "=h"(h) : "l"(q));
    w[0] = h;
  }
}

// Element k of a thread's words as f32; P: 16-bit elements per word (2, or 1 for VEC == 1).
// (Through opaque: each pass unpacks the words again rather than keep them unpacked.)
template <int P> __device__ __forceinline__ float wd_bf16(const u32 *w, int k) {
  const u32 x = opaque(w[P == 2 ? k >> 1 : k]);
  return __uint_as_float(P == 2 && k & 1 ? x & 0xffff0000u : x << 16);
}
template <int P> __device__ __forceinline__ float wd_f16(const u32 *w, int k) {
  const u32 x = opaque(w[P == 2 ? k >> 1 : k]);
  return f16_bits_to_f32((u16)(P == 2 && k & 1 ? x >> 16 : x & 0xffffu));
}
template <int P> __device__ __forceinline__ float wd_f32(const u32 *w, int k) { return __uint_as_float(w[k]); }

// V consecutive elements from element i (i a multiple of V; the tensor 16-byte aligned).
template <int V> __device__ __forceinline__ void stv_f32(void *p, long long i, const float (&v)[V]) {
  float *q = (float *)p + i;
  if constexpr (V == 8) {
    ((float4 *)q)[0] = make_float4(v[0], v[1], v[2], v[3]);
    ((float4 *)q)[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else if constexpr (V == 4) {
    *(float4 *)q = make_float4(v[0], v[1], v[2], v[3]);
  } else if constexpr (V == 2) {
    *(float2 *)q = make_float2(v[0], v[1]);
  } else {
    *q = v[0];
  }
}
template <int V, bool BF16> __device__ __forceinline__ void stv_16(void *p, long long i, const float (&v)[V]) {
  u16 *q = (u16 *)p + i;
  if constexpr (V == 1) {
    *q = BF16 ? f32_to_bf16_bits(v[0]) : f32_to_f16_bits(v[0]);
  } else {
    u32 w[V / 2];
#pragma unroll
    for (int j = 0; j < V / 2; ++j) w[j] = BF16 ? pack_bf16x2(v[2 * j], v[2 * j + 1]) : pack_f16x2(v[2 * j], v[2 * j + 1]);
    if constexpr (V == 8)
      *(uint4 *)q = make_uint4(w[0], w[1], w[2], w[3]);
    else if constexpr (V == 4)
      *(uint2 *)q = make_uint2(w[0], w[1]);
    else
      *(u32 *)q = w[0];
  }
}
template <int V> __device__ __forceinline__ void stv_bf16(void *p, long long i, const float (&v)[V]) { stv_16<V, true>(p, i, v); }
template <int V> __device__ __forceinline__ void stv_f16(void *p, long long i, const float (&v)[V]) { stv_16<V, false>(p, i, v); }

// ---- reductions over the TPR threads of a row (every one of them gets the total) ----
//
// A warp or less: shuffles. More: each warp's total through red (THREADS / 32 floats), between
// the barriers of the row's threads alone (named barrier 1 + the row's index in the block; the
// whole block's when the row is the block), so the rows of a block do not wait for each other.
// The warps' totals are added in order, the same in every thread. red is reusable after it.

// Named barrier G (1 + the row's index g < G) of TPR threads. The id is an immediate: from a
// register, ptxas (CUDA 13, sm_90a) reserves all 16 barriers and spills around them.
template <int TPR, int G> __device__ __forceinline__ void row_barrier_of(int g) {
  if constexpr (G > 0) {
    if (g == G - 1)
      asm volatile("bar.sync %0, %1;" ::"n"(G), "n"(TPR) : "memory");
    else
      row_barrier_of<TPR, G - 1>(g);
  }
}
template <int TPR, int THREADS> __device__ __forceinline__ void row_barrier() {
  if constexpr (TPR == THREADS)
    __syncthreads();
  else
    row_barrier_of<TPR, THREADS / TPR>((int)threadIdx.x / TPR);
}

template <int TPR, int THREADS, bool MAX> __device__ __forceinline__ float row_reduce(float v, float *red) {
  static_assert(TPR % 32 == 0 && THREADS % TPR == 0 && THREADS / TPR <= 15, "rows of whole warps, 15 named barriers");
  v = MAX ? warp_max(v) : warp_sum(v);
  if constexpr (TPR == 32) {
    return v;
  } else {
    constexpr int W = TPR / 32;
    const int warp = threadIdx.x >> 5, first = warp & ~(W - 1);
    if ((threadIdx.x & 31) == 0) red[warp] = v;
    row_barrier<TPR, THREADS>();
    float t = red[first];
#pragma unroll
    for (int j = 1; j < W; ++j) t = MAX ? fmaxf(t, red[first + j]) : t + red[first + j];
    row_barrier<TPR, THREADS>();
    return t;
  }
}
template <int TPR, int THREADS> __device__ __forceinline__ float row_sum(float v, float *red) {
  return row_reduce<TPR, THREADS, false>(v, red);
}
// NaN skipped, as fmaxf does (the reference's fmax).
template <int TPR, int THREADS> __device__ __forceinline__ float row_max(float v, float *red) {
  return row_reduce<TPR, THREADS, true>(v, red);
}

} // namespace ffn
