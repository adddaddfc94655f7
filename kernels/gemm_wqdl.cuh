// gemm_wqdl.cuh: gemm_wqd's product for i4 and i8 weights (kernels/quant.cuh's packed layout,
// the same epilogue contract), with less bookkeeping per tile of codes (kernels/NOTES.md, issue 9).
//
//   template <int BITS, int BM, int BN, int DEPTH, int CT, int S, int STATS, class T, int DESIGN, class Epi>
//   __device__ void gemm_wqdl(const GemmArgs &g, const float *scales, int group, const Epi &epi, char *smem);
//
// BITS = 4 or 8, BM = 8 x (token tiles), BN = 16 x warps, DEPTH = ring slots per lane, each a
// step of four k tiles (i4: 256 k, i8: 128 k; DEPTH - 1 steps in flight), CT = k tiles per chunk
// of activations, 4 x DEPTH (one chunk is one turn of the rings, unrolled: slots and activation
// offsets are constants). Grid and split-K as gemm_wq; BN * 2 threads; dynamic smem
// wqdl_smem_bytes(BITS, BM, BN, CT, DEPTH, sizeof(T)).
// DESIGN, how the levels q of the codes c (i4: c - 8, i8: c - 128) reach the MMA:
//   2: exact levels (i4 bf16: shift, lop3 and fma per register, as gemm_wqd; i8 bf16: byte
//      permute, two lop3 and fma, wqdl_frag8; f16: byte permute and fma, as gemm_wqd);
//   3: bf16 128 + c (shift and lop3 only); the offset, 136 x the sum of the unit's activations,
//      is the unit's accumulator's starting value, from sums computed once per chunk for the CTA;
//   4: as 3, the offset taken off by one more MMA per k16 step, with -136 as every weight.
//   (3 and 4: i4 only.)
// f16 activations take exact levels in every design (lop3 on the nibbles in place: 1024 + c
// and 1024 + 16 c, one fma each: the offset's 1032 x the sum would cost f16 results accuracy).
//
// gemm_wqd paid ~190 instructions per warp per 512-byte tile, ~140 of them bookkeeping. Here:
// - Splits and units on whole steps. A split covers whole steps of four tiles (i4: 256 k); a group
//   of G = 64 or 128 k is a unit, a longer one (a multiple of 256, or 0: all of K) is summed per
//   step, so the scale is applied at places the unrolled code knows (group is a literal of the
//   generated code). Other group lengths, and f32 activations, run gemm_wqd. i8 has one scale per
//   row: the step's products go straight into the result, scaled once after the loop.
// - Each lane's ring slot holds its 16 bytes of four tiles and (i4), copied by the warp's lanes, the
//   scales of the step's units for the warp's 16 rows: one copy, wait and __syncwarp per 2 KB.
//   Running pointers for the codes and the scales; the step past K (the split's last, when K is
//   not a multiple of 256) copies with bounds, the others without.
// - Activations in chunks of CT tiles, loaded into registers one chunk ahead (ld.global.nc:
//   the values cross the loop's back edge, so ptxas cannot sink the loads), stored to one of two
//   buffers at the chunk's start, where the same registers give the row statistics and (design 3)
//   the units' sums: one barrier per chunk, no statistics in the main loop.
#pragma once
#include "gemm_wqd.cuh"

namespace ffn {

template <class T> struct WqdlF32 { static constexpr bool value = false; };
template <> struct WqdlF32<float> { static constexpr bool value = true; };

// The A fragment registers of one k16 step from the lane's word w (quant.cuh: register i holds
// nibbles i and i + 4): exact levels c - 8, or with FOLD (bf16 only) 128 + c.
template <class W, bool FOLD> __device__ __forceinline__ void wqdl_frag(u32 w, u32 (&a)[4]) {
  if (WqIsF16<W>::value) { // nibbles at bits 0-3 and 16-19: 1024 + c; at 4-7 and 20-23: 1024 + 16 c
    const u32 w8 = w >> 8, lo = 0x000f000fu, hi = 0x00f000f0u, base = 0x64006400u;
    a[0] = fma2<f16>(and_or(w, lo, base), 0x3c003c00u, 0xe408e408u);  // x 1 - 1032
    a[1] = fma2<f16>(and_or(w, hi, base), 0x2c002c00u, 0xd480d480u);  // x 1/16 - 72
    a[2] = fma2<f16>(and_or(w8, lo, base), 0x3c003c00u, 0xe408e408u);
    a[3] = fma2<f16>(and_or(w8, hi, base), 0x2c002c00u, 0xd480d480u);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const u32 v = and_or(w >> (4 * i), 0x000f000fu, 0x43004300u); // 128 + c
      a[i] = FOLD ? v : fma2<bf16>(v, 0x3f803f80u, 0xc308c308u);    // - 136
    }
  }
}

// (a & b) ^ c in one instruction
__device__ __forceinline__ u32 and_xor(u32 a, u32 b, u32 c) {
  u32 d;
  asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// The A fragment registers of one k16 step from the lane's i8 words w0 (a[0], a[1]) and w1
// (a[2], a[3]) (quant.cuh: bytes 2i, 2i + 1 of the pair are register i's halves): exact levels
// c - 128. f16 as gemm_wq (1024 + c under the exponent byte 0x64, one fma). bf16, without
// gemm_wq's detour through f32 (two byte permutes, two f32 subtractions, a permute): the code
// under the byte 0x43 is the bf16 whose exponent's last bit is the code's top bit b7, so v with
// that bit cleared is 128 + (c & 127), and the level is v - 256 + 128 b7: one fma with the
// bf16 -256 (0xc380) whose exponent bit is flipped by b7 to -128 (0xc300). Each term and the sum
// are exact (|level| <= 128): four instructions per register instead of five.
template <class W> __device__ __forceinline__ void wqdl_frag8(u32 w0, u32 w1, u32 (&a)[4]) {
  if (WqIsF16<W>::value) {
    wq_frag_i8<W>(w0, w1, a);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const u32 v = __byte_perm(i < 2 ? w0 : w1, 0x43434343u, i % 2 ? 0x4342u : 0x4140u);
      a[i] = fma2<bf16>(v & 0xff7fff7fu, 0x3f803f80u, and_xor(v, 0x00800080u, 0xc380c380u));
    }
  }
}

// one 16-byte load of 8 elements of A, zeros where !ok (or, K % 8 != 0, element by element)
template <class T>
__device__ __forceinline__ uint4 wqdl_piece(const T *__restrict__ A, int row, int k, int K, int kend, bool ok,
                                            bool vec) {
  uint4 v = {0u, 0u, 0u, 0u};
  if (vec) {
    if (ok && k < kend)
      asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
          : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
          : "l"(A + (size_t)row * K + k));
  } else if (ok) {
    u16 e[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) e[i] = k + i < kend ? ((const u16 *)A)[(size_t)row * K + k + i] : (u16)0;
    v.x = e[0] | (u32)e[1] << 16, v.y = e[2] | (u32)e[3] << 16, v.z = e[4] | (u32)e[5] << 16,
    v.w = e[6] | (u32)e[7] << 16;
  }
  return v;
}

template <int BITS, int BM, int BN, int DEPTH, int CT, int S, int STATS, class T, int DESIGN, class Epi>
__device__ __forceinline__ void gemm_wqdl(const GemmArgs &g, const float *__restrict__ scales, int group,
                                          const Epi &epi, char *smem) {
  constexpr bool I4 = BITS == 4;
  constexpr int WQD_CT = I4 ? 8 : 16; // gemm_wqd's chunks where it runs in this kernel's place
  // f32 activations, and i4 group lengths that are no whole part or multiple of a step: gemm_wqd
  // (within this kernel's shared memory: wqdl_smem_bytes covers it)
  if constexpr (WqdlF32<T>::value) {
    gemm_wqd<BITS, BM, BN, 4, WQD_CT, S, STATS, T>(g, scales, group, epi, smem);
    return;
  } else {
    if (I4 && !(group == 0 || group == 64 || group == 128 || (group > 0 && group % 256 == 0))) {
      gemm_wqd<BITS, BM, BN, 4, WQD_CT, S, STATS, T>(g, scales, group, epi, smem);
      return;
    }
    typedef typename WqWeight<T>::type W;
    constexpr int WARPS = BN / 16, THREADS = WARPS * 32, NT = BM / 8, SPC = CT / 4;
    constexpr int BK = WQ_TILE_K(BITS), BPT = BK / 32, BPS = 4 * BPT; // 32-k blocks per tile, per step
    constexpr int SLOT = wqdl_slot_bytes(BITS);
    constexpr bool FOLD = I4 && (DESIGN == 3 || DESIGN == 4) && !WqIsF16<W>::value;
    constexpr bool SUMS = DESIGN == 3 && FOLD;  // the units' activation sums, per chunk
    constexpr int ACT_E = CT * BPT * BM * 32;   // one chunk's activations, elements ([block][BM][32])
    constexpr int PPT = CT * BK / 8;            // 16-byte pieces of a chunk per token
    constexpr int PIECES = BM * PPT / THREADS;  // ... per thread
    constexpr int SUMS_F = I4 ? CT * (BM / 2) * 4 : 0; // a buffer of units' sums, floats (units >= 64 k)
    constexpr int SMEM = wqdl_smem_bytes(BITS, BM, BN, CT, DEPTH, (int)sizeof(T));
    static_assert(BITS == 4 || BITS == 8, "i4 or i8");
    static_assert(I4 || DESIGN == 2, "i8: exact levels only");
    static_assert(sizeof(T) == 2, "16-bit activations");
    static_assert(BN % 16 == 0 && BM % 8 == 0 && BN % (8 * S) == 0 && (S == 1 || S == 2), "tile shape");
    static_assert(CT == 4 * DEPTH && DEPTH >= 2, "a chunk is a turn of the rings");
    static_assert(PPT % 32 == 0 && BM * PPT % THREADS == 0, "a warp's pieces are one token's");
    static_assert(SMEM >= 2 * ACT_E * 2 + WARPS * DEPTH * SLOT + 2 * SUMS_F * 4 + 8 * BM &&
                      SMEM >= 4 * BM * BN + 2 * (BM * PPT / 32) * 4 + 8 * BM,
                  "quant.cuh's layout");

    // i4: the unit of k summed before its scale is applied: a group of 64 or 128, else a step
    // (i8: the unit is the split, its scale applied after the loop; U, UPS and BPU unused)
    const int U = group == 64 || group == 128 ? group : 256, UPS = 256 / U, BPU = U / 32;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gq = lane >> 2, tq = lane & 3;
    const int M = g.M, N = g.N, K = g.K, R = S * N, splits = g.splits, z = blockIdx.z;
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (R + BN - 1) / BN;
    int tm, tn;
    gemm_tile_coords(blockIdx.x, tiles_m, tiles_n, tm, tn);
    const int m0 = tm * BM, n0 = tn * BN, mv = imin(BM, M - m0);
    const int ktiles = (K + BK - 1) / BK, ksteps = (ktiles + 3) / 4;
    const int s0 = (int)((long long)ksteps * z / splits), nst = (int)((long long)ksteps * (z + 1) / splits) - s0;
    const int t0 = 4 * s0, kbeg = BK * t0, kend = imin(K, 4 * BK * (s0 + nst)); // the split's k range
    const int ngroups = I4 ? (int)wq_ngroups(K, group) : 1;
    const int rb = n0 / 16 + warp;
    const bool active = rb * 16 < R;
    const bool vec = (K & 7) == 0;
    const int nch = (nst + SPC - 1) / SPC;

    T *act = (T *)smem;                                               // [2][CT*BPT][BM][32]
    char *rings = smem + 2 * ACT_E * 2;                               // [WARPS][DEPTH][SLOT]
    float *sums = (float *)(rings + WARPS * DEPTH * SLOT);            // i4: [2][CT][BM/2][4]
    float *Os = (float *)smem;                                        // after the loop: [BM][BN],
    float *part = Os + BM * BN;                                       // [2][BM * PPT / 32]
    float *rowstat = (float *)(smem + SMEM - 8 * BM);                 // [2][BM]

    // ---- the codes and (i4) scales: the lane's ring, a step (four tiles) per slot ----
    const uint4 *__restrict__ src = (const uint4 *)g.B + wq_tile_index(rb, t0, ktiles) * 32 + lane; // + 8 tiles a k tile
    char *ring = rings + warp * DEPTH * SLOT;
    const u32 ring_dst = smem_addr(ring) + lane * 16;
    // lane l copies the scales of row l % 16 for the step's units l / 16 and 2 + l / 16 (as many
    // as the step has: 1, 2 or 4), slot layout [unit][16 rows] after the codes
    const int sc_row = rb * 16 + lane % 16, u_l = lane / 16;
    const float *__restrict__ sc_row_base = scales + (long long)imin(sc_row, R - 1) * ngroups;
    const u32 sc_dst = smem_addr(ring) + 4 * 512 + lane * 4;
    const bool sc_copy = I4 && active && sc_row < R && u_l < UPS;
    // the group of unit u of step s: s * UPS + u (U = G), s * 256 / G (G a multiple of 256), 0 (G = 0)
    const int gsteps = group >= 256 ? group / 256 : 1;
    int sg = group == 0 ? 0 : group < 256 ? s0 * UPS + u_l : s0 / gsteps, sr = group >= 256 ? s0 % gsteps : 0;
    int kst = kbeg; // the k of the next step copied
    auto copy = [&](int j, int slot) { // step j of the split into ring slot `slot`
      if (active && j < nst) {
        const u32 d = ring_dst + slot * SLOT;
        const int left = ktiles - (t0 + 4 * j);
        if (left >= 4) {
#pragma unroll
          for (int u = 0; u < 4; ++u) cp_async16(d + u * 512, src + u * 32 * WQ_RB_GROUP, true);
        } else {
#pragma unroll
          for (int u = 0; u < 4; ++u) cp_async16(d + u * 512, u < left ? src + u * 32 * WQ_RB_GROUP : src, u < left);
        }
        src += 128 * WQ_RB_GROUP;
        if (I4) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int u = u_l + 2 * r;
            if (r == 0 || UPS == 4) {
              const int gi = sg + 2 * r;
              const bool ok = sc_copy && kst + u * U < K;
              cp_async4(sc_dst + slot * SLOT + r * 128, sc_row_base + (ok ? gi : 0), ok);
            }
          }
          kst += 256;
          if (group > 0 && group < 256) sg += UPS;
          else if (group >= 256) {
            const int step = ++sr == gsteps;
            sr -= step * gsteps, sg += step;
          }
        }
      }
      cp_async_commit(); // one group per step, empty or not, so that the waits count steps
    };

    // ---- the activations: a chunk in registers, one ahead ----
    // piece p = tid + THREADS i: token p / PPT, k 8 (p % PPT) of the chunk (coalesced per token)
    uint4 ahead[PIECES];
    auto load = [&](int c) {
#pragma unroll
      for (int i = 0; i < PIECES; ++i) {
        const int p = tid + THREADS * i, m = p / PPT, k = kbeg + c * CT * BK + 8 * (p % PPT);
        ahead[i] = wqdl_piece<T>((const T *)g.A, m0 + m, k, K, kend, m < mv && c < nch, vec);
      }
    };
    float ssq[PIECES], ssum[PIECES];
#pragma unroll
    for (int i = 0; i < PIECES; ++i) ssq[i] = ssum[i] = 0.f;
    // chunk c's registers into buffer c & 1, their statistics, and (SUMS) each unit's sum times
    // -136 into sums buffer c & 1 as [unit][token pair][4] (t0, t1, t0, t1: a C fragment's order)
    auto store = [&](int c) {
      T *buf = act + (c & 1) * ACT_E;
      float *sb = sums + (c & 1) * SUMS_F;
#pragma unroll
      for (int i = 0; i < PIECES; ++i) {
        const int p = tid + THREADS * i, m = p / PPT, q = p % PPT;
        if (m >= mv) continue; // warp-uniform; those rows stay zero (set before the loop)
        *(uint4 *)(buf + ((q / 4) * BM + m) * 32 + (q % 4) * 8) = ahead[i];
        if (STATS || SUMS) {
          const u32 w[4] = {ahead[i].x, ahead[i].y, ahead[i].z, ahead[i].w};
          float s = 0.f, sq = 0.f;
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float lo, hi;
            unpack2<T>(w[e], lo, hi);
            s += lo + hi;
            sq = fmaf(lo, lo, fmaf(hi, hi, sq));
          }
          ssq[i] += sq;
          if (STATS == 2) ssum[i] += s;
          if (SUMS) { // the unit's U / 8 pieces are as many lanes, aligned
#pragma unroll
            for (int o = 1; o < 32; o <<= 1)
              if (o < U / 8) s += __shfl_xor_sync(0xffffffffu, s, o);
            if (q % (U / 8) == 0) {
              float *d = sb + ((q / (U / 8)) * (BM / 2) + m / 2) * 4 + m % 2;
              d[0] = d[2] = -136.f * s;
            }
          }
        }
      }
    };

    float acc[NT][4];
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[t][e] = 0.f;

#pragma unroll
    for (int d = 0; d < DEPTH - 1; ++d) copy(d, d);
    load(0);
    // the rows past M stay zero in both buffers (their sums too: never written, read into
    // accumulators of columns that are not stored)
    for (int p = tid; p < 2 * CT * BPT * BM * 4; p += THREADS) {
      const int m = p / 4 % BM;
      if (m >= mv) *(uint4 *)(act + p * 8) = uint4{0u, 0u, 0u, 0u};
    }
    if (SUMS)
      for (int p = tid; p < 2 * SUMS_F; p += THREADS)
        if (p / 4 % (BM / 2) * 2 + p % 2 >= mv) sums[p] = 0.f; // [unit][pair][t0, t1, t0, t1]

    const T *act_lane = act + gq * 32 + 8 * tq; // the lane's activations: token gq, k 8 tq ... of a block
    for (int c = 0; c < nch; ++c) {
      store(c);
      __syncthreads(); // chunk c in buffer c & 1; buffer c + 1 & 1 (chunk c - 1) read by all
      load(c + 1);
      const T *at = act_lane + (c & 1) * ACT_E;
      const float *su = sums + (c & 1) * SUMS_F + tq * 4;
#pragma unroll
      for (int j = 0; j < SPC; ++j) {
        const int i = c * SPC + j;
        if (i >= nst) break;
        if (I4) __syncwarp(); // every lane has read the scales in the slot the copy refills
        copy(i + DEPTH - 1, (j + DEPTH - 1) % DEPTH);
        cp_async_wait<DEPTH - 1>(); // step i has landed (this lane's part) ...
        if (I4) __syncwarp();       // ... and the warp's scales
        if (!active) continue;
        const char *slot = ring + (j % DEPTH) * SLOT;
        float tmp[NT][4];
        uint4 cv; // the lane's 16 bytes of the tile, read when its first block starts
#pragma unroll
        for (int b = 0; b < BPS; ++b) { // the step's 32-k blocks
          const int unit = b / BPU;
          if (I4 && b % BPU == 0) { // the unit's accumulator starts at -136 x its sums, or zero
#pragma unroll
            for (int t = 0; t < NT; ++t) {
              if (SUMS) {
                const float4 v = *(const float4 *)(su + ((j * UPS + unit) * (BM / 2) + t * 4) * 4);
                tmp[t][0] = v.x, tmp[t][1] = v.y, tmp[t][2] = v.z, tmp[t][3] = v.w;
              } else {
#pragma unroll
                for (int e = 0; e < 4; ++e) tmp[t][e] = 0.f;
              }
            }
          }
          if (b % BPT == 0) cv = *(const uint4 *)(slot + (b / BPT) * 512 + lane * 16);
          u32 a[2][4];
          if (I4) {
            wqdl_frag<W, FOLD>(b % 2 ? cv.z : cv.x, a[0]);
            wqdl_frag<W, FOLD>(b % 2 ? cv.w : cv.y, a[1]);
          } else {
            wqdl_frag8<W>(cv.x, cv.y, a[0]);
            wqdl_frag8<W>(cv.z, cv.w, a[1]);
          }
#pragma unroll
          for (int t = 0; t < NT; ++t) {
            WqAct<T> x;
            x.load(at + ((j * BPS + b) * BM + t * 8) * 32);
            float(&d)[4] = I4 ? tmp[t] : acc[t]; // i8: one scale per row, after the loop
            wq_mma<T, W>(d, a[0], x, 0);
            wq_mma<T, W>(d, a[1], x, 1);
            if (DESIGN == 4 && FOLD) {
              const u32 off[4] = {0xc308c308u, 0xc308c308u, 0xc308c308u, 0xc308c308u}; // -136
              wq_mma<T, W>(d, off, x, 0);
              wq_mma<T, W>(d, off, x, 1);
            }
          }
          if (I4 && b % BPU == BPU - 1) { // the unit ends: times its scales
            const float *sc = (const float *)(slot + 4 * 512) + unit * 16;
            const float s_lo = sc[gq], s_hi = sc[gq + 8];
#pragma unroll
            for (int t = 0; t < NT; ++t) {
              acc[t][0] = fmaf(tmp[t][0], s_lo, acc[t][0]);
              acc[t][1] = fmaf(tmp[t][1], s_lo, acc[t][1]);
              acc[t][2] = fmaf(tmp[t][2], s_hi, acc[t][2]);
              acc[t][3] = fmaf(tmp[t][3], s_hi, acc[t][3]);
            }
          }
        }
      }
    }
    cp_async_wait<0>();
    __syncthreads(); // the buffers are read: the sums take their place

    if (!I4 && active) { // i8: times the row's scale
      const int r_lo = rb * 16 + gq, r_hi = r_lo + 8;
      const float s_lo = r_lo < R ? scales[r_lo] : 0.f, s_hi = r_hi < R ? scales[r_hi] : 0.f;
#pragma unroll
      for (int t = 0; t < NT; ++t) acc[t][0] *= s_lo, acc[t][1] *= s_lo, acc[t][2] *= s_hi, acc[t][3] *= s_hi;
    }
    wq_store<NT, BN>(Os, acc, warp, gq, tq);
    if (STATS) { // the warps' partials (a warp's pieces are one token's), summed per token in order
#pragma unroll
      for (int i = 0; i < PIECES; ++i) {
        const float q = group_sum<32>(ssq[i]), s = STATS == 2 ? group_sum<32>(ssum[i]) : 0.f;
        if (lane == 0) part[warp + WARPS * i] = q, part[BM * PPT / 32 + warp + WARPS * i] = s;
      }
    }
    __syncthreads();
    if (STATS && tid < BM) {
      float q = 0.f, s = 0.f;
      for (int w = tid * (PPT / 32); w < (tid + 1) * (PPT / 32); ++w) q += part[w], s += part[BM * PPT / 32 + w];
      rowstat[tid] = q, rowstat[BM + tid] = s;
    }
    __syncthreads();
    wq_finish<BM, BN, THREADS, S, STATS>(g, epi, Os, rowstat, m0, n0);
  }
}

} // namespace ffn
