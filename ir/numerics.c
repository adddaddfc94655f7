/* numerics.c: rounding to every element type ffnc knows, and their bit encodings.
 *
 * The small float formats are described by one table (FloatFormat) and handled by one
 * encoder and one decoder, so bf16, f16 and both fp8 flavours share the rounding code:
 *
 *   encode_double  rounds a double DIRECTLY to the format (round to nearest, ties to even);
 *                  it is kernels/numfmt.cuh's ffn_fmt_encode, which the GPU's fp8
 *                  quantizers run too, so both sides produce the same codes.
 *   decode_bits    is exact (every value of these formats is a double).
 *
 * Overflow: bf16 and f16 go to +-inf when the exactly rounded result would exceed the
 * largest finite value (so from max + half an ulp on: the tie goes to the even neighbour,
 * which is the next power of two, i.e. past max). f8e4m3 and f8e5m2 saturate finite
 * values to +-max like the hardware's `cvt.rn.satfinite`. An infinite input stays infinite
 * where the format has inf (e5m2, so that every pattern round-trips) and saturates to
 * +-448 in e4m3, which has none. NaN stays NaN.
 *
 * The host must be little-endian, like safetensors files and the GPU.
 */
#include "ir.h"

#include "kernels/numfmt.cuh"

#include <math.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ffnc assumes a little-endian host (safetensors data is read in place)"
#endif

/* The formats and the encoder live in kernels/numfmt.cuh, shared with the GPU. */
typedef FfnFloatFmt FloatFormat;

static const FloatFormat fmt_bf16 = FFN_FMT_BF16, fmt_f16 = FFN_FMT_F16, fmt_e4m3 = FFN_FMT_E4M3,
                         fmt_e5m2 = FFN_FMT_E5M2;

static const FloatFormat *float_format(DType t) {
  switch (t) {
  case DT_BF16: return &fmt_bf16;
  case DT_F16: return &fmt_f16;
  case DT_F8E4M3: return &fmt_e4m3;
  case DT_F8E5M2: return &fmt_e5m2;
  default: return NULL;
  }
}

static uint32_t encode_double(double v, const FloatFormat *f) { return ffn_fmt_encode(v, *f); }

/* 2^e for e in the normal double range, built from its bits (exact; ldexp is a libm call
 * and this runs for every element the interpreter rounds). */
static inline double pow2(int e) {
  uint64_t u = (uint64_t)(e + 1023) << 52;
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

static double decode_bits(uint32_t b, const FloatFormat *f) {
  uint32_t sign_bit = 1u << (f->bits - 1), mag = b & (sign_bit - 1);
  double v;
  if (f->has_inf && mag == f->max_bits + 1)
    v = INFINITY;
  else if (mag > f->max_bits)
    return NAN;
  else {
    uint32_t field = mag >> f->mbits, mant = mag & ((1u << f->mbits) - 1);
    if (field == 0) /* subnormal: mant quanta of the smallest normal binade */
      v = (double)mant * pow2(1 - f->bias - f->mbits);
    else
      v = (double)(mant | (1u << f->mbits)) * pow2((int)field - f->bias - f->mbits);
  }
  return b & sign_bit ? -v : v;
}

/* Round to the nearest integer, ties to even, independent of the FP rounding mode. For
 * a >= 0, a - floor(a) is exact (Sterbenz once a >= 1), so the comparisons are exact. */
static double rne_int(double v) {
  double a = fabs(v), r = floor(a), d = a - r;
  if (d > 0.5 || (d == 0.5 && fmod(r, 2.0) != 0.0))
    r += 1.0;
  return copysign(r, v);
}

static double clamp(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The range of an integer type as doubles. The int64/uint64 maxima are not doubles; the
 * largest doubles below them are used, so that a clamped value always converts back. */
static void int_range(DType t, double *lo, double *hi) {
  switch (t) {
  case DT_I4: *lo = -8, *hi = 7; break;
  case DT_I8: *lo = -128, *hi = 127; break;
  case DT_U8: *lo = 0, *hi = 255; break;
  case DT_I16: *lo = -32768, *hi = 32767; break;
  case DT_U16: *lo = 0, *hi = 65535; break;
  case DT_I32: *lo = -2147483648.0, *hi = 2147483647.0; break;
  case DT_U32: *lo = 0, *hi = 4294967295.0; break;
  case DT_I64: *lo = -0x1p63, *hi = 0x1p63 - 1024; break;
  case DT_U64: *lo = 0, *hi = 0x1p64 - 2048; break;
  default: *lo = 0, *hi = 1; break;
  }
}

double round_to_dtype(double v, DType t) {
  const FloatFormat *f = float_format(t);
  if (f)
    return decode_bits(encode_double(v, f), f);
  switch (t) {
  case DT_F32:
    return (double)(float)v;
  case DT_F64:
  case DT_NONE:
  case DT_COUNT:
    return v;
  case DT_BOOL:
    /* Like C's (bool) and numpy's astype(bool): anything non-zero (NaN too) is true. */
    return v != 0.0 ? 1.0 : 0.0;
  default: {
    if (isnan(v))
      return 0.0;
    double lo, hi;
    int_range(t, &lo, &hi);
    return clamp(rne_int(v), lo, hi);
  }
  }
}

/* ---- float <-> bits ---- */

/* bf16 is the top half of an f32, so the classic integer rounding on the f32 bits does it:
 * add 0x7fff plus the lowest kept bit, and the carry rounds to nearest even (an overflow
 * carries into the exponent and yields inf). It is a second, independent implementation
 * that the tests check encode_double against. */
uint16_t f32_to_bf16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((u >> 16) | 0x0040); /* keep the sign, make sure it stays a NaN */
  u += 0x7fffu + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

float bf16_bits_to_f32(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* float -> double is exact, so these round once, directly to the target. */
uint16_t f32_to_f16_bits(float f) { return (uint16_t)encode_double(f, &fmt_f16); }
float f16_bits_to_f32(uint16_t h) { return (float)decode_bits(h, &fmt_f16); }
uint8_t f32_to_f8e4m3_bits(float f) { return (uint8_t)encode_double(f, &fmt_e4m3); }
float f8e4m3_bits_to_f32(uint8_t b) { return (float)decode_bits(b, &fmt_e4m3); }
uint8_t f32_to_f8e5m2_bits(float f) { return (uint8_t)encode_double(f, &fmt_e5m2); }
float f8e5m2_bits_to_f32(uint8_t b) { return (float)decode_bits(b, &fmt_e5m2); }

/* ---- raw storage ---- */

#define LOAD(type)                                           \
  do {                                                       \
    type x;                                                  \
    memcpy(&x, (const char *)base + index * sizeof x, sizeof x); \
    return (double)x;                                        \
  } while (0)

double dtype_load(DType t, const void *base, size_t index) {
  const uint8_t *p = base;
  switch (t) {
  case DT_F64: LOAD(double);
  case DT_F32: LOAD(float);
  case DT_I8: LOAD(int8_t);
  case DT_U8: LOAD(uint8_t);
  case DT_I16: LOAD(int16_t);
  case DT_U16: LOAD(uint16_t);
  case DT_I32: LOAD(int32_t);
  case DT_U32: LOAD(uint32_t);
  case DT_I64: LOAD(int64_t);
  case DT_U64: LOAD(uint64_t);
  case DT_BOOL:
    return p[index] != 0;
  case DT_I4: {
    /* two per byte, element 2i in the low nibble; sign-extend the 4 bits */
    unsigned nib = index & 1 ? p[index / 2] >> 4 : p[index / 2] & 0xf;
    return (double)((int)(nib ^ 8) - 8);
  }
  case DT_BF16:
  case DT_F16: {
    uint16_t h;
    memcpy(&h, p + index * 2, 2);
    return decode_bits(h, float_format(t));
  }
  case DT_F8E4M3:
  case DT_F8E5M2:
    return decode_bits(p[index], float_format(t));
  default:
    return NAN;
  }
}
#undef LOAD

#define STORE(type, expr)                                    \
  do {                                                       \
    type x = (type)(expr);                                   \
    memcpy((char *)base + index * sizeof x, &x, sizeof x);   \
    return;                                                  \
  } while (0)

void dtype_store(DType t, void *base, size_t index, double v) {
  uint8_t *p = base;
  const FloatFormat *f = float_format(t);
  if (f) {
    uint32_t b = encode_double(v, f);
    if (f->bits == 8)
      p[index] = (uint8_t)b;
    else
      STORE(uint16_t, b);
    return;
  }
  /* round_to_dtype clamps integers into range, so the conversions below are defined. */
  double r = round_to_dtype(v, t);
  switch (t) {
  case DT_F64: STORE(double, v);
  case DT_F32: STORE(float, v);
  case DT_I8: STORE(int8_t, r);
  case DT_U8: STORE(uint8_t, r);
  case DT_I16: STORE(int16_t, r);
  case DT_U16: STORE(uint16_t, r);
  case DT_I32: STORE(int32_t, r);
  case DT_U32: STORE(uint32_t, r);
  case DT_I64: STORE(int64_t, r);
  case DT_U64: STORE(uint64_t, r);
  case DT_BOOL: STORE(uint8_t, r);
  case DT_I4: {
    unsigned nib = (unsigned)(int)r & 0xf;
    uint8_t *byte = p + index / 2;
    *byte = index & 1 ? (uint8_t)((*byte & 0x0f) | (nib << 4)) : (uint8_t)((*byte & 0xf0) | nib);
    return;
  }
  default:
    return;
  }
}
#undef STORE
