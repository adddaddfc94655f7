/* plan_structure_test.c: what the fusion promises, checked on the compiled plans (no GPU):
 *
 *  - the Llama-3-8B example (32 sublayers) runs as at most three kernels per FFN sublayer
 *    (it is two: gate/up with the norm statistics and SwiGLU in the epilogue; down with the
 *    residual add), and no tensor of [T, 2F] (or [T, F] gate or up halves) is ever written:
 *    the only run-time intermediates are the [T, F] activations and the [T, D] residual stream;
 *  - GPT-2 (layernorm with bias, biases, gelu_tanh) and Phi-3 (fused gate_up weight + chunk)
 *    also run as two kernels per sublayer;
 *  - identical layers share kernels: the number of distinct kernels does not grow with depth;
 *  - a GEMM's epilogue reads at most one tensor of its output's shape (passes/fuse.c), in every
 *    mode (program, training forward, both backward graphs); in the keep backward of Llama the
 *    dgrad of the down product stores its product alone and one rowwise kernel per layer reads
 *    the saved gate and up and writes h and the SwiGLU derivative's two halves.
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

/* Whether launch s reads tensor t (inputs, weights, results of earlier launches) rather than
 * writes it. */
static bool reads(const Plan *p, int s, int t) {
  PlanTensorKind k = p->tensors[t].kind;
  return k == PT_INPUT || k == PT_WEIGHT || k == PT_DERIVED || (k == PT_SCRATCH && p->tensors[t].first < s);
}

/* Whether tensor t is [rows..., n] with rows at run time. */
static bool rows_of(const Plan *p, int t, int64_t n) {
  const PlanTensor *pt = &p->tensors[t];
  return pt->rank >= 2 && pt->dims[0].sym >= 0 && pt->dims[pt->rank - 1].size == n;
}

/* The tensors of its output's shape that GEMM launch s reads in its epilogue (past A and B). */
static int epilogue_full_reads(const Plan *p, int s) {
  const PlanStep *st = &p->steps[s];
  int n = 0;
  for (int i = 2; i < st->nargs; i++)
    n += reads(p, s, st->args[i]) && rows_of(p, st->args[i], p->kernels[st->kernel].n);
  return n;
}

static void check_epilogues(const char *model, bool grad, bool keep) {
  DriverOptions o = {.sm = 90, .opt_level = 3, .grad = grad, .keep = keep};
  Plan *p = compile_plan_opts(model, &o, NULL);
  for (int s = 0; s < p->nsteps; s++) {
    const PlanStep *st = &p->steps[s];
    if (st->kind == STEP_LAUNCH && p->kernels[st->kernel].kind == KK_GEMM)
      CHECK(epilogue_full_reads(p, s) <= 1, "%s%s%s: step %d's epilogue reads %d tensors of its shape", model,
            grad ? " --grad" : "", keep ? " --keep" : "", s, epilogue_full_reads(p, s));
  }
  plan_destroy(p);
}

/* llama3_tiny's keep backward (F = 704, 4 layers): the dgrad GEMMs of F columns store their
 * product alone; the one launch per layer that reads the layer's saved gate and up reads that
 * dgrad too (dh, rounded to bf16: passes/grad.c, value_grad), and writes three bf16 [T, F]
 * tensors (h for the wgrad of down, the derivative's halves for the products of gate and up,
 * rounded to 16 bits as the epilogue did). */
static void check_keep_swiglu(void) {
  DriverOptions o = {.sm = 90, .opt_level = 3, .grad = true, .keep = true};
  Plan *p = compile_plan_opts("examples/llama3_tiny.ffn", &o, NULL);
  int plain = 0, derivative = 0;
  for (int s = 0; s < p->nsteps; s++) {
    const PlanStep *st = &p->steps[s];
    const PlanKernel *k = &p->kernels[st->kernel];
    if (st->kind != STEP_LAUNCH || k->n != 704)
      continue;
    if (k->kind == KK_GEMM) {
      CHECK(epilogue_full_reads(p, s) == 0, "llama3_tiny keep backward: step %d's epilogue reads [T, F]", s);
      plain += epilogue_full_reads(p, s) == 0;
      continue;
    }
    int saved = 0, dgrad = 0, written = 0;
    for (int i = 0; i < st->nargs; i++) {
      const PlanTensor *t = &p->tensors[st->args[i]];
      saved += t->kind == PT_INPUT && strncmp(t->name, "saved.", 6) == 0 && rows_of(p, st->args[i], 704);
      dgrad += reads(p, s, st->args[i]) && t->kind == PT_SCRATCH && t->dtype == DT_BF16 && rows_of(p, st->args[i], 704);
      written += !reads(p, s, st->args[i]) && t->dtype == DT_BF16 && rows_of(p, st->args[i], 704);
    }
    if (saved == 0)
      continue; /* a weight gradient */
    CHECK(saved == 2 && dgrad == 1 && written == 3,
          "llama3_tiny keep backward: step %d reads %d saved tensors and %d bf16 [T, F] dh, writes %d bf16 [T, F]", s,
          saved, dgrad, written);
    derivative++;
  }
  CHECK(plain == 4 && derivative == 4, "llama3_tiny keep backward: %d plain dgrad GEMMs of F columns, %d readers of saved", plain,
        derivative);
  plan_destroy(p);
}

/* The training forward of the keep policy reads the weights as they are bound (passes/passmgr.c:
 * weights_as_stored): no load-time copy for an optimizer step to make stale (Llama and GPT
 * sublayers with torch's [out, in] weights; Phi-3's one gate_up weight is still interleaved for
 * the SwiGLU epilogue, and [in, out] f32 weights still transposed for the SIMT GEMM). */
static void check_keep_forward_copies(void) {
  const char *models[] = {"examples/llama3_tiny.ffn", "bench/suite/gpt_gelu_4096.ffn", "bench/suite/llama3_8b_layer.ffn"};
  for (size_t m = 0; m < sizeof models / sizeof *models; m++) {
    DriverOptions o = {.sm = 90, .opt_level = 3, .keep = true};
    Plan *p = compile_plan_opts(models[m], &o, NULL);
    CHECK(p->nprep == 0, "%s --keep: %d load-time steps in the training forward, expected none", models[m], p->nprep);
    plan_destroy(p);
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

  const char *models[] = {"examples/llama3_tiny.ffn", "examples/gpt2_tiny.ffn", "examples/phi3_tiny.ffn",
                          "tests/gpu/models/unmerged_gate.ffn", "tests/gpu/models/f8_rowwise_wide.ffn",
                          "bench/suite/llama3_8b_layer.ffn"};
  for (size_t m = 0; m < sizeof models / sizeof *models; m++)
    for (int mode = 0; mode < 4; mode++)
      check_epilogues(models[m], mode >= 2, mode % 2 == 1);
  check_keep_swiglu();
  check_keep_forward_copies();
  return check_result("plan_structure_test");
}
