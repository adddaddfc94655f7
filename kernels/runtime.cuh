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
