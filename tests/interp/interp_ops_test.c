/* interp_ops_test.c: the interpreter's semantics of each op against values worked out by
 * hand (the working is in the comments; 10 significant digits). */
#include "util.h"

/* rmsnorm([3, 4], g = [1, 2], eps 0): ms = (9 + 16) / 2 = 12.5, sqrt(12.5) = 3.5355339059,
 * y = [3 / 3.5355339059 * 1, 4 / 3.5355339059 * 2] = [0.8485281374, 2.2627416998].
 * layernorm([1, 2, 3, 4], g = [1, 1, 2, 2], b = [0, 0, 0, 1], eps 0): mean 2.5,
 * var = (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25, sd 1.1180339887,
 * (x - mean) / sd = [-1.3416407865, -0.4472135955, 0.4472135955, 1.3416407865],
 * * g + b = [-1.3416407865, -0.4472135955, 0.8944271910, 3.6832815730].
 * Without b (2 operands) the last one is 2.6832815730. */
static void test_norms(void) {
  Graph *g = graph_create("norms", "test.ffn");
  Node *x = ir_input(g, "x", SHAPE(1, 2), DT_F32, here);
  Node *gain = weight(g, "g", SHAPE(2), DT_F32);
  Node *x4 = ir_input(g, "x4", SHAPE(1, 4), DT_F32, here);
  Node *g4 = weight(g, "g4", SHAPE(4), DT_F32), *b4 = weight(g, "b4", SHAPE(4), DT_F32);
  graph_add_output(g, "rms", norm(g, OP_RMSNORM, DT_F32, 0.0, 2, (Node *[]){x, gain}));
  graph_add_output(g, "ln", norm(g, OP_LAYERNORM, DT_F32, 0.0, 3, (Node *[]){x4, g4, b4}));
  graph_add_output(g, "ln2", norm(g, OP_LAYERNORM, DT_F32, 0.0, 2, (Node *[]){x4, g4}));
  /* eps matters: rmsnorm([3, 4], [1, 1], eps 1) = [3, 4] / sqrt(13.5) = [0.8164965809, 1.0886621079] */
  Node *ones = weight(g, "ones", SHAPE(2), DT_F32);
  graph_add_output(g, "rms_eps", norm(g, OP_RMSNORM, DT_F32, 1.0, 2, (Node *[]){x, ones}));
  /* the per-row statistics of folded norms: rms_rstd([3, 4]) = 1 / 3.5355339059 = 0.2828427125,
   * ln_mean([1, 2, 3, 4]) = 2.5, ln_rstd = 1 / 1.1180339887 = 0.8944271910; [.., D] -> [.., 1] */
  graph_add_output(g, "rms_rstd", norm(g, OP_RMS_RSTD, DT_F32, 0.0, 1, (Node *[]){x}));
  graph_add_output(g, "ln_mean", norm(g, OP_LN_MEAN, DT_F32, 0.0, 1, (Node *[]){x4}));
  graph_add_output(g, "ln_rstd", norm(g, OP_LN_RSTD, DT_F32, 0.0, 1, (Node *[]){x4}));
  verify(g);
  Store w = {0}, in = {0};
  put(&in, "x", DT_F32, DIMS(1, 2), VALS(3, 4));
  put(&in, "x4", DT_F32, DIMS(1, 4), VALS(1, 2, 3, 4));
  put(&w, "g", DT_F32, DIMS(2), VALS(1, 2));
  put(&w, "g4", DT_F32, DIMS(4), VALS(1, 1, 2, 2));
  put(&w, "b4", DT_F32, DIMS(4), VALS(0, 0, 0, 1));
  put(&w, "ones", DT_F32, DIMS(2), VALS(1, 1));
  RefTensor out[7];
  char err[256];
  CHECK(run(g, &w, &in, out, err, sizeof err) == 0, "norms: %s", err);
  EXPECT("rmsnorm", &out[0], 1e-7, DIMS(1, 2), 0.8485281374, 2.2627416998);
  EXPECT("layernorm", &out[1], 1e-7, DIMS(1, 4), -1.3416407865, -0.4472135955, 0.8944271910, 3.6832815730);
  EXPECT("layernorm without bias", &out[2], 1e-7, DIMS(1, 4), -1.3416407865, -0.4472135955, 0.8944271910,
         2.6832815730);
  EXPECT("rmsnorm eps", &out[3], 1e-7, DIMS(1, 2), 0.8164965809, 1.0886621079);
  EXPECT("rms_rstd", &out[4], 1e-7, DIMS(1, 1), 0.2828427125);
  EXPECT("ln_mean", &out[5], 0, DIMS(1, 1), 2.5);
  EXPECT("ln_rstd", &out[6], 1e-7, DIMS(1, 1), 0.8944271910);
  for (int i = 0; i < 7; i++)
    ref_free(&out[i]);
  store_free(&w);
  store_free(&in);
  graph_destroy(g);
}

/* Elementwise functions at x = [1, -1, 2, 0.5]:
 *   silu(x) = x / (1 + e^-x):        silu(1) = 1 / 1.3678794412 = 0.7310585786,
 *                                    silu(-1) = -1 / (1 + e) = -0.2689414214,
 *                                    silu(2) = 2 / 1.1353352832 = 1.7615941560, silu(0.5) = 0.3112296943
 *   gelu(x) = x Phi(x):              Phi(1) = 0.8413447461 -> 0.8413447461, -0.1586552539,
 *                                    2 Phi(2) = 2 * 0.9772498681 = 1.9544997361, 0.3457312306
 *   gelu_tanh: 0.5x(1 + tanh(0.7978845608 (x + 0.044715 x^3))): at 1, tanh(0.8335677) =
 *                                    0.6823839812 -> 0.8411919906; -0.1588080094, 1.9545976941, 0.3457140098
 *   sigmoid(1) = 0.7310585786, sigmoid(-1) = 0.2689414214, sigmoid(2) = 0.8807970780, sigmoid(0.5) = 0.6224593312
 *   tanh(1) = 0.7615941560, tanh(2) = 0.9640275801, tanh(0.5) = 0.4621171573
 *   relu, square, neg: obvious. */
static void test_unary(void) {
  Graph *g = graph_create("unary", "test.ffn");
  Node *x = ir_input(g, "x", SHAPE(4), DT_F32, here);
  static const Op ops[] = {OP_SILU, OP_GELU, OP_GELU_TANH, OP_SIGMOID, OP_TANH, OP_RELU, OP_SQUARE, OP_NEG};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    graph_add_output(g, op_info[ops[i]].name, op1(g, ops[i], DT_F32, x));
  verify(g);
  Store w = {0}, in = {0};
  put(&in, "x", DT_F32, DIMS(4), VALS(1, -1, 2, 0.5));
  RefTensor out[8];
  char err[256];
  CHECK(run(g, &w, &in, out, err, sizeof err) == 0, "unary: %s", err);
  EXPECT("silu", &out[0], 1e-7, DIMS(4), 0.7310585786, -0.2689414214, 1.7615941560, 0.3112296943);
  EXPECT("gelu", &out[1], 1e-7, DIMS(4), 0.8413447461, -0.1586552539, 1.9544997361, 0.3457312306);
  EXPECT("gelu_tanh", &out[2], 1e-7, DIMS(4), 0.8411919906, -0.1588080094, 1.9545976941, 0.3457140098);
  EXPECT("sigmoid", &out[3], 1e-7, DIMS(4), 0.7310585786, 0.2689414214, 0.8807970780, 0.6224593312);
  EXPECT("tanh", &out[4], 1e-7, DIMS(4), 0.7615941560, -0.7615941560, 0.9640275801, 0.4621171573);
  EXPECT("relu", &out[5], 0, DIMS(4), 1, 0, 2, 0.5);
  EXPECT("square", &out[6], 0, DIMS(4), 1, 1, 4, 0.25);
  EXPECT("neg", &out[7], 0, DIMS(4), -1, 1, -2, -0.5);
  for (int i = 0; i < 8; i++)
    ref_free(&out[i]);
  store_free(&in);
  graph_destroy(g);
}

/* Broadcasting:
 *   [[1, 2, 3], [4, 5, 6]] + [10, 20, 30]      = [[11, 22, 33], [14, 25, 36]]
 *   [[1], [2]] * [10, 20, 30]                   = [[10, 20, 30], [20, 40, 60]]
 *   [[1, 2, 3], [4, 5, 6]] - 0.5 (a rank-0 scalar) = [[0.5, 1.5, 2.5], [3.5, 4.5, 5.5]]
 *   [10, 20, 30] / [[1, 2, 3], [4, 5, 6]]      = [[10, 10, 10], [2.5, 4, 5]]
 *   the scalar 3 * the scalar 0.5 (rank 0)     = 1.5 */
static void test_broadcast(void) {
  Graph *g = graph_create("bcast", "test.ffn");
  Node *a = ir_input(g, "a", SHAPE(2, 3), DT_F32, here);
  Node *v = ir_input(g, "v", SHAPE(3), DT_F32, here);
  Node *col = ir_input(g, "col", SHAPE(2, 1), DT_F32, here);
  Node *half = ir_scalar(g, 0.5, DT_F32, here), *three = ir_scalar(g, 3, DT_F32, here);
  graph_add_output(g, "add", op2(g, OP_ADD, DT_F32, a, v));
  graph_add_output(g, "mul", op2(g, OP_MUL, DT_F32, col, v));
  graph_add_output(g, "sub", op2(g, OP_SUB, DT_F32, a, half));
  graph_add_output(g, "div", op2(g, OP_DIV, DT_F32, v, a));
  graph_add_output(g, "scalars", op2(g, OP_MUL, DT_F32, three, half));
  verify(g);
  Store w = {0}, in = {0};
  put(&in, "a", DT_F32, DIMS(2, 3), VALS(1, 2, 3, 4, 5, 6));
  put(&in, "v", DT_F32, DIMS(3), VALS(10, 20, 30));
  put(&in, "col", DT_F32, DIMS(2, 1), VALS(1, 2));
  RefTensor out[5];
  char err[256];
  CHECK(run(g, &w, &in, out, err, sizeof err) == 0, "broadcast: %s", err);
  EXPECT("[2,3] + [3]", &out[0], 0, DIMS(2, 3), 11, 22, 33, 14, 25, 36);
  EXPECT("[2,1] * [3]", &out[1], 0, DIMS(2, 3), 10, 20, 30, 20, 40, 60);
  EXPECT("[2,3] - scalar", &out[2], 0, DIMS(2, 3), 0.5, 1.5, 2.5, 3.5, 4.5, 5.5);
  EXPECT("[3] / [2,3]", &out[3], 0, DIMS(2, 3), 10, 10, 10, 2.5, 4, 5);
  CHECK(out[4].rank == 0 && out[4].data && out[4].data[0] == 1.5f, "scalar * scalar");
  for (int i = 0; i < 5; i++)
    ref_free(&out[i]);
  store_free(&in);
  graph_destroy(g);
}

/* [[1, 2, 3], [4, 5, 6]] @ [[7, 8], [9, 10], [11, 12]]:
 *   row 0: [1*7 + 2*9 + 3*11, 1*8 + 2*10 + 3*12] = [58, 64]
 *   row 1: [4*7 + 5*9 + 6*11, 4*8 + 5*10 + 6*12] = [139, 154]
 * and the same with the weight stored [out, in] = [[7, 9, 11], [8, 10, 12]] used as w^T. */
static void test_matmul(void) {
  Graph *g = graph_create("mm", "test.ffn");
  Node *a = ir_input(g, "a", SHAPE(2, 3), DT_F32, here);
  Node *b = weight(g, "b", SHAPE(3, 2), DT_F32);
  Node *wt = weight(g, "w_out_in", SHAPE(2, 3), DT_F32);
  graph_add_output(g, "ab", op2(g, OP_MATMUL, DT_F32, a, b));
  graph_add_output(g, "awt", op2(g, OP_MATMUL, DT_F32, a, op1(g, OP_TRANSPOSE, DT_F32, wt)));
  verify(g);
  Store w = {0}, in = {0};
  put(&in, "a", DT_F32, DIMS(2, 3), VALS(1, 2, 3, 4, 5, 6));
  put(&w, "b", DT_F32, DIMS(3, 2), VALS(7, 8, 9, 10, 11, 12));
  put(&w, "w_out_in", DT_F32, DIMS(2, 3), VALS(7, 9, 11, 8, 10, 12));
  RefTensor out[2];
  char err[256];
  CHECK(run(g, &w, &in, out, err, sizeof err) == 0, "matmul: %s", err);
  EXPECT("a @ b", &out[0], 0, DIMS(2, 2), 58, 64, 139, 154);
  EXPECT("a @ w^T", &out[1], 0, DIMS(2, 2), 58, 64, 139, 154);
  for (int i = 0; i < 2; i++)
    ref_free(&out[i]);
  store_free(&w);
  store_free(&in);
  graph_destroy(g);
}

/* The blocked matrix product against a plain triple loop, with a dynamic T and sizes that
 * are not multiples of the blocks (157 rows, 600 columns), big enough (25M multiply-adds)
 * to be split over threads, and a rank-3 left operand. */
static void test_matmul_blocked(void) {
  enum { T = 157, K = 263, N = 600 };
  Graph *g = graph_create("mm2", "test.ffn");
  int t = graph_add_dim(g, "T", here);
  Shape xs = {2, {dim_dynamic(t), dim_static(K)}};
  Node *x = ir_input(g, "x", xs, DT_F32, here);
  Node *b = weight(g, "b", SHAPE(K, N), DT_F32);
  Node *x3 = ir_input(g, "x3", SHAPE(2, 3, K), DT_F32, here);
  graph_add_output(g, "y", op2(g, OP_MATMUL, DT_F32, x, b));
  graph_add_output(g, "y3", op2(g, OP_MATMUL, DT_F32, x3, b));
  verify(g);
  static double xv[T * K], bv[K * N], x3v[6 * K];
  uint32_t s = 12345;
  for (int i = 0; i < T * K; i++)
    xv[i] = (double)(float)((s = s * 1664525 + 1013904223) / 4294967296.0 - 0.5);
  for (int i = 0; i < K * N; i++)
    bv[i] = (i % 7 == 0) ? 0 : (double)(float)((s = s * 1664525 + 1013904223) / 4294967296.0 - 0.5);
  for (int i = 0; i < 6 * K; i++)
    x3v[i] = xv[i + 3 * K];
  Store w = {0}, in = {0};
  put(&in, "x", DT_F32, DIMS(T, K), xv);
  put(&in, "x3", DT_F32, DIMS(2, 3, K), x3v);
  put(&w, "b", DT_F32, DIMS(K, N), bv);
  RefTensor out[2];
  char err[256];
  CHECK(run(g, &w, &in, out, err, sizeof err) == 0, "blocked matmul: %s", err);
  CHECK(out[0].rank == 2 && out[0].shape[0] == T && out[0].shape[1] == N, "y shape");
  CHECK(out[1].rank == 3 && out[1].shape[0] == 2 && out[1].shape[1] == 3 && out[1].shape[2] == N, "y3 shape");
  int bad = 0;
  for (int r = 0; r < T; r++)
    for (int n = 0; n < N; n++) {
      double acc = 0;
      for (int k = 0; k < K; k++)
        acc += xv[r * K + k] * bv[k * N + n];
      bad += out[0].data[r * N + n] != (float)acc;
      if (r >= 3 && r < 9)
        bad += out[1].data[(r - 3) * N + n] != (float)acc;
    }
  CHECK(bad == 0, "blocked matmul: %d elements differ from the triple loop", bad);
  for (int i = 0; i < 2; i++)
    ref_free(&out[i]);
  store_free(&w);
  store_free(&in);
  graph_destroy(g);
}

/* chunk = slices of the last dim: x = [[1, 2, 3, 4], [5, 6, 7, 8]], two halves
 *   [[1, 2], [5, 6]] and [[3, 4], [7, 8]]; swiglu-style use: a * b = [[3, 8], [35, 48]]. */
static void test_slice(void) {
  Graph *g = graph_create("chunk", "test.ffn");
  Node *x = ir_input(g, "x", SHAPE(2, 4), DT_F32, here);
  Node *lo = with_ival(g, OP_SLICE, DT_F32, 0, 2, 1, (Node *[]){x});
  Node *hi = with_ival(g, OP_SLICE, DT_F32, 2, 2, 1, (Node *[]){x});
  graph_add_output(g, "lo", lo);
  graph_add_output(g, "hi", hi);
  graph_add_output(g, "prod", op2(g, OP_MUL, DT_F32, lo, hi));
  verify(g);
  Store w = {0}, in = {0};
  put(&in, "x", DT_F32, DIMS(2, 4), VALS(1, 2, 3, 4, 5, 6, 7, 8));
  RefTensor out[3];
  char err[256];
  CHECK(run(g, &w, &in, out, err, sizeof err) == 0, "slice: %s", err);
  EXPECT("chunk 0", &out[0], 0, DIMS(2, 2), 1, 2, 5, 6);
  EXPECT("chunk 1", &out[1], 0, DIMS(2, 2), 3, 4, 7, 8);
  EXPECT("chunk product", &out[2], 0, DIMS(2, 2), 3, 8, 35, 48);
  for (int i = 0; i < 3; i++)
    ref_free(&out[i]);
  store_free(&in);
  graph_destroy(g);
}

/* Load-time ops on weights w1 = [[1, 2], [3, 4]], w2 = [[5, 6], [7, 8]]:
 *   concat axis 0 -> [[1, 2], [3, 4], [5, 6], [7, 8]]; axis 1 -> [[1, 2, 5, 6], [3, 4, 7, 8]]
 *   interleave (w1, w2), S=2 blocks of N=2 rows (block s = operand s), G=1: row n of block s
 *     -> row 2n + s: [[1, 2], [5, 6], [3, 4], [7, 8]]
 *   same with G=2: (n/2)*4 + 2s + n%2 = 2s + n, plain stacking: [[1, 2], [3, 4], [5, 6], [7, 8]]
 *   interleave of the one operand [w1; w2] (stacked by concat), S=2, G=1: the blocks are
 *     again w1 and w2 -> [[1, 2], [5, 6], [3, 4], [7, 8]]
 *   interleave of w1 alone, S=2, G=1: blocks [1, 2] and [3, 4] of one row each -> unchanged
 *   rowsum w1 -> [3, 7]; transpose w1 -> [[1, 3], [2, 4]] */
static void test_load_time_ops(void) {
  Graph *g = graph_create("loadtime", "test.ffn");
  Node *w1 = weight(g, "w1", SHAPE(2, 2), DT_F32), *w2 = weight(g, "w2", SHAPE(2, 2), DT_F32);
  graph_add_output(g, "cat0", with_ival(g, OP_CONCAT, DT_F32, 0, 0, 2, (Node *[]){w1, w2}));
  graph_add_output(g, "cat1", with_ival(g, OP_CONCAT, DT_F32, 1, 0, 2, (Node *[]){w1, w2}));
  Node *stacked = with_ival(g, OP_CONCAT, DT_F32, 0, 0, 2, (Node *[]){w1, w2});
  graph_add_output(g, "il1", with_ival(g, OP_INTERLEAVE, DT_F32, 1, 2, 2, (Node *[]){w1, w2}));
  graph_add_output(g, "il2", with_ival(g, OP_INTERLEAVE, DT_F32, 2, 2, 2, (Node *[]){w1, w2}));
  graph_add_output(g, "il_one", with_ival(g, OP_INTERLEAVE, DT_F32, 1, 2, 1, (Node *[]){stacked}));
  graph_add_output(g, "il_w1", with_ival(g, OP_INTERLEAVE, DT_F32, 1, 2, 1, (Node *[]){w1}));
  graph_add_output(g, "rowsum", op1(g, OP_ROWSUM, DT_F32, w1));
  graph_add_output(g, "t", op1(g, OP_TRANSPOSE, DT_F32, w1));
  verify(g);
  Store w = {0}, in = {0};
  put(&w, "w1", DT_F32, DIMS(2, 2), VALS(1, 2, 3, 4));
  put(&w, "w2", DT_F32, DIMS(2, 2), VALS(5, 6, 7, 8));
  RefTensor out[8];
  char err[256];
  CHECK(run(g, &w, &in, out, err, sizeof err) == 0, "load-time ops: %s", err);
  EXPECT("concat 0", &out[0], 0, DIMS(4, 2), 1, 2, 3, 4, 5, 6, 7, 8);
  EXPECT("concat 1", &out[1], 0, DIMS(2, 4), 1, 2, 5, 6, 3, 4, 7, 8);
  EXPECT("interleave 1", &out[2], 0, DIMS(4, 2), 1, 2, 5, 6, 3, 4, 7, 8);
  EXPECT("interleave 2", &out[3], 0, DIMS(4, 2), 1, 2, 3, 4, 5, 6, 7, 8);
  EXPECT("interleave stacked", &out[4], 0, DIMS(4, 2), 1, 2, 5, 6, 3, 4, 7, 8);
  EXPECT("interleave w1", &out[5], 0, DIMS(2, 2), 1, 2, 3, 4);
  EXPECT("rowsum", &out[6], 0, DIMS(2), 3, 7);
  EXPECT("transpose", &out[7], 0, DIMS(2, 2), 1, 3, 2, 4);
  for (int i = 0; i < 8; i++)
    ref_free(&out[i]);
  store_free(&w);
  graph_destroy(g);
}

/* Rounding of results to the node's type. bf16 keeps 8 significant bits, so next to 1
 * the spacing is 2^-7:
 *   1 + 2^-9      (a quarter step)     -> 1
 *   1 + 3 * 2^-9  (three quarters)     -> 1 + 2^-7 = 1.0078125
 *   1 + 2^-8      (exactly halfway)    -> 1 (even)
 *   1 + 3 * 2^-8  (halfway, odd below) -> 1 + 2^-6 = 1.015625
 * A bf16 input holds only bf16 values: 1.00390625 (1 + 2^-8) read through a bf16 tensor is
 * stored by the test as 1 (dtype_store rounds), and cast to f16 keeps 1; cast of 1 + 2^-9
 * to f16 (spacing 2^-10) keeps it exactly: 1.001953125. f8e4m3 cast of 300 -> 288 (step
 * 32 in [256, 512): 288 vs 320, 300 is nearer 288), and of 1000 saturates to 448. */
static void test_rounding(void) {
  Graph *g = graph_create("round", "test.ffn");
  Node *one = ir_input(g, "one", SHAPE(4), DT_F32, here);
  Node *d = ir_input(g, "d", SHAPE(4), DT_F32, here);
  graph_add_output(g, "sum_bf16", op2(g, OP_ADD, DT_BF16, one, d));
  Node *x = ir_input(g, "x", SHAPE(2), DT_F32, here);
  graph_add_output(g, "cast_f16", op1(g, OP_CAST, DT_F16, x));
  graph_add_output(g, "cast_e4m3", op1(g, OP_CAST, DT_F8E4M3, x));
  Node *xb = ir_input(g, "xb", SHAPE(1), DT_BF16, here);
  graph_add_output(g, "bf16_in", op1(g, OP_CAST, DT_F32, xb));
  /* a transpose into another type rounds too (data movement, not just copying) */
  Node *m = ir_input(g, "m", SHAPE(1, 2), DT_F32, here);
  graph_add_output(g, "t_bf16", op1(g, OP_TRANSPOSE, DT_BF16, m));
  verify(g);
  Store w = {0}, in = {0};
  put(&in, "one", DT_F32, DIMS(4), VALS(1, 1, 1, 1));
  put(&in, "d", DT_F32, DIMS(4), VALS(0x1p-9, 3 * 0x1p-9, 0x1p-8, 3 * 0x1p-8));
  put(&in, "x", DT_F32, DIMS(2), VALS(300, 1000));
  put(&in, "xb", DT_BF16, DIMS(1), VALS(1 + 0x1p-8));
  put(&in, "m", DT_F32, DIMS(1, 2), VALS(1 + 0x1p-9, 1 + 3 * 0x1p-9));
  RefTensor out[5];
  char err[256];
  CHECK(run(g, &w, &in, out, err, sizeof err) == 0, "rounding: %s", err);
  EXPECT("bf16 add", &out[0], 0, DIMS(4), 1, 1.0078125, 1, 1.015625);
  EXPECT("cast f16", &out[1], 0, DIMS(2), 300, 1000);
  EXPECT("cast e4m3", &out[2], 0, DIMS(2), 288, 448);
  EXPECT("bf16 input", &out[3], 0, DIMS(1), 1);
  EXPECT("transpose to bf16", &out[4], 0, DIMS(2, 1), 1, 1.0078125);
  for (int i = 0; i < 5; i++)
    ref_free(&out[i]);
  store_free(&in);
  graph_destroy(g);
}

/* A small residual FFN as the front end builds it, with dead code and one value named by
 * two outputs: y = x + (silu(h @ wg^T) * (h @ wu^T)) @ wd^T, h = rmsnorm(x, g, 1e-5), in
 * bf16, against the same computation done here directly (one rounding per op). */
static void test_ffn_block(void) {
  enum { T = 3, D = 8, F = 12 };
  Graph *g = graph_create("ffn", "test.ffn");
  int t = graph_add_dim(g, "T", here);
  Shape xs = {2, {dim_dynamic(t), dim_static(D)}};
  Node *x = ir_input(g, "x", xs, DT_BF16, here);
  Node *gn = weight(g, "g", SHAPE(D), DT_BF16);
  Node *wg = weight(g, "wg", SHAPE(F, D), DT_BF16), *wu = weight(g, "wu", SHAPE(F, D), DT_BF16);
  Node *wd = weight(g, "wd", SHAPE(D, F), DT_BF16);
  Node *h = norm(g, OP_RMSNORM, DT_BF16, 1e-5, 2, (Node *[]){x, gn});
  Node *gate = op1(g, OP_SILU, DT_BF16, op2(g, OP_MATMUL, DT_BF16, h, op1(g, OP_TRANSPOSE, DT_BF16, wg)));
  Node *up = op2(g, OP_MATMUL, DT_BF16, h, op1(g, OP_TRANSPOSE, DT_BF16, wu));
  Node *act = op2(g, OP_MUL, DT_BF16, gate, up);
  op1(g, OP_TANH, DT_BF16, act); /* unused: never evaluated */
  Node *down = op2(g, OP_MATMUL, DT_BF16, act, op1(g, OP_TRANSPOSE, DT_BF16, wd));
  Node *y = op2(g, OP_ADD, DT_BF16, x, down);
  graph_add_output(g, "y", y);
  graph_add_output(g, "y_again", y);
  verify(g);
  double xv[T * D], gv[D], wgv[F * D], wuv[F * D], wdv[D * F];
  for (int i = 0; i < T * D; i++)
    xv[i] = round_to_dtype(sin(i * 0.7) * 2, DT_BF16);
  for (int i = 0; i < D; i++)
    gv[i] = round_to_dtype(1 + 0.1 * i, DT_BF16);
  for (int i = 0; i < F * D; i++) {
    wgv[i] = round_to_dtype(cos(i * 0.31) * 0.4, DT_BF16);
    wuv[i] = round_to_dtype(sin(i * 0.17 + 1) * 0.4, DT_BF16);
    wdv[i] = round_to_dtype(cos(i * 0.23 + 2) * 0.3, DT_BF16);
  }
  Store w = {0}, in = {0};
  put(&in, "x", DT_BF16, DIMS(T, D), xv);
  put(&w, "g", DT_BF16, DIMS(D), gv);
  put(&w, "wg", DT_BF16, DIMS(F, D), wgv);
  put(&w, "wu", DT_BF16, DIMS(F, D), wuv);
  put(&w, "wd", DT_BF16, DIMS(D, F), wdv);
  RefTensor out[2];
  char err[256];
  CHECK(run(g, &w, &in, out, err, sizeof err) == 0, "ffn: %s", err);
  int bad = 0;
  for (int r = 0; r < T; r++) {
    double hv[D], av[F], ss = 0;
    for (int i = 0; i < D; i++)
      ss += xv[r * D + i] * xv[r * D + i];
    for (int i = 0; i < D; i++)
      hv[i] = round_to_dtype(xv[r * D + i] / sqrt(ss / D + 1e-5) * gv[i], DT_BF16);
    for (int f = 0; f < F; f++) {
      double a = 0, u = 0;
      for (int i = 0; i < D; i++)
        a += hv[i] * wgv[f * D + i], u += hv[i] * wuv[f * D + i];
      a = round_to_dtype(a, DT_BF16);
      a = round_to_dtype(a / (1 + exp(-a)), DT_BF16);
      av[f] = round_to_dtype(a * round_to_dtype(u, DT_BF16), DT_BF16);
    }
    for (int i = 0; i < D; i++) {
      double dn = 0;
      for (int f = 0; f < F; f++)
        dn += av[f] * wdv[i * F + f];
      double want = round_to_dtype(xv[r * D + i] + round_to_dtype(dn, DT_BF16), DT_BF16);
      bad += out[0].data[r * D + i] != (float)want || out[1].data[r * D + i] != (float)want;
    }
  }
  CHECK(bad == 0, "ffn block: %d elements differ from the direct computation", bad);
  CHECK(out[0].data != out[1].data, "two outputs share one buffer");
  for (int i = 0; i < 2; i++)
    ref_free(&out[i]);
  store_free(&w);
  store_free(&in);
  graph_destroy(g);
}

int main(void) {
  test_norms();
  test_unary();
  test_broadcast();
  test_matmul();
  test_matmul_blocked();
  test_slice();
  test_load_time_ops();
  test_rounding();
  test_ffn_block();
  return finish("interp_ops_test");
}
