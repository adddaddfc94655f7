/* precision.c: element types of values inside kernels, and what the target can honour.
 *
 * A value computed and consumed inside one kernel never reaches memory, so it is kept in f32
 * (an explicit cast still rounds: it keeps its type). Values written to memory keep the type
 * the precision policy gave them. A policy the target or this code generator cannot honour
 * is an error that points at the precision statement, never a silent fallback.
 */
#include "passes.h"

static int refuse(Compile *c, PrecClass cls, const char *fmt, const char *a, const char *b) {
  Graph *g = c->g;
  char msg[256];
  snprintf(msg, sizeof msg, fmt, a, b);
  if (g->prec.loc[cls].line)
    diag_error(c->diags, c->src, g->prec.loc[cls], "%s", msg);
  else
    diag_plain(c->diags, "--precision %s=%s: %s", prec_class_names[cls], dtype_name(g->prec.type[cls]), msg);
  return -1;
}

static int check_policy(Compile *c) {
  Graph *g = c->g;
  DType mm = g->prec.type[PREC_MATMUL], w = g->prec.type[PREC_WEIGHTS];
  char arch[16];
  snprintf(arch, sizeof arch, "sm_%d", c->arch);
  if (dtype_is_f8(mm) && c->arch < 89)
    return refuse(c, PREC_MATMUL, "fp8 matrix products need sm_89 or newer; the target is %s%s", arch, "");
  /* weight-only i8 / i4 run in gemm_wq.cuh, which multiplies by the reference's levels exactly
   * and applies the f32 scales per group of k (whole 32-k blocks), and does not round the
   * dequantized weights to a `precision matmul` type as the reference would */
  if (w != DT_NONE && w != DT_I8 && w != DT_I4)
    return refuse(c, PREC_WEIGHTS, "%s weight-only quantization is not supported by the GPU code generator yet%s",
                  dtype_name(w), "");
  if (w == DT_I4 && g->prec.group % 32 != 0) {
    char group[32];
    snprintf(group, sizeof group, "%d", g->prec.group);
    return refuse(c, PREC_WEIGHTS, "i4 groups of %s are not supported by the GPU code generator (0 or a multiple of "
                  "32%s)", group, ")");
  }
  if (w != DT_NONE && mm != DT_NONE)
    return refuse(c, PREC_MATMUL, "`precision matmul %s` together with `precision weights` is not supported by the GPU "
                  "code generator yet%s", dtype_name(mm), "");
  return 0;
}

/* fp8 products (kernels/fp8.cuh): A is quantized row by row when the product runs, so it may be
 * any float type the quantizer reads; B is quantized once at load time, so it must be constant;
 * both are moved as 16-byte rows of codes. */
static int check_f8_gemm(Compile *c, Group *gr) {
  DType a = gr->a->dtype, mm = c->g->prec.type[PREC_MATMUL];
  int64_t K = gr->a->shape.d[gr->a->shape.rank - 1].size;
  const char *why = NULL;
  if (a != DT_F32 && a != DT_F16 && a != DT_BF16)
    why = "its activations must be f32, f16 or bf16";
  else if (!ir_is_const(gr->mm->args[1]))
    why = "its right operand must be a weight (or computed from weights): it is quantized once, at load time";
  else if (K % 16 != 0)
    why = "the shared dimension must be a multiple of 16";
  if (!why)
    return 0;
  diag_error(c->diags, c->src, gr->mm->loc, "this %s matrix product cannot run on the GPU: %s (K = %lld)",
             dtype_name(mm), why, (long long)K);
  return -1;
}

static int check_gemm(Compile *c, Group *gr) {
  Graph *g = c->g;
  DType a = gr->a->dtype, b = (gr->b_nk ? gr->b_nk : gr->b_kn)->dtype, mm = g->prec.type[PREC_MATMUL];
  if (dtype_is_f8(mm))
    return check_f8_gemm(c, gr);
  if (mm != DT_NONE && (mm != a || mm != b))
    return refuse(c, PREC_MATMUL, "converting %s operands to `precision matmul %s` is not supported by the GPU code "
                  "generator yet", dtype_name(a), dtype_name(mm));
  if (a != b || (a != DT_F32 && a != DT_F16 && a != DT_BF16)) {
    diag_error(c->diags, c->src, gr->mm->loc, "matrix products of %s and %s are not supported by the GPU code generator yet",
               dtype_name(a), dtype_name(b));
    return -1;
  }
  return 0;
}

int pass_precision(Compile *c) {
  Graph *g = c->g;
  if (check_policy(c) != 0)
    return -1;
  for (int i = 0; i < g->nodes.len; i++) {
    Node *n = GRAPH_NODE(g, i);
    if (n->group < 0 && !ir_is_const(n) && (dtype_is_f8(n->dtype) || !dtype_is_float(n->dtype))) {
      diag_error(c->diags, c->src, n->loc, "%s tensors are not supported by the GPU code generator yet",
                 dtype_name(n->dtype));
      return -1;
    }
  }
  for (int k = 0; k < c->ngroups; k++) {
    Group *gr = c->groups[k];
    if (gr->kind == GK_GEMM && check_gemm(c, gr) != 0)
      return -1;
    for (int i = 0; i < gr->nodes.len; i++) {
      Node *n = gr->nodes.items[i];
      bool stored = false;
      for (int j = 0; j < gr->stores.len; j++)
        stored |= gr->stores.items[j] == n;
      if (dtype_is_f8(n->dtype) && stored) {
        diag_error(c->diags, c->src, n->loc, "storing %s values is not supported by the GPU code generator yet",
                   dtype_name(n->dtype));
        return -1;
      }
      if (!stored && n->op != OP_CAST)
        n->dtype = DT_F32;
    }
  }
  return 0;
}
