/* ffn_fusion.c: FFN Fusion (`fuse ffn A..B`, `--ffn-fusion A..B`), dsl.md "FFN Fusion".
 *
 * A residual FFN sublayer, after inlining, is
 *     y = x + act(P_1, ..., P_n) @ Wd [+ bd]        P_j = norm(x) @ W_j [+ b_j] [chunk]
 * with norm an rmsnorm or layernorm of x (constant gain and bias), act any elementwise
 * expression of the projections P_j (silu(P_1) * P_2, gelu(P_1), ...), and every W, b
 * constant. Sublayers are numbered 0, 1, ... in program order. A run A..B of consecutive
 * sublayers (each reads the previous one's output and nothing else is computed between
 * them) is replaced by one sublayer on the run's input x:
 *     y = x + sum_i FFN_i(x)
 *       = x + act(P_1', ..., P_n') @ concat_i(Wd_i) [+ sum_i bd_i]
 *     P_j' = normalize(x) @ concat_i(W_ij * g_i) [+ concat_i(b_ij + W_ij b_i)]
 * i.e. each sublayer's gain (and layernorm bias) is folded into its own columns, so that
 * one set of row statistics serves all, and the wide product is written in the folded form
 * of normfold.c (norm_matmul). The rest of the pipeline then treats it like any sublayer:
 * gate and up merge, and it runs as the same two kernels with N = sum 2F_i, K = sum F_i.
 *
 * This changes the model's function, so it runs at every -O level, only on request, and
 * anything that cannot be fused exactly so is an error at the request, never a skip.
 */
#include "passes.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

enum {
  MAX_PROJ = 8,   /* projections of one sublayer */
  MAX_TREE = 64,  /* nodes of one activation expression */
  MAX_CAT = 8,    /* operands of one load-time concat (PrepStep.args) */
};

/* One projection the activation reads: columns [off, off + len) of norm(x) @ B [+ bias]. */
typedef struct {
  Node *leaf;    /* what the activation reads: the product, its bias add, or a chunk of it */
  Node *mm;      /* norm(x) @ B, B const [K, N] */
  Node *bias;    /* const [N] added to the product, or NULL */
  Node *biasadd; /* the add, or NULL */
  int64_t off, len;
} Proj;

typedef struct {
  Node *x, *norm, *res; /* input, its norm, the residual add (the sublayer's value) */
  Node *act;            /* the activation expression's root: the down product's A */
  Node *down, *dbias, *dsum; /* act @ Bd; its const bias or NULL; what the residual adds */
  Proj proj[MAX_PROJ];
  int nproj;
  Node *tree[MAX_TREE]; /* the activation expression's nodes (not the projections) */
  int ntree;
} Sublayer;

static bool is_norm_of(const Node *h, const Node *x) {
  if ((h->op != OP_RMSNORM && h->op != OP_LAYERNORM) || h->args[0] != x)
    return false;
  for (int i = 1; i < h->nargs; i++)
    if (!ir_is_const(h->args[i]))
      return false;
  return true;
}

/* Is n a projection of x's norm (setting s->norm on the first)? Fills *p. */
static bool match_proj(Sublayer *s, Node *n, Proj *p) {
  *p = (Proj){.leaf = n};
  if (n->op == OP_SLICE) {
    if (!match_proj(s, n->args[0], p) || p->off != 0 || p->leaf != n->args[0])
      return false;
    p->leaf = n, p->off = n->ival[0], p->len = n->ival[1];
    return true;
  }
  Node *mm = n;
  if (n->op == OP_ADD) {
    for (int i = 0; i < 2 && !p->bias; i++)
      if (n->args[i]->op == OP_MATMUL && is_bias_for(n->args[1 - i], n->args[i]))
        mm = n->args[i], p->bias = n->args[1 - i], p->biasadd = n;
    if (!p->bias)
      return false;
  }
  if (mm->op != OP_MATMUL || !ir_is_const(mm->args[1]) || mm->args[1]->shape.rank != 2)
    return false;
  Node *h = mm->args[0];
  if (!is_norm_of(h, s->x) || (s->norm && s->norm != h))
    return false;
  s->norm = h;
  p->mm = mm;
  p->len = mm->shape.d[mm->shape.rank - 1].size;
  return true;
}

/* The activation expression under n: elementwise ops over projections and scalars. */
static bool match_act(Sublayer *s, Node *n) {
  for (int i = 0; i < s->nproj; i++)
    if (s->proj[i].leaf == n)
      return true;
  Proj p;
  if (match_proj(s, n, &p)) {
    if (s->nproj == MAX_PROJ)
      return false;
    s->proj[s->nproj++] = p;
    return true;
  }
  if (n->op == OP_SCALAR)
    return true;
  if (!is_elementwise(n) || ir_is_const(n) || s->ntree == MAX_TREE)
    return false;
  for (int i = 0; i < s->ntree; i++)
    if (s->tree[i] == n)
      return true;
  s->tree[s->ntree++] = n;
  for (int i = 0; i < n->nargs; i++)
    if (!match_act(s, n->args[i]))
      return false;
  return true;
}

/* Is r = x + FFN(x)? */
static bool match_sublayer(Node *r, Sublayer *s) {
  for (int side = 0; side < 2; side++) {
    *s = (Sublayer){.res = r};
    if (!residual_down(r, side, &s->x, &s->dsum, &s->down, &s->dbias) || !ir_is_const(s->down->args[1]) ||
        s->down->args[1]->shape.rank != 2 || ir_is_const(s->x))
      continue;
    s->act = s->down->args[0];
    if (match_act(s, s->act) && s->nproj > 0 && s->norm)
      return true;
  }
  return false;
}

/* ---- errors ---- */

typedef struct {
  Compile *c;
  const FuseRequest *req;
} Ctx;

static int fail(Ctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(Ctx *x, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (x->req->loc.line)
    diag_error(x->c->diags, x->c->src, x->req->loc, "%s", msg);
  else
    diag_plain(x->c->diags, "--ffn-fusion %d..%d: %s", x->req->first, x->req->last, msg);
  return -1;
}

static void note_at(Ctx *x, const Node *n, int sub, const char *what) {
  if (n->loc.line)
    diag_note(x->c->diags, "sublayer %d's %s is at line %d", sub, what, n->loc.line);
}

/* ---- checks ---- */

static const char *norm_name(const Node *h) { return op_info[h->op].name; }

/* Do the activation expressions of a and b have the same form (ops, types, scalars, and
 * the same projection in each place)? */
static bool same_tree(const Sublayer *a, const Node *na, const Sublayer *b, const Node *nb) {
  int pa = -1, pb = -1;
  for (int i = 0; i < a->nproj; i++)
    if (a->proj[i].leaf == na)
      pa = i;
  for (int i = 0; i < b->nproj; i++)
    if (b->proj[i].leaf == nb)
      pb = i;
  if (pa >= 0 || pb >= 0)
    return pa == pb;
  if (na->op != nb->op || na->dtype != nb->dtype || na->nargs != nb->nargs)
    return false;
  if (na->op == OP_SCALAR)
    return na->fval == nb->fval;
  for (int i = 0; i < na->nargs; i++)
    if (!same_tree(a, na->args[i], b, nb->args[i]))
      return false;
  return true;
}

static bool same_proj(const Proj *p, const Proj *q) {
  return !p->bias == !q->bias && (!p->bias || p->bias->dtype == q->bias->dtype) &&
         p->mm->dtype == q->mm->dtype && p->mm->args[1]->dtype == q->mm->args[1]->dtype &&
         p->leaf->dtype == q->leaf->dtype && (p->leaf->op == OP_SLICE) == (q->leaf->op == OP_SLICE);
}

/* Why sublayer b cannot be concatenated with sublayer a, or NULL if it can. */
static const char *form_difference(const Sublayer *a, const Sublayer *b) {
  if (a->nproj != b->nproj || !same_tree(a, a->act, b, b->act))
    return "their activations differ";
  if (!a->dbias != !b->dbias)
    return "one has a bias on the down projection and the other has not";
  for (int j = 0; j < a->nproj; j++)
    if (!a->proj[j].bias != !b->proj[j].bias)
      return "one has a bias on a projection and the other has not";
    else if ((a->proj[j].leaf->op == OP_SLICE) != (b->proj[j].leaf->op == OP_SLICE))
      return "one reads its projection through chunk and the other does not";
    else if (!same_proj(&a->proj[j], &b->proj[j]))
      return "the element types of their projections differ";
  if (a->down->dtype != b->down->dtype || a->down->args[1]->dtype != b->down->args[1]->dtype ||
      a->res->dtype != b->res->dtype || a->x->dtype != b->x->dtype || a->norm->dtype != b->norm->dtype ||
      (a->dbias && a->dbias->dtype != b->dbias->dtype))
    return "their element types differ";
  return NULL;
}

static int check_form(Ctx *x, const Sublayer *s, int first, int k) {
  const Sublayer *a = &s[first], *b = &s[k];
  if (a->norm->op != b->norm->op || a->norm->fval != b->norm->fval || a->norm->nargs != b->norm->nargs) {
    fail(x, "sublayers %d and %d cannot share one normalization: %s eps %g and %s eps %g", first, k,
         norm_name(a->norm), a->norm->fval, norm_name(b->norm), b->norm->fval);
    diag_note(x->c->diags, "FFN Fusion normalizes the run's input once; every sublayer of a run needs the same norm "
                           "kind and eps (gains may differ)");
    return -1;
  }
  const char *why = form_difference(a, b);
  if (why) {
    fail(x, "sublayers %d and %d cannot be concatenated into one FFN: %s", first, k, why);
    note_at(x, a->act, first, "activation");
    note_at(x, b->act, k, "activation");
    return -1;
  }
  if (a->x->dtype != a->norm->dtype)
    return fail(x, "sublayer %d normalizes %s values into %s; FFN Fusion needs the norm to keep the element type",
                first, dtype_name(a->x->dtype), dtype_name(a->norm->dtype));
  return 0;
}

/* Marks (by id) every node of sublayer s with tag. */
static void mark(int *tag, const Sublayer *s, int t) {
  Node *nodes[] = {s->norm, s->res, s->down, s->dsum};
  for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++)
    tag[nodes[i]->id] = t;
  for (int i = 0; i < s->ntree; i++)
    tag[s->tree[i]->id] = t;
  for (int i = 0; i < s->nproj; i++) {
    const Proj *p = &s->proj[i];
    tag[p->leaf->id] = tag[p->mm->id] = t;
    if (p->biasadd)
      tag[p->biasadd->id] = t;
  }
}

/* Nothing outside the run reads a value computed inside it, but the last sublayer's. */
static int check_uses(Ctx *x, const Sublayer *s, int first, int last) {
  Graph *g = x->c->g;
  int *tag = calloc((size_t)g->next_id + 1, sizeof *tag), rc = 0;
  if (!tag)
    return fail(x, "out of memory");
  for (int k = first; k < last; k++)
    mark(tag, &s[k], k + 1);
  Users u = users_build(g);
  for (int k = first; k < last && rc == 0; k++) {
    const Sublayer *sk = &s[k];
    for (int i = 0; i < g->nodes.len && rc == 0; i++) {
      Node *n = GRAPH_NODE(g, i);
      if (n->dead || tag[n->id] != k + 1 || n == s[last - 1].res)
        continue;
      bool escapes = u.is_output[n->id];
      const Node *user = NULL;
      for (int j = 0; j < u.by_id[n->id].len && !escapes; j++) {
        user = u.by_id[n->id].items[j];
        /* the run's inner outputs feed the next sublayer's norm and residual add only */
        bool next = n == sk->res && (user == s[k + 1].norm || user == s[k + 1].res);
        escapes = tag[user->id] != k + 1 && !next;
      }
      if (escapes) {
        rc = fail(x, "a value computed inside sublayer %d%s is used outside the fused run", k,
                  n == sk->res ? " (its output)" : "");
        for (int o = 0; o < g->noutputs; o++)
          if (g->outputs[o].node == n) {
            diag_note(x->c->diags, "it is the model output `%s`; a fused run computes only its final value",
                      g->outputs[o].name);
            break;
          }
        if (!u.is_output[n->id] && user->loc.line)
          diag_note(x->c->diags, "it is used at line %d", user->loc.line);
      }
    }
  }
  users_free(&u);
  free(tag);
  return rc;
}

/* A product whose B is w^T of a pre-quantized weight computed with its stored codes (under
 * `precision matmul T` of the codes' type, interp.c's contract): folding a gain into w or
 * concatenating it with other rows along K would need new codes and scales. Not done: FFN
 * Fusion refuses such runs rather than re-quantizing a checkpoint silently. Dequantized uses
 * (no fp8 policy: the weight is cast to the activations' type) fuse like any weight. */
static const Node *stored_codes_weight(const Graph *g, const Node *mm) {
  const Node *b = mm->args[1];
  if (b->op != OP_TRANSPOSE || b->args[0]->op != OP_WEIGHT)
    return NULL;
  const Node *w = b->args[0];
  return w->stored != DT_NONE && w->stored == g->prec.type[PREC_MATMUL] ? w : NULL;
}

static int check_prequant(Ctx *x, const Sublayer *s, int first, int last) {
  for (int k = first; k < last; k++) {
    const Node *w = stored_codes_weight(x->c->g, s[k].down);
    for (int j = 0; !w && j < s[k].nproj; j++)
      w = stored_codes_weight(x->c->g, s[k].proj[j].mm);
    if (w) {
      fail(x, "sublayer %d reads the pre-quantized weight `%s` as stored %s codes; FFN Fusion would have to "
              "quantize it again", k, w->var ? w->var : w->name, dtype_name(w->stored));
      diag_note(x->c->diags, "fusing folds each norm gain into the up projections and concatenates the down "
                             "projections along their inner dimension, which changes the codes and scales");
      return -1;
    }
  }
  return 0;
}

static int check_run(Ctx *x, const Sublayer *s, int ns) {
  int first = x->req->first, last = x->req->last;
  if (last > ns) {
    if (ns == 0)
      fail(x, "the model has no FFN sublayer, so `fuse ffn %d..%d` is out of range", first, last);
    else
      fail(x, "the model has %d FFN sublayer%s (numbered 0..%d after inlining), so `fuse ffn %d..%d` is out of range",
           ns, ns == 1 ? "" : "s", ns - 1, first, last);
    diag_note(x->c->diags, "an FFN sublayer is `x + FFN(x)` with a norm of x, one or more projections, an "
                           "activation and a down projection (dsl.md, FFN Fusion)");
    return -1;
  }
  for (int k = first + 1; k < last; k++)
    if (s[k].x != s[k - 1].res) {
      fail(x, "sublayers %d and %d are not consecutive: sublayer %d does not read sublayer %d's output", k - 1, k, k,
           k - 1);
      diag_note(x->c->diags, "something else is computed between them; a fused run holds FFN sublayers only");
      note_at(x, s[k].norm, k, "norm");
      return -1;
    }
  for (int k = first + 1; k < last; k++)
    if (check_form(x, s, first, k) != 0)
      return -1;
  if (check_prequant(x, s, first, last) != 0)
    return -1;
  return check_uses(x, s, first, last);
}

/* ---- the fused sublayer ---- */

/* concat along axis of parts, as a tree of concats of at most MAX_CAT operands each */
static Node *concat(Compile *c, Node **parts, int n, int axis) {
  Node proto = {.ival = {axis}};
  while (n > 1) {
    int m = 0;
    for (int i = 0; i < n; i += MAX_CAT) {
      int k = n - i < MAX_CAT ? n - i : MAX_CAT;
      parts[m++] = k == 1 ? parts[i] : pass_new(c, OP_CONCAT, parts[i]->dtype, parts + i, k, &proto);
    }
    n = m;
  }
  return parts[0];
}

static Node *binary(Compile *c, Op op, DType dt, Node *a, Node *b, const Node *like) {
  Node *args[2] = {a, b};
  return pass_new(c, op, dt, args, 2, like);
}

/* Sublayer s's part of projection j as [len, K] rows with the gain folded in, and its bias
 * [len] (the projection's own plus layernorm's bias through the weight) or NULL. */
static Node *proj_rows(Compile *c, const Sublayer *s, int j, Node **bias) {
  const Proj *p = &s->proj[j];
  Node *b = p->mm->args[1]; /* [K, N] */
  int64_t n = b->shape.d[1].size;
  Node *kn = b;
  if (p->off != 0 || p->len != n) {
    Node sl = {.ival = {p->off, p->len}};
    kn = pass_new(c, OP_SLICE, b->dtype, &b, 1, &sl);
  }
  Node *nk = kn == b && b->op == OP_TRANSPOSE ? b->args[0] : pass_new(c, OP_TRANSPOSE, kn->dtype, &kn, 1, NULL);
  *bias = NULL;
  if (p->bias) {
    Node *pb = p->bias;
    Node sl = {.ival = {p->off, p->len}};
    *bias = p->len == n ? pb : pass_new(c, OP_SLICE, pb->dtype, &pb, 1, &sl);
  }
  if (s->norm->op == OP_LAYERNORM && s->norm->nargs == 3) {
    Node *through = binary(c, OP_MATMUL, DT_F32, s->norm->args[2], kn, NULL); /* b_ln @ W^T: [len] */
    *bias = *bias ? binary(c, OP_ADD, DT_F32, *bias, through, NULL) : through;
  }
  return binary(c, OP_MUL, nk->dtype, nk, s->norm->args[1], NULL); /* [len, K] * [K] */
}

/* The run's projection j: normalize(x) @ concat_i(W_ij * g_i)^T [+ concat_i(bias_ij)]. */
static Node *fused_proj(Compile *c, const Sublayer *s, int first, int last, int j, Node *x) {
  Node *rows[256], *biases[256];
  int n = last - first;
  for (int k = 0; k < n; k++)
    rows[k] = proj_rows(c, &s[first + k], j, &biases[k]);
  const Sublayer *a = &s[first];
  const Proj *p = &a->proj[j];
  Node *y = norm_matmul(c, x, a->norm, concat(c, rows, n, 0), p->mm);
  if (biases[0]) {
    Node *cat = concat(c, biases, n, 0);
    y = binary(c, OP_ADD, p->biasadd ? p->biasadd->dtype : p->mm->dtype, y, cat, p->biasadd ? p->biasadd : p->mm);
  }
  y->var = p->leaf->var;
  return y;
}

/* Sublayer a's activation expression rebuilt over the fused projections. */
static Node *rebuild(Compile *c, const Sublayer *a, Node *n, Node **fused, Node **memo) {
  for (int j = 0; j < a->nproj; j++)
    if (a->proj[j].leaf == n)
      return fused[j];
  if (n->op == OP_SCALAR)
    return n;
  if (memo[n->id])
    return memo[n->id];
  Node *args[3];
  for (int i = 0; i < n->nargs; i++)
    args[i] = rebuild(c, a, n->args[i], fused, memo);
  Node *y = pass_new(c, n->op, n->dtype, args, n->nargs, n);
  y->var = n->var;
  return memo[n->id] = y;
}

static Node *fuse_run(Compile *c, const Sublayer *s, int first, int last) {
  const Sublayer *a = &s[first];
  /* the run's input as the graph has it now: an earlier run ending here replaced it */
  Node *x = a->norm->args[0];
  int n = last - first;
  Node *fused[MAX_PROJ], *parts[256];
  for (int j = 0; j < a->nproj; j++)
    fused[j] = fused_proj(c, s, first, last, j, x);
  Node **memo = calloc((size_t)c->g->next_id + 1, sizeof *memo);
  if (!memo)
    return NULL;
  Node *act = rebuild(c, a, a->act, fused, memo);
  free(memo);
  for (int k = 0; k < n; k++) { /* down weights as [D, F_i], side by side */
    Node *b = s[first + k].down->args[1];
    parts[k] = b->op == OP_TRANSPOSE ? b->args[0] : pass_new(c, OP_TRANSPOSE, b->dtype, &b, 1, NULL);
  }
  Node *wd = concat(c, parts, n, 1);
  Node *down = binary(c, OP_MATMUL, a->down->dtype, act, pass_new(c, OP_TRANSPOSE, wd->dtype, &wd, 1, NULL), a->down);
  Node *d = down;
  if (a->dbias) {
    Node *sum = s[first].dbias;
    for (int k = 1; k < n; k++)
      sum = binary(c, OP_ADD, DT_F32, sum, s[first + k].dbias, NULL);
    d = binary(c, OP_ADD, a->dsum->dtype, down, sum, a->dsum);
  }
  bool x_first = a->res->args[0] == x;
  Node *y = binary(c, OP_ADD, a->res->dtype, x_first ? x : d, x_first ? d : x, s[last - 1].res);
  y->var = s[last - 1].res->var;
  return y;
}

/* ---- the pass ---- */

static int find_sublayers(Graph *g, Sublayer **out) {
  int n = 0, cap = 16;
  Sublayer *s = malloc(sizeof *s * (size_t)cap);
  for (int i = 0; s && i < g->nodes.len; i++) {
    Node *r = GRAPH_NODE(g, i);
    if (r->dead || r->op != OP_ADD)
      continue;
    if (n == cap) {
      Sublayer *t = realloc(s, sizeof *s * (size_t)(cap *= 2));
      if (!t) {
        free(s);
        s = NULL;
        break;
      }
      s = t;
    }
    if (match_sublayer(r, &s[n]))
      n++;
  }
  *out = s;
  return s ? n : -1;
}

int ffn_sublayers(Graph *g, FfnSublayer **out) {
  Sublayer *s;
  int n = find_sublayers(g, &s);
  *out = NULL;
  if (n < 0)
    return -1;
  FfnSublayer *r = malloc(sizeof *r * (size_t)(n + 1));
  for (int i = 0; r && i < n; i++)
    r[i] = (FfnSublayer){s[i].x, s[i].res};
  free(s);
  *out = r;
  return r ? n : -1;
}

static int check_overlaps(Compile *c) {
  Graph *g = c->g;
  for (int i = 0; i < g->nfuse; i++)
    for (int j = 0; j < i; j++) {
      const FuseRequest *a = &g->fuse[j], *b = &g->fuse[i];
      if (a->first < b->last && b->first < a->last) {
        Ctx x = {c, b};
        fail(&x, "`fuse ffn %d..%d` overlaps `fuse ffn %d..%d`", b->first, b->last, a->first, a->last);
        diag_note(c->diags, "each sublayer can be fused into one run only; merge the two into one range");
        return -1;
      }
    }
  return 0;
}

int pass_ffn_fusion(Compile *c) {
  Graph *g = c->g;
  if (g->nfuse == 0)
    return 0;
  if (check_overlaps(c) != 0)
    return -1;
  Sublayer *s;
  int ns = find_sublayers(g, &s), rc = 0;
  if (ns < 0) {
    diag_plain(c->diags, "out of memory in FFN Fusion");
    return -1;
  }
  for (int i = 0; i < g->nfuse && rc == 0; i++) {
    Ctx x = {c, &g->fuse[i]};
    int first = g->fuse[i].first, last = g->fuse[i].last;
    if (last - first > 256)
      rc = fail(&x, "a run of more than 256 sublayers is not supported");
    else
      rc = check_run(&x, s, ns);
  }
  for (int i = 0; i < g->nfuse && rc == 0; i++) {
    int first = g->fuse[i].first, last = g->fuse[i].last;
    Node *y = fuse_run(c, s, first, last);
    if (!y) {
      diag_plain(c->diags, "out of memory in FFN Fusion");
      rc = -1;
      break;
    }
    ir_replace_uses(g, s[last - 1].res, y);
  }
  free(s);
  if (rc != 0)
    return -1;
  ir_compact(g);
  return ir_toposort(g);
}
