/* interp_errors_test.c: every way the interpreter refuses to run names the tensor in one
 * line, and leaves no outputs behind. */
#include "util.h"
#include "ir/dims.h"

/* y = x @ w^T + 0 with x : [T, 4] bf16 and w : [3, 4] bf16 (named `wname`). */
static Graph *model(const char *wname) {
  Graph *g = graph_create("err", "test.ffn");
  int t = graph_add_dim(g, "T", here);
  Shape xs = {2, {dim_dynamic(t), dim_static(4)}};
  Node *x = ir_input(g, "x", xs, DT_BF16, here);
  Node *w = weight(g, wname, SHAPE(3, 4), DT_BF16);
  graph_add_output(g, "y", op2(g, OP_MATMUL, DT_BF16, x, op1(g, OP_TRANSPOSE, DT_BF16, w)));
  verify(g);
  return g;
}

static const double zeros[64];

static void expect_error(const char *what, const Graph *g, Store *w, Store *in, const char *want) {
  RefTensor out[2];
  memset(out, 0xff, sizeof out); /* garbage: must be cleared */
  char err[512] = "";
  int rc = run(g, w, in, out, err, sizeof err);
  CHECK(rc == -1, "%s: ran, expected the error \"%s\"", what, want);
  CHECK(strcmp(err, want) == 0, "%s:\n  got      \"%s\"\n  expected \"%s\"", what, err, want);
  CHECK(strchr(err, '\n') == NULL, "%s: message is more than one line", what);
  for (int i = 0; i < g->noutputs; i++)
    CHECK(out[i].data == NULL, "%s: output %d left allocated", what, i);
}

static void test_weights(void) {
  Graph *g = model("lm.w");
  Store w = {0}, in = {0};
  put(&in, "x", DT_BF16, DIMS(2, 4), zeros);
  expect_error("missing weight", g, &w, &in, "missing weight 'lm.w'");
  put(&w, "lm.w", DT_BF16, DIMS(4, 3), zeros);
  expect_error("transposed weight", g, &w, &in, "weight 'lm.w': expected shape [3, 4] bf16, got [4, 3] bf16");
  store_free(&w);
  put(&w, "lm.w", DT_F32, DIMS(3, 4), zeros);
  expect_error("weight dtype", g, &w, &in, "weight 'lm.w': expected shape [3, 4] bf16, got [3, 4] f32");
  store_free(&w);
  put(&w, "lm.w", DT_BF16, DIMS(3, 4, 1), zeros);
  expect_error("weight rank", g, &w, &in, "weight 'lm.w': expected shape [3, 4] bf16, got [3, 4, 1] bf16");
  store_free(&w);
  put(&w, "lm.w", DT_BF16, DIMS(3, 4), zeros);
  w.e[0].t.nbytes -= 2;
  expect_error("short weight data", g, &w, &in, "weight 'lm.w': [3, 4] bf16 needs 24 bytes, got 22");
  w.e[0].t.nbytes += 2;
  /* and with everything right it runs */
  RefTensor y;
  char err[256];
  CHECK(run(g, &w, &in, &y, err, sizeof err) == 0, "good weights: %s", err);
  ref_free(&y);
  store_free(&w);
  store_free(&in);
  graph_destroy(g);

  /* the message names the checkpoint tensor, whatever the DSL variable */
  g = graph_create("err", "test.ffn");
  Node *x = ir_input(g, "x", SHAPE(2, 4096), DT_BF16, here);
  Node *up = weight(g, "model.layers.0.mlp.up_proj.weight", SHAPE(14336, 4096), DT_BF16);
  graph_add_output(g, "y", op2(g, OP_MATMUL, DT_BF16, x, op1(g, OP_TRANSPOSE, DT_BF16, up)));
  verify(g);
  RawTensor t = {DT_BF16, 2, {4096, 14336}, NULL, 0};
  CHECK(interp_check_weight(g, up, &t, err, sizeof err) == -1 &&
            strcmp(err, "weight 'model.layers.0.mlp.up_proj.weight': expected shape [14336, 4096] bf16, got "
                        "[4096, 14336] bf16") == 0,
        "interp_check_weight: %s", err);
  CHECK(interp_check_weight(g, up, NULL, err, sizeof err) == -1 &&
            strcmp(err, "missing weight 'model.layers.0.mlp.up_proj.weight'") == 0,
        "interp_check_weight(NULL): %s", err);
  graph_destroy(g);
}

static void test_inputs(void) {
  Graph *g = model("w");
  Store w = {0}, in = {0};
  put(&w, "w", DT_BF16, DIMS(3, 4), zeros);
  expect_error("missing input", g, &w, &in, "missing input 'x'");
  put(&in, "x", DT_F32, DIMS(2, 4), zeros);
  expect_error("input dtype", g, &w, &in, "input 'x': expected [T, 4] bf16, got [2, 4] f32");
  store_free(&in);
  put(&in, "x", DT_BF16, DIMS(2, 5), zeros);
  expect_error("input static dim", g, &w, &in, "input 'x': dim 1: expected 4, got 5 (declared [T, 4], got [2, 5])");
  store_free(&in);
  put(&in, "x", DT_BF16, DIMS(8), zeros);
  expect_error("input rank", g, &w, &in, "input 'x': expected rank 2 [T, 4], got rank 1 [8]");
  store_free(&in);
  store_free(&w);
  graph_destroy(g);

  /* the example of the brief: [T, 4096] given [7, 4095] */
  g = graph_create("err", "test.ffn");
  int t = graph_add_dim(g, "T", here);
  Shape xs = {2, {dim_dynamic(t), dim_static(4096)}};
  graph_add_output(g, "y", op1(g, OP_RELU, DT_BF16, ir_input(g, "x", xs, DT_BF16, here)));
  verify(g);
  RawTensor raw = {DT_BF16, 2, {7, 4095}, zeros, 2 * 7 * 4095};
  Store big = {{{"x", raw}}, 1};
  /* the message names the dim and both sizes, and still shows both shapes */
  expect_error("input dim", g, &w, &big,
               "input 'x': dim 1: expected 4096, got 4095 (declared [T, 4096], got [7, 4095])");
  graph_destroy(g);
}

/* The runtime (api.c, exec.c) words its shape errors with dims_mismatch_str; these need no GPU. */
static void expect_dims(const char *what, int rank, const int64_t *size, int64_t *bound, bool bind, const char *want) {
  static const char *const names[] = {"T", "D"};
  Dim decl[2] = {dim_dynamic(0), dim_static(128)};
  char msg[600];
  int axis;
  DimsResult r = dims_bind(decl, 2, rank, size, bound, bind, &axis);
  CHECK(r != DIMS_OK, "%s: bound, expected \"%s\"", what, want);
  dims_mismatch_str(r, axis, decl, 2, names, rank, size, bound, msg, sizeof msg);
  CHECK(strcmp(msg, want) == 0, "%s:\n  got      \"%s\"\n  expected \"%s\"", what, msg, want);
}

static void test_dims_messages(void) {
  int64_t bound[2] = {-1, -1};
  expect_dims("static", 2, (int64_t[]){64, 256}, bound, true,
              "dim 1: expected 128, got 256 (declared [T, 128], got [64, 256])");
  expect_dims("rank", 3, (int64_t[]){1, 2, 3}, bound, true, "expected rank 2 [T, 128], got rank 3 [1, 2, 3]");
  expect_dims("negative", 2, (int64_t[]){-4, 128}, bound, true, "dim T (axis 0): negative size -4 (got [-4, 128])");
  expect_dims("limit", 2, (int64_t[]){1ll << 40, 128}, bound, true,
              "dim T (axis 0): 1099511627776 is above the limit of 2147483647 (kernels index with 32-bit int)");
  expect_dims("unbound", 2, (int64_t[]){9, 128}, bound, false,
              "dim T (axis 0): not bound by any input (declared [T, 128])");
  bound[0] = 7;
  expect_dims("conflict", 2, (int64_t[]){9, 128}, bound, true,
              "dim T (axis 0): 9 here but 7 in an earlier tensor (declared [T, 128], got [9, 128])");
}

/* Two inputs share the dynamic dim T: y (declared first) binds it, x disagrees. */
static void test_dims(void) {
  Graph *g = graph_create("dims", "test.ffn");
  int t = graph_add_dim(g, "T", here);
  Shape s = {2, {dim_dynamic(t), dim_static(2)}};
  Node *y = ir_input(g, "y", s, DT_F32, here);
  Node *x = ir_input(g, "x", s, DT_F32, here);
  graph_add_output(g, "sum", op2(g, OP_ADD, DT_F32, x, y));
  verify(g);
  Store w = {0}, in = {0};
  put(&in, "y", DT_F32, DIMS(9, 2), zeros);
  put(&in, "x", DT_F32, DIMS(7, 2), zeros);
  expect_error("inconsistent T", g, &w, &in, "input 'x': dim T is 7 here but 9 in input 'y'");
  store_free(&in);

  /* consistent: interp_bind_dims reports the size */
  put(&in, "y", DT_F32, DIMS(9, 2), zeros);
  put(&in, "x", DT_F32, DIMS(9, 2), zeros);
  InterpSources src = {lookup, &w, lookup, &in};
  int64_t dims[1] = {0};
  char err[256];
  CHECK(interp_bind_dims(g, &src, dims, err, sizeof err) == 0 && dims[0] == 9, "bind T: %s", err);
  store_free(&in);

  /* T = 0 tokens is a valid, empty run */
  put(&in, "y", DT_F32, DIMS(0, 2), zeros);
  put(&in, "x", DT_F32, DIMS(0, 2), zeros);
  RefTensor out;
  CHECK(run(g, &w, &in, &out, err, sizeof err) == 0 && out.rank == 2 && out.shape[0] == 0, "T = 0: %s", err);
  ref_free(&out);
  store_free(&in);
  graph_destroy(g);
}

/* Issue 11: y = x @ w^T with x : [T, S] given [2^59, 0] and w : [4, S] given [4, 0] (both
 * zero bytes, so the safetensors sizes agree) once overflowed the output's size and wrote
 * past a 1-byte buffer. Every bound size is now checked against size_limits.h. */
static void test_hostile_sizes(void) {
  Graph *g = graph_create("big", "test.ffn");
  int t = graph_add_dim(g, "T", here), sd = graph_add_dim(g, "S", here);
  Shape xs = {2, {dim_dynamic(t), dim_dynamic(sd)}};
  Node *x = ir_input(g, "x", xs, DT_F32, here);
  Node *w = ir_input(g, "w", (Shape){2, {dim_static(4), dim_dynamic(sd)}}, DT_F32, here);
  graph_add_output(g, "y", op2(g, OP_MATMUL, DT_F32, x, op1(g, OP_TRANSPOSE, DT_F32, w)));
  verify(g);
  Store ws = {0};
  RawTensor rx = {DT_F32, 2, {(int64_t)1 << 59, 0}, zeros, 0}, rw = {DT_F32, 2, {4, 0}, zeros, 0};
  Store in = {{{"x", rx}, {"w", rw}}, 2};
  expect_error("dim above the limit", g, &ws, &in,
               "input 'x': dim 0 is 576460752303423488, above the limit of 2147483647 (kernels index with 32-bit int)");
  /* each dim within the limit, the rows of y above it: [2^31 - 1, 0] @ [0, 4] -> [2^31 - 1, 4] is fine,
   * but a rank-3 x whose leading dims multiply past 2^31 is not */
  graph_destroy(g);
  g = graph_create("big3", "test.ffn");
  t = graph_add_dim(g, "T", here);
  Shape x3 = {3, {dim_dynamic(t), dim_dynamic(t), dim_static(2)}};
  graph_add_output(g, "y", op1(g, OP_RELU, DT_F32, ir_input(g, "x", x3, DT_F32, here)));
  verify(g);
  RawTensor r3 = {DT_F32, 3, {1 << 20, 1 << 20, 2}, zeros, 0};
  Store in3 = {{{"x", r3}}, 1};
  expect_error("rows above the limit", g, &ws, &in3,
               "input 'x': shape [1048576, 1048576, 2] is too large: its rows (all dims but the last) number more "
               "than 2147483647, the limit of a matrix product's M");
  graph_destroy(g);
}

static void test_invalid_graph(void) {
  Graph *g = graph_create("bad", "test.ffn");
  Node *x = ir_input(g, "x", SHAPE(2, 3), DT_F32, here);
  Node *bad = ir_node(g, OP_MATMUL, DT_F32, SHAPE(2, 3), (Node *[]){x, x}, 2, here); /* 3 != 2 */
  graph_add_output(g, "y", bad);
  Store w = {0}, in = {0};
  RefTensor out;
  char err[512];
  CHECK(run(g, &w, &in, &out, err, sizeof err) == -1 && strncmp(err, "invalid graph: ", 15) == 0,
        "invalid graph: %s", err);
  graph_destroy(g);
}

int main(void) {
  test_weights();
  test_inputs();
  test_dims();
  test_dims_messages();
  test_hostile_sizes();
  test_invalid_graph();
  return finish("interp_errors_test");
}
