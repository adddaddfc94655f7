/* quant.cuh: the weight-only quantization rule (i8, i4 with groups) and the packed layout the
 * GPU streams, written once. C11 and CUDA C++, like opmath.cuh: the CPU reference
 * (ir/interp.c) quantizes with these functions, the load-time kernels of prep.cuh pack with
 * them, and gemm_wq.cuh decodes what they pack. The rule itself is the contract at the top of
 * ir/interp.c; the layout is the GPU's alone:
 *
 *   B is the GEMM's [R, K] operand (R = S*N merged output columns, K the shared dim).
 *   scales  f32 [R, ngroups]: ngroups = 1 for i8; ceil(K / G) for i4 (G = 0 or G > K: 1)
 *   codes   u8  [R, wq_row_bytes(K, bits)]: row r holds k = 0, 1, ... of B's row r, padded with
 *           zero weights to a multiple of 16 bytes (so each row starts 16-byte aligned):
 *             i8: one byte per k, code = q + 128
 *             i4: two k per byte, k even in the low nibble, code = q + 8
 *   The offset codes let the kernel turn a code into a float with one byte permute or mask and
 *   one subtraction (2^23 + code is exact in f32).
 *
 * It includes nothing: <math.h> (C) or the CUDA math library must be visible.
 */
#ifndef FFN_KERNELS_QUANT_H
#define FFN_KERNELS_QUANT_H

#ifdef __CUDACC__
#define WQ_FN static __device__ __forceinline__
#else
#define WQ_FN static inline
#endif

/* k per 16-byte word of a code row */
#define WQ_K_PER_WORD(bits) ((bits) == 8 ? 16 : 32)

/* the group length actually used: G = 0 (or one longer than K) means one group over K */
WQ_FN long long wq_group_len(long long K, long long G) { return G <= 0 || G > K ? (K > 0 ? K : 1) : G; }
WQ_FN long long wq_ngroups(long long K, long long G) {
  long long g = wq_group_len(K, G);
  return K > 0 ? (K + g - 1) / g : 1;
}
/* bytes of a code row: K rounded up to whole 16-byte words */
WQ_FN long long wq_row_bytes(long long K, int bits) {
  long long per = WQ_K_PER_WORD(bits);
  return (K + per - 1) / per * 16;
}

/* The scale of a group whose largest magnitude is amax (a double, as the reference keeps it). */
WQ_FN float wq_scale(double amax, int qmax) { return amax > 0 ? (float)(amax / qmax) : 1.0f; }

/* The integer level of x under scale s: round to nearest even, clamped to [-qmax, qmax];
 * NaN gives 0 (as round_to_dtype's integer rule). The division is in double. */
WQ_FN int wq_level(double x, float s, int qmax) {
  double q = x / (double)s;
  if (q != q)
    return 0;
  q = rint(q);
  return q < -qmax ? -qmax : q > qmax ? qmax : (int)q;
}

/* the stored code of level q, and back */
WQ_FN unsigned wq_code(int q, int bits) { return (unsigned)(q + (bits == 8 ? 128 : 8)); }
WQ_FN int wq_code_level(unsigned code, int bits) { return (int)code - (bits == 8 ? 128 : 8); }

#endif /* FFN_KERNELS_QUANT_H */
