/* interp_numerics_test.c: rounding, encoders and decoders of ir/numerics.c.
 *
 * The independent oracle: for each small float format, decode every positive bit pattern
 * into a sorted table of its finite values, and round a double by finding its two table
 * neighbours (ties to the even pattern, overflow by the format's rule). round_to_dtype
 * works on the double's bits instead, so the two share no code. The bf16 encoder (integer
 * carry trick on f32 bits) is a third implementation checked against both.
 */
#include "ir/ir.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* Same value, telling -0 from +0; any NaN equals any NaN. */
static bool same(double a, double b) {
  if (isnan(a) || isnan(b))
    return isnan(a) && isnan(b);
  return a == b && signbit(a) == signbit(b);
}

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint64_t next_u64(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

typedef struct {
  DType t;
  const char *name;
  int bits;
  uint32_t max_bits; /* largest finite magnitude pattern */
  bool saturate;
  double max, min_sub;
  int nans, infs; /* how many of the 2^bits patterns are NaN / inf */
} Fmt;

static const Fmt fmts[] = {
    {DT_BF16, "bf16", 16, 0x7f7f, false, 0x1.fep127, 0x1p-133, 254, 2},
    {DT_F16, "f16", 16, 0x7bff, false, 65504.0, 0x1p-24, 2046, 2},
    {DT_F8E4M3, "f8e4m3", 8, 0x7e, true, 448.0, 0x1p-9, 2, 0},
    {DT_F8E5M2, "f8e5m2", 8, 0x7b, true, 57344.0, 0x1p-16, 6, 2},
};

static double decode(const Fmt *f, uint32_t b) {
  switch (f->t) {
  case DT_BF16: return bf16_bits_to_f32((uint16_t)b);
  case DT_F16: return f16_bits_to_f32((uint16_t)b);
  case DT_F8E4M3: return f8e4m3_bits_to_f32((uint8_t)b);
  default: return f8e5m2_bits_to_f32((uint8_t)b);
  }
}

static uint32_t encode(const Fmt *f, float x) {
  switch (f->t) {
  case DT_BF16: return f32_to_bf16_bits(x);
  case DT_F16: return f32_to_f16_bits(x);
  case DT_F8E4M3: return f32_to_f8e4m3_bits(x);
  default: return f32_to_f8e5m2_bits(x);
  }
}

/* Every bit pattern decodes, and re-encodes to itself (NaNs to a NaN) by every path. */
static void test_exhaustive(const Fmt *f) {
  uint32_t count = 1u << f->bits;
  int nans = 0, infs = 0;
  for (uint32_t b = 0; b < count; b++) {
    double v = decode(f, b);
    uint8_t raw[2] = {(uint8_t)b, (uint8_t)(b >> 8)};
    CHECK(same(dtype_load(f->t, raw, 0), v), "%s %#x: dtype_load disagrees with the decoder", f->name, b);
    uint8_t out[2] = {0, 0};
    dtype_store(f->t, out, 0, v);
    uint32_t stored = out[0] | (f->bits == 16 ? (uint32_t)out[1] << 8 : 0);
    if (isnan(v)) {
      nans++;
      CHECK(isnan(decode(f, encode(f, (float)v))), "%s %#x: NaN did not re-encode to a NaN", f->name, b);
      CHECK(isnan(decode(f, stored)), "%s %#x: dtype_store of NaN is not a NaN", f->name, b);
      CHECK(isnan(round_to_dtype(v, f->t)), "%s %#x: round_to_dtype(NaN) is not NaN", f->name, b);
      continue;
    }
    if (isinf(v))
      infs++;
    CHECK(encode(f, (float)v) == b, "%s %#x (%g): f32 encoder gives %#x", f->name, b, v, encode(f, (float)v));
    CHECK(stored == b, "%s %#x (%g): dtype_store gives %#x", f->name, b, v, stored);
    CHECK(same(round_to_dtype(v, f->t), v), "%s %#x (%g): not a fixed point of round_to_dtype", f->name, b, v);
  }
  CHECK(nans == f->nans, "%s: %d NaN patterns, expected %d", f->name, nans, f->nans);
  CHECK(infs == f->infs, "%s: %d inf patterns, expected %d", f->name, infs, f->infs);
  /* positive patterns are strictly increasing up to max; then inf/NaN */
  for (uint32_t b = 1; b <= f->max_bits; b++)
    CHECK(decode(f, b) > decode(f, b - 1), "%s: %#x not above %#x", f->name, b, b - 1);
  CHECK(decode(f, f->max_bits) == f->max, "%s: max is %g, expected %g", f->name, decode(f, f->max_bits), f->max);
  CHECK(decode(f, 1) == f->min_sub, "%s: smallest subnormal %g, expected %g", f->name, decode(f, 1), f->min_sub);
  CHECK(same(decode(f, 1u << (f->bits - 1)), -0.0), "%s: the sign bit alone is not -0", f->name);
}

/* The table oracle (see the top of the file). tab[i] is the value of pattern i. */
static double oracle(const Fmt *f, const double *tab, double v) {
  if (isnan(v))
    return NAN;
  double a = fabs(v), max = tab[f->max_bits], r;
  if (isinf(a) && f->infs) /* e5m2 saturates finite values only */
    return v;
  if (a > max) {
    if (f->saturate)
      r = max;
    else /* the first unrepresentable step above max is one ulp up; from its midpoint on: inf */
      r = a >= max + (max - tab[f->max_bits - 1]) / 2 ? INFINITY : max;
    return copysign(r, v);
  }
  uint32_t lo = 0, hi = f->max_bits; /* tab[lo] <= a <= tab[hi] */
  while (hi - lo > 1) {
    uint32_t mid = (lo + hi) / 2;
    if (tab[mid] <= a)
      lo = mid;
    else
      hi = mid;
  }
  if (a == tab[lo])
    r = tab[lo];
  else if (a == tab[hi])
    r = tab[hi];
  else {
    double mid = (tab[lo] + tab[hi]) / 2; /* exact: few significant bits */
    r = a < mid ? tab[lo] : a > mid ? tab[hi] : (lo % 2 == 0 ? tab[lo] : tab[hi]);
  }
  return copysign(r, v);
}

static double random_double_near(const Fmt *f, const double *tab) {
  uint64_t r = next_u64();
  double sign = r & 1 ? -1.0 : 1.0;
  uint32_t i = (uint32_t)((r >> 8) % f->max_bits);
  double lo = tab[i], hi = tab[i + 1], mid = (lo + hi) / 2;
  switch ((r >> 4) % 8) {
  case 0: return sign * mid;                       /* exact tie */
  case 1: return sign * nextafter(mid, 0);         /* just below the tie */
  case 2: return sign * nextafter(mid, INFINITY);  /* just above the tie */
  case 3: return sign * (lo + (hi - lo) * ((double)(next_u64() >> 11) * 0x1p-53));
  case 4: { /* around and beyond max (overflow / saturation) */
    double ulp = tab[f->max_bits] - tab[f->max_bits - 1];
    return sign * (tab[f->max_bits] + ulp * ((double)(next_u64() >> 11) * 0x1p-51 - 1));
  }
  case 5: /* anywhere in the range, log-uniform, below the smallest subnormal too */
    return sign * ldexp(1.0 + (double)(next_u64() >> 11) * 0x1p-53, (int)(next_u64() % 300) - 170);
  case 6: { /* any double at all: huge, tiny, subnormal, inf, NaN */
    uint64_t u = next_u64();
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
  }
  default: return sign * lo;
  }
}

static void test_against_oracle(const Fmt *f) {
  double *tab = malloc(sizeof(double) * (f->max_bits + 1));
  for (uint32_t b = 0; b <= f->max_bits; b++)
    tab[b] = decode(f, b);
  for (int n = 0; n < 2000000; n++) {
    double v = random_double_near(f, tab), want = oracle(f, tab, v), got = round_to_dtype(v, f->t);
    CHECK(same(got, want), "%s: round_to_dtype(%a) = %a, oracle says %a", f->name, v, got, want);
  }
  free(tab);
}

/* The f32 encoders agree with round_to_dtype on floats (for doubles that are not floats,
 * going through (float) first would round twice, which is why round_to_dtype exists). */
static void test_encoders_vs_round(const Fmt *f) {
  for (uint64_t i = 0; i < (UINT64_C(1) << 32); i += 4093) {
    uint32_t u = (uint32_t)i ^ (uint32_t)(next_u64() & 0xffff);
    float x;
    memcpy(&x, &u, sizeof x);
    double got = decode(f, encode(f, x)), want = round_to_dtype(x, f->t);
    CHECK(same(got, want), "%s: encoder(%a) = %a, round_to_dtype = %a", f->name, (double)x, got, want);
  }
}

/* For bf16: every float whose low half is at or next to a tie, for every high half. */
static void test_bf16_ties_all_floats(void) {
  static const uint32_t lows[] = {0, 1, 0x7fff, 0x8000, 0x8001, 0xffff};
  for (uint32_t hi = 0; hi < 0x10000; hi++)
    for (size_t k = 0; k < sizeof lows / sizeof lows[0]; k++) {
      uint32_t u = hi << 16 | lows[k];
      float x;
      memcpy(&x, &u, sizeof x);
      double got = bf16_bits_to_f32(f32_to_bf16_bits(x)), want = round_to_dtype(x, DT_BF16);
      CHECK(same(got, want), "bf16: encoder(%a) = %a, round_to_dtype = %a", (double)x, got, want);
    }
}

#define EXPECT_ROUND(v, t, want)                                                                            \
  do {                                                                                                      \
    double got_ = round_to_dtype((v), (t));                                                                 \
    CHECK(same(got_, (want)), "round_to_dtype(%s, %s) = %a, expected %a", #v, dtype_name(t), got_, (double)(want)); \
  } while (0)

static void test_hand_cases(void) {
  /* bf16 ties: 8 significant bits, so around 1 the spacing is 2^-7. */
  EXPECT_ROUND(1 + 0x1p-8, DT_BF16, 1.0);               /* halfway, 1 is even */
  EXPECT_ROUND(1 + 3 * 0x1p-8, DT_BF16, 1 + 0x1p-6);    /* halfway between 1+2^-7 (odd) and 1+2^-6 */
  EXPECT_ROUND(1 + 0x1p-9, DT_BF16, 1.0);               /* a quarter step: down */
  EXPECT_ROUND(1 + 3 * 0x1p-9, DT_BF16, 1 + 0x1p-7);    /* three quarters: up */
  EXPECT_ROUND(-(1 + 0x1p-8), DT_BF16, -1.0);
  /* double rounding: just above the tie goes up; via float it would land on the tie */
  EXPECT_ROUND(1 + 0x1p-8 + 0x1p-30, DT_BF16, 1 + 0x1p-7);
  CHECK(bf16_bits_to_f32(f32_to_bf16_bits((float)(1 + 0x1p-8 + 0x1p-30))) == 1.0f,
        "the double-rounding example does not double-round through float");
  /* bf16 subnormals: the smallest is 2^-133 */
  EXPECT_ROUND(0x1p-134, DT_BF16, 0.0);                 /* half of it: tie to 0 (even) */
  EXPECT_ROUND(-0x1p-134, DT_BF16, -0.0);
  EXPECT_ROUND(0x1p-134 + 0x1p-160, DT_BF16, 0x1p-133);
  EXPECT_ROUND(3 * 0x1p-134, DT_BF16, 0x1p-132);        /* 1.5 steps: tie to 2 steps */
  EXPECT_ROUND(0x1p-127 - 0x1p-140, DT_BF16, 0x1p-127); /* subnormal rounding up to... */
  EXPECT_ROUND(0x1p-126 - 0x1p-135, DT_BF16, 0x1p-126); /* ...the smallest normal */
  EXPECT_ROUND(0x1p-1074, DT_BF16, 0.0);                /* a double subnormal */
  /* bf16 overflow: max = (2 - 2^-7) 2^127, half a step above it (2^119) rounds to inf */
  EXPECT_ROUND(0x1.fep127, DT_BF16, 0x1.fep127);
  EXPECT_ROUND(0x1.fep127 + 0x1p119, DT_BF16, INFINITY);
  EXPECT_ROUND(0x1.fep127 + 0x1p119 - 0x1p90, DT_BF16, 0x1.fep127);
  EXPECT_ROUND(-1e300, DT_BF16, -INFINITY);
  EXPECT_ROUND(NAN, DT_BF16, NAN);
  /* f16: max 65504, step 32 there, so 65520 is the rounding boundary to inf */
  EXPECT_ROUND(65519.99, DT_F16, 65504.0);
  EXPECT_ROUND(65520.0, DT_F16, INFINITY);
  EXPECT_ROUND(-65520.0, DT_F16, -INFINITY);
  EXPECT_ROUND(0x1p-25, DT_F16, 0.0);                   /* half the smallest subnormal 2^-24 */
  EXPECT_ROUND(0x1p-25 * (1 + 0x1p-20), DT_F16, 0x1p-24);
  EXPECT_ROUND(3 * 0x1p-25, DT_F16, 0x1p-23);
  EXPECT_ROUND(1 + 0x1p-11, DT_F16, 1.0);               /* tie at 1: step 2^-10 */
  EXPECT_ROUND(1 + 3 * 0x1p-11, DT_F16, 1 + 0x1p-9);
  EXPECT_ROUND(0.1, DT_F16, 0x1.998p-4);
  /* f8e4m3: steps of 32 in [256, 448]; saturates */
  EXPECT_ROUND(432.0, DT_F8E4M3, 448.0);                /* tie 416 (odd) / 448 (even) */
  EXPECT_ROUND(400.0, DT_F8E4M3, 384.0);                /* tie 384 (even) / 416 */
  EXPECT_ROUND(464.0, DT_F8E4M3, 448.0);
  EXPECT_ROUND(1e9, DT_F8E4M3, 448.0);
  EXPECT_ROUND(-1e9, DT_F8E4M3, -448.0);
  EXPECT_ROUND(INFINITY, DT_F8E4M3, 448.0);
  EXPECT_ROUND(-INFINITY, DT_F8E4M3, -448.0);
  EXPECT_ROUND(NAN, DT_F8E4M3, NAN);
  EXPECT_ROUND(0x1p-10, DT_F8E4M3, 0.0);                /* half the smallest subnormal 2^-9 */
  EXPECT_ROUND(3 * 0x1p-10, DT_F8E4M3, 0x1p-8);
  EXPECT_ROUND(0x1p-10 + 0x1p-30, DT_F8E4M3, 0x1p-9);
  EXPECT_ROUND(1.0625, DT_F8E4M3, 1.0);                 /* tie at 1: step 1/8 */
  EXPECT_ROUND(1.1875, DT_F8E4M3, 1.25);
  /* f8e5m2: max 57344 = 1.75 * 2^15, step 8192 there; finite values saturate */
  EXPECT_ROUND(61440.0, DT_F8E5M2, 57344.0);
  EXPECT_ROUND(1e300, DT_F8E5M2, 57344.0);
  EXPECT_ROUND(INFINITY, DT_F8E5M2, INFINITY);          /* the format has inf: only finite values saturate */
  EXPECT_ROUND(-INFINITY, DT_F8E5M2, -INFINITY);
  EXPECT_ROUND(0x1p-17, DT_F8E5M2, 0.0);
  EXPECT_ROUND(3 * 0x1p-17, DT_F8E5M2, 0x1p-15);
  EXPECT_ROUND(1.125, DT_F8E5M2, 1.0);                  /* tie at 1: step 1/4 */
  EXPECT_ROUND(1.375, DT_F8E5M2, 1.5);
  CHECK(isinf(f8e5m2_bits_to_f32(0x7c)) && isinf(f8e5m2_bits_to_f32(0xfc)) && f8e5m2_bits_to_f32(0xfc) < 0,
        "e5m2 0x7c/0xfc must decode to +-inf");
  CHECK(isnan(f8e4m3_bits_to_f32(0x7f)) && isnan(f8e4m3_bits_to_f32(0xff)), "e4m3 0x7f/0xff must be NaN");
  CHECK(f8e4m3_bits_to_f32(0x78) == 256.0f, "e4m3 0x78 is 2^8");
  CHECK(f32_to_f8e4m3_bits(-448.0f) == 0xfe, "e4m3 -448 is 0xfe");
  /* f32 is (float)v, f64 is v */
  for (int i = 0; i < 1000000; i++) {
    uint64_t u = next_u64();
    double v;
    memcpy(&v, &u, sizeof v);
    CHECK(same(round_to_dtype(v, DT_F32), (double)(float)v), "f32: round_to_dtype(%a)", v);
    CHECK(same(round_to_dtype(v, DT_F64), v), "f64: round_to_dtype(%a)", v);
  }
  /* integers: nearest even, clamped; NaN -> 0 */
  EXPECT_ROUND(2.5, DT_I32, 2.0);
  EXPECT_ROUND(3.5, DT_I32, 4.0);
  EXPECT_ROUND(-2.5, DT_I32, -2.0);
  EXPECT_ROUND(-2.5000001, DT_I32, -3.0);
  EXPECT_ROUND(0.49999999999999994, DT_I32, 0.0);
  EXPECT_ROUND(300.0, DT_I8, 127.0);
  EXPECT_ROUND(-300.0, DT_I8, -128.0);
  EXPECT_ROUND(-5.0, DT_U8, 0.0);
  EXPECT_ROUND(255.5, DT_U8, 255.0);
  EXPECT_ROUND(9.0, DT_I4, 7.0);
  EXPECT_ROUND(-9.0, DT_I4, -8.0);
  EXPECT_ROUND(-7.5, DT_I4, -8.0);
  EXPECT_ROUND(NAN, DT_I16, 0.0);
  EXPECT_ROUND(1e30, DT_I64, 0x1p63 - 1024);
  EXPECT_ROUND(-1e30, DT_I64, -0x1p63);
  EXPECT_ROUND(INFINITY, DT_U32, 4294967295.0);
  EXPECT_ROUND(0.25, DT_BOOL, 1.0);
  EXPECT_ROUND(0.0, DT_BOOL, 0.0);
}

static void test_load_store(void) {
  /* every type: store, check the raw bytes where the encoding matters, load back */
  static const struct {
    DType t;
    double in, out;
  } cases[] = {
      {DT_F64, 0.1, 0.1},
      {DT_F32, 0.1, (double)0.1f},
      {DT_F16, 65520.0, INFINITY},
      {DT_BF16, 1 + 0x1p-8 + 0x1p-30, 1 + 0x1p-7},
      {DT_F8E4M3, 500.0, 448.0},
      {DT_F8E5M2, -1e6, -57344.0},
      {DT_I8, -128.6, -128.0},
      {DT_U8, 254.5, 254.0},
      {DT_I16, -32768.0, -32768.0},
      {DT_I32, 2147483647.4, 2147483647.0},
      {DT_I64, -12345678901.0, -12345678901.0},
      {DT_U16, 70000.0, 65535.0},
      {DT_U32, 4294967295.0, 4294967295.0},
      {DT_U64, 1e30, 0x1p64 - 2048},
      {DT_BOOL, -3.0, 1.0},
      {DT_I4, -6.5, -6.0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint8_t buf[32];
    memset(buf, 0xa5, sizeof buf);
    dtype_store(cases[i].t, buf, 1, cases[i].in);
    double got = dtype_load(cases[i].t, buf, 1);
    CHECK(same(got, cases[i].out), "%s: stored %.17g, loaded %.17g, expected %.17g", dtype_name(cases[i].t),
          cases[i].in, got, cases[i].out);
    /* element 0 (and the other nibble of an i4 byte) is left alone */
    if (cases[i].t != DT_I4)
      CHECK(buf[0] == 0xa5, "%s: store at index 1 touched byte 0", dtype_name(cases[i].t));
  }
  /* little-endian layouts */
  uint8_t b[8] = {0};
  dtype_store(DT_I16, b, 0, 0x0102);
  CHECK(b[0] == 0x02 && b[1] == 0x01, "i16 is not little-endian");
  dtype_store(DT_BF16, b, 0, 1.0);
  CHECK(b[0] == 0x80 && b[1] == 0x3f, "bf16 1.0 is not 0x3f80 little-endian");
  dtype_store(DT_F16, b, 0, -2.0);
  CHECK(b[0] == 0x00 && b[1] == 0xc0, "f16 -2.0 is not 0xc000");
  /* i4: two per byte, low nibble first, two's complement */
  uint8_t q[3] = {0, 0, 0};
  const double vals[5] = {1, -2, 7, -8, 3};
  for (int i = 0; i < 5; i++)
    dtype_store(DT_I4, q, (size_t)i, vals[i]);
  CHECK(q[0] == 0xe1 && q[1] == 0x87 && q[2] == 0x03, "i4 packing: %02x %02x %02x", q[0], q[1], q[2]);
  for (int i = 0; i < 5; i++)
    CHECK(dtype_load(DT_I4, q, (size_t)i) == vals[i], "i4 element %d", i);
  dtype_store(DT_I4, q, 4, 20.0); /* clamps to 7; the high nibble of byte 2 stays 0 */
  CHECK(q[2] == 0x07 && dtype_load(DT_I4, q, 5) == 0, "i4 clamp / neighbour nibble");
  CHECK(dtype_bytes(DT_I4, 5) == 3, "i4 size");
}

int main(void) {
  for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++) {
    test_exhaustive(&fmts[i]);
    test_against_oracle(&fmts[i]);
    test_encoders_vs_round(&fmts[i]);
  }
  test_bf16_ties_all_floats();
  test_hand_cases();
  test_load_store();
  return check_result("interp_numerics_test");
}
