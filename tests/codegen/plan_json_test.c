/* plan_json_test.c: plan_from_json, which reads launch plans from files that may be damaged
 * or stale, refuses every bad plan with a message that names the element and the problem (and
 * no stray characters), and reads back what plan_to_json wrote. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "plan_util.h"
#include "codegen/driver.h"

/* Parses text; checks it is refused with exactly `want` (or, with prefix, a message that
 * starts with it). */
static void expect_text(const char *text, const char *want, bool prefix, int line) {
  char err[1024] = "";
  Plan *p = plan_from_json(text, err, sizeof err);
  CHECK(!p, "line %d: accepted a plan that should fail with \"%s\"", line, want);
  plan_destroy(p);
  bool ok = prefix ? strncmp(err, want, strlen(want)) == 0 : strcmp(err, want) == 0;
  CHECK(ok, "line %d: got \"%s\", want %s\"%s\"", line, err, prefix ? "a message starting " : "", want);
}

/* The valid plan `good` with `edit` applied: the edit is a JSON path ("steps.0.args.1"), and
 * the new value (json text), or NULL to delete the field. */
static void expect(const char *good, const char *path, const char *value, const char *want, bool prefix, int line) {
  json_t *root = json_loads(good, 0, NULL), *o = root;
  char buf[256], *save = NULL;
  snprintf(buf, sizeof buf, "%s", path);
  char *key = strtok_r(buf, ".", &save), *next;
  while ((next = strtok_r(NULL, ".", &save))) {
    o = json_is_array(o) ? json_array_get(o, (size_t)atoi(key)) : json_object_get(o, key);
    key = next;
  }
  json_t *v = value ? json_loads(value, JSON_DECODE_ANY, NULL) : NULL;
  if (json_is_array(o))
    json_array_set_new(o, (size_t)atoi(key), v);
  else if (v)
    json_object_set_new(o, key, v);
  else
    json_object_del(o, key);
  char *text = json_dumps(root, JSON_COMPACT);
  expect_text(text, want, prefix, line);
  free(text);
  json_decref(root);
}

#define EXPECT(path, value, want) expect(good, path, value, want, false, __LINE__)
#define EXPECT_PREFIX(path, value, want) expect(good, path, value, want, true, __LINE__)

/* The plans of backward graphs (their kernels of kernels/grad.cuh) read back as written. */
static void backward_round_trip(const char *rel) {
  DriverOptions o = {.sm = 90, .opt_level = 3, .grad = true};
  Plan *plan = compile_plan_opts(rel, &o, NULL);
  char *text = plan_to_json(plan), err[1024];
  Plan *back = plan_from_json(text, err, sizeof err);
  CHECK(back, "%s: the backward graph's plan is refused: %s", rel, err);
  if (back) {
    char *again = plan_to_json(back);
    CHECK(strcmp(again, text) == 0, "%s: the backward graph's plan changes in a round trip", rel);
    free(again);
  }
  plan_destroy(back);
  plan_destroy(plan);
  free(text);
}

/* The direct forms of a weight gradient on sm_90 (variants with "out": runtime/grad.c launches
 * them on the caller's tensor): read back, and refused on any other variant or type. */
static void direct_forms(void) {
  DriverOptions o = {.sm = 90, .opt_level = 3, .grad = true};
  Plan *plan = compile_plan_opts("examples/llama3_tiny.ffn", &o, NULL);
  int k = 0;
  while (k < plan->nkernels && plan->kernels[k].op != OP_MATMUL_AT)
    k++;
  CHECK(k < plan->nkernels && plan->kernels[k].nvariants == 5, "a weight gradient with five variants");
  if (k == plan->nkernels)
    return;
  const KernelVariant *v = plan->kernels[k].variants;
  CHECK(v[0].out == DT_NONE && v[1].out == DT_NONE && !v[0].accumulate, "the plan's own forms write its f32 tensor");
  CHECK(v[2].out == DT_BF16 && !v[2].accumulate && strstr(v[2].func, "_wgrad_128x256x64_bf16"), "%s", v[2].func);
  CHECK(v[3].out == DT_F32 && v[3].accumulate && strstr(v[3].func, "_f32acc"), "%s", v[3].func);
  CHECK(v[4].out == DT_BF16 && v[4].accumulate && strstr(v[4].func, "_bf16acc"), "%s", v[4].func);
  char *good = plan_to_json(plan), path[64], where[64], want[256];
  snprintf(where, sizeof where, "launch plan: kernel %d variant", k);
  snprintf(path, sizeof path, "kernels.%d.variants.2.out", k);
  snprintf(want, sizeof want, "%s 2: 'out' = 'f16': only a weight gradient's wgmma variant writes the caller's "
           "tensor, in f32 or bf16", where);
  EXPECT(path, "\"f16\"", want);
  snprintf(path, sizeof path, "kernels.%d.variants.1.out", k); /* the mma.sync form */
  snprintf(want, sizeof want, "%s 1: 'out' = 'bf16': only", where);
  EXPECT_PREFIX(path, "\"bf16\"", want);
  snprintf(path, sizeof path, "kernels.%d.variants.0.accumulate", k);
  snprintf(want, sizeof want, "%s 0: 'accumulate' without 'out'", where);
  EXPECT(path, "true", want);
  snprintf(path, sizeof path, "kernels.%d.variants.3.accumulate", k);
  snprintf(want, sizeof want, "%s 3: field 'accumulate' missing or of the wrong type", where);
  EXPECT(path, NULL, want);
  snprintf(path, sizeof path, "kernels.%d.op", k);
  snprintf(want, sizeof want, "%s 2: 'out' on a kernel of op 'add', not matmul_at", where);
  EXPECT(path, "\"add\"", want);
  free(good);
  plan_destroy(plan);
}

/* Input gradients that read their weights as they lie (sm_90, 16-bit: variants with "b_kn",
 * kernels/gemm_sm90p.cuh B_KN): two persistent variants each, ping-pong 128 x 128 (the rule,
 * first) and cooperative 128 x 256, no load-time transpose left in the plan; sm_80 and the
 * forward program keep theirs; "b_kn" refused on any other kind. */
static void weights_as_they_lie(void) {
  DriverOptions o = {.sm = 90, .opt_level = 3, .grad = true};
  Plan *plan = compile_plan_opts("examples/llama3_tiny.ffn", &o, NULL);
  int kn = 0, k_first = -1, w = -1, transposes = 0;
  for (int k = 0; k < plan->nkernels; k++) {
    const PlanKernel *pk = &plan->kernels[k];
    for (int v = 0; v < pk->nvariants; v++)
      if (pk->variants[v].b_kn) {
        kn += v == 0;
        if (k_first < 0)
          k_first = k;
        const ffn_gemm_config *c = &pk->variants[v].cfg;
        CHECK(pk->kind == KK_GEMM && pk->nvariants == 2 && pk->streams == 1 && c->kind == FFN_GEMM_SM90P &&
                  (v == 0 ? c->wm == c->bm && strcmp(c->name, "tmap_ppkn_128x128x64") == 0
                          : c->wm == 64 && c->bn == 256 && strcmp(c->name, "tmap_coopkn_128x256x64") == 0),
              "kernel %d: b_kn on %s", k, pk->variants[v].func);
      }
    if (pk->op == OP_MATMUL_AT && w < 0)
      w = k;
  }
  for (int i = 0; i < plan->nprep; i++)
    transposes += plan->prep[i].op == OP_TRANSPOSE;
  /* three: the dgrad of down (one kernel for every layer: its epilogue stores the product alone,
   * passes/fuse.c's one-operand rule) and the dgrads of gate and up */
  CHECK(kn == 3 && transposes == 0, "llama3_tiny's backward graph on sm_90: %d kernels read B as [K, N] (want 3), %d load-time "
        "transposes (want 0)", kn, transposes);
  if (w >= 0) {
    char *good = plan_to_json(plan), path[64], want[256];
    snprintf(path, sizeof path, "kernels.%d.variants.0.b_kn", w);
    snprintf(want, sizeof want, "launch plan: kernel %d variant 0: 'b_kn': only the persistent wgmma GEMM reads B as [K, N]", w);
    EXPECT(path, "true", want);
    free(good);
  }
  plan_destroy(plan);
  DriverOptions others[2] = {{.sm = 80, .opt_level = 3, .grad = true}, {.sm = 90, .opt_level = 3}};
  for (int i = 0; i < 2; i++) {
    plan = compile_plan_opts("examples/llama3_tiny.ffn", &others[i], NULL);
    kn = transposes = 0;
    for (int k = 0; k < plan->nkernels; k++)
      for (int v = 0; v < plan->kernels[k].nvariants; v++)
        kn += plan->kernels[k].variants[v].b_kn;
    CHECK(kn == 0, "%s: %d kernels read B as [K, N]", i ? "the sm_90 forward program" : "sm_80's backward graph", kn);
    plan_destroy(plan);
  }
}

/* Weight-only quantized products of bf16 activations (KernelVariant.dq, .mx): after their own
 * kernels, on sm_90 the mixed-input TMA mid tile (mx: codes turned into bf16 in shared memory,
 * 65-128 rows; for i4 of whole 64-k groups then the codes-in-registers tile, tmar_128x128x64,
 * gemm_wqrs.cuh, 129-512 rows), then the 16-bit tensor-core configurations that read the weights
 * dequantized to bf16 (sm_90: the TMA mid tile and the two persistent ones; sm_80: the 128 x 256
 * tile), and "wq_bits" / "wq_group" on the kernel; none for f32 activations. The quantized kernels
 * keep up to 64 rows (sm_90, or i4) or 159 (i8 on sm_80). The plan reads back as written; "dq" and
 * "mx" refused on a kernel without quantized weights, "mx" on any but a TMA tile, and a quantized
 * kernel without its codes and scales. */
static void dequantized_prefill(void) {
  static const struct {
    const char *model;
    int sm, bits, group, dq, mx;
  } cases[] = {{"tests/gpu/models/wq_llama_i4g128_bf16.ffn", 90, 4, 128, 3, 2},
               {"tests/gpu/models/wq_llama_i8_bf16.ffn", 80, 8, 0, 1, 0},
               {"tests/gpu/models/wq_llama_i8_bf16.ffn", 90, 8, 0, 3, 1},
               {"tests/gpu/models/wq_llama_i4g32_f32.ffn", 90, 4, 32, 0, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    DriverOptions o = {.sm = cases[i].sm, .opt_level = 3};
    Plan *plan = compile_plan_opts(cases[i].model, &o, NULL);
    int gemm = -1;
    for (int k = 0; k < plan->nkernels; k++) {
      const PlanKernel *pk = &plan->kernels[k];
      if (pk->kind != KK_GEMM)
        continue;
      gemm = gemm < 0 ? k : gemm;
      int dq = 0, mx = 0, first = -1, quant_max = 0;
      for (int v = 0; v < pk->nvariants; v++) {
        const KernelVariant *kv = &pk->variants[v];
        if (kv->mx) {
          mx++;
          bool rs = strcmp(kv->cfg.name, "tmar_128x128x64") == 0; /* gemm_wqrs: i4, whole 64-k groups */
          CHECK(first < 0 && !kv->dq && (strncmp(kv->cfg.name, "tmaq_", 5) == 0 || (rs && cases[i].bits == 4)) &&
                    kv->cfg.kind == FFN_GEMM_SM90T && kv->max_m == (rs ? 512 : 128) && !kv->ext_stats &&
                    (!rs || (kv->smem == wqrs_smem_bytes(128, 8) && kv->threads == 384)),
                "%s kernel %d: mx variant %s (max_m %lld) after the dq ones", cases[i].model, k, kv->cfg.name,
                (long long)kv->max_m);
        } else if (kv->dq) {
          dq++;
          first = first < 0 ? v : first;
          CHECK(kv->cfg.kind == (cases[i].sm == 90 ? (kv->max_m ? FFN_GEMM_SM90T : FFN_GEMM_SM90P) : FFN_GEMM_SM80) &&
                    (kv->max_m == 0 || kv->max_m > 64),
                "%s kernel %d: dq variant %s (max_m %lld)", cases[i].model, k, kv->cfg.name, (long long)kv->max_m);
        } else {
          CHECK(first < 0 && mx == 0 && (kv->cfg.kind == FFN_GEMM_WQ || kv->cfg.kind == FFN_GEMM_WQD),
                "%s kernel %d: variant %s after the mx or dq ones or not quantized", cases[i].model, k, kv->cfg.name);
          quant_max = kv->max_m == 0 ? 1 << 30 : kv->max_m > quant_max ? (int)kv->max_m : quant_max;
        }
      }
      int want_max = cases[i].mx || cases[i].bits == 4 ? 64 : 159;
      CHECK(pk->wq_bits == cases[i].bits && pk->wq_group == cases[i].group && dq == cases[i].dq && mx == cases[i].mx &&
                (dq ? quant_max == want_max : quant_max == 1 << 30),
            "%s kernel %d: wq_bits %d group %d, %d dq variants (want %d), %d mx (want %d), quantized kernels up to %d rows",
            cases[i].model, k, pk->wq_bits, pk->wq_group, dq, cases[i].dq, mx, cases[i].mx, quant_max);
    }
    char *good = plan_to_json(plan), err[1024];
    Plan *back = plan_from_json(good, err, sizeof err);
    CHECK(back, "%s: refused after a round trip: %s", cases[i].model, err);
    char *again = back ? plan_to_json(back) : NULL;
    CHECK(again && strcmp(again, good) == 0, "%s: the plan changes in a round trip", cases[i].model);
    free(again);
    plan_destroy(back);
    if (cases[i].dq && gemm >= 0) {
      char path[64], want[160];
      snprintf(path, sizeof path, "kernels.%d.wq_bits", gemm);
      int v = 0;
      while (!plan->kernels[gemm].variants[v].dq && !plan->kernels[gemm].variants[v].mx) /* the first is refused */
        v++;
      snprintf(want, sizeof want, "launch plan: kernel %d variant %d: '%s' on a kernel without quantized weights ('wq_bits')",
               gemm, v, plan->kernels[gemm].variants[v].mx ? "mx" : "dq");
      EXPECT(path, NULL, want);
      if (cases[i].mx) { /* a quantized kernel's own variant (0) marked mx */
        char own[64];
        snprintf(own, sizeof own, "kernels.%d.variants.0.mx", gemm);
        snprintf(want, sizeof want,
                 "launch plan: kernel %d variant 0: 'mx': only a TMA wgmma tile turns codes into bf16 in shared memory", gemm);
        EXPECT(own, "true", want);
      }
      snprintf(want, sizeof want, "launch plan: kernel %d: 'wq_bits' = 5: weights are quantized to 8 or 4 bits", gemm);
      EXPECT(path, "5", want);
    }
    free(good);
    plan_destroy(plan);
  }
}

int main(void) {
  direct_forms();
  dequantized_prefill();
  weights_as_they_lie();
  backward_round_trip("examples/llama3_tiny.ffn");
  backward_round_trip("tests/gpu/models/fused_llama.ffn");
  Plan *plan = compile_plan("examples/llama3_tiny.ffn");
  char *good = plan_to_json(plan), err[1024];
  CHECK(plan->nprep > 0 && plan->nsteps > 0 && plan->nkernels > 0, "the example needs prep steps and launches");

  /* round trip */
  Plan *back = plan_from_json(good, err, sizeof err);
  CHECK(back, "the compiler's own plan is refused: %s", err);
  if (back) {
    CHECK(back->ntensors == plan->ntensors && back->nprep == plan->nprep && back->nsteps == plan->nsteps &&
              back->nkernels == plan->nkernels,
          "counts differ after a round trip");
    char *again = plan_to_json(back);
    CHECK(strcmp(again, good) == 0, "plan_to_json(plan_from_json(x)) != x");
    free(again);
  }
  plan_destroy(back);

  /* missing fields and wrong types: the message is exactly this (it once ended in "type0") */
  EXPECT("model", NULL, "launch plan: field 'model' missing or of the wrong type");
  EXPECT("model", "42", "launch plan: field 'model' missing or of the wrong type");
  EXPECT("ninputs", "\"1\"", "launch plan: field 'ninputs' missing or of the wrong type");
  EXPECT("tensors", "{}", "launch plan: field 'tensors' missing or of the wrong type");
  EXPECT("tensors.0.shape", "3", "launch plan: tensor 0: field 'shape' missing or of the wrong type");
  EXPECT("tensors.1", "7", "launch plan: tensor 1: not an object");
  EXPECT("kernels.0.variants.0.threads", "true",
         "launch plan: kernel 0 variant 0: field 'threads' missing or of the wrong type");
  EXPECT("noutputs", "0", "launch plan: 'noutputs' = 0 is out of range [1, 4096]");

  /* unknown names */
  EXPECT("format", "\"ffnc-plan-0\"", "launch plan: unknown format (expected ffnc-plan-1)");
  EXPECT("tensors.0.kind", "\"banana\"", "launch plan: tensor 0: kind 'banana' unknown");
  EXPECT("tensors.0.dtype", "\"f7\"", "launch plan: tensor 0: dtype 'f7' unknown");
  EXPECT("tensors.0.shape.0", "\"Q\"", "launch plan: tensor 0: 'shape' entry 0 is neither a size nor a dim of the plan");
  EXPECT("prep.0.op", "\"frobnicate\"", "launch plan: prep step 0: op 'frobnicate' unknown");
  EXPECT("kernels.0.kind", "\"simd\"", "launch plan: kernel 0: kind 'simd' unknown");
  EXPECT("kernels.0.op", "\"frobnicate\"", "launch plan: kernel 0: op 'frobnicate' unknown");
  EXPECT("steps.0.kind", "\"jump\"", "launch plan: step 0: kind 'jump' unknown");

  /* out-of-range tensor ids and counts */
  char want[256];
  snprintf(want, sizeof want, "launch plan: step 0: 'args' entry 1 is not an integer in [0, %d)", plan->ntensors);
  EXPECT("steps.0.args.1", "100000", want);
  snprintf(want, sizeof want, "launch plan: step 0: 'args' entry 0 is not an integer in [0, %d)", plan->ntensors);
  EXPECT("steps.0.args.0", "-1", want);
  snprintf(want, sizeof want, "launch plan: prep step 0: 'out' = %d is out of range [0, %d]", plan->ntensors,
           plan->ntensors - 1);
  char id[32];
  snprintf(id, sizeof id, "%d", plan->ntensors);
  EXPECT("prep.0.out", id, want);
  EXPECT_PREFIX("steps.0.kernel", "99", "launch plan: step 0: 'kernel' = 99 is out of range");
  EXPECT("prep.0.args", "[]", "launch plan: prep step 0: mul takes 2 to 2 operands, not 0");
  EXPECT("steps.0.args", "[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]",
         "launch plan: step 0: too many args (31, at most 30)");

  /* stale: another ffnc's op table or kernel ABI */
  EXPECT_PREFIX("abi", "\"0123456789abcdef\"", "launch plan: built by an incompatible ffnc (op table and kernel ABI hash "
                                               "0123456789abcdef, this ffnc has ");
  EXPECT_PREFIX("abi", NULL, "launch plan: built by an incompatible ffnc (op table and kernel ABI hash none");
  CHECK(strlen(plan_abi_hash()) == 16, "the ABI hash is 16 hex digits, got '%s'", plan_abi_hash());

  /* truncated and damaged text: refused with a message, never a crash */
  size_t len = strlen(good);
  char *cut = malloc(len + 1);
  for (size_t n = 0; n < len; n += len / 97 + 1) {
    memcpy(cut, good, n);
    cut[n] = 0;
    expect_text(cut, "launch plan: not valid JSON (", true, __LINE__);
  }
  srand(7);
  for (int i = 0; i < 2000; i++) {
    memcpy(cut, good, len + 1);
    cut[rand() % len] = "0}]\",:x-9a "[rand() % 11];
    Plan *p = plan_from_json(cut, err, sizeof err);
    CHECK(p || strncmp(err, "launch plan: ", 13) == 0, "damaged plan: bad message \"%s\"", err);
    plan_destroy(p);
  }
  free(cut);
  free(good);
  plan_destroy(plan);
  return check_result("plan_json_test");
}
