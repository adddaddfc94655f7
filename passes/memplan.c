/* memplan.c: memory planning. All run-time intermediates of a call live in one device
 * allocation (the workspace); buffers whose lifetimes do not overlap share bytes.
 *
 * Lifetimes are fixed at compile time (steps that first and last touch each scratch
 * tensor, memplan_lifetimes); sizes depend on the dynamic dims of the call, so offsets are
 * assigned when a call's dims are known (memplan_assign, a few microseconds): largest
 * buffers first, each at the lowest offset that does not overlap a live neighbour. The
 * split-K partials and tile counters of the GEMMs follow the planned buffers.
 */
#include "memplan.h"

#include <stdlib.h>
#include <string.h>

void memplan_lifetimes(Plan *p) {
  for (int i = 0; i < p->ntensors; i++)
    p->tensors[i].first = p->tensors[i].last = -1;
  for (int s = 0; s < p->nsteps; s++) {
    PlanStep *st = &p->steps[s];
    int list[FFN_KARGS_SLOTS], n = 0; /* a launch's operands, or a copy's two */
    if (st->kind == STEP_LAUNCH)
      for (int j = 0; j < st->nargs; j++)
        list[n++] = st->args[j];
    else
      list[n++] = st->src, list[n++] = st->dst;
    for (int j = 0; j < n; j++) {
      PlanTensor *t = &p->tensors[list[j]];
      if (t->first < 0)
        t->first = s;
      t->last = s;
      if (t->kind == PT_WEIGHT || t->kind == PT_DERIVED)
        t->keep = true;
    }
  }
}

#define ALIGN 256

static size_t align_up(size_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

typedef struct {
  int t;
  size_t size;
} Item;

static int by_size_desc(const void *a, const void *b) {
  const Item *x = a, *y = b;
  if (x->size != y->size)
    return x->size < y->size ? 1 : -1;
  return x->t - y->t;
}

size_t memplan_assign(const Plan *p, const int64_t *dims, size_t *offsets) {
  Item *items = malloc(sizeof(Item) * (size_t)(p->ntensors + 1));
  if (!items)
    return SIZE_MAX; /* the runtime's caller reports FFN_ERR_OUT_OF_MEMORY */
  int n = 0;
  for (int i = 0; i < p->ntensors; i++) {
    offsets[i] = 0;
    const PlanTensor *t = &p->tensors[i];
    if (t->kind == PT_SCRATCH && t->first >= 0)
      items[n++] = (Item){i, align_up(dtype_bytes(t->dtype, (size_t)plan_numel(p, i, dims)))};
  }
  qsort(items, (size_t)n, sizeof(Item), by_size_desc);
  size_t total = 0;
  for (int i = 0; i < n; i++) {
    const PlanTensor *t = &p->tensors[items[i].t];
    size_t off = 0;
    /* lowest offset clear of every placed buffer that is live at the same time; placed
     * buffers are checked until no conflict moves `off` any more */
    for (bool moved = true; moved;) {
      moved = false;
      for (int j = 0; j < i; j++) {
        const PlanTensor *u = &p->tensors[items[j].t];
        size_t uo = offsets[items[j].t], ue = uo + items[j].size;
        bool overlap_time = t->first <= u->last && u->first <= t->last;
        if (overlap_time && off < ue && uo < off + items[i].size) {
          off = ue;
          moved = true;
        }
      }
    }
    offsets[items[i].t] = off;
    if (off + items[i].size > total)
      total = off + items[i].size;
  }
  free(items);
  return total;
}
