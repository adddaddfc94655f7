// gemm_sm90p.cuh: the persistent form of kernels/gemm_sm90.cuh (16-bit or fp8 operands, loaded by the
// Tensor Memory Accelerator as in gemm_sm90<..., TMA = true>: the kernel's second argument holds
// A's and B's tensor maps, g.tma points at it). Host side: FFN_GEMM_SM90P in kernels/gemm_host.h
// (shared memory, grid); kernels/NOTES.md has its history (a cp.async version of 2026-11-29 was
// faster alone but made the whole Llama-8B sublayer slower).
#pragma once

#include "gemm_sm90.cuh"

namespace ffn {

// gemm_sm90_persistent: the same as gemm_sm90_smem_bytes, with one row-statistics buffer per
// consumer warpgroup when they ping-pong (each owns whole tiles).
template <int BM, int BN, int BK, int STAGES, bool PINGPONG, int WQ>
__host__ __device__ constexpr int gemm_sm90p_wq_cs() {
  return WQ ? wqmx_code_stages(BN, WQ, FFN_SM90_MAX_SMEM - (STAGES * (BM + BN) * BK * 2 + 8 * BM * (PINGPONG ? 2 : 1) + 2048))
            : 0;
}
template <int BM, int BN, int BK, int STAGES, bool PINGPONG, int WQ = 0>
__host__ __device__ constexpr int gemm_sm90p_smem_bytes() {
  return STAGES * (BM + BN) * BK * 2 + 8 * BM * (PINGPONG ? 2 : 1) + 2048 +
         (WQ ? gemm_sm90p_wq_cs<BM, BN, BK, STAGES, PINGPONG, WQ>() * wqmx_stage_bytes(BN, WQ) : 0);
}

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

// ---- the persistent GEMM ---------------------------------------------------------------------------
//
// gemm_sm90_persistent: the same GEMM (interface, epilogue call, STATS, split-K protocol, tails),
// but gridDim.x CTAs (any number >= 1; best min(work items, SMs), kernels/gemm_host.h:
// ffn_gemm_launch_grid) loop over the work items w = blockIdx.x, blockIdx.x + gridDim.x, ...
// of the tiles_m * tiles_n * splits items, item w being tile w % tiles (gemm_tile_coords' grouped
// order) and split w / tiles. gridDim.y == gridDim.z == 1. Block 384 threads (one producer and two
// consumer warpgroups), __launch_bounds__(384, 1), gemm_sm90p_smem_bytes() of dynamic shared memory.
//
// The producer (one thread) never stops between items: it runs on into the next item's k-tiles
// while the consumers finish the current one (the ring and the mbarrier phases simply continue), so
// a new tile starts with a full ring instead of a pipeline fill and a CTA launch.
//
// PINGPONG == false (cooperative): both consumer warpgroups work on every tile (BM / 2 rows each),
// as in gemm_sm90; the epilogue still stalls the tensor cores.
// PINGPONG == true: each consumer warpgroup owns whole BM x BN tiles, the CTA's items alternating
// between them (local item i goes to warpgroup i % 2), so one runs its epilogue while the other runs
// its main loop. The ring holds the items' k-tiles in order; a named-barrier handshake (the "order"
// barriers 4 and 5) starts warpgroup c's main loop only once the other has waited on every k-tile of
// the previous item. That serializes the two main loops (the tensor cores are the shared resource)
// and guarantees that no consumer waits on a full barrier more than one phase ahead of it (an
// mbarrier parity wait is only defined for the current and the preceding phase).
//
// B_KN (16-bit operands, S == 1): B is a [K, N] row-major matrix (N contiguous: a weight as a
// backward graph's input gradient dX = dY W reads it, W [N_fwd, K_fwd] as stored) instead of
// [N, K]. Its k-tile is staged as it lies, BN / 64 blocks of [BK k][64 n] (128-byte rows in the
// 128B-swizzle layout, BK * 128 bytes each), one TMA box {64 n, BK k} per block through a tensor map
// over [K rows, N columns] (runtime/exec.c: tma_map), and wgmma reads it MN-major (its transpose
// flag for B, wgmma_desc_sw128_mn with the blocks BK * 128 bytes apart), as grad_sm90.cuh reads both
// of its operands. A stage holds the same bytes, so the ring, the barriers and the epilogue are
// unchanged; no load-time transpose of the weight and no copy of it (kernels/NOTES.md, "dgrad
// reading the weights as they lie").
//
// fp8 operands take the promotion of gemm_sm90 (sm90_fp8_ktile: a 64 x 128 block of products at a
// time in a fresh register tile, added in f32), which waits on its wgmmas, so only cooperatively,
// where the other warpgroup's wgmmas cover each wait (ping-ponging, a warpgroup alone on the
// tensor cores exposed every wait: 16% slower, kernels/NOTES.md).
//
// WQ (4 or 8, bf16 A, not B_KN): B holds a weight-only quantized product's codes, g.qs its scales;
// the producer warpgroup turns them into the stages' bf16 B tiles (gemm_sm90.cuh:
// sm90_wq_producer, over the CTA's items: Sm90KSeq::persistent), the consumers are unchanged.
template <int BM, int BN, int BK, int STAGES, int S, int STATS, class T, bool PINGPONG, bool B_KN = false, int WQ = 0,
          class Epi>
__device__ __forceinline__ void gemm_sm90_persistent(const GemmArgs &g, const Epi &epi, char *smem) {
  constexpr int CWG = 2;                                  // consumer warpgroups
  constexpr int WG_M = PINGPONG ? BM : BM / CWG, MI = WG_M / 64; // rows per consumer warpgroup
  constexpr int TT = PINGPONG ? 128 : 128 * CWG;          // consumer threads per tile
  constexpr int ROW = BK * 2;                             // bytes per smem row
  constexpr int A_BYTES = BM * ROW, STAGE = (BM + BN) * ROW;
  constexpr int CPR = BK / 8;                             // 16-byte chunks per row
  constexpr int TPR = 128 / WG_M, CPT = CPR / TPR;        // statistics: threads per A row, chunks per thread
  static_assert(BK == 64, "BK must be 64 (one 128-byte swizzle atom of 16-bit elements)");
  static_assert(WG_M % 64 == 0 && MI <= 2, "each consumer warpgroup owns 64 or 128 rows");
  static_assert(BN == 64 || BN == 128 || BN == 256, "BN: 64, 128 or 256");
  static_assert(MI * BN <= 256, "accumulators: at most 128 floats per consumer thread");
  static_assert(BN % (8 * S) == 0, "BN must be a multiple of 8*S");
  static_assert(S == 1 || S == 2, "S is 1 or 2");
  static_assert(STATS >= 0 && STATS <= 2, "STATS is 0, 1 or 2");
  static_assert(!is_fp8<T>::value || (STATS == 0 && MI == 1 && !PINGPONG), "fp8: cooperative, no row statistics");
  static_assert(!B_KN || (sizeof(T) == 2 && !is_fp8<T>::value && S == 1 && BN % 64 == 0),
                "B_KN: 16-bit operands, one stream, whole 64-column blocks of B");
  constexpr int CS = gemm_sm90p_wq_cs<BM, BN, BK, STAGES, PINGPONG, WQ>(); // WQ: the codes' ring
  static_assert(!WQ || CS >= 2, "the codes' ring");
  static_assert(16 * STAGES + 16 + 16 * CS + 1024 <= 2048, "barrier area");
  static_assert(gemm_sm90p_smem_bytes<BM, BN, BK, STAGES, PINGPONG, WQ>() <= FFN_SM90_MAX_SMEM, "shared memory");
  static_assert(WQ == 0 || (!B_KN && is_bf16<T>::value), "mixed input (WQ): bf16 A, B as [N, K] codes");

  const int tid = threadIdx.x;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0); // warp-uniform role
  const int M = g.M, N = g.N, K = g.K, splits = g.splits;
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (S * N + BN - 1) / BN, tiles = tiles_m * tiles_n;
  const int items = tiles * splits;
  const int ktiles = (K + BK - 1) / BK;

  const u32 raw = smem_addr(smem);
  const u32 sbase = (raw + 1023u) & ~1023u;
  char *base = smem + (sbase - raw);
  constexpr int CRING = CS * wqmx_stage_bytes(BN, WQ);     // WQ: the codes' ring, after the stages
  const u32 bars = sbase + STAGES * STAGE + CRING;           // full[s] at +8s, empty[s] at +8(STAGES+s)
  u32 *flags = (u32 *)(base + STAGES * STAGE + CRING + 16 * STAGES); // split-K "arrived last", per tile owner
  float *rowstats = (float *)(base + STAGES * STAGE + CRING + 16 * STAGES + 16); // [PINGPONG ? 2 : 1][2][BM]
  const u32 cbars = bars + 16 * STAGES + 16 + 8 * BM * (PINGPONG ? 2 : 1); // WQ: cfull[cs] at +8cs, cempty[cs] at +8(CS + cs)

  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(bars + 8 * s, WQ ? 1 + 4 : 1);                 // the producer thread's expect_tx (WQ: and 4 warps)
      mbar_init(bars + 8 * (STAGES + s), PINGPONG ? 4 : 4 * CWG); // one per warp of the stage's consumers
    }
#pragma unroll
    for (int c = 0; c < CS; ++c)
      mbar_init(cbars + 8 * c, 1 + 32), mbar_init(cbars + 8 * (CS + c), 4); // cfull, cempty
    fence_barrier_init();
  }
  __syncthreads();

  if (wg == 0) {
    // ---------------- producer warpgroup ----------------
    setmaxnreg_dec<56>(); // 56 x 128 + 224 x 256 == 168 x 384: the CTA's registers
    if constexpr (WQ != 0) {
      sm90_wq_producer<BM, BN, BK, STAGES, S, WQ, CS, kMbarWatchdog>(g, sbase, bars, cbars,
                                                                 Sm90KSeq<BM, BN, BK, S>::persistent(g));
      return;
    }
    if (tid != 0) return;
    const TmaMaps *t = (const TmaMaps *)g.tma;
    tma_prefetch_map(&t->a);
    tma_prefetch_map(&t->b);
    int s = 0, loaded = 0; // ring slot and count of k-tiles issued so far (saturating at STAGES)
    u32 phase = 0;
    for (int w = blockIdx.x; w < items; w += gridDim.x) {
      const int z = w / tiles, tile = w - z * tiles;
      int tm, tn;
      gemm_tile_coords(tile, tiles_m, tiles_n, tm, tn);
      const int kt0 = (int)((long long)ktiles * z / splits);
      const int nk = (int)((long long)ktiles * (z + 1) / splits) - kt0;
      for (int j = 0; j < nk; ++j) {
        if (loaded == STAGES) mbar_wait(bars + 8 * (STAGES + s), phase ^ 1u); // slot's previous k-tile released
        else ++loaded;
        const u32 full = bars + 8 * s, dst = sbase + s * STAGE;
        mbar_expect_tx(full, STAGE);
        tma_load_2d(dst, &t->a, (kt0 + j) * BK, tm * BM, full);
        if constexpr (B_KN) {
#pragma unroll
          for (int nb = 0; nb < BN / 64; ++nb) // box {64 n, BK k}: zeros past N and K, bytes counted all the same
            tma_load_2d(dst + A_BYTES + nb * BK * 128, &t->b, tn * BN + nb * 64, (kt0 + j) * BK, full);
        } else {
          tma_load_2d(dst + A_BYTES, &t->b, (kt0 + j) * BK, tn * BN, full);
        }
        if (++s == STAGES) s = 0, phase ^= 1u;
      }
    }
  } else {
    // ---------------- consumer warpgroups ----------------
    setmaxnreg_inc<224>();
    const int cw = wg - 1, wtid = tid & 127;               // warpgroup, thread in it
    const int tt = PINGPONG ? wtid : tid - 128;            // thread among the tile's consumers
    const int lane = tid & 31;
    const int row_base = PINGPONG ? 0 : cw * WG_M;         // this warpgroup's first row in the tile
    const int bar_id = PINGPONG ? 2 + cw : 1;              // named barrier of the tile's consumers
    float *rowstat = rowstats + (PINGPONG ? cw * 2 * BM : 0);
    u32 *flag = flags + (PINGPONG ? cw : 0);
    const u64 da0 = wgmma_desc_sw128(sbase + row_base * ROW);
    const u64 db0 = B_KN ? wgmma_desc_sw128_mn(sbase + A_BYTES, BK * 128) : wgmma_desc_sw128(sbase + A_BYTES);
    constexpr int B_KSTEP = B_KN ? 16 * 128 : 32; // bytes from one k16 step of B to the next
    const int srow = row_base + wtid / TPR, sch = (wtid % TPR) * CPT; // statistics: A row, first chunk
    const u32 srow_addr = sbase + srow * ROW;

    int s = 0, local = 0; // ring slot of the next k-tile; local index of the item
    u32 phase = 0;
    for (int w = blockIdx.x; w < items; w += gridDim.x, ++local) {
      const int z = w / tiles, tile = w - z * tiles;
      const int kt0 = (int)((long long)ktiles * z / splits);
      const int nk = (int)((long long)ktiles * (z + 1) / splits) - kt0;
      if (PINGPONG && (local & 1) != cw) { // the other warpgroup's item: skip its k-tiles
        const int t = s + nk;
        phase ^= (u32)((t / STAGES) & 1);
        s = t % STAGES;
        continue;
      }
      const bool has_next = w + (int)gridDim.x < items;
      int tm, tn;
      gemm_tile_coords(tile, tiles_m, tiles_n, tm, tn);
      const int m0 = tm * BM, n0 = tn * BN;
      if (PINGPONG && local > 0) named_bar_sync(4 + cw, 256); // the other finished its main loop

      float acc[MI][BN / 2];
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int e = 0; e < BN / 2; ++e) acc[i][e] = 0.f;
      float ssq0 = 0.f, ssq1 = 0.f, ssum0 = 0.f, ssum1 = 0.f;
      if constexpr (is_fp8<T>::value) {
        sm90_fp8_loop<BN, MI, ROW, STAGES, STAGE, false, 1, kMbarWatchdog, T>(acc, bars, da0, db0, nk, s, phase);
      } else {
        int prev = 0;
        for (int j = 0; j < nk; ++j) {
          mbar_wait(bars + 8 * s, phase);
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < BK / 16; ++kk)
#pragma unroll
            for (int i = 0; i < MI; ++i)
              if constexpr (B_KN)
                wgmma_ss_bkn<BN, T>(acc[i], da0 + (u64)((s * STAGE + i * 64 * ROW + kk * 32) >> 4),
                                    db0 + (u64)((s * STAGE + kk * B_KSTEP) >> 4));
              else
                wgmma_ss<BN, T>(acc[i], da0 + (u64)((s * STAGE + i * 64 * ROW + kk * 32) >> 4),
                                db0 + (u64)((s * STAGE + kk * B_KSTEP) >> 4));
          wgmma_commit();
          if (STATS) sm90_stats_step<CPT, STATS, T>(srow_addr + s * STAGE, sch, srow, ssq0, ssq1, ssum0, ssum1);
          wgmma_wait<1>(); // the group of k-tile j - 1 has completed: its stage can be refilled
          if (j > 0) {
            __syncwarp();
            if (lane == 0) mbar_arrive(bars + 8 * (STAGES + prev));
          }
          prev = s;
          if (++s == STAGES) s = 0, phase ^= 1u;
        }
        // every k-tile of this item has landed: the other warpgroup may start the next item while
        // this one's last wgmmas run
        if (PINGPONG && has_next) named_bar_arrive(4 + (cw ^ 1), 256);
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < MI; ++i) reg_fence(acc[i]);
        if (nk > 0) { // the last stage goes back too: the ring continues into the next item
          __syncwarp();
          if (lane == 0) mbar_arrive(bars + 8 * (STAGES + prev));
        }
      }

      if (STATS) {
        float q = ssq0 + ssq1, sm = ssum0 + ssum1;
        if (TPR == 2) {
          q += __shfl_xor_sync(0xffffffffu, q, 1);
          sm += __shfl_xor_sync(0xffffffffu, sm, 1);
        }
        named_bar_sync(bar_id, TT); // the previous item's epilogue has read rowstat
        if (wtid % TPR == 0) {
          rowstat[srow] = q;
          rowstat[BM + srow] = sm;
        }
        named_bar_sync(bar_id, TT);
      }

      if (splits > 1 && !sm90_splitk<BM, BN, MI, STATS>(g, acc, rowstat, flag, tile, z, m0, row_base, tt, TT, bar_id))
        continue;
      sm90_epilogue<BM, BN, MI, S, STATS, T>(g, epi, acc, rowstat, m0, n0, row_base);
    }
  }
}

#else // not sm_90a

template <int BM, int BN, int BK, int STAGES, int S, int STATS, class T, bool PINGPONG, bool B_KN = false, int WQ = 0,
          class Epi>
__device__ __forceinline__ void gemm_sm90_persistent(const GemmArgs &, const Epi &, char *) {
  static_assert(sizeof(T) == 0, "gemm_sm90_persistent needs the sm_90a target (--gpu-architecture=sm_90a)");
}

#endif

} // namespace ffn
