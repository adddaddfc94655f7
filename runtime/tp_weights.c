/* tp_weights.c: a tensor-parallel share reads only its slices of the weights.
 *
 * passes/tp.c keeps every weight whole in the plan (so the plan, and its AOT form, name the
 * checkpoint's tensors as they are stored) and slices it with load-time steps. Bound as is,
 * each rank would hold the whole model on its device until ffn_model_prepare releases what
 * the slices do not need. So a model of a share narrows its own copy of the plan: a matrix
 * weight W [R, C] whose one reader is
 *     slice(W) of columns [off, off + len)               (a down projection's rows C, Wd[:, C])
 *     or transpose(W), whose one reader is such a slice   (an up/gate projection's rows C)
 * is held as that window alone, [R, len] or [len, C], the steps that read it narrowed to match
 * (the slice then takes all of it), and the binding copies only the window from the file's
 * mapping or the caller's tensor. FFN Fusion's runs concatenate the layers' weights (each
 * scaled by its norm gain) before the slice: the slice's range is followed back through the
 * concatenation to each layer's part, and a layer with no part in it is dropped (its weights
 * bound as empty windows, its load-time steps removed). FFNC_TP_WHOLE_WEIGHTS=1 turns windows
 * off (a check: the results must not change).
 */
#include "rt.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  Plan *p;
  WeightWindow *w;
  int *producer;  /* per tensor: the load-time step that writes it, or -1 */
  bool *removed;  /* per load-time step: dropped (nothing the rank needs reads it) */
} Narrow;

/* The one step that reads tensor t, or -1 (none, or several); *prep tells which list it is
 * in. Run steps count too: a tensor a kernel reads is not narrowed. */
static int only_reader(const Narrow *n, int t, bool *prep) {
  const Plan *p = n->p;
  int found = -1, count = 0;
  for (int i = 0; i < p->nprep; i++)
    for (int a = 0; !n->removed[i] && a < p->prep[i].nargs; a++)
      if (p->prep[i].args[a] == t) {
        found = i, *prep = true, count++;
        break;
      }
  for (int s = 0; s < p->nsteps; s++) {
    const PlanStep *ps = &p->steps[s];
    bool reads = ps->kind != STEP_LAUNCH ? ps->src == t : false;
    for (int a = 0; ps->kind == STEP_LAUNCH && a < ps->nargs; a++)
      reads |= ps->args[a] == t;
    if (reads)
      found = s, *prep = false, count++;
  }
  return count == 1 ? found : -1;
}

static bool single_reader(const Narrow *n, int t, int step) {
  bool prep;
  return only_reader(n, t, &prep) == step && prep;
}

static bool static_matrix(const PlanTensor *t) {
  return t->rank == 2 && t->dims[0].sym < 0 && t->dims[1].sym < 0;
}

/* Whether tensor t, read only by load-time step `reader`, can be narrowed to the part
 * [off, off + len) of its axis (0: rows, 1: columns) by narrowing what makes it:
 *   a weight (held as that window);
 *   transpose(z): the other axis of z;
 *   concat(args) along that axis: each argument's share of the range (none: dropped);
 *   mul(w, g) with g a vector along the columns: the rows of w.
 * Touches nothing (narrow() then does it). */
static bool can_narrow(const Narrow *n, int t, int reader, int axis, int64_t off, int64_t len) {
  const Plan *p = n->p;
  const PlanTensor *pt = &p->tensors[t];
  if (!static_matrix(pt) || !single_reader(n, t, reader) || off < 0 || len <= 0 || off + len > pt->dims[axis].size)
    return false;
  if (pt->kind == PT_WEIGHT)
    return pt->stored == DT_NONE;
  int s = n->producer[t];
  if (pt->kind != PT_DERIVED || s < 0)
    return false;
  const PrepStep *ps = &p->prep[s];
  switch (ps->op) {
  case OP_TRANSPOSE:
    return ps->nargs == 1 && can_narrow(n, ps->args[0], s, 1 - axis, off, len);
  case OP_CONCAT: {
    if (ps->ival[0] != axis)
      return false;
    int64_t at = 0;
    for (int i = 0; i < ps->nargs; i++) {
      const PlanTensor *a = &p->tensors[ps->args[i]];
      if (!static_matrix(a))
        return false;
      int64_t size = a->dims[axis].size, lo = off > at ? off : at, hi = off + len < at + size ? off + len : at + size;
      if (hi > lo && !can_narrow(n, ps->args[i], s, axis, lo - at, hi - lo))
        return false;
      at += size;
    }
    return true;
  }
  case OP_MUL: {
    if (axis != 0 || ps->nargs != 2)
      return false;
    const PlanTensor *g = &p->tensors[ps->args[1]];
    bool row_vector = g->rank == 1 && g->dims[0].sym < 0 && g->dims[0].size == pt->dims[1].size;
    return row_vector && ps->args[0] != ps->args[1] && can_narrow(n, ps->args[0], s, 0, off, len);
  }
  default:
    return false;
  }
}

/* Tensor t, read only by a step that was dropped, is needed by nothing: a weight is held as
 * an empty window (bound, never copied), the step that makes a derived one is dropped too. A
 * tensor something else reads stays as it is. */
static void drop(Narrow *n, int t, int reader) {
  Plan *p = n->p;
  PlanTensor *pt = &p->tensors[t];
  if (!static_matrix(pt) || !single_reader(n, t, reader))
    return;
  if (pt->kind == PT_WEIGHT && pt->stored == DT_NONE) {
    n->w[t] = (WeightWindow){true, 0, 0, 0, pt->dims[0].size, pt->dims[1].size};
    pt->dims[0] = dim_static(0);
    return;
  }
  int s = n->producer[t];
  if (pt->kind != PT_DERIVED || s < 0)
    return;
  for (int i = 0; i < p->prep[s].nargs; i++) /* while this step still reads them */
    drop(n, p->prep[s].args[i], s);
  n->removed[s] = true;
}

/* Narrows t to [off, off + len) of its axis (can_narrow said it can). */
static void narrow(Narrow *n, int t, int axis, int64_t off, int64_t len) {
  Plan *p = n->p;
  PlanTensor *pt = &p->tensors[t];
  if (pt->kind == PT_WEIGHT) {
    n->w[t] = (WeightWindow){true, axis, off, len, pt->dims[0].size, pt->dims[1].size};
    pt->dims[axis] = dim_static(len);
    return;
  }
  int s = n->producer[t];
  PrepStep *ps = &p->prep[s];
  pt->dims[axis] = dim_static(len);
  if (ps->op == OP_TRANSPOSE) {
    narrow(n, ps->args[0], 1 - axis, off, len);
  } else if (ps->op == OP_MUL) {
    narrow(n, ps->args[0], 0, off, len);
  } else { /* concat: each argument's share; those with none are dropped from it */
    int64_t at = 0;
    bool keep[8] = {false};
    for (int i = 0; i < ps->nargs; i++) {
      int a = ps->args[i];
      int64_t size = p->tensors[a].dims[axis].size, lo = off > at ? off : at;
      int64_t hi = off + len < at + size ? off + len : at + size;
      if ((keep[i] = hi > lo))
        narrow(n, a, axis, lo - at, hi - lo);
      else
        drop(n, a, s); /* while this step still reads it */
      at += size;
    }
    int kept = 0;
    for (int i = 0; i < ps->nargs; i++)
      if (keep[i])
        ps->args[kept++] = ps->args[i];
    ps->nargs = kept;
    if (kept == 1) { /* a concat takes two or more: one operand is copied whole by a slice */
      ps->op = OP_SLICE;
      ps->ival[0] = 0;
      ps->ival[1] = pt->dims[1].size;
    }
  }
}

ffn_status tp_narrow_plan(const Plan *src, Plan **out, WeightWindow **windows) {
  *out = NULL;
  *windows = NULL;
  const char *whole = getenv("FFNC_TP_WHOLE_WEIGHTS");
  if (src->tp <= 1 || (whole && strcmp(whole, "1") == 0))
    return FFN_OK;
  char err[512];
  char *json = plan_to_json(src);
  Narrow n = {.p = json ? plan_from_json(json, err, sizeof err) : NULL};
  free(json);
  n.w = calloc((size_t)src->ntensors + 1, sizeof *n.w);
  n.producer = malloc(sizeof(int) * (size_t)(src->ntensors + 1));
  n.removed = calloc((size_t)src->nprep + 1, sizeof(bool));
  ffn_status st = n.p && n.w && n.producer && n.removed
                      ? FFN_OK
                      : rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory (copying a tensor-parallel plan)");
  Plan *p = n.p;
  int narrowed = 0;
  for (int t = 0; st == FFN_OK && t < p->ntensors; t++)
    n.producer[t] = -1;
  for (int i = 0; st == FFN_OK && i < p->nprep; i++)
    if (p->prep[i].out >= 0 && p->prep[i].out < p->ntensors)
      n.producer[p->prep[i].out] = i;
  /* each slice of a matrix: the rank's columns of it, made from the rank's parts of the weights */
  for (int i = 0; st == FFN_OK && i < p->nprep; i++) {
    PrepStep *slice = &p->prep[i];
    if (n.removed[i] || slice->op != OP_SLICE || slice->nargs != 1)
      continue;
    int x = slice->args[0];
    int64_t off = slice->ival[0], len = p->tensors[slice->out].dims[p->tensors[slice->out].rank - 1].size;
    if (!can_narrow(&n, x, i, 1, off, len))
      continue;
    narrow(&n, x, 1, off, len);
    slice->ival[0] = 0;
    narrowed++;
  }
  if (st == FFN_OK && narrowed) { /* the dropped steps go */
    int kept = 0;
    for (int i = 0; i < p->nprep; i++)
      if (!n.removed[i])
        p->prep[kept++] = p->prep[i];
    p->nprep = kept;
  }
  free(n.producer);
  free(n.removed);
  if (st != FFN_OK || !narrowed) {
    plan_destroy(p);
    free(n.w);
    return st;
  }
  *out = p;
  *windows = n.w;
  return FFN_OK;
}

void window_gather(const WeightWindow *w, const void *whole, size_t esize, void *out) {
  const char *src = whole;
  char *dst = out;
  if (w->axis == 0) {
    memcpy(dst, src + (size_t)w->off * (size_t)w->cols * esize, (size_t)w->len * (size_t)w->cols * esize);
    return;
  }
  size_t row = (size_t)w->cols * esize, part = (size_t)w->len * esize;
  for (int64_t r = 0; r < w->rows; r++)
    memcpy(dst + (size_t)r * part, src + (size_t)r * row + (size_t)w->off * esize, part);
}
