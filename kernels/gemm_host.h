/* gemm_host.h: host-side facts about the GEMM templates in kernels/gemm_sm80.cuh,
 * kernels/gemm_sm90.cuh and kernels/gemm_simt.cuh, for ffnc's code generator and runtime.
 * Plain C11, no CUDA headers.
 *
 * The code generator emits one kernel per (fused GEMM, configuration):
 *
 *   extern "C" __global__ void __launch_bounds__(c->threads, c->min_blocks) NAME(ffn::GemmArgs g, Epi epi) {
 *     extern __shared__ __align__(128) char smem[];
 *     ffn::gemm_sm80<c->bm, c->bn, c->bk, c->wm, c->wn, c->stages, S, STATS, T>(g, epi, smem);  // FFN_GEMM_SM80
 *     ffn::gemm_simt<c->bm, c->bn, c->bk, c->wm, c->wn, S, STATS, T>(g, epi, smem);             // FFN_GEMM_SIMT
 *     ffn::gemm_sm90<c->bm, c->bn, c->bk, c->stages, S, STATS, T, c->bm / c->wm, c->min_blocks, TMA>(g, epi, smem);
 *                                                       // FFN_GEMM_SM90 (TMA false), FFN_GEMM_SM90T (true)
 *     ffn::gemm_sm90<..., c->min_blocks, true, 2>(g, epi, smem);  // FFN_GEMM_SM90C, with __cluster_dims__(2, 1, 1)
 *     ffn::gemm_wq<BITS, c->bm, c->bn, c->bk, c->wn, c->wm, c->stages, S, STATS, T>(g, scales, group, epi, smem);
 *                                                                                            // FFN_GEMM_WQ
 *     ffn::gemm_wqd<BITS, c->bm, c->bn, c->wm, c->stages, S, STATS, T>(g, scales, group, epi, smem);
 *                                                                                            // FFN_GEMM_WQD
 *     ffn::gemm_wqdl<BITS, c->bm, c->bn, c->wm, c->stages, S, STATS, T, c->design>(g, scales, group, epi, smem);
 *                                                                           // FFN_GEMM_WQD, design > 0
 *   }
 *
 * (FFN_GEMM_SM90 and SM90T kernels must be compiled for sm_90a: NVRTC --gpu-architecture=sm_90a.
 * SM90T kernels take `const __grid_constant__ ffn::TmaMaps t` after their first argument, with
 * g.tma = &t: the runtime encodes A's and B's tensor maps per launch, ffn_gemm_tma_box.)
 *
 * and at run time, for the actual M:
 *
 *   const ffn_gemm_config *c = ffn_gemm_pick_config(FFN_GEMM_SM80, M);
 *   (on sm_90: FFN_GEMM_SM90 from 65 rows)
 *   int splits = ffn_gemm_pick_splits(M, N, S, K, c, num_sms);
 *   unsigned grid[3]; ffn_gemm_launch_grid(c, M, N, S, splits, num_sms, grid);
 *   size_t smem = ffn_gemm_smem_bytes(c, sizeof(T)); // T: A's element type
 *   cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem);
 *   cuLaunchKernel(f, grid[0], grid[1], grid[2], c->threads, 1, 1, smem, stream, ...);
 *
 * with args.ws pointing at ffn_gemm_ws_floats(c, M, N, S, splits) floats (none when splits == 1)
 * and args.counters at ffn_gemm_num_tiles(c, M, N, S) unsigneds, zeroed once when allocated: the
 * kernels leave them zero. Launches that share ws/counters must be stream-ordered.
 * N is the number of output columns per stream; B has S*N rows (gate/up interleaved by 8 when S==2).
 *
 * Grids: non-persistent kernels take one CTA per (tile, split): (tiles, 1, splits). Persistent ones
 * (FFN_GEMM_SM90P) take gridDim.x CTAs, any number >= 1, looping over the tiles * splits work items
 * (x, 1, 1); ffn_gemm_launch_grid gives min(items, num_sms * ctas_per_sm), and ffn_gemm_grid, which
 * does not know the SM count, one CTA per item (correct, but without the persistence).
 *
 * FFN_GEMM_SM90P kernels (gemm_sm90p.cuh) take the tensor maps as SM90T kernels do.
 *
 * FFN_GEMM_SM90C kernels run as clusters of ffn_gemm_cluster(c) == 2 CTAs along x (compiled with
 * __cluster_dims__, launched with plain cuLaunchKernel): the two take adjacent column tiles of one
 * row tile and multicast half of A each. Grid (2 * tiles_m * ceil(tiles_n / 2), 1, splits); with an
 * odd tiles_n the last pair's second CTA has no tile (it loads and shares its half of A only).
 */
#ifndef FFN_KERNELS_GEMM_HOST_H
#define FFN_KERNELS_GEMM_HOST_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>

#include "quant.cuh" /* gemm_wq's layout and shared memory */

typedef enum {
  FFN_GEMM_SM80, /* mma.sync tensor cores, T = bf16 or f16, K % 8 == 0 */
  FFN_GEMM_SIMT, /* f32 FMA, T = float (also bf16/f16), any K */
  FFN_GEMM_SM90, /* wgmma tensor cores (sm_90a only), T = bf16 or f16, K % 8 == 0 */
  FFN_GEMM_WQ,   /* weight-only i8 / i4 B dequantized in registers for mma.sync (gemm_wq.cuh);
                    bk: k per 512-byte tile of codes (32: i8, 64: i4), wn: B rows per warp (16),
                    stages: stages of wm k tiles in the cp.async ring of codes, scales and
                    activations */
  FFN_GEMM_SM90P, /* persistent FFN_GEMM_SM90T (gemm_sm90p.cuh, TMA): wm == bm:
                    the two consumer warpgroups ping-pong over whole tiles; wm == bm / 2: they
                    share each tile */
  FFN_GEMM_WQD,  /* FFN_GEMM_WQ's product at decode sizes (gemm_wqd.cuh): codes streamed into
                    registers, wm k tiles ahead per lane; stages: k tiles per chunk of
                    activations and scales (a multiple of wm); design > 0: gemm_wqdl.cuh
                    (i4 and i8), wm ring slots of four k tiles, stages = 4 wm */
  FFN_GEMM_SM90T, /* FFN_GEMM_SM90 with its operands loaded by the Tensor Memory Accelerator: one
                    producer thread, tensor maps of A and B as the kernel's second argument
                    (kernels/abi.cuh: TmaMaps); same tiles, shared memory and grid as SM90 */
  FFN_GEMM_SM90C /* FFN_GEMM_SM90T in 2-CTA clusters sharing A: each CTA's producer loads half of
                    the A k-tile and multicasts it to both (gemm_sm90.cuh, "Clusters"); same tiles
                    and shared memory as SM90T, A's box half as tall, grid padded to pairs */
} ffn_gemm_kind;

typedef struct {
  const char *name;
  ffn_gemm_kind kind;
  int bm, bn, bk; /* CTA tile; bn counts merged (S*N) columns */
  int wm, wn;     /* SM80: warp tile; SIMT: thread tile (TM, TN); SM90: rows x columns per consumer
                     warpgroup (bm / wm consumer warpgroups, wn == bn); WQ: wm k tiles per ring
                     stage, wn B rows per warp */
  int stages;     /* SM80/SM90: cp.async pipeline depth; SIMT: 2 (register double buffering) */
  int threads;    /* block size */
  int min_blocks;  /* second __launch_bounds__ argument (2 with 128 threads made ptxas spill: keep 1) */
  int ctas_per_sm; /* resident CTAs per SM (registers and smem, from ptxas), for ffn_gemm_pick_splits */
  int max_m;      /* recommended for M <= max_m; 0: any M */
  int design;     /* FFN_GEMM_WQD: 0 gemm_wqd; 2, 3, 4 the designs of gemm_wqdl (wm ring slots of
                     four k tiles, stages k tiles per chunk, 4 wm; i8: 2 only). Code generation
                     only: plans do not keep it (the runtime treats every FFN_GEMM_WQD alike) */
} ffn_gemm_config;

/* Recommended configurations, most specific regime first: the fastest measured per regime on an
 * H200 for the Llama-3-8B FFN GEMMs (kernels/NOTES.md). ctas_per_sm as the driver's occupancy
 * calculator reported there. */
static inline const ffn_gemm_config *ffn_gemm_configs(int *count) {
  static const ffn_gemm_config table[] = {
      /* name              kind           bm   bn   bk  wm  wn  st thr mb cta max_m design */
      {"sm80_16x128x128", FFN_GEMM_SM80, 16, 128, 128, 16, 32, 3, 128, 1, 2, 16, 0}, /* decode: 111 KB smem, 89 regs */
      {"sm80_32x128x64", FFN_GEMM_SM80, 32, 128, 64, 32, 32, 4, 128, 1, 2, 32, 0},   /* 80 KB, 106 regs */
      {"sm80_64x128x64", FFN_GEMM_SM80, 64, 128, 64, 32, 64, 4, 128, 1, 2, 64, 0},   /* 98 KB, 158 regs */
      {"sm80_128x256x64", FFN_GEMM_SM80, 128, 256, 64, 64, 64, 3, 256, 1, 1, 0, 0},  /* prefill: 147 KB, 216 regs */
      {"simt_32x64x16", FFN_GEMM_SIMT, 32, 64, 16, 4, 4, 2, 128, 4, 6, 32, 0},       /* f32, small M: 80 regs */
      {"simt_128x64x8", FFN_GEMM_SIMT, 128, 64, 8, 8, 4, 2, 256, 2, 2, 0, 0},        /* f32: 95 regs */
      /* sm_90a (wgmma), warp-specialized: one producer warpgroup + bm/wm consumer warpgroups.
       * At M <= 64 the sm80 configurations above are as fast or faster (M=1: up 60.8 vs 63.8 us,
       * down 36.4 vs 42.5 us): prefer FFN_GEMM_SM80 there on sm_90 too. */
      {"sm90_64x128x64", FFN_GEMM_SM90, 64, 128, 64, 64, 128, 4, 256, 2, 2, 64, 0},    /* 99 KB smem, 120 regs */
      {"sm90_128x128x64", FFN_GEMM_SM90, 128, 128, 64, 64, 128, 6, 384, 1, 1, 512, 0}, /* down at M 128-512; 199 KB */
      {"sm90_128x224x64", FFN_GEMM_SM90, 128, 224, 64, 64, 224, 4, 384, 1, 1, 512, 0}, /* wide up at M 128-512; 183 KB */
      {"sm90_128x256x64", FFN_GEMM_SM90, 128, 256, 64, 64, 256, 4, 384, 1, 1, 0, 0},   /* 476-606 TFLOP/s; 199 KB */
      /* the same tiles with TMA loads: what the code generator compiles on sm_90 (the cp.async
       * ones above stay for the kernel bench, which has no tensor maps) */
      {"tma_64x128x64", FFN_GEMM_SM90T, 64, 128, 64, 64, 128, 4, 256, 2, 2, 64, 0},
      {"tma_128x128x64", FFN_GEMM_SM90T, 128, 128, 64, 64, 128, 6, 384, 1, 1, 512, 0},
      {"tma_128x224x64", FFN_GEMM_SM90T, 128, 224, 64, 64, 224, 4, 384, 1, 1, 512, 0},
      /* ... in 2-CTA clusters that multicast A (each CTA loads half): mid M streams the weights,
       * and each 128-row CTA loads as many bytes of A as of B (kernels/NOTES.md, "Clusters").
       * Candidates, not the rule: listed after the tma_ ones of the same regime, which win */
      {"tmac_128x128x64", FFN_GEMM_SM90C, 128, 128, 64, 64, 128, 6, 384, 1, 1, 512, 0},
      {"tmac_128x224x64", FFN_GEMM_SM90C, 128, 224, 64, 64, 224, 4, 384, 1, 1, 512, 0},
      /* persistent (one CTA per SM looping over tiles), 16-bit operands: ping-pong hides each
       * tile's epilogue behind the other warpgroup's main loop, cooperative only the fill. From
       * 513 rows ping-pong is the rule (H200: 8B sublayer 1024 / 8192 tokens 466 / 3599 us
       * against 501 / 4023 non-persistent); fp8 products take the cooperative kernel (not ping-pong: ffn_gemm_config_takes) */
      {"tmap_pp_128x128x64", FFN_GEMM_SM90P, 128, 128, 64, 128, 128, 6, 384, 1, 1, 0, 0},
      {"tmap_coop_128x256x64", FFN_GEMM_SM90P, 128, 256, 64, 64, 256, 4, 384, 1, 1, 0, 0},
      {"tma_128x256x64", FFN_GEMM_SM90T, 128, 256, 64, 64, 256, 4, 384, 1, 1, 0, 0},
      /* fp8 only: three consumer warpgroups of 64 x 128, so that two keep the tensor cores busy
       * while the third waits for and adds its promotion block (gemm_sm90.cuh: sm90_fp8_loop) */
      {"tma_192x128x64", FFN_GEMM_SM90T, 192, 128, 64, 64, 128, 5, 512, 1, 1, 0, 0},
      /* weight-only quantized B (gemm_wq.cuh, mma.sync), every arch: bm tokens per CTA (n8 tiles
       * of the MMA), so that a decode step does not spend MMAs on empty rows; bn = 8 warps x 16
       * rows of B; bk = k per 512-byte tile of codes (32: i8, 64: i4); a ring of `st` stages of
       * `wm` k tiles each (one barrier per stage), ~100 KB of codes in flight per SM at one
       * token (quant.cuh: wq_smem_bytes). */
      /* ... and the decode kernel (gemm_wqd.cuh): each warp's ring of 4 steps of two tiles of
       * codes (and i4 scales), activations in chunks of 8 (i4) or 16 (i8) tiles, 512 k; the first config of
       * a kind whose max_m covers M wins, so i8 keeps the ring kernel at <= 8 tokens (224 vs
       * 235 us for the 70B sublayer at one token) and takes gemm_wqd at 9-16 (284 vs 300) */
      /* i4 decode with less bookkeeping per tile (gemm_wqdl.cuh, design 2: exact levels, steps of
       * four tiles, groups on whole steps, statistics out of the main loop): the rule at 1-16
       * tokens (H200: 70B sublayer 220.8 -> 132.6 us at one token, 283 -> 193 at 16; 8B 75.1 ->
       * 43.4 / 82.0 -> 60.8). Rings of 3 steps of 4 tiles, chunks of 12 tiles; 80 / 105 KB (bf16) */
      {"wqd4v2_8", FFN_GEMM_WQD, 8, 128, 64, 3, 16, 12, 256, 2, 2, 8, 2},
      {"wqd4v2_16", FFN_GEMM_WQD, 16, 128, 64, 3, 16, 12, 256, 2, 2, 16, 2},
      {"wqd4_8", FFN_GEMM_WQD, 8, 128, 64, 4, 16, 8, 256, 3, 3, 8, 0},    /* 56 KB */
      {"wqd4_16", FFN_GEMM_WQD, 16, 128, 64, 4, 16, 8, 256, 2, 2, 16, 0}, /* 72 KB; 3 CTAs spill */
      /* i8 on gemm_wqdl (design 2: exact levels, steps of four 512-byte tiles = 128 k, the row
       * scales after the loop; 8 warps, rings of 4 steps, chunks of 16 tiles, 80 / 96 KB): the
       * rule at 1-16 tokens (H200: 70B sublayer 222 -> 201 us at one token, 236 -> 219 at 16;
       * 8B 72.0 -> 56.7 / 84.3 -> 63.6; kernels/NOTES.md, "int8 decode on gemm_wqdl") */
      {"wqd8v2_8", FFN_GEMM_WQD, 8, 128, 32, 4, 16, 16, 256, 2, 2, 8, 2},
      {"wqd8v2_16", FFN_GEMM_WQD, 16, 128, 32, 4, 16, 16, 256, 2, 2, 16, 2},
      {"wq8_8", FFN_GEMM_WQ, 8, 128, 32, 4, 16, 3, 256, 4, 4, 8, 0},    /* 55 KB */
      {"wqd8_16", FFN_GEMM_WQD, 16, 128, 32, 4, 16, 16, 256, 3, 3, 16, 0}, /* 64 KB */
      {"wq8_16", FFN_GEMM_WQ, 16, 128, 32, 2, 16, 7, 256, 3, 3, 16, 0}, /* 71 KB */
      {"wq8_32", FFN_GEMM_WQ, 32, 128, 32, 2, 16, 5, 256, 3, 3, 32, 0}, /* 62 KB */
      {"wq8_64", FFN_GEMM_WQ, 64, 128, 32, 2, 16, 6, 256, 2, 2, 0, 0},  /* 101 KB */
      {"wq4_8", FFN_GEMM_WQ, 8, 128, 64, 3, 16, 3, 256, 4, 4, 8, 0},    /* 55 KB */
      {"wq4_16", FFN_GEMM_WQ, 16, 128, 64, 2, 16, 5, 256, 3, 3, 16, 0}, /* 71 KB */
      {"wq4_32", FFN_GEMM_WQ, 32, 128, 64, 2, 16, 5, 256, 2, 2, 32, 0}, /* 92 KB */
      {"wq4_64", FFN_GEMM_WQ, 64, 128, 64, 2, 16, 6, 256, 1, 1, 0, 0},  /* 157 KB */
      /* gemm_wqdl's designs 3 (the levels' offset folded into the units' activation sums) and 4
       * (... taken off by an MMA): tuning candidates, measured no faster than design 2 at one
       * token and slower at 16 (70B: 134.4 / 138.4 us at one token, 223 / 216 at 16) */
      {"wqd4v3_8", FFN_GEMM_WQD, 8, 128, 64, 3, 16, 12, 256, 2, 2, 8, 3},
      {"wqd4v3_16", FFN_GEMM_WQD, 16, 128, 64, 3, 16, 12, 256, 2, 2, 16, 3},
      {"wqd4v4_8", FFN_GEMM_WQD, 8, 128, 64, 3, 16, 12, 256, 2, 2, 8, 4},
      {"wqd4v4_16", FFN_GEMM_WQD, 16, 128, 64, 3, 16, 12, 256, 2, 2, 16, 4},
      /* i8 candidates (besides the former rule wq8_8 / wqd8_16 above): wqd8v2n, 4 warps, rings
       * of 6, chunks of 24, 3 CTAs per SM at 8 tokens; measured slower (70B: 208 / 282 us) */
      {"wqd8v2n_8", FFN_GEMM_WQD, 8, 64, 32, 6, 16, 24, 128, 3, 3, 8, 2},
      {"wqd8v2n_16", FFN_GEMM_WQD, 16, 64, 32, 6, 16, 24, 128, 2, 2, 16, 2},
      /* i4 design 2 with rings of 2 steps and 3 CTAs per SM (24 warps, <= 80 registers): a tuning
       * candidate, 3% faster than the rule on the 70B gate/up product at 1-8 tokens (88.0 vs 90.8
       * us), slower on the 8B's one-wave products (kernels/NOTES.md, "Call 2"; 4-warp CTAs and
       * rings of 4 were slower everywhere and are gone) */
      {"wqd4v2t_8", FFN_GEMM_WQD, 8, 128, 64, 2, 16, 8, 256, 3, 3, 8, 2},
  };
  if (count) *count = (int)(sizeof table / sizeof table[0]);
  return table;
}

/* Where two configurations of one kind share a regime (max_m), row tile and k step, differing only in
 * their width, a GEMM compiles the one that wastes
 * less of the last wave at one row of tiles (M = 128 for the mid regime): time ~ waves x tile width.
 * The Llama-3-8B gate/up product (28672 merged columns) makes 224 tiles of 128 columns (1.7 waves on
 * FFN_GEMM_TUNED_SMS SMs) but 128 tiles of 224 (one wave); a 4096-column down product keeps 128.
 * Ties go to the configuration listed first. */
#define FFN_GEMM_TUNED_SMS 132 /* the H100 SXM / H200 the table was measured on */

/* Whether configuration c can multiply fp8 operands: the wgmma kernels sum them in 64 x 128 blocks
 * (their fp8 "promotion", gemm_sm90.cuh: sm90_fp8_ktile), so the width must be a multiple of 128
 * and a consumer warpgroup's accumulators at most 64 x 256 besides the block's. Not ping-pong: a
 * warpgroup alone on the tensor cores waits for each block (measured 3.28 ms against the
 * cooperative kernel's 2.82 for the 8B sublayer at 8192 tokens, kernels/NOTES.md). */
static inline int ffn_gemm_config_takes(const ffn_gemm_config *c, int fp8) {
  if (c->bm / c->wm == 3 && (c->kind == FFN_GEMM_SM90 || c->kind == FFN_GEMM_SM90T))
    return fp8 && c->kind == FFN_GEMM_SM90T; /* three consumer warpgroups: fp8 through TMA only */
  if (!fp8 || (c->kind != FFN_GEMM_SM90 && c->kind != FFN_GEMM_SM90T && c->kind != FFN_GEMM_SM90P &&
               c->kind != FFN_GEMM_SM90C))
    return 1;
  return c->bn % 128 == 0 && c->wm * c->bn <= 64 * 256 && !(c->kind == FFN_GEMM_SM90P && c->wm == c->bm);
}

static inline long long ffn_gemm_row_cost(const ffn_gemm_config *c, long long cols) {
  long long tiles = (cols + c->bn - 1) / c->bn;
  return (tiles + FFN_GEMM_TUNED_SMS - 1) / FFN_GEMM_TUNED_SMS * c->bn;
}

/* Whether b is a with another width only: the same kind, regime (max_m), row tile, k step, warpgroup
 * split (or ring depth), design and CTAs per SM. */
static inline int ffn_gemm_width_alternative(const ffn_gemm_config *a, const ffn_gemm_config *b) {
  return a != b && a->kind == b->kind && a->max_m == b->max_m && a->bm == b->bm && a->bk == b->bk && a->wm == b->wm &&
         a->design == b->design && a->ctas_per_sm == b->ctas_per_sm;
}

static inline int ffn_gemm_config_fits(const ffn_gemm_config *c, long long cols, int fp8) {
  int n;
  const ffn_gemm_config *t = ffn_gemm_configs(&n);
  for (int i = 0; i < n; i++) {
    /* alternatives: another width the element type can use (ffn_gemm_config_takes) */
    if (!ffn_gemm_width_alternative(c, &t[i]) || !ffn_gemm_config_takes(&t[i], fp8))
      continue;
    long long other = ffn_gemm_row_cost(&t[i], cols), mine = ffn_gemm_row_cost(c, cols);
    if (other < mine || (other == mine && &t[i] < c))
      return 0;
  }
  return 1;
}

/* The regime (max_m) a configuration is compiled for in a product of S streams, the table's except
 * for 16-bit single-stream products (fp8 and f32 keep the table's): their 16- and 32-row mma.sync
 * tiles serve twice the rows, so up to 64 rows a product with one stream of weights launches twice
 * the CTAs that a two-stream gate/up product would (H200, `ffnc tune`, 2026-12-02: GPT GELU's up
 * [4096 -> 16384] at 48-64 rows 52 us against 63.6 on the 64-row tile, the downs of GPT, Llama-3-8B
 * and -70B 1.08-1.21x faster at 48-64 rows, 1.01-1.06x at 32; the gate/up products were fastest on
 * the table's tiles). */
static inline int ffn_gemm_regime(const ffn_gemm_config *c, int S, int sixteen_bit) {
  if (S == 1 && sixteen_bit && c->kind == FFN_GEMM_SM80 && (c->max_m == 16 || c->max_m == 32)) return 2 * c->max_m;
  return c->max_m;
}

/* The configuration of `kind` recommended for M rows. */
static inline const ffn_gemm_config *ffn_gemm_pick_config(ffn_gemm_kind kind, int M) {
  int n;
  const ffn_gemm_config *t = ffn_gemm_configs(&n);
  const ffn_gemm_config *last = NULL;
  for (int i = 0; i < n; i++) {
    if (t[i].kind != kind) continue;
    if (t[i].max_m == 0 || M <= t[i].max_m) return &t[i];
    last = &t[i];
  }
  return last;
}

/* Dynamic shared memory per block, bytes (16-bit elements for SM80/SM90, f32 staging for SIMT).
 * SM90 (gemm_sm90_smem_bytes in gemm_sm90.cuh): the stage ring, 2 floats of row statistics per row,
 * and 2048 bytes for the mbarriers, the split-K flag and realigning the base to 1024 bytes. */
static inline size_t ffn_gemm_smem_bytes(const ffn_gemm_config *c, int elem) {
  if (c->kind == FFN_GEMM_SM80) return (size_t)c->stages * (size_t)(c->bm + c->bn) * (size_t)c->bk * 2;
  if (c->kind == FFN_GEMM_SM90 || c->kind == FFN_GEMM_SM90T || c->kind == FFN_GEMM_SM90C)
    return (size_t)c->stages * (size_t)(c->bm + c->bn) * (size_t)c->bk * 2 + (size_t)8 * c->bm + 2048;
  if (c->kind == FFN_GEMM_SM90P) /* gemm_sm90p_smem_bytes: statistics per warpgroup when ping-ponging */
    return (size_t)c->stages * (size_t)(c->bm + c->bn) * (size_t)c->bk * 2 + (size_t)8 * c->bm * (c->wm == c->bm ? 2 : 1) +
           2048;
  if (c->kind == FFN_GEMM_WQ) /* gemm_wq.cuh: the ring of codes, scales and activations */
    return (size_t)wq_smem_bytes(c->bm, c->bn, c->bk, c->wm, c->stages, elem);
  if (c->kind == FFN_GEMM_WQD && c->design) /* gemm_wqdl.cuh */
    return (size_t)wqdl_smem_bytes(c->bk == 32 ? 8 : 4, c->bm, c->bn, c->stages, c->wm, elem);
  if (c->kind == FFN_GEMM_WQD) /* gemm_wqd.cuh: chunks of activations and scales */
    return (size_t)wqd_smem_bytes(c->bm, c->bn, c->bk, c->stages, c->wm, elem);
  return ((size_t)2 * c->bk * (size_t)(c->bm + c->bn + 8) + (size_t)2 * c->bm) * 4;
}

/* Whether c's kernels load through the Tensor Memory Accelerator: they take A's and B's tensor
 * maps (kernels/abi.cuh: TmaMaps) after their first argument. */
static inline int ffn_gemm_tma(const ffn_gemm_config *c) {
  return c->kind == FFN_GEMM_SM90T || c->kind == FFN_GEMM_SM90P || c->kind == FFN_GEMM_SM90C;
}

/* CTAs per thread-block cluster (along the grid's x): 2 for FFN_GEMM_SM90C, else 1. */
static inline int ffn_gemm_cluster(const ffn_gemm_config *c) { return c->kind == FFN_GEMM_SM90C ? 2 : 1; }

/* The box (rows x 16-bit units) that one TMA load of operand A (b == 0) or B (b == 1) of a TMA
 * configuration copies: a k-tile of the CTA's rows, 128 bytes wide (the 128-byte swizzle atom);
 * in a cluster each CTA loads 1 / ffn_gemm_cluster(c) of A's rows (and multicasts them). A plan
 * variant with b_kn (codegen/plan.h: B [K, N], gemm_sm90p.cuh B_KN) loads B in boxes of 64 columns
 * by bk rows instead, bn / 64 per stage (runtime/exec.c: tma_map). */
static inline void ffn_gemm_tma_box(const ffn_gemm_config *c, int b, unsigned box[2]) {
  box[0] = (unsigned)c->bk;
  box[1] = (unsigned)(b ? c->bn : c->bm / ffn_gemm_cluster(c));
}

static inline int ffn_gemm_tiles_m(const ffn_gemm_config *c, int M) { return (M + c->bm - 1) / c->bm; }
static inline int ffn_gemm_tiles_n(const ffn_gemm_config *c, int N, int S) { return (S * N + c->bn - 1) / c->bn; }
static inline int ffn_gemm_num_tiles(const ffn_gemm_config *c, int M, int N, int S) {
  return ffn_gemm_tiles_m(c, M) * ffn_gemm_tiles_n(c, N, S);
}

/* Whether a product of M rows, N columns per stream and S streams in the 257-512-row regime
 * (whose rule is a non-persistent TMA kernel) takes the persistent ping-pong kernel `c` instead, as
 * from 513 rows: with at least two of its tiles per SM, and for two-stream products from 385 rows
 * (H200, `ffnc tune`, 2026-12-02: GPT GELU's up at 384 / 512 rows 94.6 / 116.6 us against 115.0 /
 * 151.3, the 8B and 70B gate/up at 512 rows 1.14x / 1.12x; the 8B gate/up at 384 rows was fastest on
 * the 128 x 224 tile, the downs, fewer tiles than two per SM, on the split 128 x 128 one). */
/* Above 512 rows the cooperative 128 x 256 persistent tile (half of A's and B's bytes per FLOP)
 * replaces the ping-pong 128 x 128 for the backward's dgrads reading B as it lies (b_kn: their K
 * is the wide dimension) on every card, and for the other products on a card with less DRAM
 * bandwidth than FFN_WIDE_TILE_GBS (H100 SXM: 3352 GB/s). Measured (kernels/NOTES.md, eighteenth
 * session), 1024 and 8192 tokens: H100 forward 5-24% faster, dgrads 3-22%; H200 (4.8 TB/s)
 * dgrads 4-5% faster at 8192 and even at 1024, forward 3-7% slower (8B). Ping-pong is ahead at
 * 512 rows and below. dram_gbs 0 (unknown) counts as enough bandwidth. */
#define FFN_WIDE_TILE_GBS 4000
static inline int ffn_gemm_prefer_wide(int M, int dram_gbs, int b_kn) {
  return M > 512 && (b_kn || (dram_gbs > 0 && dram_gbs < FFN_WIDE_TILE_GBS));
}

static inline int ffn_gemm_prefer_persistent(int M, int N, int S, const ffn_gemm_config *c, int num_sms) {
  if (c->kind != FFN_GEMM_SM90P || c->wm != c->bm || M <= (S == 1 ? 256 : 384) || M > 512 || num_sms <= 0) return 0;
  return (long)ffn_gemm_num_tiles(c, M, N, S) >= 2L * num_sms;
}

/* Split-K workspace floats: one slab of bm*bn partial sums plus 2*bm row statistics per
 * (tile, split). Rows >= M are never written, but the slabs are laid out for full tiles. */
static inline size_t ffn_gemm_ws_floats(const ffn_gemm_config *c, int M, int N, int S, int splits) {
  if (splits <= 1) return 0;
  return (size_t)ffn_gemm_num_tiles(c, M, N, S) * (size_t)splits * ((size_t)c->bm * c->bn + 2 * (size_t)c->bm);
}

static inline void ffn_gemm_grid(const ffn_gemm_config *c, int M, int N, int S, int splits, unsigned grid[3]) {
  if (splits < 1) splits = 1;
  if (c->kind == FFN_GEMM_SM90P) { /* one CTA per work item: use ffn_gemm_launch_grid */
    grid[0] = (unsigned)ffn_gemm_num_tiles(c, M, N, S) * (unsigned)splits;
    grid[1] = grid[2] = 1;
    return;
  }
  grid[0] = (unsigned)ffn_gemm_num_tiles(c, M, N, S);
  if (c->kind == FFN_GEMM_SM90C) { /* pairs of column tiles per row tile, the last one padded */
    const int cl = ffn_gemm_cluster(c), tiles_n = ffn_gemm_tiles_n(c, N, S);
    grid[0] = (unsigned)ffn_gemm_tiles_m(c, M) * (unsigned)((tiles_n + cl - 1) / cl * cl);
  }
  grid[1] = 1;
  grid[2] = (unsigned)splits;
}

/* The launch grid for every kind: persistent kernels get at most one wave of CTAs (num_sms *
 * ctas_per_sm), each looping over work items; the others as ffn_gemm_grid. */
static inline void ffn_gemm_launch_grid(const ffn_gemm_config *c, int M, int N, int S, int splits, int num_sms,
                                        unsigned grid[3]) {
  ffn_gemm_grid(c, M, N, S, splits, grid);
  if (c->kind == FFN_GEMM_SM90P && num_sms > 0) {
    unsigned wave = (unsigned)num_sms * (unsigned)(c->ctas_per_sm > 0 ? c->ctas_per_sm : 1);
    if (grid[0] > wave) grid[0] = wave;
  }
}

/* The template arguments of c's device template for S streams, STATS row statistics and element
 * type T ("ffn::bf16", "ffn::f16" or "float"), in the order of the calls at the top of this file,
 * into buf (the code generator prints `ffn::<template><ARGS>(g, epi, smem)`). snprintf's result. */
static inline int ffn_gemm_template_args(const ffn_gemm_config *c, int S, int STATS, const char *T, char *buf,
                                         size_t len) {
  switch (c->kind) {
  case FFN_GEMM_SM80:
    return snprintf(buf, len, "%d, %d, %d, %d, %d, %d, %d, %d, %s", c->bm, c->bn, c->bk, c->wm, c->wn, c->stages, S,
                    STATS, T);
  case FFN_GEMM_SM90: /* consumer warpgroups, the CTAs per SM the launch bounds promise, TMA */
  case FFN_GEMM_SM90T:
    return snprintf(buf, len, "%d, %d, %d, %d, %d, %d, %s, %d, %d, %s", c->bm, c->bn, c->bk, c->stages, S, STATS, T,
                    c->bm / c->wm, c->min_blocks, c->kind == FFN_GEMM_SM90T ? "true" : "false");
  case FFN_GEMM_SM90C: /* ... TMA, and the cluster's CTAs */
    return snprintf(buf, len, "%d, %d, %d, %d, %d, %d, %s, %d, %d, true, %d", c->bm, c->bn, c->bk, c->stages, S, STATS,
                    T, c->bm / c->wm, c->min_blocks, ffn_gemm_cluster(c));
  case FFN_GEMM_SM90P: /* ping-pong consumers when wm == bm */
    return snprintf(buf, len, "%d, %d, %d, %d, %d, %d, %s, %s", c->bm, c->bn, c->bk, c->stages, S, STATS, T,
                    c->wm == c->bm ? "true" : "false");
  case FFN_GEMM_WQ: /* BITS from the tile's depth: 16 rows x bk k in 512 bytes */
    return snprintf(buf, len, "%d, %d, %d, %d, %d, %d, %d, %d, %d, %s", c->bk == 32 ? 8 : 4, c->bm, c->bn, c->bk, c->wn,
                    c->wm, c->stages, S, STATS, T);
  case FFN_GEMM_WQD:
    if (c->design)
      return snprintf(buf, len, "%d, %d, %d, %d, %d, %d, %d, %s, %d", c->bk == 32 ? 8 : 4, c->bm, c->bn, c->wm,
                      c->stages, S, STATS, T, c->design);
    return snprintf(buf, len, "%d, %d, %d, %d, %d, %d, %d, %s", c->bk == 32 ? 8 : 4, c->bm, c->bn, c->wm, c->stages, S,
                    STATS, T);
  case FFN_GEMM_SIMT:
    break;
  }
  return snprintf(buf, len, "%d, %d, %d, %d, %d, %d, %d, %s", c->bm, c->bn, c->bk, c->wm, c->wn, S, STATS, T);
}

/* Split-K for gemm_wq, which streams its codes at any M: the split that fills the resident
 * CTA slots best, counting the last wave's empty slots as lost (70B gate/up at one token: 448
 * tiles on 528 slots is one wave at 85%, 2 splits are 1.7 waves at 85%, 5 are 4.2 at 85% ...),
 * each further split costing 3% (its partial sums' round trip and ring fill), with >= 8 tiles
 * of codes per split and at most 32 splits. */
static inline int ffn_gemm_wq_splits(long tiles, int ktiles, long slots) {
  int best = 1;
  double best_score = 0;
  for (int s = 1; s <= 32 && (s == 1 || ktiles / s >= 8); s++) {
    long ctas = tiles * s, waves = (ctas + slots - 1) / slots;
    double score = (double)ctas / (double)(waves * slots) * (1.0 - 0.03 * (s - 1));
    if (score > best_score + 1e-9) best = s, best_score = score;
  }
  return best;
}

/* Split-K for the decode kernels (FFN_GEMM_WQD, gemm_wqd / gemm_wqdl), which stream their codes
 * through each warp's ring: none when the tiles fill the resident CTA slots at least once, else
 * the most splits that keep the grid in one wave, with >= 8 tiles of codes per split and at most
 * 32. The last wave's idle slots cost a streaming kernel less than ffn_gemm_wq_splits counts (the
 * CTAs left stream faster), each split more (ffnc tune, H200, 2026-12-06: the 70B gate/up
 * products, 448 tiles on 264 slots, unsplit against the wave-fill rule's 4 splits: i4 1 token
 * 78-86 us, 16 tokens 115.0 against 134.6; i8 117.4 against 124.6 and 133.9 against 146.1; the
 * 8B's products and the 70B down products pick the same split under both rules). */
static inline int ffn_gemm_wqd_splits(long tiles, int ktiles, long slots) {
  long s = tiles >= slots ? 1 : slots / tiles;
  if (s > 32) s = 32;
  while (s > 1 && ktiles / s < 8) s--;
  return (int)s;
}

/* Split-K factor, fitted to measurements on an H200 (kernels/NOTES.md). Small-M GEMMs stream the
 * weights; they reach full bandwidth with about one CTA per SM, or two when several row tiles
 * (tiles_m >= 2) read the same weights, and splitting further only adds CTAs, pipeline fills and the
 * partials' round trip (gate/up at M=1, 224 tiles: 61 us unsplit, 71 us with 4 splits; down at M=1,
 * 32 tiles: 63 us unsplit, 36 us with 4, 45 us with 16). So: splits = round(target CTAs / tiles),
 * target = num_sms * min(tiles_m >= 2 ? 2 : 1, ctas_per_sm), with >= 4 k-tiles per split, <= 16.
 * For every recommended configuration at M <= 64 this picks the fastest split measured. */
static inline int ffn_gemm_pick_splits(int M, int N, int S, int K, const ffn_gemm_config *c, int num_sms) {
  const long tiles_m = ffn_gemm_tiles_m(c, M), tiles = tiles_m * ffn_gemm_tiles_n(c, N, S);
  const int ktiles = (K + c->bk - 1) / c->bk;
  if (num_sms <= 0 || tiles <= 0) return 1;
  if (c->kind == FFN_GEMM_WQD) return ffn_gemm_wqd_splits(tiles, ktiles, (long)num_sms * c->ctas_per_sm);
  if (c->kind == FFN_GEMM_WQ) return ffn_gemm_wq_splits(tiles, ktiles, (long)num_sms * c->ctas_per_sm);
  long per_sm = tiles_m >= 2 ? 2 : 1;
  if (c->ctas_per_sm > 0 && per_sm > c->ctas_per_sm) per_sm = c->ctas_per_sm;
  long s = ((long)num_sms * per_sm + tiles / 2) / tiles;
  int max_splits = ktiles / 4;
  if (max_splits > 16) max_splits = 16;
  if (s > max_splits) s = max_splits;
  return s < 1 ? 1 : (int)s;
}

/* ---- weight gradients on sm_90 (kernels/grad_sm90.cuh: matmul_at_sm90) ----
 *
 * out [K, N] = a^T b summed over the T tokens of a [T, K] and b [T, N] (both 16-bit, K % 8 == N % 8
 * == 0): tiles of bm x bn outputs (bm of a's columns, bn of b's), bk tokens per stage of a `stages`-deep
 * ring that one producer thread fills by TMA, two consumer warpgroups (384 threads in all), at most
 * one CTA per SM, each looping over the (tile, split) work items. It is described as an FFN_GEMM_SM90 configuration with
 * M = K, S = 1 and the tokens as the inner dim: its shared memory (ffn_gemm_smem_bytes), tiles, split-K
 * workspace and counters (ffn_gemm_ws_floats, ffn_gemm_num_tiles) are those formulas. The sm_90 kernel
 * of a weight gradient (codegen/lower.c) carries it as its first variant's cfg. */
static inline const ffn_gemm_config *ffn_wgrad_config(void) {
  /*                                  name                kind          bm   bn  bk  wm  wn  st thr mb cta max_m design */
  static const ffn_gemm_config c = {"wgrad_128x256x64", FFN_GEMM_SM90, 128, 256, 64, 64, 256, 4, 384, 1, 1, 0, 0};
  return &c;
}

/* Split-K over the tokens: ffn_gemm_pick_splits' rule (about one CTA per SM when the output has fewer
 * tiles than SMs, >= 4 stages of tokens per split, <= 16), with the tokens as K. */
static inline int ffn_wgrad_splits(long long tokens, int K, int N, int num_sms) {
  const int cap = 1 << 30; /* beyond, ktiles / 4 > 16 anyway; keeps the rule's int arithmetic whole */
  return ffn_gemm_pick_splits(K, N, 1, tokens < cap ? (int)tokens : cap, ffn_wgrad_config(), num_sms);
}

/* Its grid (x; y = z = 1): one CTA per work item, at most one per SM; any number >= 1 is correct. */
static inline unsigned ffn_wgrad_grid(int K, int N, int splits, int num_sms) {
  long long items = (long long)ffn_gemm_num_tiles(ffn_wgrad_config(), K, N, 1) * (splits > 1 ? splits : 1);
  if (num_sms > 0 && items > num_sms) items = num_sms;
  return items < 1 ? 1u : (unsigned)items;
}

#endif /* FFN_KERNELS_GEMM_HOST_H */
