/* gemm_rule_test: the built-in rule's choice of tile configuration (runtime/exec.c: exec_heuristic,
 * kernels/gemm_host.h: ffn_gemm_regime, ffn_gemm_prefer_persistent) on the suite's shapes, as the
 * H200's `ffnc tune` measured them (kernels/NOTES.md, "Eleventh session": the rule at 17-64 and
 * 257-512 rows). No GPU: the plans are compiled for sm_90 and the choices read back. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "plan_util.h"
#include "runtime/rt.h"

/* The configuration the rule launches for GEMM kernel `nth` (0: the first GEMM of the plan) at
 * `rows` rows on a 132-SM card of gbs GB/s DRAM bandwidth (0: unknown, the H200's rule). */
static const char *choice_on(const Plan *p, int nth, int64_t rows, int gbs) {
  for (int k = 0; k < p->nkernels; k++)
    if (p->kernels[k].kind == KK_GEMM && nth-- == 0)
      return exec_heuristic(&p->kernels[k], rows, 132, gbs).v->cfg.name;
  return "(no such GEMM)";
}

static const char *choice(const Plan *p, int nth, int64_t rows) { return choice_on(p, nth, rows, 0); }

/* the same on a card short of DRAM bandwidth (H100 SXM, 3352 GB/s; api.c: dram_gbs) */
static void expect_h100(const Plan *p, const char *model, int nth, int64_t rows, const char *want) {
  const char *got = choice_on(p, nth, rows, 3352);
  CHECK(strcmp(got, want) == 0, "%s GEMM %d at %lld rows (H100): %s, want %s", model, nth, (long long)rows, got, want);
}

static void expect(const Plan *p, const char *model, int nth, int64_t rows, const char *want) {
  const char *got = choice(p, nth, rows);
  CHECK(strcmp(got, want) == 0, "%s GEMM %d at %lld rows: %s, want %s", model, nth, (long long)rows, got, want);
}

/* Weight-only quantized products (plan.h: KernelVariant.mx, .dq), sm_90: their own kernels up to
 * 64 rows, the mixed-input mid tile (codes turned into bf16 in shared memory) from 65 to 128, for
 * int4 of whole 64-k groups the codes-in-registers tile (tmar_128x128x64) from 129 to 512, the
 * bf16 products of dequantized weights beyond, on either card, at every row count the suite and
 * the tests use. With FFNC_WQ_MIX=0 (ffn_model.no_mx) the dq mid tile in place of the mixed one;
 * with FFNC_WQ_DEQUANT=0 (no_dq, which implies no_mx) the same below 65 rows and the quantized
 * kernel of the most rows (whose regime the mx variant cuts at its first row) beyond. */
static void quantized_prefill(void) {
  static const char *const models[] = {"bench/suite/llama3_8b_layer_i4g128.ffn", "bench/suite/llama3_70b_layer_i8.ffn"};
  static const int64_t rows[] = {1, 16, 64, 65, 128, 129, 159, 160, 256, 512, 513, 1000, 1024, 4096, 8192};
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
    Plan *p = compile_plan(models[i]);
    ffn_program prog = {.plan = p};
    ffn_model m = {.prog = &prog, .sms = 132}, off = m, nomx = m;
    off.no_dq = off.no_mx = true;
    nomx.no_mx = true;
    for (int k = 0; k < p->nkernels; k++)
      for (size_t r = 0; r < sizeof rows / sizeof rows[0] && p->kernels[k].kind == KK_GEMM; r++) {
        const PlanKernel *pk = &p->kernels[k];
        bool i4 = pk->wq_bits == 4, rs = i4 && rows[r] > 128 && rows[r] <= 512;
        bool mx = rows[r] >= 65 && rows[r] <= (i4 ? 512 : 128);
        for (int gbs = 0; gbs <= 3352; gbs += 3352) {
          m.dram_gbs = off.dram_gbs = nomx.dram_gbs = gbs;
          const KernelVariant *v = exec_choose(&m, pk, rows[r]).v, *q = exec_choose(&off, pk, rows[r]).v;
          const KernelVariant *x = exec_choose(&nomx, pk, rows[r]).v;
          bool fallback = rows[r] >= 65 ? !q->dq && !q->mx && q->max_m == 64 : q == v;
          bool dq_mid = mx ? x->dq && x->cfg.kind == FFN_GEMM_SM90T && x->max_m == 512 : x == v;
          CHECK(v->mx == mx && v->dq == (!mx && rows[r] > 64) && fallback && dq_mid &&
                    rs == (strcmp(v->cfg.name, "tmar_128x128x64") == 0),
                "%s kernel %d at %lld rows (%d GB/s): %s (mx %d, dq %d), without mx %s, without dq %s", models[i], k,
                (long long)rows[r], gbs, v->cfg.name, v->mx, v->dq, x->cfg.name, q->cfg.name);
        }
      }
    plan_destroy(p);
  }
}

int main(void) {
  /* GPT GELU: one stream each. up [4096 -> 16384], down [16384 -> 4096] */
  Plan *gpt = compile_plan("bench/suite/gpt_gelu_4096.ffn");
  expect(gpt, "gpt", 0, 16, "sm80_16x128x128");
  expect(gpt, "gpt", 0, 32, "sm80_16x128x128"); /* the 16-row tile serves 32 rows of one stream */
  expect(gpt, "gpt", 0, 33, "sm80_32x128x64");
  expect(gpt, "gpt", 0, 64, "sm80_32x128x64");
  expect(gpt, "gpt", 1, 64, "sm80_32x128x64");
  expect(gpt, "gpt", 0, 128, "tma_128x128x64");
  expect(gpt, "gpt", 0, 256, "tma_128x128x64");     /* 256 tiles: fewer than two per SM */
  expect(gpt, "gpt", 0, 384, "tmap_pp_128x128x64"); /* 384 tiles */
  expect(gpt, "gpt", 0, 512, "tmap_pp_128x128x64");
  expect(gpt, "gpt", 1, 384, "tma_128x128x64"); /* down: 96 tiles, split-K */
  expect(gpt, "gpt", 1, 512, "tma_128x128x64");
  expect(gpt, "gpt", 0, 513, "tmap_pp_128x128x64");
  /* Llama-3-8B: gate/up two streams (the table's tiles), down one */
  Plan *l8 = compile_plan("bench/suite/llama3_8b_layer.ffn");
  expect(l8, "8b", 0, 32, "sm80_32x128x64");
  expect(l8, "8b", 0, 64, "sm80_64x128x64");
  expect(l8, "8b", 1, 64, "sm80_32x128x64");
  expect(l8, "8b", 1, 32, "sm80_16x128x128");
  expect(l8, "8b", 0, 384, "tma_128x224x64"); /* two streams: ping-pong from 385 rows */
  expect(l8, "8b", 0, 512, "tmap_pp_128x128x64");
  expect(l8, "8b", 1, 512, "tma_128x128x64");
  /* a card short of DRAM bandwidth: the cooperative 128 x 256 above 512 rows, the rest as on the
   * H200 (kernels/gemm_host.h: ffn_gemm_prefer_wide); the H200's stays ping-pong */
  expect(l8, "8b", 0, 1024, "tmap_pp_128x128x64");
  expect(l8, "8b", 1, 8192, "tmap_pp_128x128x64");
  expect_h100(l8, "8b", 0, 512, "tmap_pp_128x128x64");
  expect_h100(l8, "8b", 0, 384, "tma_128x224x64");
  expect_h100(l8, "8b", 0, 513, "tmap_coop_128x256x64");
  expect_h100(l8, "8b", 0, 1024, "tmap_coop_128x256x64");
  expect_h100(l8, "8b", 1, 8192, "tmap_coop_128x256x64");
  expect_h100(l8, "8b", 0, 64, "sm80_64x128x64");
  /* fp8 products keep the table's regimes */
  Plan *f8 = compile_plan("bench/suite/llama3_8b_layer_f8.ffn");
  expect(f8, "8b fp8", 1, 64, "sm80_64x128x64");
  expect(f8, "8b fp8", 1, 32, "sm80_32x128x64");
  /* the backward's dgrads reading the weights as they lie: above 512 rows the cooperative form
   * of the same B_KN kernel on either card, ping-pong below */
  DriverOptions go = {.sm = 90, .opt_level = 3, .grad = true};
  Plan *g = compile_plan_opts("examples/llama3_tiny.ffn", &go, NULL);
  int bkn = 0;
  for (int k = 0; k < g->nkernels; k++)
    if (g->kernels[k].kind == KK_GEMM && g->kernels[k].variants[0].b_kn) {
      bkn++;
      const char *h200 = exec_heuristic(&g->kernels[k], 8192, 132, 4915).v->cfg.name;
      const char *h100 = exec_heuristic(&g->kernels[k], 1024, 132, 3352).v->cfg.name;
      const char *h200_512 = exec_heuristic(&g->kernels[k], 512, 132, 4915).v->cfg.name;
      const char *h100_512 = exec_heuristic(&g->kernels[k], 512, 132, 3352).v->cfg.name;
      CHECK(strcmp(h200, "tmap_coopkn_128x256x64") == 0 && strcmp(h100, "tmap_coopkn_128x256x64") == 0 &&
                strcmp(h200_512, "tmap_ppkn_128x128x64") == 0 && strcmp(h100_512, "tmap_ppkn_128x128x64") == 0,
            "backward kernel %d: %s / %s / %s / %s", k, h200, h100, h200_512, h100_512);
    }
  CHECK(bkn > 0, "the backward plan has B_KN dgrads");
  plan_destroy(g);
  quantized_prefill();
  plan_destroy(gpt);
  plan_destroy(l8);
  plan_destroy(f8);
  return check_result("gemm_rule_test");
}
