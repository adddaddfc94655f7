/* ewise_ops_model.c: writes a model that applies every elementwise op of ir/ops.def on its
 * own, so that adding an op to the table adds it to the GPU comparison (gpu_ewise_ops_*).
 *
 *   ewise_ops_model f32|bf16 OUT.ffn
 *
 * Each op gets an output `o_<math> = op(x..) + op(w..)`: on inputs (computed in a generated
 * kernel, in f32) and on weights (computed at load time by prep.cuh, in double). Binary ops
 * take a second operand kept away from zero (square(y) + 0.5) so that div is well
 * conditioned. The program compiles the model with the front end and fails if an elementwise
 * op of the table is missing from it: an op the language spells neither as a builtin `f(x)`
 * (ops.def: BUILTIN) nor as one of the forms in spell() below needs a spelling here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

#define IS_BUILTIN 1
#define IS_NONE 0
static const bool builtin[OP_COUNT] = {
#define UNARY_OP(e, math, dsl) [OP_##e] = IS_##dsl,
#include "ir/ops.def"
#undef UNARY_OP
};

/* The expression applying op to a (and b), in the language; false if it has no spelling. */
static bool spell(Op op, const char *a, const char *b, const char *type, const char *other, char *buf, size_t len) {
  const char *name = op_info[op].name;
  if (builtin[op])
    return snprintf(buf, len, "%s(%s)", name, a), true;
  switch (op) { /* the operators, and builtins with rules of their own */
  case OP_NEG: return snprintf(buf, len, "(-%s)", a), true;
  case OP_CAST: return snprintf(buf, len, "cast(cast(%s, %s), %s)", a, other, type), true;
  case OP_ADD: return snprintf(buf, len, "(%s + %s)", a, b), true;
  case OP_SUB: return snprintf(buf, len, "(%s - %s)", a, b), true;
  case OP_MUL: return snprintf(buf, len, "(%s * %s)", a, b), true;
  case OP_DIV: return snprintf(buf, len, "(%s / %s)", a, b), true;
  default: return false;
  }
}

/* the derivative ops (`silu_grad`) have no spelling: only backward graphs (passes/grad.c) hold them */
static bool is_elementwise(int op) {
  const char *name = op_info[op].name;
  size_t n = strlen(name);
  bool derivative = n > 5 && strcmp(name + n - 5, "_grad") == 0;
  return (op_info[op].cls == OPC_UNARY || op_info[op].cls == OPC_BINARY) && !derivative;
}

/* Appends the model's text to buf; returns false if an op has no spelling. */
static bool write_model(const char *type, char *buf, size_t len) {
  const char *other = strcmp(type, "f32") == 0 ? "bf16" : "f16"; /* for cast: a narrower type */
  size_t n = (size_t)snprintf(buf, len,
                              "# written by tests/gpu/ewise_ops_model.c from ir/ops.def\n"
                              "model ewise_ops_%s\ndim T\ndim D = 300\n"
                              "input x : [T, D] %s\ninput y : [T, D] %s\n"
                              "weight w : [D] %s = \"w\"\nweight v : [D] %s = \"v\"\n"
                              "yp = square(y) + 0.5\nvp = square(v) + 0.5\n",
                              type, type, type, type, type);
  for (int op = 0; op < OP_COUNT; op++) {
    if (!is_elementwise(op))
      continue;
    char on_inputs[256], on_weights[256];
    if (!spell((Op)op, "x", "yp", type, other, on_inputs, sizeof on_inputs) ||
        !spell((Op)op, "w", "vp", type, other, on_weights, sizeof on_weights)) {
      fprintf(stderr, "FAIL: elementwise op %s has no spelling in the language; add one to spell() in %s\n",
              op_info[op].name, __FILE__);
      return false;
    }
    n += (size_t)snprintf(buf + n, len - n, "o_%s = %s + %s\noutput o_%s\n", op_info[op].name, on_inputs, on_weights,
                          op_info[op].name);
  }
  return n < len;
}

int main(int argc, char **argv) {
  if (argc != 3 || (strcmp(argv[1], "f32") != 0 && strcmp(argv[1], "bf16") != 0)) {
    fprintf(stderr, "usage: ewise_ops_model f32|bf16 OUT.ffn\n");
    return 2;
  }
  static char text[1 << 16];
  if (!write_model(argv[1], text, sizeof text))
    return 1;
  Diags d;
  diags_init(&d);
  Graph *g = frontend_compile_string(text, strlen(text), argv[2], NULL, &d);
  if (!g) {
    fprintf(stderr, "FAIL: the generated model does not compile:\n%s\n%s", d.text, text);
    return 1;
  }
  bool seen[OP_COUNT] = {0};
  for (int i = 0; i < g->nodes.len; i++)
    seen[GRAPH_NODE(g, i)->op] = true;
  int missing = 0, covered = 0;
  for (int op = 0; op < OP_COUNT; op++) {
    if (!is_elementwise(op))
      continue;
    if (!seen[op]) {
      fprintf(stderr, "FAIL: %s does not appear in the front end's graph of the generated model\n", op_info[op].name);
      missing++;
    }
    covered++;
  }
  graph_destroy(g);
  diags_free(&d);
  FILE *f = fopen(argv[2], "w");
  if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
    fprintf(stderr, "FAIL: cannot write %s\n", argv[2]);
    return 1;
  }
  printf("%s: %d elementwise ops, %d missing\n", argv[2], covered, missing);
  return missing ? 1 : 0;
}
