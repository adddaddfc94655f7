// grad.cuh: the kernels of the ops that only backward graphs have (passes/grad.c): the sums over
// tokens that weight and bias gradients are, and the moves between them. Each is one op alone in a
// kernel (codegen/lower.c: lower_single), called from a generated entry point with its shapes as
// constants and KArgs.m the rows (tokens) of the call:
//
//   sum_rows    sum_to over leading dims   x [rows, C] -> out [C]          (bias, gain gradients)
//   sum_cols    sum_to over the last dim   x [rows, C] -> out [rows, 1]
//   matmul_at   a^T b                       a [rows, K], b [rows, N] -> out [K, N]  (weight gradients)
//   transpose   2-D                         x [R, C] -> out [C, R]
//
// Deterministic: no atomics; every output element is summed by one thread (or one block, in a
// fixed order) whatever the grid, so a run gives the same bits every time. Sums are f32. The
// runtime launches these like rowwise kernels (one block per row, up to 16 per SM), so each loops
// over its work with the grid's stride; correctness first, tensor cores for matmul_at later.
#pragma once
#include "ewise.cuh"

namespace ffn {

// out[c] = sum over r of x[r, c]. A block takes 32 columns at a time; warp w sums rows w, w + WARPS,
// ... (coalesced: a warp reads 32 consecutive elements of a row), then warp 0 adds the warps'
// partial sums in warp order.
template <class T, class TO, int THREADS>
__device__ __forceinline__ void sum_rows(const T *__restrict__ x, TO *__restrict__ out, long long rows, long long C) {
  constexpr int WARPS = THREADS / 32;
  __shared__ float part[WARPS][33];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (long long c0 = (long long)blockIdx.x * 32; c0 < C; c0 += (long long)gridDim.x * 32) {
    const long long c = c0 + lane;
    float s = 0.f;
    if (c < C)
      for (long long r = warp; r < rows; r += WARPS)
        s += to_f32(x[r * C + c]);
    part[warp][lane] = s;
    __syncthreads();
    if (warp == 0) {
      float t = 0.f;
#pragma unroll
      for (int w = 0; w < WARPS; ++w)
        t += part[w][lane];
      if (c < C)
        out[c] = from_f32<TO>(t);
    }
    __syncthreads();
  }
}

// out[r] = sum over c of x[r, c]: a block per row, like the rowwise kernels' statistics.
template <class T, class TO>
__device__ __forceinline__ void sum_cols(const T *__restrict__ x, TO *__restrict__ out, long long rows, long long C) {
  __shared__ float red[64];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    float s = 0.f;
    for (long long c = threadIdx.x; c < C; c += blockDim.x)
      s += to_f32(x[r * C + c]);
    s = block_sum(s, red);
    if (threadIdx.x == 0)
      out[r] = from_f32<TO>(s);
  }
}

// out [K, N] = a^T b, the sum over the rows (tokens) of a [rows, K] and b [rows, N]. Tiles of
// 64 x 64 outputs, one per block at a time (grid-stride); 256 threads, each 4 x 4 outputs,
// accumulated in f32 in row order; 16 rows of a and b staged in shared memory per step.
template <class TA, class TB, class TO>
__device__ __forceinline__ void matmul_at(const TA *__restrict__ a, const TB *__restrict__ b, TO *__restrict__ out,
                                          long long rows, int K, int N) {
  constexpr int BK = 64, BN = 64, BR = 16;
  __shared__ float As[BR][BK + 4], Bs[BR][BN + 4];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16; // 16 x 16 threads
  const int tiles_k = (K + BK - 1) / BK, tiles_n = (N + BN - 1) / BN;
  for (long long tile = blockIdx.x; tile < (long long)tiles_k * tiles_n; tile += gridDim.x) {
    const int k0 = (int)(tile / tiles_n) * BK, n0 = (int)(tile % tiles_n) * BN;
    float acc[4][4] = {};
    for (long long r0 = 0; r0 < rows; r0 += BR) {
      // each thread stages 4 elements of each: row (tid / 16), columns (tid % 16) + 16 j
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int rr = tid / 16, cc = tid % 16 + 16 * j;
        const long long r = r0 + rr;
        As[rr][cc] = r < rows && k0 + cc < K ? to_f32(a[r * K + k0 + cc]) : 0.f;
        Bs[rr][cc] = r < rows && n0 + cc < N ? to_f32(b[r * N + n0 + cc]) : 0.f;
      }
      __syncthreads();
#pragma unroll
      for (int rr = 0; rr < BR; ++rr) {
        float va[4], vb[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          va[i] = As[rr][ty + 16 * i];
          vb[i] = Bs[rr][tx + 16 * i];
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j)
            acc[i][j] = fmaf(va[i], vb[j], acc[i][j]);
      }
      __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int k = k0 + ty + 16 * i, n = n0 + tx + 16 * j;
        if (k < K && n < N)
          out[(long long)k * N + n] = from_f32<TO>(acc[i][j]);
      }
  }
}

// out [C, R] = x [R, C]^T through 32 x 32 tiles in shared memory (256 threads: 32 x 8).
template <class T>
__device__ __forceinline__ void transpose(const T *__restrict__ x, T *__restrict__ out, long long R, long long C) {
  __shared__ T tile[32][33];
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  const long long tiles_r = (R + 31) / 32, tiles_c = (C + 31) / 32;
  for (long long t = blockIdx.x; t < tiles_r * tiles_c; t += gridDim.x) {
    const long long r0 = t / tiles_c * 32, c0 = t % tiles_c * 32;
    for (int i = ty; i < 32; i += 8)
      if (r0 + i < R && c0 + tx < C)
        tile[i][tx] = x[(r0 + i) * C + c0 + tx];
    __syncthreads();
    for (int i = ty; i < 32; i += 8)
      if (c0 + i < C && r0 + tx < R)
        out[(c0 + i) * R + r0 + tx] = tile[tx][i];
    __syncthreads();
  }
}

} // namespace ffn
