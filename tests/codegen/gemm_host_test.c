/* gemm_host_test.c: the host-side facts of kernels/gemm_host.h that the kernels and the launch
 * rely on, for every configuration of the table (no GPU needed):
 *
 *  - shared memory: every configuration fits the per-block limit of the arches that use it
 *    (sm_90: 227 KB; sm_80, which never runs the wgmma kinds: 163 KB), for 16-bit and f32
 *    activations; and ctas_per_sm CTAs, each with the 1 KB the driver reserves, fit an SM's
 *    228 KB (the split-K rule counts on that occupancy);
 *  - gemm_wq: its ring keeps at least 3 stages (the kernel's static_assert) whatever the
 *    activation type, and the stage layout adds up;
 *  - gemm_wqd: chunks of whole ring rounds, its shared memory holds the chunk buffers and the
 *    rings, then the CTA's sums and the warps' statistics, and the decode regimes pick it for
 *    i4 (1-16 tokens) and i8 (9-16) before the ring kernel; for i4 gemm_wqdl's design 2 first
 *    (the rule), its other designs and gemm_wqd after it (forced by name or tuning); for i8
 *    gemm_wqdl's candidates after the rule's wq8_8 and wqd8_16, each compiled (no two of them
 *    alternatives of one regime that ffn_gemm_config_fits would choose between);
 *  - split-K of gemm_wq and gemm_wqd: between 1 and 32, at least 8 tiles of codes per split, and for the
 *    Llama-3 decode shapes on an H200 the choices kernels/NOTES.md measured against;
 *  - the clustered TMA kernels (FFN_GEMM_SM90C): grids of whole pairs of CTAs covering every tile, A's
 *    box half the row tile, and each listed after the FFN_GEMM_SM90T configuration of its tile and
 *    regime, so that the runtime's rule (the first compiled variant whose max_m covers M) keeps that one.
 */
#include <stdio.h>
#include <stdbool.h>
#include <string.h>

#include "check.h"
#include "kernels/gemm_host.h"

enum { SM90_BLOCK = 232448, SM80_BLOCK = 166912, SM_TOTAL = 233472, RESERVED = 1024, H200_SMS = 132 };

static void check_smem(const ffn_gemm_config *c) {
  for (int elem = 2; elem <= 4; elem += 2) {
    size_t smem = ffn_gemm_smem_bytes(c, elem);
    bool sm80 = c->kind != FFN_GEMM_SM90 && c->kind != FFN_GEMM_SM90P && c->kind != FFN_GEMM_SM90T &&
                c->kind != FFN_GEMM_SM90C;
    CHECK(smem <= (size_t)(sm80 ? SM80_BLOCK : SM90_BLOCK), "%s: %zu bytes of shared memory (%d-byte A)", c->name, smem,
          elem);
    if (elem == 2 && c->ctas_per_sm > 0)
      CHECK((size_t)c->ctas_per_sm * (smem + RESERVED) <= SM_TOTAL, "%s: %d CTAs of %zu bytes do not fit an SM",
            c->name, c->ctas_per_sm, smem);
  }
}

static void check_wq(const ffn_gemm_config *c) {
  for (int elem = 2; elem <= 4; elem += 2) {
    int stages = wq_stages(c->bm, c->bn, c->bk, c->wm, c->stages, elem);
    CHECK(stages >= 3 && stages <= c->stages, "%s: %d ring stages with %d-byte activations", c->name, stages, elem);
    int warps = c->bn / 16, per_tile = warps * (512 + (c->bk == 64 ? 128 : 0)) + c->bm * c->bk * elem;
    CHECK(wq_stage_bytes(c->bm, c->bn, c->bk, c->wm, elem) == c->wm * per_tile, "%s: stage bytes", c->name);
    CHECK(wq_ring_bytes(c->bm, c->bn, c->bk, c->wm, c->stages, elem) >= 4 * c->bm * c->bn,
          "%s: the ring cannot hold the CTA's sums", c->name);
  }
  CHECK(c->wn == 16 && c->bn % 16 == 0 && c->bm % 8 == 0 && (c->bk == 32 || c->bk == 64), "%s: tile shape", c->name);
}

/* gemm_wqdl (design > 0): i4 or i8 (design 2 only), a chunk is one turn of the rings (4 tiles a
 * slot), a warp's pieces of a chunk are one token's, and its shared memory holds gemm_wqd's
 * (chunks of 8 for i4, 16 for i8, rings of 4: it runs in its place for f32 and other group
 * lengths) */
static void check_wqdl(const ffn_gemm_config *c) {
  const int bits = c->bk == 32 ? 8 : 4, ppt = c->stages * c->bk / 8; /* 16-byte pieces per token */
  CHECK((c->bk == 64 || (c->bk == 32 && c->design == 2)) && c->stages == 4 * c->wm && c->wm >= 2 && ppt % 32 == 0 &&
            c->bm * ppt % c->threads == 0,
        "%s: chunks of %d tiles, rings of %d", c->name, c->stages, c->wm);
  CHECK(c->wn == 16 && c->bn % 16 == 0 && c->bm % 8 == 0 && c->max_m > 0 && c->max_m <= c->bm &&
            c->threads == 2 * c->bn, "%s: tile shape", c->name);
  for (int elem = 2; elem <= 4; elem += 2) {
    int smem = wqdl_smem_bytes(bits, c->bm, c->bn, c->stages, c->wm, elem);
    int loop = 2 * c->stages * c->bk * c->bm * elem + c->bn / 16 * c->wm * (4 * 512 + (bits == 4 ? 256 : 0)) +
               (bits == 4 ? 16 * c->stages * c->bm : 0);
    CHECK(smem >= wqd_smem_bytes(c->bm, c->bn, c->bk, bits == 4 ? 8 : 16, 4, elem) &&
              (elem == 4 || smem >= loop + 8 * c->bm) && smem >= 4 * c->bm * c->bn + 8 * c->bm * ppt / 32 + 8 * c->bm,
          "%s: %d bytes of shared memory (%d-byte A)", c->name, smem, elem);
  }
}

/* A configuration the rule does not pick must still be compiled: no other that differs from it
 * only in width (ffn_gemm_config_fits would compile one of the two). */
static void check_compiled(const ffn_gemm_config *t, int n, int i) {
  for (int j = 0; j < n; j++)
    CHECK(!ffn_gemm_width_alternative(&t[i], &t[j]), "%s and %s: alternatives of one regime", t[i].name, t[j].name);
}

static void check_wqd(const ffn_gemm_config *c) {
  if (c->design) {
    check_wqdl(c);
    return;
  }
  CHECK(c->stages % c->wm == 0 && c->wm >= 2, "%s: chunks of %d tiles, rings of %d", c->name, c->stages, c->wm);
  CHECK(c->wn == 16 && c->bn % 16 == 0 && c->bm % 8 == 0 && (c->bk == 32 || c->bk == 64), "%s: tile shape", c->name);
  CHECK(c->max_m > 0 && c->max_m <= 16 && c->max_m <= c->bm, "%s: decode sizes only (max_m %d)", c->name, c->max_m);
  for (int elem = 2; elem <= 4; elem += 2) {
    int warps = c->bn / 16, smem = wqd_smem_bytes(c->bm, c->bn, c->bk, c->stages, c->wm, elem);
    int loop = 2 * c->stages * c->bk * c->bm * elem + warps * c->wm * wqd_slot_bytes(c->bk);
    int after = 4 * c->bm * c->bn + 8 * warps * c->bm;
    CHECK(smem >= loop + 8 * c->bm && smem >= after + 8 * c->bm && smem <= (loop > after ? loop : after) + 8 * c->bm,
          "%s: %d bytes of shared memory for a loop of %d and an end of %d", c->name, smem, loop, after);
  }
}

/* The configuration the runtime launches for M rows of a weight-only product of `bits`: the first
 * compiled one (table order: codegen/lower.c config_used) whose max_m covers M. */
static const char *wq_pick(int bits, int M) {
  int n;
  const ffn_gemm_config *t = ffn_gemm_configs(&n);
  for (int i = 0; i < n; i++)
    if ((t[i].kind == FFN_GEMM_WQ || t[i].kind == FFN_GEMM_WQD) && t[i].bk == (bits == 8 ? 32 : 64) &&
        (t[i].max_m == 0 || M <= t[i].max_m))
      return t[i].name;
  return "";
}

/* split-K of a gemm_wq product of R merged rows, K inner, M tokens on an H200 */
static int wq_splits(const char *cfg, int M, long R, int K) {
  int n;
  const ffn_gemm_config *t = ffn_gemm_configs(&n);
  for (int i = 0; i < n; i++)
    if (strcmp(t[i].name, cfg) == 0)
      return ffn_gemm_pick_splits(M, (int)R, 1, K, &t[i], H200_SMS);
  CHECK(0, "no configuration %s", cfg);
  return 0;
}

static void check_splits(void) {
  int n;
  const ffn_gemm_config *t = ffn_gemm_configs(&n);
  for (int i = 0; i < n; i++) {
    if (t[i].kind != FFN_GEMM_WQ && t[i].kind != FFN_GEMM_WQD)
      continue;
    for (long R = 16; R <= 65536; R *= 4)
      for (int K = 32; K <= 65536; K *= 2) {
        int s = ffn_gemm_pick_splits(1, (int)R, 1, K, &t[i], H200_SMS), ktiles = (K + t[i].bk - 1) / t[i].bk;
        CHECK(s >= 1 && s <= 32 && (s == 1 || ktiles / s >= 8), "%s R=%ld K=%d: %d splits of %d k tiles", t[i].name, R,
              K, s, ktiles);
      }
  }
  /* the decode shapes of kernels/NOTES.md (gate/up: 2F merged rows; down: D rows) */
  CHECK(wq_splits("wq4_8", 1, 57344, 8192) == 1, "70B i4 gate/up: %d", wq_splits("wq4_8", 1, 57344, 8192));
  CHECK(wq_splits("wq4_8", 1, 8192, 28672) == 8, "70B i4 down: %d", wq_splits("wq4_8", 1, 8192, 28672));
  CHECK(wq_splits("wq4_8", 1, 28672, 4096) == 2, "8B i4 gate/up: %d", wq_splits("wq4_8", 1, 28672, 4096));
  CHECK(wq_splits("wq8_8", 1, 8192, 28672) == 8, "70B i8 down: %d", wq_splits("wq8_8", 1, 8192, 28672));
  /* the decode kernels' rule (ffn_gemm_wqd_splits): unsplit from one full wave of tiles, else one wave */
  static const struct { const char *cfg; int M; long R; int K, splits; } wqd[] = {
      {"wqd4v2_8", 1, 57344, 8192, 1},   /* 70B gate/up: 448 tiles on 264 slots */
      {"wqd4v2_16", 16, 57344, 8192, 1}, /* ... at 16 tokens */
      {"wqd4v2_8", 1, 8192, 28672, 4},   /* 70B down: 64 tiles */
      {"wqd4v2_8", 1, 28672, 4096, 1},   /* 8B gate/up: 224 tiles */
      {"wqd4v2_8", 1, 4096, 14336, 8},   /* 8B down: 32 tiles */
      {"wqd4v2t_8", 1, 8192, 28672, 6},  /* 70B down on 396 slots (3 CTAs an SM) */
      {"wqd8v2_8", 1, 57344, 8192, 1},   /* 70B i8 gate/up */
      {"wqd8v2_8", 1, 8192, 28672, 4},   /* 70B i8 down */
      {"wqd4v2_8", 1, 128, 512, 1},      /* one tile, 8 k tiles: no split leaves 8 per split */
  };
  for (size_t i = 0; i < sizeof wqd / sizeof wqd[0]; i++) {
    int s = wq_splits(wqd[i].cfg, wqd[i].M, wqd[i].R, wqd[i].K);
    CHECK(s == wqd[i].splits, "%s M=%d R=%ld K=%d: %d splits, expected %d", wqd[i].cfg, wqd[i].M, wqd[i].R, wqd[i].K, s,
          wqd[i].splits);
  }
}

static void check_cluster(const ffn_gemm_config *t, int i) {
  const ffn_gemm_config *c = &t[i];
  unsigned box[2], bbox[2];
  ffn_gemm_tma_box(c, 0, box);
  ffn_gemm_tma_box(c, 1, bbox);
  CHECK(ffn_gemm_cluster(c) == 2 && ffn_gemm_tma(c) && box[0] == 64 && box[1] * 2 == (unsigned)c->bm &&
            bbox[1] == (unsigned)c->bn, "%s: cluster %d, A box %u x %u", c->name, ffn_gemm_cluster(c), box[0], box[1]);
  static const int Ms[] = {1, 7, 64, 130, 512, 1000, 4096}, Ns[] = {64, 100, 224, 1000, 4096, 14336};
  for (size_t m = 0; m < sizeof Ms / sizeof Ms[0]; m++)
    for (size_t k = 0; k < sizeof Ns / sizeof Ns[0]; k++)
      for (int S = 1; S <= 2; S++) {
        unsigned grid[3];
        ffn_gemm_launch_grid(c, Ms[m], Ns[k], S, 3, H200_SMS, grid);
        int tiles_n = ffn_gemm_tiles_n(c, Ns[k], S), pairs = (tiles_n + 1) / 2;
        CHECK(grid[0] % 2 == 0 && grid[0] == 2u * (unsigned)(ffn_gemm_tiles_m(c, Ms[m]) * pairs) &&
                  grid[0] >= (unsigned)ffn_gemm_num_tiles(c, Ms[m], Ns[k], S) && grid[1] == 1 && grid[2] == 3,
              "%s M=%d N=%d S=%d: grid %u,%u,%u", c->name, Ms[m], Ns[k], S, grid[0], grid[1], grid[2]);
      }
  bool after_tma = false;
  for (int j = 0; j < i; j++)
    after_tma |= t[j].kind == FFN_GEMM_SM90T && t[j].bm == c->bm && t[j].bn == c->bn && t[j].max_m == c->max_m;
  CHECK(after_tma, "%s: not after the TMA configuration of its tile and regime", c->name);
}

int main(void) {
  int n;
  const ffn_gemm_config *t = ffn_gemm_configs(&n);
  for (int i = 0; i < n; i++) {
    check_smem(&t[i]);
    if (t[i].kind == FFN_GEMM_WQ)
      check_wq(&t[i]);
    if (t[i].kind == FFN_GEMM_WQD)
      check_wqd(&t[i]);
    if (t[i].kind == FFN_GEMM_WQD && t[i].design)
      check_compiled(t, n, i);
    if (t[i].kind == FFN_GEMM_SM90C)
      check_cluster(t, i);
  }
  check_splits();
  static const struct {
    int bits, M;
    const char *cfg;
  } pick[] = {{4, 1, "wqd4v2_8"}, {4, 8, "wqd4v2_8"}, {4, 9, "wqd4v2_16"}, {4, 16, "wqd4v2_16"}, {4, 17, "wq4_32"},
              {4, 64, "wq4_64"}, {4, 4096, "wq4_64"}, {8, 1, "wqd8v2_8"}, {8, 12, "wqd8v2_16"}, {8, 33, "wq8_64"}};
  for (size_t i = 0; i < sizeof pick / sizeof pick[0]; i++)
    CHECK(strcmp(wq_pick(pick[i].bits, pick[i].M), pick[i].cfg) == 0, "i%d at M = %d: %s, not %s", pick[i].bits,
          pick[i].M, wq_pick(pick[i].bits, pick[i].M), pick[i].cfg);
  return check_result("gemm_host_test");
}
