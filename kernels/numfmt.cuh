/* numfmt.cuh: the small float formats (bf16, f16, fp8 e4m3 / e5m2) and the one rounding rule
 * into them, written once for the CPU reference (ir/numerics.c) and the GPU (the load-time
 * kernels of prep.cuh and the fp8 activation quantizer of fp8.cuh), so that both produce the
 * same codes bit for bit. C11 and CUDA C++, like quant.cuh.
 *
 *   ffn_fmt_encode  rounds a double DIRECTLY to the format (round to nearest, ties to even)
 *                   working on the double's bits. Going through float first would round twice:
 *                   1 + 2^-8 + 2^-30 is above the bf16 halfway point 1 + 2^-8, but (float) of
 *                   it is exactly that halfway point, which then rounds to 1.
 *
 * Overflow: bf16 and f16 go to +-inf when the exactly rounded result would exceed the largest
 * finite value. f8e4m3 and f8e5m2 saturate finite values to +-max like the hardware's
 * `cvt.rn.satfinite`. An infinite input stays infinite where the format has inf (e5m2) and
 * saturates to +-448 in e4m3, which has none. NaN stays NaN.
 *
 * fp8 scaling (the contract at the top of ir/interp.c): a row (or column) whose largest
 * magnitude is amax gets the scale ffn_f8_scale(amax, FMAX), FMAX = ffn_f8_max(type).
 */
#ifndef FFN_KERNELS_NUMFMT_H
#define FFN_KERNELS_NUMFMT_H

#ifdef __CUDACC__
#define NF_FN static __device__ __forceinline__
typedef unsigned long long nf_u64;
NF_FN nf_u64 nf_bits(double v) { return (nf_u64)__double_as_longlong(v); }
#else
#include <stdint.h>
#include <string.h>
#define NF_FN static inline
typedef uint64_t nf_u64;
NF_FN nf_u64 nf_bits(double v) {
  nf_u64 u;
  memcpy(&u, &v, sizeof u);
  return u;
}
#endif

typedef struct {
  int bits;           /* storage width */
  int mbits;          /* explicit mantissa bits */
  int bias;           /* exponent bias; the smallest normal is 2^(1 - bias) */
  unsigned max_bits;  /* magnitude bits of the largest finite value */
  unsigned nan_bits;  /* canonical quiet NaN (positive) */
  int has_inf;        /* max_bits + 1 is infinity (IEEE-style formats) */
  int saturate;       /* finite overflow clamps to +-max instead of becoming inf */
} FfnFloatFmt;

/* {bits, mbits, bias, max_bits, nan_bits, has_inf, saturate} */
#define FFN_FMT_BF16 {16, 7, 127, 0x7f7f, 0x7fc0, 1, 0}
#define FFN_FMT_F16 {16, 10, 15, 0x7bff, 0x7e00, 1, 0}
/* OCP FP8 E4M3: no infinities; S.1111.111 is the only NaN, so S.1111.110 = 448 is max. */
#define FFN_FMT_E4M3 {8, 3, 7, 0x7e, 0x7f, 0, 1}
/* OCP FP8 E5M2: IEEE-like (0x7c inf, 0x7d..0x7f NaN), max 0x7b = 57344. */
#define FFN_FMT_E5M2 {8, 2, 15, 0x7b, 0x7e, 1, 1}

NF_FN unsigned ffn_fmt_encode(double v, FfnFloatFmt f) {
  nf_u64 u = nf_bits(v);
  unsigned sign = (unsigned)(u >> 63) << (f.bits - 1);
  int biased = (int)((u >> 52) & 0x7ff);
  nf_u64 frac = u & ((((nf_u64)1) << 52) - 1);
  if (biased == 0x7ff)
    return frac ? sign | f.nan_bits : sign | (f.has_inf ? f.max_bits + 1 : f.max_bits);
  /* Zero, or a double subnormal (< 2^-1022): far below half the smallest subnormal of any of
   * these formats, so it rounds to a signed zero. */
  if (biased == 0)
    return sign;
  int e = biased - 1023, emin = 1 - f.bias;
  nf_u64 sig = frac | (((nf_u64)1) << 52); /* v = sig * 2^(e - 52) */
  /* Round to a multiple of the format's quantum in binade max(e, emin): 2^(eq - mbits). Below
   * emin the quantum stays that of the smallest normal: gradual underflow. */
  int eq = e < emin ? emin : e;
  int shift = 52 - f.mbits + (eq - e); /* >= 42 here */
  nf_u64 keep = 0;
  if (shift < 64) {
    nf_u64 rem = sig & ((((nf_u64)1) << shift) - 1), half = ((nf_u64)1) << (shift - 1);
    keep = sig >> shift;
    if (rem > half || (rem == half && (keep & 1)))
      keep++;
  } /* else v < 2^-11 quanta: rounds to zero */
  /* keep is the magnitude in quanta. For a normal result keep is in [2^m, 2^(m+1)] and the
   * exponent field is eq + bias; adding keep (with its leading 1) to (eq + bias - 1) << m gives
   * the exponent and mantissa fields at once, carries into the next binade when the rounding
   * reached 2^(m+1), and gives the subnormal encoding (field 0) when eq == emin and keep < 2^m,
   * or the smallest normal when a subnormal rounded up to 2^m. */
  nf_u64 mag = (((nf_u64)(eq + f.bias - 1)) << f.mbits) + keep;
  if (mag > f.max_bits)
    mag = f.saturate ? f.max_bits : f.max_bits + 1;
  return sign | (unsigned)mag;
}

/* fp8: the largest finite value (FMAX) and the scale of a row or column whose largest
 * magnitude is amax (a double, as the reference keeps it); 1 where amax is 0 (or NaN). */
NF_FN double ffn_f8_max(int e5m2) { return e5m2 ? 57344.0 : 448.0; }
NF_FN float ffn_f8_scale(double amax, int e5m2) { return amax > 0 ? (float)(amax / ffn_f8_max(e5m2)) : 1.0f; }
/* The fp8 code of x under scale s: x / s (in double, s as stored) rounded to the format. */
NF_FN unsigned ffn_f8_code(double x, float s, int e5m2) {
  const FfnFloatFmt e4 = FFN_FMT_E4M3, e5 = FFN_FMT_E5M2;
  return ffn_fmt_encode(x / (double)s, e5m2 ? e5 : e4);
}

#endif /* FFN_KERNELS_NUMFMT_H */
