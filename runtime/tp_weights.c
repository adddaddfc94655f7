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
 * mapping or the caller's tensor. Weights concatenated before they are sliced (FFN Fusion's
 * runs) are bound whole. FFNC_TP_WHOLE_WEIGHTS=1 turns windows off (a check: the results
 * must not change).
 */
#include "rt.h"

#include <stdlib.h>
#include <string.h>

/* The one step that reads tensor t, or -1 (none, or several); *prep tells which list it is
 * in. Run steps count too: a tensor a kernel reads is not narrowed. */
static int only_reader(const Plan *p, int t, bool *prep) {
  int found = -1, n = 0;
  for (int i = 0; i < p->nprep; i++)
    for (int a = 0; a < p->prep[i].nargs; a++)
      if (p->prep[i].args[a] == t) {
        found = i, *prep = true, n++;
        break;
      }
  for (int s = 0; s < p->nsteps; s++) {
    const PlanStep *ps = &p->steps[s];
    bool reads = ps->kind != STEP_LAUNCH ? ps->src == t : false;
    for (int a = 0; ps->kind == STEP_LAUNCH && a < ps->nargs; a++)
      reads |= ps->args[a] == t;
    if (reads)
      found = s, *prep = false, n++;
  }
  return n == 1 ? found : -1;
}

/* The slice step that is the one reader of t (its only argument), or NULL. */
static PrepStep *only_slice(Plan *p, int t) {
  bool prep;
  int i = only_reader(p, t, &prep);
  if (i < 0 || !prep || p->prep[i].op != OP_SLICE || p->prep[i].nargs != 1)
    return NULL;
  return &p->prep[i];
}

static bool static_matrix(const PlanTensor *t) {
  return t->rank == 2 && t->dims[0].sym < 0 && t->dims[1].sym < 0;
}

ffn_status tp_narrow_plan(const Plan *src, Plan **out, WeightWindow **windows) {
  *out = NULL;
  *windows = NULL;
  const char *off = getenv("FFNC_TP_WHOLE_WEIGHTS");
  if (src->tp <= 1 || (off && strcmp(off, "1") == 0))
    return FFN_OK;
  char err[512];
  char *json = plan_to_json(src);
  Plan *p = json ? plan_from_json(json, err, sizeof err) : NULL;
  free(json);
  WeightWindow *w = calloc((size_t)src->ntensors + 1, sizeof *w);
  if (!p || !w) {
    plan_destroy(p);
    free(w);
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory (copying a tensor-parallel plan)");
  }
  int narrowed = 0;
  for (int t = 0; t < p->ntensors; t++) {
    PlanTensor *pt = &p->tensors[t];
    if (pt->kind != PT_WEIGHT || pt->stored != DT_NONE || !static_matrix(pt))
      continue;
    int64_t rows = pt->dims[0].size, cols = pt->dims[1].size;
    bool prep;
    int r = only_reader(p, t, &prep);
    PrepStep *slice = only_slice(p, t);
    if (slice) { /* columns [off, off + len) */
      int64_t len = p->tensors[slice->out].dims[1].size;
      w[t] = (WeightWindow){true, 1, slice->ival[0], len, rows, cols};
      pt->dims[1] = dim_static(len);
    } else if (r >= 0 && prep && p->prep[r].op == OP_TRANSPOSE && p->prep[r].nargs == 1 &&
               static_matrix(&p->tensors[p->prep[r].out]) &&
               (slice = only_slice(p, p->prep[r].out)) != NULL) { /* rows [off, off + len) */
      int64_t len = p->tensors[slice->out].dims[1].size;
      w[t] = (WeightWindow){true, 0, slice->ival[0], len, rows, cols};
      pt->dims[0] = dim_static(len);
      p->tensors[p->prep[r].out].dims[1] = dim_static(len);
    } else {
      continue;
    }
    if (w[t].off < 0 || w[t].len <= 0 || w[t].off + w[t].len > (w[t].axis ? cols : rows)) {
      plan_destroy(p);
      free(w);
      return rt_error(FFN_ERR_IO, "launch plan: a slice of weight '%s' outside it", pt->name);
    }
    slice->ival[0] = 0;
    narrowed++;
  }
  if (!narrowed) {
    plan_destroy(p);
    free(w);
    return FFN_OK;
  }
  *out = p;
  *windows = w;
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
