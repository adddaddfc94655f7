/* util.h: small helpers shared by the interpreter tests: building graphs with the ir.h
 * constructors (shapes from ir_infer_shape, so the graphs are what the front end would
 * build), in-memory tensors served through the lookup callbacks, and checks. */
#ifndef FFNC_TESTS_INTERP_UTIL_H
#define FFNC_TESTS_INTERP_UTIL_H

#include "ir/interp.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static inline void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(1);
}

static const SrcLoc here = {"test.ffn", 1, 1};

static inline Shape shape_of(int rank, const int64_t *dims) {
  Shape s = {0};
  s.rank = rank;
  for (int i = 0; i < rank; i++)
    s.d[i] = dim_static(dims[i]);
  return s;
}
#define SHAPE(...) shape_of((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

static inline Node *weight(Graph *g, const char *name, Shape s, DType t) {
  Node *conflict;
  Node *n = ir_weight(g, name, s, t, here, &conflict);
  if (!n)
    die("weight %s declared twice with different shapes", name);
  return n;
}

/* op applied to args, shape from the shared shape rules; proto carries ival for those that
 * need it (slice, concat, interleave). */
static inline Node *node_p(Graph *g, Op op, DType t, const Node *proto, int nargs, Node **args) {
  Shape s;
  char err[256];
  if (!ir_infer_shape(g, op, args, nargs, proto, &s, err, sizeof err))
    die("building %s: %s", op_info[op].name, err);
  Node *n = ir_node(g, op, t, s, args, nargs, here);
  if (proto) {
    n->ival[0] = proto->ival[0];
    n->ival[1] = proto->ival[1];
    n->fval = proto->fval;
  }
  return n;
}

static inline Node *op1(Graph *g, Op op, DType t, Node *a) { return node_p(g, op, t, NULL, 1, (Node *[]){a}); }
static inline Node *op2(Graph *g, Op op, DType t, Node *a, Node *b) {
  return node_p(g, op, t, NULL, 2, (Node *[]){a, b});
}

static inline Node *norm(Graph *g, Op op, DType t, double eps, int nargs, Node **args) {
  Node proto = {0};
  proto.fval = eps;
  return node_p(g, op, t, &proto, nargs, args);
}

static inline Node *with_ival(Graph *g, Op op, DType t, int64_t i0, int64_t i1, int nargs, Node **args) {
  Node proto = {0};
  proto.ival[0] = i0;
  proto.ival[1] = i1;
  return node_p(g, op, t, &proto, nargs, args);
}

static inline void verify(const Graph *g) {
  char err[512];
  if (ir_verify(g, err, sizeof err))
    die("test graph does not verify: %s", err);
}

/* ---- tensors served by name ---- */

typedef struct {
  const char *name;
  RawTensor t;
} Entry;

typedef struct {
  Entry e[32];
  int n;
} Store;

/* Encodes vals (numel of them) into a fresh buffer of type t. */
static inline void put(Store *s, const char *name, DType t, int rank, const int64_t *shape, const double *vals) {
  if (s->n == 32)
    die("store full");
  Entry *e = &s->e[s->n++];
  e->name = name;
  e->t.dtype = t;
  e->t.rank = rank;
  size_t numel = 1;
  for (int i = 0; i < rank; i++) {
    e->t.shape[i] = shape[i];
    numel *= (size_t)shape[i];
  }
  e->t.nbytes = dtype_bytes(t, numel);
  void *buf = calloc(e->t.nbytes + 1, 1);
  for (size_t i = 0; i < numel; i++)
    dtype_store(t, buf, i, vals[i]);
  e->t.data = buf;
}
#define DIMS(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}
#define VALS(...) ((const double[]){__VA_ARGS__})

static inline void store_free(Store *s) {
  for (int i = 0; i < s->n; i++)
    free((void *)s->e[i].t.data);
  s->n = 0;
}

static inline int lookup(void *ctx, const char *name, RawTensor *out) {
  Store *s = ctx;
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->e[i].name, name) == 0) {
      *out = s->e[i].t;
      return 0;
    }
  return -1;
}

static inline int run(const Graph *g, Store *weights, Store *inputs, RefTensor *outs, char *err, size_t errlen) {
  InterpSources src = {lookup, weights, lookup, inputs};
  return interp_run(g, &src, outs, err, errlen);
}

/* Relative closeness; the expected values in the tests carry 10 significant digits. */
static inline bool close_to(double got, double want, double rel) {
  if (isnan(want))
    return isnan(got);
  return fabs(got - want) <= rel * fmax(1.0, fabs(want));
}

static inline void check_tensor(const char *what, const RefTensor *t, int rank, const int64_t *shape,
                                const double *want, double rel) {
  bool ok = t->rank == rank && t->data;
  for (int i = 0; ok && i < rank; i++)
    ok = t->shape[i] == shape[i];
  CHECK(ok, "%s: wrong shape (rank %d)", what, t->rank);
  if (!ok)
    return;
  for (int64_t i = 0; i < ref_numel(t); i++)
    CHECK(close_to(t->data[i], want[i], rel), "%s[%lld] = %.10g, expected %.10g", what, (long long)i,
          (double)t->data[i], want[i]);
}
#define EXPECT(what, t, rel, dims, ...) check_tensor(what, t, dims, VALS(__VA_ARGS__), rel)

static inline int finish(const char *name) { return check_result(name); }

#endif
