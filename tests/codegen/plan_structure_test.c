/* plan_structure_test.c: what the fusion promises, checked on the compiled plans (no GPU):
 *
 *  - the Llama-3-8B example (32 sublayers) runs as at most three kernels per FFN sublayer
 *    (it is two: gate/up with the norm statistics and SwiGLU in the epilogue; down with the
 *    residual add), and no tensor of [T, 2F] (or [T, F] gate or up halves) is ever written:
 *    the only run-time intermediates are the [T, F] activations and the [T, D] residual stream;
 *  - GPT-2 (layernorm with bias, biases, gelu_tanh) and Phi-3 (fused gate_up weight + chunk)
 *    also run as two kernels per sublayer;
 *  - identical layers share kernels: the number of distinct kernels does not grow with depth.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/driver.h"

#include "check.h"
#include "plan_util.h"

static int launches(const Plan *p) {
  int n = 0;
  for (int s = 0; s < p->nsteps; s++)
    n += p->steps[s].kind == STEP_LAUNCH;
  return n;
}

/* Every tensor written at run time (scratch and outputs) has last dim in `allowed`. */
static void check_written(const Plan *p, const char *model, const int64_t *allowed, int nallowed) {
  for (int t = 0; t < p->ntensors; t++) {
    const PlanTensor *pt = &p->tensors[t];
    if (pt->kind != PT_SCRATCH && pt->kind != PT_OUTPUT)
      continue;
    int64_t last = pt->dims[pt->rank - 1].size;
    bool ok = false;
    for (int i = 0; i < nallowed; i++)
      ok |= last == allowed[i];
    CHECK(ok, "%s writes a [.., %lld] tensor at run time", model, (long long)last);
  }
}

int main(void) {
  Plan *llama = compile_plan("examples/llama3_8b.ffn");
  CHECK(launches(llama) <= 3 * 32, "llama3_8b: %d launches for 32 sublayers", launches(llama));
  CHECK(launches(llama) == 2 * 32, "llama3_8b: expected 2 kernels per sublayer, got %d launches", launches(llama));
  CHECK(llama->nkernels == 2, "llama3_8b: %d distinct kernels, expected 2 shared by all layers", llama->nkernels);
  int64_t llama_ok[] = {4096, 14336}; /* D and F, never 2F = 28672 */
  check_written(llama, "llama3_8b", llama_ok, 2);
  int64_t hidden = 0;
  for (int t = 0; t < llama->ntensors; t++)
    if (llama->tensors[t].kind == PT_SCRATCH && llama->tensors[t].dims[1].size == 14336)
      hidden++;
  CHECK(hidden == 32, "llama3_8b: %lld [T, F] intermediates, expected one per sublayer", (long long)hidden);
  printf("llama3_8b: %d launches, %d kernels\n", launches(llama), llama->nkernels);

  Plan *gpt2 = compile_plan("examples/gpt2.ffn");
  CHECK(launches(gpt2) == 2 * 12, "gpt2: %d launches for 12 sublayers", launches(gpt2));
  printf("gpt2: %d launches, %d kernels\n", launches(gpt2), gpt2->nkernels);

  Plan *phi3 = compile_plan("examples/phi3_mini.ffn");
  CHECK(launches(phi3) == 2 * 32, "phi3_mini: %d launches for 32 sublayers", launches(phi3));
  int64_t phi_ok[] = {3072, 8192}; /* never the [T, 2F] gate_up product */
  check_written(phi3, "phi3_mini", phi_ok, 2);
  printf("phi3_mini: %d launches, %d kernels\n", launches(phi3), phi3->nkernels);

  plan_destroy(llama);
  plan_destroy(gpt2);
  plan_destroy(phi3);
  return check_result("plan_structure_test");
}
