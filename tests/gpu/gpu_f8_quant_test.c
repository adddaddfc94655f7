/* gpu_f8_quant_test.c: the GPU's fp8 activation quantizer (kernels/fp8.cuh: quant_rows_f8) gives
 * the reference's codes and scales bit for bit (kernels/numfmt.cuh: ffn_f8_scale, ffn_f8_code).
 *
 * Its fast path multiplies by the scale's reciprocal and falls back to the reference's double
 * rule only near a rounding boundary, so the rows here are built to sit on and around those
 * boundaries: random values, exact fp8 midpoints times the scale and their f32 neighbours a few
 * ulps away, values in fp8's subnormal range, zeros of both signs, NaN and infinities, a row of
 * zeros and a row whose largest magnitude is a bf16 subnormal. bf16 and f32 activations, e4m3
 * and e5m2, in both forms of the row loop. Exits 77 (skip) without a GPU; the seed is printed.
 */
#include "gpu/gpu_util.h"
#include "kernels/numfmt.cuh"
#include "runtime/rt.h"

#define K 1024
#define ROWS 61

/* Each case in both forms of the generated code's row loop: a block of 256 threads per row (half
 * of them past K's 128 chunks), and 8 rows of a warp per block (rows_*, 4 chunks a thread), on a
 * grid that loops, ROWS not a multiple of the 24 rows a step of it takes. */
#define QUANT(name, T, e5m2)                                                                                             \
  "extern \"C\" __global__ void __launch_bounds__(256) " name "(const " T " *x, ffn::u8 *q, float *s, long long m) {\n" \
  "  __shared__ float red[8];\n"                                                                                     \
  "  ffn::quant_rows_f8<" T ", " e5m2 ", 256, 256, 1024LL>(x, q, s, nullptr, m, red);\n}\n"                       \
  "extern \"C\" __global__ void __launch_bounds__(256) rows_" name "(const " T " *x, ffn::u8 *q, float *s, long long m) {\n" \
  "  __shared__ float red[8];\n"                                                                                     \
  "  ffn::quant_rows_f8<" T ", " e5m2 ", 256, 32, 1024LL>(x, q, s, nullptr, m, red);\n}\n"
static const char source[] = "#include \"fp8.cuh\"\n" QUANT("q_bf16_e4m3", "ffn::bf16", "0") QUANT(
    "q_bf16_e5m2", "ffn::bf16", "1") QUANT("q_f32_e4m3", "float", "0") QUANT("q_f32_e5m2", "float", "1");

static uint64_t rng;
static double urand(void) { /* [0, 1) */
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) * 0x1p-53;
}

static float f32_of_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint32_t bits_of_f32(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static uint16_t bf16_rn(float f) { /* finite f to bf16, ties to even; NaN stays NaN */
  uint32_t u = bits_of_f32(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* A value of the stored type (bf16 rounds it). */
static float stored(float v, bool bf16) { return bf16 ? f32_of_bits((uint32_t)bf16_rn(v) << 16) : v; }

/* Row r's values: most rows mix random values with boundary cases under the row's scale, which
 * the row's first element fixes (its largest magnitude: amax). */
static void fill_row(float *x, int r, bool bf16, bool e5m2) {
  const double fmax = ffn_f8_max(e5m2);
  if (r == 0) { /* zeros: scale 1 */
    for (int k = 0; k < K; k++)
      x[k] = k & 1 ? -0.0f : 0.0f;
    return;
  }
  if (r == 1) { /* amax a bf16 subnormal: the scale's reciprocal overflows */
    for (int k = 0; k < K; k++)
      x[k] = stored((float)((urand() - 0.5) * 1e-39), bf16);
    x[0] = f32_of_bits(0x00010000u);
    return;
  }
  double amax = ldexp(1.0 + urand(), (int)(urand() * 40) - 20);
  x[0] = stored((float)amax, bf16);
  const float s = ffn_f8_scale(fabs((double)x[0]), e5m2);
  for (int k = 1; k < K; k++) {
    double v;
    switch ((int)(urand() * 6)) {
    case 0: /* an fp8 midpoint under the scale, then a few ulps away */
    case 1: {
      int mb = e5m2 ? 2 : 3, e = (int)(urand() * (e5m2 ? 30 : 16)) - (e5m2 ? 16 : 9);
      double mid = ldexp((double)(2 * (int)(urand() * (1 << (mb + 1))) + 1), e - mb - 1);
      if (mid > fmax) mid = fmax * urand();
      float f = (float)(mid * (double)s);
      uint32_t u = bits_of_f32(f) + (uint32_t)((int)(urand() * 9) - 4);
      v = f32_of_bits(u);
      break;
    }
    case 2: /* fp8's subnormal range */
      v = ldexp(urand(), e5m2 ? -16 : -8) * s;
      break;
    default:
      v = (urand() * 2 - 1) * amax;
    }
    v = urand() < 0.5 ? -v : v;
    x[k] = stored((float)(fabs(v) > amax ? amax : v), bf16);
  }
  if (r == 2) /* non-finite elements: amax ignores NaN, an infinity makes the scale infinite */
    x[5] = NAN, x[6] = -NAN;
  if (r == 3)
    x[7] = INFINITY, x[8] = -INFINITY;
}

static int run_case(const CuApi *cu, CUmodule mod, bool bf16, bool e5m2, bool rows) {
  char fn[32];
  snprintf(fn, sizeof fn, "%sq_%s_%s", rows ? "rows_" : "", bf16 ? "bf16" : "f32", e5m2 ? "e5m2" : "e4m3");
  static float x[ROWS * K];
  static uint16_t xb[ROWS * K];
  static uint8_t q[ROWS * K];
  static float s[ROWS];
  for (int r = 0; r < ROWS; r++)
    fill_row(x + (size_t)r * K, r, bf16, e5m2);
  for (size_t i = 0; i < (size_t)ROWS * K; i++)
    xb[i] = (uint16_t)(bits_of_f32(x[i]) >> 16);
  size_t xbytes = (size_t)ROWS * K * (bf16 ? 2 : 4);
  CUfunction f;
  CUdeviceptr dx, dq, ds;
  if (cu->cuModuleGetFunction(&f, mod, fn) || cu->cuMemAlloc(&dx, xbytes) || cu->cuMemAlloc(&dq, ROWS * K) ||
      cu->cuMemAlloc(&ds, ROWS * 4))
    return printf("FAIL: %s: module function or buffers\n", fn), 1;
  long long m = ROWS;
  void *args[] = {&dx, &dq, &ds, &m};
  CUresult rc = cu->cuMemcpyHtoD(dx, bf16 ? (void *)xb : (void *)x, xbytes);
  if (!rc)
    rc = cu->cuMemsetD8Async(dq, 0xA5, ROWS * K, NULL); /* poisoned; the scales with NaN */
  if (!rc)
    rc = cu->cuMemsetD8Async(ds, 0xFF, ROWS * 4, NULL);
  if (!rc)
    rc = cu->cuLaunchKernel(f, rows ? 3 : 16, 1, 1, 256, 1, 1, 0, NULL, args, NULL);
  if (!rc)
    rc = cu->cuStreamSynchronize(NULL);
  if (!rc)
    rc = cu->cuMemcpyDtoH(q, dq, ROWS * K);
  if (!rc)
    rc = cu->cuMemcpyDtoH(s, ds, ROWS * 4);
  cu->cuMemFree(dx), cu->cuMemFree(dq), cu->cuMemFree(ds);
  if (rc)
    return printf("FAIL: %s: CUDA error %d\n", fn, (int)rc), 1;
  long bad = 0, checked = 0;
  for (int r = 0; r < ROWS; r++) {
    const float *xr = x + (size_t)r * K;
    double amax = 0;
    for (int k = 0; k < K; k++)
      amax = fmax(amax, fabs((double)xr[k]));
    float sr = ffn_f8_scale(amax, e5m2);
    if (bits_of_f32(sr) != bits_of_f32(s[r]) && bad++ < 5)
      printf("  %s row %d: scale %a, reference %a\n", fn, r, s[r], sr);
    for (int k = 0; k < K; k++, checked++) {
      unsigned want = ffn_f8_code(xr[k], sr, e5m2);
      if (q[(size_t)r * K + k] != want && bad++ < 5)
        printf("  %s row %d col %d: x %a code 0x%02x, reference 0x%02x\n", fn, r, k, xr[k], q[(size_t)r * K + k], want);
    }
  }
  printf("%s %s: %ld codes and %d scales, %ld differ\n", bad ? "FAIL" : "ok  ", fn, checked, ROWS, bad);
  return bad != 0;
}

int main(void) {
  /* NVRTC first, so that the source is checked where there is no GPU too */
  char arch[16];
  snprintf(arch, sizeof arch, "sm_%d", cu_default_arch());
  Image im;
  if (nvrtc_compile(source, "gpu_f8_quant_test", arch, false, &im) != FFN_OK)
    return printf("FAIL: NVRTC: %s\n", ffn_last_error()), 1;
  printf("ok   NVRTC compiled the quantizer for %s\n", arch);
  require_gpu();
  const char *env = getenv("FFNC_TEST_SEED");
  uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
  printf("seed %llu (FFNC_TEST_SEED replays it)\n", (unsigned long long)seed);
  rng = seed * 2654435761u + 1;
  const CuApi *cu = cu_api(NULL, 0);
  CUdevice dev;
  CUcontext ctx;
  if (cu->cuDeviceGet(&dev, 0) || cu->cuDevicePrimaryCtxRetain(&ctx, dev) || cu->cuCtxPushCurrent(ctx))
    return printf("FAIL: device context\n"), 1;
  CUmodule mod;
  if (cu->cuModuleLoadDataEx(&mod, im.image, 0, NULL, NULL))
    return printf("FAIL: cuModuleLoadDataEx\n"), 1;
  int failed = 0;
  for (int rep = 0; rep < 8; rep++)
    for (int c = 0; c < 8; c++)
      failed += run_case(cu, mod, c & 1, c >> 1 & 1, c >> 2);
  cu->cuModuleUnload(mod);
  return failed ? 1 : 0;
}
