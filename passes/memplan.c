/* memplan.c: memory planning. All run-time intermediates of a call live in one device
 * allocation (the workspace); buffers whose lifetimes do not overlap share bytes.
 *
 * Lifetimes are fixed at compile time (steps that first and last touch each scratch
 * tensor, memplan_lifetimes); sizes depend on the dynamic dims of the call, so offsets are
 * assigned when a call's dims are known (memplan_assign, a few microseconds): largest
 * buffers first, each at the lowest offset that does not overlap a live neighbour. A tensor
 * that an elementwise kernel writes over its operand (PlanTensor.alias) takes the operand's
 * buffer when that kernel is the operand's last reader; where the caller lets the call write
 * over its inputs (memplan_assign_call), an operand that is an input too: the tensor then
 * takes no workspace at all. Outputs that a call computes into the workspace (ffn_model_run_grad's
 * staged gradients, stored into the caller's tensors after their last step) are placed like
 * scratch tensors, in the bytes of buffers that are dead by then. The split-K partials and tile
 * counters of the GEMMs follow the planned buffers.
 */
#include "memplan.h"

#include <stdbool.h>
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
  int first, last; /* the buffer's lifetime: t's, or with the tensors that take its bytes */
} Item;

static int by_size_desc(const void *a, const void *b) {
  const Item *x = a, *y = b;
  if (x->size != y->size)
    return x->size < y->size ? 1 : -1;
  return x->t - y->t;
}

/* The scratch tensor (or, with `inputs`, the input) whose bytes tensor i takes directly
 * (PlanTensor.alias where it holds: the aliased tensor's last step is the one that first writes
 * i, and at these dims i fits in it), else -1. taken[] (ntensors, zeroed) makes it one to one. */
static int direct_alias(const Plan *p, const int64_t *dims, int i, bool inputs, bool *taken) {
  const PlanTensor *t = &p->tensors[i];
  int a = t->alias;
  if (t->kind != PT_SCRATCH || t->first < 0 || a < 0 || a >= p->ntensors || a == i || taken[a])
    return -1;
  const PlanTensor *u = &p->tensors[a];
  if (!(u->kind == PT_SCRATCH || (inputs && u->kind == PT_INPUT)) || u->first < 0 || u->last != t->first ||
      dtype_bytes(u->dtype, (size_t)plan_numel(p, a, dims)) < dtype_bytes(t->dtype, (size_t)plan_numel(p, i, dims)))
    return -1;
  taken[a] = true;
  return a;
}

size_t memplan_assign(const Plan *p, const int64_t *dims, size_t *offsets) {
  return memplan_assign_call(p, dims, NULL, offsets, NULL);
}

/* Whether tensor i gets bytes of the workspace (before aliases), and over which steps. */
static bool in_workspace(const Plan *p, const bool *outputs, int i, int *first, int *last) {
  const PlanTensor *t = &p->tensors[i];
  *first = t->first, *last = t->last;
  if (t->kind == PT_SCRATCH)
    return t->first >= 0;
  if (t->kind != PT_OUTPUT || !outputs || !outputs[i])
    return false;
  if (t->first < 0) /* no step writes it: live throughout */
    *first = 0, *last = p->nsteps;
  return true;
}

/* The buffers' offsets, largest first, each at the lowest offset clear of every placed buffer
 * live at the same time (placed buffers are checked until no conflict moves it any more); the
 * bytes they span. */
static size_t place(Item *items, int n, size_t *offsets) {
  qsort(items, (size_t)n, sizeof(Item), by_size_desc);
  size_t total = 0;
  for (int i = 0; i < n; i++) {
    size_t off = 0;
    for (bool moved = true; moved;) {
      moved = false;
      for (int j = 0; j < i; j++) {
        size_t uo = offsets[items[j].t], ue = uo + items[j].size;
        bool overlap_time = items[i].first <= items[j].last && items[j].first <= items[i].last;
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
  return total;
}

size_t memplan_assign_call(const Plan *p, const int64_t *dims, const bool *outputs, size_t *offsets, int *input_of) {
  Item *items = malloc(sizeof(Item) * (size_t)(p->ntensors + 1));
  int *buf = malloc(sizeof(int) * (size_t)(p->ntensors + 1));
  bool *taken = calloc((size_t)p->ntensors + 1, sizeof(bool));
  if (!items || !buf || !taken) {
    free(items), free(buf), free(taken);
    return SIZE_MAX; /* the runtime's caller reports FFN_ERR_OUT_OF_MEMORY */
  }
  /* buf[i]: the tensor whose buffer scratch tensor i is in (itself, or the start of its alias
   * chain: a scratch tensor, or an input whose bytes the call may write), -1 for other tensors */
  int n = 0;
  for (int i = 0; i < p->ntensors; i++) {
    offsets[i] = 0;
    buf[i] = direct_alias(p, dims, i, input_of != NULL, taken);
  }
  for (int i = 0; i < p->ntensors; i++) {
    int r = i, hops = 0;
    while (buf[r] >= 0 && hops++ < p->ntensors)
      r = buf[r];
    int first, last;
    bool placed = in_workspace(p, outputs, i, &first, &last);
    items[i].t = placed && p->tensors[r].kind != PT_INPUT ? r : -1;
    if (input_of)
      input_of[i] = placed && p->tensors[r].kind == PT_INPUT ? r : -1;
  }
  for (int i = 0; i < p->ntensors; i++)
    buf[i] = items[i].t;
  for (int i = 0; i < p->ntensors; i++) {
    int first, last;
    if (buf[i] == i && in_workspace(p, outputs, i, &first, &last))
      items[n++] = (Item){i, align_up(dtype_bytes(p->tensors[i].dtype, (size_t)plan_numel(p, i, dims))), first, last};
  }
  for (int i = 0; i < p->ntensors; i++) /* a buffer lives until the last tensor in it is done */
    for (int j = 0; buf[i] >= 0 && buf[i] != i && j < n; j++)
      if (items[j].t == buf[i] && p->tensors[i].last > items[j].last)
        items[j].last = p->tensors[i].last;
  size_t total = place(items, n, offsets);
  for (int i = 0; i < p->ntensors; i++)
    if (buf[i] >= 0 && buf[i] != i)
      offsets[i] = offsets[buf[i]];
  free(items), free(buf), free(taken);
  return total;
}
