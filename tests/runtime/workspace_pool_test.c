/* workspace_pool_test.c: the workspace pools of runtime/exec.c without a GPU. Calls of
 * llama3_tiny's forward plan and its backward graph (sm_90) go through exec_begin and exec_end
 * (which take and give back a workspace; nothing is launched) on models of a fake driver: device
 * memory from malloc, every event already reached. Checked: a model alone gets exactly its call's
 * need, and headroom when it outgrows its own workspace; after ffn_model_share_workspace the
 * backward graph takes the forward's workspace, one for the pair on a stream, grown to exactly
 * the backward's need (another model outgrowing it: no headroom), with headroom when the backward
 * outgrows its own sizing; two calls in flight at once on two streams take two; the backward's
 * old pool is freed at once, the shared one with its last model; models of other contexts and
 * bad arguments are refused. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "plan_util.h"
#include "runtime/dlpack_dtype.h"
#include "runtime/rt.h"

/* ---- the fake driver ---- */

static int live_allocations, nevents;

static CUresult fake_alloc(CUdeviceptr *p, size_t n) {
  void *b = malloc(n);
  if (!b)
    return CUDA_ERROR_OUT_OF_MEMORY;
  live_allocations++;
  *p = (CUdeviceptr)(uintptr_t)b;
  return CUDA_SUCCESS;
}
static CUresult fake_free(CUdeviceptr p) {
  free((void *)(uintptr_t)p);
  live_allocations--;
  return CUDA_SUCCESS;
}
static CUresult fake_memset(CUdeviceptr d, unsigned char v, size_t n, CUstream s) {
  (void)s;
  memset((void *)(uintptr_t)d, v, n);
  return CUDA_SUCCESS;
}
static CUresult fake_push(CUcontext c) { (void)c; return CUDA_SUCCESS; }
static CUresult fake_pop(CUcontext *c) { *c = NULL; return CUDA_SUCCESS; }
static CUresult fake_capturing(CUstream s, CUstreamCaptureStatus *st) {
  (void)s;
  *st = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
static CUresult fake_event_create(CUevent *e, unsigned flags) {
  (void)flags;
  *e = (CUevent)(uintptr_t)++nevents;
  return CUDA_SUCCESS;
}
static CUresult fake_event(CUevent e) { (void)e; return CUDA_SUCCESS; } /* query, synchronize, destroy */
static CUresult fake_record(CUevent e, CUstream s) { (void)e, (void)s; return CUDA_SUCCESS; }
static CUresult fake_wait(CUstream s, CUevent e, unsigned flags) { (void)s, (void)e, (void)flags; return CUDA_SUCCESS; }

static CuApi fake_api(void) {
  CuApi cu = {0};
  cu.cuCtxPushCurrent = fake_push;
  cu.cuCtxPopCurrent = fake_pop;
  cu.cuStreamIsCapturing = fake_capturing;
  cu.cuStreamWaitEvent = fake_wait;
  cu.cuEventCreate = fake_event_create;
  cu.cuEventQuery = fake_event;
  cu.cuEventSynchronize = fake_event;
  cu.cuEventDestroy = fake_event;
  cu.cuEventRecord = fake_record;
  cu.cuMemAlloc = fake_alloc;
  cu.cuMemFree = fake_free;
  cu.cuMemsetD8Async = fake_memset;
  return cu;
}

/* ---- models and calls ---- */

static const CUcontext CTX0 = (CUcontext)(uintptr_t)0x10, CTX1 = (CUcontext)(uintptr_t)0x11;
static const CUstream S1 = (CUstream)(uintptr_t)0x21, S2 = (CUstream)(uintptr_t)0x22;

/* A prepared model of prog on the fake device `device` (context ctx) with its own pool; its
 * weights are never read (nothing is launched). */
static ffn_model *fake_model(const ffn_program *prog, const CuApi *cu, CUcontext ctx, int device) {
  ffn_model *m = calloc(1, sizeof *m);
  m->prog = prog, m->cu = cu, m->ctx = ctx, m->device = device, m->sms = 132, m->prepared = true;
  m->tensor = calloc((size_t)prog->plan->ntensors + 1, sizeof *m->tensor);
  m->pool = pool_create(cu, ctx);
  return m;
}

/* What ffn_model_destroy does to the pool, and the model's host memory. */
static void fake_destroy(ffn_model *m) {
  pool_release(m->pool);
  free(m->tensor);
  free(m);
}

/* A call's tensors: every input and output of the plan at `tokens` rows, at a 16-byte aligned
 * stand-in address (never read). */
typedef struct {
  int64_t shape[64][FFN_MAX_RANK];
  DLTensor in[64], out[64];
  int nin, nout;
} Call;

static void call_of(const Plan *p, int64_t tokens, Call *c) {
  memset(c, 0, sizeof *c);
  for (int t = 0; t < p->ntensors; t++) {
    const PlanTensor *pt = &p->tensors[t];
    if (pt->kind != PT_INPUT && pt->kind != PT_OUTPUT)
      continue;
    DLTensor *d = pt->kind == PT_INPUT ? &c->in[pt->index] : &c->out[pt->index];
    int64_t *shape = c->shape[c->nin + c->nout];
    for (int i = 0; i < pt->rank; i++)
      shape[i] = pt->dims[i].sym >= 0 ? tokens : pt->dims[i].size;
    *d = (DLTensor){(void *)(uintptr_t)4096, {kDLCUDA, 0}, pt->rank, {0}, shape, NULL, 0};
    dtype_to_dl(pt->dtype, &d->dtype);
    *(pt->kind == PT_INPUT ? &c->nin : &c->nout) += 1;
  }
}

/* exec_begin of a call of m at `tokens` rows on stream s, into *run (ended by the caller). */
static void begin(ffn_model *m, int64_t tokens, CUstream s, ExecRun *run) {
  Call c;
  call_of(m->prog->plan, tokens, &c);
  ffn_status st = exec_begin(m, s, c.in, c.nin, c.out, c.nout, run);
  CHECK(st == FFN_OK && run->w, "exec_begin at %lld tokens: %s", (long long)tokens, ffn_last_error());
}

/* A whole call of m at `tokens` rows on stream s; the size of the workspace it took. */
static size_t call(ffn_model *m, int64_t tokens, CUstream s) {
  ExecRun run;
  begin(m, tokens, s, &run);
  size_t size = run.w ? run.w->size : 0;
  exec_end(&run, FFN_OK);
  return size;
}

/* What a call of prog at `tokens` rows needs: what a new model's first call allocates. */
static size_t need(const ffn_program *prog, const CuApi *cu, int64_t tokens) {
  ffn_model *m = fake_model(prog, cu, CTX0, 0);
  size_t size = call(m, tokens, S1);
  fake_destroy(m);
  return size;
}

/* ---- the checks ---- */

/* One model alone: exactly its need the first time, a quarter of the rest more when it outgrows
 * its own workspace (more tokens), nothing new for fewer. */
static void check_alone(const ffn_program *fwd, const CuApi *cu) {
  ffn_model *m = fake_model(fwd, cu, CTX0, 0);
  size_t n64 = need(fwd, cu, 64), n1000 = need(fwd, cu, 1000);
  CHECK(n64 > 0 && n1000 > n64, "needs %zu at 64 tokens, %zu at 1000", n64, n1000);
  CHECK(call(m, 64, S1) == n64, "the first call's workspace is its need");
  size_t grown = call(m, 1000, S1);
  CHECK(grown > n1000 && grown <= n1000 + n1000 / 4, "grown for 1000 tokens to %zu, need %zu", grown, n1000);
  CHECK(call(m, 64, S1) == grown && m->pool->nws == 1, "fewer tokens: %d workspaces", m->pool->nws);
  fake_destroy(m);
}

/* The backward graph sharing the forward's pool, as a training loop has them. */
static void check_shared(const ffn_program *fwd, const ffn_program *bwd, const CuApi *cu) {
  size_t f64 = need(fwd, cu, 64), b64 = need(bwd, cu, 64), b1000 = need(bwd, cu, 1000);
  CHECK(b64 > f64, "the backward needs %zu at 64 tokens, the forward %zu", b64, f64);
  int before = live_allocations;
  ffn_model *f = fake_model(fwd, cu, CTX0, 0), *b = fake_model(bwd, cu, CTX0, 0);
  call(f, 64, S1);
  call(b, 64, S1);
  CHECK(live_allocations == before + 2, "%d allocations", live_allocations - before);
  WorkspacePool *mine = f->pool;
  CHECK(ffn_model_share_workspace(b, f) == FFN_OK, "%s", ffn_last_error());
  CHECK(b->pool == mine && mine->refs == 2, "b's pool %p, f's %p, %d references", (void *)b->pool, (void *)mine,
        mine->refs);
  CHECK(live_allocations == before + 1, "the backward's own workspace is not freed");
  CHECK(ffn_model_share_workspace(b, f) == FFN_OK && ffn_model_share_workspace(f, b) == FFN_OK && mine->refs == 2,
        "sharing again: %d references", mine->refs);
  /* a step, then another: one workspace, exactly the backward's need (it outgrew the forward's) */
  for (int step = 0; step < 2; step++) {
    call(f, 64, S1);
    size_t size = call(b, 64, S1);
    CHECK(mine->nws == 1 && size == b64, "step %d: %d workspaces, %zu bytes for a need of %zu", step, mine->nws, size,
          b64);
  }
  CHECK(mine->ws[0]->sized_by == b, "sized by %p, not the backward %p", (void *)mine->ws[0]->sized_by, (void *)b);
  /* the backward outgrowing its own sizing (more tokens) gets headroom */
  size_t grown = call(b, 1000, S1);
  CHECK(grown > b1000 && grown <= b1000 + b1000 / 4 && mine->nws == 1, "grown to %zu for a need of %zu", grown, b1000);
  /* two calls in flight at once on two streams take a workspace each */
  ExecRun rf, rb;
  begin(f, 64, S1, &rf);
  begin(b, 64, S2, &rb);
  CHECK(rf.w && rb.w && rf.w != rb.w && mine->nws == 2, "%d workspaces for two streams", mine->nws);
  exec_end(&rb, FFN_OK);
  exec_end(&rf, FFN_OK);
  /* the forward destroyed first: the pool lives on with the backward, then goes with it */
  fake_destroy(f);
  CHECK(live_allocations == before + 2 && b->pool->refs == 1, "%d allocations after the forward's destroy",
        live_allocations - before);
  call(b, 64, S1);
  fake_destroy(b);
  CHECK(live_allocations == before, "%d allocations left", live_allocations - before);
}

/* Models of two contexts, and bad arguments: refused, nothing changed. */
static void check_refusals(const ffn_program *fwd, const CuApi *cu) {
  ffn_model *a = fake_model(fwd, cu, CTX0, 0), *b = fake_model(fwd, cu, CTX1, 1);
  WorkspacePool *pa = a->pool;
  CHECK(ffn_model_share_workspace(a, b) == FFN_ERR_INVALID_ARGUMENT && strstr(ffn_last_error(), "device 0") &&
            strstr(ffn_last_error(), "device 1"),
        "%s", ffn_last_error());
  CHECK(ffn_model_share_workspace(a, a) == FFN_ERR_INVALID_ARGUMENT && strstr(ffn_last_error(), "itself"), "%s",
        ffn_last_error());
  CHECK(ffn_model_share_workspace(a, NULL) == FFN_ERR_INVALID_ARGUMENT, "NULL");
  CHECK(a->pool == pa && pa->refs == 1 && b->pool->refs == 1, "a refused share changed the pools");
  fake_destroy(a);
  fake_destroy(b);
}

int main(void) {
  DriverOptions o = {.sm = 90, .opt_level = 3};
  Plan *pf = compile_plan_opts("examples/llama3_tiny.ffn", &o, NULL);
  o.grad = true;
  Plan *pb = compile_plan_opts("examples/llama3_tiny.ffn", &o, NULL);
  ffn_program fwd = {.plan = pf}, bwd = {.plan = pb};
  CuApi cu = fake_api();
  check_alone(&fwd, &cu);
  check_shared(&fwd, &bwd, &cu);
  check_refusals(&fwd, &cu);
  plan_destroy(pf);
  plan_destroy(pb);
  return check_result("workspace_pool_test");
}
