/* passes.h: the optimization pipeline, one pass per file, run in order by passmgr.c.
 *
 *   ffn_fusion `fuse ffn A..B`: a run of residual FFN sublayers becomes one wider FFN on the
 *              run's input (changes the model; only on request, at every -O level)
 *   tp         `--tp N --tp-rank R`: rank R's share of the program; every residual FFN
 *              sublayer column-parallel up/gate, row-parallel down, one ALLREDUCE of its
 *              [T, D] partial sums (changes the program: at every level, only on request)
 *   canon      drop no-op casts and dead code
 *   normfold   rmsnorm/layernorm before a projection: the gain (and layernorm's bias) go
 *              into the weights at load time; the per-row statistics stay as ops that the
 *              matrix-product kernel computes from the rows it reads
 *   gateup     two projections of one input that meet in an elementwise op become one
 *              product with concatenated weights, read through two column slices (the
 *              gate/up merge); slices are moved through elementwise ops down to the product
 *   fuse       kernel groups: each matrix product with its epilogue (activation, gate*up,
 *              bias, residual, scaling), and rowwise kernels for what is left
 *   precision  values that never leave a kernel are f32; checks the target can honour the
 *              policy (an error, never a silent fallback)
 *
 * Each pass rewrites the graph in place (new nodes are appended, replaced ones marked dead)
 * and the verifier runs after every pass in test builds. Any pass's output can be dumped
 * with --dump-ir-after=PASS.
 */
#ifndef FFNC_PASSES_H
#define FFNC_PASSES_H

#include "../frontend/frontend.h"

/* GK_ALLREDUCE: one ALLREDUCE node, no kernel (a launch-plan step of its own)
 * GK_SINGLE: one node alone in a kernel of its own, its operands in memory: the sums over tokens
 *            and the moves of backward graphs (matmul_at, sum_to, a transpose computed at run
 *            time; kernels/grad.cuh) */
typedef enum { GK_GEMM, GK_ROWWISE, GK_ALLREDUCE, GK_SINGLE } GroupKind;

/* A kernel group: the nodes one kernel computes. */
typedef struct {
  GroupKind kind;
  int id;
  PtrVec nodes;   /* members in graph order; GEMM: the matmul (and its slices) first */
  PtrVec stores;  /* members written to memory (used outside the group or outputs) */
  Shape shape;    /* the shape every member (but per-row statistics) has */
  /* GEMM */
  Node *mm;       /* the matrix product */
  Node *a;        /* its A operand [..., K] (in memory) */
  Node *b_nk;     /* const [S*N, K]: the weight, rows = output columns, interleaved if S = 2; NULL
                     when b_kn is set */
  Node *b_kn;     /* const [K, N]: B as the weight lies, read as it is (sm_90's wgmma, 16-bit, S = 1:
                     fuse.c, weight_as_it_lies), in place of b_nk's load-time transpose; else NULL */
  int streams;    /* S: 1, or 2 when the product is only read through two column halves */
  Node *stream[2];/* the value the epilogue sees as v[s]: mm itself, or its slices */
  int stats;      /* 0, 1: sum of squares of A's rows, 2: sum and sum of squares */
} Group;

typedef struct {
  Graph *g;
  const SourceFile *src; /* for diagnostics with source lines */
  Diags *diags;
  int arch;              /* 80, 86, 89, 90 */
  int opt_level;         /* 0: one kernel per op */
  Group **groups;        /* set by fuse, in execution order */
  int ngroups;
  bool broken;           /* a pass built an invalid node (pass_new reported it) */
  int tp, tp_rank;        /* tensor parallel: ranks (1: none) and this program's rank */
  /* the training forward of the keep policy: its products read the weights as they lie (no
   * normfold, no gateup: no load-time copy for an optimizer step to make stale) */
  bool weights_as_stored;
  struct StatTable *stats; /* normfold's statistics nodes by (op, x, eps) while it runs, else NULL */
} Compile;

typedef int (*PassFn)(Compile *c); /* 0, or -1 after reporting into c->diags */

int pass_ffn_fusion(Compile *c);
int pass_tp(Compile *c);
int pass_canon(Compile *c);
int pass_gateup(Compile *c);
int pass_normfold(Compile *c);
int pass_fuse(Compile *c);
int pass_precision(Compile *c);
/* grad.c: the program becomes its backward graph, or the training forward of the keep policy
 * (not in the pipeline: driver_model_graph applies it for --grad / --keep, after ffn_fusion;
 * the forward nodes stay, gradients are appended). */
typedef enum {
  GRAD_RECOMPUTE, /* the backward graph, recomputing the forward values it reads */
  GRAD_KEEP,      /* the backward graph, reading the saved values as inputs saved.NAME */
  GRAD_FORWARD,   /* the program, writing the saved values as outputs saved.NAME (GRAD_KEEP's forward) */
} GradGraph;
int pass_grad(Compile *c, GradGraph which);

/* normfold.c: x normalized by the row statistics of `norm` (an rmsnorm or layernorm node of
 * x, giving the kind and eps), times w_nk^T, where w_nk [N, K] already holds the gain; the
 * folded form without layernorm's bias, typed and located like the product mm. Shared by
 * normfold and ffn_fusion, whose fused projections are this product. */
Node *norm_matmul(Compile *c, Node *x, const Node *norm, Node *w_nk, const Node *mm);

/* ffn_fusion.c: the residual FFN sublayers of g in program order (their numbering for
 * `fuse ffn`): the input x of each and its value x + FFN(x). malloc'd; the count, or -1
 * when out of memory. For `ffnc analyze`. */
typedef struct {
  Node *x, *res;
} FfnSublayer;
int ffn_sublayers(Graph *g, FfnSublayer **out);

/* Runs the pipeline. dump_after: a pass name (or "frontend", or "all") whose output is
 * printed to dump. Returns 0 or -1 (diagnostics in c->diags). */
int passes_run(Compile *c, const char *dump_after, FILE *dump);
/* Names of the passes, NULL-terminated (for --help and validation). */
extern const char *const pass_names[];

/* Helpers shared by the passes (passmgr.c). */
Node *pass_new(Compile *c, Op op, DType dt, Node **args, int nargs, const Node *like); /* shape inferred */
bool is_elementwise(const Node *n);
/* Whether b is a constant bias of matmul mm's output columns ([N]). */
bool is_bias_for(const Node *b, const Node *mm);
/* The residual sublayer shape r = x + (down [+ dbias]) read with x = r->args[side]: *dsum the
 * other operand, *down the matmul it is or adds a bias to (*dbias that const bias, else NULL).
 * False if r is not a run-time add or its other operand is neither. ffn_fusion.c and tp.c
 * check the rest (what the product reads) each their own way. */
bool residual_down(Node *r, int side, Node **x, Node **dsum, Node **down, Node **dbias);
/* B operand of matmul mm as a const [N, K] node (the weight itself when mm reads w^T, else a
 * new transpose), or NULL if mm's right operand is not constant. */
Node *matmul_b_nk(Compile *c, Node *mm);
/* Users of each node: users[pos] lists of Node*, indexed by node id. */
typedef struct {
  PtrVec *by_id;
  int n;
  bool *is_output; /* by id */
} Users;
Users users_build(const Graph *g);
void users_free(Users *u);

#endif
