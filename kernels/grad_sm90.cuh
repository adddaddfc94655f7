// grad_sm90.cuh: the weight gradient of kernels/grad.cuh on Hopper's wgmma (sm_90a only):
//
//   matmul_at_sm90   out [K, N] = a^T b, the sum over the rows (tokens) of a [rows, K] and b [rows, N],
//                    a and b of one 16-bit type (bf16 or f16), K % 8 == N % 8 == 0, 16-byte aligned;
//                    with ACC, out += a^T b. out is f32 or bf16 (or f16, not ACC): the sum is
//                    accumulated in f32 and rounded once, to nearest even, where it is stored
//
// called from a generated entry point (codegen/lower.c: wgrad_sm90_kernel) with the tiles of
// kernels/gemm_host.h: ffn_wgrad_config, 384 threads, at most one CTA per SM (ffn_wgrad_grid), and
// KArgs' split-K factor (ffn_wgrad_splits), workspace and tile counters.
//
// The reduction runs over the tokens, the outer (strided) dim of both operands: as wgmma sees the
// product (D[m, n] += A[m, k] B[k, n], k a token, m a column of a, n a column of b) both operands are
// MN-major, which wgmma reads from shared memory for 16-bit types through its transpose flags. So the
// tiles are staged as they lie in memory: a stage holds BT tokens of BM columns of a and BN columns
// of b as blocks of [BT tokens][64 columns], 128-byte token rows in the 128B-swizzle layout (16-byte
// chunk c of token row r of a block at r*128 + ((c ^ (r % 8)) * 16), blocks 1024-byte aligned).
// Consumer warpgroup w multiplies a's block w (its 64 output rows) by b's blocks (BN output columns):
// wgmma m64nBNk16, BT / 16 of them per stage, descriptors from wgmma_desc_sw128_mn. No transposes and
// no extra memory; matmul_at_tc (grad.cuh) does the same with ldmatrix .trans and mma.sync.
//
// Warp specialization as in gemm_sm90: one thread of warpgroup 0 loads the stages with the Tensor
// Memory Accelerator (a box {64 columns, BT tokens} per block through tensor maps of a and b,
// runtime/exec.c: wgrad_maps; zeros past the tokens and the columns), each stage's "full" barrier
// completing on its bytes; warpgroups 1 and 2 consume, one wgmma group in flight, and hand a stage back
// on its "empty" barrier (one arrival per consumer warp) once the group that read it has completed.
// (A cp.async producer of 128 threads fed the tiles before: 181-187 us per 8B wgrad kernel at 1024
// tokens against TMA's 173-177, kernels/NOTES.md "Thirteenth session".)
// Persistent as gemm_sm90p's cooperative kernel: each CTA loops over the work items (output tile,
// split) blockIdx.x, + gridDim.x, ..., and the producer runs on into the next item's tokens while the
// consumers store the current tile, so that a tile starts with a full ring.
//
// Split-K over the tokens (few output tiles, many tokens): split z of `splits` takes the z-th share of
// the token stages; every split stores its partial tile to the workspace and the CTA that arrives last
// for the tile adds them in split order (sm90_splitk, gemm_sm90.cuh). Deterministic: no float atomics;
// each output is summed in an order fixed by the shapes and the split count (the wgmma order within a
// split, then the splits in order), whichever CTA runs which item.
//
// Every mbarrier wait has the watchdog (gemm_sm90.cuh: mbar_wait<true>): a pipeline that hangs traps
// after about 10 s and fails the launch instead of wedging the device.
#pragma once
#include "gemm_sm90.cuh"
#include "grad.cuh"

namespace ffn {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

// One work item of the CTA loop: output tile `tile` (rows m0.., columns n0..) and split z, whose token
// stages are kt0 .. kt0 + nk - 1 (nk may be 0: no tokens, or more splits than stages).
struct WgradItem {
  int tile, z, m0, n0, kt0, nk;
};
template <int BM, int BN>
__device__ __forceinline__ WgradItem wgrad_item(int w, int tiles_m, int tiles_n, int ktiles, int splits) {
  WgradItem it;
  const int tiles = tiles_m * tiles_n;
  it.z = w / tiles;
  it.tile = w - it.z * tiles;
  int tm, tn;
  gemm_tile_coords(it.tile, tiles_m, tiles_n, tm, tn); // groups of 8 tile rows share b's columns in L2
  it.m0 = tm * BM;
  it.n0 = tn * BN;
  it.kt0 = (int)((long long)ktiles * it.z / splits);
  it.nk = (int)((long long)ktiles * (it.z + 1) / splits) - it.kt0;
  return it;
}

// The shared-memory plan of a stage, in bytes from the stage's start.
template <int BM, int BN, int BT> struct WgradStage {
  static constexpr int BLOCK = BT * 128;            // one [BT tokens][64 columns] block
  static constexpr int A_BLOCKS = BM / 64, B_BLOCKS = BN / 64;
  static constexpr int A_BYTES = A_BLOCKS * BLOCK;  // a's blocks, then b's
  static constexpr int BYTES = (A_BLOCKS + B_BLOCKS) * BLOCK;
};

// Producer (thread 0 of warpgroup 0): each block of a stage is one TMA box {64 columns, BT tokens} of
// a [rows, K] or b [rows, N], landing in the 128B-swizzled layout above (zeros outside, their bytes
// counted all the same); the stage's "full" barrier completes on its bytes.
template <int BM, int BN, int BT, int STAGES>
__device__ __forceinline__ void wgrad_produce(const TmaMaps *t, long long rows, int K, int N, int splits, u32 sbase,
                                              u32 bars) {
  typedef WgradStage<BM, BN, BT> St;
  if (threadIdx.x != 0) return;
  const int tiles_m = (K + BM - 1) / BM, tiles_n = (N + BN - 1) / BN, items = tiles_m * tiles_n * splits;
  const int ktiles = (int)((rows + BT - 1) / BT);
  if (ktiles > 0) { // no tokens: no maps (wgrad_maps) and nothing to load
    tma_prefetch_map(&t->a);
    tma_prefetch_map(&t->b);
  }
  int s = 0, loaded = 0; // ring slot; stages filled so far, saturating at STAGES
  u32 phase = 0;
  for (int w = blockIdx.x; w < items; w += gridDim.x) {
    const WgradItem it = wgrad_item<BM, BN>(w, tiles_m, tiles_n, ktiles, splits);
    for (int j = 0; j < it.nk; ++j) {
      if (loaded == STAGES) mbar_wait<true>(bars + 8 * (STAGES + s), phase ^ 1u); // the slot's last stage released
      else ++loaded;
      const u32 full = bars + 8 * s, dst = sbase + (u32)(s * St::BYTES);
      const int t0 = (it.kt0 + j) * BT;
      mbar_expect_tx(full, St::BYTES);
#pragma unroll
      for (int cb = 0; cb < St::A_BLOCKS; ++cb) tma_load_2d(dst + cb * St::BLOCK, &t->a, it.m0 + cb * 64, t0, full);
#pragma unroll
      for (int cb = 0; cb < St::B_BLOCKS; ++cb)
        tma_load_2d(dst + St::A_BYTES + cb * St::BLOCK, &t->b, it.n0 + cb * 64, t0, full);
      if (++s == STAGES) s = 0, phase ^= 1u;
    }
  }
}

// A pair of adjacent outputs of a row, the first at an even column (N % 8 == 0: both inside, the
// pair 8-byte aligned for f32, 4-byte for 16-bit types): stored from the f32 sums, rounded once to
// nearest even for 16-bit types; with ACC (f32 and bf16 only) the caller's old values, read as
// WORDS raw words, are added in f32 first. So the caller's tensor gets the bits that the f32
// result staged, then stored or added by ffn_grad_store (runtime.cuh), would give it.
template <class TO> struct WgradPair {
  static constexpr int WORDS = 1;
  static constexpr bool QUADS = false; // wgrad_store_bf16x4 below
  static __device__ __forceinline__ void store(TO *p, float x, float y) { store_pair(p, x, y); }
};
template <> struct WgradPair<float> {
  static constexpr int WORDS = 2;
  static constexpr bool QUADS = false;
  static __device__ __forceinline__ void load(const float *p, u32 (&w)[2]) { ldp2_f32(p, 0, 2, w); }
  static __device__ __forceinline__ void add(const u32 (&w)[2], float &x, float &y) {
    x += __uint_as_float(w[0]);
    y += __uint_as_float(w[1]);
  }
  static __device__ __forceinline__ void store(float *p, float x, float y) { *(float2 *)p = make_float2(x, y); }
};
template <> struct WgradPair<bf16> {
  static constexpr int WORDS = 1;
  static constexpr bool QUADS = true;
  static __device__ __forceinline__ void load(const bf16 *p, u32 (&w)[1]) { ldp2_bf16(p, 0, 2, w); }
  static __device__ __forceinline__ void add(const u32 (&w)[1], float &x, float &y) {
    float lo, hi;
    unpack_bf16x2(w[0], lo, hi);
    x += lo;
    y += hi;
  }
  static __device__ __forceinline__ void store(bf16 *p, float x, float y) { *(u32 *)p = pack_bf16x2(x, y); }
};

// The item's tile (this warpgroup's 64 rows) from the accumulator fragment: thread (warp w, lane l)
// holds rows 16w + l/4 (+8) and, per 8-column block j, columns 8j + 2(l % 4) + {0, 1} at
// acc[4j + 2h + {0, 1}] (h: the +8 row). Each pair is read and written by its thread alone. With
// ACC, the old values of JG column blocks (32 registers: the consumers have about 56 to spare)
// are loaded together before their sums are stored, so that a group waits for one memory latency
// rather than one per pair: volatile loads (ewise.cuh: ldp2_), which the compiler does not sink
// to their use behind the stores before it.
// bf16 without ACC: lanes l and l ^ 1 swap one pair of two adjacent column blocks, so that each
// thread stores 4 columns (8 bytes) and a quad a whole 32-byte sector of its row per instruction
// (pair by pair, each instruction wrote half of 8 sectors).
template <int BN>
__device__ __forceinline__ void wgrad_store_bf16x4(bf16 *__restrict__ out, const float (&acc)[BN / 2], int row0, int n0,
                                                   int K, int N) {
  const int lane = threadIdx.x & 31, odd = lane & 1;
#pragma unroll
  for (int j = 0; j < BN / 8; j += 2)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const u32 p0 = pack_bf16x2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      const u32 p1 = pack_bf16x2(acc[4 * j + 4 + 2 * h], acc[4 * j + 4 + 2 * h + 1]);
      const u32 got = __shfl_xor_sync(0xffffffffu, odd ? p0 : p1, 1);
      const int row = row0 + 8 * h, col = n0 + 8 * (j + odd) + 2 * ((lane & 3) - odd);
      if (row < K && col < N)
        *(uint2 *)(out + (long long)row * N + col) = odd ? make_uint2(got, p1) : make_uint2(p0, got);
    }
}

template <int BN, bool ACC, class TO>
__device__ __forceinline__ void wgrad_store(TO *__restrict__ out, const float (&acc)[BN / 2], int row0, int n0, int K,
                                            int N) {
  typedef WgradPair<TO> P;
  if constexpr (!ACC && P::QUADS && BN % 16 == 0) {
    wgrad_store_bf16x4<BN>((bf16 *)out, acc, row0, n0, K, N);
    return;
  }
  constexpr int JG = ACC ? 16 / P::WORDS : BN / 8;
  static_assert((BN / 8) % JG == 0, "whole groups");
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int j0 = 0; j0 < BN / 8; j0 += JG) {
    u32 old[2][JG][P::WORDS];
    if constexpr (ACC) {
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int j = 0; j < JG; ++j) {
          const int row = row0 + 8 * h, col = n0 + 8 * (j0 + j) + 2 * (lane & 3);
          if (row < K && col < N) P::load(out + (long long)row * N + col, old[h][j]);
        }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int j = 0; j < JG; ++j) {
        const int row = row0 + 8 * h, col = n0 + 8 * (j0 + j) + 2 * (lane & 3);
        if (row >= K || col >= N) continue;
        float x = acc[4 * (j0 + j) + 2 * h], y = acc[4 * (j0 + j) + 2 * h + 1];
        if constexpr (ACC) P::add(old[h][j], x, y);
        P::store(out + (long long)row * N + col, x, y);
      }
  }
}

// Consumer warpgroups 1 and 2 (threads 128-383): warpgroup cw owns output rows 64 cw .. 64 cw + 63 of
// every tile, i.e. a's block cw.
template <int BM, int BN, int BT, int STAGES, bool ACC, class T, class TO>
__device__ __forceinline__ void wgrad_consume(TO *__restrict__ out, long long rows, int K, int N, int splits, float *ws,
                                              unsigned *counters, u32 sbase, u32 bars, u32 *flag) {
  typedef WgradStage<BM, BN, BT> St;
  const int tid = threadIdx.x, cw = tid / 128 - 1, tt = tid - 128, lane = tid & 31, warp = (tid & 127) >> 5;
  const int tiles_m = (K + BM - 1) / BM, tiles_n = (N + BN - 1) / BN, items = tiles_m * tiles_n * splits;
  const int ktiles = (int)((rows + BT - 1) / BT);
  const u64 da0 = wgmma_desc_sw128_mn(sbase + cw * St::BLOCK, St::BLOCK);
  const u64 db0 = wgmma_desc_sw128_mn(sbase + St::A_BYTES, St::BLOCK);
  GemmArgs g = {}; // what sm90_splitk reads: the tile's rows bound (M = K), the split-K factor and memory
  g.M = K;
  g.N = N;
  g.splits = splits;
  g.ws = ws;
  g.counters = counters;
  int s = 0;
  u32 phase = 0;
  for (int w = blockIdx.x; w < items; w += gridDim.x) {
    const WgradItem it = wgrad_item<BM, BN>(w, tiles_m, tiles_n, ktiles, splits);
    float acc[1][BN / 2];
#pragma unroll
    for (int e = 0; e < BN / 2; ++e) acc[0][e] = 0.f;
    int prev = 0;
    for (int j = 0; j < it.nk; ++j) {
      mbar_wait<true>(bars + 8 * s, phase);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BT / 16; ++kk) { // 16 tokens = two 1024-byte atoms of every block
        const u64 off = (u64)((s * St::BYTES + kk * 2048) >> 4);
        wgmma_ss_mn<BN, T>(acc[0], da0 + off, db0 + off);
      }
      wgmma_commit();
      wgmma_wait<1>(); // the group of stage j - 1 has completed: its slot can be refilled
      if (j > 0) {
        __syncwarp();
        if (lane == 0) mbar_arrive(bars + 8 * (STAGES + prev));
      }
      prev = s;
      if (++s == STAGES) s = 0, phase ^= 1u;
    }
    wgmma_wait<0>();
    reg_fence(acc[0]);
    if (it.nk > 0) { // the last slot goes back too: the ring continues into the next item
      __syncwarp();
      if (lane == 0) mbar_arrive(bars + 8 * (STAGES + prev));
    }
    // split-K: only the CTA that arrives last for the tile gets here, with the whole sum (so with
    // ACC the tensor's old value is added once)
    if (splits > 1 && !sm90_splitk<BM, BN, 1, 0>(g, acc, nullptr, flag, it.tile, it.z, it.m0, cw * 64, tt, 256, 1))
      continue;
    wgrad_store<BN, ACC>(out, acc[0], it.m0 + cw * 64 + warp * 16 + (lane >> 2), it.n0, K, N);
  }
}

// Shared memory (dynamic, gemm_sm90_smem_bytes<BM, BN, BT, STAGES>() bytes): the ring of STAGES
// stages, then the mbarriers (full[s] at +8s, empty[s] at +8(STAGES + s)) and the split-K flag; the
// base is realigned to 1024 bytes (the swizzle atom). ACC: out += a^T b (f32 or bf16 out). t: the
// tensor maps of a and b (T, their 16-bit type, is named by the caller).
template <int BM, int BN, int BT, int STAGES, bool ACC, class T, class TO>
__device__ __forceinline__ void matmul_at_sm90(const TmaMaps *t, TO *__restrict__ out, long long rows, int K, int N,
                                               int splits, float *ws, unsigned *counters, char *smem) {
  typedef WgradStage<BM, BN, BT> St;
  static_assert(BM == 128, "two consumer warpgroups of 64 output rows");
  static_assert(BN == 128 || BN == 256, "BN: 128 or 256 (wgmma_ss_mn)");
  static_assert(BT % 16 == 0, "whole k16 steps per stage");
  static_assert(sizeof(T) == 2, "16-bit operands (wgmma's transpose flags)");
  static_assert(16 * STAGES + 16 + 1024 <= 2048, "barrier area");
  static_assert(STAGES * St::BYTES + 8 * BM + 2048 == gemm_sm90_smem_bytes<BM, BN, BT, STAGES>(), "shared memory plan");
  static_assert(gemm_sm90_smem_bytes<BM, BN, BT, STAGES>() <= FFN_SM90_MAX_SMEM, "shared memory");
  const int tid = threadIdx.x;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0); // warp-uniform role
  const u32 raw = smem_addr(smem);
  const u32 sbase = (raw + 1023u) & ~1023u;
  const u32 bars = sbase + STAGES * St::BYTES;
  u32 *flag = (u32 *)(smem + (sbase - raw) + STAGES * St::BYTES + 16 * STAGES);
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(bars + 8 * s, 1);            // the producer's expect_tx
      mbar_init(bars + 8 * (STAGES + s), 8); // one arrival per consumer warp
    }
    fence_barrier_init();
  }
  __syncthreads();
  if (wg == 0) {
    setmaxnreg_dec<56>(); // 56 x 128 + 224 x 256 <= 65536: the SM's registers, one CTA
    wgrad_produce<BM, BN, BT, STAGES>(t, rows, K, N, splits, sbase, bars);
  } else {
    setmaxnreg_inc<224>(); // the 64 x 256 f32 accumulator alone is 128 per thread
    wgrad_consume<BM, BN, BT, STAGES, ACC, T>(out, rows, K, N, splits, ws, counters, sbase, bars, flag);
  }
}

#else // not sm_90a

template <int BM, int BN, int BT, int STAGES, bool ACC, class T, class TO>
__device__ __forceinline__ void matmul_at_sm90(const TmaMaps *, TO *, long long, int, int, int, float *, unsigned *,
                                               char *) {
  static_assert(sizeof(T) == 0, "matmul_at_sm90 needs the sm_90a target (--gpu-architecture=sm_90a)");
}

#endif

} // namespace ffn
