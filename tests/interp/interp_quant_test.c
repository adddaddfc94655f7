/* interp_quant_test.c: the precision policy of matrix products (the quantization contract
 * at the top of ir/interp.c), on cases small enough to work out by hand. */
#include "util.h"

/* y = a @ b with a an input [2, 2] and b a weight [2, 2] (or an input, if b_is_input), all
 * f32, under the given policy. */
static void run_mm(DType matmul, DType weights, int group, bool b_is_input, const double *av, const double *bv,
                   RefTensor *out) {
  Graph *g = graph_create("q", "test.ffn");
  g->prec.type[PREC_MATMUL] = matmul;
  g->prec.type[PREC_WEIGHTS] = weights;
  g->prec.group = group;
  Node *a = ir_input(g, "a", SHAPE(2, 2), DT_F32, here);
  Node *b = b_is_input ? ir_input(g, "b", SHAPE(2, 2), DT_F32, here) : weight(g, "b", SHAPE(2, 2), DT_F32);
  graph_add_output(g, "y", op2(g, OP_MATMUL, DT_F32, a, b));
  verify(g);
  Store w = {0}, in = {0};
  put(&in, "a", DT_F32, DIMS(2, 2), av);
  put(b_is_input ? &in : &w, "b", DT_F32, DIMS(2, 2), bv);
  char err[256];
  CHECK(run(g, &w, &in, out, err, sizeof err) == 0, "%s", err);
  store_free(&w);
  store_free(&in);
  graph_destroy(g);
}

/* precision matmul f8e4m3 (FMAX 448), a = [[1, 0.1], [0, 0]], b = [[2, 0.5], [2, -0.25]]:
 *   row 0 of a: sa = 1/448, a/sa = [448, 44.8] -> qa = [448, 44] (step 4 in [32, 64))
 *   row 1 of a: all zero, sa = 1, qa = [0, 0]
 *   column 0 of b: sb = 2/448, qb = [448, 448]
 *   column 1 of b: sb = 0.5/448, b/sb = [448, -224] (224 = 1.75 * 2^7 is exact)
 *   y[0,0] = (1/448)(2/448)(448*448 + 44*448)       = 2 * 492 / 448        = 2.1964285714
 *   y[0,1] = (1/448)(0.5/448)(448*448 - 44*224)     = 0.5 * 190848 / 200704 = 0.4754464286
 *   (exact: 2.2 and 0.475); row 1 is 0.
 * f8e5m2 (FMAX 57344): a/sa = [57344, 5734.4] -> [57344, 6144] (step 1024 in [4096, 8192));
 *   b/sb = [57344, 57344] and [57344, -28672]:
 *   y[0,0] = 2 (57344 + 6144) / 57344 = 2.2142857143
 *   y[0,1] = 0.5 (57344^2 - 6144 * 28672) / 57344^2 = 0.4732142857
 * The scales are floats (1/448 is not), hence the 1e-6 tolerance. */
static void test_fp8(void) {
  const double *a = VALS(1, 0.1, 0, 0), *b = VALS(2, 0.5, 2, -0.25);
  RefTensor y;
  run_mm(DT_F8E4M3, DT_NONE, 0, false, a, b, &y);
  EXPECT("f8e4m3", &y, 1e-6, DIMS(2, 2), 2.1964285714, 0.4754464286, 0, 0);
  ref_free(&y);
  run_mm(DT_F8E5M2, DT_NONE, 0, false, a, b, &y);
  EXPECT("f8e5m2", &y, 1e-6, DIMS(2, 2), 2.2142857143, 0.4732142857, 0, 0);
  ref_free(&y);
  /* both operands are quantized, constant or not */
  run_mm(DT_F8E4M3, DT_NONE, 0, true, a, b, &y);
  EXPECT("f8e4m3, b an input", &y, 1e-6, DIMS(2, 2), 2.1964285714, 0.4754464286, 0, 0);
  ref_free(&y);
  /* without a policy: exact products of the f32 operands (0.1f = 0.100000001490116) */
  run_mm(DT_NONE, DT_NONE, 0, false, a, b, &y);
  EXPECT("no policy", &y, 1e-7, DIMS(2, 2), 2.2, 0.475, 0, 0);
  ref_free(&y);
}

/* precision matmul bf16 / f16: a = [[1 + 2^-9, 1], [1, 0]], b = [[1, 0], [1, 0]].
 *   bf16 rounds 1 + 2^-9 to 1 (spacing 2^-7): y[0,0] = 2;
 *   f16 keeps it (spacing 2^-10): 2.001953125; with no policy also 2.001953125. */
static void test_round_operands(void) {
  const double *a = VALS(1 + 0x1p-9, 1, 1, 0), *b = VALS(1, 0, 1, 0);
  RefTensor y;
  run_mm(DT_BF16, DT_NONE, 0, false, a, b, &y);
  EXPECT("matmul bf16", &y, 0, DIMS(2, 2), 2, 0, 1, 0);
  ref_free(&y);
  run_mm(DT_F16, DT_NONE, 0, false, a, b, &y);
  EXPECT("matmul f16", &y, 0, DIMS(2, 2), 2.001953125, 0, 1, 0);
  ref_free(&y);
  run_mm(DT_NONE, DT_NONE, 0, false, a, b, &y);
  EXPECT("matmul as is", &y, 0, DIMS(2, 2), 2.001953125, 0, 1, 0);
  ref_free(&y);
}

/* precision weights i8, b = [[1.984375, 0.3], [-0.5078125, 0.2]] stored [in, out]:
 *   column 0: amax = 1.984375 = 127/64, s = 1/64 (exact), b/s = [127, -32.5] -> q = [127, -32]
 *             (the tie goes to even), dequantized [1.984375, -0.5]
 *   column 1: amax 0.3, s = 0.3/127, b/s = [127, 84.67] -> q = [127, 85],
 *             dequantized [0.3, 85 * 0.3 / 127 = 0.2007874016]
 *   a = [[1, 1], [1, 0]]: y = [[1.984375 - 0.5, 0.3 + 0.2007874016], [1.984375, 0.3]]
 *                           = [[1.484375, 0.5007874016], [1.984375, 0.3]]
 * When b is an input (not constant) it is left alone: [[1.4765625, 0.5], [1.984375, 0.3]]. */
static void test_i8(void) {
  const double *a = VALS(1, 1, 1, 0), *b = VALS(1.984375, 0.3, -0.5078125, 0.2);
  RefTensor y;
  run_mm(DT_NONE, DT_I8, 0, false, a, b, &y);
  EXPECT("weights i8", &y, 1e-7, DIMS(2, 2), 1.484375, 0.5007874016, 1.984375, 0.3);
  ref_free(&y);
  run_mm(DT_NONE, DT_I8, 0, true, a, b, &y);
  EXPECT("weights i8, b an input", &y, 1e-7, DIMS(2, 2), 1.4765625, 0.5, 1.984375, 0.3);
  ref_free(&y);

  /* the usual layout: the weight stored [out, in] and used as a @ w^T; the scale is per
   * output channel, i.e. per row of the stored weight. Same numbers as above. */
  Graph *g = graph_create("q", "test.ffn");
  g->prec.type[PREC_WEIGHTS] = DT_I8;
  Node *x = ir_input(g, "a", SHAPE(2, 2), DT_F32, here);
  Node *w = weight(g, "w", SHAPE(2, 2), DT_F32);
  graph_add_output(g, "y", op2(g, OP_MATMUL, DT_F32, x, op1(g, OP_TRANSPOSE, DT_F32, w)));
  verify(g);
  Store ws = {0}, in = {0};
  put(&in, "a", DT_F32, DIMS(2, 2), a);
  put(&ws, "w", DT_F32, DIMS(2, 2), VALS(1.984375, -0.5078125, 0.3, 0.2));
  char err[256];
  CHECK(run(g, &ws, &in, &y, err, sizeof err) == 0, "%s", err);
  EXPECT("weights i8, a @ w^T", &y, 1e-7, DIMS(2, 2), 1.484375, 0.5007874016, 1.984375, 0.3);
  ref_free(&y);
  store_free(&ws);
  store_free(&in);
  graph_destroy(g);
}

/* precision weights i4, b = [0.7, 0.24, 3.5, -1.2]^T ([4, 1]), a = [[1, 1, 1, 1]]:
 *   group=2: k 0-1: amax 0.7, s = 0.1, b/s = [7, 2.4] -> [7, 2] -> [0.7, 0.2]
 *            k 2-3: amax 3.5, s = 0.5, b/s = [7, -2.4] -> [7, -2] -> [3.5, -1]
 *            y = 0.7 + 0.2 + 3.5 - 1 = 3.4
 *   per column (group 0): s = 0.5, b/s = [1.4, 0.48, 7, -2.4] -> [1, 0, 7, -2]
 *            -> [0.5, 0, 3.5, -1], y = 3
 *   group=3 (a last, shorter group): k 0-2: amax 3.5, s = 0.5 -> [0.5, 0, 3.5];
 *            k 3 alone: s = 1.2/7, q = -7 -> -1.2; y = 2.8 */
static double run_i4(int group) {
  Graph *g = graph_create("q", "test.ffn");
  g->prec.type[PREC_WEIGHTS] = DT_I4;
  g->prec.group = group;
  Node *a = ir_input(g, "a", SHAPE(1, 4), DT_F32, here);
  Node *b = weight(g, "b", SHAPE(4, 1), DT_F32);
  graph_add_output(g, "y", op2(g, OP_MATMUL, DT_F32, a, b));
  verify(g);
  Store w = {0}, in = {0};
  put(&in, "a", DT_F32, DIMS(1, 4), VALS(1, 1, 1, 1));
  put(&w, "b", DT_F32, DIMS(4, 1), VALS(0.7, 0.24, 3.5, -1.2));
  RefTensor y = {0};
  char err[256];
  CHECK(run(g, &w, &in, &y, err, sizeof err) == 0, "%s", err);
  double v = y.data ? y.data[0] : NAN;
  ref_free(&y);
  store_free(&w);
  store_free(&in);
  graph_destroy(g);
  return v;
}

static void test_i4(void) {
  double v;
  CHECK(close_to(v = run_i4(2), 3.4, 1e-6), "i4 group=2: %.9g, expected 3.4", v);
  CHECK(close_to(v = run_i4(0), 3.0, 1e-6), "i4 per column: %.9g, expected 3", v);
  CHECK(close_to(v = run_i4(3), 2.8, 1e-6), "i4 group=3: %.9g, expected 2.8", v);
}

/* The contract, followed literally here on random data, must match bit for bit: this pins
 * the details a tolerance would not see (scales rounded to float, ties, the order of the
 * final scaling), which the GPU kernels rely on. */
static void test_contract_exact(DType matmul, DType weights, int group) {
  enum { M = 5, K = 40, N = 7 };
  static double av[M * K], bv[K * N];
  uint32_t seed = 777u + (uint32_t)matmul * 31u + (uint32_t)weights;
  for (int i = 0; i < M * K; i++)
    av[i] = (double)(float)(((seed = seed * 1664525u + 1013904223u) >> 8) / 16777216.0 * 6 - 3);
  for (int i = 0; i < K * N; i++)
    bv[i] = (double)(float)(((seed = seed * 1664525u + 1013904223u) >> 8) / 16777216.0 * 0.2 - 0.1);
  Graph *g = graph_create("q", "test.ffn");
  g->prec.type[PREC_MATMUL] = matmul;
  g->prec.type[PREC_WEIGHTS] = weights;
  g->prec.group = group;
  Node *a = ir_input(g, "a", SHAPE(M, K), DT_F32, here);
  Node *b = weight(g, "b", SHAPE(K, N), DT_F32);
  graph_add_output(g, "y", op2(g, OP_MATMUL, DT_F32, a, b));
  verify(g);
  Store w = {0}, in = {0};
  put(&in, "a", DT_F32, DIMS(M, K), av);
  put(&w, "b", DT_F32, DIMS(K, N), bv);
  RefTensor y = {0};
  char err[256];
  CHECK(run(g, &w, &in, &y, err, sizeof err) == 0, "%s", err);

  double qa[M * K], qb[K * N], sa[M], sb[N];
  memcpy(qa, av, sizeof qa);
  memcpy(qb, bv, sizeof qb);
  for (int r = 0; r < M; r++)
    sa[r] = 1;
  for (int n = 0; n < N; n++)
    sb[n] = 1;
  if (weights != DT_NONE) {
    int qmax = weights == DT_I8 ? 127 : 7, G = group > 0 ? group : K;
    for (int n = 0; n < N; n++)
      for (int k0 = 0; k0 < K; k0 += G) {
        double amax = 0;
        for (int k = k0; k < k0 + G && k < K; k++)
          amax = fmax(amax, fabs(qb[k * N + n]));
        float sc = (float)(amax / qmax);
        for (int k = k0; k < k0 + G && k < K; k++) {
          double q = round_to_dtype(qb[k * N + n] / sc, DT_I32);
          qb[k * N + n] = (float)(fmin(fmax(q, -qmax), qmax) * sc);
        }
      }
  }
  if (matmul != DT_NONE) {
    double fmax_t = matmul == DT_F8E4M3 ? 448 : 57344;
    for (int r = 0; r < M; r++) {
      double amax = 0;
      for (int k = 0; k < K; k++)
        amax = fmax(amax, fabs(qa[r * K + k]));
      sa[r] = (float)(amax / fmax_t);
      for (int k = 0; k < K; k++)
        qa[r * K + k] = round_to_dtype(qa[r * K + k] / sa[r], matmul);
    }
    for (int n = 0; n < N; n++) {
      double amax = 0;
      for (int k = 0; k < K; k++)
        amax = fmax(amax, fabs(qb[k * N + n]));
      sb[n] = (float)(amax / fmax_t);
      for (int k = 0; k < K; k++)
        qb[k * N + n] = round_to_dtype(qb[k * N + n] / sb[n], matmul);
    }
  }
  int bad = 0;
  for (int r = 0; r < M && y.data; r++)
    for (int n = 0; n < N; n++) {
      double acc = 0;
      for (int k = 0; k < K; k++)
        acc += qa[r * K + k] * qb[k * N + n];
      bad += y.data[r * N + n] != (float)(sa[r] * sb[n] * acc);
    }
  CHECK(bad == 0, "matmul %s / weights %s group %d: %d elements differ from the contract", dtype_name(matmul),
        dtype_name(weights), group, bad);
  ref_free(&y);
  store_free(&w);
  store_free(&in);
  graph_destroy(g);
}

int main(void) {
  test_fp8();
  test_round_operands();
  test_i8();
  test_i4();
  test_contract_exact(DT_F8E4M3, DT_NONE, 0);
  test_contract_exact(DT_F8E5M2, DT_NONE, 0);
  test_contract_exact(DT_NONE, DT_I8, 0);
  test_contract_exact(DT_NONE, DT_I4, 0);
  test_contract_exact(DT_NONE, DT_I4, 16); /* 40 = 16 + 16 + 8: a shorter last group */
  return finish("interp_quant_test");
}
