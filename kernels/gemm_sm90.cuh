// gemm_sm90.cuh: Hopper tensor-core GEMM (wgmma.mma_async, bf16/f16 in, f32 accumulate) with the
// same interface and semantics as gemm_sm80 (see that file's header for the epilogue functor, the
// STATS values and the split-K protocol). Needs the sm_90a target (NVRTC --gpu-architecture=sm_90a):
// wgmma and setmaxnreg exist only there.
//
//   extern "C" __global__ void __launch_bounds__(384, 1) ffn_up(ffn::GemmArgs g, UpEpi epi) {
//     extern __shared__ __align__(128) char smem[];
//     ffn::gemm_sm90<128, 256, 64, 4, /*S*/ 2, /*STATS*/ 1, ffn::bf16>(g, epi, smem);
//   }
//
// launched with grid (tiles_m * tiles_n, 1, splits), block 128 * (CWG + 1) threads and
// gemm_sm90_smem_bytes() of dynamic shared memory (kernels/gemm_host.h: FFN_GEMM_SM90 configs).
//
// Design: warp specialization. Warpgroup 0 is the producer: its 128 threads copy the A and B k-tiles
// into a STAGES-deep ring with 16-byte cp.async (zero-fill for M/N/K tails, so no tensor maps and
// no host changes), and each thread's cp.async.mbarrier.arrive.noinc completes the stage's "full"
// mbarrier once its copies have landed. Warpgroups 1..CWG are consumers: each owns BM/CWG rows of the
// tile and issues wgmma m64nBNk16 with both operands read from shared memory through matrix
// descriptors. Tiles are stored K-major with 128-byte rows in the canonical 128B-swizzle layout
// (16-byte chunk c of row r at r*128 + ((c ^ (r % 8)) * 16), 1024-byte aligned atoms), which is also
// free of bank conflicts for the cp.async stores. A consumer keeps one wgmma group in flight and
// hands a stage back (its "empty" mbarrier, one arrival per consumer warp) once the group that read
// it has completed. With 2 consumer warpgroups, setmaxnreg moves registers from the producer (48) to
// the consumers (224: the 64 x 256 f32 accumulator tile alone is 128 per thread).
//
// Row statistics (STATS 1/2): each consumer thread reads 32 (CWG = 2) or 64 (BM/CWG = 128) A
// elements of its warpgroup's rows from the stage right after issuing that stage's wgmmas, so the
// loads and FMAs overlap the asynchronous tensor-core work; every A element is read once per CTA.
//
// The accumulator fragment of wgmma m64nNk16 gives thread (warp w of the warpgroup, lane l) rows
// 16w + l/4 (+8) and, per 8-column block j, columns 8j + 2(l%4) + {0,1}: adjacent column pairs as
// with mma.sync, so with S == 2 the gate block (j even) and the up block (j + 1) of one output column
// pair land in the same thread.
//
// Clusters (CLUSTER == 2, TMA only; gemm_host.h: FFN_GEMM_SM90C). At mid M the products stream their
// weights, and each CTA also loads its whole A tile from L2 (128 x 4096 bf16 = 1 MB, as many bytes
// as its B). Two CTAs of a cluster (__cluster_dims__(2, 1, 1): blockIdx.x 2c and 2c + 1, ranks 0
// and 1) take the column tiles 2p and 2p + 1 of one row tile and split A: each producer loads the
// BM / 2 rows of its rank and multicasts them into the same place of both CTAs' stage; B stays per
// CTA. With an odd tiles_n the last pair's rank-1 CTA has no tile ("idle"): it loads and shares
// its half of A, its consumers take part in the barriers, and it computes nothing.
// The protocol, per stage slot s and round n (k-tile j = n * STAGES + s), in each CTA X (peer Y):
//  - full[s] (count 1): X's producer arrives once with expect_tx(STAGE; A_BYTES when idle, no B);
//    the bytes come from X's half of A, Y's half (Y's multicast) and X's B. Y's bytes may land
//    before X's expect_tx (the tx-count goes negative), but the phase cannot complete without
//    X's arrival, and they cannot land in an earlier round: Y writes round n + 1 only after
//    Y's empty[s] round n, which needs X's consumers, which waited for X's full[s] round n.
//  - empty[s] (count 2 x the consumer warps): every consumer warp of both CTAs arrives on it once
//    (mapa + mbarrier.arrive.release.cluster, lane r on CTA r's) when its wgmmas have read the slot. So
//    when X's producer sees round n released, neither CTA still reads slot s, and X may write its
//    half of A into both. Arrivals cannot run into the next round: a consumer's round n + 1
//    arrival follows its full[s] round n + 1, which needs both producers' round n + 1 copies, which
//    followed both empty[s] round n.
//  - start: the barriers are initialized, fenced (fence.mbarrier_init.release.cluster) and the
//    cluster synchronized before any copy or arrival can reach the peer.
//  - end: a CTA must stay resident while the peer may still write into its shared memory or
//    arrive on its barriers. Writes: its consumers wait for every k-tile's full barrier. Arrivals:
//    the consumers hand back every stage (the last one too, after the loop), and the producer
//    thread waits for the releases of its last STAGES k-tiles before it exits (CUTLASS's
//    "producer tail"), which include the peer's arrivals.
// Every mbarrier wait of a cluster kernel has the watchdog (a protocol bug traps after ~10 s).
// Rank 1's half of A lies wholly outside the tensor where the row tile has <= BM / 2 rows: TMA
// fills it with zeros and counts its bytes all the same.
#pragma once
#include "abi.cuh"
#include "common.cuh"
#include "quant.cuh"

namespace ffn {

// Dynamic shared memory: the stage ring, then mbarriers, the split-K flag and the row statistics;
// 2048 bytes cover the barriers, the flag and the 1024-byte realignment of the base.
// WQ: the codes' ring (gemm_sm90_wq_cs slots) after the stages, in what the rest leaves.
template <int BM, int BN, int BK, int STAGES, int WQ> __host__ __device__ constexpr int gemm_sm90_wq_cs() {
  return WQ ? wqmx_code_stages(BN, WQ, FFN_SM90_MAX_SMEM - (STAGES * (BM + BN) * BK * 2 + 8 * BM + 2048)) : 0;
}
template <int BM, int BN, int BK, int STAGES, int WQ = 0> __host__ __device__ constexpr int gemm_sm90_smem_bytes() {
  return STAGES * (BM + BN) * BK * 2 + 8 * BM + 2048 +
         (WQ ? gemm_sm90_wq_cs<BM, BN, BK, STAGES, WQ>() * wqmx_stage_bytes(BN, WQ) : 0);
}

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

// ---- sm_90a PTX wrappers ------------------------------------------------------------------------

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// CLUSTER_SCOPE: acquire at cluster scope, for a barrier that the other CTA of a cluster arrives on
// (gemm_sm90's "empty" barriers with CLUSTER > 1).
template <bool CLUSTER_SCOPE = false> __device__ __forceinline__ bool mbar_try_wait(u32 bar, u32 parity) {
  u32 ok;
  if (CLUSTER_SCOPE)
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(ok)
                 : "r"(bar), "r"(parity)
                 : "memory");
  else
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(ok)
                 : "r"(bar), "r"(parity)
                 : "memory");
  return ok != 0;
}
// Waits until the phase of parity `parity` has completed. With WATCHDOG a hang becomes a trap after
// about 10 s, so that a broken pipeline fails a test instead of wedging the device: on wherever
// FFN_SM90_WATCHDOG is defined (the bench), and in kernels that ask for it (grad_sm90.cuh). It costs
// a clock read only once the first try has failed.
#ifdef FFN_SM90_WATCHDOG
constexpr bool kMbarWatchdog = true;
#else
constexpr bool kMbarWatchdog = false;
#endif
template <bool WATCHDOG = kMbarWatchdog, bool CLUSTER_SCOPE = false>
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
  if (mbar_try_wait<CLUSTER_SCOPE>(bar, parity)) return;
  const long long t0 = WATCHDOG ? clock64() : 0;
  while (!mbar_try_wait<CLUSTER_SCOPE>(bar, parity))
    if (WATCHDOG && clock64() - t0 > 20000000000ll) __trap();
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Arrives on `bar` when all of this thread's earlier cp.async copies have completed; counts as one
// of the barrier's expected arrivals (.noinc).
__device__ __forceinline__ void cp_async_mbar_arrive(u32 bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
// TMA (TMA = true): the producer thread announces the bytes a stage will receive, then issues the
// two bulk tensor copies, which complete that transaction count on the same barrier.
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
// Copies the box at (c0 = k in 16-bit units, c1 = row) of the tensor map at generic address `map`
// (a __grid_constant__ kernel argument) into shared memory at dst, zero-filling outside the tensor.
__device__ __forceinline__ void tma_load_2d(u32 dst, const void *map, int c0, int c1, u32 bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
               "l"(map), "r"(c0), "r"(c1), "r"(bar)
               : "memory");
}
// The same copy multicast: the box lands at CTA-relative address dst in every CTA of the cluster
// whose bit is set in `mask` (bit i: %cluster_ctarank i), and completes bytes on the mbarrier at
// CTA-relative address bar in each of them.
__device__ __forceinline__ void tma_load_2d_multicast(u32 dst, const void *map, int c0, int c1, u32 bar, u16 mask) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
               " [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
               "l"(map), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
               : "memory");
}
// A plain bulk copy (no tensor map) of `bytes` (a multiple of 16, both addresses 16-byte aligned)
// from global memory to shared memory at dst, completing those bytes on the mbarrier at bar.
__device__ __forceinline__ void bulk_load(u32 dst, const void *src, u32 bytes, u32 bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void sts128(u32 addr, u32 a, u32 b, u32 c, u32 d) {
  asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};" ::"r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
__device__ __forceinline__ void tma_prefetch_map(const void *map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}
// ---- thread-block clusters ----
__device__ __forceinline__ u32 cluster_ctarank() {
  u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// Every thread of the cluster that has not exited arrives (release) and waits (acquire).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive;\nbarrier.cluster.wait;" ::: "memory");
}
// The shared::cluster address of CTA-relative shared address `addr` in the cluster's CTA `rank`.
__device__ __forceinline__ u32 mapa_shared(u32 addr, u32 rank) {
  u32 r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
// One arrival on the mbarrier at shared::cluster address `bar` (this CTA's or another's).
__device__ __forceinline__ void mbar_arrive_cluster(u32 bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// Orders this thread's view of shared memory written through the generic proxy (cp.async) before
// its subsequent async-proxy reads (wgmma operands).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
template <int R> __device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
}
template <int R> __device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
}
__device__ __forceinline__ void lds128(u32 addr, u32 &a, u32 &b, u32 &c, u32 &d) {
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"(addr) : "memory");
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Pins accumulator registers at this point of the program: the compiler must not move their reads
// above a wgmma.wait_group (it does not know that the wgmma writes them asynchronously).
template <int N> __device__ __forceinline__ void reg_fence(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Shared-memory matrix descriptor of a K-major tile with 128-byte rows in the 128B-swizzle layout:
// start address >> 4 (bits 0-13), leading byte offset unused for swizzled K-major (1), stride byte
// offset 1024 between 8-row groups (bits 32-45), base offset 0 (1024-aligned atoms), swizzle mode 1
// = 128B (bits 62-63). Advancing along K by 16 elements adds 32 bytes to the start address.
__device__ __forceinline__ u64 wgmma_desc_sw128(u32 addr) {
  return (u64)((addr & 0x3FFFF) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}

// Shared-memory matrix descriptor of an MN-major tile (wgmma's transpose flag set: the M or N elements
// of one k are contiguous) in the 128B-swizzle layout: each k is a 128-byte row of 64 16-bit MN
// elements (chunk c of row r at r*128 + ((c ^ (r % 8)) * 16)), 8 k rows make a 1024-byte atom.
// Leading byte offset (bits 16-29): from one 64-element MN block to the next, `block` bytes; stride
// byte offset (bits 32-45): from one group of 8 k rows to the next, 1024 (the atoms of a block are
// consecutive). PTX ISA, "Matrix Descriptor Format" and the MN-major canonical layout
// ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)). Advancing along K by 16 adds 2048 bytes (two whole atoms).
__device__ __forceinline__ u64 wgmma_desc_sw128_mn(u32 addr, u32 block) {
  return (u64)((addr & 0x3FFFF) >> 4) | ((u64)((block & 0x3FFFF) >> 4) << 16) | ((u64)(1024 >> 4) << 32) |
         ((u64)1 << 62);
}

// D[64 x N] += A[64 x k] . B[N x k]^T, both from shared memory (descriptors da, db), f32 D: 16 k of
// bf16/f16 or 32 k of fp8 (the same 32 bytes of each row). The operand lists are spelled out per
// width by FFN_WGMMA_SS_<N>(instruction suffix, trailing immediates): scale-d is `acc` (1: D +=,
// 0: D =), A and B are scaled by 1, and the 16-bit forms take the two transpose flags 0 (K-major), which the
// fp8 forms do not have.
template <int N, class T> __device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], u64 da, u64 db, int acc = 1);
#define FFN_WG_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                     "+f"(d[i + 6]), "+f"(d[i + 7])
#define FFN_WG_D32(i) FFN_WG_D8(i), FFN_WG_D8(i + 8), FFN_WG_D8(i + 16), FFN_WG_D8(i + 24)
#define FFN_WGMMA_SS_64(SUFFIX, TAIL)                                                             \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                 \
               "wgmma.mma_async.sync.aligned.m64n64" SUFFIX " "                                          \
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "  \
               "%32, %33, p, " TAIL ";\n}\n"                                                             \
               : FFN_WG_D32(0)                                                                            \
               : "l"(da), "l"(db), "r"(acc))
#define FFN_WGMMA_SS_128(SUFFIX, TAIL)                                                             \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                 \
               "wgmma.mma_async.sync.aligned.m64n128" SUFFIX " "                                          \
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "  \
               "%64, %65, p, " TAIL ";\n}\n"                                                             \
               : FFN_WG_D32(0), FFN_WG_D32(32)                                                                            \
               : "l"(da), "l"(db), "r"(acc))
#define FFN_WGMMA_SS_224(SUFFIX, TAIL)                                                             \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %114, 0;\n"                                                 \
               "wgmma.mma_async.sync.aligned.m64n224" SUFFIX " "                                          \
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111}, "  \
               "%112, %113, p, " TAIL ";\n}\n"                                                             \
               : FFN_WG_D32(0), FFN_WG_D32(32), FFN_WG_D32(64), FFN_WG_D8(96), FFN_WG_D8(104)                                                                            \
               : "l"(da), "l"(db), "r"(acc))
#define FFN_WGMMA_SS_256(SUFFIX, TAIL)                                                             \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                                 \
               "wgmma.mma_async.sync.aligned.m64n256" SUFFIX " "                                          \
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "  \
               "%128, %129, p, " TAIL ";\n}\n"                                                             \
               : FFN_WG_D32(0), FFN_WG_D32(32), FFN_WG_D32(64), FFN_WG_D32(96)                                                                            \
               : "l"(da), "l"(db), "r"(acc))
#define FFN_WGMMA_SS(N, T, SUFFIX, TAIL)                                                             \
  template <> __device__ __forceinline__ void wgmma_ss<N, T>(float(&d)[N / 2], u64 da, u64 db, int acc) { \
    FFN_WGMMA_SS_##N(SUFFIX, TAIL);                                                                    \
  }
FFN_WGMMA_SS(64, bf16, "k16.f32.bf16.bf16", "1, 1, 0, 0")
FFN_WGMMA_SS(64, f16, "k16.f32.f16.f16", "1, 1, 0, 0")
FFN_WGMMA_SS(64, fp8e4m3, "k32.f32.e4m3.e4m3", "1, 1")
FFN_WGMMA_SS(64, fp8e5m2, "k32.f32.e5m2.e5m2", "1, 1")
FFN_WGMMA_SS(128, bf16, "k16.f32.bf16.bf16", "1, 1, 0, 0")
FFN_WGMMA_SS(128, f16, "k16.f32.f16.f16", "1, 1, 0, 0")
FFN_WGMMA_SS(128, fp8e4m3, "k32.f32.e4m3.e4m3", "1, 1")
FFN_WGMMA_SS(128, fp8e5m2, "k32.f32.e5m2.e5m2", "1, 1")
FFN_WGMMA_SS(224, bf16, "k16.f32.bf16.bf16", "1, 1, 0, 0")
FFN_WGMMA_SS(224, f16, "k16.f32.f16.f16", "1, 1, 0, 0")
FFN_WGMMA_SS(224, fp8e4m3, "k32.f32.e4m3.e4m3", "1, 1")
FFN_WGMMA_SS(224, fp8e5m2, "k32.f32.e5m2.e5m2", "1, 1")
FFN_WGMMA_SS(256, bf16, "k16.f32.bf16.bf16", "1, 1, 0, 0")
FFN_WGMMA_SS(256, f16, "k16.f32.f16.f16", "1, 1, 0, 0")
FFN_WGMMA_SS(256, fp8e4m3, "k32.f32.e4m3.e4m3", "1, 1")
FFN_WGMMA_SS(256, fp8e5m2, "k32.f32.e5m2.e5m2", "1, 1")
// The same product with both operands MN-major (16-bit types only: the transpose flags are the last
// two immediates): A stored k by k as [k][64 m], B as [k][N n] (wgmma_desc_sw128_mn); always D +=.
template <int N, class T> __device__ __forceinline__ void wgmma_ss_mn(float (&d)[N / 2], u64 da, u64 db);
#define FFN_WGMMA_SS_MN(N, T, SUFFIX)                                                                   \
  template <> __device__ __forceinline__ void wgmma_ss_mn<N, T>(float(&d)[N / 2], u64 da, u64 db) { \
    const int acc = 1;                                                                                  \
    FFN_WGMMA_SS_##N(SUFFIX, "1, 1, 1, 1");                                                             \
  }
FFN_WGMMA_SS_MN(128, bf16, "k16.f32.bf16.bf16")
FFN_WGMMA_SS_MN(128, f16, "k16.f32.f16.f16")
FFN_WGMMA_SS_MN(256, bf16, "k16.f32.bf16.bf16")
FFN_WGMMA_SS_MN(256, f16, "k16.f32.f16.f16")
// A K-major, B MN-major (16-bit types only): the product of gemm_sm90_persistent<..., B_KN = true>,
// whose B k-tile is staged as it lies in a [K, N] weight (wgmma_desc_sw128_mn); always D +=.
template <int N, class T> __device__ __forceinline__ void wgmma_ss_bkn(float (&d)[N / 2], u64 da, u64 db);
#define FFN_WGMMA_SS_BKN(N, T, SUFFIX)                                                                  \
  template <> __device__ __forceinline__ void wgmma_ss_bkn<N, T>(float(&d)[N / 2], u64 da, u64 db) { \
    const int acc = 1;                                                                                  \
    FFN_WGMMA_SS_##N(SUFFIX, "1, 1, 0, 1");                                                             \
  }
FFN_WGMMA_SS_BKN(128, bf16, "k16.f32.bf16.bf16")
FFN_WGMMA_SS_BKN(128, f16, "k16.f32.f16.f16")
FFN_WGMMA_SS_BKN(256, bf16, "k16.f32.bf16.bf16")
FFN_WGMMA_SS_BKN(256, f16, "k16.f32.f16.f16")
// (m64n224: the mid-M tile for wide gate/up products, one wave of 128 x 224 tiles where 128 x 128
// tiles would need 1.7; kernels/gemm_host.h, ffn_gemm_config_fits.)

// ---- row statistics of A, one stage at a time (shared with the persistent kernel) -----------------
//
// The thread's CPT 16-byte chunks (from chunk sch) of A row srow of the stage at row_addr (the row's
// shared address; swizzled chunk c at c ^ (srow % 8)): sums of squares (STATS >= 1) and sums
// (STATS == 2), split over two chains per quantity so that the FMAs do not all wait on one.
template <int CPT, int STATS, class T>
__device__ __forceinline__ void sm90_stats_step(u32 row_addr, int sch, int srow, float &ssq0, float &ssq1, float &ssum0,
                                                float &ssum1) {
#pragma unroll
  for (int c = 0; c < CPT; ++c) {
    u32 w[4];
    lds128(row_addr + (((sch + c) ^ (srow & 7)) << 4), w[0], w[1], w[2], w[3]);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      float lo, hi;
      unpack2<T>(w[q], lo, hi);
      if (q & 1) {
        ssq1 = fmaf(lo, lo, fmaf(hi, hi, ssq1));
        if (STATS == 2) ssum1 += lo + hi;
      } else {
        ssq0 = fmaf(lo, lo, fmaf(hi, hi, ssq0));
        if (STATS == 2) ssum0 += lo + hi;
      }
    }
  }
}

// ---- fp8 products: one k-tile with "promotion" (shared with the persistent kernel) ------------------
//
// Hopper's tensor cores sum fp8 products in an accumulator narrower than f32 (DeepSeek-V3 measured
// about 14 bits; against the f64 reference, 1.5% relative error at K = 256..1008 in our tests), so
// each k-tile (128 codes) goes into a fresh register tile, one 64 x 128 block (MI row block i,
// 128-column chunk c) at a time, and is added to acc in f32: "promotion". da/db: the descriptors of
// the stage's A rows of this warpgroup and its B rows. The wait per block is hidden only while
// another warpgroup's wgmmas keep the tensor cores busy.
template <int BN, int MI, int ROW, class T>
__device__ __forceinline__ void sm90_fp8_ktile(float (&acc)[MI][BN / 2], float (&tmp)[64], u64 da, u64 db) {
  static_assert(BN % 128 == 0, "fp8: BN a multiple of 128 (the promotion's chunks)");
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int c = 0; c < BN / 128; ++c) {
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) // 4 x k32 = the k-tile's 128 codes (64 16-bit units)
        wgmma_ss<128, T>(tmp, da + (u64)((i * 64 * ROW + kk * 32) >> 4), db + (u64)((c * 128 * ROW + kk * 32) >> 4),
                         kk > 0);
      wgmma_commit();
      wgmma_wait<0>();
      reg_fence(tmp);
#pragma unroll
      for (int e = 0; e < 64; ++e) acc[i][64 * c + e] += tmp[e];
    }
}

// Hands a stage back for a consumer warp (all its lanes, once it no longer reads the stage): one
// arrival on the stage's "empty" barrier at CTA-relative address bar in every CTA of the cluster,
// lane r arriving on CTA r's.
template <int CLUSTER> __device__ __forceinline__ void sm90_release(u32 bar, int lane) {
  __syncwarp();
  if (CLUSTER == 1 && lane == 0) mbar_arrive(bar);
  if (CLUSTER > 1 && lane < CLUSTER) mbar_arrive_cluster(mapa_shared(bar, (u32)lane));
}

// The fp8 main loop over nk k-tiles of the ring from slot s, phase `phase` (both advanced past
// them), shared by gemm_sm90 and gemm_sm90p: every stage is released once its products are summed.
// FENCE: the stages were written by cp.async (the generic proxy) rather than TMA. (Two register
// tiles, the group of k-tile j in flight while j - 1 is added, were tried for 64 x 128 warpgroup
// tiles: ptxas then serializes every wgmma (C7514: non-wgmma instructions read the accumulators of
// a wgmma in flight), 24% slower; kernels/NOTES.md.)
// CLUSTER, WD: sm90_release's cluster and mbar_wait's watchdog.
template <int BN, int MI, int ROW, int STAGES, int STAGE, bool FENCE, int CLUSTER, bool WD, class T>
__device__ __forceinline__ void sm90_fp8_loop(float (&acc)[MI][BN / 2], u32 bars, u64 da0, u64 db0, int nk, int &s,
                                              u32 &phase) {
  const int lane = threadIdx.x & 31;
  float tmp[64];
  for (int j = 0; j < nk; ++j) {
    mbar_wait<WD>(bars + 8 * s, phase);
    if (FENCE) fence_proxy_async();
    sm90_fp8_ktile<BN, MI, ROW, T>(acc, tmp, da0 + (u64)((s * STAGE) >> 4), db0 + (u64)((s * STAGE) >> 4));
    sm90_release<CLUSTER>(bars + 8 * (STAGES + s), lane); // this k-tile's stage is free
    if (++s == STAGES) s = 0, phase ^= 1u;
  }
}

// ---- split-K and epilogue, shared with the persistent kernel (gemm_sm90p.cuh) ---------------------
//
// The accumulator fragment of a consumer warpgroup (rows row_base + 64 i + 16 warp + lane / 4 (+ 8)
// of the tile) is what both take; `tt` is the thread among the `nt` threads that own the tile, `bar`
// their named barrier.

// Split-K: every split stores its partials and row statistics to its slab of g.ws; the CTA that
// arrives last for `tile` (the counter is left zero) sums them in split order into acc and rowstat
// and returns true; the others return false.
template <int BM, int BN, int MI, int STATS>
__device__ __forceinline__ bool sm90_splitk(const GemmArgs &g, float (&acc)[MI][BN / 2], float *rowstat, u32 *flag,
                                            int tile, int z, int m0, int row_base, int tt, int nt, int bar) {
  constexpr int NB = BN / 8, SLAB = BM * BN + 2 * BM;
  const int lane = threadIdx.x & 31, warp = (threadIdx.x & 127) >> 5, splits = g.splits, M = g.M;
  float *slab = g.ws + ((size_t)tile * splits + z) * SLAB;
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (m0 + row_base + i * 64 + warp * 16 + (lane >> 2) + h * 8 >= M) continue;
#pragma unroll
      for (int j = 0; j < NB; ++j)
        st_cg_f2(slab + 2 * (((i * NB + j) * 2 + h) * nt + tt), acc[i][4 * j + 2 * h], acc[i][4 * j + 2 * h + 1]);
    }
  if (STATS)
    for (int r = tt; r < BM; r += nt) {
      slab[BM * BN + r] = rowstat[r];
      slab[BM * BN + BM + r] = rowstat[BM + r];
    }
  // arrival (gemm_splitk_arrive for the tile's consumer threads only: the producer has left)
  __threadfence();
  named_bar_sync(bar, nt);
  if (tt == 0) {
    const unsigned prev_count = atomicAdd(g.counters + tile, 1u);
    const unsigned last = prev_count == (unsigned)(splits - 1);
    if (last) atomicExch(g.counters + tile, 0u);
    *(volatile u32 *)flag = last;
  }
  named_bar_sync(bar, nt);
  if (*(volatile u32 *)flag == 0) return false;
  __threadfence();
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int e = 0; e < BN / 2; ++e) acc[i][e] = 0.f;
  for (int sp = 0; sp < splits; ++sp) {
    const float *p = g.ws + ((size_t)tile * splits + sp) * SLAB;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (m0 + row_base + i * 64 + warp * 16 + (lane >> 2) + h * 8 >= M) continue;
#pragma unroll
        for (int j = 0; j < NB; ++j) {
          float x, y;
          ld_cg_f2(p + 2 * (((i * NB + j) * 2 + h) * nt + tt), x, y);
          acc[i][4 * j + 2 * h] += x;
          acc[i][4 * j + 2 * h + 1] += y;
        }
      }
  }
  if (STATS) {
    for (int r = tt; r < BM; r += nt) {
      float q = 0.f, sm = 0.f;
      for (int sp = 0; sp < splits; ++sp) {
        const float *p = g.ws + ((size_t)tile * splits + sp) * SLAB + BM * BN;
        q += ld_cg_f(p + r);
        sm += ld_cg_f(p + BM + r);
      }
      rowstat[r] = q;
      rowstat[BM + r] = sm;
    }
    named_bar_sync(bar, nt);
  }
  return true;
}

// The epilogue: fp8 scales, then the functor, per output column pair of each of the thread's rows.
// The functor's row half (Epi::prep: the norm's statistics turned into scales, per-row loads) runs
// once per row, its column half (Epi::apply) per pair; columns outer, so that the per-column
// constants (ldc_) are loaded once for the rows. The activations the functor reads (Epi::load: a
// residual, the saved values of a backward's epilogue) are loaded for all the rows of a column
// group before the group's stores: issued after stores they wait behind them, one DRAM latency
// per pair (the Llama-3-8B down-projection's dgrad, three such operands: 2.66 ms against 1.4 for
// the plain GEMM). Loading the next group ahead as well spills the persistent kernels (ptxas).
template <int BM, int BN, int MI, int S, int STATS, class T, class Epi>
__device__ __forceinline__ void sm90_epi_group(const GemmArgs &g, const Epi &epi, const float (&acc)[MI][BN / 2],
                                               const typename Epi::Row (&rows)[MI][2], int m0, int n0, int row_base,
                                               int jg) {
  const int lane = threadIdx.x & 31, warp = (threadIdx.x & 127) >> 5, M = g.M, N = g.N;
  const int col = n0 / S + jg * 8 + 2 * (lane & 3);
  if (col >= N) return;
  const int ncols = col + 1 < N ? 2 : 1; /* after the return: above it, ptxas emits 8 KB more code
                                             for the GPT up projection's GELU epilogue, 11% slower (ncu) */
  typename Epi::Src src[MI][2];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) /* a row past M reads the last row and stores nothing */
      src[i][h] = epi.load(min(m0 + row_base + i * 64 + warp * 16 + (lane >> 2) + h * 8, M - 1), col, ncols);
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = m0 + row_base + i * 64 + warp * 16 + (lane >> 2) + h * 8;
      if (row >= M) continue;
      float v[S][2];
#pragma unroll
      for (int st = 0; st < S; ++st) {
        v[st][0] = acc[i][4 * (jg * S + st) + 2 * h];
        v[st][1] = acc[i][4 * (jg * S + st) + 2 * h + 1];
      }
      gemm_fp8_scale<T, S>(g, row, n0 + jg * 8 * S + 2 * (lane & 3), ncols, v);
      epi.apply(rows[i][h], src[i][h], row, col, ncols, v);
    }
}

// Column group jg of the rows (i, 0..1), whole (every column below N): the functor's other outputs
// stored, its 16-bit outputs (Epi::QUADS of them) packed into w, a word per pair. A functor that
// stores nothing itself (Epi::PURE) runs for both rows without a branch between them, so that
// the compiler loads each column's vectors (bias, column sums: ldc_) once for both.
template <int BM, int BN, int MI, int S, int STATS, class T, class Epi>
__device__ __forceinline__ void sm90_epi_words(const GemmArgs &g, const Epi &epi, const float (&acc)[MI][BN / 2],
                                               const typename Epi::Row (&rows)[MI][2], int m0, int n0, int row_base,
                                               int jg, int i, const typename Epi::Src (&src)[2],
                                               u32 (&w)[2][Epi::QUADS]) {
  const int lane = threadIdx.x & 31, warp = (threadIdx.x & 127) >> 5;
  const int col = n0 / S + jg * 8 + 2 * (lane & 3);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int q = 0; q < Epi::QUADS; ++q) w[h][q] = 0u;
    int row = m0 + row_base + i * 64 + warp * 16 + (lane >> 2) + h * 8;
    if constexpr (Epi::PURE)
      row = min(row, g.M - 1); /* computed from the last row, never stored: both rows in one block */
    else if (row >= g.M)
      continue;
    float v[S][2];
#pragma unroll
    for (int st = 0; st < S; ++st) {
      v[st][0] = acc[i][4 * (jg * S + st) + 2 * h];
      v[st][1] = acc[i][4 * (jg * S + st) + 2 * h + 1];
    }
    gemm_fp8_scale<T, S>(g, row, n0 + jg * 8 * S + 2 * (lane & 3), 2, v);
    epi.compute(rows[i][h], src[h], row, col, v, w[h]);
  }
}

// What the functor reads for column group jg of this thread's rows (i, h): Epi::load, a row past M
// reading the last row (it stores nothing).
template <int BM, int BN, int MI, int S, class Epi>
__device__ __forceinline__ void sm90_epi_load(const GemmArgs &g, const Epi &epi, int m0, int n0, int row_base, int jg,
                                              typename Epi::Src (&src)[MI][2]) {
  const int lane = threadIdx.x & 31, warp = (threadIdx.x & 127) >> 5;
  const int col = n0 / S + jg * 8 + 2 * (lane & 3);
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      src[i][h] = epi.load(min(m0 + row_base + i * 64 + warp * 16 + (lane >> 2) + h * 8, g.M - 1), col, 2);
}

// Column groups jg and jg + 1, whole, with 16-bit outputs stored 4 columns (8 bytes) per thread:
// lanes l and l ^ 1 swap one pair of each output, so that a quad stores a whole 32-byte sector of
// its row per instruction (pair by pair, each store instruction wrote half of 8 sectors; the bf16
// wgrad: grad_sm90.cuh, wgrad_store_bf16x4). Each value is computed as apply() computes it; only
// the lane that stores it changes. What the two groups read (s0, s1) was loaded by the caller, a
// pair of groups ahead (sm90_epilogue); every lane shuffles, rows past M included.
template <int BM, int BN, int MI, int S, int STATS, class T, class Epi>
__device__ __forceinline__ void sm90_epi_quads(const GemmArgs &g, const Epi &epi, const float (&acc)[MI][BN / 2],
                                               const typename Epi::Row (&rows)[MI][2], int m0, int n0, int row_base,
                                               int jg, const typename Epi::Src (&s0)[MI][2],
                                               const typename Epi::Src (&s1)[MI][2]) {
  constexpr int Q = Epi::QUADS;
  const int lane = threadIdx.x & 31, warp = (threadIdx.x & 127) >> 5, odd = lane & 1;
  u32 w0[MI][2][Q];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
#pragma unroll
    for (int i = 0; i < MI; ++i) {
      if (half == 0) {
        sm90_epi_words<BM, BN, MI, S, STATS, T>(g, epi, acc, rows, m0, n0, row_base, jg, i, s0[i], w0[i]);
        continue;
      }
      u32 w1[2][Q];
      sm90_epi_words<BM, BN, MI, S, STATS, T>(g, epi, acc, rows, m0, n0, row_base, jg + 1, i, s1[i], w1);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        u32 st[Q][2];
#pragma unroll
        for (int q = 0; q < Q; ++q) {
          const u32 got = __shfl_xor_sync(0xffffffffu, odd ? w0[i][h][q] : w1[h][q], 1);
          st[q][0] = odd ? got : w0[i][h][q];
          st[q][1] = odd ? w1[h][q] : got;
        }
        const int row = m0 + row_base + i * 64 + warp * 16 + (lane >> 2) + h * 8;
        if (row < g.M) epi.store4(row, n0 / S + 8 * (jg + odd) + 2 * ((lane & 3) - odd), st);
      }
    }
  }
}

// Column groups outer; with 16-bit outputs (Epi::QUADS, N a multiple of 4) two groups at a time
// where both are whole (sm90_epi_quads), the others alone; with N a multiple of the tile's columns
// (Epi::NCOLS) every pair is whole, and the code for the others is left out. Not for fp8 products
// (T): their 64-row kernels spill already, and more with the held words (ptxas: the Llama-3-8B fp8
// down-projection's, 252 -> 260 bytes of spill stores). The pairs' loads (an epilogue reading a
// tensor: the residual, the keep forward's saved gate) are issued a pair ahead, so that a tile's
// epilogue waits about one memory latency instead of one per pair (the up product of the keep
// forward, which reads the saved gate: 1.75 ms against the gate product's 1.36 at 8192 tokens with
// a load per pair before its use).
template <int BM, int BN, int MI, int S, int STATS, class T, class Epi>
__device__ __forceinline__ void sm90_epilogue(const GemmArgs &g, const Epi &epi, float (&acc)[MI][BN / 2],
                                              const float *rowstat, int m0, int n0, int row_base) {
  constexpr int NG = BN / 8 / S;
  const int lane = threadIdx.x & 31, warp = (threadIdx.x & 127) >> 5, M = g.M;
  typename Epi::Row rows[MI][2];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int rl = row_base + i * 64 + warp * 16 + (lane >> 2) + h * 8;
      rows[i][h] = epi.prep(min(m0 + rl, M - 1), STATS == 2 ? rowstat[BM + rl] : 0.f, STATS ? rowstat[rl] : 0.f);
    }
  if constexpr (Epi::QUADS > 0 && NG % 2 == 0 && !is_fp8<T>::value) {
    /* the pair (jg, jg + 1) is whole: stored together; what it reads was loaded a pair before */
    auto whole = [&](int jg) { return Epi::NCOLS % (BN / S) == 0 || n0 / S + jg * 8 + 16 <= g.N; };
    typename Epi::Src cur[2][MI][2] = {}, nxt[2][MI][2] = {};
    if (whole(0)) {
      sm90_epi_load<BM, BN, MI, S>(g, epi, m0, n0, row_base, 0, cur[0]);
      sm90_epi_load<BM, BN, MI, S>(g, epi, m0, n0, row_base, 1, cur[1]);
    }
#pragma unroll
    for (int jg = 0; jg < NG; jg += 2) {
      const bool w = whole(jg);
      if (jg + 2 < NG && whole(jg + 2)) {
        sm90_epi_load<BM, BN, MI, S>(g, epi, m0, n0, row_base, jg + 2, nxt[0]);
        sm90_epi_load<BM, BN, MI, S>(g, epi, m0, n0, row_base, jg + 3, nxt[1]);
      }
      if (w) {
        sm90_epi_quads<BM, BN, MI, S, STATS, T>(g, epi, acc, rows, m0, n0, row_base, jg, cur[0], cur[1]);
      } else {
        sm90_epi_group<BM, BN, MI, S, STATS, T>(g, epi, acc, rows, m0, n0, row_base, jg);
        sm90_epi_group<BM, BN, MI, S, STATS, T>(g, epi, acc, rows, m0, n0, row_base, jg + 1);
      }
#pragma unroll
      for (int k = 0; k < 2; ++k)
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
          for (int h = 0; h < 2; ++h) cur[k][i][h] = nxt[k][i][h];
    }
  } else {
#pragma unroll
    for (int jg = 0; jg < NG; ++jg)
      sm90_epi_group<BM, BN, MI, S, STATS, T>(g, epi, acc, rows, m0, n0, row_base, jg);
  }
}

// ---- the mixed-input producer (WQ: weight-only quantized B, bf16 A) ------------------------------
//
// B's codes and scales (kernels/quant.cuh: the packed tiles, f32 scales [S*N, groups]) instead of
// a bf16 B: warp 0 copies each k-tile's codes (BN / 16 row blocks x 64 k, 512-byte tiles) by bulk
// copies and its rows' scales by 4-byte cp.async into a ring of CS slots (quant.cuh) (cfull[cs]:
// the codes' bytes and the lanes' copies), CS k-tiles ahead; thread 0 loads A's k-tile by TMA into
// the stage as the plain kernel does; and the four warps turn the codes into the stage's bf16 B
// tile in the 128B-swizzle layout the consumers' wgmmas read, so the consumers are those of the
// bf16 kernel and the weights cross HBM once, as codes. A warp converts half a row block (one
// 32-k block) at a time, warp 0 the first RB / 4 halves (it also issues the copies), warps 1-3
// the rest round robin; each lane its rows g, g + 8 and the 8 consecutive k of each 32-k block from 8 (lane % 4)
// (wq_block_bf16: the same bf16 weights ffn_wq_dequant writes); lanes of odd g take the two blocks
// in the other order, so that each quarter warp's 16-byte stores cover 8 distinct chunk positions
// (no bank conflict). Each thread fences its generic-proxy stores for the async proxy before its
// warp arrives on full[s] (count 1 + 4: A's bytes and the four warps) and on cempty[cs] (count 4);
// warp 0 alone waits for cempty before it copies into the slot again, so the other warps run on
// (up to CS - 1 k-tiles ahead) instead of meeting at a barrier every k-tile. Rows past the codes'
// (a multiple of 128) or k past their tiles are not copied: the slot keeps older codes there, and
// a zero scale (rows past S*N, k past K) makes those weights zero.

// A CTA's k-tiles in the order its consumers take them: those of work items w = first, first +
// stride, ... below `items` (gemm_sm90_persistent: every gridDim.x-th; gemm_sm90: its one item,
// `single`), item w being split w / tiles of tile w % tiles (gemm_tile_coords' order). kt: the
// current k-tile of the item whose tile starts at row m0, merged column n0; its k-tiles end
// before `end`. Items without k-tiles are skipped.
template <int BM, int BN, int BK, int S> struct Sm90KSeq {
  int w, stride, items, tiles_m, tiles_n, splits, ktiles;
  int m0, n0, kt, end;
  __device__ __forceinline__ void item() {
    const int tiles = tiles_m * tiles_n, z = w / tiles;
    int tm, tn;
    gemm_tile_coords(w - z * tiles, tiles_m, tiles_n, tm, tn);
    m0 = tm * BM, n0 = tn * BN;
    kt = (int)((long long)ktiles * z / splits), end = (int)((long long)ktiles * (z + 1) / splits);
  }
  __device__ __forceinline__ void skip_empty() {
    for (; w < items; w += stride) {
      item();
      if (kt < end) return;
    }
  }
  __device__ __forceinline__ void next() {
    if (++kt < end) return;
    w += stride;
    skip_empty();
  }
  __device__ __forceinline__ bool valid() const { return w < items; }
  static __device__ __forceinline__ Sm90KSeq persistent(const GemmArgs &g) {
    Sm90KSeq q;
    q.w = blockIdx.x, q.stride = gridDim.x, q.tiles_m = (g.M + BM - 1) / BM, q.tiles_n = (S * g.N + BN - 1) / BN;
    q.splits = g.splits, q.items = q.tiles_m * q.tiles_n * q.splits, q.ktiles = (g.K + BK - 1) / BK;
    q.skip_empty();
    return q;
  }
  static __device__ __forceinline__ Sm90KSeq single(int m0, int n0, int kt0, int nk) {
    Sm90KSeq q;
    q.w = nk > 0 ? 0 : 1, q.stride = 1, q.items = 1, q.m0 = m0, q.n0 = n0, q.kt = kt0, q.end = kt0 + nk;
    return q;
  }
};

// Warp 0 of the producer warpgroup: k-tile kt of the tile at merged column n0 into the ring's slot
// cs, its codes by bulk copies and its rows' scales for the two 32-k blocks by 4-byte cp.async
// (zero where the row is past S*N or the block past K); the slot's barrier completes with the
// codes' bytes (one arrival) and each lane's copies (32).
template <int BN, int BK, int S, int WQ>
__device__ __forceinline__ void sm90_wq_issue(const GemmArgs &g, u32 cring, u32 cbars, int n0, int kt, int cs,
                                              long long G, int ng) {
  constexpr int TPK = BK / WQ_TILE_K(WQ), RB = BN / 16;
  const int lane = threadIdx.x & 31;
  const long long tk = wq_tiles_k(g.K, WQ), R = (long long)S * g.N;
  const int crows = (int)wq_code_rows(R);
  const u32 bar = cbars + 8 * cs, dst = cring + cs * wqmx_stage_bytes(BN, WQ);
  fence_proxy_async(); // the warps' reads of the slot (generic proxy, before cempty) come first
  const unsigned char *codes = (const unsigned char *)g.B;
  if (TPK == 1) { // the row blocks of one group of WQ_RB_GROUP lie side by side: a copy a group
    const int rb0 = n0 / 16, g0 = rb0 / WQ_RB_GROUP, a = max(rb0, (g0 + lane) * WQ_RB_GROUP);
    const int b = min(min(rb0 + RB, (g0 + lane + 1) * WQ_RB_GROUP), crows / 16);
    if (lane < (RB + WQ_RB_GROUP - 1) / WQ_RB_GROUP + 1 && a < b)
      bulk_load(dst + (a - rb0) * 512, codes + wq_tile_index(a, kt, tk) * 512, (u32)(b - a) * 512, bar);
  } else
    for (int c = lane; c < RB * TPK; c += 32) { // c = row block u * TPK + tile of the step
      const int u = c / TPK, kq = kt * TPK + c % TPK, rb = n0 / 16 + u;
      if (rb * 16 < crows && kq < tk) bulk_load(dst + c * 512, codes + wq_tile_index(rb, kq, tk) * 512, 512, bar);
    }
  if (lane == 0) {
    const int rows = min(RB, (crows - n0) / 16), ks = (int)min((long long)TPK, tk - (long long)kt * TPK);
    mbar_expect_tx(bar, (u32)(rows * ks * 512));
  }
  const int kc = kt * BK;
  for (int i = lane; i < 2 * BN; i += 32) { // scale (row i / 2, block i % 2)
    const long long r = n0 + i / 2, k = kc + 32 * (i % 2);
    const bool ok = r < R && k < g.K;
    cp_async4(dst + wqmx_code_bytes(BN, WQ) + 4 * i, ok ? g.qs + r * ng + k / G : g.qs, ok);
  }
  cp_async_mbar_arrive(bar);
}

// The lane's part of block b (0, 1: the two 32-k blocks of the step) of row block u of the stage:
// the lane takes the tile's block pb (b, or the other one for odd g: quant.cuh, wqmx_block), its
// words from the slot at `slot` (i4: 8 bytes of the row block's one tile, i8: 16 of the step's
// second tile for pb 1), the scales of its two rows for pb from the slot's scales, and stores the
// bf16 results into the B tile at bdst. Half a row block per call, so that the 14 row blocks of a
// 224-wide tile split evenly over the four warps (7 halves each).
template <int BN, int WQ>
__device__ __forceinline__ void sm90_wq_half(u32 slot, u32 bdst, int u, int b, int lane) {
  const int gr = lane >> 2, t = lane & 3, pb = wqmx_block(lane, b);
  u32 w[4];
  if (WQ == 4)
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "r"(slot + u * 512 + lane * 16 + 8 * pb) : "memory");
  else
    lds128(slot + u * 1024 + 512 * pb + lane * 16, w[0], w[1], w[2], w[3]);
  const u32 scales = slot + wqmx_code_bytes(BN, WQ);
  float sc[2];
  u32 v[2][4];
#pragma unroll
  for (int h = 0; h < 2; ++h)
    asm volatile("ld.shared.f32 %0, [%1];" : "=f"(sc[h]) : "r"(scales + 8 * (u * 16 + gr + 8 * h) + 4 * pb) : "memory");
  wq_block_bf16(WQ, w, sc, v);
#pragma unroll
  for (int h = 0; h < 2; ++h) // row u * 16 + g + 8h of the tile, the chunk of k 32 pb + 8t
    sts128(bdst + wqmx_sw128(u * 16 + gr + 8 * h, 4 * pb + t), v[h][0], v[h][1], v[h][2], v[h][3]);
}

// The producer warpgroup of gemm_sm90<..., WQ> and gemm_sm90_persistent<..., WQ>: all 128
// threads, over the CTA's k-tiles `seq` (the ring's slots and phases run on across items).
template <int BM, int BN, int BK, int STAGES, int S, int WQ, int CS, bool WD>
__device__ __forceinline__ void sm90_wq_producer(const GemmArgs &g, u32 sbase, u32 bars, u32 cbars,
                                                 Sm90KSeq<BM, BN, BK, S> seq) {
  constexpr int ROW = BK * 2, A_BYTES = BM * ROW, STAGE = (BM + BN) * ROW;
  constexpr int RB = BN / 16, H0 = RB / 4; // row blocks; halves converted by warp 0
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const u32 cring = sbase + STAGES * STAGE;
  const long long G = wq_group_len(g.K, WQ == 8 ? 0 : g.qg);
  const int ng = (int)wq_ngroups(g.K, G);
  const TmaMaps *t = (const TmaMaps *)g.tma;
  if (tid == 0) tma_prefetch_map(&t->a);
  Sm90KSeq<BM, BN, BK, S> ahead = seq; // warp 0: the k-tile whose codes are copied next
  if (warp == 0)
    for (int c = 0; c < CS && ahead.valid(); ++c, ahead.next())
      sm90_wq_issue<BN, BK, S, WQ>(g, cring, cbars, ahead.n0, ahead.kt, c, G, ng);
  int s = 0, cs = 0;
  u32 phase = 0, cphase = 0;
  for (int n = 0; seq.valid(); ++n, seq.next()) {
    if (n >= STAGES) mbar_wait<WD>(bars + 8 * (STAGES + s), phase ^ 1u); // consumers released k-tile n - STAGES
    const u32 full = bars + 8 * s, dst = sbase + s * STAGE;
    const int kc = seq.kt * BK;
    if (tid == 0) {
      mbar_expect_tx(full, A_BYTES);
      tma_load_2d(dst, &t->a, kc, seq.m0, full);
    }
    const u32 cfull = cbars + 8 * cs, cempty = cbars + 8 * (CS + cs);
    mbar_wait<WD>(cfull, cphase); // this k-tile's codes and scales have landed
    const u32 slot = cring + cs * wqmx_stage_bytes(BN, WQ);
    // warp 0 also issues the next k-tile's copies (about RB / 3 halves' worth of instructions:
    // kernels/NOTES.md, thirty-third session), so it converts the first H0 halves and the other
    // three warps the rest, round robin
    for (int i = warp ? H0 + warp - 1 : 0; i < (warp ? 2 * RB : H0); i += warp ? 3 : 1)
      sm90_wq_half<BN, WQ>(slot, dst + A_BYTES, i >> 1, i & 1, lane);
    fence_proxy_async(); // the stores, for the consumers' wgmmas (async proxy)
    __syncwarp();
    if (lane == 0) mbar_arrive(full), mbar_arrive(cempty);
    if (warp == 0 && ahead.valid()) { // slot cs again, once every warp is done with it
      mbar_wait<WD>(cempty, cphase);
      sm90_wq_issue<BN, BK, S, WQ>(g, cring, cbars, ahead.n0, ahead.kt, cs, G, ng);
      ahead.next();
    }
    if (++s == STAGES) s = 0, phase ^= 1u;
    if (++cs == CS) cs = 0, cphase ^= 1u;
  }
}

// ---- the GEMM -----------------------------------------------------------------------------------


// CWG: consumer warpgroups (BM / CWG rows each). CTAS: the kernel's __launch_bounds__ minimum
// blocks per SM. TMA: one producer thread loads each stage with two TMA copies through the tensor
// maps at g.tma (kernels/abi.cuh: TmaMaps; boxes of BK x BM and BK x BN 16-bit units, 128-byte
// swizzle, zero fill outside the tensors) instead of 128 threads issuing 16-byte cp.async. With CWG == 2 it must be 1: the CTA then starts with 168 registers per thread and
// setmaxnreg splits them 48 (producer) / 224 (consumers); at 2 CTAs/SM (80 registers at entry)
// ptxas cannot compile a wgmma m64n128 at all. With CWG == 1 (256 threads) no setmaxnreg is needed.
// CWG == 3 (512 threads, 24 / 160 registers) is for fp8 products with 128-wide tiles: each consumer
// waits for its promotion block (sm90_fp8_loop) while the other two keep the tensor cores busy.
// CLUSTER: 2 for the clustered kernel (header: "Clusters"; the entry point needs __cluster_dims__(2, 1, 1)).
template <int BM, int BN, int BK, int STAGES, int S, int STATS, class T, int CWG = (BM >= 128 ? 2 : 1), int CTAS = 1,
          bool TMA = false, int CLUSTER = 1, int WQ = 0, class Epi>
__device__ __forceinline__ void gemm_sm90(const GemmArgs &g, const Epi &epi, char *smem) {
  constexpr int WG_M = BM / CWG, MI = WG_M / 64; // rows per consumer warpgroup, m64 wgmmas per k-step
  constexpr int NC = 128 * CWG;                  // consumer threads
  constexpr int ROW = BK * 2;                    // bytes per smem row (128: one swizzle atom wide)
  constexpr int A_BYTES = BM * ROW, STAGE = (BM + BN) * ROW;
  constexpr int CPR = BK / 8, RPP = 128 / CPR;   // 16-byte chunks per row, rows per producer pass
  constexpr int A_ITERS = BM / RPP, B_ITERS = BN / RPP;
  constexpr int TPR = 128 / WG_M, CPT = CPR / TPR; // statistics: threads per A row, chunks per thread
  static_assert(BK == 64, "BK must be 64 (one 128-byte swizzle atom of 16-bit elements)");
  static_assert(CWG >= 1 && CWG <= 3, "one to three consumer warpgroups");
  static_assert(CWG < 3 || (TMA && is_fp8<T>::value), "three consumer warpgroups: fp8 through TMA (the promotion's waits)");
  static_assert(WG_M % 64 == 0 && MI <= 2, "each consumer warpgroup owns 64 or 128 rows");
  static_assert(BN == 64 || BN == 128 || BN == 224 || BN == 256, "BN: 64, 128, 224 or 256 (the wgmma wrappers)");
  static_assert(BN % (8 * S) == 0, "BN must be a multiple of 8*S");
  static_assert(S == 1 || S == 2, "S is 1 or 2");
  static_assert(STATS >= 0 && STATS <= 2, "STATS is 0, 1 or 2");
  static_assert(!is_fp8<T>::value || STATS == 0, "fp8 A: no row statistics (normfold leaves fp8 products alone)");
  static_assert(!is_fp8<T>::value || MI == 1, "fp8: 64 rows per consumer warpgroup (registers: acc and tmp)");
  typedef typename gemm_unit<T>::type U; // what a k step of 2 bytes holds (GemmArgs)
  static_assert(BM % RPP == 0 && BN % RPP == 0 && B_ITERS <= 32, "producer copy assignment");
  constexpr int CS = gemm_sm90_wq_cs<BM, BN, BK, STAGES, WQ>(); // WQ: the codes' ring
  static_assert(!WQ || CS >= 2, "the codes' ring");
  static_assert(16 * STAGES + 16 + 16 * CS + 1024 <= 2048, "barrier area");
  static_assert(gemm_sm90_smem_bytes<BM, BN, BK, STAGES, WQ>() * CTAS <= FFN_SM90_MAX_SMEM, "shared memory");
  static_assert(WQ == 0 || (TMA && CLUSTER == 1 && CWG == 2 && is_bf16<T>::value),
                "mixed input (WQ 4 or 8 bits): TMA, no cluster, two consumer warpgroups, bf16 A");
  static_assert(CTAS == 1 || (CTAS == 2 && CWG == 1), "CTAS: 1, or 2 with one consumer warpgroup");
  static_assert(CLUSTER == 1 || (CLUSTER == 2 && TMA && (BM / CLUSTER) % 8 == 0),
                "clusters: 2 CTAs, TMA, each CTA's part of A whole 1024-byte swizzle atoms");
  constexpr bool WD = kMbarWatchdog || CLUSTER > 1; // mbar_wait's watchdog

  const int tid = threadIdx.x;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0); // warp-uniform role
  const int M = g.M, N = g.N, K = g.K, splits = g.splits, z = blockIdx.z;
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (S * N + BN - 1) / BN;
  // tile: the split-K slab and counter (< tiles_m * tiles_n); a cluster takes column tiles
  // CLUSTER * pair + rank of one row tile, the last pair padded (has_tile false)
  const int rank = CLUSTER > 1 ? (int)cluster_ctarank() : 0;
  int tm, tn, tile;
  if (CLUSTER == 1) {
    gemm_tile_coords(blockIdx.x, tiles_m, tiles_n, tm, tn);
    tile = blockIdx.x;
  } else {
    int pair;
    gemm_tile_coords(blockIdx.x / CLUSTER, tiles_m, (tiles_n + CLUSTER - 1) / CLUSTER, tm, pair);
    tn = pair * CLUSTER + rank;
    tile = tm * tiles_n + tn;
  }
  const bool has_tile = tn < tiles_n;
  const int m0 = tm * BM, n0 = tn * BN; // n0 in merged columns
  const int ktiles = (K + BK - 1) / BK;
  const int kt0 = (int)((long long)ktiles * z / splits);
  const int nk = (int)((long long)ktiles * (z + 1) / splits) - kt0;

  // Shared memory: realign the base to 1024 bytes (the swizzle atom); static shared memory of the
  // enclosing kernel may have moved the dynamic base off that boundary.
  const u32 raw = smem_addr(smem);
  const u32 sbase = (raw + 1023u) & ~1023u;
  char *base = smem + (sbase - raw);
  constexpr int CRING = CS * wqmx_stage_bytes(BN, WQ); // the codes' ring (WQ), after the stages
  const u32 bars = sbase + STAGES * STAGE + CRING;           // full[s] at +8s, empty[s] at +8(STAGES+s)
  u32 *flag = (u32 *)(base + STAGES * STAGE + CRING + 16 * STAGES);  // split-K: this CTA arrived last
  float *rowstat = (float *)(base + STAGES * STAGE + CRING + 16 * STAGES + 16); // [2][BM]: sum of squares, sum
  const u32 cbars = bars + 16 * STAGES + 16 + 8 * BM; // WQ: cfull[cs] at +8cs, cempty[cs] at +8(CS + cs)

  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(bars + 8 * s, WQ ? 1 + 4 : TMA ? 1 : 128); // the TMA thread (and WQ's four warps) or every producer thread
      mbar_init(bars + 8 * (STAGES + s), 4 * CWG * CLUSTER); // one per consumer warp of the cluster
    }
#pragma unroll
    for (int c = 0; c < CS; ++c)
      mbar_init(cbars + 8 * c, 1 + 32), mbar_init(cbars + 8 * (CS + c), 4); // cfull, cempty
    fence_barrier_init();
  }
  __syncthreads();
  if (CLUSTER > 1) cluster_sync(); // the peer's barriers are initialized before any copy or arrival reaches them

  if (wg == 0) {
    // ---------------- producer warpgroup ----------------
    if (CWG == 2) setmaxnreg_dec<WQ ? 56 : 48>(); // 56 x 128 + 224 x 256 <= 168 x 384: the CTA's registers
    if (CWG == 3) setmaxnreg_dec<24>(); // 24 x 128 + 160 x 384 <= 128 x 512
    if constexpr (WQ != 0) {
      sm90_wq_producer<BM, BN, BK, STAGES, S, WQ, CS, WD>(g, sbase, bars, cbars,
                                                      Sm90KSeq<BM, BN, BK, S>::single(m0, n0, kt0, nk));
      return;
    } else if constexpr (TMA) {
      if (tid != 0) return;
      const TmaMaps *t = (const TmaMaps *)g.tma;
      tma_prefetch_map(&t->a);
      tma_prefetch_map(&t->b);
      constexpr int A_PART = A_BYTES / CLUSTER; // the rows of A this CTA loads (all without a cluster)
      const u32 bytes = has_tile ? STAGE : A_BYTES;
      int s = 0;
      u32 phase = 0;
      for (int j = 0; j < nk; ++j) {
        // consumers (of both CTAs in a cluster) released k-tile j - STAGES
        if (j >= STAGES) mbar_wait<WD, (CLUSTER > 1)>(bars + 8 * (STAGES + s), phase ^ 1u);
        const u32 full = bars + 8 * s, dst = sbase + s * STAGE;
        const int kc = (kt0 + j) * BK;
        mbar_expect_tx(full, bytes);
        if (CLUSTER == 1)
          tma_load_2d(dst, &t->a, kc, m0, full);
        else
          tma_load_2d_multicast(dst + rank * A_PART, &t->a, kc, m0 + rank * (BM / CLUSTER), full, (1u << CLUSTER) - 1);
        if (has_tile) tma_load_2d(dst + A_BYTES, &t->b, kc, n0, full);
        if (++s == STAGES) s = 0, phase ^= 1u;
      }
      // cluster: stay until the last STAGES k-tiles are released, the peer's arrivals on this
      // CTA's barriers among them (header: "Clusters", end)
      for (int j = nk; CLUSTER > 1 && j < nk + STAGES; ++j) {
        if (j >= STAGES) mbar_wait<WD, true>(bars + 8 * (STAGES + s), phase ^ 1u);
        if (++s == STAGES) s = 0, phase ^= 1u;
      }
      return;
    }
    // Thread copies chunk `ch` of rows r0, r0 + RPP, ... of each tile (as in gemm_sm80).
    const int ch = tid % CPR, r0 = tid / CPR;
    const U *__restrict__ Ag = (const U *)g.A;
    const U *__restrict__ Bg = (const U *)g.B;
    const U *a_base = Ag + (size_t)(m0 + r0) * K + ch * 8;
    const U *b_base = Bg + (size_t)(n0 + r0) * K + ch * 8;
    u32 a_ok = 0, b_ok = 0;
#pragma unroll
    for (int i = 0; i < A_ITERS; ++i)
      if (m0 + r0 + i * RPP < M) a_ok |= 1u << i;
#pragma unroll
    for (int i = 0; i < B_ITERS; ++i)
      if (gemm_brow_valid<S>(n0 + r0 + i * RPP, N)) b_ok |= 1u << i;
    const u32 a_dst = sbase + (u32)(r0 * ROW + ((ch ^ (r0 & 7)) << 4)); // RPP % 8 == 0: same swizzle per pass
    int s = 0;
    u32 phase = 0;
    for (int j = 0; j < nk; ++j) {
      if (j >= STAGES) mbar_wait(bars + 8 * (STAGES + s), phase ^ 1u); // consumers released k-tile j - STAGES
      const int koff = (kt0 + j) * BK;
      const bool kok = koff + ch * 8 < K;
      const u32 dst = a_dst + s * STAGE;
      // One running pointer per operand: per-row pointers would not fit in the producer's registers.
      const U *pa = a_base + koff, *pb = b_base + koff;
#pragma unroll
      for (int i = 0; i < A_ITERS; ++i, pa += RPP * (size_t)K) {
        const bool ok = kok && ((a_ok >> i) & 1);
        cp_async16(dst + i * RPP * ROW, ok ? pa : Ag, ok);
      }
#pragma unroll
      for (int i = 0; i < B_ITERS; ++i, pb += RPP * (size_t)K) {
        const bool ok = kok && ((b_ok >> i) & 1);
        cp_async16(dst + A_BYTES + i * RPP * ROW, ok ? pb : Bg, ok);
      }
      cp_async_mbar_arrive(bars + 8 * s);
      if (++s == STAGES) s = 0, phase ^= 1u;
    }
    cp_async_wait_all();
  } else {
    // ---------------- consumer warpgroups ----------------
    if (CWG == 2) setmaxnreg_inc<224>();
    if (CWG == 3) setmaxnreg_inc<160>();
    const int ctid = tid - 128, cw = wg - 1, wtid = ctid & 127; // consumer thread, warpgroup, thread in it
    const int lane = tid & 31;
    float acc[MI][BN / 2];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int e = 0; e < BN / 2; ++e) acc[i][e] = 0.f;
    const u64 da0 = wgmma_desc_sw128(sbase + cw * WG_M * ROW);
    const u64 db0 = wgmma_desc_sw128(sbase + A_BYTES);
    // statistics: this thread's A row (in the tile) and first chunk
    const int srow = cw * WG_M + wtid / TPR, sch = (wtid % TPR) * CPT;
    const u32 srow_addr = sbase + srow * ROW;
    float ssq0 = 0.f, ssq1 = 0.f, ssum0 = 0.f, ssum1 = 0.f;

    int s = 0;
    u32 phase = 0;
    if (CLUSTER > 1 && !has_tile) { // a padded cluster's idle CTA: each stage back once both halves of A landed
      for (int j = 0; j < nk; ++j) {
        mbar_wait<WD>(bars + 8 * s, phase);
        sm90_release<CLUSTER>(bars + 8 * (STAGES + s), lane);
        if (++s == STAGES) s = 0, phase ^= 1u;
      }
      return;
    }
    if constexpr (!is_fp8<T>::value) {
      int prev = 0;
      for (int j = 0; j < nk; ++j) {
        mbar_wait<WD>(bars + 8 * s, phase);
        if (!TMA) fence_proxy_async();
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk)
#pragma unroll
          for (int i = 0; i < MI; ++i)
            wgmma_ss<BN, T>(acc[i], da0 + (u64)((s * STAGE + i * 64 * ROW + kk * 32) >> 4),
                            db0 + (u64)((s * STAGE + kk * 32) >> 4));
        wgmma_commit();
        // overlaps the wgmmas just issued: they only read this stage
        if constexpr (STATS != 0) sm90_stats_step<CPT, STATS, T>(srow_addr + s * STAGE, sch, srow, ssq0, ssq1, ssum0, ssum1);
        wgmma_wait<1>(); // the group of k-tile j - 1 has completed: its stage can be refilled
        if (j > 0) sm90_release<CLUSTER>(bars + 8 * (STAGES + prev), lane);
        prev = s;
        if (++s == STAGES) s = 0, phase ^= 1u;
      }
      if (CLUSTER > 1 && nk > 0) { // the last stage too: the peer's producer waits for it before it exits
        wgmma_wait<0>();
        sm90_release<CLUSTER>(bars + 8 * (STAGES + prev), lane);
      }
    } else {
      sm90_fp8_loop<BN, MI, ROW, STAGES, STAGE, !TMA, CLUSTER, WD, T>(acc, bars, da0, db0, nk, s, phase);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < MI; ++i) reg_fence(acc[i]);

    // ---- row statistics: combine the TPR threads of a row; rowstat is this CTA's (split's) part ----
    if (STATS) {
      float q = ssq0 + ssq1, sm = ssum0 + ssum1;
      if (TPR == 2) {
        q += __shfl_xor_sync(0xffffffffu, q, 1);
        sm += __shfl_xor_sync(0xffffffffu, sm, 1);
      }
      if (wtid % TPR == 0) {
        rowstat[srow] = q;
        rowstat[BM + srow] = sm;
      }
      named_bar_sync(1, NC);
    }

    // ---- split-K: every split stores its partials; the last to arrive sums them in split order ----
    if (splits > 1 && !sm90_splitk<BM, BN, MI, STATS>(g, acc, rowstat, flag, tile, z, m0, cw * WG_M, ctid, NC, 1))
      return;
    sm90_epilogue<BM, BN, MI, S, STATS, T>(g, epi, acc, rowstat, m0, n0, cw * WG_M);
  }
}

#else // not sm_90a

template <int BM, int BN, int BK, int STAGES, int S, int STATS, class T, int CWG = (BM >= 128 ? 2 : 1), int CTAS = 1,
          bool TMA = false, int CLUSTER = 1, int WQ = 0, class Epi>
__device__ __forceinline__ void gemm_sm90(const GemmArgs &, const Epi &, char *) {
  static_assert(sizeof(T) == 0, "gemm_sm90 needs the sm_90a target (--gpu-architecture=sm_90a)");
}

#endif

} // namespace ffn
