// prep.cuh: load-time weight transforms (gain folding, concatenation, interleaving, row
// sums, small constant products). They run once when a model is prepared, so they favour
// exactness over speed: arithmetic in double (the reference's own op_* functions of
// opmath.cuh), results rounded once to the target type with round to nearest even, as the
// CPU reference does. Element types and ops arrive as run-time codes (the DT_* values the
// generated source defines from ir/ir.h, the Op enum of ops.def), so one compiled set of
// kernels serves every program.
#pragma once
#include "abi.cuh"
#include "numfmt.cuh"
#include "quant.cuh"

namespace ffn {

// decode an OCP fp8 value (e4m3: bias 7, no inf, NaN = S.1111.111; e5m2: bias 15, IEEE-like)
__device__ inline double f8_to_double(unsigned char b, int e4m3) {
  const int mbits = e4m3 ? 3 : 2, ebits = e4m3 ? 4 : 5, bias = e4m3 ? 7 : 15;
  int s = b >> 7, e = (b >> mbits) & ((1 << ebits) - 1), m = b & ((1 << mbits) - 1);
  double v;
  if (e4m3 && e == 15 && m == 7)
    return __longlong_as_double(0x7ff8000000000000ll);
  if (!e4m3 && e == 31)
    return m ? __longlong_as_double(0x7ff8000000000000ll)
             : (s ? -__longlong_as_double(0x7ff0000000000000ll) : __longlong_as_double(0x7ff0000000000000ll));
  if (e == 0)
    v = ldexp((double)m, 1 - bias - mbits);
  else
    v = ldexp((double)(m | (1 << mbits)), e - bias - mbits);
  return s ? -v : v;
}

__device__ inline double prep_load(const void *p, int dt, long long i) {
  switch (dt) {
  case DT_F32: return ((const float *)p)[i];
  case DT_F64: return ((const double *)p)[i];
  case DT_BF16: return __uint_as_float((unsigned)((const unsigned short *)p)[i] << 16);
  case DT_F16: {
    float f;
    unsigned short h = ((const unsigned short *)p)[i];
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
  }
  case DT_F8E4M3: return f8_to_double(((const unsigned char *)p)[i], 1);
  case DT_F8E5M2: return f8_to_double(((const unsigned char *)p)[i], 0);
  case DT_I8: return ((const signed char *)p)[i];
  case DT_U8: return ((const unsigned char *)p)[i];
  default: return __longlong_as_double(0x7ff8000000000000ll);
  }
}

// double -> float rounding to odd, then float -> 16-bit type rounding to nearest even, gives
// the correctly rounded 16-bit result (float keeps more than two extra bits).
__device__ inline float to_float_odd(double d) {
  float f = __double2float_rz(d);
  if ((double)f != d && f == f && !isinf(f))
    f = __uint_as_float(__float_as_uint(f) | 1u);
  return f;
}

__device__ inline void prep_store(void *p, int dt, long long i, double v) {
  switch (dt) {
  case DT_F32: ((float *)p)[i] = __double2float_rn(v); break;
  case DT_F64: ((double *)p)[i] = v; break;
  case DT_BF16: {
    unsigned short r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(to_float_odd(v)));
    ((unsigned short *)p)[i] = r;
    break;
  }
  case DT_F16: {
    unsigned short r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(to_float_odd(v)));
    ((unsigned short *)p)[i] = r;
    break;
  }
  case DT_U8: ((unsigned char *)p)[i] = (unsigned char)v; break; // fp8 codes moved as bytes (0..255, exact)
  default: break; // the code generator only emits prep steps into the types above
  }
}

#define OPMATH_FLOAT 0
#include "opmath.cuh"

// The op codes are ffnc's Op enum, from the same table (ops.def is embedded with these files).
enum Op {
#define OP(e, name, min_args, max_args, cls) OP_##e,
#include "ops.def"
#undef OP
};

__device__ inline double prep_apply(int op, double a, double b) {
  switch (op) {
#define UNARY_OP(e, math, dsl) case OP_##e: return op_##math(a);
#define BINARY_OP(e, math, dsl) case OP_##e: return op_##math(a, b);
#include "ops.def"
#undef UNARY_OP
#undef BINARY_OP
  default: return __longlong_as_double(0x7ff8000000000000ll); // not elementwise
  }
}

// PrepArgs and PrepIndex, the kernels' argument, are in abi.cuh.

} // namespace ffn

extern "C" __global__ void ffn_prep_fill(const ffn::PrepArgs a) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < a.n; i += (long long)gridDim.x * blockDim.x)
    ffn::prep_store(a.out, a.dto, i, a.value);
}

// A thread takes a run of V consecutive elements of the last dim (up to 8): one decomposition of
// the index per run, the same arithmetic per element as one at a time. (Element by element, the
// 64-bit divisions of the decomposition were most of the time: 483 us for the gain folded into
// one Llama-3-8B projection, 0.5 TB/s.)
__device__ inline int prep_run(long long len) { return len % 8 == 0 ? 8 : len % 4 == 0 ? 4 : len % 2 == 0 ? 2 : 1; }

extern "C" __global__ void ffn_prep_ewise(const ffn::PrepArgs a) {
  const ffn::PrepIndex &ix = a.ix;
  const int last = ix.rank - 1;
  const int V = last >= 0 ? prep_run(ix.dims[last]) : 1;
  const long long sal = last >= 0 ? ix.sa[last] : 0, sbl = last >= 0 ? ix.sb[last] : 0;
  for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; j < a.n / V; j += (long long)gridDim.x * blockDim.x) {
    long long r = j * V, ia = 0, ib = 0;
    for (int d = last; d >= 0; d--) {
      long long c = r % ix.dims[d];
      r /= ix.dims[d];
      ia += c * ix.sa[d];
      ib += c * ix.sb[d];
    }
    for (int v = 0; v < V; v++) {
      double x = ffn::prep_load(a.a, a.dta, ia + v * sal), y = a.b ? ffn::prep_load(a.b, a.dtb, ib + v * sbl) : 0.0;
      ffn::prep_store(a.out, a.dto, j * V + v, ffn::prep_apply(a.op, x, y));
    }
  }
}

// out [C, R] = a [R, C]^T
extern "C" __global__ void ffn_prep_transpose(const ffn::PrepArgs a) {
  const long long R = a.rows, C = a.cols;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < R * C; i += (long long)gridDim.x * blockDim.x) {
    long long c = i / R, r = i % R; // out row c, column r
    ffn::prep_store(a.out, a.dto, i, ffn::prep_load(a.a, a.dta, r * C + c));
  }
}

// Rows of a [R, K] seen as S blocks of N = R/S rows, regrouped in groups of G (ops.def); a run
// of V consecutive columns of one row per thread, as ffn_prep_ewise.
extern "C" __global__ void ffn_prep_interleave(const ffn::PrepArgs a) {
  const long long R = a.rows, K = a.cols, G = a.group, S = a.streams, N = R / S;
  const int V = prep_run(K);
  for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; j < R * K / V; j += (long long)gridDim.x * blockDim.x) {
    long long i = j * V, o = i / K, k = i % K;
    long long q = o / (G * S), rem = o % (G * S), s = rem / G, n = q * G + rem % G;
    const long long src = (s * N + n) * K + k;
    for (int v = 0; v < V; v++)
      ffn::prep_store(a.out, a.dto, i + v, ffn::prep_load(a.a, a.dto, src + v));
  }
}

// out [R] = sum over the last dim of a [R, C]; one warp per row, double accumulation.
extern "C" __global__ void ffn_prep_rowsum(const ffn::PrepArgs a) {
  const long long R = a.rows, C = a.cols;
  long long warp = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
  int lane = threadIdx.x & 31;
  for (long long r = warp; r < R; r += ((long long)gridDim.x * blockDim.x) >> 5) {
    double s = 0;
    for (long long c = lane; c < C; c += 32)
      s += ffn::prep_load(a.a, a.dta, r * C + c);
    for (int o = 16; o > 0; o >>= 1)
      s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0)
      ffn::prep_store(a.out, a.dto, r, s);
  }
}

// out [M, N] = a [M, K] @ b [K, N]; a thread per output, double accumulation (small, once).
// Under weight-only quantization (a.streams = bits 8 or 4, a.group = i4 group) b's column n is
// quantized group by group first, as the reference's matmul does (kernels/quant.cuh).
extern "C" __global__ void ffn_prep_matmul(const ffn::PrepArgs a) {
  const long long M = a.rows, N = a.cols, K = a.inner, bits = a.streams;
  const long long G = bits == 4 ? wq_group_len(K, a.group) : wq_group_len(K, 0);
  const int qmax = bits == 8 ? 127 : 7;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < M * N; i += (long long)gridDim.x * blockDim.x) {
    long long m = i / N, n = i % N;
    double s = 0;
    for (long long k0 = 0; k0 < K; k0 += G) {
      long long k1 = k0 + G < K ? k0 + G : K;
      double amax = 0;
      for (long long k = k0; bits && k < k1; k++)
        amax = fmax(amax, fabs(ffn::prep_load(a.b, a.dtb, k * N + n)));
      const float sc = wq_scale(amax, qmax);
      for (long long k = k0; k < k1; k++) {
        double w = ffn::prep_load(a.b, a.dtb, k * N + n);
        if (bits)
          w = (float)(wq_level(w, sc, qmax) * (double)sc);
        s += ffn::prep_load(a.a, a.dta, m * K + k) * w;
      }
    }
    ffn::prep_store(a.out, a.dto, i, s);
  }
}

// Weight-only quantization of b [R, K] (kernels/quant.cuh: the rule and the packed layout).
// a.rows = R, a.cols = K, a.group = G (0: one group), a.inner = bits.

// out f32 [R, ngroups]: one warp per (row, group), the largest magnitude in double.
extern "C" __global__ void ffn_prep_wq_scale(const ffn::PrepArgs a) {
  const long long R = a.rows, K = a.cols, bits = a.inner;
  const long long G = bits == 8 ? wq_group_len(K, 0) : wq_group_len(K, a.group), ng = (K + G - 1) / G;
  const int qmax = bits == 8 ? 127 : 7, lane = threadIdx.x & 31;
  long long warp = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
  for (long long w = warp; w < R * ng; w += ((long long)gridDim.x * blockDim.x) >> 5) {
    long long r = w / ng, k0 = (w % ng) * G, k1 = k0 + G < K ? k0 + G : K;
    double amax = 0;
    for (long long k = k0 + lane; k < k1; k += 32)
      amax = fmax(amax, fabs(ffn::prep_load(a.a, a.dta, r * K + k)));
    for (int o = 16; o > 0; o >>= 1)
      amax = fmax(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (lane == 0)
      ((float *)a.out)[w] = wq_scale(amax, qmax);
  }
}

// out u8 [wq_code_rows(R), wq_row_bytes(K, bits)], the tiles of quant.cuh: a thread per byte;
// a.b: the scales above.
extern "C" __global__ void ffn_prep_wq_pack(const ffn::PrepArgs a) {
  const long long R = a.rows, K = a.cols, bits = a.inner, tk = wq_tiles_k(K, (int)bits);
  const long long G = bits == 8 ? wq_group_len(K, 0) : wq_group_len(K, a.group), ng = (K + G - 1) / G;
  const int qmax = bits == 8 ? 127 : 7, per = bits == 8 ? 1 : 2;
  const float *scale = (const float *)a.b;
  const long long n = wq_code_rows(R) * tk * 32;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    long long rb, kt;
    wq_tile_place(i / 512, tk, &rb, &kt);
    const int lane = (int)(i % 512) / 16, b = (int)(i % 16);
    unsigned byte = 0;
    for (int h = 0; h < per; h++) {
      int row, kk;
      wq_tile_elem((int)bits, lane, b * per + h, &row, &kk);
      const long long r = rb * 16 + row, k = kt * WQ_TILE_K(bits) + kk;
      int q = r < R && k < K ? wq_level(ffn::prep_load(a.a, a.dta, r * K + k), scale[r * ng + k / G], qmax) : 0;
      byte |= wq_code(q, (int)bits) << (4 * h);
    }
    ((unsigned char *)a.out)[i] = (unsigned char)byte;
  }
}

// fp8 matrix products: the weights' per-row scales and codes (kernels/numfmt.cuh, the contract at
// the top of ir/interp.c), for b [R, K] (the GEMM's B, a row per output column). a.rows = R,
// a.cols = K, a.inner = 1 for e5m2 (0: e4m3).

// out f32 [R, 1]: a warp per row, the largest magnitude in double.
extern "C" __global__ void ffn_prep_f8_scale(const ffn::PrepArgs a) {
  const long long R = a.rows, K = a.cols;
  const int lane = threadIdx.x & 31;
  long long warp = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
  for (long long r = warp; r < R; r += ((long long)gridDim.x * blockDim.x) >> 5) {
    double amax = 0;
    for (long long k = lane; k < K; k += 32)
      amax = fmax(amax, fabs(ffn::prep_load(a.a, a.dta, r * K + k)));
    for (int o = 16; o > 0; o >>= 1)
      amax = fmax(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (lane == 0)
      ((float *)a.out)[r] = ffn_f8_scale(amax, (int)a.inner);
  }
}

// out u8 [R, K]: a thread per code; a.b: the scales above.
extern "C" __global__ void ffn_prep_f8_pack(const ffn::PrepArgs a) {
  const long long R = a.rows, K = a.cols;
  const float *scale = (const float *)a.b;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < R * K; i += (long long)gridDim.x * blockDim.x)
    ((unsigned char *)a.out)[i] = (unsigned char)ffn_f8_code(ffn::prep_load(a.a, a.dta, i), scale[i / K], (int)a.inner);
}

// Pre-quantized fp8 weights (ir/prequant.h): the value of codes a [R, cols] (bytes of the
// stored type, a.inner = 1 for e5m2) with the row scales b f32 [R, 1]: code * scale, one f32
// multiplication as prequant_dequantize does it, stored as f32. a.rows = R, a.cols = cols.
extern "C" __global__ void ffn_prep_f8_dequant(const ffn::PrepArgs a) {
  const long long R = a.rows, C = a.cols;
  const unsigned char *codes = (const unsigned char *)a.a;
  const float *scale = (const float *)a.b;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < R * C; i += (long long)gridDim.x * blockDim.x)
    ((float *)a.out)[i] = __fmul_rn((float)ffn::f8_to_double(codes[i], !a.inner), scale[i / C]);
}
