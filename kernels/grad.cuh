// grad.cuh: the kernels of the ops that only backward graphs have (passes/grad.c): the sums over
// tokens that weight and bias gradients are, and the moves between them. Each is one op alone in a
// kernel (codegen/lower.c: lower_single), called from a generated entry point with its shapes as
// constants and KArgs.m the rows (tokens) of the call:
//
//   sum_rows    sum_to over leading dims   x [rows, C] -> out [C]          (bias, gain gradients)
//   sum_cols    sum_to over the last dim   x [rows, C] -> out [rows, 1]
//   matmul_at   a^T b                       a [rows, K], b [rows, N] -> out [K, N]  (weight gradients)
//               (matmul_at_tc: the same on the tensor cores, for two 16-bit operands; on sm_90,
//               matmul_at_sm90 in grad_sm90.cuh, on wgmma)
//   transpose   2-D                         x [R, C] -> out [C, R]
//
// Deterministic: no atomics; every output element is summed by one thread (or one block, in a
// fixed order) whatever the grid, so a run gives the same bits every time. Sums are f32. The
// runtime launches these like rowwise kernels (one block per row, up to 16 per SM; matmul_at:
// two blocks per SM whatever the rows), so each loops over its work with the grid's stride.
#pragma once
#include "ewise.cuh"

namespace ffn {

// out[c] = sum over r of x[r, c]. A block takes 32 columns at a time; warp w sums rows w, w + WARPS,
// ... (coalesced: a warp reads 32 consecutive elements of a row) into U partial sums, row
// w + (j + U i) WARPS into the j-th, so that U loads a thread are in flight (with one, a 128 MB
// gradient of [8192, 4096] f32 took 118 us: the columns alone give too few bytes in flight);
// then the U partials in a fixed tree and the warps' sums in warp order.
template <class T, class TO, int THREADS>
__device__ __forceinline__ void sum_rows(const T *__restrict__ x, TO *__restrict__ out, long long rows, long long C) {
  constexpr int WARPS = THREADS / 32, U = 16;
  __shared__ float part[WARPS][33];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (long long c0 = (long long)blockIdx.x * 32; c0 < C; c0 += (long long)gridDim.x * 32) {
    const long long c = c0 + lane;
    float acc[U];
#pragma unroll
    for (int j = 0; j < U; ++j) acc[j] = 0.f;
    if (c < C) {
      long long r = warp;
      for (; r + (U - 1) * WARPS < rows; r += U * WARPS) {
        float v[U];
#pragma unroll
        for (int j = 0; j < U; ++j) v[j] = to_f32(x[(r + (long long)j * WARPS) * C + c]);
#pragma unroll
        for (int j = 0; j < U; ++j) acc[j] += v[j];
      }
#pragma unroll
      for (int j = 0; j < U; ++j)
        if (r + (long long)j * WARPS < rows) acc[j] += to_f32(x[(r + (long long)j * WARPS) * C + c]);
    }
#pragma unroll
    for (int w = U / 2; w > 0; w /= 2)
#pragma unroll
      for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
    part[warp][lane] = acc[0];
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

// two adjacent outputs, the first at an even index
template <class TO> __device__ __forceinline__ void store_pair(TO *p, float x, float y) {
  p[0] = from_f32<TO>(x);
  p[1] = from_f32<TO>(y);
}
template <> __device__ __forceinline__ void store_pair<float>(float *p, float x, float y) {
  *(float2 *)p = make_float2(x, y);
}

// out [K, N] = a^T b on the tensor cores, for a [rows, K] and b [rows, N] of one 16-bit type T
// (bf16 or f16; K % 8 == 0, N % 8 == 0, both 16-byte aligned): a weight gradient dW = X^T dY, the
// GEMM whose reduction runs over the tokens. Neither operand is K-contiguous as gemm_sm80 wants
// (both are stored token by token), so the tiles are staged as they lie, [tokens][columns], and
// ldmatrix .trans turns them into the mma.sync m16n8k16 fragments: a's BM columns are the
// output's rows (A of the mma), b's BN columns its columns (B).
//
// Tiles of BM x BN outputs, one per block at a time (grid-stride: the launch's grid does not
// depend on the tile count); 8 warps of 64 x 32; BT tokens per stage through a STAGES-deep
// cp.async pipeline; a staged row is 128 columns = 16 chunks of 16 bytes, chunk c of token row r
// stored at c ^ (r & 7), so that both the cp.async stores and the 8 rows an ldmatrix reads hit
// distinct banks. Tokens past `rows` are zero-filled. Sums are f32 over the tokens in order
// (16 per mma, then the mma's order): deterministic, no atomics.
template <class T, class TO>
__device__ __forceinline__ void matmul_at_tc(const T *__restrict__ a, const T *__restrict__ b, TO *__restrict__ out,
                                             long long rows, int K, int N) {
  constexpr int BM = 128, BN = 128, BT = 32, STAGES = 3, WM = 64, WN = 32, WARPS_N = BN / WN;
  constexpr int MI = WM / 16, NI = WN / 8, ROW_BYTES = 256, TILE_BYTES = BT * ROW_BYTES;
  __shared__ __align__(128) char smem[STAGES][2][TILE_BYTES]; // [stage][a, b][token row][column chunk]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp / WARPS_N, wn = warp % WARPS_N;
  const int tiles_m = (K + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const long long ktiles = (rows + BT - 1) / BT;
  const int ch = tid % 16, r0 = tid / 16; // copies: chunk ch of token rows r0 and r0 + 16
  const int q = lane >> 3, j = lane & 7;  // ldmatrix: lane gives row j of matrix q
  for (long long tile = blockIdx.x; tile < (long long)tiles_m * tiles_n; tile += gridDim.x) {
    const int m0 = (int)(tile / tiles_n) * BM, n0 = (int)(tile % tiles_n) * BN;
    const bool a_ok = m0 + ch * 8 < K, b_ok = n0 + ch * 8 < N;
    auto load_stage = [&](long long kt, int stage) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = r0 + 16 * i;
        const long long t = kt * BT + r;
        const u32 dst = smem_addr(smem[stage][0]) + (u32)(r * ROW_BYTES + ((ch ^ (r & 7)) << 4));
        const bool in = t < rows;
        cp_async16(dst, in && a_ok ? (const void *)(a + t * K + m0 + ch * 8) : (const void *)a, in && a_ok);
        cp_async16(dst + TILE_BYTES, in && b_ok ? (const void *)(b + t * N + n0 + ch * 8) : (const void *)b, in && b_ok);
      }
    };
    float acc[MI][NI][4];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.f;
    auto compute_stage = [&](int stage) {
      const u32 sa = smem_addr(smem[stage][0]), sb = sa + TILE_BYTES;
#pragma unroll
      for (int ks = 0; ks < BT / 16; ++ks) {
        u32 af[MI][4], bfr[NI][2];
        // A: matrices (m 0-7, t 0-7), (m 8-15, t 0-7), (m 0-7, t 8-15), (m 8-15, t 8-15)
        const int ar = ks * 16 + (q >> 1) * 8 + j;
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
          const int c = wm * (WM / 8) + mi * 2 + (q & 1);
          ldmatrix_x4_trans(af[mi], sa + (u32)(ar * ROW_BYTES + ((c ^ j) << 4)));
        }
        // B: matrices (n 0-7, t 0-7), (n 0-7, t 8-15), (n 8-15, t 0-7), (n 8-15, t 8-15)
        const int br = ks * 16 + (q & 1) * 8 + j;
#pragma unroll
        for (int jp = 0; jp < NI / 2; ++jp) {
          const int c = wn * (WN / 8) + jp * 2 + (q >> 1);
          u32 r[4];
          ldmatrix_x4_trans(r, sb + (u32)(br * ROW_BYTES + ((c ^ j) << 4)));
          bfr[2 * jp][0] = r[0];
          bfr[2 * jp][1] = r[1];
          bfr[2 * jp + 1][0] = r[2];
          bfr[2 * jp + 1][1] = r[3];
        }
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
          for (int ni = 0; ni < NI; ++ni) mma_16816<T>(acc[mi][ni], af[mi], bfr[ni][0], bfr[ni][1]);
      }
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < ktiles) load_stage(s, s);
      cp_async_commit();
    }
    for (long long kt = 0; kt < ktiles; ++kt) {
      cp_async_wait<STAGES - 2>();
      __syncthreads(); // stage kt landed for every thread; stage kt - 1 is no longer read
      if (kt + STAGES - 1 < ktiles) load_stage(kt + STAGES - 1, (int)((kt + STAGES - 1) % STAGES));
      cp_async_commit();
      compute_stage((int)(kt % STAGES));
    }
    cp_async_wait<0>();
    __syncthreads(); // the next tile refills the stages
    const int g = lane >> 2, t2 = (lane & 3) * 2;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = m0 + wm * WM + mi * 16 + g + 8 * h, col = n0 + wn * WN + ni * 8 + t2;
          if (row < K && col < N) // N % 8 == 0: col + 1 < N too, and the pair is 8-byte aligned
            store_pair(out + (long long)row * N + col, acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
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
