// gemm_wqdt.cuh: gemm_wqdl's design 6 (sm_90a): the weight-only decode product (i4 with groups of
// 64 or 128, i8), persistent and fed by the Tensor Memory Accelerator's bulk copies: one producer
// warp, 8 consumer warps (kernels/NOTES.md, "Nineteenth session", issue 9).
//
//   template <int BITS, int BM, int BN, int STAGES, int S, int STATS, class T, class Epi>
//   __device__ void gemm_wqdt(const GemmArgs &g, const float *scales, int group, const Epi &epi, char *smem);
//
// Designs 2-5 start a CTA per (tile, split): each pays its ring's fill and, after its last step,
// its split-K arrival and epilogue with no codes streaming, and the last wave runs part-empty.
// Here gridDim.x CTAs (kernels/gemm_host.h: ffn_gemm_launch_grid, at most two per SM) loop over the
// items w = blockIdx.x, blockIdx.x + gridDim.x, ... of the tiles x splits (item w: tile w % tiles,
// split w / tiles), and the producer warp runs on into the next item's steps while the consumers
// finish the current one. A stage (one step: four k tiles) holds the CTA's 128 rows' codes
// (16 KB, one run in quant.cuh's tile order: four bulk copies of a k tile each, `cp.async.bulk`
// completing on the stage's mbarrier), each token's activations of the step's k (one bulk copy per
// token, rows padded by 64 bytes so that eight tokens' 16-byte loads fall in distinct banks) and,
// for i4, the step's units' scales for the 128 rows (4-byte cp.async by the producer's lanes,
// counted on the same barrier with .noinc). Consumers wait on the stage's full barrier, decode as
// design 2 (wqdl_frag, wqdl_frag8; each block's two products on two MMA chains), mask tokens past
// the item's rows, and release the stage with one arrival per warp. No CTA barrier in the loop;
// the consumers' finish (wq_finish_item) synchronizes them alone (named barrier 1).
//
// Takes (codegen: ffn_gemm_wqdt_takes): sm_90, 16-bit activations, K a multiple of the step (256
// k for i4, 128 for i8), i4 groups of 64 or 128. Split-K over whole steps; 288 threads; dynamic
// shared memory wqdt_smem_bytes(BITS, BM, BN, STAGES). Row statistics (a norm fused into the
// product): block b's squares by consumer warp b % 8.
#pragma once
#include "gemm_sm90.cuh"

namespace ffn {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

// one bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned) completing on `bar`
__device__ __forceinline__ void bulk_load(u32 dst, const void *src, u32 bytes, u32 bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

template <int BITS, int BM, int BN, int STAGES, int S, int STATS, class T, class Epi>
__device__ __forceinline__ void gemm_wqdt(const GemmArgs &g, const float *__restrict__ scales, int group,
                                          const Epi &epi, char *smem) {
  typedef typename WqWeight<T>::type W;
  constexpr bool I4 = BITS == 4;
  constexpr int WARPS = BN / 16, CONSUMERS = WARPS * 32, NT = BM / 8;
  constexpr int BK = WQ_TILE_K(BITS), STEP_K = 4 * BK, BPS = STEP_K / 32; // 32-k blocks per step
  constexpr int CODES = WARPS * 2048, AST = wqdt_act_stride(BITS), ACT = BM * AST;
  constexpr int STAGE = wqdt_stage_bytes(BITS, BM, BN);
  static_assert(sizeof(T) == 2, "16-bit activations");
  static_assert(BM % 8 == 0 && BN % (8 * S) == 0 && (S == 1 || S == 2), "tile shape");
  static_assert(WARPS == WQ_RB_GROUP && WARPS + BM <= 32, "a CTA's rows are a group of the tile order; a lane per token");
  static_assert(STAGE % 16 == 0 && STAGES >= 2, "stages");

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gq = lane >> 2, tq = lane & 3;
  const int M = g.M, N = g.N, K = g.K, R = S * N, splits = g.splits;
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (R + BN - 1) / BN, tiles = tiles_m * tiles_n;
  const int items = tiles * splits, ktiles = K / BK, ksteps = K / STEP_K; // K % STEP_K == 0
  const int U = I4 ? group : STEP_K, UPS = STEP_K / U, BPU = U / 32;   // i4: units of one group
  const int ngroups = I4 ? K / group : 1;

  const u32 sbase = smem_addr(smem), bars = sbase + STAGES * STAGE; // full[STAGES], then empty[STAGES]
  // after the barriers: the item's sums [BM][BN], the warps' statistics [WARPS][2][BM], the CTA's
  // [2][BM] and the split-K flag
  float *Os = (float *)(smem + STAGES * STAGE + 16 * STAGES), *part = Os + BM * BN, *rowstat = part + 2 * WARPS * BM;
  unsigned *flag = (unsigned *)(rowstat + 2 * BM);
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(bars + 8 * s, 1 + (I4 ? 32 : 0)); // the expect_tx, and (i4) each producer lane's scales
      mbar_init(bars + 8 * (STAGES + s), WARPS);  // one arrival per consumer warp
    }
    fence_barrier_init();
  }
  __syncthreads();

  int s = 0; // ring slot and phase, continuing from item to item
  u32 ph = 0;
  if (warp == WARPS) {
    // ---------------- producer warp ----------------
    int issued = 0;
    for (int w = blockIdx.x; w < items; w += gridDim.x) {
      const int z = w / tiles, tile = w - z * tiles;
      int tm, tn;
      gemm_tile_coords(tile, tiles_m, tiles_n, tm, tn);
      const int m0 = tm * BM, n0 = tn * BN, mv = imin(BM, M - m0);
      const int s0 = (int)((long long)ksteps * z / splits), nst = (int)((long long)ksteps * (z + 1) / splits) - s0;
      // the item's 128 rows are one group of the codes' tile order: a step's four k tiles are one run
      const char *codes = (const char *)g.B + wq_tile_index(n0 / 16, 4 * (long long)s0, ktiles) * 512;
      const T *A = (const T *)g.A + (size_t)m0 * K + (size_t)s0 * STEP_K;
      const u32 bytes = (u32)(CODES + mv * STEP_K * 2);
      for (int i = 0; i < nst; ++i, ++issued) {
        if (issued >= STAGES) mbar_wait(bars + 8 * (STAGES + s), ph ^ 1u); // every warp has read the slot
        const u32 st = sbase + s * STAGE, full = bars + 8 * s;
        if (lane == 0) mbar_expect_tx(full, bytes);
        __syncwarp();
        if (lane < 4) // k tile 4 i + lane of the 8 row blocks: [k tile][row block], as in memory
          bulk_load(st + lane * (CODES / 4), codes + ((size_t)i * 4 + lane) * (CODES / 4), CODES / 4, full);
        else if (lane >= WARPS && lane - WARPS < mv)
          bulk_load(st + CODES + (lane - WARPS) * AST, A + (size_t)(lane - WARPS) * K + (size_t)i * STEP_K,
                    STEP_K * 2, full);
        if (I4) { // [unit][BN rows]: the scales of the step's units, zeros past R
          for (int idx = lane; idx < UPS * BN; idx += 32) {
            const int u = idx / BN, row = n0 + idx % BN, gi = (s0 + i) * UPS + u;
            const bool ok = row < R;
            cp_async4(st + CODES + ACT + idx * 4, scales + (ok ? (size_t)row * ngroups + gi : 0), ok);
          }
          cp_async_mbar_arrive(full);
        }
        if (++s == STAGES) s = 0, ph ^= 1u;
      }
    }
    cp_async_wait_all(); // the last scales (counted on their barriers already) before the warp leaves
    return;              // the consumers finish alone (named barrier 1)
  }

  // ---------------- consumer warps: row block n0 / 16 + warp of each item ----------------
  const auto sync = [] { named_bar_sync(1, CONSUMERS); };
  for (int w = blockIdx.x; w < items; w += gridDim.x) {
    const int z = w / tiles, tile = w - z * tiles;
    int tm, tn;
    gemm_tile_coords(tile, tiles_m, tiles_n, tm, tn);
    const int m0 = tm * BM, n0 = tn * BN, mv = imin(BM, M - m0);
    const int nst = (int)((long long)ksteps * (z + 1) / splits) - (int)((long long)ksteps * z / splits);
    // each block's two k16 products go to two accumulators (two chains of dependent MMAs, not
    // one): tmp[0] and tmp[1] for i4's unit, acc and acc1 for i8 (summed after the loop)
    float acc[NT][4], acc1[NT][4], ssq[NT], ssum[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      ssq[t] = ssum[t] = 0.f;
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[t][e] = acc1[t][e] = 0.f;
    }
    for (int i = 0; i < nst; ++i) {
      mbar_wait(bars + 8 * s, ph);
      const char *st = smem + s * STAGE;
      uint4 cv[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) cv[u] = *(const uint4 *)(st + (u * WARPS + warp) * 512 + lane * 16);
      const T *at = (const T *)(st + CODES + gq * AST) + 8 * tq;
      const float *sc = (const float *)(st + CODES + ACT) + warp * 16 + gq;
      float tmp[2][NT][4];
#pragma unroll
      for (int b = 0; b < BPS; ++b) {
        if (I4 && b % BPU == 0)
#pragma unroll
          for (int t = 0; t < NT; ++t)
#pragma unroll
            for (int e = 0; e < 4; ++e) tmp[0][t][e] = tmp[1][t][e] = 0.f;
        u32 a[2][4];
        if (I4) { // tile b / 2, words 2 (b % 2) and 2 (b % 2) + 1
          const uint4 &c = cv[b / 2];
          wqdl_frag<W, false>(b % 2 ? c.z : c.x, a[0]);
          wqdl_frag<W, false>(b % 2 ? c.w : c.y, a[1]);
        } else { // tile b, one 32-k block
          wqdl_frag8<W>(cv[b].x, cv[b].y, a[0]);
          wqdl_frag8<W>(cv[b].z, cv[b].w, a[1]);
        }
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          WqAct<T> x;
          x.load(at + t * 8 * (AST / 2) + 32 * b);
          if (t * 8 + gq >= mv) x.b[0] = x.b[1] = x.b[2] = x.b[3] = 0u; // rows past the item's (stale)
          if (STATS && b % WARPS == warp) {
#pragma unroll
            for (int e = 0; e < 8; ++e) {
              const float v = x.value(e);
              ssq[t] = fmaf(v, v, ssq[t]);
              if (STATS == 2) ssum[t] += v;
            }
          }
          wq_mma<T, W>(I4 ? tmp[0][t] : acc[t], a[0], x, 0); // i8: one scale per row, after the loop
          wq_mma<T, W>(I4 ? tmp[1][t] : acc1[t], a[1], x, 1);
        }
        if (I4 && b % BPU == BPU - 1) { // the unit ends: times its scales
          const float s_lo = sc[(b / BPU) * BN], s_hi = sc[(b / BPU) * BN + 8];
#pragma unroll
          for (int t = 0; t < NT; ++t) {
            acc[t][0] = fmaf(tmp[0][t][0] + tmp[1][t][0], s_lo, acc[t][0]);
            acc[t][1] = fmaf(tmp[0][t][1] + tmp[1][t][1], s_lo, acc[t][1]);
            acc[t][2] = fmaf(tmp[0][t][2] + tmp[1][t][2], s_hi, acc[t][2]);
            acc[t][3] = fmaf(tmp[0][t][3] + tmp[1][t][3], s_hi, acc[t][3]);
          }
        }
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(bars + 8 * (STAGES + s));
      if (++s == STAGES) s = 0, ph ^= 1u;
    }

    // the item's finish, the consumers alone, while the producer loads the next item's steps
    if (!I4) { // i8: the two chains, times the row's scale
      const int r_lo = n0 + warp * 16 + gq, r_hi = r_lo + 8;
      const float s_lo = r_lo < R ? scales[r_lo] : 0.f, s_hi = r_hi < R ? scales[r_hi] : 0.f;
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        acc[t][0] = (acc[t][0] + acc1[t][0]) * s_lo, acc[t][1] = (acc[t][1] + acc1[t][1]) * s_lo;
        acc[t][2] = (acc[t][2] + acc1[t][2]) * s_hi, acc[t][3] = (acc[t][3] + acc1[t][3]) * s_hi;
      }
    }
    sync(); // the previous item's finish has read Os, part and rowstat
    wq_store<NT, BN>(Os, acc, warp, gq, tq);
    if (STATS) { // the lane's token t * 8 + gq: its four lanes' sums
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        float q = ssq[t], sm = ssum[t];
        q += __shfl_xor_sync(0xffffffffu, q, 1), q += __shfl_xor_sync(0xffffffffu, q, 2);
        sm += __shfl_xor_sync(0xffffffffu, sm, 1), sm += __shfl_xor_sync(0xffffffffu, sm, 2);
        if (tq == 0) part[(warp * 2) * BM + t * 8 + gq] = q, part[(warp * 2 + 1) * BM + t * 8 + gq] = sm;
      }
    }
    sync();
    if (STATS && tid < BM) { // summed over the warps in order
      float q = 0.f, sm = 0.f;
      for (int v = 0; v < WARPS; ++v) q += part[(v * 2) * BM + tid], sm += part[(v * 2 + 1) * BM + tid];
      rowstat[tid] = q, rowstat[BM + tid] = sm;
    }
    sync();
    wq_finish_item<BM, BN, CONSUMERS, S, STATS>(g, epi, Os, rowstat, m0, n0, tile, z, tid, flag, sync);
  }
}

#endif

} // namespace ffn
