// gemm_wqrs.cuh: weight-only i4 products at prefill sizes on sm_90a with the weights as wgmma's
// register operand (issue 9; kernels/NOTES.md, thirty-sixth session). The product is computed
// transposed, C^T = W . X^T: each consumer warpgroup owns 64 merged weight rows (the M of
// wgmma m64nBMk16) and the CTA's BM tokens are the N, read from shared memory as the B operand
// (the activations' k-tile, loaded by TMA in the 128B swizzle, as gemm_sm90 loads its A). The
// codes never pass through shared memory as bf16: each consumer lane reads its 16 bytes of the
// row block's 512-byte tile (kernels/quant.cuh), and turns them into the A fragments of the
// k-tile's four k16 steps in registers.
//
//   template <int BM, int STAGES, int S, int STATS, class Epi>
//   __device__ void gemm_wqrs(const GemmArgs &g, const Epi &epi, char *smem);
//
// BM = 64 or 128 tokens per tile, 128 merged weight rows per tile (two consumer warpgroups, one
// 128-row group of the codes: one bulk copy a k-tile), k-tiles of 64. Grid (tiles_m * tiles_n, 1,
// splits) as gemm_sm90, 384 threads, wqrs_smem_bytes(BM, STAGES) (quant.cuh) of dynamic shared
// memory, the activations' tensor map in ((TmaMaps *)g.tma)->a with a box of 64 k x BM rows. g.B: the codes,
// g.qs: the scales [S*N, groups], g.qg: the group (0, or a multiple of 64). Epilogue: the wq
// kernels' functor (epi(row, col, ncols, v[S][2], rsum, rsumsq), gemm_wq.cuh: wq_finish).
//
// The codes' k order. quant.cuh permutes k within each 32-k block so that the decode kernels'
// lane t multiplies the eight consecutive k = 8t .. 8t + 7 (one 16-byte load of activations);
// wgmma's B operand comes in natural k order, so the fragments are permuted back across the quad
// of lanes that share a row (wqrs_frags): target lane t' of step s (16 k) takes register
// r' = 2c' + h (row g + 8h, k 16s + 8c' + 2t' + {0, 1}) from source lane 2s + c' of the quad,
// that lane's word of step t' / 2, nibble pair h + 2 (t' % 2). Two shuffles and a select a
// target word, then the levels as gemm_wqdl makes them (exact in bf16).
//
// Scales: the levels q are exact, so each group's products go into a register tile `tmp`
// (wgmma with scale-d 0 at the group's first step) and are added to the accumulator times the
// rows' f32 scales when the group ends ("promotion", as the fp8 products do for precision):
// result = sum over groups of s[row, group] * sum_k q * x, in f32 (the reference: sum_k
// (float)(q * s) * x in double). Groups must be whole k-tiles (G % 64 == 0, or one group).
//
// Warp roles: warp 0 of warpgroup 0 (one thread) issues each stage's copies: the activations'
// box by TMA and the codes' 4 KB by one bulk copy, both completing on full[s]; warpgroups 1 and 2
// multiply, and with STATS also sum each token row's squares (and values) from the stage under
// their wgmmas, as gemm_sm90's consumers do. A stage is free once the eight consumer warps have
// arrived on empty[s]. Within a group, k-tile j's wgmmas stay in flight while the consumer waits
// for k-tile j - 1's and converts k-tile j + 1's fragments; a group's end waits for all.
#pragma once
#include "gemm_sm80.cuh" // mma_16816 and cp.async, which gemm_wq.cuh uses
#include "gemm_sm90.cuh"
#include "gemm_wq.cuh"  // fma2, and_or

namespace ffn {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

// D[64 x N] (+)= A[64 x 16] . B[N x 16]^T: A from four registers per thread (the mma.sync
// m16n8k16 A fragment of warp w's rows 16w .. 16w + 15), B from shared memory (descriptor db,
// K-major); acc 0: D =.
template <int N> __device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], u32 a0, u32 a1, u32 a2, u32 a3, u64 db, int acc);
template <> __device__ __forceinline__ void wgmma_rs<64>(float (&d)[32], u32 a0, u32 a1, u32 a2, u32 a3, u64 db, int acc) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
               "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
               : FFN_WG_D32(0)
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(acc));
}
template <> __device__ __forceinline__ void wgmma_rs<128>(float (&d)[64], u32 a0, u32 a1, u32 a2, u32 a3, u64 db, int acc) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
               "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
               : FFN_WG_D32(0), FFN_WG_D32(32)
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(acc));
}

// The A fragments F[4 s + r] of the k-tile's four k16 steps s from the lane's words W of its row
// block's tile (the header: the codes' k order). Exact levels q = code - 8 as bf16.
__device__ __forceinline__ void wqrs_frags(const u32 (&W)[4], u32 (&F)[16], int lane) {
  const int t = lane & 3, quad = lane & ~3;
  const u32 sh = 8u * (u32)(t & 1);
  const bool hi = t >= 2;
#pragma unroll
  for (int b = 0; b < 2; ++b)
#pragma unroll
    for (int sg = 0; sg < 2; ++sg)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int src = quad + 2 * sg + c;
        const u32 x0 = __shfl_sync(0xffffffffu, W[2 * b], src), x1 = __shfl_sync(0xffffffffu, W[2 * b + 1], src);
        const u32 x = hi ? x1 : x0;
        u32 *f = &F[4 * (2 * b + sg) + 2 * c];
        f[0] = fma2<bf16>(and_or(x >> sh, 0x000f000fu, 0x43004300u), 0x3f803f80u, 0xc308c308u);        // row g
        f[1] = fma2<bf16>(and_or(x >> (sh + 4u), 0x000f000fu, 0x43004300u), 0x3f803f80u, 0xc308c308u); // row g + 8
      }
}

// One consumer k-tile: the stage's four k16 steps into tmp (fresh at a group's first k-tile).
template <int BM>
__device__ __forceinline__ void wqrs_mma(float (&tmp)[BM / 2], const u32 (&F)[16], u64 db, bool fresh) {
  wgmma_fence();
#pragma unroll
  for (int s = 0; s < 4; ++s)
    wgmma_rs<BM>(tmp, F[4 * s], F[4 * s + 1], F[4 * s + 2], F[4 * s + 3], db + (u64)((s * 32) >> 4),
                 fresh && s == 0 ? 0 : 1);
  wgmma_commit();
}

template <int BM, int STAGES, int S, int STATS, class Epi>
__device__ __forceinline__ void gemm_wqrs(const GemmArgs &g, const Epi &epi, char *smem) {
  constexpr int BN = 128, XB = BM * 128, STAGE = wqrs_stage_bytes(BM), OSTR = BN + 4;
  constexpr int SLAB = BM * BN + 2 * BM, NA = BM / 2; // split-K slab; accumulators per thread
  static_assert(BM == 64 || BM == 128, "BM: 64 or 128 tokens");
  static_assert(S == 1 || S == 2, "S is 1 or 2");
  static_assert(STATS >= 0 && STATS <= 2, "STATS is 0, 1 or 2");
  static_assert(STAGES >= 3 && BM * OSTR * 4 <= STAGES * STAGE, "ring, and the epilogue's tile within it");
  static_assert(wqrs_smem_bytes(BM, STAGES) <= FFN_SM90_MAX_SMEM, "shared memory");
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int M = g.M, R = S * g.N, K = g.K, splits = g.splits, z = blockIdx.z;
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (R + BN - 1) / BN;
  int tm, tn;
  gemm_tile_coords(blockIdx.x, tiles_m, tiles_n, tm, tn);
  const int m0 = tm * BM, n0 = tn * BN;
  const int ktiles = (K + 63) / 64, kt0 = (int)((long long)ktiles * z / splits);
  const int nk = (int)((long long)ktiles * (z + 1) / splits) - kt0;
  const long long G = wq_group_len(K, g.qg);
  const int ng = (int)wq_ngroups(K, G), kpg = (int)((G + 63) / 64); // k-tiles a group (G % 64 == 0)

  const u32 raw = smem_addr(smem), sbase = (raw + 1023u) & ~1023u;
  char *base = smem + (sbase - raw);
  const u32 bars = sbase + STAGES * STAGE; // full[s] at +8s, empty[s] at +8(STAGES + s)
  float *rowstat = (float *)(base + STAGES * STAGE + 16 * STAGES + 16); // [2][BM]: squares, sums
  float *Os = (float *)base;                                            // after the loop: [BM][OSTR]
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) mbar_init(bars + 8 * s, 1), mbar_init(bars + 8 * (STAGES + s), 8);
    fence_barrier_init();
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<40>();
    if (warp == 0 && lane == 0) { // ---- the copies ----
      const TmaMaps *t = (const TmaMaps *)g.tma;
      tma_prefetch_map(&t->a);
      const long long tk = wq_tiles_k(K, 4);
      const unsigned char *codes = (const unsigned char *)g.B;
      for (int j = 0, s = 0; j < nk; ++j) {
        const u32 full = bars + 8 * s, dst = sbase + s * STAGE;
        if (j >= STAGES) mbar_wait(bars + 8 * (STAGES + s), (u32)((j / STAGES - 1) & 1));
        mbar_expect_tx(full, (u32)STAGE);
        tma_load_2d(dst, &t->a, (kt0 + j) * 64, m0, full);
        bulk_load(dst + XB, codes + wq_tile_index(n0 / 16, kt0 + j, tk) * 512, 8 * 512, full);
        if (++s == STAGES) s = 0;
      }
    }
    return;
  }
  // ---- consumers: warpgroup wg - 1 owns merged rows 64 (wg - 1) .. of the tile ----
  setmaxnreg_inc<232>();
  const int w = warp & 3, u = 4 * (wg - 1) + w; // the warp's row block in the tile
  const int r0 = n0 + 16 * u + (lane >> 2);     // the lane's merged rows r0 and r0 + 8
  const u64 db0 = wgmma_desc_sw128(sbase);
  float acc[NA], tmp[NA];
#pragma unroll
  for (int i = 0; i < NA; ++i) acc[i] = 0.f;
  u32 FA[16], FB[16], W[4];
  // STATS: the 256 consumer threads sum the squares (and values) of the stages' activations, SPR
  // threads a token row, CPT 16-byte chunks each a k-tile, while the wgmmas run
  constexpr int SPR = 256 / BM, CPT = 8 / SPR;
  const int ct = tid - 128;
  float q[4] = {0.f, 0.f, 0.f, 0.f}, sm[4] = {0.f, 0.f, 0.f, 0.f}; // four chains each
  // scales of the lane's two rows for group gi (0 past the rows: those weights are zero)
  auto scales = [&](int gi, float &s0, float &s1) {
    s0 = r0 < R ? __ldg(g.qs + (long long)r0 * ng + gi) : 0.f;
    s1 = r0 + 8 < R ? __ldg(g.qs + (long long)(r0 + 8) * ng + gi) : 0.f;
  };
  auto fetch = [&](int j) { // k-tile j's codes (the lane's 16 bytes of its row block's tile)
    const int s = j % STAGES;
    mbar_wait(bars + 8 * s, (u32)((j / STAGES) & 1));
    lds128(sbase + s * STAGE + XB + u * 512 + lane * 16, W[0], W[1], W[2], W[3]);
  };
  auto release = [&](int j) { // k-tile j's wgmmas have completed: its stage is free
    __syncwarp();
    if (lane == 0) mbar_arrive(bars + 8 * (STAGES + j % STAGES));
  };
  // k-tile j: its wgmmas (fragments F) into tmp; under them, the statistics' loads from the stage,
  // k-tile j + 1's codes, the statistics' sums (their loads' latency behind the codes'), and, once
  // k-tile j - 1's wgmmas have completed (its fragments Fn are free), k-tile j + 1's fragments.
  // tmp is added to acc at the end of each pair of k-tiles and of each group (the loop's back edge
  // then has no wgmma in flight: ptxas would wait there), and the scales move on at a group's end.
  // (kernels/NOTES.md, thirty-seventh session: no faster than summing them right after their loads;
  // the statistics' cost, ~20% at 128 tokens, is their instructions. The four chains keep their
  // sums' error ~1e-6.)
  auto step = [&](int j, bool odd, const u32 (&F)[16], u32 (&Fn)[16], float &s0, float &s1) {
    const int kt = kt0 + j, s = j % STAGES;
    const bool gend = j + 1 == nk || (kt + 1) % kpg == 0;
    const bool first = !odd || j == 0 || kt % kpg == 0, last = odd || gend;
    wqrs_mma<BM>(tmp, F, db0 + (u64)((s * STAGE) >> 4), first);
    u32 x[CPT][4];
    if (STATS) // row ct / SPR of the stage's activations, chunks (ct % SPR) * CPT ..
#pragma unroll
      for (int c = 0; c < CPT; ++c)
        lds128(sbase + s * STAGE + (ct / SPR) * 128 + 16 * ((ct % SPR) * CPT + c), x[c][0], x[c][1], x[c][2], x[c][3]);
    if (j + 1 < nk) fetch(j + 1);
    if (STATS)
#pragma unroll
      for (int c = 0; c < CPT; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float lo = bf16_bits_to_f32((u16)(x[c][e] & 0xffffu)), hi = bf16_bits_to_f32((u16)(x[c][e] >> 16));
          q[e] = fmaf(lo, lo, fmaf(hi, hi, q[e]));
          if (STATS == 2) sm[e] += lo + hi;
        }
    if (!first) {
      wgmma_wait<1>();
      release(j - 1);
    }
    if (j + 1 < nk) wqrs_frags(W, Fn, lane);
    if (last) {
      wgmma_wait<0>();
      reg_fence(tmp);
      release(j);
#pragma unroll
      for (int i = 0; i < NA; ++i) acc[i] = fmaf((i & 2) ? s1 : s0, tmp[i], acc[i]);
      if (gend && j + 1 < nk) scales((kt + 1) / kpg, s0, s1);
    }
  };
  float s0 = 0.f, s1 = 0.f;
  if (nk > 0) {
    scales(kt0 / kpg, s0, s1);
    fetch(0);
    wqrs_frags(W, FA, lane);
  }
  for (int j = 0; j < nk; j += 2) {
    step(j, false, FA, FB, s0, s1);
    if (j + 1 < nk) step(j + 1, true, FB, FA, s0, s1);
  }

  // ---- the f32 tile Os[token][merged row] in the ring, then split-K and the functor (as wq_finish) ----
  constexpr int NC = 256;
  if (STATS) { // the SPR threads of each row: their sums, into rowstat
    float qt = (q[0] + q[1]) + (q[2] + q[3]), st = (sm[0] + sm[1]) + (sm[2] + sm[3]);
#pragma unroll
    for (int o = 1; o < SPR; o <<= 1) qt += __shfl_xor_sync(0xffffffffu, qt, o), st += __shfl_xor_sync(0xffffffffu, st, o);
    if (ct % SPR == 0) rowstat[ct / SPR] = qt, rowstat[BM + ct / SPR] = st;
  }
  named_bar_sync(1, 256); // every consumer is done with the ring
  {
    const int j0 = 64 * (wg - 1) + 16 * w + (lane >> 2), t2 = 2 * (lane & 3);
#pragma unroll
    for (int jn = 0; jn < BM / 8; ++jn) {
      float *o = Os + (8 * jn + t2) * OSTR + j0;
      o[0] = acc[4 * jn], o[OSTR] = acc[4 * jn + 1], o[8] = acc[4 * jn + 2], o[OSTR + 8] = acc[4 * jn + 3];
    }
  }
  named_bar_sync(1, NC);
  if (splits > 1) {
    const int tile = blockIdx.x;
    volatile u32 *flag = (volatile u32 *)(base + STAGES * STAGE + 16 * STAGES);
    float *slab = g.ws + ((size_t)tile * splits + z) * SLAB;
    for (int i = ct; i < BM * BN; i += NC) slab[i] = Os[(i / BN) * OSTR + i % BN];
    if (STATS)
      for (int m = ct; m < 2 * BM; m += NC) slab[BM * BN + m] = rowstat[m];
    named_bar_sync(1, NC);
    if (ct == 0) { // as gemm_splitk_arrive, among the consumers
      __threadfence();
      const unsigned last = atomicAdd(g.counters + tile, 1u) == (unsigned)(splits - 1);
      if (last) {
        atomicExch(g.counters + tile, 0u);
        __threadfence();
      }
      *flag = last;
    }
    named_bar_sync(1, NC);
    if (!*flag) return;
    for (int i = ct; i < SLAB; i += NC) {
      if (!STATS && i >= BM * BN) break;
      float v = 0.f;
      for (int sp = 0; sp < splits; ++sp) v += ld_cg_f(g.ws + ((size_t)tile * splits + sp) * SLAB + i);
      if (i < BM * BN) Os[(i / BN) * OSTR + i % BN] = v;
      else rowstat[i - BM * BN] = v;
    }
    named_bar_sync(1, NC);
  }
  wq_apply<BM, BN, S, STATS>(g, epi, Os, OSTR, rowstat, m0, n0, ct, NC);
}

#else // not sm_90a

template <int BM, int STAGES, int S, int STATS, class Epi>
__device__ __forceinline__ void gemm_wqrs(const GemmArgs &, const Epi &, char *) {
  static_assert(sizeof(Epi) == 0, "gemm_wqrs needs the sm_90a target (--gpu-architecture=sm_90a)");
}

#endif

} // namespace ffn
