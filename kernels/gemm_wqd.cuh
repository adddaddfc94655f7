// gemm_wqd.cuh: gemm_wq's product (weight-only i8 / i4 B, kernels/quant.cuh's packed layout,
// the same epilogue contract) for decode sizes, M <= 16, streaming the codes at the copy rate.
//
//   template <int BITS, int BM, int BN, int DEPTH, int CT, int S, int STATS, class T, class Epi>
//   __device__ void gemm_wqd(const GemmArgs &g, const float *scales, int group, const Epi &epi, char *smem);
//
// BM = 8 x (token tiles), BN = 16 x warps, DEPTH = k tiles of codes in flight per lane, CT = k
// tiles per chunk of activations (a multiple of DEPTH). Grid and split-K as gemm_wq; BN * 2
// threads; dynamic smem wqd_smem_bytes(BM, BN, BK, CT, DEPTH, sizeof(T)) (quant.cuh).
//
// Why another kernel (kernels/NOTES.md, 2026-12-01): gemm_wq puts everything through one
// cp.async ring with a CTA barrier per stage, ~300 instructions per warp per 512-byte tile; at
// one token it is issue-bound at a quarter of the copy rate for i4. Here:
// - Each lane streams its own 16 bytes of every tile of its warp's 16 rows through its own
//   ring of DEPTH slots in shared memory, DEPTH - 1 tiles ahead (cp.async): it copies and reads
//   back only its own bytes, so the codes need no barrier. (Registers loaded DEPTH tiles ahead
//   were the first version: ptxas moved the loads next to their use, and every tile waited for
//   DRAM, 1.2 us per tile at 17% of the copy rate.)
// - The activations and the i4 scales of the CTA come in chunks of CT tiles through a
//   double-buffered cp.async pair of buffers: two barriers per chunk (16-32 tiles), not per tile.
// - i4 with bf16 (or f32) activations: a code c becomes the bf16 128 + c with one shift and one
//   lop3, and the MMA sums a_k (128 + c_k) = a_k q_k + 136 a_k; the 136 sum_k a_k of each group
//   is taken off before the group's scale is applied, from sums of the activations computed once
//   per chunk for all warps (bsum). Two instructions per pair of weights instead of three. (f16
//   keeps gemm_wq's subtraction: its 1024 + c leaves too few bits for the difference.)
// The row statistics (sums of squares and sums of A's rows, STATS) come from the same per-chunk
// pass, summed at the end in a fixed order.
#pragma once
#include "gemm_wq.cuh"

namespace ffn {

// i4 word w as A fragment registers holding 128 + c (bf16): nibbles i and i + 4 into the
// mantissa of 128.0, no offset (see above)
__device__ __forceinline__ void wq_frag_i4_biased(u32 w, u32 (&a)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) a[i] = and_or(w >> (4 * i), 0x000f000fu, 0x43004300u);
}

// s += the 32 values at p (16-byte aligned, shared memory), s2 += their squares
template <class T> __device__ __forceinline__ void wq_sum32(const T *p, float &s, float &s2) {
#pragma unroll
  for (int e = 0; e < 32 * (int)sizeof(T) / 16; ++e) {
    const uint4 v = ((const uint4 *)p)[e];
    const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float lo, hi;
      if (sizeof(T) == 4) lo = __uint_as_float(w[i]), hi = 0.f;
      else unpack2<typename WqWeight<T>::type>(w[i], lo, hi);
      s += lo + hi;
      s2 = fmaf(lo, lo, fmaf(hi, hi, s2));
    }
  }
}

template <int BITS, int BM, int BN, int DEPTH, int CT, int S, int STATS, class T, class Epi>
__device__ __forceinline__ void gemm_wqd(const GemmArgs &g, const float *__restrict__ scales, int group,
                                         const Epi &epi, char *smem) {
  typedef typename WqWeight<T>::type W;
  constexpr int WARPS = BN / 16, THREADS = WARPS * 32, NT = BM / 8, BK = WQ_TILE_K(BITS);
  constexpr int BLOCKS = BK / 32, NBLK = CT * BLOCKS;   // 32-k blocks per tile, per chunk
  constexpr bool I4 = BITS == 4, FOLD = I4 && sizeof(T) == 2 && !WqIsF16<W>::value; // bf16 activations
  constexpr bool PASS = FOLD || STATS;                   // the per-chunk pass over the activations
  constexpr int ACT_B = NBLK * BM * 32 * (int)sizeof(T); // one chunk's activations, bytes
  constexpr int SC_B = I4 ? NBLK * BN * 4 : 0;           // one chunk's i4 scales, bytes
  constexpr int ITEMS = BM * NBLK, IPT = (ITEMS + THREADS - 1) / THREADS; // the pass: (token, block) sums
  static_assert(BITS == 8 || BITS == 4, "i8 or i4");
  static_assert(BN % 16 == 0 && BM % 8 == 0 && BN % (8 * S) == 0 && (S == 1 || S == 2), "tile shape");
  static_assert(CT % DEPTH == 0 && THREADS % BM == 0, "chunks of whole prefetch rounds");
  constexpr int SMEM = wqd_smem_bytes(BM, BN, BK, CT, DEPTH, (int)sizeof(T));
  static_assert(wqd_bufs_bytes(BM, BN, BK, CT, DEPTH, (int)sizeof(T)) ==
                        2 * (ACT_B + SC_B) + (I4 ? ITEMS * 4 : 0) + WARPS * DEPTH * 512 &&
                    SMEM >= 2 * (ACT_B + SC_B) + (I4 ? ITEMS * 4 : 0) + 8 * BM &&
                    SMEM >= 4 * (BM * BN + 2 * ITEMS) + 8 * BM,
                "quant.cuh's layout");

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gq = lane >> 2, tq = lane & 3;
  const int M = g.M, N = g.N, K = g.K, R = S * N, splits = g.splits, z = blockIdx.z;
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (R + BN - 1) / BN;
  int tm, tn;
  gemm_tile_coords(blockIdx.x, tiles_m, tiles_n, tm, tn);
  const int m0 = tm * BM, n0 = tn * BN;
  const int ktiles = (K + BK - 1) / BK, kblocks = (K + 31) / 32;
  const int t0 = (int)((long long)ktiles * z / splits);
  const int ntk = (int)((long long)ktiles * (z + 1) / splits) - t0;
  const int kb_end = imin(kblocks, (t0 + ntk) * BLOCKS);
  const int ngroups = I4 ? (int)wq_ngroups(K, group) : 1;
  const int gblocks = ngroups == 1 ? 0x7fffffff : (int)(wq_group_len(K, group) / 32);
  const int rb = n0 / 16 + warp;
  const bool active = rb * 16 < R;
  const bool vec = (K & 7) == 0;
  const int nch = (ntk + CT - 1) / CT;

  T *act = (T *)smem;                             // [2][NBLK][BM][32]
  float *scs = (float *)(smem + 2 * ACT_B);       // [2][NBLK][BN]: each block's group scale per row
  float *bsum = (float *)(smem + 2 * (ACT_B + SC_B)); // [NBLK][BM]: sums of the chunk's blocks
  char *ring = smem + 2 * (ACT_B + SC_B) + (I4 ? ITEMS * 4 : 0) + warp * DEPTH * 512 + lane * 16; // [DEPTH] x 512
  float *rowstat = (float *)(smem + SMEM - 8 * BM); // [2][BM]

  // chunk c of the split's range (tiles c * CT ...) into buffer c & 1; zeros past M, K and R
  auto fill = [&](int c) {
    if (c >= nch) return;
    T *dst = act + (c & 1) * (NBLK * BM * 32);
    const int kt0 = (t0 + c * CT) * BK;
    constexpr int PER = 16 / (int)sizeof(T), PIECES = NBLK * BM * 32 / PER;
    for (int p = tid; p < PIECES; p += THREADS) {
      const int b = p / (BM * 32 / PER), m = p / (32 / PER) % BM, kk = p % (32 / PER) * PER;
      const int row = m0 + m, k = kt0 + b * 32 + kk;
      T *d = dst + (b * BM + m) * 32 + kk;
      if (vec) {
        const bool ok = row < M && k < K;
        cp_async16(smem_addr(d), ok ? (const void *)((const T *)g.A + (size_t)row * K + k) : g.A, ok);
      } else {
#pragma unroll
        for (int e = 0; e < PER; ++e)
          d[e] = row < M && k + e < K ? ((const T *)g.A)[(size_t)row * K + k + e] : from_f32<T>(0.f);
      }
    }
    if (I4) {
      float *sd = scs + (c & 1) * (NBLK * BN);
      const int kb0 = (t0 + c * CT) * BLOCKS;
      for (int p = tid; p < NBLK * BN; p += THREADS) {
        const int b = p / BN, r = n0 + p % BN, kb = kb0 + b;
        const int gi = imin(kb / gblocks, ngroups - 1);
        cp_async4(smem_addr(sd + p), scales + (long long)imin(r, R - 1) * ngroups + gi, r < R && kb < kblocks);
      }
    }
  };

  float acc[NT][4], tmp[NT][4], gs[NT][2], stq[IPT], sts[IPT];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    gs[t][0] = gs[t][1] = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[t][i] = tmp[t][i] = 0.f;
  }
#pragma unroll
  for (int u = 0; u < IPT; ++u) stq[u] = sts[u] = 0.f;

  const uint4 *__restrict__ wp = (const uint4 *)g.B + ((long long)rb * ktiles + t0) * 32 + lane;
  fill(0);
  cp_async_commit();
#pragma unroll
  for (int d = 0; d < DEPTH - 1; ++d) { // one group per tile, empty or not, so that the waits count tiles
    if (active && d < ntk) cp_async16(smem_addr(ring + d * 512), wp + d * 32, true);
    cp_async_commit();
  }

  float s_lo = 0.f, s_hi = 0.f;
  int gpos = t0 * BLOCKS % gblocks; // the block's place in its group
  for (int i0 = 0; i0 < ntk; i0 += DEPTH) {
    const int c = i0 / CT;
    if (i0 % CT == 0) { // a chunk starts: its activations and scales have landed, the other buffer is free
      // (groups after the chunk's: chunk 0, the first DEPTH - 1 tiles; later chunks, the CT tiles
      // of the chunk before, whose codes may stay in flight)
      if (c == 0) cp_async_wait<DEPTH - 1>();
      else cp_async_wait<CT>();
      __syncthreads();
      fill(c + 1);
      cp_async_commit();
      if (PASS) {
        const T *src = act + (c & 1) * (NBLK * BM * 32);
#pragma unroll
        for (int u = 0; u < IPT; ++u) {
          const int j = tid + u * THREADS; // block j / BM, token j % BM
          if (j >= ITEMS) break;
          float s = 0.f, s2 = 0.f;
          wq_sum32(src + j * 32, s, s2);
          if (FOLD) bsum[j] = s;
          if ((t0 + c * CT) * BLOCKS + j / BM < kb_end) stq[u] += s2, sts[u] += s; // the split's own k only
        }
        __syncthreads();
      }
    }
    const T *at = act + (c & 1) * (NBLK * BM * 32);
    const float *sc = scs + (c & 1) * (NBLK * BN) + warp * 16 + gq;
#pragma unroll
    for (int d = 0; d < DEPTH; ++d) {
      const int i = i0 + d;
      if (i >= ntk) break;
      // tile i + DEPTH - 1 into the slot tile i - 1 was read from; then tile i has landed
      if (active && i + DEPTH - 1 < ntk)
        cp_async16(smem_addr(ring + (d + DEPTH - 1) % DEPTH * 512), wp + (i + DEPTH - 1) * 32, true);
      cp_async_commit();
      cp_async_wait<DEPTH - 1>();
      if (!active) continue;
      const uint4 cur = *(const uint4 *)(ring + d * 512);
      const u32 word[4] = {cur.x, cur.y, cur.z, cur.w};
#pragma unroll
      for (int b = 0; b < BLOCKS; ++b) {
        const int kb = (t0 + i) * BLOCKS + b, lb = (i % CT) * BLOCKS + b;
        if (kb >= kb_end) break; // the second half of the last i4 tile, past K
        if (I4 && (kb == t0 * BLOCKS || gpos == 0)) { // a group starts: its scales
          s_lo = sc[lb * BN];
          s_hi = sc[lb * BN + 8];
        }
        u32 a[2][4];
        if (FOLD) {
          wq_frag_i4_biased(word[2 * b], a[0]);
          wq_frag_i4_biased(word[2 * b + 1], a[1]);
        } else if (I4) {
          wq_frag_i4<W>(word[2 * b], a[0]);
          wq_frag_i4<W>(word[2 * b + 1], a[1]);
        } else {
          wq_frag_i8<W>(word[0], word[1], a[0]);
          wq_frag_i8<W>(word[2], word[3], a[1]);
        }
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          WqAct<T> x;
          x.load(at + (lb * BM + t * 8 + gq) * 32 + 8 * tq);
          float(&dd)[4] = I4 ? tmp[t] : acc[t];
          wq_mma<T, W>(dd, a[0], x, 0);
          wq_mma<T, W>(dd, a[1], x, 1);
          if (FOLD) { // the tokens of this lane's C columns
            const float2 bs = *(const float2 *)(bsum + lb * BM + t * 8 + 2 * tq);
            gs[t][0] += bs.x, gs[t][1] += bs.y;
          }
        }
        if (++gpos == gblocks) gpos = 0;
        if (I4 && (gpos == 0 || kb + 1 == kb_end)) { // the group ends: offset off, scale, add
#pragma unroll
          for (int t = 0; t < NT; ++t) {
            if (FOLD) {
              tmp[t][0] = fmaf(-136.f, gs[t][0], tmp[t][0]);
              tmp[t][1] = fmaf(-136.f, gs[t][1], tmp[t][1]);
              tmp[t][2] = fmaf(-136.f, gs[t][0], tmp[t][2]);
              tmp[t][3] = fmaf(-136.f, gs[t][1], tmp[t][3]);
              gs[t][0] = gs[t][1] = 0.f;
            }
            acc[t][0] = fmaf(tmp[t][0], s_lo, acc[t][0]);
            acc[t][1] = fmaf(tmp[t][1], s_lo, acc[t][1]);
            acc[t][2] = fmaf(tmp[t][2], s_hi, acc[t][2]);
            acc[t][3] = fmaf(tmp[t][3], s_hi, acc[t][3]);
#pragma unroll
            for (int e = 0; e < 4; ++e) tmp[t][e] = 0.f;
          }
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads(); // the buffers are read: the sums take their place

  const int r_lo = rb * 16 + gq, r_hi = r_lo + 8;
  if (!I4 && active) { // i8: times the row's scale
    const float s0 = r_lo < R ? scales[r_lo] : 0.f, s1 = r_hi < R ? scales[r_hi] : 0.f;
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t][0] *= s0, acc[t][1] *= s0, acc[t][2] *= s1, acc[t][3] *= s1;
  }
  float *Os = (float *)smem, *part = Os + BM * BN; // [BM][BN], then [2][ITEMS]
  wq_store<NT, BN>(Os, acc, warp, gq, tq);
  if (STATS) {
#pragma unroll
    for (int u = 0; u < IPT; ++u) {
      const int j = tid + u * THREADS;
      if (j < ITEMS) part[j] = stq[u], part[ITEMS + j] = sts[u];
    }
  }
  __syncthreads();
  if (STATS && tid < BM) { // token tid: its blocks in order
    float s2 = 0.f, s = 0.f;
    for (int b = 0; b < NBLK; ++b) s2 += part[b * BM + tid], s += part[ITEMS + b * BM + tid];
    rowstat[tid] = s2, rowstat[BM + tid] = s;
  }
  __syncthreads();
  wq_finish<BM, BN, THREADS, S, STATS>(g, epi, Os, rowstat, m0, n0);
}

} // namespace ffn
