/* plan.c: plan utilities and its JSON form (the launch plan of AOT output).
 *
 * plan_from_json reads files that may have been tampered with, so it checks every index,
 * count and kind before the runtime relies on it.
 */
#include "plan.h"
#include "../ir/size_limits.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int64_t plan_numel(const Plan *p, int t, const int64_t *dims) {
  const PlanTensor *pt = &p->tensors[t];
  int64_t n = 1;
  for (int i = 0; i < pt->rank; i++)
    n *= pt->dims[i].sym >= 0 ? dims[pt->dims[i].sym] : pt->dims[i].size;
  return n;
}

void plan_destroy(Plan *p) {
  if (!p)
    return;
  arena_destroy(p->arena);
  free(p);
}

static const char *const kind_names[] = {"input", "output", "weight", "derived", "scratch"};

/* ---- to JSON ---- */

static json_t *dims_json(const Plan *p, const Dim *d, int n) {
  json_t *a = json_array();
  for (int i = 0; i < n; i++)
    json_array_append_new(a, d[i].sym >= 0 ? json_string(p->dim_names[d[i].sym]) : json_integer(d[i].size));
  return a;
}

static json_t *ints_json(const int *v, int n) {
  json_t *a = json_array();
  for (int i = 0; i < n; i++)
    json_array_append_new(a, json_integer(v[i]));
  return a;
}

static json_t *tensor_json(const Plan *p, const PlanTensor *t) {
  json_t *o = json_object();
  json_object_set_new(o, "kind", json_string(kind_names[t->kind]));
  json_object_set_new(o, "dtype", json_string(dtype_name(t->dtype)));
  json_object_set_new(o, "shape", dims_json(p, t->dims, t->rank));
  json_object_set_new(o, "index", json_integer(t->index));
  if (t->name)
    json_object_set_new(o, "name", json_string(t->name));
  json_object_set_new(o, "first", json_integer(t->first));
  json_object_set_new(o, "last", json_integer(t->last));
  json_object_set_new(o, "keep", json_boolean(t->keep));
  if (t->alias >= 0)
    json_object_set_new(o, "alias", json_integer(t->alias));
  if (t->stored != DT_NONE) {
    json_object_set_new(o, "stored", json_string(dtype_name(t->stored)));
    json_object_set_new(o, "scale", json_string(t->scale ? t->scale : ""));
  }
  return o;
}

static json_t *prep_json(const PrepStep *s) {
  json_t *o = json_object();
  json_object_set_new(o, "op", json_string(op_info[s->op].name));
  json_object_set_new(o, "out", json_integer(s->out));
  json_object_set_new(o, "args", ints_json(s->args, s->nargs));
  json_object_set_new(o, "ival", json_pack("[II]", (json_int_t)s->ival[0], (json_int_t)s->ival[1]));
  json_object_set_new(o, "fval", json_real(s->fval));
  return o;
}

static json_t *variant_json(const KernelVariant *kv) {
  const ffn_gemm_config *c = &kv->cfg;
  json_t *o = json_pack("{s:s, s:i, s:i, s:I, s:s, s:i, s:[iiiiiiiii], s:b}", "func", kv->func, "threads", kv->threads,
                        "smem", kv->smem, "max_m", (json_int_t)kv->max_m, "cfg", c->name ? c->name : "", "cfg_kind",
                        (int)c->kind, "tile", c->bm, c->bn, c->bk, c->wm, c->wn, c->stages, c->threads, c->min_blocks,
                        c->ctas_per_sm, "ext_stats", kv->ext_stats);
  if (kv->out != DT_NONE) { /* a direct form of a weight gradient (absent in older plans) */
    json_object_set_new(o, "out", json_string(dtype_name(kv->out)));
    json_object_set_new(o, "accumulate", json_boolean(kv->accumulate));
  }
  if (kv->b_kn) /* B [K, N] as the weight lies (absent: [N, K]) */
    json_object_set_new(o, "b_kn", json_true());
  if (kv->dq) /* B dequantized to bf16 just before (absent: B as the kernel's plan operand) */
    json_object_set_new(o, "dq", json_true());
  if (kv->mx) /* B's codes turned into bf16 in shared memory (absent: B as its kernel reads it) */
    json_object_set_new(o, "mx", json_true());
  return o;
}

static json_t *kernel_json(const PlanKernel *k) {
  json_t *o = json_object();
  json_object_set_new(o, "kind", json_string(k->kind == KK_GEMM ? "gemm" : "rowwise"));
  json_object_set_new(o, "n", json_integer(k->n));
  json_object_set_new(o, "k", json_integer(k->k));
  json_object_set_new(o, "streams", json_integer(k->streams));
  json_object_set_new(o, "splittable", json_boolean(k->splittable));
  json_object_set_new(o, "op", json_string(k->op < OP_COUNT ? op_info[k->op].name : ""));
  if (k->wq_bits) { /* weight-only quantized B (absent: none) */
    json_object_set_new(o, "wq_bits", json_integer(k->wq_bits));
    json_object_set_new(o, "wq_group", json_integer(k->wq_group));
  }
  json_t *vs = json_array();
  for (int v = 0; v < k->nvariants; v++)
    json_array_append_new(vs, variant_json(&k->variants[v]));
  json_object_set_new(o, "variants", vs);
  return o;
}

static json_t *step_json(const Plan *p, const PlanStep *s) {
  json_t *o = json_object();
  if (s->kind == STEP_LAUNCH) {
    json_object_set_new(o, "kind", json_string("launch"));
    json_object_set_new(o, "kernel", json_integer(s->kernel));
    json_object_set_new(o, "args", ints_json(s->args, s->nargs));
    json_object_set_new(o, "rows", dims_json(p, s->rowdims, s->nrowdims));
    return o;
  }
  json_object_set_new(o, "kind", json_string(s->kind == STEP_ALLREDUCE ? "allreduce" : "copy"));
  json_object_set_new(o, "src", json_integer(s->src));
  json_object_set_new(o, "dst", json_integer(s->dst));
  if (s->kind == STEP_ALLREDUCE)
    json_object_set_new(o, "ranks", json_integer(s->ranks));
  return o;
}

char *plan_to_json(const Plan *p) {
  json_t *root = json_object();
  json_object_set_new(root, "format", json_string("ffnc-plan-1"));
  json_object_set_new(root, "abi", json_string(plan_abi_hash()));
  json_object_set_new(root, "model", json_string(p->model));
  json_object_set_new(root, "arch", json_string(p->arch));
  if (p->tp > 1) {
    json_object_set_new(root, "tp", json_integer(p->tp));
    json_object_set_new(root, "tp_rank", json_integer(p->tp_rank));
  }
  json_t *dims = json_array(), *ts = json_array(), *prep = json_array(), *ks = json_array(), *steps = json_array();
  for (int i = 0; i < p->ndims; i++)
    json_array_append_new(dims, json_string(p->dim_names[i]));
  for (int i = 0; i < p->ntensors; i++)
    json_array_append_new(ts, tensor_json(p, &p->tensors[i]));
  for (int i = 0; i < p->nprep; i++)
    json_array_append_new(prep, prep_json(&p->prep[i]));
  for (int i = 0; i < p->nkernels; i++)
    json_array_append_new(ks, kernel_json(&p->kernels[i]));
  for (int i = 0; i < p->nsteps; i++)
    json_array_append_new(steps, step_json(p, &p->steps[i]));
  json_object_set_new(root, "dims", dims);
  json_object_set_new(root, "ninputs", json_integer(p->ninputs));
  json_object_set_new(root, "noutputs", json_integer(p->noutputs));
  json_object_set_new(root, "tensors", ts);
  json_object_set_new(root, "prep", prep);
  json_object_set_new(root, "kernels", ks);
  json_object_set_new(root, "steps", steps);
  char *text = json_dumps(root, JSON_COMPACT);
  json_decref(root);
  return text;
}

/* ---- from JSON, checked ---- */

/* Reading stops at the first problem: its message (always "launch plan: WHERE: WHAT") is kept
 * in err and every later read returns a harmless default. */
typedef struct {
  Plan *p;
  char *err;
  size_t errlen;
  bool bad;
  char where[48]; /* the element being read: "tensor 3" */
} Reader;

static void bad(Reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void bad(Reader *r, const char *fmt, ...) {
  if (r->bad)
    return;
  r->bad = true;
  int k = snprintf(r->err, r->errlen, "launch plan: %s%s", r->where, r->where[0] ? ": " : "");
  if (k < 0 || (size_t)k >= r->errlen)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->err + k, r->errlen - (size_t)k, fmt, ap);
  va_end(ap);
}

static json_t *field(Reader *r, json_t *o, const char *key, json_type type) {
  json_t *v = json_object_get(o, key);
  bool ok = v && (json_typeof(v) == type || (type == JSON_TRUE && json_is_boolean(v)));
  if (!ok)
    bad(r, "field '%s' missing or of the wrong type", key);
  return ok ? v : NULL;
}

static long long integer(Reader *r, json_t *o, const char *key, long long lo, long long hi) {
  json_t *v = field(r, o, key, JSON_INTEGER);
  if (!v)
    return lo;
  long long x = json_integer_value(v);
  if (x < lo || x > hi) {
    bad(r, "'%s' = %lld is out of range [%lld, %lld]", key, x, lo, hi);
    return lo;
  }
  return x;
}

static const char *string(Reader *r, json_t *o, const char *key) {
  json_t *v = field(r, o, key, JSON_STRING);
  return v ? arena_strdup(r->p->arena, json_string_value(v)) : "";
}

/* The array `key` of o with at most max elements; *n its length (0 when bad). */
static json_t *array(Reader *r, json_t *o, const char *key, int max, int *n) {
  json_t *a = field(r, o, key, JSON_ARRAY);
  *n = a ? (int)json_array_size(a) : 0;
  if (*n > max) {
    bad(r, "too many %s (%d, at most %d)", key, *n, max);
    *n = 0;
  }
  return a;
}

/* An element of an array of objects; names it for the messages. */
static json_t *element(Reader *r, json_t *a, const char *what, int i) {
  snprintf(r->where, sizeof r->where, "%s %d", what, i);
  json_t *o = json_array_get(a, (size_t)i);
  if (!json_is_object(o))
    bad(r, "not an object");
  return json_is_object(o) ? o : NULL;
}

static int read_dims(Reader *r, json_t *o, const char *key, Dim *d, int max) {
  int n;
  json_t *a = array(r, o, key, max, &n);
  for (int i = 0; i < n; i++) {
    json_t *v = json_array_get(a, (size_t)i);
    int sym = -1;
    if (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) <= FFN_MAX_DIM) {
      d[i] = dim_static(json_integer_value(v));
      continue;
    }
    for (int k = 0; json_is_string(v) && k < r->p->ndims; k++)
      if (strcmp(r->p->dim_names[k], json_string_value(v)) == 0)
        sym = k;
    if (sym < 0)
      bad(r, "'%s' entry %d is neither a size nor a dim of the plan", key, i);
    d[i] = dim_dynamic(sym < 0 ? 0 : sym);
  }
  return n;
}

/* A list of at most max indices below hi (tensor ids, tile fields). */
static int read_ints(Reader *r, json_t *o, const char *key, int *v, int max, int hi) {
  int n;
  json_t *a = array(r, o, key, max, &n);
  for (int i = 0; i < n; i++) {
    json_t *x = json_array_get(a, (size_t)i);
    if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= hi)
      bad(r, "'%s' entry %d is not an integer in [0, %d)", key, i, hi);
    else
      v[i] = (int)json_integer_value(x);
  }
  return n;
}

static void read_header(Reader *r, json_t *root) {
  Plan *p = r->p;
  json_t *fmt = json_object_get(root, "format");
  if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "ffnc-plan-1") != 0) {
    bad(r, "unknown format (expected ffnc-plan-1)");
    return;
  }
  /* first, so that a stale file says so rather than failing some later check */
  json_t *abi = json_object_get(root, "abi");
  if (!json_is_string(abi) || strcmp(json_string_value(abi), plan_abi_hash()) != 0) {
    bad(r, "built by an incompatible ffnc (op table and kernel ABI hash %s, this ffnc has %s): rebuild it with `ffnc build`",
        json_is_string(abi) ? json_string_value(abi) : "none", plan_abi_hash());
    return;
  }
  p->model = string(r, root, "model");
  p->arch = string(r, root, "arch");
  p->tp = 1;
  if (json_object_get(root, "tp")) {
    p->tp = (int)integer(r, root, "tp", 2, 1 << 20);
    p->tp_rank = (int)integer(r, root, "tp_rank", 0, p->tp - 1);
  }
  if (!r->bad && (strncmp(p->arch, "sm_", 3) != 0 || atoi(p->arch + 3) < 10))
    bad(r, "arch '%s' is not of the form sm_XX", p->arch);
  json_t *dims = array(r, root, "dims", 64, &p->ndims);
  p->dim_names = arena_alloc(p->arena, sizeof(char *) * (size_t)(p->ndims + 1));
  for (int i = 0; i < p->ndims; i++) {
    json_t *v = json_array_get(dims, (size_t)i);
    if (!json_is_string(v))
      bad(r, "dim %d is not a name", i);
    p->dim_names[i] = arena_strdup(p->arena, json_is_string(v) ? json_string_value(v) : "?");
  }
  p->ninputs = (int)integer(r, root, "ninputs", 0, 4096);
  p->noutputs = (int)integer(r, root, "noutputs", 1, 4096);
}

static void read_tensor(Reader *r, json_t *o, PlanTensor *t) {
  const Plan *p = r->p;
  const char *kind = string(r, o, "kind");
  t->kind = (PlanTensorKind)-1;
  for (int k = 0; k < (int)(sizeof kind_names / sizeof kind_names[0]); k++)
    if (strcmp(kind, kind_names[k]) == 0)
      t->kind = (PlanTensorKind)k;
  if ((int)t->kind < 0)
    bad(r, "kind '%s' unknown", kind);
  const char *dtype = string(r, o, "dtype");
  t->dtype = dtype_from_name(dtype);
  if (t->dtype == DT_NONE)
    bad(r, "dtype '%s' unknown", dtype);
  t->rank = read_dims(r, o, "shape", t->dims, FFN_MAX_RANK);
  int64_t size[FFN_MAX_RANK], numel; /* the static dims within size_limits.h, as `check` ensures */
  for (int d = 0; d < t->rank; d++)
    size[d] = t->dims[d].sym >= 0 ? 1 : t->dims[d].size;
  ShapeLimit why = shape_check_limits(t->rank, size, &numel);
  if (why != SHAPE_OK)
    bad(r, "shape too large: %s", shape_limit_words(why));
  t->index = (int)integer(r, o, "index", 0, 4096);
  json_t *nm = json_object_get(o, "name");
  t->name = json_is_string(nm) ? arena_strdup(p->arena, json_string_value(nm)) : NULL;
  if ((t->kind == PT_WEIGHT || t->kind == PT_INPUT || t->kind == PT_OUTPUT) && !t->name)
    bad(r, "a %s needs a name", kind);
  if ((t->kind == PT_INPUT && t->index >= p->ninputs) || (t->kind == PT_OUTPUT && t->index >= p->noutputs))
    bad(r, "%s index %d out of range", kind, t->index);
  t->first = (int)integer(r, o, "first", -1, 1 << 30);
  t->last = (int)integer(r, o, "last", -1, 1 << 30);
  t->keep = json_is_true(json_object_get(o, "keep"));
  /* optional (plans before it have none); memplan checks it against the tensors and steps */
  t->alias = json_object_get(o, "alias") ? (int)integer(r, o, "alias", 0, 1 << 30) : -1;
  json_t *stored = json_object_get(o, "stored"), *scale = json_object_get(o, "scale");
  if (stored || scale) { /* a pre-quantized weight: both, f8 codes, a named scale */
    t->stored = json_is_string(stored) ? dtype_from_name(json_string_value(stored)) : DT_NONE;
    t->scale = json_is_string(scale) ? arena_strdup(p->arena, json_string_value(scale)) : NULL;
    if (t->kind != PT_WEIGHT || (t->stored != DT_F8E4M3 && t->stored != DT_F8E5M2) || !t->scale || !t->scale[0] ||
        t->dtype != DT_U8)
      bad(r, "a pre-quantized tensor must be a u8 weight (its codes) of f8e4m3 or f8e5m2 and a named scale");
  }
}

static void read_prep_step(Reader *r, json_t *o, PrepStep *s) {
  const Plan *p = r->p;
  const char *op = string(r, o, "op");
  s->op = op_from_name(op);
  if (!r->bad && s->op == OP_COUNT)
    bad(r, "op '%s' unknown", op);
  s->out = (int)integer(r, o, "out", 0, p->ntensors - 1);
  s->nargs = read_ints(r, o, "args", s->args, 8, p->ntensors);
  json_t *iv = json_object_get(o, "ival");
  if (!json_is_array(iv) || json_array_size(iv) != 2 || !json_is_integer(json_array_get(iv, 0)) ||
      !json_is_integer(json_array_get(iv, 1)))
    bad(r, "'ival' is not two integers");
  else
    s->ival[0] = json_integer_value(json_array_get(iv, 0)), s->ival[1] = json_integer_value(json_array_get(iv, 1));
  json_t *fv = json_object_get(o, "fval");
  s->fval = json_is_number(fv) ? json_number_value(fv) : 0;
  if (!r->bad && (s->nargs < op_info[s->op].min_args || s->nargs > op_info[s->op].max_args))
    bad(r, "%s takes %d to %d operands, not %d", op, op_info[s->op].min_args, op_info[s->op].max_args, s->nargs);
}

/* "out" and "accumulate": a weight gradient's wgmma form that writes the caller's f32 or bf16
 * tensor (runtime/grad.c launches it with that tensor's pointer); absent: DT_NONE. */
static void read_variant_out(Reader *r, json_t *vo, KernelKind kind, KernelVariant *kv) {
  kv->out = DT_NONE;
  kv->accumulate = false;
  if (!json_object_get(vo, "out")) {
    if (json_object_get(vo, "accumulate"))
      bad(r, "'accumulate' without 'out'");
    return;
  }
  const char *out = string(r, vo, "out");
  kv->out = dtype_from_name(out);
  if (!r->bad && ((kv->out != DT_F32 && kv->out != DT_BF16) || kind != KK_ROWWISE || kv->cfg.kind != FFN_GEMM_SM90))
    bad(r, "'out' = '%s': only a weight gradient's wgmma variant writes the caller's tensor, in f32 or bf16", out);
  kv->accumulate = json_is_true(field(r, vo, "accumulate", JSON_TRUE));
}

static void read_variant(Reader *r, json_t *vo, KernelKind kind, KernelVariant *kv) {
  kv->func = string(r, vo, "func");
  kv->threads = (int)integer(r, vo, "threads", 32, 1024);
  kv->smem = (int)integer(r, vo, "smem", 0, 1 << 20);
  kv->max_m = integer(r, vo, "max_m", 0, (long long)1 << 40);
  kv->cfg.name = string(r, vo, "cfg");
  kv->cfg.kind = (ffn_gemm_kind)integer(r, vo, "cfg_kind", 0, FFN_GEMM_SM90C);
  int tv[9] = {0}; /* the order plan_to_json writes */
  if (read_ints(r, vo, "tile", tv, 9, 1 << 20) != 9)
    bad(r, "'tile' needs 9 entries");
  kv->cfg.bm = tv[0], kv->cfg.bn = tv[1], kv->cfg.bk = tv[2], kv->cfg.wm = tv[3], kv->cfg.wn = tv[4];
  kv->cfg.stages = tv[5], kv->cfg.threads = tv[6], kv->cfg.min_blocks = tv[7], kv->cfg.ctas_per_sm = tv[8];
  kv->cfg.max_m = (int)kv->max_m;
  kv->ext_stats = json_is_true(json_object_get(vo, "ext_stats"));
  kv->b_kn = json_is_true(json_object_get(vo, "b_kn"));
  if (kv->b_kn && (kind != KK_GEMM || kv->cfg.kind != FFN_GEMM_SM90P))
    bad(r, "'b_kn': only the persistent wgmma GEMM reads B as [K, N]");
  kv->dq = json_is_true(json_object_get(vo, "dq"));
  if (kv->dq && (kind != KK_GEMM || (kv->cfg.kind != FFN_GEMM_SM80 && kv->cfg.kind != FFN_GEMM_SM90T &&
                                     kv->cfg.kind != FFN_GEMM_SM90P) || kv->b_kn))
    bad(r, "'dq': only a 16-bit tensor-core GEMM reads dequantized weights");
  kv->mx = json_is_true(json_object_get(vo, "mx"));
  if (kv->mx && (kind != KK_GEMM || (kv->cfg.kind != FFN_GEMM_SM90T && kv->cfg.kind != FFN_GEMM_SM90P) || kv->b_kn ||
                 kv->dq))
    bad(r, "'mx': only a TMA wgmma tile turns codes into bf16 in shared memory");
  if (kind == KK_GEMM && (kv->cfg.bm < 1 || kv->cfg.bn < 1 || kv->cfg.bk < 1 || kv->cfg.wm < 1))
    bad(r, "empty tile");
  read_variant_out(r, vo, kind, kv);
}

static void read_kernel(Reader *r, json_t *o, PlanKernel *k) {
  const char *kind = string(r, o, "kind");
  k->kind = strcmp(kind, "gemm") == 0 ? KK_GEMM : KK_ROWWISE;
  if (strcmp(kind, "gemm") != 0 && strcmp(kind, "rowwise") != 0)
    bad(r, "kind '%s' unknown", kind);
  k->n = integer(r, o, "n", 1, FFN_MAX_DIM);
  k->k = integer(r, o, "k", 0, FFN_MAX_DIM);
  k->streams = (int)integer(r, o, "streams", 0, 2);
  k->splittable = json_is_true(json_object_get(o, "splittable"));
  json_t *op = json_object_get(o, "op");
  const char *opname = json_is_string(op) ? json_string_value(op) : "";
  k->op = *opname ? op_from_name(opname) : OP_COUNT; /* "": more than one op */
  if (*opname && k->op == OP_COUNT)
    bad(r, "op '%s' unknown", opname);
  if (json_object_get(o, "wq_bits")) {
    k->wq_bits = (int)integer(r, o, "wq_bits", 4, 8);
    k->wq_group = (int)integer(r, o, "wq_group", 0, FFN_MAX_DIM);
    if (!r->bad && k->wq_bits != 4 && k->wq_bits != 8)
      bad(r, "'wq_bits' = %d: weights are quantized to 8 or 4 bits", k->wq_bits);
  }
  int max = (int)(sizeof k->variants / sizeof k->variants[0]);
  json_t *vs = array(r, o, "variants", max, &k->nvariants);
  if (!r->bad && k->nvariants < 1)
    bad(r, "no variants");
  char where[sizeof r->where];
  memcpy(where, r->where, sizeof where);
  for (int v = 0; v < k->nvariants && !r->bad; v++) {
    json_t *vo = json_array_get(vs, (size_t)v);
    snprintf(r->where, sizeof r->where, "%s variant %d", where, v);
    if (!json_is_object(vo))
      bad(r, "not an object");
    else
      read_variant(r, vo, k->kind, &k->variants[v]);
    if (!r->bad && k->variants[v].out != DT_NONE && k->op != OP_MATMUL_AT)
      bad(r, "'out' on a kernel of op '%s', not matmul_at", opname);
    if (!r->bad && (k->variants[v].dq || k->variants[v].mx) && !k->wq_bits)
      bad(r, "'%s' on a kernel without quantized weights ('wq_bits')", k->variants[v].dq ? "dq" : "mx");
  }
}

static void read_step(Reader *r, json_t *o, PlanStep *s) {
  const Plan *p = r->p;
  const char *kind = string(r, o, "kind");
  if (strcmp(kind, "launch") == 0) {
    s->kind = STEP_LAUNCH;
    s->kernel = (int)integer(r, o, "kernel", 0, p->nkernels - 1);
    s->nargs = read_ints(r, o, "args", s->args, FFN_KARGS_SLOTS, p->ntensors);
    s->nrowdims = read_dims(r, o, "rows", s->rowdims, FFN_MAX_RANK);
    if (!r->bad && p->kernels[s->kernel].kind == KK_GEMM && s->nargs < 2)
      bad(r, "a GEMM launch needs at least 2 operands");
    if (!r->bad && p->kernels[s->kernel].wq_bits && s->nargs < 3)
      bad(r, "a GEMM of quantized weights needs its codes and scales");
  } else if (strcmp(kind, "copy") == 0) {
    s->kind = STEP_COPY;
    s->src = (int)integer(r, o, "src", 0, p->ntensors - 1);
    s->dst = (int)integer(r, o, "dst", 0, p->ntensors - 1);
  } else if (strcmp(kind, "allreduce") == 0) {
    s->kind = STEP_ALLREDUCE;
    s->src = (int)integer(r, o, "src", 0, p->ntensors - 1);
    s->dst = (int)integer(r, o, "dst", 0, p->ntensors - 1);
    s->ranks = (int)integer(r, o, "ranks", 2, 1 << 20);
  } else
    bad(r, "kind '%s' unknown", kind);
}

/* The array `key` of root, each element read by `read` into a fresh arena array. */
#define READ_LIST(r, root, key, max, count, items, what, read)                            \
  do {                                                                                     \
    json_t *a_ = array((r), (root), (key), (max), &(count));                               \
    (items) = arena_alloc((r)->p->arena, sizeof(*(items)) * (size_t)((count) + 1));        \
    for (int i_ = 0; i_ < (count) && !(r)->bad; i_++) {                                    \
      json_t *o_ = element((r), a_, (what), i_);                                           \
      if (o_)                                                                              \
        read((r), o_, &(items)[i_]);                                                       \
    }                                                                                      \
    (r)->where[0] = 0;                                                                     \
  } while (0)

Plan *plan_from_json(const char *text, char *err, size_t errlen) {
  json_error_t je;
  json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
  if (!root || !json_is_object(root)) {
    snprintf(err, errlen, "launch plan: not valid JSON (%s)", root ? "not an object" : je.text);
    json_decref(root);
    return NULL;
  }
  Plan *p = calloc(1, sizeof *p);
  if (p)
    p->arena = arena_create();
  if (!p || !p->arena) {
    snprintf(err, errlen, "launch plan: out of host memory");
    free(p);
    json_decref(root);
    return NULL;
  }
  Reader r = {.p = p, .err = err, .errlen = errlen};
  read_header(&r, root);
  READ_LIST(&r, root, "tensors", 1000000, p->ntensors, p->tensors, "tensor", read_tensor);
  READ_LIST(&r, root, "prep", 1000000, p->nprep, p->prep, "prep step", read_prep_step);
  READ_LIST(&r, root, "kernels", 100000, p->nkernels, p->kernels, "kernel", read_kernel);
  READ_LIST(&r, root, "steps", 1000000, p->nsteps, p->steps, "step", read_step);
  json_decref(root);
  if (r.bad) {
    plan_destroy(p);
    return NULL;
  }
  return p;
}

/* ---- text ---- */

void plan_print(const Plan *p, FILE *out) {
  fprintf(out, "plan %s for %s\n", p->model, p->arch);
  for (int i = 0; i < p->ntensors; i++) {
    const PlanTensor *t = &p->tensors[i];
    fprintf(out, "tensor %d %s %s [", i, kind_names[t->kind], dtype_name(t->dtype));
    for (int d = 0; d < t->rank; d++) {
      if (d)
        fprintf(out, ", ");
      if (t->dims[d].sym >= 0)
        fprintf(out, "%s", p->dim_names[t->dims[d].sym]);
      else
        fprintf(out, "%lld", (long long)t->dims[d].size);
    }
    fprintf(out, "]");
    if (t->name)
      fprintf(out, " \"%s\"", t->name);
    if (t->stored != DT_NONE)
      fprintf(out, " %s codes, scale \"%s\"", dtype_name(t->stored), t->scale);
    if (t->kind == PT_SCRATCH)
      fprintf(out, " live %d..%d", t->first, t->last);
    if (t->alias >= 0)
      fprintf(out, " over %d", t->alias);
    fprintf(out, "\n");
  }
  for (int i = 0; i < p->nprep; i++) {
    const PrepStep *s = &p->prep[i];
    fprintf(out, "prep %s -> %d (", op_info[s->op].name, s->out);
    for (int j = 0; j < s->nargs; j++)
      fprintf(out, j ? ", %d" : "%d", s->args[j]);
    fprintf(out, ")\n");
  }
  for (int i = 0; i < p->nsteps; i++) {
    const PlanStep *s = &p->steps[i];
    if (s->kind == STEP_COPY) {
      fprintf(out, "step %d copy %d -> %d\n", i, s->src, s->dst);
      continue;
    }
    if (s->kind == STEP_ALLREDUCE) {
      fprintf(out, "step %d allreduce %d -> %d (sum over %d ranks)\n", i, s->src, s->dst, s->ranks);
      continue;
    }
    const PlanKernel *k = &p->kernels[s->kernel];
    fprintf(out, "step %d launch %s (%s", i, k->variants[0].func, k->kind == KK_GEMM ? "gemm" : "rowwise");
    for (int v = 1; v < k->nvariants; v++)
      fprintf(out, ", %s", k->variants[v].func);
    fprintf(out, ") on");
    for (int j = 0; j < s->nargs; j++)
      fprintf(out, " %d", s->args[j]);
    fprintf(out, "\n");
  }
}
