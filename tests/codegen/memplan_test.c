/* memplan_test.c: the workspace layout never lets two scratch buffers that are live at the
 * same step share a byte, but for a tensor written over its operand by the operand's last reader
 * (PlanTensor.alias), and buffers that are never live together may share. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "passes/memplan.h"

/* A plan of n scratch tensors, tensor i of size[i] f32 elements live over [first[i], last[i]]
 * (first -1: never used). */
static Plan *scratch_plan(int n, const int64_t *size, const int *first, const int *last) {
  Plan *p = calloc(1, sizeof *p);
  p->arena = arena_create();
  p->ntensors = n;
  p->tensors = arena_alloc(p->arena, sizeof(PlanTensor) * (size_t)n);
  for (int i = 0; i < n; i++)
    p->tensors[i] = (PlanTensor){.kind = PT_SCRATCH, .dtype = DT_F32, .rank = 1, .dims = {dim_static(size[i])},
                                 .first = first[i], .last = last[i], .alias = -1};
  return p;
}

/* Every pair of tensors live at a common step has disjoint byte ranges inside the total. */
static void check_layout(const Plan *p, const size_t *off, size_t total, const char *what) {
  for (int i = 0; i < p->ntensors; i++) {
    const PlanTensor *a = &p->tensors[i];
    size_t ea = off[i] + dtype_bytes(a->dtype, (size_t)plan_numel(p, i, NULL));
    if (a->first < 0)
      continue;
    CHECK(ea <= total && off[i] % 256 == 0, "%s: tensor %d at [%zu, %zu) outside %zu or misaligned", what, i, off[i], ea,
          total);
    for (int j = i + 1; j < p->ntensors; j++) {
      const PlanTensor *b = &p->tensors[j];
      size_t eb = off[j] + dtype_bytes(b->dtype, (size_t)plan_numel(p, j, NULL));
      bool live_together = b->first >= 0 && a->first <= b->last && b->first <= a->last;
      /* written over its operand by the operand's last reader */
      if (off[i] == off[j] && ((b->alias == i && a->last == b->first) || (a->alias == j && b->last == a->first)))
        live_together = false;
      CHECK(!live_together || ea <= off[j] || eb <= off[i],
            "%s: tensors %d [%zu, %zu) and %d [%zu, %zu) are live together and overlap", what, i, off[i], ea, j, off[j],
            eb);
    }
  }
}

int main(void) {
  /* a chain: 0 and 2 never meet, so they share; 1 meets both */
  {
    const int64_t size[] = {1000, 500, 1000};
    const int first[] = {0, 1, 2}, last[] = {1, 2, 3};
    Plan *p = scratch_plan(3, size, first, last);
    size_t off[3], total = memplan_assign(p, NULL, off);
    check_layout(p, off, total, "chain");
    CHECK(off[0] == off[2], "tensors 0 and 2 are never live together and should share (%zu, %zu)", off[0], off[2]);
    CHECK(total == 4096 + 2048, "total %zu, want 6144", total);
    plan_destroy(p);
  }
  /* in place: 1 is written over 0 by 0's last reader (step 2), 2 over 1 by 1's (step 4); 3 asks
   * for 0 too (taken: one to one), 4 for 3, which step 3 still reads after 4 is written */
  {
    const int64_t size[] = {1000, 1000, 800, 1000, 1000};
    const int first[] = {0, 2, 4, 2, 2}, last[] = {2, 4, 5, 3, 3};
    Plan *p = scratch_plan(5, size, first, last);
    p->tensors[1].alias = 0, p->tensors[2].alias = 1, p->tensors[3].alias = 0, p->tensors[4].alias = 3;
    size_t off[5], total = memplan_assign(p, NULL, off);
    check_layout(p, off, total, "in place");
    CHECK(off[1] == off[0] && off[2] == off[0], "1 and 2 should take 0's buffer (%zu, %zu, %zu)", off[0], off[1], off[2]);
    CHECK(off[3] != off[0] && off[4] != off[3], "3 and 4 may not share (%zu, %zu, %zu)", off[0], off[3], off[4]);
    CHECK(total == 3 * 4096, "total %zu, want 12288 (three buffers at step 2)", total);
    /* an operand read after its alias is first written, or one too small, is not shared */
    p->tensors[0].last = 3;
    total = memplan_assign(p, NULL, off);
    check_layout(p, off, total, "in place, read later");
    CHECK(off[1] != off[0], "1 may not take 0's buffer when step 3 still reads 0");
    plan_destroy(p);
  }
  /* random lifetimes and sizes */
  srand(11);
  for (int round = 0; round < 300; round++) {
    enum { N = 24 };
    int64_t size[N];
    int first[N], last[N];
    for (int i = 0; i < N; i++) {
      size[i] = 1 + rand() % 5000;
      first[i] = rand() % 10 - 1; /* some never used */
      last[i] = first[i] < 0 ? -1 : first[i] + rand() % 6;
    }
    Plan *p = scratch_plan(N, size, first, last);
    for (int i = 0; i < N; i++) /* some ask to be written over another (memplan decides) */
      p->tensors[i].alias = rand() % 3 ? -1 : rand() % N;
    size_t off[N], total = memplan_assign(p, NULL, off);
    check_layout(p, off, total, "random");
    plan_destroy(p);
  }
  return check_result("memplan_test");
}
