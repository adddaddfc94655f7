/* ir.h: ffnc's internal core: arena, element types, shapes and the IR graph.
 *
 * The IR is a typed SSA graph. A Graph owns an arena; nodes are never freed one by one.
 * Nodes are kept in creation order, which is a topological order (operands are always
 * created before their users). Every node has an element type and a shape whose dims are
 * either static integers or a dynamic dim symbol (bound from input shapes at run time).
 *
 * Sections follow the files that implement them (chibicc style).
 */
#ifndef FFNC_IR_H
#define FFNC_IR_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define FFNC_VERSION "0.1.0"

/* ---- arena.c ---------------------------------------------------------- */

/* Errors, one convention per layer, each converted once at its boundary:
 *   - front end, passes, code generation: diagnostics into a Diags (frontend.h), functions
 *     return -1 or NULL; nothing is printed (the CLI prints the Diags; the C API returns
 *     their text through ffn_last_error);
 *   - self-contained readers and evaluators (interp.c, safetensors.c, plan JSON, read_file):
 *     return -1 with a message in the caller's (char *err, size_t errlen), printf-style;
 *   - runtime and public API: an ffn_status, with its message from rt_error (runtime/rt.h).
 * The one exception is host memory exhaustion inside the compiler: these allocators (and
 * the arena) print "ffnc: out of host memory" and abort, as compilers do; the runtime's own
 * allocations (device buffers, workspaces, plans loaded from files) are checked and returned
 * as FFN_ERR_OUT_OF_MEMORY instead. */
void *ffn_xmalloc(size_t n);
void *ffn_xcalloc(size_t n, size_t size);
void *ffn_xrealloc(void *p, size_t n);
char *ffn_xstrdup(const char *s);
/* The readers' convention above, written once: formats into err (when errlen > 0), returns -1. */
int ffn_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A raw shape as messages print it, "[2, 3]" (rank 0: "[]"); returns buf. */
const char *ffn_shape_text(int rank, const int64_t *shape, char *buf, size_t len);

typedef struct Arena Arena;

Arena *arena_create(void);
void arena_destroy(Arena *a);
void *arena_alloc(Arena *a, size_t size); /* zeroed, 16-byte aligned; aborts on OOM */
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_printf(Arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Growable array of pointers in an arena (old storage is abandoned to the arena). */
typedef struct {
  void **items;
  int len, cap;
} PtrVec;
void ptrvec_push(Arena *a, PtrVec *v, void *item);

/* ---- dtype.c ---------------------------------------------------------- */

/* X(ENUM, dsl name, bits, safetensors name, float?) . Types with a NULL dsl name exist
 * only so that safetensors files holding them can be read and validated. */
#define FFN_DTYPES(X)                          \
  X(F32, "f32", 32, "F32", 1)                  \
  X(F16, "f16", 16, "F16", 1)                  \
  X(BF16, "bf16", 16, "BF16", 1)               \
  X(F8E4M3, "f8e4m3", 8, "F8_E4M3", 1)         \
  X(F8E5M2, "f8e5m2", 8, "F8_E5M2", 1)         \
  X(I8, "i8", 8, "I8", 0)                      \
  X(I4, "i4", 4, NULL, 0)                      \
  X(U8, "u8", 8, "U8", 0)                      \
  X(F64, NULL, 64, "F64", 1)                   \
  X(I16, NULL, 16, "I16", 0)                   \
  X(I32, NULL, 32, "I32", 0)                   \
  X(I64, NULL, 64, "I64", 0)                   \
  X(U16, NULL, 16, "U16", 0)                   \
  X(U32, NULL, 32, "U32", 0)                   \
  X(U64, NULL, 64, "U64", 0)                   \
  X(BOOL, NULL, 8, "BOOL", 0)

typedef enum {
  DT_NONE = 0,
#define X(e, n, b, s, f) DT_##e,
  FFN_DTYPES(X)
#undef X
      DT_COUNT
} DType;

const char *dtype_name(DType t);          /* "bf16"; for storage-only types the st name */
const char *dtype_st_name(DType t);       /* "BF16", or NULL if safetensors has none */
int dtype_bits(DType t);                  /* 0 for DT_NONE */
bool dtype_is_float(DType t);
static inline bool dtype_is_f8(DType t) { return t == DT_F8E4M3 || t == DT_F8E5M2; }
DType dtype_from_name(const char *name);  /* DSL name -> type, DT_NONE if unknown */
DType dtype_from_st_name(const char *st); /* safetensors name -> type, DT_NONE if unknown */
/* Bytes for n elements (i4 packs two per byte, rounding up). */
size_t dtype_bytes(DType t, size_t n);

/* ---- numerics.c ------------------------------------------------------- */

/* Round v to the nearest value representable in t (round to nearest even). bf16/f16
 * overflow to +-inf like the hardware conversions; f8e4m3 and f8e5m2 saturate to their
 * largest finite magnitude (448, 57344). NaN stays NaN. f32 rounds like (float)v. f64
 * is returned unchanged. Integer types round to nearest even and clamp. */
double round_to_dtype(double v, DType t);

/* Element encode/decode between raw storage and double (exact for every float type). */
double dtype_load(DType t, const void *base, size_t index);
void dtype_store(DType t, void *base, size_t index, double v); /* rounds as above */

uint16_t f32_to_bf16_bits(float f);
float bf16_bits_to_f32(uint16_t b);
uint16_t f32_to_f16_bits(float f);
float f16_bits_to_f32(uint16_t h);
uint8_t f32_to_f8e4m3_bits(float f);
float f8e4m3_bits_to_f32(uint8_t b);
uint8_t f32_to_f8e5m2_bits(float f);
float f8e5m2_bits_to_f32(uint8_t b);

/* ---- shapes (ir.c) ---------------------------------------------------- */

#define FFN_MAX_RANK 6

/* A dim is static (sym < 0, size given) or a dynamic symbol (sym = index in Graph.dims). */
typedef struct {
  int64_t size;
  int sym;
} Dim;

typedef struct {
  int rank;
  Dim d[FFN_MAX_RANK];
} Shape;

static inline Dim dim_static(int64_t n) { return (Dim){n, -1}; }
static inline Dim dim_dynamic(int sym) { return (Dim){0, sym}; }
static inline bool dim_eq(Dim a, Dim b) { return a.sym == b.sym && (a.sym >= 0 || a.size == b.size); }
bool shape_eq(const Shape *a, const Shape *b);
bool shape_is_static(const Shape *s);
/* Product of the static dims; dynamic dims counted as 1. */
int64_t shape_static_numel(const Shape *s);

/* ---- the graph (ir.c) ------------------------------------------------- */

typedef enum {
#define OP(e, name, mn, mx, cls) OP_##e,
#include "ops.def"
#undef OP
} Op;

/* The number of ops. Not a member of Op, so that a switch over every op (with no default:)
 * that misses one is a -Wswitch warning rather than a silent fall-through; typed Op so that
 * it still serves as "no op". */
enum {
  OP_TABLE_ROWS = 0
#define OP(e, name, mn, mx, cls) +1
#include "ops.def"
#undef OP
};
#define OP_COUNT ((Op)OP_TABLE_ROWS)

typedef enum { OPC_LEAF, OPC_UNARY, OPC_BINARY, OPC_OTHER } OpClass;

typedef struct {
  const char *name;
  int min_args, max_args;
  OpClass cls;
} OpInfo;

extern const OpInfo op_info[OP_COUNT];
Op op_from_name(const char *name); /* OP_COUNT if unknown */

typedef struct {
  const char *file;
  int line, col; /* 1-based; line 0: no location */
} SrcLoc;

typedef struct Node Node;
struct Node {
  Op op;
  int id;       /* SSA number (%id), unique in the graph, increasing in node order */
  DType dtype;
  Shape shape;
  int nargs;
  Node **args;
  const char *name; /* INPUT: input name; WEIGHT: tensor name in the weights file */
  /* WEIGHT read from a pre-quantized fp8 checkpoint (`weight w : [N, K] f8e4m3 scale`): the
   * tensor `name` holds fp8 codes of type `stored`, the tensor `scale` one positive scale per
   * output row (per channel) or one for the tensor (which one is the checkpoint's business:
   * ir/prequant.h). The node's value is code * scale in f32, so dtype is DT_F32. DT_NONE and
   * NULL for every other node. Passes keep both (interp.c's contract says when the stored
   * codes themselves feed an fp8 matrix product). */
  DType stored;
  const char *scale;
  double fval;      /* SCALAR: value; RMSNORM, LAYERNORM: eps */
  int64_t ival[2];  /* SLICE: offset, length; CONCAT: axis; INTERLEAVE: group rows */
  SrcLoc loc;       /* source of the expression (for #line and diagnostics) */
  const char *var;  /* DSL name last bound to this value, if any (for readable dumps) */
  int sublayer;     /* FFN sublayer index (passes/ffn_recognize.c) or -1 */
  int group;        /* kernel group (passes/fuse.c) or -1: a load-time value or a leaf */
  bool konst;       /* a weight, a scalar, or computed only from those (evaluated at load) */
  bool dead;        /* removed by a pass; skipped by walkers, dropped by ir_compact */
  void *aux;        /* owned by the pass that is running (scratch) */
};

typedef struct {
  const char *name;
  Node *node;
} Output;

typedef enum { PREC_DEFAULT, PREC_ACCUMULATE, PREC_NORM, PREC_MATMUL, PREC_WEIGHTS, PREC_COUNT } PrecClass;

extern const char *const prec_class_names[PREC_COUNT]; /* "default", "accumulate", ... */

/* The precision policy: one optional setting per class. */
typedef struct {
  DType type[PREC_COUNT]; /* DT_NONE: not set */
  int group;              /* PREC_WEIGHTS: group size for i4 (0: per output channel) */
  SrcLoc loc[PREC_COUNT]; /* where each was set (line 0: command line or unset) */
} Precision;

/* `fuse ffn A..B`: merge sublayers first .. last-1. */
typedef struct {
  int first, last;
  SrcLoc loc;
} FuseRequest;

typedef struct {
  const char *name;
  SrcLoc loc;
} DimSym;

typedef struct Graph {
  Arena *arena;
  const char *model;  /* model NAME */
  const char *file;   /* source file, for #line */
  DimSym *dims;       /* dynamic dims */
  int ndims;
  PtrVec nodes;       /* Node*, topological (creation) order */
  Output *outputs;
  int noutputs;
  int capoutputs;     /* outputs grows geometrically (a file may have 40,000 outputs) */
  Precision prec;
  FuseRequest *fuse;
  int nfuse;
  int next_id;
  bool backward;      /* a backward graph (passes/grad.c): its products may read constant [K, N] weights as
                         they lie on sm_90 (passes/fuse.c: weight_as_it_lies); forward programs keep theirs */
} Graph;

#define GRAPH_NODE(g, i) ((Node *)(g)->nodes.items[i])

Graph *graph_create(const char *model, const char *file); /* owns a fresh arena */
void graph_destroy(Graph *g);
int graph_add_dim(Graph *g, const char *name, SrcLoc loc);  /* returns the symbol index */
int graph_find_dim(const Graph *g, const char *name);      /* -1 if none */
void graph_add_output(Graph *g, const char *name, Node *n);

/* Node constructors. They do NOT check operands: call ir_infer first (the front end does,
 * to report errors with source locations); ir_verify checks whole graphs. */
Node *ir_node(Graph *g, Op op, DType dt, Shape shape, Node **args, int nargs, SrcLoc loc);
Node *ir_input(Graph *g, const char *name, Shape shape, DType dt, SrcLoc loc);
/* Returns the existing node if the tensor name is already used with the same type and
 * shape; NULL (and sets *conflict) if it is used with another type or shape. */
Node *ir_weight(Graph *g, const char *tensor, Shape shape, DType dt, SrcLoc loc, Node **conflict);
Node *ir_scalar(Graph *g, double v, DType dt, SrcLoc loc);

/* Shape inference for op applied to args, with the op's parameters (ival) taken from
 * `proto` (may be NULL for ops that have none). On success fills *out and returns true; on
 * failure writes a message (no location) to err and returns false. Element types are
 * decided by the precision rules (frontend/sema.c), not here. Used by the front end, the
 * passes and the verifier, so the shape rules exist once. */
bool ir_infer_shape(const Graph *g, Op op, Node *const *args, int nargs, const Node *proto,
                    Shape *out, char *err, size_t errlen);

/* "[T, 4096]" into buf (dynamic dims by name, static dims as numbers). */
const char *shape_str(const Graph *g, const Shape *s, char *buf, size_t len);

/* Stable text form of the graph (for --emit ir and golden tests). */
void ir_print(const Graph *g, FILE *out);

/* Structural checks: operand counts, ids increasing, operands before users, shapes as
 * ir_infer_shape says, element types set, outputs present, load-time ops applied only to
 * weights. Returns 0 if valid, else writes the first problem to err and returns -1. */
int ir_verify(const Graph *g, char *err, size_t errlen);

/* True if n is a weight or computed only from weights and scalars (evaluated at load). */
static inline bool ir_is_const(const Node *n) { return n->konst; }
/* Replace operand i of n (keeps n->konst up to date). */
void ir_set_arg(Node *n, int i, Node *arg);
/* Every use of `from` (operands and outputs) now uses `to`. */
void ir_replace_uses(Graph *g, Node *from, Node *to);
/* ir_replace_uses for n pairs at once, in one walk over the graph (a chain a -> b -> c
 * ends at c): a pass that replaces a node per layer stays linear in the model. */
void ir_replace_uses_batch(Graph *g, Node *const *from, Node *const *to, int n);

/* Drop dead nodes (and nodes no output depends on) and renumber nothing: ids stay. */
void ir_compact(Graph *g);
/* Restore a topological order after a pass appended nodes that earlier nodes now use,
 * keeping the existing order wherever it is valid, and renumber the ids in that order.
 * Returns 0. */
int ir_toposort(Graph *g);

#endif
