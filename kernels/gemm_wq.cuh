// gemm_wq.cuh: GEMM with weight-only quantized B (i8 per output column, i4 in groups along K),
// dequantized in the main loop, with the epilogue contract of gemm_sm80.cuh (streams S,
// STATS, split-K, epi(row, col, ncols, v[S][2], rsum, rsumsq)).
//
//   template <int BITS, int BM, int BN, int BK, int WN, int S, int STATS, class T, class Epi>
//   __device__ void gemm_wq(const GemmArgs &g, const float *scales, int group, const Epi &epi, char *smem);
//
// g.B holds the codes and `scales` the scales of kernels/quant.cuh's layout (B's [S*N, K] rows,
// gate/up interleaved by 8 as for the other templates); group is the i4 group length G (0: one
// group), which must be 0 or a multiple of 32 so that each 16-byte word of codes has one scale.
// Grid (tiles_m * tiles_n, 1, splits) as gemm_sm80; 256 threads; dynamic smem
// wq_smem_bytes(BM, BN, BK) (kernels/gemm_host.h computes the same).
//
// Design (decode first: at M <= 64 a GEMM with quantized weights is a stream over the codes).
// Each warp owns WN consecutive B rows; a chunk of BK = 32 lanes x one 16-byte word of k is one
// coalesced 512-byte load per row, and the next chunk's WN words are in flight while this one is
// computed. A's BM x BK slice of the chunk sits in smem as f32, laid out [row][element][lane] so
// that the lanes read it without bank conflicts. Each weight is decoded once per CTA (a byte
// permute or a mask, an f32 subtraction, times its scale: exactly the reference's (float)(q * s))
// and used for BM rows of A with f32 FMAs. The lanes' partial sums are reduced through shuffles
// at the end. Above 64 rows this is the same FMA loop (correct, not fast; kernels/NOTES.md).
#pragma once
#include "common.cuh"
#include "quant.cuh"

namespace ffn {

__device__ __forceinline__ uint4 ld_nc_u4(const void *p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// Element e of a 16-byte word of codes, as the f32 level q (2^23 + code is exact in f32).
template <int BITS> __device__ __forceinline__ float wq_decode(const uint4 &w, int e) {
  constexpr int PER = 32 / BITS; // codes per 32-bit word
  const int i = e / PER, j = e % PER;
  const u32 x = i == 0 ? w.x : i == 1 ? w.y : i == 2 ? w.z : w.w;
  if (BITS == 8) // byte j of x under the exponent byte 0x4b: 0x4b0000xx
    return __uint_as_float(__byte_perm(x, 0x4bu, 0x4550u | (u32)j)) - 8388736.0f; // 2^23 + 128
  return __uint_as_float(((x >> (4 * j)) & 0xfu) | 0x4b000000u) - 8388616.0f;     // 2^23 + 8
}

template <int BITS, int BM, int BN, int BK, int WN, int S, int STATS, class T, class Epi>
__device__ __forceinline__ void gemm_wq(const GemmArgs &g, const float *__restrict__ scales, int group, const Epi &epi,
                                        char *smem) {
  constexpr int THREADS = 256, WARPS = THREADS / 32;
  constexpr int E = WQ_K_PER_WORD(BITS); // k per lane per chunk: one 16-byte word
  constexpr int SLAB = BM * BN + 2 * BM;
  static_assert(BITS == 8 || BITS == 4, "i8 or i4");
  static_assert(BK == 32 * E && BN == WARPS * WN && BN % (8 * S) == 0, "tile shape");
  static_assert(S == 1 || S == 2, "S is 1 or 2");

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int M = g.M, N = g.N, K = g.K, splits = g.splits, z = blockIdx.z;
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (S * N + BN - 1) / BN;
  int tm, tn;
  gemm_tile_coords(blockIdx.x, tiles_m, tiles_n, tm, tn);
  const int m0 = tm * BM, n0 = tn * BN; // n0 in merged columns
  const int chunks = (K + BK - 1) / BK;
  const int c0 = (int)((long long)chunks * z / splits);
  const int nc = (int)((long long)chunks * (z + 1) / splits) - c0;
  const long long row_bytes = wq_row_bytes(K, BITS);
  const int G = BITS == 8 ? K : (int)wq_group_len(K, group), ngroups = BITS == 8 ? 1 : (int)wq_ngroups(K, group);

  float *As = (float *)smem;         // [BM][E][32]: chunk element lane * E + e of row m
  float *Os = As + BM * BK;          // [BM][BN]: the CTA's sums
  float *red = Os + BM * BN;         // [2][WARPS][BM]
  float *rowstat = red + 2 * WARPS * BM; // [2][BM]: sum of squares, sum

  const T *__restrict__ Ag = (const T *)g.A;
  const unsigned char *__restrict__ Bq = (const unsigned char *)g.B;
  const int brow0 = n0 + warp * WN;
  u32 b_ok = 0;
#pragma unroll
  for (int j = 0; j < WN; ++j)
    if (gemm_brow_valid<S>(brow0 + j, N)) b_ok |= 1u << j;

  // The words and scales of chunk c for this lane's k (zero past K: A is zero there too).
  auto load_b = [&](int c, uint4 (&w)[WN], float (&s)[WN]) {
    const int k = c * BK + lane * E;
#pragma unroll
    for (int j = 0; j < WN; ++j) {
      const bool ok = ((b_ok >> j) & 1) && k < K;
      const long long row = brow0 + j;
      w[j] = ok ? ld_nc_u4(Bq + row * row_bytes + (long long)(k / E) * 16) : uint4{0u, 0u, 0u, 0u};
      s[j] = ok ? scales[row * ngroups + k / G] : 0.f;
    }
  };

  float acc[BM][WN];
#pragma unroll
  for (int m = 0; m < BM; ++m)
#pragma unroll
    for (int j = 0; j < WN; ++j) acc[m][j] = 0.f;
  float ssq[BM], ssum[BM];
#pragma unroll
  for (int m = 0; m < BM; ++m) ssq[m] = ssum[m] = 0.f;

  uint4 cur[WN], nxt[WN];
  float scur[WN], snxt[WN];
  if (nc > 0) load_b(c0, cur, scur);
  for (int it = 0; it < nc; ++it) {
    const int c = c0 + it;
    if (it + 1 < nc) load_b(c + 1, nxt, snxt);
    __syncthreads(); // the previous chunk's A is no longer read
#pragma unroll
    for (int m = 0; m < BM; ++m) {
      const bool rok = m0 + m < M;
      const T *arow = Ag + (size_t)(rok ? m0 + m : 0) * K;
      for (int kk = tid; kk < BK; kk += THREADS) {
        const int k = c * BK + kk;
        const float v = rok && k < K ? to_f32(arow[k]) : 0.f;
        As[(m * E + kk % E) * 32 + kk / E] = v;
        if (STATS) ssq[m] = fmaf(v, v, ssq[m]);
        if (STATS == 2) ssum[m] += v;
      }
    }
    __syncthreads();
#pragma unroll
    for (int e = 0; e < E; ++e) {
      float w[WN];
#pragma unroll
      for (int j = 0; j < WN; ++j) w[j] = wq_decode<BITS>(cur[j], e) * scur[j];
#pragma unroll
      for (int m = 0; m < BM; ++m) {
        const float a = As[(m * E + e) * 32 + lane];
#pragma unroll
        for (int j = 0; j < WN; ++j) acc[m][j] = fmaf(a, w[j], acc[m][j]);
      }
    }
#pragma unroll
    for (int j = 0; j < WN; ++j) {
      cur[j] = nxt[j];
      scur[j] = snxt[j];
    }
  }

  // ---- the lanes' partial sums, and the row statistics, into smem ----
#pragma unroll
  for (int m = 0; m < BM; ++m)
#pragma unroll
    for (int j = 0; j < WN; ++j) {
      const float v = warp_sum(acc[m][j]);
      if (lane == 0) Os[m * BN + warp * WN + j] = v;
    }
  if (STATS) {
#pragma unroll
    for (int m = 0; m < BM; ++m) {
      const float q = warp_sum(ssq[m]), s = STATS == 2 ? warp_sum(ssum[m]) : 0.f;
      if (lane == 0) {
        red[warp * BM + m] = q;
        red[(WARPS + warp) * BM + m] = s;
      }
    }
  }
  __syncthreads();
  if (STATS)
    for (int m = tid; m < BM; m += THREADS) {
      float q = 0.f, s = 0.f;
#pragma unroll
      for (int w = 0; w < WARPS; ++w) {
        q += red[w * BM + m];
        s += red[(WARPS + w) * BM + m];
      }
      rowstat[m] = q;
      rowstat[BM + m] = s;
    }
  __syncthreads();

  // ---- split-K: every split stores its sums; the last to arrive adds them in split order ----
  if (splits > 1) {
    float *slab = g.ws + ((size_t)blockIdx.x * splits + z) * SLAB;
    for (int i = tid; i < BM * BN; i += THREADS) slab[i] = Os[i];
    if (STATS)
      for (int m = tid; m < 2 * BM; m += THREADS) slab[BM * BN + m] = rowstat[m];
    if (!gemm_splitk_arrive(g.counters + blockIdx.x, splits)) return;
    for (int i = tid; i < SLAB; i += THREADS) {
      if (!STATS && i >= BM * BN) break;
      float v = 0.f;
      for (int sp = 0; sp < splits; ++sp) v += ld_cg_f(g.ws + ((size_t)blockIdx.x * splits + sp) * SLAB + i);
      if (i < BM * BN) Os[i] = v;
      else rowstat[i - BM * BN] = v;
    }
    __syncthreads();
  }

  // ---- epilogue: one call per (row, pair of output columns) ----
  constexpr int BNS = BN / S, PAIRS = BNS / 2;
  for (int i = tid; i < BM * PAIRS; i += THREADS) {
    const int m = i / PAIRS, cl = 2 * (i % PAIRS), row = m0 + m, col = n0 / S + cl;
    if (row >= M || col >= N) continue;
    float v[S][2];
#pragma unroll
    for (int s = 0; s < S; ++s)
#pragma unroll
      for (int e = 0; e < 2; ++e) { // merged column of stream s, column cl + e (groups of 8)
        const int c = cl + e;
        v[s][e] = Os[m * BN + (c / 8) * 8 * S + s * 8 + c % 8];
      }
    const float rsumsq = STATS ? rowstat[m] : 0.f, rsum = STATS == 2 ? rowstat[BM + m] : 0.f;
    epi(row, col, col + 1 < N ? 2 : 1, v, rsum, rsumsq);
  }
}

} // namespace ffn
