// gemm_wq.cuh: GEMM with weight-only quantized B (i8 per output column, i4 in groups along K) on
// the tensor cores (mma.sync m16n8k16, sm_80 and sm_90), with the epilogue contract of
// gemm_sm80.cuh (streams S, STATS, split-K, epi(row, col, ncols, v[S][2], rsum, rsumsq)).
//
//   template <int BITS, int BM, int BN, int BK, int WN, int STAGES, int S, int STATS, class T, class Epi>
//   __device__ void gemm_wq(const GemmArgs &g, const float *scales, int group, const Epi &epi, char *smem);
//
// g.B holds the codes and `scales` the scales of kernels/quant.cuh's layout (B's [S*N, K] rows,
// gate/up interleaved by 8 as for the other templates, cut into 512-byte tiles of 16 rows x BK
// k, BK = WQ_TILE_K(BITS)); group is the i4 group length G (0: one group), 0 or a multiple of 32.
// BM = 8 x (token tiles), BN = 16 x warps, WN = 16. Grid (tiles_m * tiles_n, 1, splits) as
// gemm_sm80; BN * 2 threads; dynamic smem wq_smem_bytes(BM, BN, BK, STAGES, sizeof(T)) bytes
// (quant.cuh; kernels/gemm_host.h launches with it).
//
// Design (decode first: at M <= 64 the product streams the codes). The weights are the A
// operand of the MMA (16 output columns x 16 k) and the activations its B operand (16 k x 8
// tokens), so one row of tokens wastes 7/8 of an n8 tile instead of 15/16 of an m16 one. Each
// warp owns 16 B rows and streams their tiles along the split's k range. Everything a k tile
// needs goes through one cp.async ring of STAGES tiles in shared memory, filled STAGES - 1
// tiles ahead: each lane's 16 bytes of codes (it reads back only its own), the i4 scales of the
// warp's rows, and the CTA's activations (shared by the warps: one barrier per tile). So a CTA
// keeps ~50 KB of loads in flight, with no register cost (kernels/NOTES.md: codes prefetched in
// registers and activations or scales read from global memory when needed left the stream
// latency-bound at a third of the copy rate). A lane's 16 bytes are its A fragments for the
// tile's k16 steps (4 for i4, 2 for i8), turned into bf16x2 / f16x2 with a mask (or byte
// permute) and one fma per register: the levels q are exact in both types. k is permuted at
// pack time so that a lane's B fragments for two steps are 8 consecutive k, one 16-byte load.
// Products are accumulated per k group in f32 (tmp) and added to the result times the group's
// f32 scale when the group ends (G = 0: once, at the end; i8 accumulates straight into the
// result, scaled at the end), so each output is sum_g s_g * sum_k a_k q_k: the reference's
// sum_k a_k (float)(q_k s_g) up to f32 rounding. f32 activations are split into three bf16
// terms (hi + mid + lo, 24 bits) and take three MMAs per step. Above 64 rows the same loop runs
// over 64-token tiles (each CTA decodes its weights again; kernels/NOTES.md).
#pragma once
#include "common.cuh"
#include "quant.cuh"

namespace ffn {

// d = a * b + c on two 16-bit floats of W (bf16 or f16)
template <class W> __device__ __forceinline__ u32 fma2(u32 a, u32 b, u32 c);
template <> __device__ __forceinline__ u32 fma2<bf16>(u32 a, u32 b, u32 c) {
  u32 d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
template <> __device__ __forceinline__ u32 fma2<f16>(u32 a, u32 b, u32 c) {
  u32 d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

template <class W> struct WqIsF16 { static constexpr bool value = false; };
template <> struct WqIsF16<f16> { static constexpr bool value = true; };

// (a & b) | c in one instruction (ptxas leaves the and and the or apart)
__device__ __forceinline__ u32 and_or(u32 a, u32 b, u32 c) {
  u32 d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// The A fragment registers of one k16 step, as W x 2, from the lane's words (quant.cuh).
// i4, word w: register i = nibbles i (low half) and i + 4 (high half), each placed in the
// mantissa of 128.0 (bf16) or 1024.0 (f16) and offset by the code's own 8: v * 1 - (base + 8).
template <class W> __device__ __forceinline__ void wq_frag_i4(u32 w, u32 (&a)[4]) {
  constexpr bool h = WqIsF16<W>::value;
  const u32 base = h ? 0x64006400u : 0x43004300u, one = h ? 0x3c003c00u : 0x3f803f80u,
            off = h ? 0xe408e408u : 0xc308c308u; // -(1024 + 8), -(128 + 8)
#pragma unroll
  for (int i = 0; i < 4; ++i) a[i] = fma2<W>(and_or(w >> (4 * i), 0x000f000fu, base), one, off);
}
// i8, words w0 (a[0]: bytes 0, 1; a[1]: bytes 2, 3) and w1 (a[2], a[3]). f16: the byte under
// the exponent byte 0x64 is 1024 + code; bf16 has too few mantissa bits for 8-bit codes, so
// 2^23 + code in f32, minus 2^23 + 128, whose upper half is the exact bf16 level.
template <class W> __device__ __forceinline__ void wq_frag_i8(u32 w0, u32 w1, u32 (&a)[4]) {
  if (WqIsF16<W>::value) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
      a[i] = fma2<f16>(__byte_perm(i < 2 ? w0 : w1, 0x64646464u, i % 2 ? 0x4342u : 0x4140u), 0x3c003c00u,
                       0xe480e480u); // -(1024 + 128)
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const u32 w = i < 2 ? w0 : w1, p = 2 * (i % 2);
      const float lo = __uint_as_float(__byte_perm(w, 0x4bu, 0x4550u | p)) - 8388736.0f,
                  hi = __uint_as_float(__byte_perm(w, 0x4bu, 0x4550u | (p + 1))) - 8388736.0f;
      a[i] = __byte_perm(__float_as_uint(lo), __float_as_uint(hi), 0x7632u);
    }
  }
}

// The 16-bit type the weights are decoded to for activations of type T.
template <class T> struct WqWeight { typedef bf16 type; };
template <> struct WqWeight<f16> { typedef f16 type; };

// A lane's activations of one token for one 32-k block, k = 8t .. 8t + 7 from the CTA's ring in
// shared memory, as B fragment words (x4) of W, and for T = float the three terms of each.
template <class T> struct WqAct {
  u32 b[4];
  __device__ __forceinline__ void load(const T *p) {
    const uint4 v = *(const uint4 *)p;
    b[0] = v.x, b[1] = v.y, b[2] = v.z, b[3] = v.w;
  }
  __device__ __forceinline__ float value(int e) const {
    float lo, hi;
    unpack2<T>(b[e / 2], lo, hi);
    return e % 2 ? hi : lo;
  }
};
template <> struct WqAct<float> {
  float v[8];
  u32 b[3][4]; // hi, mid, lo terms as bf16x2
  __device__ __forceinline__ void load(const float *p) {
    const float4 x = ((const float4 *)p)[0], y = ((const float4 *)p)[1];
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w, v[4] = y.x, v[5] = y.y, v[6] = y.z, v[7] = y.w;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float r0 = v[2 * i], r1 = v[2 * i + 1];
#pragma unroll
      for (int t = 0; t < 3; ++t) {
        b[t][i] = pack_bf16x2(r0, r1);
        float h0, h1;
        unpack_bf16x2(b[t][i], h0, h1);
        r0 -= h0, r1 -= h1; // exact: the remainder of a rounding to nearest
      }
    }
  }
  __device__ __forceinline__ float value(int e) const { return v[e]; }
};

// tmp += W . B for step s (0, 1) of a 32-k block
template <class T, class W>
__device__ __forceinline__ void wq_mma(float (&d)[4], const u32 (&a)[4], const WqAct<T> &x, int s) {
  mma_16816<W>(d, a, x.b[2 * s], x.b[2 * s + 1]);
}
template <>
__device__ __forceinline__ void wq_mma<float, bf16>(float (&d)[4], const u32 (&a)[4], const WqAct<float> &x, int s) {
#pragma unroll
  for (int t = 0; t < 3; ++t) mma_16816<bf16>(d, a, x.b[t][2 * s], x.b[t][2 * s + 1]);
}

// One 32-k block of a warp's 16 B rows, shared by gemm_wq and gemm_wqd: the A fragments from
// the lane's code words (i4: words 2 bb and 2 bb + 1 of the tile; i8: all four), then for each
// token tile t the lane's activations at at(t), their squares (and sums) into the row
// statistics when `stats`, and the block's two k16 MMAs into d[t].
template <int BITS, int NT, int STATS, class T, class W, class At>
__device__ __forceinline__ void wq_block(const u32 (&word)[4], int bb, const At &at, bool stats, float (&d)[NT][4],
                                         float (&ssq)[NT], float (&ssum)[NT]) {
  u32 a[2][4];
  if (BITS == 4) {
    wq_frag_i4<W>(word[2 * bb], a[0]);
    wq_frag_i4<W>(word[2 * bb + 1], a[1]);
  } else {
    wq_frag_i8<W>(word[0], word[1], a[0]);
    wq_frag_i8<W>(word[2], word[3], a[1]);
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    WqAct<T> x;
    x.load(at(t));
    if (stats) {
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float v = x.value(e);
        ssq[t] = fmaf(v, v, ssq[t]);
        if (STATS == 2) ssum[t] += v;
      }
    }
    wq_mma<T, W>(d[t], a[0], x, 0);
    wq_mma<T, W>(d[t], a[1], x, 1);
  }
}

// The warp's sums (acc[t]: the MMA's C fragments, rows = B rows, columns = tokens) into the
// CTA's [BM][BN] block Os.
template <int NT, int BN>
__device__ __forceinline__ void wq_store(float *Os, const float (&acc)[NT][4], int warp, int gq, int tq) {
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const int m = t * 8 + 2 * tq, c = warp * 16 + gq;
    Os[m * BN + c] = acc[t][0];
    Os[(m + 1) * BN + c] = acc[t][1];
    Os[m * BN + c + 8] = acc[t][2];
    Os[(m + 1) * BN + c + 8] = acc[t][3];
  }
}

// The epilogue of the wq kernels, once the tile's f32 sums are in Os (row m at Os + m * OSTR; the
// merged columns of the S streams in groups of 8) and its rows' statistics in rowstat: one call
// of epi per (row, pair of output columns), threads tid, tid + NT, ...
template <int BM, int BN, int S, int STATS, class Epi>
__device__ __forceinline__ void wq_apply(const GemmArgs &g, const Epi &epi, const float *Os, int OSTR,
                                         const float *rowstat, int m0, int n0, int tid, int NT) {
  constexpr int PAIRS = BN / S / 2;
  for (int i = tid; i < BM * PAIRS; i += NT) {
    const int m = i / PAIRS, cl = 2 * (i % PAIRS), row = m0 + m, col = n0 / S + cl;
    if (row >= g.M || col >= g.N) continue;
    float v[S][2];
#pragma unroll
    for (int s = 0; s < S; ++s)
#pragma unroll
      for (int e = 0; e < 2; ++e) { // merged column of stream s, column cl + e (groups of 8)
        const int c = cl + e;
        v[s][e] = Os[m * OSTR + (c / 8) * 8 * S + s * 8 + c % 8];
      }
    const float rsumsq = STATS ? rowstat[m] : 0.f, rsum = STATS == 2 ? rowstat[BM + m] : 0.f;
    epi(row, col, col + 1 < g.N ? 2 : 1, v, rsum, rsumsq);
  }
}

// The end of gemm_wq and gemm_wqd, once the CTA's sums are in Os ([BM][BN] f32) and its rows'
// statistics in rowstat ([2][BM]: sums of squares, sums), after a barrier: split-K (every split
// stores its sums; the last to arrive adds them in split order), then the epilogue, one call per
// (row, pair of output columns).
template <int BM, int BN, int THREADS, int S, int STATS, class Epi>
__device__ __forceinline__ void wq_finish(const GemmArgs &g, const Epi &epi, float *Os, float *rowstat, int m0,
                                          int n0) {
  constexpr int SLAB = BM * BN + 2 * BM;
  const int tid = threadIdx.x, splits = g.splits, z = blockIdx.z, M = g.M;
  if (splits > 1) {
    // only the tile's rows that hold tokens (Os is [BM][BN]: a prefix): at one token 1/8 of the
    // slab, whose stores the arrival's fence waits for and whose sums the last CTA reads (70B i4
    // sublayer at one token 6% faster on an H100). Tiles of 8 rows only: in those of 16 the
    // count cost a spill (ptxas, 128 registers) and 5% at 16 tokens (kernels/NOTES.md, twentieth
    // session, call 11).
    const int live = BM <= 8 ? imin(BM, M - m0) * BN : BM * BN;
    float *slab = g.ws + ((size_t)blockIdx.x * splits + z) * SLAB;
    for (int i = tid; i < live; i += THREADS) slab[i] = Os[i];
    if (STATS)
      for (int m = tid; m < 2 * BM; m += THREADS) slab[BM * BN + m] = rowstat[m];
    if (!gemm_splitk_arrive(g.counters + blockIdx.x, splits)) return;
    for (int i = tid; i < SLAB; i += THREADS) {
      if (!STATS && i >= BM * BN) break;
      if (i >= live && i < BM * BN) continue;
      float v = 0.f;
      for (int sp = 0; sp < splits; ++sp) v += ld_cg_f(g.ws + ((size_t)blockIdx.x * splits + sp) * SLAB + i);
      if (i < BM * BN) Os[i] = v;
      else rowstat[i - BM * BN] = v;
    }
    __syncthreads();
  }

  wq_apply<BM, BN, S, STATS>(g, epi, Os, BN, rowstat, m0, n0, tid, THREADS);
}


template <int BITS, int BM, int BN, int BK, int WN, int TPS, int STAGES, int S, int STATS, class T, class Epi>
__device__ __forceinline__ void gemm_wq(const GemmArgs &g, const float *__restrict__ scales, int group, const Epi &epi,
                                        char *smem) {
  typedef typename WqWeight<T>::type W;
  constexpr int WARPS = BN / 16, THREADS = WARPS * 32, NT = BM / 8;
  constexpr int BLOCKS = BK / 32;     // 32-k blocks per tile: 2 (i4) or 1 (i8)
  constexpr bool GROUPED = BITS == 4; // i8: one scale per row, applied at the end
  static_assert(BITS == 8 || BITS == 4, "i8 or i4");
  static_assert(BK == WQ_TILE_K(BITS) && WN == 16 && BN % 16 == 0 && BM % 8 == 0 && BN % (8 * S) == 0, "tile shape");
  static_assert(S == 1 || S == 2, "S is 1 or 2");
  static_assert(wq_stages(BM, BN, BK, TPS, STAGES, (int)sizeof(T)) >= 3, "a ring of at least 3 stages");

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gq = lane >> 2, tq = lane & 3;
  const int M = g.M, N = g.N, K = g.K, R = S * N, splits = g.splits, z = blockIdx.z;
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (R + BN - 1) / BN;
  int tm, tn;
  gemm_tile_coords(blockIdx.x, tiles_m, tiles_n, tm, tn);
  const int m0 = tm * BM, n0 = tn * BN; // n0 in merged columns
  const int ktiles = (K + BK - 1) / BK, kblocks = (K + 31) / 32;
  const int t0 = (int)((long long)ktiles * z / splits);
  const int ntk = (int)((long long)ktiles * (z + 1) / splits) - t0;
  const int kb_end = imin(kblocks, (t0 + ntk) * BLOCKS);
  const int ngroups = BITS == 8 ? 1 : (int)wq_ngroups(K, group);
  const int gblocks = ngroups == 1 ? 0x7fffffff : (int)(wq_group_len(K, group) / 32); // G is a multiple of 32
  const int rb = n0 / 16 + warp;                                                   // this warp's 16-row block
  const bool active = rb * 16 < R;
  const int active_warps = imin(WARPS, (R - n0 + 15) / 16); // they share the row statistics
  const int r_lo = rb * 16 + gq, r_hi = r_lo + 8;
  const bool vec = (K & 7) == 0;

  // The ring: NS stages of TPS consecutive k tiles, each stage [codes: WARPS][TPS][32 lanes][16
  // bytes] [i4 scales: WARPS][TPS][BLOCKS][16 rows] [activations: TPS * BLOCKS][BM][32] of T
  // (quant.cuh: wq_stage_bytes), filled by cp.async NS - 1 stages ahead. A lane copies and later
  // reads its own 16 bytes of codes per tile (and for i4, lanes copy their warp's scales), so
  // those need no barrier; the activations, which all warps share, do: one per stage, so the
  // stage's bookkeeping (wait, barrier, addresses of the next fill) is paid once per TPS tiles.
  // Activation rows of 64 bytes: a quarter warp's 16-byte reads (two tokens) hit every bank
  // once. The CTA's sums reuse the space after the main loop.
  constexpr int NS = wq_stages(BM, BN, BK, TPS, STAGES, (int)sizeof(T)); // the ring's depth
  constexpr int CODE_B = WARPS * TPS * 512, SCALE_B = GROUPED ? WARPS * TPS * 128 : 0;
  constexpr int TILE_A = BLOCKS * BM * 32, STAGE_B = CODE_B + SCALE_B + TPS * TILE_A * (int)sizeof(T);
  static_assert(STAGE_B == wq_stage_bytes(BM, BN, BK, TPS, (int)sizeof(T)), "quant.cuh's stage layout");
  float *Os = (float *)smem;                                                           // [BM][BN]: the CTA's sums
  float *red = (float *)(smem + wq_ring_bytes(BM, BN, BK, TPS, STAGES, (int)sizeof(T))); // [2][WARPS][BM]
  float *rowstat = red + 2 * WARPS * BM; // [2][BM]: sum of squares, sum

  const T *__restrict__ Ag = (const T *)g.A;
  const uint4 *__restrict__ wp = (const uint4 *)g.B + wq_tile_index(rb, t0, ktiles) * 32 + lane; // + 8 tiles a k tile
  // i4: lane l copies the scale of row l % 16 of the warp's block for a tile's block l / 16
  const int sc_row = rb * 16 + lane % 16, sc_blk = lane / 16;
  const float *__restrict__ sc_base = scales + (long long)imin(sc_row, R - 1) * ngroups;
  const int nst = (ntk + TPS - 1) / TPS; // stages of the split's range

  // stage j of the split's range (tiles j * TPS ...) into ring slot `slot`; zeros past M, K and R
  auto fill = [&](int j, int slot) {
    if (j >= nst) return;
    char *stage = smem + slot * STAGE_B;
    if (active) {
#pragma unroll
      for (int u = 0; u < TPS; ++u) {
        const int tile = j * TPS + u;
        if (tile >= ntk) break;
        cp_async16(smem_addr(stage + (warp * TPS + u) * 512 + lane * 16), wp + tile * 32 * WQ_RB_GROUP, true);
        if (GROUPED) {
          const int kb = (t0 + tile) * BLOCKS + sc_blk, gi = imin(kb / gblocks, ngroups - 1);
          cp_async4(smem_addr(stage + CODE_B + (warp * TPS + u) * 128 + lane * 4), sc_base + gi, sc_row < R);
        }
      }
    }
    T *dst = (T *)(stage + CODE_B + SCALE_B);
    const int kt0 = (t0 + j * TPS) * BK;
    constexpr int PER = 16 / (int)sizeof(T), CHUNKS = TPS * TILE_A / PER; // 16-byte pieces
    for (int c = tid; c < CHUNKS; c += THREADS) {
      const int b = c / (BM * 32 / PER), m = c / (32 / PER) % BM, kk = c % (32 / PER) * PER;
      const int row = m0 + m, k = kt0 + b * 32 + kk;
      T *d = dst + (b * BM + m) * 32 + kk;
      if (vec) {
        const bool ok = row < M && k < K; // K % 8 == 0: a piece is all in or all out
        cp_async16(smem_addr(d), ok ? (const void *)(Ag + (size_t)row * K + k) : (const void *)Ag, ok);
      } else {
#pragma unroll
        for (int e = 0; e < PER; ++e)
          d[e] = row < M && k + e < K ? Ag[(size_t)row * K + k + e] : from_f32<T>(0.f);
      }
    }
  };

  float acc[NT][4], tmp[NT][4], ssq[NT], ssum[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    ssq[t] = ssum[t] = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[t][i] = tmp[t][i] = 0.f;
  }

  {
#pragma unroll
    for (int j = 0; j < NS - 1; ++j) {
      fill(j, j);
      cp_async_commit();
    }
    float s_lo = 0.f, s_hi = 0.f;
    // where the range starts in its group, and whose turn it is for the row statistics; running
    // counters, no division per block
    int gpos = t0 * BLOCKS % gblocks, turn = t0 * BLOCKS % active_warps;
    int slot = 0, fslot = NS - 1; // the stage read, and the one filled, in the ring
    for (int st = 0; st < nst; ++st) {
      cp_async_wait<NS - 2>(); // stage st has landed (this thread's pieces) ...
      __syncthreads();         // ... everybody's, and slot fslot (read in the last round) is free
      fill(st + NS - 1, fslot);
      cp_async_commit();
      fslot = fslot + 1 == NS ? 0 : fslot + 1;
      const char *stage = smem + slot * STAGE_B;
      slot = slot + 1 == NS ? 0 : slot + 1;
      if (!active) continue;
#pragma unroll
      for (int u = 0; u < TPS; ++u) {
        const int it = st * TPS + u;
        if (it >= ntk) break;
        const uint4 cur = *(const uint4 *)(stage + (warp * TPS + u) * 512 + lane * 16);
        const u32 word[4] = {cur.x, cur.y, cur.z, cur.w};
        const float *sc = (const float *)(stage + CODE_B + (warp * TPS + u) * 128);
        const T *at = (const T *)(stage + CODE_B + SCALE_B) + u * TILE_A;
#pragma unroll
        for (int b = 0; b < BLOCKS; ++b) {
          const int kb = (t0 + it) * BLOCKS + b; // 32-k block
          if (kb >= kb_end) break;               // the second half of the last i4 tile, past K
          if (GROUPED && (kb == t0 * BLOCKS || gpos == 0)) { // a group starts: its scales
            s_lo = sc[b * 16 + gq];
            s_hi = sc[b * 16 + gq + 8];
          }
          const bool stats = STATS && turn == warp;
          turn = turn + 1 == active_warps ? 0 : turn + 1;
          wq_block<BITS, NT, STATS, T, W>(
              word, b, [&](int t) { return at + (b * BM + t * 8 + gq) * 32 + 8 * tq; }, stats, GROUPED ? tmp : acc, ssq,
              ssum);
          if (++gpos == gblocks) gpos = 0;
          if (GROUPED && (gpos == 0 || kb + 1 == kb_end)) { // the group ends: scale and add
#pragma unroll
            for (int t = 0; t < NT; ++t) {
              acc[t][0] = fmaf(tmp[t][0], s_lo, acc[t][0]);
              acc[t][1] = fmaf(tmp[t][1], s_lo, acc[t][1]);
              acc[t][2] = fmaf(tmp[t][2], s_hi, acc[t][2]);
              acc[t][3] = fmaf(tmp[t][3], s_hi, acc[t][3]);
#pragma unroll
              for (int i = 0; i < 4; ++i) tmp[t][i] = 0.f;
            }
          }
        }
      }
    }
    cp_async_wait<0>();
    __syncthreads(); // the ring is read: Os takes its place
  }

  if (!GROUPED && active) { // i8: times the row's scale
    const float s_lo = r_lo < R ? scales[r_lo] : 0.f, s_hi = r_hi < R ? scales[r_hi] : 0.f;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      acc[t][0] *= s_lo, acc[t][1] *= s_lo;
      acc[t][2] *= s_hi, acc[t][3] *= s_hi;
    }
  }

  // ---- the warps' sums, and the row statistics, into smem ----
  wq_store<NT, BN>(Os, acc, warp, gq, tq);
  if (STATS) {
#pragma unroll
    for (int t = 0; t < NT; ++t) { // the four lanes of a token hold different k
      float q = group_sum<4>(ssq[t]), s = STATS == 2 ? group_sum<4>(ssum[t]) : 0.f;
      if (tq == 0) {
        red[warp * BM + t * 8 + gq] = q;
        red[(WARPS + warp) * BM + t * 8 + gq] = s;
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

  wq_finish<BM, BN, THREADS, S, STATS>(g, epi, Os, rowstat, m0, n0);
}

} // namespace ffn
