/* wq_pack_test.c: the GPU's load-time weight quantization (kernels/prep.cuh: ffn_prep_wq_scale,
 * ffn_prep_wq_pack; decoded by gemm_wq.cuh) gives exactly the weights the CPU reference
 * multiplies by under `precision weights i8|i4` (ir/interp.c's contract).
 *
 * The prep kernels' loops are mirrored here on the host over kernels/quant.cuh, the functions
 * they call; the codes are decoded as gemm_wq does (level times scale, in f32). The reference's
 * quantized weights are read back through a product with the identity, y = I @ b (one nonzero
 * term per output, exact in f32). Random matrices with all-zero columns, single outliers and,
 * for i4, a last group shorter than the others; bit-exact comparison.
 */
#include "util.h"

#include <math.h>
#include <time.h>

#include "kernels/quant.cuh"

/* ffn_prep_wq_scale and ffn_prep_wq_pack on b_nk [R, K] (B's rows: the GEMM's output columns). */
static void host_pack(const float *bnk, int64_t R, int64_t K, int bits, int64_t group, float *scales,
                      unsigned char *codes) {
  const int64_t G = bits == 8 ? wq_group_len(K, 0) : wq_group_len(K, group), ng = (K + G - 1) / G;
  const int qmax = bits == 8 ? 127 : 7, per = bits == 8 ? 1 : 2;
  const int64_t rb = wq_row_bytes(K, bits);
  for (int64_t w = 0; w < R * ng; w++) {
    int64_t r = w / ng, k0 = (w % ng) * G, k1 = k0 + G < K ? k0 + G : K;
    double amax = 0;
    for (int64_t k = k0; k < k1; k++)
      amax = fmax(amax, fabs((double)bnk[r * K + k]));
    scales[w] = wq_scale(amax, qmax);
  }
  for (int64_t i = 0; i < R * rb; i++) {
    int64_t r = i / rb, j = i % rb;
    unsigned byte = 0;
    for (int h = 0; h < per; h++) {
      int64_t k = j * per + h;
      int q = k < K ? wq_level(bnk[r * K + k], scales[r * ng + k / G], qmax) : 0;
      byte |= wq_code(q, bits) << (4 * h);
    }
    codes[i] = (unsigned char)byte;
  }
}

/* gemm_wq's value of weight (r, k): the code's level times its scale, in f32. */
static float decode(const unsigned char *codes, const float *scales, int64_t K, int bits, int64_t group, int64_t r,
                    int64_t k) {
  const int64_t rb = wq_row_bytes(K, bits), G = bits == 8 ? K : wq_group_len(K, group), ng = (K + G - 1) / G;
  unsigned code = bits == 8 ? codes[r * rb + k] : (codes[r * rb + k / 2] >> (4 * (k & 1))) & 0xfu;
  float level = (float)wq_code_level(code, bits), s = scales[r * ng + k / G];
  return level * s;
}

static double uniform(void) { return (double)rand() / RAND_MAX * 2 - 1; }

static void check_case(int bits, int64_t K, int64_t N, int64_t group) {
  /* b [K, N] under the policy; column 1 all zero, column 2 one outlier, the rest random */
  double *bv = malloc(sizeof(double) * (size_t)(K * N)), *iv = calloc((size_t)(K * K), sizeof(double));
  float *bnk = malloc(sizeof(float) * (size_t)(K * N));
  for (int64_t k = 0; k < K; k++)
    for (int64_t n = 0; n < N; n++) {
      double v = n == 1 ? 0.0 : n == 2 ? (k == K / 3 ? 40.0 : 0.01 * uniform()) : uniform() * (1 + k % 7);
      bv[k * N + n] = (float)v;
      bnk[n * K + k] = (float)v;
    }
  for (int64_t k = 0; k < K; k++)
    iv[k * K + k] = 1;
  Graph *g = graph_create("wq", "test.ffn");
  g->prec.type[PREC_WEIGHTS] = bits == 8 ? DT_I8 : DT_I4;
  g->prec.group = (int)group;
  Node *x = ir_input(g, "x", SHAPE(K, K), DT_F32, here);
  Node *b = weight(g, "b", SHAPE(K, N), DT_F32);
  graph_add_output(g, "y", op2(g, OP_MATMUL, DT_F32, x, b));
  verify(g);
  Store w = {0}, in = {0};
  put(&in, "x", DT_F32, DIMS(K, K), iv);
  put(&w, "b", DT_F32, DIMS(K, N), bv);
  RefTensor y;
  char err[256];
  CHECK(run(g, &w, &in, &y, err, sizeof err) == 0, "%s", err);
  float *scales = malloc(sizeof(float) * (size_t)(N * K));
  unsigned char *codes = malloc((size_t)(N * wq_row_bytes(K, bits)));
  host_pack(bnk, N, K, bits, group, scales, codes);
  int64_t bad = 0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t k = 0; k < K; k++) {
      float gpu = decode(codes, scales, K, bits, group, n, k), ref = y.data[k * N + n];
      if (memcmp(&gpu, &ref, sizeof gpu) != 0 && bad++ < 3)
        fprintf(stderr, "i%d K=%lld G=%lld: weight (k %lld, n %lld): packed %.9g, reference %.9g\n", bits,
                (long long)K, (long long)group, (long long)k, (long long)n, gpu, ref);
    }
  /* the padding past K holds level 0 (zero weights) */
  for (int64_t k = K; k < wq_row_bytes(K, bits) * (bits == 8 ? 1 : 2); k++)
    bad += wq_code_level(bits == 8 ? codes[k] : (codes[k / 2] >> (4 * (k & 1))) & 0xfu, bits) != 0;
  CHECK(bad == 0, "i%d K=%lld N=%lld G=%lld: %lld weights differ from the reference's", bits, (long long)K,
        (long long)N, (long long)group, (long long)bad);
  ref_free(&y);
  store_free(&w);
  store_free(&in);
  graph_destroy(g);
  free(bv), free(iv), free(bnk), free(scales), free(codes);
}

int main(void) {
  unsigned seed = (unsigned)time(NULL);
  if (getenv("FFNC_TEST_SEED"))
    seed = (unsigned)strtoul(getenv("FFNC_TEST_SEED"), NULL, 0);
  printf("seed %u (replay with FFNC_TEST_SEED=%u)\n", seed, seed);
  srand(seed);
  check_case(8, 77, 9, 0);    /* per column; K not a multiple of a 16-byte word */
  check_case(8, 256, 5, 0);
  check_case(4, 200, 6, 64);  /* groups 64, 64, 64, 8 */
  check_case(4, 96, 7, 32);
  check_case(4, 360, 4, 128); /* groups 128, 128, 104 */
  check_case(4, 130, 5, 0);   /* one group over K */
  check_case(4, 64, 3, 128);  /* a group longer than K: one group */
  return check_result("wq_pack_test");
}
