/* memplan_test.c: the workspace layout never lets two scratch buffers that are live at the
 * same step share a byte, but for a tensor written over its operand by the operand's last reader
 * (PlanTensor.alias), and buffers that are never live together may share. A tensor written over
 * an input takes the input's bytes only where the call allows it (memplan_assign_call); on the
 * Llama-3-8B sublayer's keep backward that moves the peak off its three [T, F] buffers. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "passes/memplan.h"
#include "plan_util.h"

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
    if (a->first < 0 || a->kind != PT_SCRATCH)
      continue;
    CHECK(ea <= total && off[i] % 256 == 0, "%s: tensor %d at [%zu, %zu) outside %zu or misaligned", what, i, off[i], ea,
          total);
    for (int j = i + 1; j < p->ntensors; j++) {
      const PlanTensor *b = &p->tensors[j];
      size_t eb = off[j] + dtype_bytes(b->dtype, (size_t)plan_numel(p, j, NULL));
      bool live_together = b->kind == PT_SCRATCH && b->first >= 0 && a->first <= b->last && b->first <= a->last;
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
  /* over an input: 2 is written over input 0 by its last reader (step 1), 3 over scratch 2 */
  {
    const int64_t size[] = {1000, 1000, 1000, 1000};
    const int first[] = {0, 0, 1, 2}, last[] = {1, 2, 2, 3};
    Plan *p = scratch_plan(4, size, first, last);
    p->tensors[0].kind = PT_INPUT;
    p->tensors[2].alias = 0, p->tensors[3].alias = 2;
    size_t off[4];
    int input_of[4];
    size_t plain = memplan_assign(p, NULL, off);
    check_layout(p, off, plain, "over an input, not allowed");
    CHECK(plain == 2 * 4096, "not allowed: total %zu, want 8192 (1 and 2 at step 2; 3 over 2)", plain);
    size_t over = memplan_assign_call(p, NULL, NULL, off, input_of);
    CHECK(over == 4096, "allowed: total %zu, want 4096 (1 alone)", over);
    CHECK(input_of[2] == 0 && input_of[3] == 0 && input_of[1] == -1 && input_of[0] == -1,
          "input_of %d %d %d %d, want -1 -1 0 0", input_of[0], input_of[1], input_of[2], input_of[3]);
    p->tensors[0].last = 2; /* read again after 2 is written: not over it */
    over = memplan_assign_call(p, NULL, NULL, off, input_of);
    CHECK(input_of[2] == -1 && input_of[3] == -1 && over == 2 * 4096, "an input read later was written over");
    plan_destroy(p);
  }
  /* the Llama-3-8B keep backward at 8192 tokens: the SwiGLU derivative's h and dgate over the
   * saved gate and up products when the call gives them up */
  {
    DriverOptions o = {.sm = 90, .opt_level = 3, .grad = true, .keep = true};
    Plan *p = compile_plan_opts("bench/suite/llama3_8b_layer.ffn", &o, NULL);
    int64_t dims[1] = {8192};
    size_t *off = malloc(sizeof(size_t) * (size_t)p->ntensors);
    int *input_of = malloc(sizeof(int) * (size_t)p->ntensors), over_saved = 0;
    size_t plain = memplan_assign(p, dims, off), consumed = memplan_assign_call(p, dims, NULL, off, input_of);
    for (int i = 0; i < p->ntensors; i++)
      if (input_of[i] >= 0) {
        over_saved++;
        CHECK(strncmp(p->tensors[input_of[i]].name, "saved.", 6) == 0, "tensor %d over input %s", i,
              p->tensors[input_of[i]].name);
      }
    /* as the bench's step calls it: grad.x and the gain's gradient (bf16, rowwise kernels) staged
     * in the workspace, the weights' gradients written by their kernels */
    bool *staged = calloc((size_t)p->ntensors, sizeof(bool));
    for (int i = 0; i < p->ntensors; i++)
      staged[i] = p->tensors[i].kind == PT_OUTPUT && (strcmp(p->tensors[i].name, "grad.x") == 0 ||
                                                      strcmp(p->tensors[i].name, "grad.post_attention_layernorm.weight") == 0);
    size_t step = memplan_assign_call(p, dims, staged, off, input_of), gx = (size_t)8192 * 4096 * 4;
    size_t tf = (size_t)8192 * 14336 * 2;
    printf("llama3_8b_layer keep backward, 8192 tokens: workspace %zu MiB, %zu MiB with the saved tensors given up, "
           "%zu MiB with grad.x (%zu MiB in f32) staged in it too\n", plain >> 20, consumed >> 20, step >> 20, gx >> 20);
    CHECK(step < consumed + gx, "grad.x staged in no dead bytes: %zu >= %zu + %zu", step, consumed, gx);
    free(staged);
    CHECK(over_saved == 2, "%d tensors over saved inputs, want 2 (h and dgate)", over_saved);
    CHECK(consumed + tf <= plain, "saved %zu bytes, want at least a [T, F] bf16 (%zu): the peak was three of them",
          plain - consumed, tf);
    free(off), free(input_of);
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
