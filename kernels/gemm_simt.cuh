// gemm_simt.cuh: the same GEMM and epilogue interface as gemm_sm80.cuh, with f32 FMA and no tensor
// cores. The path for f32 models (checked against f64 at 1e-5) and any K, M, N (no alignment
// requirement beyond the element's own). T is float, bf16 or f16; all arithmetic is f32.
//
//   template <int BM, int BN, int BK, int TM, int TN, int S, int STATS, class T, class Epi>
//   __device__ void gemm_simt(const GemmArgs &g, const Epi &epi, char *smem);
//
// Block: (BM/TM) * (BN/TN) threads; grid and split-K protocol as gemm_sm80; dynamic smem:
// (2 * BK * (BM + BN + 8) + 2 * BM) * 4 bytes. The epilogue is called exactly as in gemm_sm80.cuh.
//
// Design. Each thread owns a TM x TN register tile: TM consecutive rows, and TN/S consecutive output
// columns of each stream. B's rows are permuted into stream-major order as they are stored to smem,
// which puts a thread's gate and up columns side by side. Tiles are double-buffered: the next
// k-tile's global loads are in registers while the current one is computed.
#pragma once
#include "common.cuh"

namespace ffn {

template <int BM, int BN, int BK, int TM, int TN, int S, int STATS, class T, class Epi>
__device__ __forceinline__ void gemm_simt(const GemmArgs &g, const Epi &epi, char *smem) {
  constexpr int TX = BN / TN, TY = BM / TM, THREADS = TX * TY;
  constexpr int TNS = TN / S, BNS = BN / S;        // per stream: columns per thread, per tile
  constexpr int TPR_A = THREADS / BM, EA = BK / TPR_A; // threads per A row, elements per thread
  constexpr int TPR_B = THREADS / BN, EB = BK / TPR_B;
  constexpr int LDA = BM + 4, LDB = BN + 4;         // smem row pitch (floats), k-major
  constexpr int SLAB = BM * BN + 2 * BM;
  static_assert(BM % TM == 0 && BN % TN == 0 && TM % 4 == 0, "thread tiling");
  static_assert(TNS % 2 == 0 && BN % (8 * S) == 0, "TN/S must be even, BN a multiple of 8*S");
  static_assert(THREADS % BM == 0 && THREADS % BN == 0, "threads must cover rows");
  static_assert(TPR_A <= 32 && TPR_B <= 32 && BK % TPR_A == 0 && BK % TPR_B == 0, "k split");
  static_assert(S == 1 || S == 2, "S is 1 or 2");

  float *As = (float *)smem;               // [2][BK][LDA]
  float *Bs = As + 2 * BK * LDA;           // [2][BK][LDB]
  float *rowstat = Bs + 2 * BK * LDB;      // [2][BM]: sum of squares, sum

  const int tid = threadIdx.x, tx = tid % TX, ty = tid / TX;
  const int M = g.M, N = g.N, K = g.K, splits = g.splits, z = blockIdx.z;
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (S * N + BN - 1) / BN;
  int tm, tn;
  gemm_tile_coords(blockIdx.x, tiles_m, tiles_n, tm, tn);
  const int m0 = tm * BM, n0 = tn * BN;
  const int ktiles = (K + BK - 1) / BK;
  const int kt0 = (int)((long long)ktiles * z / splits);
  const int nk = (int)((long long)ktiles * (z + 1) / splits) - kt0;

  // Loads: thread covers one A row (elements kq, kq + TPR_A, ...) and one B row likewise.
  const int a_row = tid / TPR_A, a_kq = tid % TPR_A;
  const int b_row = tid / TPR_B, b_kq = tid % TPR_B;
  const bool a_ok = m0 + a_row < M;
  const bool b_ok = gemm_brow_valid<S>(n0 + b_row, N);
  const T *__restrict__ a_src = (const T *)g.A + (size_t)(a_ok ? m0 + a_row : 0) * K;
  const T *__restrict__ b_src = (const T *)g.B + (size_t)(b_ok ? n0 + b_row : 0) * K;
  // Stream-major smem column of merged tile row b_row.
  const int b_col = ((b_row / 8) % S) * BNS + (b_row / (8 * S)) * 8 + (b_row & 7);

  float ra[EA], rb[EB];
  float ssq = 0.f, ssum = 0.f;
  auto load_regs = [&](int kt) {
    const int k0 = kt * BK;
#pragma unroll
    for (int e = 0; e < EA; ++e) {
      int k = k0 + a_kq + e * TPR_A;
      ra[e] = a_ok && k < K ? to_f32(a_src[k]) : 0.f;
    }
#pragma unroll
    for (int e = 0; e < EB; ++e) {
      int k = k0 + b_kq + e * TPR_B;
      rb[e] = b_ok && k < K ? to_f32(b_src[k]) : 0.f;
    }
  };
  auto store_smem = [&](int buf) {
#pragma unroll
    for (int e = 0; e < EA; ++e) {
      As[(buf * BK + a_kq + e * TPR_A) * LDA + a_row] = ra[e];
      if (STATS) ssq = fmaf(ra[e], ra[e], ssq);
      if (STATS == 2) ssum += ra[e];
    }
#pragma unroll
    for (int e = 0; e < EB; ++e) Bs[(buf * BK + b_kq + e * TPR_B) * LDB + b_col] = rb[e];
  };

  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

  if (nk > 0) {
    load_regs(kt0);
    store_smem(0);
  }
  __syncthreads();
  int buf = 0;
  for (int it = 0; it < nk; ++it) {
    if (it + 1 < nk) load_regs(kt0 + it + 1);
    const float *as = As + buf * BK * LDA + ty * TM;
    const float *bs = Bs + buf * BK * LDB + tx * TNS;
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float a[TM], b[TN];
#pragma unroll
      for (int i = 0; i < TM; i += 4) {
        float4 t = *(const float4 *)(as + k * LDA + i);
        a[i] = t.x, a[i + 1] = t.y, a[i + 2] = t.z, a[i + 3] = t.w;
      }
#pragma unroll
      for (int s = 0; s < S; ++s) {
        if (TNS % 4 == 0) {
#pragma unroll
          for (int j = 0; j < TNS; j += 4) {
            float4 t = *(const float4 *)(bs + k * LDB + s * BNS + j);
            b[s * TNS + j] = t.x, b[s * TNS + j + 1] = t.y, b[s * TNS + j + 2] = t.z, b[s * TNS + j + 3] = t.w;
          }
        } else {
#pragma unroll
          for (int j = 0; j < TNS; j += 2) {
            float2 t = *(const float2 *)(bs + k * LDB + s * BNS + j);
            b[s * TNS + j] = t.x, b[s * TNS + j + 1] = t.y;
          }
        }
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    if (it + 1 < nk) store_smem(buf ^ 1); // that buffer was last read before the previous barrier
    __syncthreads();
    buf ^= 1;
  }

  // ---- row statistics: the TPR_A lanes of a row, then smem ----
  if (STATS) {
    float q = group_sum<TPR_A>(ssq);
    float s = STATS == 2 ? group_sum<TPR_A>(ssum) : 0.f;
    if (a_kq == 0) {
      rowstat[a_row] = q;
      rowstat[BM + a_row] = s;
    }
    __syncthreads();
  }

  // ---- split-K, as in gemm_sm80: partials to ws, the last CTA sums them in split order ----
  if (splits > 1) {
    float *slab = g.ws + ((size_t)blockIdx.x * splits + z) * SLAB;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      if (m0 + ty * TM + i >= M) continue;
#pragma unroll
      for (int s = 0; s < S; ++s)
#pragma unroll
        for (int jp = 0; jp < TNS / 2; ++jp)
          st_cg_f2(slab + 2 * (((i * S + s) * (TNS / 2) + jp) * THREADS + tid), acc[i][s * TNS + 2 * jp],
                   acc[i][s * TNS + 2 * jp + 1]);
    }
    if (STATS)
      for (int r = tid; r < BM; r += THREADS) {
        slab[BM * BN + r] = rowstat[r];
        slab[BM * BN + BM + r] = rowstat[BM + r];
      }
    if (!gemm_splitk_arrive(g.counters + blockIdx.x, splits)) return;

#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;
    for (int sp = 0; sp < splits; ++sp) {
      const float *p = g.ws + ((size_t)blockIdx.x * splits + sp) * SLAB;
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        if (m0 + ty * TM + i >= M) continue;
#pragma unroll
        for (int s = 0; s < S; ++s)
#pragma unroll
          for (int jp = 0; jp < TNS / 2; ++jp) {
            float x, y;
            ld_cg_f2(p + 2 * (((i * S + s) * (TNS / 2) + jp) * THREADS + tid), x, y);
            acc[i][s * TNS + 2 * jp] += x;
            acc[i][s * TNS + 2 * jp + 1] += y;
          }
      }
    }
    if (STATS) {
      __syncthreads();
      for (int r = tid; r < BM; r += THREADS) {
        float q = 0.f, s = 0.f;
        for (int sp = 0; sp < splits; ++sp) {
          const float *p = g.ws + ((size_t)blockIdx.x * splits + sp) * SLAB + BM * BN;
          q += ld_cg_f(p + r);
          s += ld_cg_f(p + BM + r);
        }
        rowstat[r] = q;
        rowstat[BM + r] = s;
      }
      __syncthreads();
    }
  }

  // ---- epilogue ----
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int rl = ty * TM + i, row = m0 + rl;
    if (row >= M) continue;
    const float rsumsq = STATS ? rowstat[rl] : 0.f;
    const float rsum = STATS == 2 ? rowstat[BM + rl] : 0.f;
#pragma unroll
    for (int jp = 0; jp < TNS / 2; ++jp) {
      const int col = n0 / S + tx * TNS + 2 * jp;
      if (col >= N) continue;
      float v[S][2];
#pragma unroll
      for (int s = 0; s < S; ++s) {
        v[s][0] = acc[i][s * TNS + 2 * jp];
        v[s][1] = acc[i][s * TNS + 2 * jp + 1];
      }
      epi(row, col, col + 1 < N ? 2 : 1, v, rsum, rsumsq);
    }
  }
}

} // namespace ffn
