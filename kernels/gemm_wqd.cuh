// gemm_wqd.cuh: gemm_wq's product (weight-only i8 / i4 B, kernels/quant.cuh's packed layout,
// the same epilogue contract) for decode sizes, M <= 16, streaming the codes at the copy rate.
//
//   template <int BITS, int BM, int BN, int DEPTH, int CT, int S, int STATS, class T, class Epi>
//   __device__ void gemm_wqd(const GemmArgs &g, const float *scales, int group, const Epi &epi, char *smem);
//
// BM = 8 x (token tiles), BN = 16 x warps, DEPTH = ring slots per lane, each a step of two k
// tiles (DEPTH - 1 steps in flight), CT = k tiles per chunk of activations (a multiple of
// 2 DEPTH). Grid and split-K as
// gemm_wq; BN * 2 threads; dynamic smem wqd_smem_bytes(BM, BN, BK, CT, DEPTH, sizeof(T))
// (quant.cuh).
//
// Why another kernel (kernels/NOTES.md, 2026-12-01): gemm_wq puts everything through one
// cp.async ring with a CTA barrier per stage, ~300 instructions per warp per 512-byte tile; at
// one token it is issue-bound at a quarter of the copy rate for i4. Here:
// - Each lane streams its own 16 bytes of every tile of its warp's 16 rows, and for i4 the
//   scales of two (row, 32-k block) pairs of the step, through its own ring of DEPTH slots of
//   two tiles in shared memory, DEPTH - 1 steps ahead (cp.async): the bookkeeping of a copy,
//   wait and read is paid per 1 KB of codes (one tile per step was 2-6% slower). The codes need no barrier at all (a lane reads
//   back only what it copied), the scales a __syncwarp. The group of each copied scale advances
//   by a counter, no division. (Registers loaded DEPTH tiles ahead were the first version:
//   ptxas moved the loads next to their use and every tile waited for DRAM, 17% of the copy
//   rate.)
// - The activations come in chunks of CT tiles through two buffers filled by cp.async one chunk
//   ahead: one barrier per chunk (8-16 tiles).
// - Row statistics (STATS) in the loop: each 32-k block's are summed by one warp, in turn.
#pragma once
#include "gemm_wq.cuh"

namespace ffn {

template <bool B> struct BoolC { static constexpr bool value = B; };

template <int BITS, int BM, int BN, int DEPTH, int CT, int S, int STATS, class T, class Epi>
__device__ __forceinline__ void gemm_wqd(const GemmArgs &g, const float *__restrict__ scales, int group,
                                         const Epi &epi, char *smem) {
  typedef typename WqWeight<T>::type W;
  constexpr int WARPS = BN / 16, THREADS = WARPS * 32, NT = BM / 8, BK = WQ_TILE_K(BITS);
  constexpr int BLOCKS = BK / 32;                         // 32-k blocks per tile
  constexpr int TPS = 2, SB = TPS * BLOCKS;               // tiles and blocks per ring step
  constexpr bool I4 = BITS == 4;
  constexpr int ACT_B = CT * BLOCKS * BM * 32 * (int)sizeof(T); // one chunk's activations, bytes
  constexpr int SLOT_B = wqd_slot_bytes(BK);              // a warp's ring slot: codes (+ i4 scales)
  constexpr int SMEM = wqd_smem_bytes(BM, BN, BK, CT, DEPTH, (int)sizeof(T));
  static_assert(BITS == 8 || BITS == 4, "i8 or i4");
  static_assert(BN % 16 == 0 && BM % 8 == 0 && BN % (8 * S) == 0 && (S == 1 || S == 2), "tile shape");
  static_assert(CT % (TPS * DEPTH) == 0 && DEPTH >= 2, "chunks of whole ring rounds");
  static_assert(SMEM >= 2 * ACT_B + WARPS * DEPTH * SLOT_B + 8 * BM &&
                    SMEM >= 4 * BM * BN + 8 * WARPS * BM + 8 * BM,
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
  const int active_warps = imin(WARPS, (R - n0 + 15) / 16); // they share the row statistics
  const bool vec = (K & 7) == 0;
  const int nch = (ntk + CT - 1) / CT;
  const int nst = (ntk + TPS - 1) / TPS; // ring steps of the split's range

  T *act = (T *)smem;                                  // [2][CT * BLOCKS][BM][32]
  char *slots = smem + 2 * ACT_B + warp * DEPTH * SLOT_B; // the warp's ring: [DEPTH][SLOT_B]
  float *Os = (float *)smem;                           // after the loop: [BM][BN], then
  float *red = Os + BM * BN;                           // [2][WARPS][BM]
  float *rowstat = (float *)(smem + SMEM - 8 * BM);    // [2][BM]

  // chunk c of the split's range (tiles c * CT ...) into buffer c & 1; zeros past M and K
  auto fill = [&](int c) {
    if (c >= nch) return;
    T *dst = act + (c & 1) * (ACT_B / (int)sizeof(T));
    const int kt0 = (t0 + c * CT) * BK;
    constexpr int PER = 16 / (int)sizeof(T), PIECES = CT * BLOCKS * BM * 32 / PER;
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
  };

  // Tile j's codes (and i4: lane l's scale, row l % 16, block l / 16) into ring slot j % DEPTH
  // (`slot`, a constant where the loops are unrolled); tiles are copied in order. The codes'
  // source is a running pointer; the scale's group a 32-bit index sg with sr, the place in the
  // group of block (t0 + j) * BLOCKS + l / 16, advanced BLOCKS (<= 2) blocks per tile without
  // branches; blocks past K copy the last group's (never used). (Recomputing the addresses from
  // the tile index, or clamping a 64-bit pointer, cost 30-45 instructions per tile.)
  const uint4 *__restrict__ src = (const uint4 *)g.B + wq_tile_index(rb, t0, ktiles) * 32 + lane; // + 8 tiles a k tile
  const int sc_row = rb * 16 + lane % 16;
  const float *__restrict__ sc_row_base = scales + (long long)imin(sc_row, R - 1) * ngroups;
  const u32 code_dst = smem_addr(slots) + lane * 16, sc_dst = smem_addr(slots) + TPS * 512 + lane * 4;
  // lane l copies the scales of a step's blocks l / 16 and 2 + l / 16: groups sg[h], places in
  // them sr[h]; a step advances them SB blocks: qs whole groups and rs more blocks
  int sg[2] = {0, 0}, sr[2] = {0, 0};
  const int qs = SB / gblocks, rs = SB % gblocks;
  if (I4) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int kb = t0 * BLOCKS + 2 * h + lane / 16;
      sg[h] = kb / gblocks, sr[h] = kb % gblocks;
    }
  }
  const bool copying = active && (!I4 || sc_row < R);
  // step j (tiles 2j, 2j + 1 of the range) into ring slot `slot`
  auto copy = [&](int j, int slot) {
    if (active && TPS * j < ntk) {
      const bool two = TPS * j + 1 < ntk;
      cp_async16(code_dst + slot * SLOT_B, src, true);
      cp_async16(code_dst + slot * SLOT_B + 512, two ? src + 32 * WQ_RB_GROUP : src, two);
      src += 64 * WQ_RB_GROUP;
      if (I4) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          cp_async4(sc_dst + slot * SLOT_B + h * 128, sc_row_base + imin(sg[h], ngroups - 1), copying);
          sr[h] += rs, sg[h] += qs;
          const int step = sr[h] >= gblocks;
          sr[h] -= step * gblocks, sg[h] += step;
        }
      }
    }
    cp_async_commit(); // one group per step, empty or not, so that the waits count steps
  };

  float acc[NT][4], tmp[NT][4], ssq[NT], ssum[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    ssq[t] = ssum[t] = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[t][i] = tmp[t][i] = 0.f;
  }

  fill(0);
  cp_async_commit();
#pragma unroll
  for (int d = 0; d < DEPTH - 1; ++d) copy(d, d);

  float s_lo = 0.f, s_hi = 0.f;
  int gpos = t0 * BLOCKS % gblocks;               // the block's place in its group
  int turn = t0 * BLOCKS % imax(active_warps, 1); // whose turn it is for the row statistics
  bool first = true;                              // the split's first block (maybe mid-group)
  auto flush = [&]() { // a group's sums, times its scales, into the result
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      acc[t][0] = fmaf(tmp[t][0], s_lo, acc[t][0]);
      acc[t][1] = fmaf(tmp[t][1], s_lo, acc[t][1]);
      acc[t][2] = fmaf(tmp[t][2], s_hi, acc[t][2]);
      acc[t][3] = fmaf(tmp[t][3], s_hi, acc[t][3]);
#pragma unroll
      for (int e = 0; e < 4; ++e) tmp[t][e] = 0.f;
    }
  };

  // a chunk starts at tile i0: its activations have landed, the other buffer is free (groups
  // after the chunk's: for chunk 0 the first DEPTH - 1 tiles, later the CT tiles of the chunk
  // before, whose codes stay in flight)
  auto chunk = [&](int s0) { // s0: a step; its tiles start a chunk?
    if (TPS * s0 % CT != 0) return;
    if (s0 == 0) cp_async_wait<DEPTH - 1>();
    else cp_async_wait<CT / TPS>();
    __syncthreads();
    fill(TPS * s0 / CT + 1);
    cp_async_commit();
  };

  // Tile i from ring slot d (i % DEPTH); `at`: this lane's activations of the round's first
  // block (token gq, k 8 tq ... 8 tq + 7 of the block), so that the offsets are constants.
  // LAST: the split's last tile, whose second 32-k block may lie past K.
  auto tile = [&](int i, int d, const T *at, auto last) { // i: a step
    constexpr bool LAST = decltype(last)::value;
    if (I4) __syncwarp(); // every lane has read step i - 1's scales (other lanes copied them) ...
    copy(i + DEPTH - 1, (d + DEPTH - 1) % DEPTH); // ... before its slot is refilled
    cp_async_wait<DEPTH - 1>();                   // step i has landed (this lane's part) ...
    if (I4) __syncwarp();                         // ... and the warp's scales
    if (!active) return;
    const char *slot = slots + d * SLOT_B;
    const uint4 c0 = *(const uint4 *)(slot + lane * 16), c1 = *(const uint4 *)(slot + 512 + lane * 16);
    const u32 words[2][4] = {{c0.x, c0.y, c0.z, c0.w}, {c1.x, c1.y, c1.z, c1.w}};
#pragma unroll
    for (int b = 0; b < SB; ++b) {
      if (LAST && (t0 + TPS * i) * BLOCKS + b >= kb_end) break;
      const int lb = d * SB + b; // the block in the round (a constant: at is the round's)
      const u32(&word)[4] = words[b / BLOCKS];
      const int bb = b % BLOCKS;
      if (I4 && (gpos == 0 || first)) { // a group starts: its scales
        s_lo = *(const float *)(slot + TPS * 512 + (b * 16 + gq) * 4);
        s_hi = *(const float *)(slot + TPS * 512 + (b * 16 + gq + 8) * 4);
        first = false;
      }
      const bool stats = STATS && turn == warp;
      turn = turn + 1 == active_warps ? 0 : turn + 1;
      wq_block<BITS, NT, STATS, T, W>(
          word, bb, [&](int t) { return at + (lb * BM + t * 8) * 32; }, stats, I4 ? tmp : acc, ssq, ssum);
      if (I4 && ++gpos == gblocks) { // the group ends: scale and add
        gpos = 0;
        flush();
      }
    }
  };

  // whole rounds of DEPTH tiles, then the rest with the split's last tile (so the block loop
  // of every other tile has no bounds check)
  auto round_at = [&](int s0) { // the lane's activations of round s0's first block
    const int t = TPS * s0;
    return act + (t / CT & 1) * (ACT_B / (int)sizeof(T)) + (t % CT * BLOCKS * BM + gq) * 32 + 8 * tq;
  };
  int i0 = 0;
  for (; i0 + DEPTH < nst; i0 += DEPTH) {
    chunk(i0);
    const T *at = round_at(i0);
#pragma unroll
    for (int d = 0; d < DEPTH; ++d) tile(i0 + d, d, at, BoolC<false>());
  }
  if (i0 < nst) {
    chunk(i0);
    const T *at = round_at(i0);
#pragma unroll
    for (int d = 0; d < DEPTH; ++d) {
      if (i0 + d + 1 < nst) tile(i0 + d, d, at, BoolC<false>());
      else {
        tile(i0 + d, d, at, BoolC<true>());
        break;
      }
    }
  }
  if (I4 && active) flush(); // the split's last group, if it ends inside it
  cp_async_wait<0>();
  __syncthreads(); // the buffers are read: the sums take their place

  const int r_lo = rb * 16 + gq, r_hi = r_lo + 8;
  if (!I4 && active) { // i8: times the row's scale
    const float s0 = r_lo < R ? scales[r_lo] : 0.f, s1 = r_hi < R ? scales[r_hi] : 0.f;
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t][0] *= s0, acc[t][1] *= s0, acc[t][2] *= s1, acc[t][3] *= s1;
  }
  wq_store<NT, BN>(Os, acc, warp, gq, tq);
  if (STATS) {
#pragma unroll
    for (int t = 0; t < NT; ++t) { // the four lanes of a token hold different k
      const float q = group_sum<4>(ssq[t]), s = STATS == 2 ? group_sum<4>(ssum[t]) : 0.f;
      if (tq == 0) red[warp * BM + t * 8 + gq] = q, red[(WARPS + warp) * BM + t * 8 + gq] = s;
    }
  }
  __syncthreads();
  if (STATS && tid < BM) { // token tid: the warps' sums in order
    float q = 0.f, s = 0.f;
    for (int w = 0; w < WARPS; ++w) q += red[w * BM + tid], s += red[(WARPS + w) * BM + tid];
    rowstat[tid] = q, rowstat[BM + tid] = s;
  }
  __syncthreads();
  wq_finish<BM, BN, THREADS, S, STATS>(g, epi, Os, rowstat, m0, n0);
}

} // namespace ffn
