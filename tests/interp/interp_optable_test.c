/* interp_optable_test.c: every elementwise op of ir/ops.def, in the reference interpreter,
 * against a direct call of its shared scalar function (kernels/opmath.cuh).
 *
 * Each op is applied on its own to an f32 input (and a second operand for binary ops, once
 * of the same shape and once broadcast from [N]); every result must equal op_<math>() of the
 * same operands in double, rounded to the node's type. This proves that the table's row
 * reaches the interpreter with the right function; the GPU side is gpu_ewise_ops.
 */
#include "interp/util.h"

#define OPMATH_FLOAT 0
#include "kernels/opmath.cuh"

typedef struct {
  Op op;
  const char *math;
  double (*unary)(double);
  double (*binary)(double, double);
} Row;

static const Row rows[] = {
#define UNARY_OP(e, math, dsl) {OP_##e, #math, op_##math, NULL},
#define BINARY_OP(e, math, dsl) {OP_##e, #math, NULL, op_##math},
#include "ir/ops.def"
#undef UNARY_OP
#undef BINARY_OP
};
#define NROWS (int)(sizeof rows / sizeof rows[0])

enum { M = 3, N = 5 };
/* operand values: both signs, small and large, inside and outside the activations' knees */
static const double xs[M * N] = {-7.5, -2.25, -1, -0.375, -0.0625, 0.03125, 0.5, 1, 1.75, 3,
                                 6.25, -4, 0.125, 2.5, -0.75};
static const double ys[M * N] = {1.5, -0.5, 2, 0.25, -3, 4, -1.25, 0.0625, 7, -2, 0.75, 1.125, -6, 3.5, 0.375};

/* The type a row's result is computed in: a cast must round to something narrower to show. */
static DType result_type(Op op) { return op == OP_CAST ? DT_BF16 : DT_F32; }

static void check_row(const Row *r, bool broadcast) {
  Graph *g = graph_create("optable", "test.ffn");
  Node *x = ir_input(g, "x", SHAPE(M, N), DT_F32, here);
  Node *y = broadcast ? weight(g, "y", SHAPE(N), DT_F32) : ir_input(g, "y", SHAPE(M, N), DT_F32, here);
  DType t = result_type(r->op);
  Node *n = r->unary ? op1(g, r->op, t, x) : op2(g, r->op, t, x, y);
  graph_add_output(g, "out", n);
  verify(g);
  Store in = {0}, w = {0};
  put(&in, "x", DT_F32, DIMS(M, N), xs);
  if (broadcast)
    put(&w, "y", DT_F32, DIMS(N), ys);
  else
    put(&in, "y", DT_F32, DIMS(M, N), ys);
  RefTensor out[1] = {0};
  char err[256];
  if (run(g, &w, &in, out, err, sizeof err) != 0) {
    CHECK(false, "%s: %s", r->math, err);
  } else {
    for (int i = 0; i < M * N; i++) {
      double a = (float)xs[i], b = (float)ys[broadcast ? i % N : i];
      double want = round_to_dtype(r->unary ? r->unary(a) : r->binary(a, b), t);
      CHECK(out[0].data[i] == (float)want || (isnan(want) && isnan(out[0].data[i])),
            "%s%s: x=%g y=%g -> %.9g, op_%s gives %.9g", r->math, broadcast ? " broadcast" : "", a, b,
            (double)out[0].data[i], r->math, want);
    }
  }
  ref_free(&out[0]);
  store_free(&in);
  store_free(&w);
  graph_destroy(g);
}

int main(void) {
  int elementwise = 0;
  for (int op = 0; op < OP_COUNT; op++)
    elementwise += op_info[op].cls == OPC_UNARY || op_info[op].cls == OPC_BINARY;
  CHECK(elementwise == NROWS, "%d elementwise ops in op_info, %d rows here", elementwise, NROWS);
  for (int i = 0; i < NROWS; i++) {
    const Row *r = &rows[i];
    CHECK(strcmp(op_info[r->op].name, r->math) == 0, "%s: text name %s", r->math, op_info[r->op].name);
    CHECK(op_info[r->op].cls == (r->unary ? OPC_UNARY : OPC_BINARY), "%s: class", r->math);
    check_row(r, false);
    if (r->binary)
      check_row(r, true);
  }
  /* the shared functions are the functions they name (a few identities, not their values) */
  CHECK(op_relu(-2) == 0 && op_relu(2) == 2 && op_neg(3) == -3 && op_square(-3) == 9, "relu, neg, square");
  CHECK(op_sigmoid(0) == 0.5 && op_silu(0) == 0 && op_gelu(0) == 0 && op_gelu_tanh(0) == 0, "activations at 0");
  CHECK(fabs(op_silu(4) - 4 * op_sigmoid(4)) < 1e-15 && fabs(op_tanh(1) + op_tanh(-1)) < 1e-15, "silu, tanh");
  CHECK(fabs(op_gelu(30) - 30) < 1e-12 && fabs(op_gelu_tanh(-30)) < 1e-12, "gelu tails");
  return finish("interp_optable_test");
}
