/* plan.c: plan utilities and its JSON form (the launch plan of AOT output).
 *
 * plan_from_json reads files that may have been tampered with, so it checks every index,
 * count and kind before the runtime relies on it.
 */
#include "plan.h"

#include <jansson.h>
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

char *plan_to_json(const Plan *p) {
  json_t *root = json_object();
  json_object_set_new(root, "format", json_string("ffnc-plan-1"));
  json_object_set_new(root, "model", json_string(p->model));
  json_object_set_new(root, "arch", json_string(p->arch));
  json_t *dims = json_array();
  for (int i = 0; i < p->ndims; i++)
    json_array_append_new(dims, json_string(p->dim_names[i]));
  json_object_set_new(root, "dims", dims);
  json_object_set_new(root, "ninputs", json_integer(p->ninputs));
  json_object_set_new(root, "noutputs", json_integer(p->noutputs));
  json_t *ts = json_array();
  for (int i = 0; i < p->ntensors; i++) {
    const PlanTensor *t = &p->tensors[i];
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
    json_array_append_new(ts, o);
  }
  json_object_set_new(root, "tensors", ts);
  json_t *prep = json_array();
  for (int i = 0; i < p->nprep; i++) {
    const PrepStep *s = &p->prep[i];
    json_t *o = json_object();
    json_object_set_new(o, "op", json_string(op_info[s->op].name));
    json_object_set_new(o, "out", json_integer(s->out));
    json_object_set_new(o, "args", ints_json(s->args, s->nargs));
    json_object_set_new(o, "ival", json_pack("[II]", (json_int_t)s->ival[0], (json_int_t)s->ival[1]));
    json_object_set_new(o, "fval", json_real(s->fval));
    json_array_append_new(prep, o);
  }
  json_object_set_new(root, "prep", prep);
  json_t *ks = json_array();
  for (int i = 0; i < p->nkernels; i++) {
    const PlanKernel *k = &p->kernels[i];
    json_t *o = json_object();
    json_object_set_new(o, "kind", json_string(k->kind == KK_GEMM ? "gemm" : "rowwise"));
    json_object_set_new(o, "n", json_integer(k->n));
    json_object_set_new(o, "k", json_integer(k->k));
    json_object_set_new(o, "streams", json_integer(k->streams));
    json_object_set_new(o, "splittable", json_boolean(k->splittable));
    json_object_set_new(o, "op", json_string(k->op < OP_COUNT ? op_info[k->op].name : ""));
    json_t *vs = json_array();
    for (int v = 0; v < k->nvariants; v++) {
      const KernelVariant *kv = &k->variants[v];
      const ffn_gemm_config *c = &kv->cfg;
      json_array_append_new(vs, json_pack("{s:s, s:i, s:i, s:I, s:s, s:i, s:[iiiiiiiii], s:b}", "func", kv->func,
                                          "threads", kv->threads, "smem", kv->smem, "max_m", (json_int_t)kv->max_m,
                                          "cfg", c->name ? c->name : "", "cfg_kind", (int)c->kind, "tile", c->bm, c->bn,
                                          c->bk, c->wm, c->wn, c->stages, c->threads, c->min_blocks, c->ctas_per_sm,
                                          "ext_stats", kv->ext_stats));
    }
    json_object_set_new(o, "variants", vs);
    json_array_append_new(ks, o);
  }
  json_object_set_new(root, "kernels", ks);
  json_t *steps = json_array();
  for (int i = 0; i < p->nsteps; i++) {
    const PlanStep *s = &p->steps[i];
    json_t *o = json_object();
    if (s->kind == STEP_LAUNCH) {
      json_object_set_new(o, "kind", json_string("launch"));
      json_object_set_new(o, "kernel", json_integer(s->kernel));
      json_object_set_new(o, "args", ints_json(s->args, s->nargs));
      json_object_set_new(o, "rows", dims_json(p, s->rowdims, s->nrowdims));
    } else {
      json_object_set_new(o, "kind", json_string("copy"));
      json_object_set_new(o, "src", json_integer(s->src));
      json_object_set_new(o, "dst", json_integer(s->dst));
    }
    json_array_append_new(steps, o);
  }
  json_object_set_new(root, "steps", steps);
  char *text = json_dumps(root, JSON_COMPACT);
  json_decref(root);
  return text;
}

/* ---- from JSON, checked ---- */

typedef struct {
  Plan *p;
  char *err;
  size_t errlen;
  bool bad;
} Reader;

static void bad(Reader *r, const char *fmt, const char *what, long long v) {
  if (!r->bad)
    snprintf(r->err, r->errlen, fmt, what, v);
  r->bad = true;
}

static json_t *field(Reader *r, json_t *o, const char *key, json_type type) {
  json_t *v = json_object_get(o, key);
  if (!v || json_typeof(v) != type) {
    if (!(type == JSON_TRUE && v && json_is_boolean(v))) {
      bad(r, "launch plan: field '%s' missing or of the wrong type%lld", key, 0);
      return NULL;
    }
  }
  return v;
}

static long long integer(Reader *r, json_t *o, const char *key, long long lo, long long hi) {
  json_t *v = field(r, o, key, JSON_INTEGER);
  if (!v)
    return lo;
  long long x = json_integer_value(v);
  if (x < lo || x > hi) {
    bad(r, "launch plan: '%s' = %lld is out of range", key, x);
    return lo;
  }
  return x;
}

static const char *string(Reader *r, json_t *o, const char *key) {
  json_t *v = field(r, o, key, JSON_STRING);
  return v ? arena_strdup(r->p->arena, json_string_value(v)) : "";
}

static int read_dims(Reader *r, json_t *a, Dim *d, int max) {
  if (!a || !json_is_array(a) || (int)json_array_size(a) > max) {
    bad(r, "launch plan: bad %s%lld", "shape", 0);
    return 0;
  }
  for (size_t i = 0; i < json_array_size(a); i++) {
    json_t *v = json_array_get(a, i);
    if (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) < ((json_int_t)1 << 40))
      d[i] = dim_static(json_integer_value(v));
    else if (json_is_string(v)) {
      int sym = -1;
      for (int k = 0; k < r->p->ndims; k++)
        if (strcmp(r->p->dim_names[k], json_string_value(v)) == 0)
          sym = k;
      if (sym < 0)
        bad(r, "launch plan: unknown dim in a %s%lld", "shape", 0);
      d[i] = dim_dynamic(sym < 0 ? 0 : sym);
    } else
      bad(r, "launch plan: bad %s%lld", "dim", 0);
  }
  return (int)json_array_size(a);
}

static int read_ints(Reader *r, json_t *a, int *v, int max, int hi) {
  if (!a || !json_is_array(a) || (int)json_array_size(a) > max) {
    bad(r, "launch plan: bad %s list%lld", "index", 0);
    return 0;
  }
  for (size_t i = 0; i < json_array_size(a); i++) {
    json_t *x = json_array_get(a, i);
    if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= hi)
      bad(r, "launch plan: %s out of range%lld", "index", 0);
    else
      v[i] = (int)json_integer_value(x);
  }
  return (int)json_array_size(a);
}

Plan *plan_from_json(const char *text, char *err, size_t errlen) {
  json_error_t je;
  json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
  if (!root || !json_is_object(root)) {
    snprintf(err, errlen, "launch plan: not valid JSON (%s)", root ? "not an object" : je.text);
    json_decref(root);
    return NULL;
  }
  Plan *p = calloc(1, sizeof *p);
  p->arena = arena_create();
  Reader r = {p, err, errlen, false};
  json_t *fmt = json_object_get(root, "format");
  if (!fmt || !json_is_string(fmt) || strcmp(json_string_value(fmt), "ffnc-plan-1") != 0)
    bad(&r, "launch plan: unknown format (expected %s)%lld", "ffnc-plan-1", 0);
  p->model = string(&r, root, "model");
  p->arch = string(&r, root, "arch");
  json_t *dims = field(&r, root, "dims", JSON_ARRAY);
  p->ndims = dims ? (int)json_array_size(dims) : 0;
  if (p->ndims > 64)
    bad(&r, "launch plan: too many %s (%lld)", "dims", p->ndims), p->ndims = 0;
  p->dim_names = arena_alloc(p->arena, sizeof(char *) * (size_t)(p->ndims + 1));
  for (int i = 0; i < p->ndims; i++) {
    json_t *v = json_array_get(dims, (size_t)i);
    p->dim_names[i] = arena_strdup(p->arena, json_is_string(v) ? json_string_value(v) : "?");
  }
  p->ninputs = (int)integer(&r, root, "ninputs", 0, 4096);
  p->noutputs = (int)integer(&r, root, "noutputs", 1, 4096);
  json_t *ts = field(&r, root, "tensors", JSON_ARRAY);
  p->ntensors = ts ? (int)json_array_size(ts) : 0;
  if (p->ntensors > 1000000)
    bad(&r, "launch plan: too many %s (%lld)", "tensors", p->ntensors), p->ntensors = 0;
  p->tensors = arena_alloc(p->arena, sizeof(PlanTensor) * (size_t)(p->ntensors + 1));
  for (int i = 0; i < p->ntensors && !r.bad; i++) {
    json_t *o = json_array_get(ts, (size_t)i);
    PlanTensor *t = &p->tensors[i];
    if (!json_is_object(o)) {
      bad(&r, "launch plan: %s %lld is not an object", "tensor", i);
      break;
    }
    const char *kind = string(&r, o, "kind");
    t->kind = (PlanTensorKind)-1;
    for (int k = 0; k < 5; k++)
      if (strcmp(kind, kind_names[k]) == 0)
        t->kind = (PlanTensorKind)k;
    if ((int)t->kind < 0)
      bad(&r, "launch plan: tensor kind '%s' unknown%lld", kind, 0);
    t->dtype = dtype_from_name(string(&r, o, "dtype"));
    if (t->dtype == DT_NONE)
      bad(&r, "launch plan: tensor %s%lld has an unknown dtype", "", i);
    t->rank = read_dims(&r, json_object_get(o, "shape"), t->dims, FFN_MAX_RANK);
    t->index = (int)integer(&r, o, "index", 0, 4096);
    json_t *nm = json_object_get(o, "name");
    t->name = nm && json_is_string(nm) ? arena_strdup(p->arena, json_string_value(nm)) : NULL;
    if ((t->kind == PT_WEIGHT || t->kind == PT_INPUT || t->kind == PT_OUTPUT) && !t->name)
      bad(&r, "launch plan: %s %lld has no name", "tensor", i);
    if (t->kind == PT_INPUT && t->index >= p->ninputs)
      bad(&r, "launch plan: %s index %lld out of range", "input", t->index);
    if (t->kind == PT_OUTPUT && t->index >= p->noutputs)
      bad(&r, "launch plan: %s index %lld out of range", "output", t->index);
    t->first = (int)integer(&r, o, "first", -1, 1 << 30);
    t->last = (int)integer(&r, o, "last", -1, 1 << 30);
    t->keep = json_is_true(json_object_get(o, "keep"));
  }
  json_t *prep = field(&r, root, "prep", JSON_ARRAY);
  p->nprep = prep ? (int)json_array_size(prep) : 0;
  if (p->nprep > 1000000)
    bad(&r, "launch plan: too many %s (%lld)", "prep steps", p->nprep), p->nprep = 0;
  p->prep = arena_alloc(p->arena, sizeof(PrepStep) * (size_t)(p->nprep + 1));
  for (int i = 0; i < p->nprep && !r.bad; i++) {
    json_t *o = json_array_get(prep, (size_t)i);
    PrepStep *s = &p->prep[i];
    if (!json_is_object(o)) {
      bad(&r, "launch plan: %s %lld is not an object", "prep step", i);
      break;
    }
    s->op = op_from_name(string(&r, o, "op"));
    if (s->op == OP_COUNT)
      bad(&r, "launch plan: %s %lld has an unknown op", "prep step", i);
    s->out = (int)integer(&r, o, "out", 0, p->ntensors - 1);
    s->nargs = read_ints(&r, json_object_get(o, "args"), s->args, 8, p->ntensors);
    json_t *iv = json_object_get(o, "ival");
    if (!iv || !json_is_array(iv) || json_array_size(iv) != 2 || !json_is_integer(json_array_get(iv, 0)) ||
        !json_is_integer(json_array_get(iv, 1)))
      bad(&r, "launch plan: %s %lld has a bad ival", "prep step", i);
    else
      s->ival[0] = json_integer_value(json_array_get(iv, 0)), s->ival[1] = json_integer_value(json_array_get(iv, 1));
    json_t *fv = json_object_get(o, "fval");
    s->fval = fv && json_is_number(fv) ? json_number_value(fv) : 0;
    if (s->op != OP_COUNT && (s->nargs < op_info[s->op].min_args || s->nargs > op_info[s->op].max_args))
      bad(&r, "launch plan: %s %lld has a wrong operand count", "prep step", i);
  }
  json_t *ks = field(&r, root, "kernels", JSON_ARRAY);
  p->nkernels = ks ? (int)json_array_size(ks) : 0;
  if (p->nkernels > 100000)
    bad(&r, "launch plan: too many %s (%lld)", "kernels", p->nkernels), p->nkernels = 0;
  p->kernels = arena_alloc(p->arena, sizeof(PlanKernel) * (size_t)(p->nkernels + 1));
  for (int i = 0; i < p->nkernels && !r.bad; i++) {
    json_t *o = json_array_get(ks, (size_t)i);
    PlanKernel *k = &p->kernels[i];
    if (!json_is_object(o)) {
      bad(&r, "launch plan: %s %lld is not an object", "kernel", i);
      break;
    }
    const char *kind = string(&r, o, "kind");
    k->kind = strcmp(kind, "gemm") == 0 ? KK_GEMM : KK_ROWWISE;
    if (strcmp(kind, "gemm") != 0 && strcmp(kind, "rowwise") != 0)
      bad(&r, "launch plan: kernel kind '%s' unknown%lld", kind, 0);
    k->n = integer(&r, o, "n", 1, (long long)1 << 40);
    k->k = integer(&r, o, "k", 0, (long long)1 << 40);
    k->streams = (int)integer(&r, o, "streams", 0, 2);
    k->splittable = json_is_true(json_object_get(o, "splittable"));
    json_t *op = json_object_get(o, "op");
    k->op = op && json_is_string(op) && *json_string_value(op) ? op_from_name(json_string_value(op)) : OP_COUNT;
    json_t *vs = field(&r, o, "variants", JSON_ARRAY);
    k->nvariants = vs ? (int)json_array_size(vs) : 0;
    if (k->nvariants < 1 || k->nvariants > 6)
      bad(&r, "launch plan: kernel %s%lld needs 1 to 6 variants", "", i), k->nvariants = 0;
    for (int v = 0; v < k->nvariants && !r.bad; v++) {
      json_t *vo = json_array_get(vs, (size_t)v), *tile;
      KernelVariant *kv = &k->variants[v];
      if (!json_is_object(vo)) {
        bad(&r, "launch plan: %s %lld is not an object", "variant", v);
        break;
      }
      kv->func = string(&r, vo, "func");
      kv->threads = (int)integer(&r, vo, "threads", 32, 1024);
      kv->smem = (int)integer(&r, vo, "smem", 0, 1 << 20);
      kv->max_m = integer(&r, vo, "max_m", 0, (long long)1 << 40);
      kv->cfg.name = string(&r, vo, "cfg");
      kv->cfg.kind = (ffn_gemm_kind)integer(&r, vo, "cfg_kind", 0, FFN_GEMM_SM90P);
      tile = json_object_get(vo, "tile");
      int tv[9] = {0};
      if (read_ints(&r, tile, tv, 9, 1 << 20) != 9)
        bad(&r, "launch plan: %s %lld has a bad tile", "variant", v);
      kv->cfg.bm = tv[0], kv->cfg.bn = tv[1], kv->cfg.bk = tv[2], kv->cfg.wm = tv[3], kv->cfg.wn = tv[4];
      kv->cfg.stages = tv[5], kv->cfg.threads = tv[6], kv->cfg.min_blocks = tv[7], kv->cfg.ctas_per_sm = tv[8];
      kv->cfg.max_m = (int)kv->max_m;
      kv->ext_stats = json_is_true(json_object_get(vo, "ext_stats"));
      if (k->kind == KK_GEMM && (kv->cfg.bm < 1 || kv->cfg.bn < 1 || kv->cfg.bk < 1))
        bad(&r, "launch plan: %s %lld has an empty tile", "variant", v);
    }
  }
  json_t *steps = field(&r, root, "steps", JSON_ARRAY);
  p->nsteps = steps ? (int)json_array_size(steps) : 0;
  if (p->nsteps > 1000000)
    bad(&r, "launch plan: too many %s (%lld)", "steps", p->nsteps), p->nsteps = 0;
  p->steps = arena_alloc(p->arena, sizeof(PlanStep) * (size_t)(p->nsteps + 1));
  for (int i = 0; i < p->nsteps && !r.bad; i++) {
    json_t *o = json_array_get(steps, (size_t)i);
    PlanStep *s = &p->steps[i];
    if (!json_is_object(o)) {
      bad(&r, "launch plan: %s %lld is not an object", "step", i);
      break;
    }
    const char *kind = string(&r, o, "kind");
    if (strcmp(kind, "launch") == 0) {
      s->kind = STEP_LAUNCH;
      s->kernel = (int)integer(&r, o, "kernel", 0, p->nkernels - 1);
      s->nargs = read_ints(&r, json_object_get(o, "args"), s->args, FFN_KARGS_SLOTS, p->ntensors);
      s->nrowdims = read_dims(&r, json_object_get(o, "rows"), s->rowdims, FFN_MAX_RANK);
      if (!r.bad && p->kernels[s->kernel].kind == KK_GEMM && s->nargs < 2)
        bad(&r, "launch plan: %s %lld has too few operands", "step", i);
    } else if (strcmp(kind, "copy") == 0) {
      s->kind = STEP_COPY;
      s->src = (int)integer(&r, o, "src", 0, p->ntensors - 1);
      s->dst = (int)integer(&r, o, "dst", 0, p->ntensors - 1);
    } else
      bad(&r, "launch plan: step kind '%s' unknown%lld", kind, 0);
  }
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
    if (t->kind == PT_SCRATCH)
      fprintf(out, " live %d..%d", t->first, t->last);
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
