// gemm_sm80.cuh: tensor-core GEMM (mma.sync m16n8k16, bf16/f16 in, f32 accumulate) with a fused
// epilogue, for sm_80 and later (on sm_90 this is the pre-wgmma path).
//
//   acc[M, S*N] = A[M, K] . B[S*N, K]^T        (see GemmArgs in common.cuh for the layouts)
//
// Call from a kernel the code generator writes, for example
//
//   extern "C" __global__ void __launch_bounds__(256, 1) ffn_up(ffn::GemmArgs g, UpEpi epi) {
//     extern __shared__ __align__(128) char smem[];
//     ffn::gemm_sm80<128, 256, 32, 64, 64, 4, /*S*/ 2, /*STATS*/ 1, ffn::bf16>(g, epi, smem);
//   }
//
// launched with grid (tiles_m * tiles_n, 1, splits), block (WARPS * 32) and gemm_smem_bytes() of
// dynamic shared memory (kernels/gemm_host.h has these and the recommended configurations).
//
// The epilogue functor. For every output element pair (row, col), col even, row < M, col < N, the
// thread holding it calls
//
//   epi(int row, int col, int ncols, const float (&v)[S][2], float rsum, float rsumsq);
//
// ncols is 2 when col + 1 < N, else 1 (v[s][1] is then meaningless). v[s][i] is acc of output
// column col + i of stream s: for S == 2, v[0] is the gate and v[1] the up projection. rsum and
// rsumsq are the sum and the sum of squares of A's row over all of K (f32, from the bf16/f16
// values as stored), 0 where STATS does not ask for them (STATS 0: neither; 1: rsumsq; 2: both).
// The functor does its own loads and stores; a (row, col) pair is visited exactly once.
//
// Design. BM x BN tile per CTA (BN in merged S*N columns), BK deep k-tiles through a STAGES-deep
// cp.async pipeline; smem rows are BK*2 bytes, XOR-swizzled in 16-byte chunks so that both the
// cp.async stores and the ldmatrix loads are free of bank conflicts. Warps are WM x WN each, and WN
// is a multiple of 8*S so that each thread's accumulators hold the gate and the up value of the
// same output columns. Out-of-range rows and K tails are zero-filled by cp.async (K % 8 == 0).
#pragma once
#include "common.cuh"

namespace ffn {

// Byte offset of 16-byte chunk `chunk` of smem row `row` in a tile with BK-element rows.
template <int BK> __device__ __forceinline__ u32 gemm_swizzle(int row, int chunk) {
  if (BK == 32) return (u32)(row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4)); // 2 rows per 128 B
  return (u32)(row * (BK * 2) + ((chunk ^ (row & 7)) << 4));
}

template <int BM, int BN, int BK, int WM, int WN, int STAGES, int S, int STATS, class T, class Epi>
__device__ __forceinline__ void gemm_sm80(const GemmArgs &g, const Epi &epi, char *smem) {
  constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN, THREADS = WARPS_M * WARPS_N * 32;
  constexpr int MI = WM / 16, NI = WN / 8, KS = BK / 16;
  constexpr int CPR = BK / 8;               // 16-byte chunks per smem row
  constexpr int RPP = THREADS / CPR;        // rows copied per pass of all threads
  constexpr int A_ITERS = (BM + RPP - 1) / RPP, B_ITERS = (BN + RPP - 1) / RPP;
  constexpr int A_STAGE = BM * BK * 2, STAGE = (BM + BN) * BK * 2;
  constexpr int SLAB = BM * BN + 2 * BM;    // split-K workspace floats per (tile, split)
  static_assert(BK == 32 || BK == 64 || BK == 128, "BK must be 32, 64 or 128");
  static_assert(BM % WM == 0 && BN % WN == 0 && WM % 16 == 0, "warp tiling");
  static_assert(WN % (8 * S) == 0 && WN % 16 == 0, "WN must be a multiple of 16 and of 8*S");
  static_assert(S == 1 || S == 2, "S is 1 or 2");
  static_assert(STATS >= 0 && STATS <= 2, "STATS is 0, 1 or 2");
  static_assert(!is_fp8<T>::value || STATS == 0, "fp8 A: no row statistics (normfold leaves fp8 products alone)");
  typedef typename gemm_unit<T>::type U; // what a k step of 2 bytes holds (GemmArgs)
  static_assert(THREADS % CPR == 0 && A_ITERS <= 32 && B_ITERS <= 32, "threads");
  static_assert((STATS + 1) * (BN / WN) * BM * 4 + 2 * BM * 4 <= STAGES * STAGE, "stats scratch");

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / WARPS_N, wn = warp % WARPS_N;
  const int M = g.M, N = g.N, K = g.K, splits = g.splits, z = blockIdx.z;
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (S * N + BN - 1) / BN;
  int tm, tn;
  gemm_tile_coords(blockIdx.x, tiles_m, tiles_n, tm, tn);
  const int m0 = tm * BM, n0 = tn * BN; // n0 in merged columns
  const int ktiles = (K + BK - 1) / BK;
  const int kt0 = (int)((long long)ktiles * z / splits);
  const int nk = (int)((long long)ktiles * (z + 1) / splits) - kt0;

  // Copy assignment: this thread moves chunk `ch` of rows r0, r0 + RPP, ... of each tile.
  const int ch = tid % CPR, r0 = tid / CPR;
  const U *__restrict__ Ag = (const U *)g.A;
  const U *__restrict__ Bg = (const U *)g.B;
  // One base pointer per operand and a bit per row: rows out of range are zero-filled from a
  // clamped address. (Per-row pointers cost two registers each and made the big tiles spill.)
  const U *a_base = Ag + (size_t)(m0 + r0) * K + ch * 8;
  const U *b_base = Bg + (size_t)(n0 + r0) * K + ch * 8;
  u32 a_ok = 0, b_ok = 0;
#pragma unroll
  for (int i = 0; i < A_ITERS; ++i) {
    int row = r0 + i * RPP;
    if (row < BM && m0 + row < M) a_ok |= 1u << i;
  }
#pragma unroll
  for (int i = 0; i < B_ITERS; ++i) {
    int row = r0 + i * RPP;
    if (row < BN && gemm_brow_valid<S>(n0 + row, N)) b_ok |= 1u << i;
  }
  const u32 sbase = smem_addr(smem);

  auto load_stage = [&](int kt, int stage) {
    const u32 base = sbase + stage * STAGE;
    const int koff = kt * BK;
    const bool kok = koff + ch * 8 < K;
#pragma unroll
    for (int i = 0; i < A_ITERS; ++i) {
      int row = r0 + i * RPP;
      bool ok = kok && ((a_ok >> i) & 1);
      const U *src = ok ? a_base + (size_t)i * RPP * K + koff : Ag;
      if (BM % RPP == 0 || row < BM) cp_async16(base + gemm_swizzle<BK>(row, ch), src, ok);
    }
#pragma unroll
    for (int i = 0; i < B_ITERS; ++i) {
      int row = r0 + i * RPP;
      bool ok = kok && ((b_ok >> i) & 1);
      const U *src = ok ? b_base + (size_t)i * RPP * K + koff : Bg;
      if (BN % RPP == 0 || row < BN) cp_async16(base + A_STAGE + gemm_swizzle<BK>(row, ch), src, ok);
    }
  };

  // ldmatrix addressing. A: lane l gives row (l & 15), chunk 2ks + (l >> 4) of each 16x16 block.
  // B: lane l gives n-row (l & 7) + 8 * (l >> 4), chunk 2ks + ((l >> 3) & 1) of each 16(n) x 16(k).
  // Within these row groups the swizzle term depends only on the lane.
  const int a_x = BK == 32 ? ((lane & 15) >> 1) & 3 : lane & 7;
  const int b_x = BK == 32 ? ((lane & 7) >> 1) & 3 : lane & 7;
  const u32 a_row = (u32)((wm * WM + (lane & 15)) * BK * 2);
  const u32 b_row = (u32)(A_STAGE + (wn * WN + (lane & 7) + ((lane >> 4) << 3)) * BK * 2);

  float acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
  float ssq[MI][2], ssum[MI][2];
#pragma unroll
  for (int i = 0; i < MI; ++i) ssq[i][0] = ssq[i][1] = ssum[i][0] = ssum[i][1] = 0.f;

  auto compute_stage = [&](int stage) {
    const u32 base = sbase + stage * STAGE;
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      u32 af[MI][4], bfr[NI][2];
      const u32 ac = (u32)(((ks * 2 + (lane >> 4)) ^ a_x) << 4);
      const u32 bc = (u32)(((ks * 2 + ((lane >> 3) & 1)) ^ b_x) << 4);
#pragma unroll
      for (int i = 0; i < MI; ++i) ldmatrix_x4(af[i], base + a_row + ac + i * 16 * BK * 2);
#pragma unroll
      for (int jp = 0; jp < NI / 2; ++jp) {
        u32 r[4];
        ldmatrix_x4(r, base + b_row + bc + jp * 16 * BK * 2);
        bfr[2 * jp][0] = r[0];
        bfr[2 * jp][1] = r[1];
        bfr[2 * jp + 1][0] = r[2];
        bfr[2 * jp + 1][1] = r[3];
      }
      if constexpr (STATS != 0) {
        // Row statistics from the A fragments: unit (i, ks) goes to warp column (i + ks) % WARPS_N,
        // so each A element is counted once per CTA, the warps of a row share the work, and each
        // k-step unpacks only MI / WARPS_N fragments (all MI at once made WARPS_N == 2 tiles spill).
#pragma unroll
        for (int i = 0; i < MI; ++i) {
          if ((i + ks) % WARPS_N == wn) {
#pragma unroll
            for (int r = 0; r < 4; ++r) {
              float lo, hi;
              unpack2<T>(af[i][r], lo, hi);
              ssq[i][r & 1] = fmaf(lo, lo, fmaf(hi, hi, ssq[i][r & 1]));
              if (STATS == 2) ssum[i][r & 1] += lo + hi;
            }
          }
        }
      }
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) mma_16816<T>(acc[i][j], af[i], bfr[j][0], bfr[j][1]);
    }
  };

  // ---- main loop: STAGES-1 k-tiles in flight while one is computed ----
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < nk) load_stage(kt0 + s, s);
    cp_async_commit();
  }
  int rd = 0, wr = STAGES - 1;
  for (int it = 0; it < nk; ++it) {
    cp_async_wait<STAGES - 2>();
    __syncthreads(); // stage `rd` landed for all threads; stage `wr` is no longer being read
    if (it + STAGES - 1 < nk) load_stage(kt0 + it + STAGES - 1, wr);
    cp_async_commit();
    compute_stage(rd);
    rd = rd + 1 == STAGES ? 0 : rd + 1;
    wr = wr + 1 == STAGES ? 0 : wr + 1;
  }
  cp_async_wait<0>();
  __syncthreads(); // the pipeline smem is free from here on

  // ---- row statistics: quad shuffle, then across the warps of a row through smem ----
  float *red = (float *)smem;                        // [STATS][WARPS_N][BM]
  float *rowstat = red + (STATS + 1) * WARPS_N * BM; // [2][BM]: sum of squares, sum
  if (STATS) {
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float q = group_sum<4>(ssq[i][h]);
        float s = STATS == 2 ? group_sum<4>(ssum[i][h]) : 0.f;
        int row = wm * WM + i * 16 + (lane >> 2) + h * 8;
        if ((lane & 3) == 0) {
          red[wn * BM + row] = q;
          if (STATS == 2) red[(WARPS_N + wn) * BM + row] = s;
        }
      }
    __syncthreads();
    for (int r = tid; r < BM; r += THREADS) {
      float q = 0.f, s = 0.f;
#pragma unroll
      for (int w = 0; w < WARPS_N; ++w) {
        q += red[w * BM + r];
        if (STATS == 2) s += red[(WARPS_N + w) * BM + r];
      }
      rowstat[r] = q;
      rowstat[BM + r] = s;
    }
    __syncthreads();
  }

  // ---- split-K: every split stores its partials; the last to arrive sums them in split order ----
  if (splits > 1) {
    float *slab = g.ws + ((size_t)blockIdx.x * splits + z) * SLAB;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (m0 + wm * WM + i * 16 + (lane >> 2) + h * 8 >= M) continue;
#pragma unroll
        for (int j = 0; j < NI; ++j)
          st_cg_f2(slab + 2 * (((i * NI + j) * 2 + h) * THREADS + tid), acc[i][j][2 * h], acc[i][j][2 * h + 1]);
      }
    if (STATS)
      for (int r = tid; r < BM; r += THREADS) {
        slab[BM * BN + r] = rowstat[r];
        slab[BM * BN + BM + r] = rowstat[BM + r];
      }
    if (!gemm_splitk_arrive(g.counters + blockIdx.x, splits)) return;

#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NI; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
    for (int s = 0; s < splits; ++s) {
      const float *p = g.ws + ((size_t)blockIdx.x * splits + s) * SLAB;
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (m0 + wm * WM + i * 16 + (lane >> 2) + h * 8 >= M) continue;
#pragma unroll
          for (int j = 0; j < NI; ++j) {
            float x, y;
            ld_cg_f2(p + 2 * (((i * NI + j) * 2 + h) * THREADS + tid), x, y);
            acc[i][j][2 * h] += x;
            acc[i][j][2 * h + 1] += y;
          }
        }
    }
    if (STATS) {
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
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int rl = wm * WM + i * 16 + (lane >> 2) + h * 8, row = m0 + rl;
      if (row >= M) continue;
      const float rsumsq = STATS ? rowstat[rl] : 0.f;
      const float rsum = STATS == 2 ? rowstat[BM + rl] : 0.f;
#pragma unroll
      for (int jg = 0; jg < NI / S; ++jg) {
        const int col = (n0 + wn * WN + jg * 8 * S) / S + 2 * (lane & 3);
        if (col >= N) continue;
        float v[S][2];
#pragma unroll
        for (int s = 0; s < S; ++s) {
          v[s][0] = acc[i][jg * S + s][2 * h];
          v[s][1] = acc[i][jg * S + s][2 * h + 1];
        }
        gemm_fp8_scale<T, S>(g, row, n0 + wn * WN + jg * 8 * S + 2 * (lane & 3), col + 1 < N ? 2 : 1, v);
        epi(row, col, col + 1 < N ? 2 : 1, v, rsum, rsumsq);
      }
    }
}

} // namespace ffn
