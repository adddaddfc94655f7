// common.cuh: the device-side basics every ffnc kernel template builds on.
//
// NVRTC compiles the generated source with no system or CUDA headers (no <cstdint>, no cuda_bf16.h),
// so this file defines the integer types, the 16-bit and 8-bit float storage types and their
// conversions (inline PTX), the elementwise ops' math (opmath.cuh, in f32), and thin wrappers over the sm_80+ instructions
// the GEMM templates use (cp.async, ldmatrix, mma.sync). Compiled without --use_fast_math: f32
// models are checked at 1e-5, so expf/erff/tanhf are the accurate library versions.
#pragma once

namespace ffn {

typedef signed char i8;
typedef unsigned char u8;
typedef short i16;
typedef unsigned short u16;
typedef int i32;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

// Storage types: distinct structs so that overloads and templates tell them apart.
struct bf16 { u16 bits; };
struct f16 { u16 bits; };
struct fp8e4m3 { u8 bits; };
struct fp8e5m2 { u8 bits; };

// The first statement of every kernel of a plan (abi.cuh: FFN_PDL_MIN_ARCH): the next kernel on
// the stream may start (it waits in its own pdl_entry), then this one waits for the kernels before
// it. Both are no-ops for a plain launch.
__device__ __forceinline__ void pdl_entry() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }

// ---- conversions ----------------------------------------------------------------------------

__device__ __forceinline__ float bf16_bits_to_f32(u16 h) { return __uint_as_float((u32)h << 16); }
__device__ __forceinline__ float f16_bits_to_f32(u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ u16 f32_to_bf16_bits(float f) {
  u16 h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ u16 f32_to_f16_bits(float f) {
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
// Two floats into one 32-bit word, lo in the low half (the lower address when stored).
__device__ __forceinline__ u32 pack_bf16x2(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ u32 pack_f16x2(float lo, float hi) {
  u32 r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ void unpack_bf16x2(u32 w, float &lo, float &hi) {
  lo = __uint_as_float(w << 16);
  hi = __uint_as_float(w & 0xffff0000u);
}
__device__ __forceinline__ void unpack_f16x2(u32 w, float &lo, float &hi) {
  lo = f16_bits_to_f32((u16)(w & 0xffffu));
  hi = f16_bits_to_f32((u16)(w >> 16));
}

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16 x) { return bf16_bits_to_f32(x.bits); }
__device__ __forceinline__ float to_f32(f16 x) { return f16_bits_to_f32(x.bits); }

template <class T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 from_f32<bf16>(float x) { bf16 r; r.bits = f32_to_bf16_bits(x); return r; }
template <> __device__ __forceinline__ f16 from_f32<f16>(float x) { f16 r; r.bits = f32_to_f16_bits(x); return r; }

// A 32-bit word holding two 16-bit values of T, unpacked to floats (T = bf16 or f16).
template <class T> __device__ __forceinline__ void unpack2(u32 w, float &lo, float &hi);
template <> __device__ __forceinline__ void unpack2<bf16>(u32 w, float &lo, float &hi) { unpack_bf16x2(w, lo, hi); }
template <> __device__ __forceinline__ void unpack2<f16>(u32 w, float &lo, float &hi) { unpack_f16x2(w, lo, hi); }
template <class T> __device__ __forceinline__ u32 pack2(float lo, float hi);
template <> __device__ __forceinline__ u32 pack2<bf16>(float lo, float hi) { return pack_bf16x2(lo, hi); }
template <> __device__ __forceinline__ u32 pack2<f16>(float lo, float hi) { return pack_f16x2(lo, hi); }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
// fp8 (sm_89+). Saturating: out-of-range values become the largest finite value, not inf/NaN.
__device__ __forceinline__ u16 pack_e4m3x2(float lo, float hi) {
  u16 r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ u16 pack_e5m2x2(float lo, float hi) {
  u16 r;
  asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}
// Two fp8 values (lo in the low byte) to two halves in f16x2, then to f32.
__device__ __forceinline__ void unpack_e4m3x2(u16 w, float &lo, float &hi) {
  u32 h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(w));
  unpack_f16x2(h2, lo, hi);
}
__device__ __forceinline__ void unpack_e5m2x2(u16 w, float &lo, float &hi) {
  u32 h2;
  asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(h2) : "h"(w));
  unpack_f16x2(h2, lo, hi);
}
__device__ __forceinline__ float to_f32(fp8e4m3 x) { float lo, hi; unpack_e4m3x2((u16)x.bits, lo, hi); return lo; }
__device__ __forceinline__ float to_f32(fp8e5m2 x) { float lo, hi; unpack_e5m2x2((u16)x.bits, lo, hi); return lo; }
template <> __device__ __forceinline__ fp8e4m3 from_f32<fp8e4m3>(float x) { fp8e4m3 r; r.bits = (u8)(pack_e4m3x2(x, 0.f) & 0xff); return r; }
template <> __device__ __forceinline__ fp8e5m2 from_f32<fp8e5m2>(float x) { fp8e5m2 r; r.bits = (u8)(pack_e5m2x2(x, 0.f) & 0xff); return r; }
#endif

// ---- elementwise ops: ffn::op_silu(float) ... (accurate library math; no fast-math) -------------

#define OPMATH_FLOAT 1
#include "opmath.cuh"

// ---- warp reductions ---------------------------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// x through an empty volatile asm: what is computed from it cannot be merged with the same
// computation from another read of x, so a row held in registers as raw words (ewise.cuh,
// fp8.cuh) is unpacked again in each pass over it instead of being kept unpacked (twice the
// registers) between passes.
__device__ __forceinline__ u32 opaque(u32 x) {
  asm volatile("" : "+r"(x));
  return x;
}
// Sum over groups of W consecutive lanes (W a power of two <= 32).
template <int W> __device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = W / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// ---- global / shared memory --------------------------------------------------------------------

__device__ __forceinline__ u32 smem_addr(const void *p) { return (u32)__cvta_generic_to_shared(p); }

// Loads that go to L2 (not L1): for data another CTA wrote during this launch (split-K partials).
__device__ __forceinline__ void ld_cg_f2(const float *p, float &x, float &y) {
  asm volatile("ld.global.cg.v2.f32 {%0,%1}, [%2];" : "=f"(x), "=f"(y) : "l"(p));
}
__device__ __forceinline__ float ld_cg_f(const float *p) {
  float x;
  asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(x) : "l"(p));
  return x;
}
__device__ __forceinline__ void st_cg_f2(float *p, float x, float y) {
  asm volatile("st.global.cg.v2.f32 [%0], {%1,%2};" ::"l"(p), "f"(x), "f"(y) : "memory");
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
// 16-byte async copy global -> shared; when !pred nothing is read and the 16 bytes are zero-filled
// (src should still be a valid address: callers pass a clamped one).
__device__ __forceinline__ void cp_async16(u32 dst, const void *src, bool pred) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
               "r"(pred ? 16 : 0)
               : "memory");
}
// 4-byte async copy through L1 (cp.async.cg takes only 16): zero-filled when !pred
__device__ __forceinline__ void cp_async4(u32 dst, const void *src, bool pred) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(pred ? 4 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// ldmatrix: lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x2(u32 (&r)[2], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// D += A * B, m16n8k16, f32 accumulators. Fragment layouts are the PTX ISA's:
// a[0..3] = (rows g, k 2t..2t+1), (rows g+8, k 2t..), (rows g, k 2t+8..), (rows g+8, k 2t+8..);
// b[0..1] = (k 2t..2t+1, col g), (k 2t+8.., col g); d[0..3] = (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)
// where g = lane / 4 and t = lane % 4.
template <class T> __device__ __forceinline__ void mma_16816(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1);
template <> __device__ __forceinline__ void mma_16816<bf16>(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <> __device__ __forceinline__ void mma_16816<f16>(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#if __CUDA_ARCH__ >= 890
// fp8 operands: m16n8k32 takes the same registers, byte for byte, as m16n8k16 does with 16-bit
// ones (4 fp8 where 2 halves were), so the GEMM templates' ldmatrix addressing serves both; see
// GemmArgs. D += A * B over 32 k.
template <> __device__ __forceinline__ void mma_16816<fp8e4m3>(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <> __device__ __forceinline__ void mma_16816<fp8e5m2>(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif
#endif

// ---- fp8 operands -------------------------------------------------------------------------------

// The tensor-core templates move and address rows in 16-bit units: a bf16/f16 element, or a pair
// of fp8 elements. gemm_unit<T>::type is that unit; GemmArgs.K counts units.
template <class T> struct gemm_unit { typedef T type; };
template <> struct gemm_unit<fp8e4m3> { typedef u16 type; };
template <> struct gemm_unit<fp8e5m2> { typedef u16 type; };
template <class T> struct is_bf16 { static constexpr bool value = false; };
template <> struct is_bf16<bf16> { static constexpr bool value = true; };
template <class T> struct is_fp8 { static constexpr bool value = false; };
template <> struct is_fp8<fp8e4m3> { static constexpr bool value = true; };
template <> struct is_fp8<fp8e5m2> { static constexpr bool value = true; };

// ---- the GEMM interface shared by gemm_sm80.cuh and gemm_simt.cuh ----------------------------

// acc[M, S*N] = A[M, K] . B[S*N, K]^T. For S == 2 the two streams (gate, up) are interleaved in
// groups of 8 rows of B: row (n/8)*8*S + s*8 + n%8 holds row n of stream s.
//
// fp8 (T = fp8e4m3 / fp8e5m2, tensor-core templates): A and B hold codes, K counts pairs of them
// (16-bit units, so K % 8 == 0 means 16 codes), and the product of row r and merged B row n is
// scaled by sa[r] * sb[n] before the epilogue sees it (gemm_fp8_scale): the per-row and per-column
// scales of the contract at the top of ir/interp.c.
struct GemmArgs {
  const void *A;      // (M, K) element type T, 16-byte aligned, lda = K
  const void *B;      // (S*N, K) element type T, 16-byte aligned, ldb = K
  int M, N, K;        // N = output columns per stream; tensor-core paths need K % 8 == 0
  int splits;         // split-K factor == gridDim.z
  float *ws;          // split-K workspace, gemm_ws_floats() floats; unused when splits == 1
  unsigned *counters; // one per output tile, zero at allocation; every launch leaves them zero
  const float *sa;    // fp8: [M] scales of A's rows
  const float *sb;    // fp8: [S*N] scales of B's rows (merged order)
  const void *tma;    // gemm_sm90 with TMA: the kernel's TmaMaps argument (kernels/abi.cuh)
  const float *qs;    // gemm_sm90 with WQ: B's scales [S*N, groups] (B holds its codes: kernels/quant.cuh)
  int qg;             // ... and the i4 group length (0: one group over K)
};

// fp8: scales v (the accumulators of row `row`, stream s in v[s], B rows brow + 8 s + {0, 1}).
template <class T, int S>
__device__ __forceinline__ void gemm_fp8_scale(const GemmArgs &g, int row, int brow, int ncols, float (&v)[S][2]) {
  if (!is_fp8<T>::value) return;
  const float r = g.sa[row];
#pragma unroll
  for (int s = 0; s < S; ++s)
#pragma unroll
    for (int e = 0; e < 2; ++e)
      if (e < ncols) v[s][e] *= r * g.sb[brow + 8 * s + e];
}

// Output tile (tm, tn) of linear block index pid: groups of 8 tile rows walk the columns together,
// so concurrently running CTAs share A rows and B columns in L2.
__device__ __forceinline__ void gemm_tile_coords(int pid, int tiles_m, int tiles_n, int &tm, int &tn) {
  const int group = 8;
  int per_group = group * tiles_n;
  int first = (pid / per_group) * group;
  int size = imin(tiles_m - first, group);
  int r = pid - (pid / per_group) * per_group;
  tm = first + r % size;
  tn = r / size;
}

// Merged B row of output column n of stream s is valid iff n < N.
template <int S> __device__ __forceinline__ bool gemm_brow_valid(int row, int N) {
  return (row / (8 * S)) * 8 + (row & 7) < N;
}

// Split-K arrival. Every thread has written its partials to ws; returns true (in every thread) in
// the CTA that arrives last for this tile, which then reads the other partials. The counter is reset
// by that CTA, so each launch leaves it zero. One thread fences, after the barrier (the barrier
// orders the CTA's writes before it, and the fence is cumulative: release before the count, acquire
// after it, the second barrier handing that on), as CUTLASS's semaphores do, instead of every thread
// (each thread's fence.sc waited for the memory system: 0.36 cycles per issued instruction of the
// i4 decode kernel, kernels/NOTES.md "Call 2").
__device__ __forceinline__ bool gemm_splitk_arrive(unsigned *counter, int splits) {
  __shared__ unsigned s_is_last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    unsigned prev = atomicAdd(counter, 1u);
    unsigned last = prev == (unsigned)(splits - 1);
    if (last) {
      atomicExch(counter, 0u);
      __threadfence();
    }
    s_is_last = last;
  }
  __syncthreads();
  return s_is_last != 0;
}

} // namespace ffn
