/* sema.c: from the syntax tree to a checked IR graph.
 *
 * One walk over the statements in source order. Blocks are inlined at each call (their
 * body is walked again with the call's arguments bound), loops are unrolled (the body is
 * walked once per iteration), and every expression becomes IR nodes right away, so a
 * shape or type error is reported at the operator that causes it, with the shapes of that
 * particular call or iteration.
 *
 * Names (dsl.md "Statements", and our decisions where it is silent):
 *   - dims, consts, inputs, weights, blocks and bound values share one namespace;
 *   - declaring a name twice in one scope is an error; `N = EXPR` rebinds (shadows) freely;
 *   - each block call and each loop iteration opens a scope. A binding inside a loop whose
 *     name is visible from outside it updates that outer name (so `x = f(x)` carries to
 *     the next iteration and after the loop); a new name stays inside the iteration;
 *   - a block body sees its parameters, its own names, and the top-level declarations
 *     (dims, consts, inputs, weights, blocks) as declared, not the top level's bindings.
 *
 * Values are tensors (an IR node), compile-time numbers (literals, consts, static dims,
 * loop variables, integer block arguments; folded when combined) or poison. Poison is the
 * value of anything whose error was already reported: operations on it yield poison
 * without a word, so each mistake is reported once.
 *
 * Element types: inputs and weights as declared; every computed value has the "value
 * type" V (`precision default`, else the inputs' common type); cast gives its type;
 * transpose and slices keep their operand's; numbers become f32 scalars.
 */
#include "ast.h"
#include "ir/size_limits.h"
#include "ir/fnv.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Hostile or mistaken input (a loop to a billion, blocks that call each other in a
 * doubling chain) must end in an error, fast. Real models are far below these. */
#define FE_MAX_NODES 200000     /* IR nodes after unrolling and inlining */
#define FE_MAX_WORK 500000      /* statements and expressions walked */
#define FE_MAX_TRIPS 10000      /* iterations of one loop */
#define FE_MAX_RECURSION 1000   /* nested walks: expressions, statements, block calls */

/* ---- values and names ---- */

typedef enum { VAL_POISON, VAL_TENSOR, VAL_NUM, VAL_DYNDIM, VAL_BLOCK } ValKind;

typedef struct Sym Sym;

typedef struct {
  ValKind kind;
  Node *node; /* VAL_TENSOR */
  Num num;    /* VAL_NUM */
  int dim;    /* VAL_DYNDIM: symbol index */
  Sym *block; /* VAL_BLOCK */
} Val;

typedef enum { D_BOUND, D_DIM, D_CONST, D_INPUT, D_WEIGHT, D_BLOCK, D_PARAM, D_LOOPVAR } DeclKind;

struct Sym {
  const char *name; /* points into the syntax tree, which outlives the walk */
  DeclKind decl;
  Span where;    /* first declaration or binding */
  Val val;       /* current value */
  Val decl_val;  /* as declared: what a block body sees of a top-level declaration */
  Stmt *block;   /* D_BLOCK */
  bool called;   /* D_BLOCK: inlined at least once */
  bool active;   /* D_BLOCK: being inlined now (a call of it again is recursion) */
  Sym *next;
};

typedef struct Scope Scope;
struct Scope {
  Sym *syms;
  Scope *parent;
  bool frame; /* the top level or a block body: name lookups stop here */
  /* Past SCOPE_LIST_MAX names, also an open-addressing table of syms (cap a power of two):
   * a file with 100,000 bindings took 168 s with the list alone. */
  Sym **table;
  int cap, len;
};
#define SCOPE_LIST_MAX 16

typedef struct {
  const char *name;
  Node *node;
} WeightSlot;

typedef struct {
  const SourceFile *src;
  Diags *d;
  Graph *g;       /* where nodes go (a scratch graph while checking uncalled blocks) */
  Graph *real;    /* the result */
  const char *file;
  Scope *top, *cur;
  bool lenient;   /* the parser reported errors: stay quiet about their likely echoes */
  bool stop;      /* a limit was hit: unwind */
  long work;
  int recursion;
  DType vtype;    /* V */
  Precision prec; /* the policy in force: the file's first valid setting per class, or the command line's */
  bool cli[PREC_COUNT];
  /* file settings met so far in the walk (conflicts are reported at the later statement) */
  bool file_set[PREC_COUNT];
  DType file_type[PREC_COUNT];
  int file_group;
  int file_line[PREC_COUNT];
  Stmt *model;    /* first `model` statement */
  Sym *calls[FE_MAX_RECURSION + 2]; /* the blocks being inlined, outermost first */
  int ncalls;
  int noutput_stmts;
  int *output_lines; /* parallel to g->outputs */
  int *output_slots;  /* indices into g->outputs + 1 (0: empty) by name, open addressing */
  int output_cap;     /* a power of two, at least twice noutputs */
  WeightSlot *weights; /* open addressing by tensor name */
  int nweights, capweights;
} Sema;

static Val poison(void) { return (Val){.kind = VAL_POISON}; }
static Val tensor(Node *n) { return (Val){.kind = VAL_TENSOR, .node = n}; }
static Val number(double v) { return (Val){.kind = VAL_NUM, .num = {v, 0, false}}; }
static Val integer(int64_t v) { return (Val){.kind = VAL_NUM, .num = {(double)v, v, true}}; }

static void *xcalloc(size_t n, size_t size) { return ffn_xcalloc(n, size); }

/* ---- diagnostics ---- */

static bool error_at(Sema *s, Span at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool error_at(Sema *s, Span at, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return diag_error(s->d, s->src, (SrcLoc){s->src->name, at.line, at.col}, "%s", msg);
}

#define note(s, ...) diag_note((s)->d, __VA_ARGS__)

static SrcLoc loc_of(Sema *s, Span at) { return (SrcLoc){s->file, at.line, at.col}; }

static void suggest_note(Sema *s, Suggest *sg) {
  if (sg->best)
    note(s, "did you mean `%s`?", sg->best);
}

typedef struct {
  char *p;
  size_t len, cap;
} Buf;

static void buf_add(Buf *b, const char *s, size_t n) {
  if (b->len + n + 1 > b->cap) {
    b->cap = (b->len + n + 1) * 2;
    b->p = ffn_xrealloc(b->p, b->cap);
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}

/* ---- built-in functions ---- */

typedef enum { B_UNARY, B_GATED, B_RMSNORM, B_LAYERNORM, B_CHUNK, B_CAST } BuiltinKind;

typedef struct {
  const char *name;
  BuiltinKind kind;
  Op op;
  int min_args, max_args;
  const char *usage;
} Builtin;

/* The unary ops marked BUILTIN in ops.def are `name(x)`; the rest have rules of their own. */
#define BUILTIN_ROW_BUILTIN(e, math) {#math, B_UNARY, OP_##e, 1, 1, #math "(x)"},
#define BUILTIN_ROW_NONE(e, math)
static const Builtin builtins[] = {
#define UNARY_OP(e, math, dsl) BUILTIN_ROW_##dsl(e, math)
#include "ir/ops.def"
#undef UNARY_OP
    {"swiglu", B_GATED, OP_SILU, 2, 2, "swiglu(a, b)"},
    {"geglu", B_GATED, OP_GELU, 2, 2, "geglu(a, b)"},
    {"rmsnorm", B_RMSNORM, OP_RMSNORM, 2, 3, "rmsnorm(x, g[, eps])"},
    {"layernorm", B_LAYERNORM, OP_LAYERNORM, 2, 4, "layernorm(x, g[, b][, eps])"},
    {"chunk", B_CHUNK, OP_SLICE, 2, 2, "a, b = chunk(x, 2)"},
    {"cast", B_CAST, OP_CAST, 2, 2, "cast(x, bf16)"},
};
#undef BUILTIN_ROW_BUILTIN
#undef BUILTIN_ROW_NONE
#define NBUILTINS (int)(sizeof builtins / sizeof builtins[0])

static const Builtin *find_builtin(const char *name) {
  for (int i = 0; i < NBUILTINS; i++)
    if (strcmp(builtins[i].name, name) == 0)
      return &builtins[i];
  return NULL;
}

#define DEFAULT_EPS 1e-5

/* ---- element types ---- */

/* The types the language knows (dsl.md "Types"); i8 and i4 only for `precision weights`. */
static const char *const dsl_types[] = {"f32", "f16", "bf16", "f8e4m3", "f8e5m2", "i8", "i4"};

DType dsl_dtype(const char *name) {
  for (size_t i = 0; i < sizeof dsl_types / sizeof dsl_types[0]; i++)
    if (strcmp(dsl_types[i], name) == 0)
      return dtype_from_name(name);
  return DT_NONE;
}

bool is_value_type(DType t) {
  return t == DT_F32 || t == DT_F16 || t == DT_BF16 || t == DT_F8E4M3 || t == DT_F8E5M2;
}

/* A type for a tensor declaration or a cast; reports and returns DT_NONE if not one. */
static DType tensor_dtype(Sema *s, const char *name, Span at) {
  DType t = dsl_dtype(name);
  if (is_value_type(t))
    return t;
  if (t == DT_I8 || t == DT_I4) {
    if (error_at(s, at, "%s is not a tensor type here", name))
      note(s, "i8 and i4 are weight storage chosen by `precision weights`; declare weights with their checkpoint "
              "type");
    return DT_NONE;
  }
  if (error_at(s, at, "unknown element type `%s`", name)) {
    Suggest sg = {NULL, 99, name};
    for (int i = 0; i < 5; i++)
      suggest_consider(&sg, dsl_types[i]);
    if (sg.best)
      suggest_note(s, &sg);
    else
      note(s, "the element types are f32, f16, bf16, f8e4m3 and f8e5m2");
  }
  return DT_NONE;
}

/* bf16 and f16 both widen to f32; the f8 formats both fit f16 exactly. */
static DType widen(DType a, DType b) {
  if (a == DT_NONE || a == b)
    return b;
  if (b == DT_NONE)
    return a;
  int ra = a == DT_F32 ? 3 : dtype_is_f8(a) ? 1 : 2, rb = b == DT_F32 ? 3 : dtype_is_f8(b) ? 1 : 2;
  if (ra != rb)
    return ra > rb ? a : b;
  return ra == 2 ? DT_F32 : DT_F16;
}

/* ---- precision statements (the rules are in precision_policy.c) ---- */

/* The setting of a `precision` statement, or false (reported when report is set). */
static bool prec_of_stmt(Sema *s, Stmt *st, bool report, PrecClass *cls, DType *eff, int *group) {
  int c = prec_class_from_name(st->name);
  if (c < 0) {
    if (report && error_at(s, st->name_span, "unknown precision class `%s`", st->name)) {
      Suggest sg = {NULL, 99, st->name};
      for (int i = 0; i < PREC_COUNT; i++)
        suggest_consider(&sg, prec_class_names[i]);
      if (sg.best)
        suggest_note(s, &sg);
      else
        note(s, "the classes are default, accumulate, norm, matmul and weights");
    }
    return false;
  }
  DType t = dsl_dtype(st->dtype);
  if (t == DT_NONE) {
    if (report && error_at(s, st->dtype_span, "unknown element type `%s`", st->dtype)) {
      Suggest sg = {NULL, 99, st->dtype};
      for (size_t i = 0; i < sizeof dsl_types / sizeof dsl_types[0]; i++)
        suggest_consider(&sg, dsl_types[i]);
      suggest_note(s, &sg);
    }
    return false;
  }
  int64_t g = -1;
  if (st->has_num) {
    if (strcmp(st->key, "group") != 0) {
      if (report)
        error_at(s, st->key_span, "unknown precision option `%s`; the only option is `group=N` (for i4 weights)",
                 st->key);
      return false;
    }
    g = st->num.is_int ? st->num.ival : 0;
  }
  char buf[160];
  const char *why = prec_problem((PrecClass)c, t, -1, eff, buf, sizeof buf);
  Span at = st->dtype_span;
  if (!why && g >= 0) { /* the type is fine: the group is what is wrong, if anything */
    why = prec_problem((PrecClass)c, t, g, eff, buf, sizeof buf);
    at = st->num_span;
  }
  if (why) {
    if (report)
      error_at(s, at, "%s", why);
    return false;
  }
  *cls = (PrecClass)c;
  *group = g > 0 ? (int)g : 0;
  return true;
}

/* ---- scopes ---- */

static uint64_t hash_str(const char *p);

static Sym *scope_find(Scope *sc, const char *name) {
  if (sc->table) {
    for (size_t i = hash_str(name) & (size_t)(sc->cap - 1); sc->table[i]; i = (i + 1) & (size_t)(sc->cap - 1))
      if (strcmp(sc->table[i]->name, name) == 0)
        return sc->table[i];
    return NULL;
  }
  for (Sym *y = sc->syms; y; y = y->next)
    if (strcmp(y->name, name) == 0)
      return y;
  return NULL;
}

/* Names are unique in a scope (declare and bind look first), so no slot is replaced. */
static void table_put(Sym **table, int cap, Sym *y) {
  size_t i = hash_str(y->name) & (size_t)(cap - 1);
  while (table[i])
    i = (i + 1) & (size_t)(cap - 1);
  table[i] = y;
}

static Sym *scope_add(Scope *sc, const char *name, DeclKind decl, Span where, Val v) {
  Sym *y = xcalloc(1, sizeof *y);
  *y = (Sym){.name = name, .decl = decl, .where = where, .val = v, .decl_val = v, .next = sc->syms};
  sc->syms = y;
  sc->len++;
  if (sc->len > SCOPE_LIST_MAX && 2 * sc->len > sc->cap) { /* (re)build at twice the size */
    free(sc->table);
    sc->cap = sc->cap ? 2 * sc->cap : 4 * SCOPE_LIST_MAX;
    sc->table = xcalloc((size_t)sc->cap, sizeof *sc->table);
    for (Sym *o = sc->syms; o; o = o->next)
      table_put(sc->table, sc->cap, o);
  } else if (sc->table) {
    table_put(sc->table, sc->cap, y);
  }
  return y;
}

static void push_scope(Sema *s, Scope *sc, bool frame) {
  *sc = (Scope){.parent = s->cur, .frame = frame};
  s->cur = sc;
}

static void pop_scope(Sema *s, Scope *sc) {
  free(sc->table);
  for (Sym *y = sc->syms, *next; y; y = next) {
    next = y->next;
    free(y);
  }
  s->cur = sc->parent;
}

/* The frame (top level or block body) the current scope belongs to. */
static Scope *frame_of(Scope *sc) {
  while (!sc->frame)
    sc = sc->parent;
  return sc;
}

/* The value a name has here, or NULL if it is not visible. */
static Sym *lookup(Sema *s, const char *name, Val *out) {
  Scope *sc;
  for (sc = s->cur;; sc = sc->parent) {
    Sym *y = scope_find(sc, name);
    if (y) {
      *out = y->val;
      return y;
    }
    if (sc->frame)
      break;
  }
  if (sc != s->top) {
    Sym *y = scope_find(s->top, name);
    if (y && y->decl != D_BOUND) {
      *out = y->decl_val;
      return y;
    }
  }
  return NULL;
}

/* Names visible here, for suggestions. */
static void suggest_visible(Sema *s, Suggest *sg, bool blocks_only) {
  Scope *sc;
  for (sc = s->cur;; sc = sc->parent) {
    for (Sym *y = sc->syms; y; y = y->next)
      if (!blocks_only || y->decl == D_BLOCK)
        suggest_consider(sg, y->name);
    if (sc->frame)
      break;
  }
  if (sc != s->top)
    for (Sym *y = s->top->syms; y; y = y->next)
      if (y->decl != D_BOUND && (!blocks_only || y->decl == D_BLOCK))
        suggest_consider(sg, y->name);
}

static void unknown_name(Sema *s, const char *name, Span at, const char *what) {
  if (s->lenient)
    return;
  if (find_builtin(name) && strcmp(what, "name") == 0) {
    error_at(s, at, "`%s` is a built-in function; call it as `%s(...)`", name, name);
    return;
  }
  if (!error_at(s, at, "unknown %s `%s`", what, name))
    return;
  Suggest sg = {NULL, 99, name};
  suggest_visible(s, &sg, false);
  if (sg.best) {
    suggest_note(s, &sg);
    return;
  }
  Sym *top = scope_find(s->top, name);
  if (top && frame_of(s->cur) != s->top)
    note(s, "a block sees its parameters, its own names and the top-level dims, consts, inputs and weights, not "
            "the values bound at the top level; pass `%s` as a parameter",
         name);
}

/* Declares a name in the current scope; a name already there is an error. */
static Sym *declare(Sema *s, const char *name, Span at, DeclKind decl, Val v) {
  Sym *old = scope_find(s->cur, name);
  if (old) {
    if (error_at(s, at, "`%s` is already declared", name))
      note(s, "first %s at line %d", old->decl == D_BOUND ? "bound" : "declared", old->where.line);
    return NULL;
  }
  return scope_add(s->cur, name, decl, at, v);
}

/* `name = value`: rebinds the nearest visible name of this frame, or binds a new one here. */
/* node->var: the first DSL name of a value, for readable dumps. Not while checking an
 * uncalled block: the scratch graph's arena would not outlive the string. */
static void name_node(Sema *s, Node *n, const char *name) {
  if (n && !n->var && s->g == s->real)
    n->var = arena_strdup(s->g->arena, name);
}

static void bind(Sema *s, const char *name, Span at, Val v) {
  if (v.kind == VAL_TENSOR)
    name_node(s, v.node, name);
  for (Scope *sc = s->cur;; sc = sc->parent) {
    Sym *y = scope_find(sc, name);
    if (y) {
      y->val = v;
      return;
    }
    if (sc->frame)
      break;
  }
  scope_add(s->cur, name, D_BOUND, at, v);
}

/* ---- limits ---- */

static bool limit(Sema *s, Span at, const char *what) {
  if (!s->stop) {
    s->stop = true;
    error_at(s, at, "%s", what);
  }
  return true;
}

static bool count_work(Sema *s, Span at) {
  if (s->stop)
    return true;
  if (++s->work > FE_MAX_WORK) {
    char msg[160];
    snprintf(msg, sizeof msg, "the model is too large to unroll: more than %d statements and expressions walked",
             FE_MAX_WORK);
    return limit(s, at, msg);
  }
  return false;
}

/* ---- IR construction ---- */

static Node *new_node(Sema *s, Op op, DType dt, Shape shape, Node **args, int nargs, Span at) {
  if (s->g->nodes.len >= FE_MAX_NODES) {
    char msg[160];
    snprintf(msg, sizeof msg, "the model is too large: more than %d IR nodes after unrolling loops and inlining blocks",
             FE_MAX_NODES);
    limit(s, at, msg);
    return NULL;
  }
  return ir_node(s->g, op, dt, shape, args, nargs, loc_of(s, at));
}

/* The shape rule of op, reported at `at`; then the node. NULL: reported. */
static Node *make(Sema *s, Op op, DType dt, Node **args, int nargs, const Node *proto, Span at) {
  Shape shape;
  char why[512];
  if (!ir_infer_shape(s->g, op, args, nargs, proto, &shape, why, sizeof why)) {
    error_at(s, at, "%s", why);
    return NULL;
  }
  return new_node(s, op, dt, shape, args, nargs, at);
}

static Val made(Node *n) { return n ? tensor(n) : poison(); }

/* A number used where a tensor is needed becomes an f32 scalar. */
static Node *as_node(Sema *s, Val v, Span at) {
  if (v.kind == VAL_TENSOR)
    return v.node;
  Node *n = new_node(s, OP_SCALAR, DT_F32, (Shape){0}, NULL, 0, at);
  if (n)
    n->fval = v.num.value;
  return n;
}

static uint64_t hash_str(const char *p) { return ffn_fnv_str(p, FFN_FNV_OFFSET); }

/* Same as ir_weight (one node per tensor name, a second declaration must agree), with a
 * hash table: a loop may declare thousands of weights. */
static Node *make_weight(Sema *s, const char *tensor_name, Shape shape, DType dt, DType stored, const char *scale,
                         Span at) {
  if (s->nweights * 2 >= s->capweights) {
    int cap = s->capweights ? s->capweights * 2 : 64;
    WeightSlot *slots = xcalloc((size_t)cap, sizeof *slots);
    for (int i = 0; i < s->capweights; i++)
      if (s->weights[i].name) {
        size_t j = hash_str(s->weights[i].name) & (size_t)(cap - 1);
        while (slots[j].name)
          j = (j + 1) & (size_t)(cap - 1);
        slots[j] = s->weights[i];
      }
    free(s->weights);
    s->weights = slots;
    s->capweights = cap;
  }
  size_t j = hash_str(tensor_name) & (size_t)(s->capweights - 1);
  for (; s->weights[j].name; j = (j + 1) & (size_t)(s->capweights - 1)) {
    if (strcmp(s->weights[j].name, tensor_name) != 0)
      continue;
    Node *old = s->weights[j].node;
    bool same_scale = old->stored == stored && (!scale || strcmp(old->scale, scale) == 0);
    if (old->dtype == dt && shape_eq(&old->shape, &shape) && same_scale)
      return old;
    char a[128], b[128];
    DType old_codes = old->stored ? old->stored : old->dtype, codes = stored ? stored : dt;
    if (old_codes == codes && shape_eq(&old->shape, &shape)) { /* the codes agree, their scales do not */
      if (error_at(s, at, "tensor \"%s\" is already declared %s", tensor_name,
                   old->stored == DT_NONE ? "without a scale" : stored == DT_NONE ? "with a scale" : "with another scale tensor"))
        note(s, "first declared at line %d%s%s%s", old->loc.line, old->stored == DT_NONE ? "" : ", with scale \"",
             old->stored == DT_NONE ? "" : old->scale, old->stored == DT_NONE ? "" : "\"");
      return NULL;
    }
    if (error_at(s, at, "tensor \"%s\" is already declared as %s %s; here it is %s %s", tensor_name,
                 shape_str(s->g, &old->shape, a, sizeof a), dtype_name(old->stored ? old->stored : old->dtype),
                 shape_str(s->g, &shape, b, sizeof b), dtype_name(stored ? stored : dt)))
      note(s, "first declared at line %d", old->loc.line);
    return NULL;
  }
  Node *n = new_node(s, OP_WEIGHT, dt, shape, NULL, 0, at);
  if (!n)
    return NULL;
  n->name = arena_strdup(s->g->arena, tensor_name);
  n->stored = stored;
  n->scale = scale ? arena_strdup(s->g->arena, scale) : NULL;
  s->weights[j] = (WeightSlot){n->name, n};
  s->nweights++;
  return n;
}

/* ---- expressions ---- */

static Val eval(Sema *s, Expr *e);

static const char *kind_words(Val v) {
  switch (v.kind) {
  case VAL_TENSOR:
    return "a tensor";
  case VAL_NUM:
    return v.num.is_int ? "an integer" : "a number";
  case VAL_DYNDIM:
    return "a dynamic dim";
  case VAL_BLOCK:
    return "a block";
  default:
    return "an error";
  }
}

static Val eval_name(Sema *s, Expr *e) {
  Val v;
  if (!lookup(s, e->name, &v)) {
    unknown_name(s, e->name, e->span, "name");
    return poison();
  }
  if (v.kind == VAL_DYNDIM) {
    error_at(s, e->span, "`%s` is a dynamic dim: its size is known only at run time, so it cannot be used as a value",
             e->name);
    return poison();
  }
  if (v.kind == VAL_BLOCK) {
    error_at(s, e->span, "`%s` is a block; call it as `%s(...)`", e->name, e->name);
    return poison();
  }
  return v;
}

/* Both operands numbers: computed now. Integers stay integers under + - * (so `i + 1`
 * can name a layer); anything else is a decimal. */
static Val fold(Sema *s, Expr *e, Num a, Num b) {
  int64_t r;
  switch (e->op) {
  case '+':
    if (a.is_int && b.is_int && !__builtin_add_overflow(a.ival, b.ival, &r))
      return integer(r);
    return number(a.value + b.value);
  case '-':
    if (a.is_int && b.is_int && !__builtin_sub_overflow(a.ival, b.ival, &r))
      return integer(r);
    return number(a.value - b.value);
  case '*':
    if (a.is_int && b.is_int && !__builtin_mul_overflow(a.ival, b.ival, &r))
      return integer(r);
    return number(a.value * b.value);
  case '/':
    if (b.value == 0) {
      error_at(s, e->op_span, "division by zero");
      return poison();
    }
    return number(a.value / b.value);
  default:
    error_at(s, e->op_span, "a matrix product needs tensors, not two numbers");
    return poison();
  }
}

static bool is_weight(const Node *n) { return n->op == OP_WEIGHT; }

/* The pre-quantized weight an operand is (w) or reads transposed (w^T), or NULL. */
static Node *prequant_operand(Node *n, bool *transposed) {
  *transposed = n->op == OP_TRANSPOSE;
  if (*transposed)
    n = n->args[0];
  return n->op == OP_WEIGHT && n->stored != DT_NONE ? n : NULL;
}

static void prec_note(Sema *s, PrecClass cls) {
  char set[64];
  prec_setting_str(set, sizeof set, cls, s->prec.type[cls], s->prec.group);
  if (s->prec.loc[cls].line > 0)
    note(s, "`precision %s %s` is set at line %d", prec_class_names[cls], set, s->prec.loc[cls].line);
  else
    note(s, "`--precision %s=%s` is given on the command line", prec_class_names[cls], set);
}

/* The rules for pre-quantized operands (dsl: "Pre-quantized fp8 weights"): under `precision
 * matmul T` of the codes' own type, w^T is computed with the stored codes; with no operand
 * policy a pre-quantized operand is dequantized to the other operand's type (a cast, done
 * once at load time); anything that would quantize the codes again is an error. Returns
 * false if reported; may replace *a or *b by its dequantized form. */
static bool prequant_matmul(Sema *s, Expr *e, Node **a, Node **b) {
  bool ta, tb;
  Node *wa = prequant_operand(*a, &ta), *wb = prequant_operand(*b, &tb);
  if (!wa && !wb)
    return true;
  DType mm = s->prec.type[PREC_MATMUL], wq = s->prec.type[PREC_WEIGHTS];
  Node *w = wb ? wb : wa;
  const char *name = w->var ? w->var : w->name;
  if (wq != DT_NONE) {
    if (error_at(s, e->op_span, "weight `%s` is pre-quantized (%s codes and scales); `precision weights %s` would "
                 "quantize it again", name, dtype_name(w->stored), dtype_name(wq)))
      prec_note(s, PREC_WEIGHTS);
    return false;
  }
  if (dtype_is_f8(mm) && wb && wb->stored != mm) {
    if (error_at(s, e->op_span, "weight `%s` holds %s codes; `precision matmul %s` would quantize it again",
                 name, dtype_name(wb->stored), dtype_name(mm))) {
      prec_note(s, PREC_MATMUL);
      note(s, "with `precision matmul %s` the product uses the stored codes and scales", dtype_name(wb->stored));
    }
    return false;
  }
  if (dtype_is_f8(mm) && wb && !tb) {
    if (error_at(s, e->op_span, "the pre-quantized weight `%s` is used as `h @ %s`: its scales are per row of %s, "
                 "along this product's inner dimension, so its codes cannot serve as stored", name, name, name))
      note(s, "checkpoints store linear weights [out, in], used as `h @ %s^T`", name);
    return false;
  }
  if (mm != DT_NONE)
    return true; /* both operands are quantized or rounded to the policy's type */
  Node **sides[2] = {a, b};
  Node *ws[2] = {wa, wb};
  bool tr[2] = {ta, tb};
  for (int i = 0; i < 2; i++) {
    DType to = (*sides[1 - i])->dtype;
    if (!ws[i] || to == DT_F32)
      continue;
    Node *cast = make(s, OP_CAST, to, &ws[i], 1, NULL, e->op_span);
    if (cast && tr[i])
      cast = make(s, OP_TRANSPOSE, to, &cast, 1, NULL, e->op_span);
    if (!cast)
      return false;
    Expr *operand = i ? e->rhs : e->lhs;
    if (tr[i] && operand->kind == EX_TRANSPOSE) /* a `w^T` written here: nothing else reads it */
      (*sides[i])->dead = true;
    *sides[i] = cast;
  }
  return true;
}

static Val eval_matmul(Sema *s, Expr *e, Val va, Val vb) {
  Node *a = as_node(s, va, e->lhs->op_span), *b = a ? as_node(s, vb, e->rhs->op_span) : NULL;
  if (!a || !b)
    return poison();
  Node *args[2] = {a, b};
  Shape shape;
  char why[512];
  if (!ir_infer_shape(s->g, OP_MATMUL, args, 2, NULL, &shape, why, sizeof why)) {
    if (!error_at(s, e->op_span, "%s", why))
      return poison();
    /* The usual mistake: a checkpoint weight used in the other layout. */
    const Shape *sa = &a->shape, *sb = &b->shape;
    if (sa->rank >= 1 && sb->rank == 2) {
      Dim k = sa->d[sa->rank - 1];
      char *lhs = span_text(s->src, e->lhs->span);
      if (e->rhs->kind == EX_NAME && is_weight(b) && dim_eq(k, sb->d[1]))
        note(s, "%s is stored [out, in]; did you mean `%s @ %s^T`?", e->rhs->name, lhs, e->rhs->name);
      else if (e->rhs->kind == EX_TRANSPOSE && e->rhs->lhs->kind == EX_NAME && b->op == OP_TRANSPOSE &&
               is_weight(b->args[0]) && dim_eq(k, b->args[0]->shape.d[0]))
        note(s, "%s is stored [in, out]; did you mean `%s @ %s`?", e->rhs->lhs->name, lhs, e->rhs->lhs->name);
      free(lhs);
    }
    return poison();
  }
  if (!prequant_matmul(s, e, &a, &b))
    return poison();
  args[0] = a, args[1] = b;
  if (s->prec.type[PREC_MATMUL] == DT_NONE && s->prec.type[PREC_WEIGHTS] == DT_NONE && a->dtype != b->dtype) {
    if (error_at(s, e->op_span, "matrix product operands have different element types %s and %s", dtype_name(a->dtype),
                 dtype_name(b->dtype))) {
      char *lhs = span_text(s->src, e->lhs->span), *rhs = span_text(s->src, e->rhs->span);
      note(s, "convert one side, as in `%s @ cast(%s, %s)`, or choose the operand type with `precision matmul`", lhs, rhs,
           dtype_name(a->dtype));
      free(lhs);
      free(rhs);
    }
    return poison();
  }
  /* i4 weights are quantized in groups along K: K must be a whole number of groups */
  Node *w = is_weight(b) ? b : b->op == OP_TRANSPOSE && is_weight(b->args[0]) ? b->args[0] : NULL;
  int group = s->prec.group;
  if (w && s->prec.type[PREC_WEIGHTS] == DT_I4 && group > 0) {
    Dim k = a->shape.d[a->shape.rank - 1];
    if (k.sym < 0 && k.size % group != 0) {
      if (error_at(s, e->op_span, "the inner dimension %lld of this matrix product is not a multiple of the i4 group size %d",
                   (long long)k.size, group)) {
        if (s->prec.loc[PREC_WEIGHTS].line > 0)
          note(s, "`precision weights i4 group=%d` is set at line %d", group, s->prec.loc[PREC_WEIGHTS].line);
        else
          note(s, "`--precision weights=i4,group=%d` is given on the command line", group);
      }
      return poison();
    }
  }
  return made(new_node(s, OP_MATMUL, s->vtype, shape, args, 2, e->op_span));
}

static Val eval_binary(Sema *s, Expr *e) {
  Val a = eval(s, e->lhs), b = eval(s, e->rhs);
  if (a.kind == VAL_POISON || b.kind == VAL_POISON)
    return poison();
  if (a.kind == VAL_NUM && b.kind == VAL_NUM)
    return fold(s, e, a.num, b.num);
  if (e->op == '@')
    return eval_matmul(s, e, a, b);
  Op op = e->op == '+' ? OP_ADD : e->op == '-' ? OP_SUB : e->op == '*' ? OP_MUL : OP_DIV;
  Node *na = as_node(s, a, e->lhs->op_span), *nb = na ? as_node(s, b, e->rhs->op_span) : NULL;
  if (!na || !nb)
    return poison();
  Node *args[2] = {na, nb};
  return made(make(s, op, s->vtype, args, 2, NULL, e->op_span));
}

/* chunk(x, n) for `a, b, ... = chunk(x, n)`: n slices of the last dim. */
static bool eval_chunk(Sema *s, Expr *call, int nnames, Val *parts) {
  if (call->nargs != 2) {
    if (error_at(s, call->op_span, "`chunk` takes 2 arguments, got %d", call->nargs))
      note(s, "usage: a, b = chunk(x, 2)");
    return false;
  }
  Val x = eval(s, call->args), n = eval(s, call->args->next);
  if (x.kind == VAL_POISON || n.kind == VAL_POISON)
    return false;
  Span nspan = call->args->next->span;
  if (n.kind != VAL_NUM || !n.num.is_int || n.num.ival < 2) {
    error_at(s, nspan, "the number of parts of `chunk` must be an integer of at least 2");
    return false;
  }
  if (n.num.ival != nnames) {
    error_at(s, call->op_span, "chunk(..., %lld) gives %lld parts, but %d names are bound", (long long)n.num.ival,
             (long long)n.num.ival, nnames);
    return false;
  }
  if (x.kind != VAL_TENSOR || x.node->shape.rank < 1) {
    error_at(s, call->args->span, "`chunk` splits the last dim of a tensor; this is %s",
             x.kind == VAL_TENSOR ? "a scalar" : kind_words(x));
    return false;
  }
  const Shape *sh = &x.node->shape;
  Dim last = sh->d[sh->rank - 1];
  char buf[128];
  if (last.sym >= 0) {
    error_at(s, call->op_span, "cannot chunk %s: its last dim %s is dynamic", shape_str(s->g, sh, buf, sizeof buf),
             s->g->dims[last.sym].name);
    return false;
  }
  if (last.size % n.num.ival != 0) {
    error_at(s, call->op_span, "cannot chunk %s into %lld equal parts: %lld is not a multiple of %lld",
             shape_str(s->g, sh, buf, sizeof buf), (long long)n.num.ival, (long long)last.size, (long long)n.num.ival);
    return false;
  }
  int64_t len = last.size / n.num.ival;
  for (int i = 0; i < nnames; i++) {
    Node proto = {.ival = {i * len, len}};
    Node *part = make(s, OP_SLICE, x.node->dtype, &x.node, 1, &proto, call->op_span);
    if (!part)
      return false;
    part->ival[0] = i * len;
    part->ival[1] = len;
    parts[i] = tensor(part);
  }
  return true;
}

static Val call_block(Sema *s, Sym *blk, Val *args, int nargs);

/* The arguments of a call of builtin b evaluated into v[] (a cast's type name skipped) and
 * their expressions into arg[]; their number, or -1 (reported, or an argument already poisoned). */
static int builtin_args(Sema *s, Expr *e, const Builtin *b, Val v[4], Expr *arg[4]) {
  int n = 0;
  bool bad = false;
  for (Expr *a = e->args; a; a = a->next, n++) {
    if (n < 4)
      arg[n] = a;
    if (b->kind == B_CAST && n == 1)
      continue; /* a type name, not a value */
    Val x = eval(s, a);
    if (n < 4)
      v[n] = x;
    bad |= x.kind == VAL_POISON;
  }
  if (n < b->min_args || n > b->max_args) {
    bool shown;
    if (b->min_args == b->max_args)
      shown = error_at(s, e->op_span, "`%s` takes %d argument%s, got %d", b->name, b->min_args,
                       b->min_args == 1 ? "" : "s", n);
    else
      shown = error_at(s, e->op_span, "`%s` takes %d to %d arguments, got %d", b->name, b->min_args, b->max_args, n);
    if (shown)
      note(s, "usage: %s", b->usage);
    return -1;
  }
  return bad ? -1 : n;
}

/* rmsnorm(x, g[, eps]) and layernorm(x, g[, bias][, eps]) with n arguments v[] at arg[]. */
static Val eval_norm(Sema *s, Expr *e, const Builtin *b, const Val *v, Expr *const *arg, int n) {
  Node *args[3];
  int nargs = 2;
  double eps = DEFAULT_EPS;
  for (int i = 0; i < 2; i++) {
    if (v[i].kind != VAL_TENSOR) {
      error_at(s, arg[i]->span, "the %s of `%s` must be a tensor, not %s", i ? "gain" : "input", b->name,
               kind_words(v[i]));
      return poison();
    }
    args[i] = v[i].node;
  }
  for (int i = 2; i < n; i++) {
    bool bias_slot = b->kind == B_LAYERNORM && i == 2;
    if (v[i].kind == VAL_TENSOR && bias_slot) {
      args[nargs++] = v[i].node;
    } else if (v[i].kind == VAL_NUM && (i == n - 1)) {
      eps = v[i].num.value;
    } else {
      error_at(s, arg[i]->span, "the %s argument of `%s` must be %s, not %s", i == 2 ? "third" : "fourth", b->name,
               bias_slot ? "the bias tensor" : "the epsilon, a number", kind_words(v[i]));
      if (bias_slot && v[i].kind == VAL_NUM)
        note(s, "usage: %s", b->usage);
      return poison();
    }
  }
  if (!(eps > 0) || isinf(eps)) {
    error_at(s, arg[n - 1]->span, "the epsilon of `%s` must be a positive number", b->name);
    return poison();
  }
  Node *node = make(s, b->op, s->vtype, args, nargs, NULL, e->op_span);
  if (node)
    node->fval = eps;
  return made(node);
}

/* cast(x, TYPE): x as it is where it has that type already. */
static Val eval_cast(Sema *s, Expr *e, const Builtin *b, const Val *v, Expr *const *arg) {
  Expr *t = arg[1];
  if (t->kind != EX_NAME) {
    if (error_at(s, t->span, "the second argument of `cast` must be an element type"))
      note(s, "usage: %s", b->usage);
    return poison();
  }
  DType dt = tensor_dtype(s, t->name, t->span);
  if (dt == DT_NONE)
    return poison();
  Node *x = as_node(s, v[0], arg[0]->span);
  if (!x)
    return poison();
  if (x->dtype == dt)
    return tensor(x);
  return made(make(s, OP_CAST, dt, &x, 1, NULL, e->op_span));
}

static Val eval_builtin(Sema *s, Expr *e, const Builtin *b) {
  if (b->kind == B_CHUNK) {
    if (error_at(s, e->op_span, "`chunk` can only be used on the right of a binding of several names"))
      note(s, "usage: a, b = chunk(x, 2)");
    return poison();
  }
  Val v[4];
  Expr *arg[4];
  int n = builtin_args(s, e, b, v, arg);
  if (n < 0)
    return poison();
  Span at = e->op_span;
  switch (b->kind) {
  case B_UNARY: {
    Node *x = as_node(s, v[0], arg[0]->span);
    return x ? made(make(s, b->op, s->vtype, &x, 1, NULL, at)) : poison();
  }
  case B_GATED: { /* swiglu(a, b) = silu(a) * b */
    Node *x = as_node(s, v[0], arg[0]->span), *gate = x ? make(s, b->op, s->vtype, &x, 1, NULL, at) : NULL;
    Node *y = gate ? as_node(s, v[1], arg[1]->span) : NULL;
    if (!y)
      return poison();
    Node *args[2] = {gate, y};
    return made(make(s, OP_MUL, s->vtype, args, 2, NULL, at));
  }
  case B_RMSNORM:
  case B_LAYERNORM:
    return eval_norm(s, e, b, v, arg, n);
  case B_CAST:
    return eval_cast(s, e, b, v, arg);
  case B_CHUNK:
    break;
  }
  return poison();
}

/* The block a call names (y and callee: lookup's result), or NULL after saying why not. */
static Sym *called_block(Sema *s, Expr *e, const Sym *y, Val callee) {
  if (!y) {
    if (!s->lenient && error_at(s, e->op_span, "unknown function `%s`", e->name)) {
      Suggest sg = {NULL, 99, e->name};
      for (int i = 0; i < NBUILTINS; i++)
        suggest_consider(&sg, builtins[i].name);
      suggest_visible(s, &sg, true);
      suggest_note(s, &sg);
    }
    return NULL;
  }
  if (callee.kind != VAL_BLOCK) {
    if (callee.kind != VAL_POISON)
      error_at(s, e->op_span, "`%s` is %s, not a function", e->name, kind_words(callee));
    return NULL;
  }
  return callee.block;
}

static bool arity_ok(Sema *s, Expr *e, Sym *blk, int n) {
  int nparams = 0;
  for (Ident *p = blk->block->names; p; p = p->next)
    nparams++;
  if (n == nparams)
    return true;
  if (error_at(s, e->op_span, "block `%s` takes %d argument%s, got %d", e->name, nparams, nparams == 1 ? "" : "s", n)) {
    char *sig = span_text(s->src, (Span){0, 0, blk->block->name_span.off, blk->block->close.off});
    note(s, "`%s` is declared at line %d: %s", e->name, blk->where.line, sig);
    free(sig);
  }
  return false;
}

/* A call of blk while blk is being inlined: the error, and the cycle from blk back to this call. */
static void recursion_error(Sema *s, Expr *e, Sym *blk) {
  if (!error_at(s, e->op_span, "recursive call of block `%s`", e->name))
    return;
  Buf cycle = {0};
  int from = 0;
  while (s->calls[from] != blk)
    from++;
  for (int i = from; i < s->ncalls; i++) {
    buf_add(&cycle, i > from ? " calls `" : "`", i > from ? 8 : 1);
    buf_add(&cycle, s->calls[i]->name, strlen(s->calls[i]->name));
    buf_add(&cycle, "`", 1);
  }
  if (s->ncalls - from > 1)
    note(s, "%s calls `%s`; blocks are inlined at each call, so they cannot be recursive", cycle.p, e->name);
  else
    note(s, "`%s` calls itself; blocks are inlined at each call, so they cannot be recursive", e->name);
  free(cycle.p);
}

static Val eval_call(Sema *s, Expr *e) {
  const Builtin *b = find_builtin(e->name);
  if (b)
    return eval_builtin(s, e, b);
  Val callee;
  Sym *y = lookup(s, e->name, &callee);
  Val *args = xcalloc((size_t)e->nargs, sizeof *args);
  int n = 0;
  bool bad = false;
  for (Expr *a = e->args; a; a = a->next) { /* the arguments first: their errors come before the call's */
    args[n] = eval(s, a);
    bad |= args[n].kind == VAL_POISON;
    n++;
  }
  Sym *blk = called_block(s, e, y, callee);
  Val v = poison();
  if (blk && arity_ok(s, e, blk, n)) {
    if (blk->active)
      recursion_error(s, e, blk);
    else if (!bad)
      v = call_block(s, blk, args, n);
  }
  free(args);
  return v;
}

static Val eval(Sema *s, Expr *e) {
  if (count_work(s, e->span))
    return poison();
  if (++s->recursion > FE_MAX_RECURSION) {
    limit(s, e->span, "blocks, loops and expressions nested too deeply (after inlining blocks)");
    s->recursion--;
    return poison();
  }
  Val v = poison();
  switch (e->kind) {
  case EX_NUM:
    v = (Val){.kind = VAL_NUM, .num = e->num};
    break;
  case EX_NAME:
    v = eval_name(s, e);
    break;
  case EX_NEG: {
    Val x = eval(s, e->lhs);
    if (x.kind == VAL_NUM) {
      v = x.num.is_int && x.num.ival != INT64_MIN ? integer(-x.num.ival) : number(-x.num.value);
    } else if (x.kind == VAL_TENSOR) {
      v = made(make(s, OP_NEG, s->vtype, &x.node, 1, NULL, e->op_span));
    }
    break;
  }
  case EX_BINARY:
    v = eval_binary(s, e);
    break;
  case EX_TRANSPOSE: {
    Val x = eval(s, e->lhs);
    if (x.kind == VAL_NUM)
      error_at(s, e->op_span, "transpose (^T) needs a 2-D tensor, not a number");
    else if (x.kind == VAL_TENSOR)
      v = made(make(s, OP_TRANSPOSE, x.node->dtype, &x.node, 1, NULL, e->op_span));
    break;
  }
  case EX_CALL:
    v = eval_call(s, e);
    break;
  case EX_ERROR:
    break;
  }
  s->recursion--;
  return s->stop ? poison() : v;
}

/* ---- statements ---- */

static void exec(Sema *s, Stmt *st);

static void exec_list(Sema *s, Stmt *list) {
  for (Stmt *st = list; st && !s->stop; st = st->next)
    exec(s, st);
}

static Val call_block(Sema *s, Sym *blk, Val *args, int nargs) {
  Stmt *def = blk->block;
  blk->called = true;
  blk->active = true;
  s->calls[s->ncalls++] = blk;
  Scope frame;
  push_scope(s, &frame, true);
  int i = 0;
  for (Ident *p = def->names; p && i < nargs; p = p->next, i++)
    if (!scope_find(&frame, p->name)) /* a repeated parameter is reported at the definition */
      scope_add(&frame, p->name, D_PARAM, p->span, args[i]);
  Val result = poison();
  for (Stmt *st = def->body; st && !s->stop; st = st->next) {
    if (st->kind == ST_RETURN) {
      if (!st->next) /* misplaced returns are reported at the definition */
        result = eval(s, st->expr);
      continue;
    }
    exec(s, st);
  }
  pop_scope(s, &frame);
  blk->active = false;
  s->ncalls--;
  return result;
}

/* `[T, 4096]`: dim names, integer literals, integer consts. */
static bool eval_shape(Sema *s, DimItem *dims, Shape *out) {
  *out = (Shape){0};
  bool ok = true;
  for (DimItem *d = dims; d; d = d->next) {
    if (out->rank == FFN_MAX_RANK) {
      error_at(s, d->span, "more than %d dims: ffnc supports tensors of rank up to %d", FFN_MAX_RANK, FFN_MAX_RANK);
      return false;
    }
    Dim dim = dim_static(0);
    if (!d->name) {
      if (!d->num.is_int || d->num.ival <= 0) {
        error_at(s, d->span, "a dim size must be a positive integer");
        ok = false;
      } else if (d->num.ival > FFN_MAX_DIM) {
        error_at(s, d->span, "dim size %lld is above the limit of %lld (kernels index with 32-bit int)",
                 (long long)d->num.ival, (long long)FFN_MAX_DIM);
        ok = false;
      }
      dim = dim_static(d->num.ival);
    } else {
      Val v;
      if (!lookup(s, d->name, &v)) {
        unknown_name(s, d->name, d->span, "dim");
        ok = false;
      } else if (v.kind == VAL_DYNDIM) {
        dim = dim_dynamic(v.dim);
      } else if (v.kind == VAL_NUM && v.num.is_int && v.num.ival > 0) {
        dim = dim_static(v.num.ival);
      } else if (v.kind != VAL_POISON) {
        error_at(s, d->span, "`%s` is %s; a dim in [ ] is a dim name, a positive integer or an integer const", d->name,
                 v.kind == VAL_NUM && v.num.is_int ? "not positive" : kind_words(v));
        ok = false;
      } else {
        ok = false;
      }
    }
    out->d[out->rank++] = dim;
  }
  return ok;
}

/* An integer a loop or fuse range needs; false if reported (or poison). */
static bool eval_bound(Sema *s, Bound *b, int64_t *out) {
  if (!b->name) {
    if (!b->num.is_int) {
      error_at(s, b->span, "a range bound must be an integer, not %g", b->num.value);
      return false;
    }
    *out = b->num.ival;
    return true;
  }
  Val v;
  if (!lookup(s, b->name, &v)) {
    unknown_name(s, b->name, b->span, "name");
    return false;
  }
  if (v.kind == VAL_NUM && v.num.is_int) {
    *out = v.num.ival;
    return true;
  }
  if (v.kind == VAL_NUM)
    error_at(s, b->span, "a range bound must be an integer, but `%s` is %g", b->name, v.num.value);
  else if (v.kind != VAL_POISON)
    error_at(s, b->span, "a range bound must be an integer literal or an integer const, but `%s` is %s", b->name,
             kind_words(v));
  return false;
}

static bool is_ident(const char *p, size_t n) {
  if (n == 0 || !(p[0] == '_' || (p[0] >= 'A' && p[0] <= 'Z') || (p[0] >= 'a' && p[0] <= 'z')))
    return false;
  for (size_t i = 1; i < n; i++)
    if (!(p[i] == '_' || (p[i] >= 'A' && p[i] <= 'Z') || (p[i] >= 'a' && p[i] <= 'z') || (p[i] >= '0' && p[i] <= '9')))
      return false;
  return true;
}

/* The tensor name of a weight: its string with `{name}` replaced by integers in scope.
 * Works on the source text (not the decoded string) to know each `{`'s column. */
static char *interpolate(Sema *s, Span str_span);

static char *tensor_name(Sema *s, Stmt *st) {
  if (!st->has_str)
    return strdup(st->name);
  return interpolate(s, st->str_span);
}

/* The `{...}` at p (reported at `at`) whose text, without the braces, is the n bytes at p + 1:
 * the integer its name holds, appended to out; false after saying why not. */
static bool interpolate_name(Sema *s, Span at, const char *p, size_t n, Buf *out) {
  char name[128];
  if (!is_ident(p + 1, n) || n >= sizeof name) {
    if (error_at(s, at, "`{...}` in a tensor name must hold a name"))
      note(s, "like \"model.layers.{i}.mlp.up_proj.weight\", where `i` is a loop variable, an integer block "
              "parameter or an integer const");
    return false;
  }
  memcpy(name, p + 1, n);
  name[n] = 0;
  Val v;
  if (!lookup(s, name, &v)) {
    if (!s->lenient && error_at(s, at, "unknown name `%s` in `{%s}`", name, name)) {
      Suggest sg = {NULL, 99, name};
      suggest_visible(s, &sg, false);
      suggest_note(s, &sg);
    }
    return false;
  }
  if (v.kind == VAL_NUM && v.num.is_int) {
    char num[32];
    snprintf(num, sizeof num, "%lld", (long long)v.num.ival);
    buf_add(out, num, strlen(num));
    return true;
  }
  if (v.kind == VAL_NUM)
    error_at(s, at, "`{%s}` needs an integer, but `%s` is %g", name, name, v.num.value);
  else if (v.kind != VAL_POISON)
    error_at(s, at, "`{%s}` needs an integer, but `%s` is %s", name, name, kind_words(v));
  if (v.kind != VAL_POISON)
    note(s, "a loop variable, an integer block parameter or an integer const");
  return false;
}

/* A string literal's text with `{name}` replaced (tensor names of weights and scales). */
static char *interpolate(Sema *s, Span str_span) {
  const char *p = s->src->text + str_span.off + 1, *end = s->src->text + str_span.end;
  Buf out = {0};
  buf_add(&out, "", 0);
  int col = str_span.col + 1;
  bool ok = true;
  while (p < end && *p != '"') {
    if (*p == '\\' && p + 1 < end) { /* escapes as the lexer decoded them (bad ones were reported there) */
      if (p[1] == '"' || p[1] == '\\')
        buf_add(&out, p + 1, 1);
      else
        buf_add(&out, p, 2);
      p += 2;
      col += 2;
      continue;
    }
    if (*p != '{') {
      buf_add(&out, p, 1);
      if ((*p & 0xC0) != 0x80)
        col++;
      p++;
      continue;
    }
    Span at = {str_span.line, col, 0, 0};
    const char *close = p + 1;
    while (close < end && *close != '}' && *close != '"' && *close != '{')
      close++;
    if (close >= end || *close != '}') {
      error_at(s, at, "unclosed `{` in a tensor name");
      ok = false;
      break;
    }
    ok &= interpolate_name(s, at, p, (size_t)(close - p - 1), &out);
    col += (int)(close + 1 - p);
    p = close + 1;
  }
  if (!ok) {
    free(out.p);
    return NULL;
  }
  return out.p;
}

static bool at_top(Sema *s, Stmt *st, const char *what) {
  if (s->cur == s->top)
    return true;
  error_at(s, st->span, "`%s` is only allowed at the top level, not inside a block or loop", what);
  return false;
}

/* A declared tensor that no run could hold is an error here, at its declaration, rather
 * than at run time: a weight needs a static shape, and the static dims of any tensor (a
 * dynamic dim counts as 1, its least) must stay within ir/size_limits.h. */
static bool decl_within_limits(Sema *s, Stmt *st, const Shape *shape, bool input) {
  int64_t size[FFN_MAX_RANK], numel;
  for (int d = 0; d < shape->rank; d++) {
    if (shape->d[d].sym >= 0 && !input) {
      error_at(s, st->name_span, "weight `%s` has the dynamic dim `%s`: weights are read from a file and need static shapes",
               st->name, s->g->dims[shape->d[d].sym].name);
      return false;
    }
    size[d] = shape->d[d].sym >= 0 ? 1 : shape->d[d].size;
  }
  ShapeLimit why = shape_check_limits(shape->rank, size, &numel);
  if (why != SHAPE_OK) {
    char buf[128];
    error_at(s, st->name_span, "%s `%s` %s is too large: %s", input ? "input" : "weight", st->name,
             shape_str(s->g, shape, buf, sizeof buf), shape_limit_words(why));
    return false;
  }
  return true;
}

/* `scale` after a weight's type: a pre-quantized fp8 weight (prequant.h); false if reported. */
static bool weight_scale(Sema *s, Stmt *st, DType dt) {
  if (strcmp(st->scale.word, "scale") != 0) {
    if (error_at(s, st->scale.span, "unexpected `%s` after the element type of weight `%s`", st->scale.word, st->name))
      note(s, "a pre-quantized fp8 weight is declared `weight %s : [N, K] f8e4m3 scale [\"SCALE\"] = \"TENSOR\"`",
           st->name);
    return false;
  }
  if (!dtype_is_f8(dt)) {
    if (error_at(s, st->scale.span, "`scale` is for fp8 weights (f8e4m3, f8e5m2); weight `%s` is %s", st->name,
                 dtype_name(dt)))
      note(s, "a %s weight is read as stored, without a scale tensor", dtype_name(dt));
    return false;
  }
  return true;
}

static void exec_decl_tensor(Sema *s, Stmt *st) {
  bool input = st->kind == ST_INPUT;
  if (input && !at_top(s, st, "input"))
    return;
  Shape shape;
  bool ok = eval_shape(s, st->dims, &shape) && decl_within_limits(s, st, &shape, input);
  DType dt = tensor_dtype(s, st->dtype, st->dtype_span);
  Node *n = NULL;
  if (ok && dt != DT_NONE) {
    if (input) {
      n = new_node(s, OP_INPUT, dt, shape, NULL, 0, st->name_span);
      if (n)
        n->name = arena_strdup(s->g->arena, st->name);
    } else {
      char *name = tensor_name(s, st), *scale = NULL;
      DType stored = DT_NONE;
      if (name && st->scale.word && weight_scale(s, st, dt)) {
        stored = dt;
        dt = DT_F32; /* the value: code * scale */
        scale = st->scale.str ? interpolate(s, st->scale.str_span) : NULL;
        if (!st->scale.str) {
          size_t len = strlen(name);
          scale = ffn_xmalloc(len + sizeof "_scale");
          memcpy(scale, name, len);
          memcpy(scale + len, "_scale", sizeof "_scale");
        }
      }
      if (name && (!st->scale.word || scale))
        n = make_weight(s, name, shape, dt, stored, scale, st->name_span);
      free(name);
      free(scale);
    }
  }
  name_node(s, n, st->name);
  declare(s, st->name, st->name_span, input ? D_INPUT : D_WEIGHT, made(n));
}

static void exec_precision(Sema *s, Stmt *st) {
  if (!at_top(s, st, "precision"))
    return;
  PrecClass cls;
  DType t;
  int group;
  if (!prec_of_stmt(s, st, true, &cls, &t, &group))
    return;
  if (s->cli[cls]) /* the command line replaces the file's setting of this class */
    return;
  if (s->file_set[cls] && (s->file_type[cls] != t || (cls == PREC_WEIGHTS && s->file_group != group))) {
    char before[64];
    prec_setting_str(before, sizeof before, cls, s->file_type[cls], s->file_group);
    if (error_at(s, st->span, "conflicting precision statements"))
      note(s, "first set to %s at line %d", before, s->file_line[cls]);
    return;
  }
  if (!s->file_set[cls]) {
    s->file_set[cls] = true;
    s->file_type[cls] = t;
    s->file_line[cls] = st->span.line;
    if (cls == PREC_WEIGHTS)
      s->file_group = group;
  }
  /* weight-only quantization and fp8 matrix products are two different kernels */
  PrecClass other = cls == PREC_WEIGHTS ? PREC_MATMUL : cls == PREC_MATMUL ? PREC_WEIGHTS : PREC_COUNT;
  if (other == PREC_COUNT || (cls == PREC_MATMUL && !dtype_is_f8(t)))
    return;
  DType ot = s->cli[other] ? s->prec.type[other] : s->file_set[other] ? s->file_type[other] : DT_NONE;
  if (ot == DT_NONE || (other == PREC_MATMUL && !dtype_is_f8(ot)))
    return;
  DType wt = cls == PREC_WEIGHTS ? t : ot, mt = cls == PREC_MATMUL ? t : ot;
  if (error_at(s, st->span, "`precision weights %s` excludes `precision matmul %s`", dtype_name(wt), dtype_name(mt))) {
    if (s->cli[other])
      note(s, "`precision %s %s` comes from the command line", prec_class_names[other], dtype_name(ot));
    else
      note(s, "`precision %s %s` is set at line %d", prec_class_names[other], dtype_name(ot), s->file_line[other]);
  }
}

static void exec_fuse(Sema *s, Stmt *st) {
  if (!at_top(s, st, "fuse"))
    return;
  int64_t a, b;
  if (!eval_bound(s, &st->lo, &a) || !eval_bound(s, &st->hi, &b))
    return;
  if (a < 0) {
    error_at(s, st->lo.span, "sublayers are numbered from 0; `fuse ffn` cannot start at %lld", (long long)a);
    return;
  }
  if (b < a + 2 || b > INT_MAX) {
    if (error_at(s, st->span, "`fuse ffn %lld..%lld` names fewer than two sublayers", (long long)a, (long long)b))
      note(s, "the range is half-open: `fuse ffn A..B` merges sublayers A to B-1, so B must be at least A + 2");
    return;
  }
  Graph *g = s->real;
  FuseRequest *f = arena_alloc(g->arena, sizeof *f * (size_t)(g->nfuse + 1));
  if (g->nfuse)
    memcpy(f, g->fuse, sizeof *f * (size_t)g->nfuse);
  f[g->nfuse++] = (FuseRequest){(int)a, (int)b, loc_of(s, st->span)};
  g->fuse = f;
}

/* The output named `name`, or -1: a hash lookup (40,000 outputs took > 6 GB and minutes). */
static int find_output(Sema *s, const char *name) {
  for (size_t i = s->output_cap ? hash_str(name) & (size_t)(s->output_cap - 1) : 0;
       s->output_cap && s->output_slots[i]; i = (i + 1) & (size_t)(s->output_cap - 1))
    if (strcmp(s->real->outputs[s->output_slots[i] - 1].name, name) == 0)
      return s->output_slots[i] - 1;
  return -1;
}

static void add_output_slot(Sema *s, int index) {
  if (2 * (index + 1) > s->output_cap) {
    free(s->output_slots);
    s->output_cap = s->output_cap ? 2 * s->output_cap : 64;
    s->output_slots = xcalloc((size_t)s->output_cap, sizeof(int));
    for (int k = 0; k < index; k++)
      add_output_slot(s, k);
  }
  size_t i = hash_str(s->real->outputs[index].name) & (size_t)(s->output_cap - 1);
  while (s->output_slots[i])
    i = (i + 1) & (size_t)(s->output_cap - 1);
  s->output_slots[i] = index + 1;
}

static void exec_output(Sema *s, Stmt *st) {
  if (!at_top(s, st, "output"))
    return;
  s->noutput_stmts++;
  Val v;
  if (!lookup(s, st->name, &v)) {
    if (s->lenient)
      return;
    if (error_at(s, st->name_span, "`output %s`: no value is bound to `%s`", st->name, st->name)) {
      Suggest sg = {NULL, 99, st->name};
      suggest_visible(s, &sg, false);
      suggest_note(s, &sg);
    }
    return;
  }
  if (v.kind == VAL_POISON)
    return;
  if (v.kind != VAL_TENSOR) {
    error_at(s, st->name_span, "`%s` is %s; an output must be a tensor", st->name, kind_words(v));
    return;
  }
  Graph *g = s->real;
  int i = find_output(s, st->name);
  if (i >= 0) {
    if (error_at(s, st->name_span, "duplicate output `%s`", st->name))
      note(s, "first output at line %d", s->output_lines[i]);
    return;
  }
  graph_add_output(g, st->name, v.node);
  if (g->noutputs > g->capoutputs / 2 || !s->output_lines) /* capoutputs grows geometrically */
    s->output_lines = ffn_xrealloc(s->output_lines, sizeof(int) * (size_t)g->capoutputs);
  s->output_lines[g->noutputs - 1] = st->span.line;
  add_output_slot(s, g->noutputs - 1);
}

static void exec_bind(Sema *s, Stmt *st) {
  int nnames = 0;
  for (Ident *n = st->names; n; n = n->next) {
    for (Ident *m = st->names; m != n; m = m->next)
      if (strcmp(m->name, n->name) == 0) {
        error_at(s, n->span, "`%s` appears twice on the left of `=`", n->name);
        for (Ident *k = st->names; k; k = k->next)
          bind(s, k->name, k->span, poison());
        return;
      }
    nnames++;
  }
  if (nnames == 1) {
    bind(s, st->name, st->name_span, eval(s, st->expr));
    return;
  }
  Val *parts = xcalloc((size_t)nnames, sizeof *parts);
  bool ok = false;
  Expr *e = st->expr;
  if (e->kind == EX_CALL && strcmp(e->name, "chunk") == 0) {
    ok = eval_chunk(s, e, nnames, parts);
  } else if (e->kind != EX_ERROR) {
    Val v = eval(s, e);
    if (v.kind != VAL_POISON && error_at(s, e->span, "binding %d names needs `chunk(x, %d)` on the right", nnames, nnames))
      note(s, "usage: a, b = chunk(x, 2)");
  }
  int i = 0;
  for (Ident *n = st->names; n; n = n->next, i++)
    bind(s, n->name, n->span, ok ? parts[i] : poison());
  free(parts);
}

static void exec_for(Sema *s, Stmt *st) {
  int64_t lo, hi;
  bool ok_lo = eval_bound(s, &st->lo, &lo), ok_hi = eval_bound(s, &st->hi, &hi);
  if (!ok_lo || !ok_hi)
    return;
  if (hi > lo && (uint64_t)hi - (uint64_t)lo > FE_MAX_TRIPS) {
    error_at(s, st->span, "this loop runs %llu times; ffnc unrolls at most %d iterations of a loop",
             (unsigned long long)((uint64_t)hi - (uint64_t)lo), FE_MAX_TRIPS);
    return;
  }
  for (int64_t i = lo; i < hi && !s->stop; i++) {
    Scope iter;
    push_scope(s, &iter, false);
    scope_add(&iter, st->name, D_LOOPVAR, st->name_span, integer(i));
    exec_list(s, st->body);
    pop_scope(s, &iter);
  }
}

/* A block's shape, checked where it is declared (its body is checked when inlined). */
static void check_returns(Sema *s, Stmt *list, const char *block, bool body_level) {
  for (Stmt *st = list; st; st = st->next) {
    if (st->kind == ST_RETURN && !(body_level && !st->next))
      error_at(s, st->span, "`return` must be the last statement of block `%s`", block);
    if (st->kind == ST_FOR)
      check_returns(s, st->body, block, false);
  }
}

static void exec_block(Sema *s, Stmt *st) {
  if (s->cur != s->top) {
    error_at(s, st->span, "blocks are declared at the top level, not inside a block or loop");
    return;
  }
  if (find_builtin(st->name)) {
    error_at(s, st->name_span, "`%s` is a built-in function; choose another name for this block", st->name);
    return;
  }
  for (Ident *p = st->names; p; p = p->next)
    for (Ident *q = st->names; q != p; q = q->next)
      if (strcmp(p->name, q->name) == 0)
        error_at(s, p->span, "parameter `%s` appears twice", p->name);
  if (!s->lenient) {
    Stmt *last = st->body;
    while (last && last->next)
      last = last->next;
    if (!last || last->kind != ST_RETURN)
      error_at(s, st->name_span, "block `%s` must end with `return EXPR`", st->name);
    check_returns(s, st->body, st->name, true);
  }
  Sym *y = declare(s, st->name, st->name_span, D_BLOCK, poison());
  if (y) {
    y->block = st;
    y->val = y->decl_val = (Val){.kind = VAL_BLOCK, .block = y};
  }
}

static void exec_model(Sema *s, Stmt *st, bool first) {
  if (s->model != st) {
    if (error_at(s, st->span, "duplicate `model` statement"))
      note(s, "the model is already named `%s` at line %d", s->model->name, s->model->span.line);
    return;
  }
  if (!first && !s->lenient)
    error_at(s, st->span, "`model` must be the first statement of the file");
}

static void exec(Sema *s, Stmt *st) {
  if (count_work(s, st->span))
    return;
  if (++s->recursion > FE_MAX_RECURSION) {
    limit(s, st->span, "blocks, loops and expressions nested too deeply (after inlining blocks)");
    s->recursion--;
    return;
  }
  switch (st->kind) {
  case ST_MODEL:
    if (at_top(s, st, "model"))
      exec_model(s, st, false);
    break;
  case ST_DIM: {
    if (!at_top(s, st, "dim"))
      break;
    Val v = poison();
    if (!st->has_num) {
      if (!scope_find(s->cur, st->name))
        v = (Val){.kind = VAL_DYNDIM, .dim = graph_add_dim(s->real, st->name, loc_of(s, st->name_span))};
    } else if (!st->num.is_int || st->num.ival <= 0) {
      error_at(s, st->num_span, "the size of dim `%s` must be a positive integer", st->name);
    } else if (st->num.ival > FFN_MAX_DIM) {
      error_at(s, st->num_span, "dim `%s` = %lld is above the limit of %lld (kernels index with 32-bit int)", st->name,
               (long long)st->num.ival, (long long)FFN_MAX_DIM);
    } else {
      v = integer(st->num.ival);
    }
    declare(s, st->name, st->name_span, D_DIM, v);
    break;
  }
  case ST_CONST:
    declare(s, st->name, st->name_span, D_CONST, (Val){.kind = VAL_NUM, .num = st->num});
    break;
  case ST_INPUT:
  case ST_WEIGHT:
    exec_decl_tensor(s, st);
    break;
  case ST_OUTPUT:
    exec_output(s, st);
    break;
  case ST_BIND:
    exec_bind(s, st);
    break;
  case ST_RETURN:
    if (frame_of(s->cur) == s->top && !s->lenient)
      error_at(s, st->span, "`return` outside a block");
    break;
  case ST_BLOCK:
    exec_block(s, st);
    break;
  case ST_FOR:
    exec_for(s, st);
    break;
  case ST_PRECISION:
    exec_precision(s, st);
    break;
  case ST_FUSE:
    exec_fuse(s, st);
    break;
  case ST_ERROR:
    break;
  }
  s->recursion--;
}

/* ---- the whole file ---- */

/* What later statements depend on, gathered before the walk: the model's name, and the
 * policy and the inputs' types that decide V (a `precision` line may follow its users). */
static void prepass(Sema *s, Stmt *program, const FrontendOptions *opt, const char **model) {
  DType inputs = DT_NONE;
  for (Stmt *st = program; st; st = st->next) {
    if (st->kind == ST_MODEL && !s->model) {
      s->model = st;
      *model = st->name;
    } else if (st->kind == ST_INPUT) {
      DType t = dsl_dtype(st->dtype);
      if (is_value_type(t))
        inputs = widen(inputs, t);
    } else if (st->kind == ST_PRECISION) {
      PrecClass cls;
      DType t;
      int group;
      if (prec_of_stmt(s, st, false, &cls, &t, &group) && s->prec.type[cls] == DT_NONE) {
        s->prec.type[cls] = t;
        s->prec.loc[cls] = loc_of(s, st->span);
        if (cls == PREC_WEIGHTS)
          s->prec.group = group;
      }
    }
  }
  for (int i = 0; opt && i < opt->nprec; i++) {
    PrecOverride o = opt->prec[i];
    char buf[160];
    DType eff;
    const char *why = o.cls < PREC_COUNT ? prec_problem(o.cls, o.type, o.group > 0 ? o.group : -1, &eff, buf, sizeof buf)
                                         : "unknown precision class";
    if (why) {
      diag_plain(s->d, "--precision %s=%s: %s", o.cls < PREC_COUNT ? prec_class_names[o.cls] : "?", dtype_name(o.type),
                 why);
      continue;
    }
    s->cli[o.cls] = true;
    s->prec.type[o.cls] = eff;
    s->prec.loc[o.cls] = (SrcLoc){0};
    if (o.cls == PREC_WEIGHTS)
      s->prec.group = o.group;
  }
  if (s->cli[PREC_WEIGHTS] && s->cli[PREC_MATMUL] && dtype_is_f8(s->prec.type[PREC_MATMUL]))
    diag_plain(s->d, "--precision weights=%s excludes --precision matmul=%s", dtype_name(s->prec.type[PREC_WEIGHTS]),
               dtype_name(s->prec.type[PREC_MATMUL]));
  s->vtype = s->prec.type[PREC_DEFAULT] != DT_NONE ? s->prec.type[PREC_DEFAULT] : inputs != DT_NONE ? inputs : DT_F32;
}

/* A block nobody calls is still checked, with unknown (poison) arguments, into a graph
 * that is thrown away: its mistakes are reported, its nodes do not end up in the model. */
static void check_uncalled_blocks(Sema *s) {
  Graph *scratch = NULL;
  for (Sym *y = s->top->syms; y && !s->stop; y = y->next) {
    if (y->decl != D_BLOCK || y->called || !y->block)
      continue;
    if (!scratch) {
      scratch = graph_create(s->real->model, s->real->file);
      for (int i = 0; i < s->real->ndims; i++)
        graph_add_dim(scratch, s->real->dims[i].name, s->real->dims[i].loc);
      s->g = scratch;
    }
    int nparams = 0;
    for (Ident *p = y->block->names; p; p = p->next)
      nparams++;
    Val *args = xcalloc((size_t)nparams, sizeof *args);
    call_block(s, y, args, nparams);
    free(args);
  }
  s->g = s->real;
  /* the weight table may point into the scratch graph: it dies with it */
  free(s->weights);
  s->weights = NULL;
  s->nweights = s->capweights = 0;
  graph_destroy(scratch);
}

static Graph *sema(const SourceFile *src, Stmt *program, bool lenient, const FrontendOptions *opt, Diags *d,
                    int errors_before) {
  Sema sema = {.src = src, .d = d, .lenient = lenient};
  Sema *s = &sema;
  const char *model = NULL;
  prepass(s, program, opt, &model);
  s->real = s->g = graph_create(model, src->name);
  s->file = s->g->file;
  s->prec.group = s->prec.type[PREC_WEIGHTS] == DT_I4 ? s->prec.group : 0;
  for (int c = 0; c < PREC_COUNT; c++)
    s->prec.loc[c].file = s->prec.loc[c].line ? s->file : NULL;
  s->g->prec = s->prec;

  Scope top;
  s->cur = NULL;
  push_scope(s, &top, true);
  s->top = &top;

  if (!program) {
    if (!lenient)
      diag_error(d, src, (SrcLoc){0}, "the file has no statements; it must start with `model NAME`");
  } else if (!s->model && !lenient && program->kind != ST_ERROR) {
    if (error_at(s, program->span, "the file must start with `model NAME`"))
      note(s, "for example `model llama3_8b_mlp`");
  }
  for (Stmt *st = program; st && !s->stop; st = st->next) {
    if (st->kind == ST_MODEL && st == program) {
      exec_model(s, st, true);
      continue;
    }
    exec(s, st);
  }
  if (!s->stop)
    check_uncalled_blocks(s);
  for (int i = 0; opt && i < opt->nfuse; i++) {
    FuseRequest f = opt->fuse[i];
    if (f.first < 0 || f.last < f.first + 2) {
      diag_plain(d, "--ffn-fusion %d..%d: the range must name at least two sublayers, numbered from 0", f.first, f.last);
      continue;
    }
    Graph *g = s->real;
    FuseRequest *fr = arena_alloc(g->arena, sizeof *fr * (size_t)(g->nfuse + 1));
    if (g->nfuse)
      memcpy(fr, g->fuse, sizeof *fr * (size_t)g->nfuse);
    fr[g->nfuse++] = (FuseRequest){f.first, f.last, {0}};
    g->fuse = fr;
  }
  if (s->noutput_stmts == 0 && !lenient && !s->stop && program) {
    if (s->model && error_at(s, s->model->name_span, "model `%s` has no outputs", s->model->name))
      note(s, "add `output NAME` for each value the model returns");
    else if (!s->model)
      diag_error(d, src, (SrcLoc){0}, "the model has no outputs; add `output NAME`");
  }
  pop_scope(s, &top);
  free(s->weights);
  free(s->output_lines);
  free(s->output_slots);

  Graph *g = s->real;
  if (d->nerrors > errors_before) {
    graph_destroy(g);
    return NULL;
  }
  char why[512];
  if (ir_verify(g, why, sizeof why) != 0) {
    diag_plain(d, "internal error: the front end built an invalid graph: %s", why);
    graph_destroy(g);
    return NULL;
  }
  return g;
}

Graph *frontend_compile_string(const char *text, size_t len, const char *name, const FrontendOptions *opt, Diags *d) {
  SourceFile src = {name ? name : "<input>", text ? text : "", text ? len : 0};
  if (src.len >= 3 && memcmp(src.text, "\xEF\xBB\xBF", 3) == 0) { /* a UTF-8 BOM (editors on Windows) */
    src.text += 3;
    src.len -= 3;
  }
  if (src.len > (size_t)INT_MAX / 2) {
    diag_plain(d, "%s is too large (%zu bytes)", src.name, src.len);
    return NULL;
  }
  int errors_before = d->nerrors, first_entry = d->nentries;
  ParseCtx ctx = {.src = &src, .diags = d};
  ast_parse(&ctx);
  Graph *g = sema(&src, ctx.program.head, ctx.syntax_errors > 0, opt, d, errors_before);
  stmts_free(ctx.program.head);
  diags_sort(d, first_entry);
  return g;
}

Graph *frontend_compile_file(const char *path, const FrontendOptions *opt, Diags *d) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    diag_plain(d, "cannot open %s: %s", path, strerror(errno));
    return NULL;
  }
  Buf text = {0};
  char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
    buf_add(&text, chunk, n);
  bool failed = ferror(f);
  fclose(f);
  if (failed) {
    diag_plain(d, "cannot read %s", path);
    free(text.p);
    return NULL;
  }
  Graph *g = frontend_compile_string(text.p ? text.p : "", text.len, path, opt, d);
  free(text.p);
  return g;
}
