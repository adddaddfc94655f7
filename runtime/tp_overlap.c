/* tp_overlap.c: a large tensor-parallel call in row blocks, its all-reduces overlapped with
 * the computation (rt.h, "row blocks", says what and when).
 *
 * Each block is an ExecRun of its own over its rows of the caller's inputs and outputs, so each
 * has its own workspace: nothing one block writes can alias what another block's all-reduce is
 * reading, whatever memplan shared within a call. On the caller's stream the blocks run segment
 * by segment (all blocks' first segments, then their second...), so the stream never idles
 * behind one block's all-reduce while another block has work:
 *
 *   caller's stream:  [s0 b0][s0 b1][s0 b2]        [s1 b0]   [s1 b1]   [s1 b2]
 *   side stream:             [AR b0]  [AR b1]  [AR b2]   [AR b0]   [AR b1]  [AR b2]
 *
 * The side stream joins the capture or the caller's stream order only through events recorded
 * on the caller's stream, and the caller's stream waits for its last all-reduce before the call
 * ends: a call is one fork and one join, capturable into a CUDA graph like any other call.
 */
#include "rt.h"

#include <stdlib.h>
#include <string.h>

/* ---- the plan of a call (no device: tests/runtime/tp_overlap_test.c) ---- */

int tp_row_blocks(int64_t rows, int blocks, bool reduces, int64_t *starts) {
  int n = blocks;
  if (blocks == 0) /* the policy */
    n = reduces && rows >= TP_OVERLAP_MIN_ROWS ? (int)(rows / TP_BLOCK_MIN_ROWS) : 1;
  if (blocks == 0 && n > TP_DEFAULT_BLOCKS)
    n = TP_DEFAULT_BLOCKS;
  if (n > TP_MAX_BLOCKS)
    n = TP_MAX_BLOCKS;
  starts[0] = 0;
  starts[1] = rows;
  if (n <= 1 || rows <= 1)
    return 1;
  int64_t size = (rows + n - 1) / n;
  int64_t align = size >= TP_BLOCK_ALIGN ? TP_BLOCK_ALIGN : TP_BLOCK_ALIGN_SMALL;
  size = (size + align - 1) / align * align;
  n = (int)((rows + size - 1) / size);
  for (int b = 0; b <= n; b++)
    starts[b] = b < n ? b * size : rows;
  return n;
}

/* Whether dim `row` leads t's shape and appears nowhere else in it. */
static bool leads_with(const PlanTensor *t, int row) {
  if (t->rank < 1 || t->dims[0].sym != row)
    return false;
  for (int d = 1; d < t->rank; d++)
    if (t->dims[d].sym == row)
      return false;
  return true;
}

int tp_row_dim(const Plan *p) {
  int row = -1;
  for (int t = 0; t < p->ntensors && row < 0; t++)
    if (p->tensors[t].kind == PT_INPUT && p->tensors[t].rank >= 1)
      row = p->tensors[t].dims[0].sym;
  if (row < 0)
    return -1;
  for (int t = 0; t < p->ntensors; t++) {
    const PlanTensor *pt = &p->tensors[t];
    bool io = pt->kind == PT_INPUT || pt->kind == PT_OUTPUT;
    if ((io || pt->kind == PT_SCRATCH) && !leads_with(pt, row))
      return -1;
  }
  for (int s = 0; s < p->nsteps; s++) {
    const PlanStep *ps = &p->steps[s];
    if (ps->kind != STEP_LAUNCH)
      continue;
    const PlanKernel *k = &p->kernels[ps->kernel];
    if (ps->nrowdims != 1 || ps->rowdims[0].sym != row || k->op == OP_MATMUL_AT || k->op == OP_SUM_TO)
      return -1;
  }
  return row;
}

int tp_schedule_size(const Plan *p, int blocks) {
  int reduces = 0;
  for (int s = 0; s < p->nsteps; s++)
    reduces += p->steps[s].kind == STEP_ALLREDUCE;
  return 3 * blocks * (reduces + 1);
}

int tp_schedule(const Plan *p, int blocks, PipeOp *ops) {
  int n = 0, first = 0;
  bool reduced = false; /* the segment follows an all-reduce */
  for (int s = 0; s <= p->nsteps; s++) {
    bool end = s == p->nsteps;
    if (!end && p->steps[s].kind != STEP_ALLREDUCE)
      continue;
    for (int b = 0; b < blocks; b++) {
      if (reduced)
        ops[n++] = (PipeOp){PIPE_WAIT, b, 0, 0};
      if (s > first)
        ops[n++] = (PipeOp){PIPE_COMPUTE, b, first, s};
      if (!end)
        ops[n++] = (PipeOp){PIPE_REDUCE, b, s, s + 1};
    }
    reduced = !end;
    first = s + 1;
  }
  return n;
}

/* ---- running it ---- */

/* A call's blocks: block b's inputs and outputs are their rows of the caller's, as DLTensors
 * of their own (io[b * nio + i], shapes at shape[(b * nio + i) * FFN_MAX_RANK]). */
typedef struct {
  int blocks, nio;
  DLTensor *io;
  int64_t *shape;
  ExecRun *runs;
  int begun; /* runs[0..begun) are begun */
} Blocks;

/* Rows [r0, r1) of the contiguous row-major tensor t (its leading dim counts the rows). */
static void slice_rows(const DLTensor *t, int64_t r0, int64_t r1, DLTensor *out, int64_t *shape) {
  int64_t row = 1;
  for (int d = 1; d < t->ndim; d++)
    row *= t->shape[d];
  *out = *t;
  memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
  shape[0] = r1 - r0;
  out->shape = shape;
  out->byte_offset += (uint64_t)(r0 * row) * (uint64_t)((t->dtype.bits * t->dtype.lanes + 7) / 8);
}

static ffn_status blocks_begin(ffn_model *m, CUstream stream, const DLTensor *inputs, int ninputs,
                               const DLTensor *outputs, int noutputs, int blocks, const int64_t *starts, Blocks *bl) {
  int nio = ninputs + noutputs;
  *bl = (Blocks){.blocks = blocks, .nio = nio};
  bl->io = calloc((size_t)(blocks * nio) + 1, sizeof *bl->io);
  bl->shape = calloc((size_t)(blocks * nio * FFN_MAX_RANK) + 1, sizeof *bl->shape);
  bl->runs = calloc((size_t)blocks, sizeof *bl->runs);
  if (!bl->io || !bl->shape || !bl->runs)
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
  for (int b = 0; b < blocks; b++)
    for (int i = 0; i < nio; i++) {
      const DLTensor *t = i < ninputs ? &inputs[i] : &outputs[i - ninputs];
      slice_rows(t, starts[b], starts[b + 1], &bl->io[b * nio + i], &bl->shape[(b * nio + i) * FFN_MAX_RANK]);
    }
  ffn_status st = FFN_OK;
  for (int b = 0; b < blocks && st == FFN_OK; b++) {
    DLTensor *io = &bl->io[b * nio];
    st = exec_begin(m, stream, io, ninputs, io + ninputs, noutputs, &bl->runs[b]);
    if (st == FFN_OK)
      bl->begun++;
  }
  return st;
}

static ffn_status blocks_end(Blocks *bl, ffn_status st) {
  for (int b = bl->begun - 1; b >= 0; b--)
    st = exec_end(&bl->runs[b], st);
  free(bl->io);
  free(bl->shape);
  free(bl->runs);
  return st;
}

/* w's side stream and events, created at its first pipelined call (the model's context is
 * current: exec_begin pushed it). The side stream has the highest priority: the all-reduce's
 * CTAs take SMs as the running GEMM's CTAs retire, ahead of the GEMM's waiting ones, so the
 * other ranks, spinning in the same all-reduce, wait less. */
static ffn_status side_lane(ffn_model *m, Workspace *w) {
  const CuApi *cu = m->cu;
  int least, greatest;
  if (!w->side) {
    CU_CHECK(cu, cu->cuCtxGetStreamPriorityRange(&least, &greatest));
    CU_CHECK(cu, cu->cuStreamCreateWithPriority(&w->side, CU_STREAM_NON_BLOCKING, greatest));
  }
  if (!w->computed)
    CU_CHECK(cu, cu->cuEventCreate(&w->computed, CU_EVENT_DISABLE_TIMING));
  for (int b = 0; b < TP_MAX_BLOCKS; b++)
    if (!w->reduced[b])
      CU_CHECK(cu, cu->cuEventCreate(&w->reduced[b], CU_EVENT_DISABLE_TIMING));
  return FFN_OK;
}

/* Block `block`'s all-reduce step on the side stream, after what the caller's stream has of it
 * so far; reduced[block] marks its end. */
static ffn_status reduce_beside(ExecRun *run, int step, int block, CUstream stream, Workspace *lane) {
  const CuApi *cu = run->m->cu;
  CU_CHECK(cu, cu->cuEventRecord(lane->computed, stream));
  CU_CHECK(cu, cu->cuStreamWaitEvent(lane->side, lane->computed, 0));
  ffn_status st = exec_allreduce(run, step, lane->side);
  if (st != FFN_OK)
    return st;
  CU_CHECK(cu, cu->cuEventRecord(lane->reduced[block], lane->side));
  return FFN_OK;
}

/* One op of the schedule. Without a side stream (a call with no workspace) the all-reduces
 * run on the caller's stream, in order. */
static ffn_status pipe_op(Blocks *bl, const PipeOp *op, CUstream stream, Workspace *lane) {
  ExecRun *run = &bl->runs[op->block];
  const CuApi *cu = run->m->cu;
  switch (op->kind) {
  case PIPE_COMPUTE:
    run->chain = false; /* events and other blocks' kernels came between */
    for (int s = op->first; s < op->last; s++) {
      ffn_status st = exec_step(run, s);
      if (st != FFN_OK)
        return st;
    }
    return FFN_OK;
  case PIPE_REDUCE:
    return lane ? reduce_beside(run, op->first, op->block, stream, lane) : exec_allreduce(run, op->first, stream);
  case PIPE_WAIT:
    if (lane)
      CU_CHECK(cu, cu->cuStreamWaitEvent(stream, lane->reduced[op->block], 0));
    return FFN_OK;
  }
  return FFN_OK;
}

/* The caller's stream waits for everything enqueued on the side stream: after a failure part
 * way, before the workspaces' events are recorded (they must cover the side stream's work). */
static ffn_status join(const CuApi *cu, CUstream stream, Workspace *lane) {
  CU_CHECK(cu, cu->cuEventRecord(lane->computed, lane->side));
  CU_CHECK(cu, cu->cuStreamWaitEvent(stream, lane->computed, 0));
  return FFN_OK;
}

ffn_status tp_run_blocks(ffn_model *m, CUstream stream, const DLTensor *inputs, int ninputs, const DLTensor *outputs,
                         int noutputs, int blocks, const int64_t *starts) {
  const Plan *p = m->prog->plan;
  Blocks bl;
  ffn_status st = blocks_begin(m, stream, inputs, ninputs, outputs, noutputs, blocks, starts, &bl);
  int nops = st == FFN_OK ? tp_schedule_size(p, blocks) : 0;
  PipeOp *ops = nops ? malloc(sizeof *ops * (size_t)nops) : NULL;
  if (st == FFN_OK && nops && !ops)
    st = rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
  nops = st == FFN_OK ? tp_schedule(p, blocks, ops) : 0;
  bool reduces = false;
  for (int i = 0; i < nops; i++)
    reduces |= ops[i].kind == PIPE_REDUCE;
  Workspace *lane = reduces && st == FFN_OK ? bl.runs[0].w : NULL;
  if (lane && (st = side_lane(m, lane)) != FFN_OK)
    lane = NULL;
  for (int i = 0; i < nops && st == FFN_OK; i++)
    st = pipe_op(&bl, &ops[i], stream, lane);
  if (lane && lane->side) {
    ffn_status j = join(m->cu, stream, lane);
    st = st == FFN_OK ? j : st;
  }
  free(ops);
  return blocks_end(&bl, st);
}
