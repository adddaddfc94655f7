/* tp_overlap_test.c: how a large call is cut into row blocks and pipelined against its
 * all-reduces (runtime/tp_overlap.c), no GPU: the block boundaries of the policy and of forced
 * counts (alignment, thresholds, tiny T), which plans can be cut (the forward shares of Llama-
 * and GPT-tiny, plain and fused, yes; backward graphs no), and the schedule's order: every
 * block runs every step once in order, each segment after its block's all-reduce, the caller's
 * stream waits for every all-reduce before the call ends, and segment k of every block is
 * enqueued before segment k+1 of any; the exact order for a small plan. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codegen/driver.h"
#include "plan_util.h"
#include "runtime/rt.h"

/* The invariants of any cut: blocks cover [0, rows) in order, all of one size but the last,
 * aligned to 16 rows (every slice 16-byte aligned) and to 128 from 128 rows a block. */
static void check_cut(int64_t rows, int blocks, bool reduces) {
  int64_t st[TP_MAX_BLOCKS + 1];
  int n = tp_row_blocks(rows, blocks, reduces, st);
  CHECK(n >= 1 && n <= TP_MAX_BLOCKS, "rows %lld blocks %d: %d blocks", (long long)rows, blocks, n);
  if (n < 1 || n > TP_MAX_BLOCKS)
    return;
  CHECK(st[0] == 0 && st[n] == rows, "rows %lld blocks %d: [%lld, %lld)", (long long)rows, blocks, (long long)st[0],
        (long long)st[n]);
  CHECK(blocks > 0 || n <= TP_DEFAULT_BLOCKS, "rows %lld: %d blocks by the policy", (long long)rows, n);
  CHECK(blocks <= 0 || n <= blocks, "rows %lld: %d blocks of %d forced", (long long)rows, n, blocks);
  int64_t size = st[1] - st[0];
  for (int b = 0; b < n; b++) {
    int64_t len = st[b + 1] - st[b];
    CHECK((len > 0 || rows == 0) && (b == n - 1 ? len <= size : len == size), "rows %lld blocks %d: block %d is %lld rows",
          (long long)rows, blocks, b, (long long)len);
    CHECK(n == 1 || st[b] % (size >= TP_BLOCK_ALIGN ? TP_BLOCK_ALIGN : TP_BLOCK_ALIGN_SMALL) == 0,
          "rows %lld blocks %d: block %d starts at %lld", (long long)rows, blocks, b, (long long)st[b]);
  }
  if (blocks == 0 && n > 1)
    CHECK(reduces && rows >= TP_OVERLAP_MIN_ROWS && size >= TP_BLOCK_MIN_ROWS, "rows %lld: %d blocks of %lld",
          (long long)rows, n, (long long)size);
}

static void expect_cut(int64_t rows, int blocks, bool reduces, int n, const int64_t *want) {
  int64_t st[TP_MAX_BLOCKS + 1];
  int got = tp_row_blocks(rows, blocks, reduces, st);
  CHECK(got == n, "rows %lld blocks %d: %d blocks, want %d", (long long)rows, blocks, got, n);
  for (int b = 0; got == n && b <= n; b++)
    CHECK(st[b] == want[b], "rows %lld blocks %d: start %d is %lld, want %lld", (long long)rows, blocks, b,
          (long long)st[b], (long long)want[b]);
}

static void test_row_blocks(void) {
  /* the policy: only programs that reduce, from 1024 rows, blocks of 512 rows or more, at most 4 */
  expect_cut(1000, 0, true, 1, (int64_t[]){0, 1000});
  expect_cut(1024, 0, true, 2, (int64_t[]){0, 512, 1024});
  expect_cut(1536, 0, true, 3, (int64_t[]){0, 512, 1024, 1536});
  expect_cut(2000, 0, true, 3, (int64_t[]){0, 768, 1536, 2000});
  expect_cut(4096, 0, true, 4, (int64_t[]){0, 1024, 2048, 3072, 4096});
  expect_cut(5000, 0, true, 4, (int64_t[]){0, 1280, 2560, 3840, 5000});
  expect_cut(4096, 0, false, 1, (int64_t[]){0, 4096}); /* nothing to overlap */
  expect_cut(4096, -1, true, 1, (int64_t[]){0, 4096}); /* FFNC_TP_OVERLAP=0 */
  expect_cut(4096, 1, true, 1, (int64_t[]){0, 4096});
  /* forced (FFNC_TP_BLOCKS), at any row count the alignment allows */
  expect_cut(0, 3, true, 1, (int64_t[]){0, 0});
  expect_cut(1, 3, true, 1, (int64_t[]){0, 1});
  expect_cut(7, 3, false, 1, (int64_t[]){0, 7});
  expect_cut(64, 3, false, 2, (int64_t[]){0, 32, 64});
  expect_cut(300, 3, false, 3, (int64_t[]){0, 112, 224, 300});
  expect_cut(1000, 3, true, 3, (int64_t[]){0, 384, 768, 1000});
  expect_cut(4096, 40, true, TP_MAX_BLOCKS, (int64_t[]){0,    256,  512,  768,  1024, 1280, 1536, 1792, 2048,
                                                         2304, 2560, 2816, 3072, 3328, 3584, 3840, 4096});
  for (int64_t rows = 0; rows <= 5000; rows += rows < 300 ? 1 : 37)
    for (int blocks = -1; blocks <= TP_MAX_BLOCKS + 1; blocks++) {
      check_cut(rows, blocks, true);
      check_cut(rows, blocks, false);
    }
  check_cut((int64_t)1 << 31, 0, true);
  check_cut(((int64_t)1 << 31) - 1, TP_MAX_BLOCKS, true);
}

static Plan *compile(const char *rel, int tp, bool fused, bool grad) {
  FuseRequest fuse = {0, 4, {0}};
  DriverOptions o = {.sm = 90, .opt_level = 3, .tp = tp, .tp_rank = 0, .fuse = fused ? &fuse : NULL,
                     .nfuse = fused, .grad = grad};
  return compile_plan_opts(rel, &o, NULL);
}

/* Walks the schedule as the streams would see it and checks its order: each block runs every
 * step once, in order, each segment after waiting for its all-reduce, and ends waited for;
 * segment k of every block comes before segment k+1 of any, blocks in order within a segment
 * (the caller's stream has another block's work while one block's all-reduce runs). */
static void check_schedule(const Plan *p, int blocks, const char *what) {
  int size = tp_schedule_size(p, blocks);
  PipeOp *ops = malloc(sizeof *ops * (size_t)size);
  int n = tp_schedule(p, blocks, ops);
  CHECK(n <= size, "%s: %d ops, room for %d", what, n, size);
  int next[TP_MAX_BLOCKS] = {0};     /* per block: the next step it must run */
  bool pending[TP_MAX_BLOCKS] = {0}; /* an all-reduce not yet waited for */
  int segment[TP_MAX_BLOCKS] = {0}, at_segment = 0, at_block = 0;
  for (int i = 0; i < n; i++) {
    const PipeOp *op = &ops[i];
    int b = op->block;
    if (op->kind == PIPE_WAIT) {
      CHECK(pending[b], "%s: op %d waits for block %d, which has no all-reduce pending", what, i, b);
      pending[b] = false;
      continue;
    }
    CHECK(!pending[b], "%s: op %d: block %d goes on before its all-reduce is waited for", what, i, b);
    CHECK(op->first == next[b] && op->last > op->first, "%s: op %d: block %d runs [%d, %d), next is %d", what, i, b,
          op->first, op->last, next[b]);
    for (int s = op->first; s < op->last; s++)
      CHECK((p->steps[s].kind == STEP_ALLREDUCE) == (op->kind == PIPE_REDUCE), "%s: op %d: step %d in a %s", what, i,
            s, op->kind == PIPE_REDUCE ? "reduce" : "compute");
    CHECK(segment[b] > at_segment || (segment[b] == at_segment && b >= at_block),
          "%s: op %d: block %d's segment %d after block %d's segment %d", what, i, b, segment[b], at_block, at_segment);
    at_segment = segment[b], at_block = b;
    next[b] = op->last;
    if (op->kind == PIPE_REDUCE)
      pending[b] = true, segment[b]++;
  }
  for (int b = 0; b < blocks; b++)
    CHECK(next[b] == p->nsteps && !pending[b], "%s: block %d ends at step %d of %d%s", what, b, next[b], p->nsteps,
          pending[b] ? ", its last all-reduce not waited for" : "");
  free(ops);
}

static void test_plans(void) {
  static const struct {
    const char *file;
    bool fused;
    int reduces;
  } cases[] = {
      {"examples/llama3_tiny.ffn", false, 4},
      {"examples/llama3_tiny.ffn", true, 1},
      {"examples/gpt2_tiny.ffn", false, 0},
      {"tests/gpu/models/fused_gpt.ffn", false, 0},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    for (int tp = 1; tp <= 2; tp++) {
      Plan *p = compile(cases[c].file, tp, cases[c].fused, false);
      char what[256];
      snprintf(what, sizeof what, "%s%s tp %d", cases[c].file, cases[c].fused ? " fused" : "", tp);
      int row = tp_row_dim(p), reduces = 0;
      for (int s = 0; s < p->nsteps; s++)
        reduces += p->steps[s].kind == STEP_ALLREDUCE;
      CHECK(row >= 0 && strcmp(p->dim_names[row], "T") == 0, "%s: row dim %d", what, row);
      CHECK(tp == 1 ? reduces == 0 : reduces >= 1, "%s: %d all-reduces", what, reduces);
      CHECK(tp == 1 || cases[c].reduces == 0 || reduces == cases[c].reduces, "%s: %d all-reduces, want %d", what,
            reduces, cases[c].reduces);
      for (int blocks = 1; blocks <= TP_MAX_BLOCKS; blocks++) {
        check_schedule(p, blocks, what);
      }
      /* a launch over rows that are not the call's rows cannot be cut */
      for (int s = 0; s < p->nsteps; s++)
        if (p->steps[s].kind == STEP_LAUNCH) {
          Dim keep = p->steps[s].rowdims[0];
          p->steps[s].rowdims[0] = (Dim){.sym = -1, .size = 4};
          CHECK(tp_row_dim(p) == -1, "%s: step %d over 4 rows", what, s);
          p->steps[s].rowdims[0] = keep;
          break;
        }
      plan_destroy(p);
    }
  }
  /* backward graphs sum over the rows (weight gradients) */
  Plan *g = compile("examples/llama3_tiny.ffn", 1, false, true);
  CHECK(tp_row_dim(g) == -1, "llama3_tiny's backward graph can be cut");
  plan_destroy(g);
}

/* The exact order for [launch, launch, allreduce, launch] in 2 blocks. */
static void test_order(void) {
  PlanStep steps[4] = {{.kind = STEP_LAUNCH}, {.kind = STEP_LAUNCH}, {.kind = STEP_ALLREDUCE}, {.kind = STEP_LAUNCH}};
  Plan p = {.nsteps = 4, .steps = steps};
  const PipeOp want[] = {
      {PIPE_COMPUTE, 0, 0, 2}, {PIPE_REDUCE, 0, 2, 3}, {PIPE_COMPUTE, 1, 0, 2}, {PIPE_REDUCE, 1, 2, 3},
      {PIPE_WAIT, 0, 0, 0},    {PIPE_COMPUTE, 0, 3, 4}, {PIPE_WAIT, 1, 0, 0},   {PIPE_COMPUTE, 1, 3, 4},
  };
  int nwant = (int)(sizeof want / sizeof want[0]);
  PipeOp ops[64];
  CHECK(tp_schedule_size(&p, 2) <= 64, "room");
  int n = tp_schedule(&p, 2, ops);
  CHECK(n == nwant, "%d ops, want %d", n, nwant);
  for (int i = 0; i < n && i < nwant; i++)
    CHECK(memcmp(&ops[i], &want[i], sizeof want[i]) == 0, "op %d: kind %d block %d [%d, %d)", i, ops[i].kind,
          ops[i].block, ops[i].first, ops[i].last);
  /* a program that ends with its all-reduce still waits for it */
  p.nsteps = 3;
  n = tp_schedule(&p, 2, ops);
  CHECK(n == 6 && ops[4].kind == PIPE_WAIT && ops[5].kind == PIPE_WAIT, "ending in an all-reduce: %d ops", n);
}

int main(void) {
  test_row_blocks();
  test_order();
  test_plans();
  return check_result("tp_overlap_test");
}
