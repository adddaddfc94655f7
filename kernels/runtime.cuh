// runtime.cuh: the kernels the runtime launches by itself, the same for every program: the
// load-time weight transforms (prep.cuh) and A's row statistics for the GEMM variants that take
// them from memory. They take their types and sizes as arguments, so NVRTC compiles them once per
// arch into a module of their own that the kernel cache shares between models
// (runtime/units.c); the generated kernels are compiled without them.
#pragma once
#include "ewise.cuh"
#include "prep.cuh"

// out[r] = {sum, sum of squares} of row r of a [M, K] (bf16 or f16), in f32 like the GEMM's own
// statistics: one warp per row, 16-byte loads (K % 8 == 0, rows 16-byte aligned).
extern "C" __global__ void __launch_bounds__(256) ffn_row_stats(const void *a, int is_f16, long long M, int K,
                                                                float *out) {
  const long long warp = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  for (long long r = warp; r < M; r += ((long long)gridDim.x * blockDim.x) >> 5) {
    const uint4 *row = (const uint4 *)((const ffn::u16 *)a + r * K);
    float s = 0.f, q = 0.f;
    for (int c = lane; c < K / 8; c += 32) {
      uint4 w = row[c];
      ffn::u32 words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float lo, hi;
        if (is_f16)
          ffn::unpack_f16x2(words[j], lo, hi);
        else
          ffn::unpack_bf16x2(words[j], lo, hi);
        s += lo + hi;
        q += lo * lo + hi * hi;
      }
    }
    s = ffn::warp_sum(s);
    q = ffn::warp_sum(q);
    if (lane == 0) {
      out[2 * r] = s;
      out[2 * r + 1] = q;
    }
  }
}

// dst[i] = src[i], or dst[i] + src[i] when accumulate, for i < n: a backward graph's f32 gradient
// into the caller's gradient tensor (ffn_model_run_grad), f32 or bf16 (is_bf16: the sum rounded
// once to nearest even). Grid-stride, so any grid covers n.
extern "C" __global__ void __launch_bounds__(256) ffn_grad_store(void *dst, const float *src, long long n, int is_bf16,
                                                                 int accumulate) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    float v = src[i];
    if (is_bf16) {
      if (accumulate)
        v += ffn::ld_bf16(dst, i);
      ffn::st_bf16(dst, i, v);
    } else {
      if (accumulate)
        v += ((const float *)dst)[i];
      ((float *)dst)[i] = v;
    }
  }
}

// The weights of a weight-only quantized product (kernels/quant.cuh: codes and scales of B [R, K])
// as bf16 [R, K] row-major, the layout the 16-bit tensor-core GEMMs read: out[r][k] =
// bf16(level(r, k) * scale(r, k's group)), the product of the level and the f32 scale rounded once
// to nearest even (the contract at the top of ir/interp.c). For a product of many rows (exec.c: a
// KernelVariant with `dq`), run into the workspace just before the GEMM. A warp takes one 512-byte
// tile (16 rows x WQ_TILE_K(bits) k) at a time, each lane its 16 bytes in one load: by the
// packing's permutation (quant.cuh) they are, for its rows g and g + 8 (g = lane / 4) and each
// 32-k block of the tile, the 8 consecutive k from 8 (lane % 4): one 16-byte store each
// (quant.cuh: wq_block_bf16), no shared memory. A 32-k block lies within one scale group (G is
// a multiple of 32, or K). K % 8 == 0.
template <int BITS>
__device__ __forceinline__ void wq_dequant_tile(const uint4 w, const float *scales, ffn::u16 *out, long long R,
                                                long long K, long long G, long long ng, long long rb, long long kt,
                                                int lane) {
  constexpr int NB = WQ_TILE_K(BITS) / 32;
  const long long r0 = rb * 16 + lane / 4, k0 = kt * WQ_TILE_K(BITS) + 8 * (lane % 4);
  const unsigned words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int b = 0; b < NB; b++) {
    float s[2];
    unsigned v[2][4];
#pragma unroll
    for (int h = 0; h < 2; h++)
      s[h] = r0 + 8 * h < R && k0 + 32 * b < K ? scales[(r0 + 8 * h) * ng + (k0 + 32 * b) / G] : 0.f;
    wq_block_bf16(BITS, words + 2 * b, s, v);
#pragma unroll
    for (int h = 0; h < 2; h++)
      if (r0 + 8 * h < R && k0 + 32 * b < K)
        *(uint4 *)(out + (r0 + 8 * h) * K + k0 + 32 * b) = make_uint4(v[h][0], v[h][1], v[h][2], v[h][3]);
  }
}

extern "C" __global__ void __launch_bounds__(256, 5) ffn_wq_dequant(const unsigned char *codes, const float *scales,
                                                                 ffn::u16 *out, long long R, long long K, int bits,
                                                                 long long group) {
  const int lane = threadIdx.x % 32;
  const long long tk = wq_tiles_k(K, bits), G = wq_group_len(K, bits == 8 ? 0 : group), ng = wq_ngroups(K, G);
  const long long tiles = wq_code_rows(R) / 16 * tk, warps = (long long)gridDim.x * (blockDim.x / 32);
  // one tile a warp at a time, the next one's codes loaded before this one's values are made
  long long i = blockIdx.x * (long long)(blockDim.x / 32) + threadIdx.x / 32;
  uint4 w = i < tiles ? ((const uint4 *)(codes + i * 512))[lane] : make_uint4(0, 0, 0, 0);
  for (; i < tiles; i += warps) {
    const long long j = i + warps;
    const uint4 next = j < tiles ? ((const uint4 *)(codes + j * 512))[lane] : make_uint4(0, 0, 0, 0);
    long long rb, kt; // tiles in memory order: a warp after another reads the next 512 bytes
    wq_tile_place(i, tk, &rb, &kt);
    if (rb * 16 < R) { // else a row block of the padding to 128 rows
      if (bits == 8)
        wq_dequant_tile<8>(w, scales, out, R, K, G, ng, rb, kt, lane);
      else
        wq_dequant_tile<4>(w, scales, out, R, K, G, ng, rb, kt, lane);
    }
    w = next;
  }
}
