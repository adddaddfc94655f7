/* passmgr.c: runs the passes in order, dumps and verifies between them. */
#include "passes.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  const char *name;
  PassFn fn;
  int min_opt; /* runs at this -O level and above */
} Pass;

static const Pass pipeline[] = {
    {"ffn_fusion", pass_ffn_fusion, 0}, /* changes the model: at every level, only on request */
    {"tp", pass_tp, 0}, /* changes the program (one rank's share): at every level, only on request */
    {"canon", pass_canon, 0}, {"normfold", pass_normfold, 1}, {"gateup", pass_gateup, 1},
    {"fuse", pass_fuse, 0},   {"precision", pass_precision, 0},
};
#define NPASSES (int)(sizeof pipeline / sizeof pipeline[0])

const char *const pass_names[] = {"frontend", "ffn_fusion", "tp", "canon", "normfold", "gateup", "fuse", "precision", NULL};

static int verify(Compile *c, const char *after) {
#ifdef FFNC_VERIFY_PASSES
  char err[512];
  if (ir_verify(c->g, err, sizeof err) != 0) {
    diag_plain(c->diags, "internal error: IR invalid after %s: %s", after, err);
    return -1;
  }
#endif
  (void)c;
  (void)after;
  return 0;
}

int passes_run(Compile *c, const char *dump_after, FILE *dump) {
  if (dump_after) {
    bool known = strcmp(dump_after, "all") == 0;
    for (int i = 0; pass_names[i]; i++)
      known |= strcmp(dump_after, pass_names[i]) == 0;
    if (!known) {
      char list[256] = "";
      for (int i = 0; pass_names[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? " " : "", pass_names[i]);
      diag_plain(c->diags, "--dump-ir-after=%s: no such pass (passes: %s all)", dump_after, list);
      return -1;
    }
  }
  bool all = dump_after && strcmp(dump_after, "all") == 0;
  if (dump_after && (all || strcmp(dump_after, "frontend") == 0)) {
    fprintf(dump, "# after frontend\n");
    ir_print(c->g, dump);
  }
  if (verify(c, "frontend") != 0)
    return -1;
  for (int i = 0; i < NPASSES; i++) {
    if (c->opt_level < pipeline[i].min_opt)
      continue;
    if (pipeline[i].fn == pass_tp && c->tp <= 1)
      continue; /* not a step of an ordinary compile: its dumps stay as they were */
    if (c->weights_as_stored && (pipeline[i].fn == pass_normfold || pipeline[i].fn == pass_gateup))
      continue; /* both make load-time copies of weights */
    if (pipeline[i].fn(c) != 0 || c->broken)
      return -1;
    if (verify(c, pipeline[i].name) != 0)
      return -1;
    if (dump_after && (all || strcmp(dump_after, pipeline[i].name) == 0)) {
      fprintf(dump, "# after %s\n", pipeline[i].name);
      ir_print(c->g, dump);
    }
  }
  return 0;
}

/* ---- helpers ---- */

Node *pass_new(Compile *c, Op op, DType dt, Node **args, int nargs, const Node *like) {
  Shape s;
  char err[256];
  if (!ir_infer_shape(c->g, op, args, nargs, like, &s, err, sizeof err)) {
    /* a bug in a pass, inside a host program's compile call: reported, never aborted; the
     * node gets a placeholder shape and the pipeline stops after this pass */
    if (!c->broken)
      diag_plain(c->diags, "internal error: a pass built an invalid %s: %s", op_info[op].name, err);
    c->broken = true;
    s = args[0]->shape;
  }
  SrcLoc loc = like ? like->loc : args[0]->loc;
  Node *n = ir_node(c->g, op, dt, s, args, nargs, loc);
  if (like) {
    n->fval = like->fval;
    n->ival[0] = like->ival[0];
    n->ival[1] = like->ival[1];
  }
  return n;
}

bool is_elementwise(const Node *n) {
  return op_info[n->op].cls == OPC_UNARY || op_info[n->op].cls == OPC_BINARY;
}

bool is_bias_for(const Node *b, const Node *mm) {
  const Shape *s = &mm->shape;
  return ir_is_const(b) && b->shape.rank == 1 && dim_eq(b->shape.d[0], s->d[s->rank - 1]);
}

bool residual_down(Node *r, int side, Node **x, Node **dsum, Node **down, Node **dbias) {
  if (r->op != OP_ADD || ir_is_const(r))
    return false;
  Node *d = r->args[1 - side];
  *x = r->args[side], *dsum = d, *down = NULL, *dbias = NULL;
  if (d->op == OP_MATMUL)
    *down = d;
  for (int i = 0; d->op == OP_ADD && i < 2 && !*dbias; i++)
    if (d->args[i]->op == OP_MATMUL && is_bias_for(d->args[1 - i], d->args[i]))
      *down = d->args[i], *dbias = d->args[1 - i];
  return *down != NULL;
}

Node *matmul_b_nk(Compile *c, Node *mm) {
  Node *b = mm->args[1];
  if (!ir_is_const(b))
    return NULL;
  if (b->op == OP_TRANSPOSE)
    return b->args[0];
  return pass_new(c, OP_TRANSPOSE, b->dtype, &b, 1, NULL);
}

Users users_build(const Graph *g) {
  Users u = {ffn_xcalloc((size_t)g->next_id + 1, sizeof(PtrVec)), g->next_id, ffn_xcalloc((size_t)g->next_id + 1, 1)};
  for (int i = 0; i < g->nodes.len; i++) {
    Node *n = GRAPH_NODE(g, i);
    if (n->dead)
      continue;
    for (int j = 0; j < n->nargs; j++) {
      PtrVec *v = &u.by_id[n->args[j]->id];
      bool dup = v->len && v->items[v->len - 1] == n; /* x * x uses x once */
      if (!dup)
        ptrvec_push(g->arena, v, n);
    }
  }
  for (int i = 0; i < g->noutputs; i++)
    u.is_output[g->outputs[i].node->id] = true;
  return u;
}

void users_free(Users *u) {
  free(u->by_id);
  free(u->is_output);
}
