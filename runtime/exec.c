/* exec.c: running a plan: the load-time steps once, then the launch steps of each call.
 *
 * A call binds the dynamic dims from the input shapes, lays out its workspace (memplan.c)
 * and takes a workspace from the model's pool: one that is free and either last used on
 * this stream (stream order makes reuse safe) or whose last use has finished (its event).
 * So several host threads can run one model on several streams at once, each call with
 * memory of its own, and back-to-back calls on one stream reuse one allocation.
 */
#include "rt.h"

#include <stdlib.h>
#include <string.h>

#include "../ir/dims.h"
#include "../ir/size_limits.h"
#include "dlpack_dtype.h"
#include "../passes/memplan.h"

_Static_assert(FFN_PREP_MAX_RANK >= FFN_MAX_RANK, "PrepIndex must hold every rank");

static size_t tensor_bytes(const Plan *p, int t, const int64_t *dims) {
  return dtype_bytes(p->tensors[t].dtype, (size_t)plan_numel(p, t, dims));
}

/* ---- load time ---- */

/* One load-time kernel over n work items (elements, or lanes for rowsum), on the default
 * stream like every load-time step. */
static ffn_status launch1d(ffn_model *m, CUfunction f, long long n, PrepArgs *args) {
  if (n <= 0)
    return FFN_OK;
  long long blocks = (n + 255) / 256;
  if (blocks > 65535)
    blocks = 65535;
  void *params[] = {args};
  CU_CHECK(m->cu, m->cu->cuLaunchKernel(f, (unsigned)blocks, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
  return FFN_OK;
}

/* Checks a prep step's shapes with the IR's own shape rules (AOT plans come from files). */
ffn_status exec_check_prep(const Plan *p, const PrepStep *s) {
  Node args[8], *argp[8], proto = {.ival = {s->ival[0], s->ival[1]}, .fval = s->fval};
  for (int i = 0; i < s->nargs; i++) {
    const PlanTensor *t = &p->tensors[s->args[i]];
    args[i] = (Node){.dtype = t->dtype, .shape = {.rank = t->rank}};
    memcpy(args[i].shape.d, t->dims, sizeof(Dim) * (size_t)t->rank);
    argp[i] = &args[i];
  }
  const PlanTensor *o = &p->tensors[s->out];
  Shape out = {.rank = o->rank}, want;
  memcpy(out.d, o->dims, sizeof(Dim) * (size_t)o->rank);
  char why[256];
  if (!shape_is_static(&out))
    return rt_error(FFN_ERR_IO, "launch plan: load-time %s has a dynamic shape", op_info[s->op].name);
  if (s->op == OP_SCALAR)
    return FFN_OK;
  if (!ir_infer_shape(NULL, s->op, argp, s->nargs, &proto, &want, why, sizeof why) || !shape_eq(&want, &out))
    return rt_error(FFN_ERR_IO, "launch plan: load-time %s has inconsistent shapes", op_info[s->op].name);
  for (int i = 0; i < s->nargs; i++)
    if (!shape_is_static(&args[i].shape))
      return rt_error(FFN_ERR_IO, "launch plan: load-time %s reads a dynamic tensor", op_info[s->op].name);
  return FFN_OK;
}

/* The output of a load-time step: checked to be a derived tensor written once, allocated. */
static ffn_status prep_output(ffn_model *m, const PrepStep *s, CUdeviceptr *out) {
  const Plan *p = m->prog->plan;
  if (p->tensors[s->out].kind != PT_DERIVED || m->tensor[s->out])
    return rt_error(FFN_ERR_IO, "launch plan: load-time step writes tensor %d twice", s->out);
  size_t bytes = tensor_bytes(p, s->out, NULL);
  *out = 0;
  if (bytes)
    CU_CHECK(m->cu, m->cu->cuMemAlloc(out, bytes));
  m->tensor[s->out] = *out;
  m->owned[s->out] = true;
  for (int i = 0; i < s->nargs; i++)
    if (!m->tensor[s->args[i]] && tensor_bytes(p, s->args[i], NULL))
      return rt_error(FFN_ERR_IO, "launch plan: load-time %s reads a tensor that is not ready", op_info[s->op].name);
  return FFN_OK;
}

/* Slices and concatenations: copies of row blocks, outer x (len x inner) bytes each. */
static ffn_status prep_copy_blocks(ffn_model *m, const PrepStep *s, CUdeviceptr out) {
  const Plan *p = m->prog->plan;
  const PlanTensor *o = &p->tensors[s->out];
  int axis = s->op == OP_SLICE ? o->rank - 1 : (int)s->ival[0];
  size_t esize = (size_t)dtype_bits(o->dtype) / 8, outer = 1, inner = 1;
  for (int d = 0; d < axis; d++)
    outer *= (size_t)o->dims[d].size;
  for (int d = axis + 1; d < o->rank; d++)
    inner *= (size_t)o->dims[d].size;
  size_t dst_off = 0;
  for (int i = 0; i < s->nargs; i++) {
    const PlanTensor *t = &p->tensors[s->args[i]];
    if (t->dtype != o->dtype || esize == 0)
      return rt_error(FFN_ERR_IO, "launch plan: load-time %s mixes element types", op_info[s->op].name);
    size_t len = s->op == OP_SLICE ? (size_t)o->dims[axis].size : (size_t)t->dims[axis].size;
    size_t src_len = (size_t)t->dims[axis].size;
    size_t src_off = s->op == OP_SLICE ? (size_t)s->ival[0] : 0;
    CUDA_MEMCPY2D c = {0};
    c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = m->tensor[s->args[i]];
    c.srcXInBytes = src_off * inner * esize;
    c.srcPitch = src_len * inner * esize;
    c.dstDevice = out;
    c.dstXInBytes = dst_off * inner * esize;
    c.dstPitch = (size_t)o->dims[axis].size * inner * esize;
    c.WidthInBytes = len * inner * esize;
    c.Height = outer;
    if (c.WidthInBytes && c.Height)
      CU_CHECK(m->cu, m->cu->cuMemcpy2DAsync(&c, NULL));
    dst_off += len;
  }
  return FFN_OK;
}

/* Broadcast strides of each operand of an elementwise step against the output shape. */
static PrepIndex prep_index(const Plan *p, const PrepStep *s) {
  const PlanTensor *o = &p->tensors[s->out];
  PrepIndex ix = {.rank = o->rank};
  for (int k = 0; k < 2 && k < s->nargs; k++) {
    const PlanTensor *t = &p->tensors[s->args[k]];
    long long stride = 1;
    for (int d = o->rank - 1; d >= 0; d--) {
      int td = t->rank - (o->rank - d);
      long long size = td >= 0 ? t->dims[td].size : 1;
      (k ? ix.sb : ix.sa)[d] = size == 1 ? 0 : stride;
      stride *= size;
    }
  }
  for (int d = 0; d < o->rank; d++)
    ix.dims[d] = o->dims[d].size;
  return ix;
}

/* The kernels of kernels/prep.cuh: fills a PrepArgs for s's op and launches it. */
static ffn_status prep_kernel(ffn_model *m, const PrepStep *s, CUdeviceptr out) {
  const Plan *p = m->prog->plan;
  const PlanTensor *o = &p->tensors[s->out];
  const PlanTensor *ta = s->nargs > 0 ? &p->tensors[s->args[0]] : NULL, *tb = s->nargs > 1 ? &p->tensors[s->args[1]] : NULL;
  PrepArgs a = {.out = (void *)out,
                .a = s->nargs > 0 ? (const void *)m->tensor[s->args[0]] : NULL,
                .b = s->nargs > 1 ? (const void *)m->tensor[s->args[1]] : NULL,
                .dto = o->dtype,
                .dta = ta ? (int)ta->dtype : 0,
                .dtb = tb ? (int)tb->dtype : 0,
                .n = plan_numel(p, s->out, NULL)};
  switch (s->op) {
  case OP_SCALAR:
    a.value = s->fval;
    return launch1d(m, m->prep_fill, a.n, &a);
  case OP_TRANSPOSE:
    a.rows = ta->dims[0].size, a.cols = ta->dims[1].size;
    return launch1d(m, m->prep_transpose, a.n, &a);
  case OP_INTERLEAVE:
    if (a.dta != a.dto)
      break;
    a.rows = ta->dims[0].size, a.cols = ta->dims[1].size, a.group = s->ival[0], a.streams = s->ival[1];
    return launch1d(m, m->prep_interleave, a.n, &a);
  case OP_ROWSUM:
    a.cols = ta->rank ? ta->dims[ta->rank - 1].size : 1;
    a.rows = a.cols ? plan_numel(p, s->args[0], NULL) / a.cols : 0;
    return launch1d(m, m->prep_rowsum, a.rows * 32, &a); /* a warp per row */
  case OP_WQ_SCALE:
  case OP_WQ_PACK:
    if (o->dtype != (s->op == OP_WQ_SCALE ? DT_F32 : DT_U8) || (s->op == OP_WQ_PACK && tb->dtype != DT_F32))
      break;
    a.rows = ta->dims[0].size, a.cols = ta->dims[1].size, a.inner = s->ival[0], a.group = s->ival[1];
    if (s->op == OP_WQ_SCALE) /* a warp per (row, group) */
      return launch1d(m, m->prep_wq_scale, a.n * 32, &a);
    return launch1d(m, m->prep_wq_pack, a.n, &a);
  case OP_F8_SCALE:
  case OP_F8_PACK:
    if (o->dtype != (s->op == OP_F8_SCALE ? DT_F32 : DT_U8) || (s->op == OP_F8_PACK && tb->dtype != DT_F32))
      break;
    a.rows = ta->dims[0].size, a.cols = ta->dims[1].size, a.inner = s->ival[0] != 0;
    if (s->op == OP_F8_SCALE) /* a warp per row */
      return launch1d(m, m->prep_f8_scale, a.n * 32, &a);
    return launch1d(m, m->prep_f8_pack, a.n, &a);
  case OP_F8_DEQUANT:
    if (o->dtype != DT_F32 || ta->dtype != DT_U8 || tb->dtype != DT_F32)
      break;
    a.rows = tb->dims[0].size, a.cols = a.rows ? a.n / a.rows : 0, a.inner = s->ival[0] != 0;
    return launch1d(m, m->prep_f8_dequant, a.n, &a);
  case OP_MATMUL:
    if (s->ival[0] != 0 && s->ival[0] != 8 && s->ival[0] != 4)
      break;
    a.streams = s->ival[0], a.group = s->ival[1]; /* weight-only quantization of b, if bits */
    a.inner = tb->dims[0].size, a.cols = tb->dims[1].size;
    a.rows = a.inner ? plan_numel(p, s->args[0], NULL) / a.inner : 0;
    return launch1d(m, m->prep_matmul, a.n, &a);
  default:
    if (op_info[s->op].cls != OPC_UNARY && op_info[s->op].cls != OPC_BINARY)
      break;
    a.op = s->op;
    a.ix = prep_index(p, s);
    return launch1d(m, m->prep_ewise, a.n, &a);
  }
  return rt_error(FFN_ERR_UNSUPPORTED, "computing %s at load time is not supported", op_info[s->op].name);
}

/* The scales of pre-quantized weight s->args[0] as its checkpoint gave them (ffn_model.prequant,
 * kept on the host when the weight was bound), uploaded as f32 [rows, 1]. */
static ffn_status prep_stored_scales(ffn_model *m, const PrepStep *s, CUdeviceptr out) {
  const Plan *p = m->prog->plan;
  const PlanTensor *w = &p->tensors[s->args[0]];
  const PrequantWeight *pw = &m->prequant[s->args[0]];
  int64_t rows = plan_numel(p, s->out, NULL);
  if (w->kind != PT_WEIGHT || w->stored == DT_NONE || w->dtype != DT_U8)
    return rt_error(FFN_ERR_IO, "launch plan: load-time f8_scales reads tensor %d, not a pre-quantized weight",
                    s->args[0]);
  if (!pw->scale || pw->rows != rows)
    return rt_error(FFN_ERR_TENSOR, "weight '%s' is pre-quantized (%s codes, scale '%s'): bind it from its checkpoint "
                    "with ffn_model_bind_weights_file", w->name, dtype_name(w->stored), w->scale);
  if (rows)
    CU_CHECK(m->cu, m->cu->cuMemcpyHtoD(out, pw->scale, sizeof(float) * (size_t)rows));
  return FFN_OK;
}

static ffn_status prep_one(ffn_model *m, const PrepStep *s) {
  CUdeviceptr out;
  ffn_status st = exec_check_prep(m->prog->plan, s);
  if (st == FFN_OK)
    st = prep_output(m, s, &out);
  if (st != FFN_OK)
    return st;
  if (s->op == OP_SLICE || s->op == OP_CONCAT)
    return prep_copy_blocks(m, s, out);
  if (s->op == OP_F8_SCALES)
    return prep_stored_scales(m, s, out);
  return prep_kernel(m, s, out);
}

ffn_status exec_prepare(ffn_model *m) {
  const Plan *p = m->prog->plan;
  for (int i = 0; i < p->nprep; i++) {
    ffn_status s = prep_one(m, &p->prep[i]);
    if (s != FFN_OK)
      return s;
  }
  CU_CHECK(m->cu, m->cu->cuStreamSynchronize(NULL)); /* the steps ran on the default stream */
  /* what only the load-time steps needed goes back (weights the caller owns stay theirs) */
  for (int t = 0; t < p->ntensors; t++) {
    const PlanTensor *pt = &p->tensors[t];
    if ((pt->kind == PT_WEIGHT || pt->kind == PT_DERIVED) && !pt->keep && m->owned[t] && m->tensor[t]) {
      CU_CHECK(m->cu, m->cu->cuMemFree(m->tensor[t]));
      m->tensor[t] = 0;
      m->owned[t] = false;
      m->consumed[t] = pt->kind == PT_WEIGHT;
    }
  }
  return FFN_OK;
}

/* ---- run time ---- */

static ffn_status check_tensor(const Plan *p, int t, const DLTensor *d, const char *what, int64_t *dims, bool bind) {
  const PlanTensor *pt = &p->tensors[t];
  if (!d)
    return rt_error(FFN_ERR_INVALID_ARGUMENT, "%s '%s': no tensor", what, pt->name);
  if (d->device.device_type != kDLCUDA && d->device.device_type != kDLCUDAManaged)
    return rt_error(FFN_ERR_INVALID_ARGUMENT, "%s '%s': must be in device memory (kDLCUDA), got device type %d", what,
                    pt->name, (int)d->device.device_type);
  if (dtype_from_dl(d->dtype, pt->dtype) != pt->dtype)
    return rt_error(FFN_ERR_TENSOR, "%s '%s': expected %s, got DLPack code %d bits %d lanes %d", what, pt->name,
                    dtype_name(pt->dtype), d->dtype.code, d->dtype.bits, d->dtype.lanes);
  int i;
  DimsResult r = dims_bind(pt->dims, pt->rank, d->ndim, d->shape, dims, bind, &i);
  if (r != DIMS_OK) {
    char why[600];
    dims_mismatch_str(r, i, pt->dims, pt->rank, p->dim_names, d->ndim, d->shape, dims, why, sizeof why);
    return rt_error(FFN_ERR_TENSOR, "%s '%s': %s", what, pt->name, why);
  }
  int64_t expect = 1;
  for (i = pt->rank - 1; i >= 0; i--) {
    if (d->strides && d->shape[i] > 1 && d->strides[i] != expect)
      return rt_error(FFN_ERR_TENSOR, "%s '%s': must be contiguous row-major", what, pt->name);
    expect *= d->shape[i];
  }
  if (expect == 0) /* no elements: empty tensors often have no pointer at all */
    return FFN_OK;
  if (!d->data)
    return rt_error(FFN_ERR_INVALID_ARGUMENT, "%s '%s': no data pointer", what, pt->name);
  if (((uintptr_t)d->data + d->byte_offset) % 16)
    return rt_error(FFN_ERR_INVALID_ARGUMENT, "%s '%s': data must be 16-byte aligned", what, pt->name);
  return FFN_OK;
}

static size_t counters_bytes(size_t n) { return (n * 4 + 255) / 256 * 256; }

/* Takes a workspace of m's pool for a call on `stream` with `tiles` split-K counters and `rest`
 * bytes after them: a free one whose last use has finished, or one last used on this stream (the
 * stream is made to wait for that use, so a recycled stream handle is safe too), else a new one.
 * The pool may be shared with other models (ffn_model_share_workspace): their calls one after
 * the other on a stream take turns in one workspace; calls in flight at once on different
 * streams take one each.
 *
 * A call being captured into a CUDA graph keeps its workspace for good (pinned): the graph's
 * replays use it whenever they run, so nothing else may. It takes the one a warm-up call on the
 * same stream used, when large enough, else a new one (allocating during capture needs
 * CU_STREAM_CAPTURE_MODE_RELAXED); its counters are zeroed by a memset node in the graph. */
/* A call whose workspace does not fit: the sizes, so the caller can split the call. Nothing was
 * launched and the model's state is as before, so it stays usable for smaller calls. */
static ffn_status workspace_oom(ffn_model *m, size_t need) {
  size_t free_b = 0, total = 0;
  m->cu->cuMemGetInfo(&free_b, &total);
  const double gib = 1024.0 * 1024.0 * 1024.0;
  return rt_error(FFN_ERR_OUT_OF_MEMORY,
                  "out of device memory: this call needs %.2f GiB of workspace, the device has %.2f GiB free of "
                  "%.2f GiB; split the call into fewer tokens",
                  (double)need / gib, (double)free_b / gib, (double)total / gib);
}

/* A workspace of m's pool that the call may take (see acquire), or NULL; under the pool's lock. */
static Workspace *find_free(const ffn_model *m, CUstream stream, bool capturing, size_t tiles, size_t rest) {
  const WorkspacePool *pool = m->pool;
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < pool->nws; i++) {
      Workspace *c = pool->ws[i];
      if (c->busy)
        continue;
      if (capturing ? pass == 1 && c->last_stream == stream && c->ncounters >= tiles &&
                          c->size >= counters_bytes(c->ncounters) + rest
                    : pass ? c->last_stream == stream : m->cu->cuEventQuery(c->done) == CUDA_SUCCESS)
        return c;
    }
  return NULL;
}

/* A new workspace without memory, added to m's pool; under the pool's lock. */
static ffn_status add_workspace(ffn_model *m, Workspace **out) {
  WorkspacePool *pool = m->pool;
  if (pool->nws == pool->capws) {
    int cap = pool->capws ? pool->capws * 2 : 4;
    Workspace **ws = realloc(pool->ws, sizeof(Workspace *) * (size_t)cap);
    if (!ws)
      return rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
    pool->ws = ws;
    pool->capws = cap;
  }
  Workspace *w = calloc(1, sizeof *w);
  if (!w)
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
  CUresult r = m->cu->cuEventCreate(&w->done, CU_EVENT_DISABLE_TIMING);
  if (r != CUDA_SUCCESS) {
    free(w);
    return cu_fail(m->cu, r, "cu->cuEventCreate()");
  }
  pool->ws[pool->nws++] = w;
  *out = w;
  return FFN_OK;
}

/* w, taken by a call of m, reallocated for ncounters split-K counters and `rest` bytes. */
static ffn_status grow_workspace(ffn_model *m, Workspace *w, size_t ncounters, size_t rest) {
  const bool regrow = w->base != 0 && w->sized_by == m;
  CUresult r;
  /* the old allocation may still be read by work queued earlier (never the case for a
   * capture, which only takes a workspace that is large enough or a new one) */
  if (w->base) {
    r = m->cu->cuEventSynchronize(w->done);
    if (r == CUDA_SUCCESS)
      r = m->cu->cuMemFree(w->base);
    w->base = 0;
    w->size = w->ncounters = 0;
    if (r != CUDA_SUCCESS)
      return cu_fail(m->cu, r, "cu->cuMemFree()");
  }
  /* exactly what this call needs the first time (a fixed-shape loop, training or a fixed batch,
   * keeps no unused headroom); a quarter more when a later call of the model that sized it
   * outgrows it (room for more tokens next time, so that growing token counts reallocate a few
   * times, not at every call). In a shared pool (ffn_model_share_workspace) a call of another
   * model outgrowing it is a larger need, not a growing one: the backward graph's call after the
   * training forward's gets exactly its size, which then serves both at every step. */
  size_t need = counters_bytes(ncounters) + rest, size = need + (regrow ? rest / 4 : 0);
  if ((r = m->cu->cuMemAlloc(&w->base, size)) == CUDA_ERROR_OUT_OF_MEMORY && size > need)
    r = m->cu->cuMemAlloc(&w->base, size = need); /* without the headroom, it may still fit */
  if (r == CUDA_ERROR_OUT_OF_MEMORY)
    return workspace_oom(m, size);
  if (r != CUDA_SUCCESS)
    return cu_fail(m->cu, r, "cu->cuMemAlloc()");
  w->size = size;
  w->ncounters = ncounters;
  w->sized_by = m;
  return FFN_OK;
}

static ffn_status acquire(ffn_model *m, CUstream stream, size_t tiles, size_t rest, Workspace **out) {
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult r = m->cu->cuStreamIsCapturing(stream, &capture);
  if (r != CUDA_SUCCESS)
    return cu_fail(m->cu, r, "cu->cuStreamIsCapturing()");
  bool capturing = capture != CU_STREAM_CAPTURE_STATUS_NONE;
  WorkspacePool *pool = m->pool;
  pthread_mutex_lock(&pool->lock);
  Workspace *w = find_free(m, stream, capturing, tiles, rest);
  ffn_status st = w ? FFN_OK : add_workspace(m, &w);
  if (st == FFN_OK) {
    w->busy = true;
    w->pinned = capturing;
  }
  pthread_mutex_unlock(&pool->lock);
  if (st != FFN_OK)
    return st;
  if (!capturing && m->cu->cuEventQuery(w->done) != CUDA_SUCCESS &&
      (r = m->cu->cuStreamWaitEvent(stream, w->done, 0)) != CUDA_SUCCESS)
    st = cu_fail(m->cu, r, "cu->cuStreamWaitEvent()");
  size_t ncounters = tiles > w->ncounters ? tiles : w->ncounters;
  bool grow = w->size < counters_bytes(ncounters) + rest || ncounters > w->ncounters;
  if (st == FFN_OK && grow)
    st = grow_workspace(m, w, ncounters, rest);
  if (st == FFN_OK && (grow || capturing) &&
      (r = m->cu->cuMemsetD8Async(w->base, 0, counters_bytes(w->ncounters), stream)) != CUDA_SUCCESS)
    st = cu_fail(m->cu, r, "cu->cuMemsetD8Async()");
  if (st != FFN_OK) {
    pthread_mutex_lock(&pool->lock);
    w->busy = false;
    w->pinned = false;
    pthread_mutex_unlock(&pool->lock);
    return st;
  }
  *out = w;
  return FFN_OK;
}

static void release(WorkspacePool *pool, Workspace *w, CUstream stream, bool recorded) {
  pthread_mutex_lock(&pool->lock);
  if (recorded)
    w->last_stream = stream;
  w->busy = w->pinned;
  pthread_mutex_unlock(&pool->lock);
}

/* w's device memory, events and side stream, with its context current */
static void free_workspace_device(const CuApi *cu, Workspace *w) {
  if (w->done) /* a call still in flight on some stream reads it until then */
    cu->cuEventSynchronize(w->done);
  if (w->base)
    cu->cuMemFree(w->base);
  if (w->done)
    cu->cuEventDestroy(w->done);
  if (w->side) /* its work is done: the call joined it before recording done */
    cu->cuStreamDestroy(w->side);
  if (w->computed)
    cu->cuEventDestroy(w->computed);
  for (int b = 0; b < TP_MAX_BLOCKS; b++)
    if (w->reduced[b])
      cu->cuEventDestroy(w->reduced[b]);
}

void exec_free_workspaces(WorkspacePool *p) {
  const CuApi *cu = p->cu;
  /* a context that cannot be made current is gone, and its memory with it */
  bool pushed = p->nws && cu->cuCtxPushCurrent(p->ctx) == CUDA_SUCCESS;
  for (int i = 0; i < p->nws; i++) {
    if (pushed)
      free_workspace_device(cu, p->ws[i]);
    free(p->ws[i]);
  }
  if (pushed) {
    CUcontext popped;
    cu->cuCtxPopCurrent(&popped);
  }
  free(p->ws);
  p->ws = NULL;
  p->nws = p->capws = 0;
}

WorkspacePool *pool_create(const CuApi *cu, CUcontext ctx) {
  WorkspacePool *p = calloc(1, sizeof *p);
  if (!p) {
    rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
    return NULL;
  }
  pthread_mutex_init(&p->lock, NULL);
  p->refs = 1;
  p->cu = cu;
  p->ctx = ctx;
  return p;
}

void pool_retain(WorkspacePool *p) {
  pthread_mutex_lock(&p->lock);
  p->refs++;
  pthread_mutex_unlock(&p->lock);
}

void pool_release(WorkspacePool *p) {
  if (!p)
    return;
  pthread_mutex_lock(&p->lock);
  bool last = --p->refs == 0;
  pthread_mutex_unlock(&p->lock);
  if (!last)
    return;
  exec_free_workspaces(p);
  pthread_mutex_destroy(&p->lock);
  free(p);
}

/* Whether variant v of kernel k is the wgmma weight gradient (kernels/grad_sm90.cuh): its grid,
 * split-K and workspace follow its tiles (v->cfg, ffn_wgrad_config) and the tokens (rows). */
static bool wgrad_wgmma(const PlanKernel *k, const KernelVariant *v) {
  return k->op == OP_MATMUL_AT && v->cfg.kind == FFN_GEMM_SM90;
}

LaunchChoice exec_heuristic(const PlanKernel *k, int64_t rows, int sms, int dram_gbs) {
  LaunchChoice c = {&k->variants[k->nvariants - 1], 1, rows};
  for (int i = 0; i < k->nvariants; i++)
    if (k->variants[i].max_m == 0 || rows <= k->variants[i].max_m) {
      c.v = &k->variants[i];
      break;
    }
  /* a ping-pong persistent tile where the cooperative 128 x 256 is faster (ffn_gemm_prefer_wide) */
  for (int i = 0; c.v->cfg.kind == FFN_GEMM_SM90P && c.v->cfg.wm == c.v->cfg.bm &&
                  ffn_gemm_prefer_wide((int)rows, dram_gbs, c.v->b_kn) && i < k->nvariants; i++)
    if (k->variants[i].cfg.kind == FFN_GEMM_SM90P && k->variants[i].cfg.bn == 256 &&
        k->variants[i].b_kn == c.v->b_kn && k->variants[i].mx == c.v->mx && k->variants[i].max_m == 0) {
      c.v = &k->variants[i];
      break;
    }
  /* 257-512 rows, many tiles: ping-pong (of the same kind: mixed input or not) */
  for (int i = 0; k->kind == KK_GEMM && i < k->nvariants; i++)
    if (!k->variants[i].b_kn && k->variants[i].mx == c.v->mx &&
        ffn_gemm_prefer_persistent((int)rows, (int)k->n, k->streams, &k->variants[i].cfg, sms)) {
      c.v = &k->variants[i];
      break;
    }
  if (k->kind == KK_GEMM && k->splittable)
    c.splits = ffn_gemm_pick_splits((int)rows, (int)k->n, k->streams, (int)k->k, &c.v->cfg, sms);
  if (wgrad_wgmma(k, c.v))
    c.splits = ffn_wgrad_splits(rows, (int)k->k, (int)k->n, sms);
  return c;
}

/* The variant of k that FFNC_GEMM_VARIANT names: a configuration, or a comma-separated list of
 * them (the first that k has: "tmac_128x128x64,tmac_128x224x64" forces the clustered kernels of
 * every width); NULL where k has none of them. */
/* FFNC_GEMM_VARIANT: a comma-separated list; each GEMM takes the first entry it has, an entry
 * being a configuration's name or a family's (the name before its last '_', e.g. wqd4v3 for
 * wqd4v3_8 and wqd4v3_16: the family's first variant whose max_m covers the rows). */
static const KernelVariant *forced_variant(const char *names, const PlanKernel *k, int64_t rows) {
  for (const char *p = names; *p;) {
    size_t len = strcspn(p, ",");
    for (int i = 0; i < k->nvariants; i++)
      if (strlen(k->variants[i].cfg.name) == len && strncmp(k->variants[i].cfg.name, p, len) == 0)
        return &k->variants[i];
    for (int i = 0; i < k->nvariants; i++) {
      const KernelVariant *v = &k->variants[i];
      const char *last = strrchr(v->cfg.name, '_');
      if (last && (size_t)(last - v->cfg.name) == len && strncmp(v->cfg.name, p, len) == 0 &&
          (v->max_m == 0 || rows <= v->max_m))
        return v;
    }
    p += len + (p[len] == ',');
  }
  return NULL;
}

LaunchChoice exec_choose(const ffn_model *m, const PlanKernel *k, int64_t rows) {
  LaunchChoice c = exec_heuristic(k, rows, m->sms, m->dram_gbs);
  if (k->kind != KK_GEMM) {
    /* a weight gradient on sm_90: FFNC_WGRAD=mma takes its mma.sync variant (matmul_at_tc),
     * FFNC_GEMM_SPLITS forces its split (with tokens: without, nothing is allocated for one) */
    if (wgrad_wgmma(k, c.v) && m->wgrad_mma) {
      for (int i = 0; i < k->nvariants; i++)
        if (!wgrad_wgmma(k, &k->variants[i]))
          c = (LaunchChoice){&k->variants[i], 1, rows};
    } else if (wgrad_wgmma(k, c.v) && m->gemm_splits && rows > 0)
      c.splits = m->gemm_splits;
    return c;
  }
  const TunedKernel *t = m->tuned ? &m->tuned[k - m->prog->plan->kernels] : NULL;
  int splits = 0; /* 0: the heuristic's for the variant launched */
  /* the bucket at or below; its choice holds up to twice its rows, or as far as its
   * configuration's own regime reaches (a 16-row tile measured at 16 rows is no choice for
   * 100): beyond, the rule (the next bucket is where the next measurement starts) */
  for (int i = t ? t->n - 1 : -1; i >= 0; i--)
    if (rows >= t->rows[i]) {
      const KernelVariant *v = &k->variants[t->variant[i]];
      if (rows <= 2 * t->rows[i] || v->max_m == 0 || rows <= v->max_m) {
        c.v = v;
        splits = t->splits[i];
      }
      break;
    }
  const KernelVariant *forced = forced_variant(m->gemm_variant, k, rows);
  if (forced) {
    c.v = forced;
    splits = 0; /* a tuned split was measured with another configuration */
  }
  if (c.v->mx && m->no_mx) /* FFNC_WQ_MIX=0: the next variant for these rows (dq, or as below) */
    for (const KernelVariant *v = c.v + 1; v < k->variants + k->nvariants; v++)
      if (!v->mx && (v->max_m == 0 || rows <= v->max_m)) {
        c.v = v;
        splits = 0;
        break;
      }
  if (c.v->dq && m->no_dq) { /* FFNC_WQ_DEQUANT=0: the quantized kernel of the most rows */
    for (int i = 0; i < k->nvariants; i++)
      if (!k->variants[i].dq && !k->variants[i].mx && (c.v->dq || k->variants[i].max_m > c.v->max_m))
        c.v = &k->variants[i];
    splits = 0;
  }
  if (k->splittable)
    c.splits = m->gemm_splits ? m->gemm_splits
               : splits       ? splits
                              : ffn_gemm_pick_splits((int)rows, (int)k->n, k->streams, (int)k->k, &c.v->cfg, m->sms);
  return c;
}

/* Every tensor of the call within size_limits.h once the dims are bound, so that plan_numel and
 * the sizes below cannot overflow (each dim alone is checked by dims_bind). */
static ffn_status check_call_limits(const Plan *p, const int64_t *dims) {
  for (int t = 0; t < p->ntensors; t++) {
    const PlanTensor *pt = &p->tensors[t];
    int64_t shape[FFN_MAX_RANK], numel;
    for (int d = 0; d < pt->rank; d++)
      shape[d] = pt->dims[d].sym >= 0 ? dims[pt->dims[d].sym] : pt->dims[d].size;
    ShapeLimit why = shape_check_limits(pt->rank, shape, &numel);
    if (why != SHAPE_OK)
      return rt_error(FFN_ERR_TENSOR, "tensor %d (%s) of this call is too large: %s", t,
                      pt->name ? pt->name : "an intermediate value", shape_limit_words(why));
  }
  return FFN_OK;
}

/* The call's tensors against the plan; binds run->dims from the inputs. */
static ffn_status check_call(const Plan *p, const DLTensor *inputs, int ninputs, const DLTensor *outputs, int noutputs,
                             ExecRun *run) {
  if (!run->m->prepared)
    return rt_error(FFN_ERR_INVALID_ARGUMENT, "ffn_model_run: call ffn_model_prepare first");
  if (ninputs != p->ninputs || noutputs != p->noutputs)
    return rt_error(FFN_ERR_INVALID_ARGUMENT, "ffn_model_run: the model has %d inputs and %d outputs, got %d and %d",
                    p->ninputs, p->noutputs, ninputs, noutputs);
  if (p->tp > 1 && !run->m->comm)
    return rt_error(FFN_ERR_INVALID_ARGUMENT, "ffn_model_run: the program is rank %d's share over %d ranks (tensor "
                    "parallel): give the model that rank's NCCL communicator with ffn_model_set_communicator first",
                    p->tp_rank, p->tp);
  if (p->ndims > 64)
    return rt_error(FFN_ERR_INVALID_ARGUMENT, "too many dynamic dims");
  for (int i = 0; i < p->ndims; i++)
    run->dims[i] = -1;
  ffn_status st;
  for (int t = 0; t < p->ntensors; t++)
    if (p->tensors[t].kind == PT_INPUT &&
        (st = check_tensor(p, t, &inputs[p->tensors[t].index], "input", run->dims, true)))
      return st;
  for (int i = 0; i < p->ndims; i++)
    if (run->dims[i] < 0)
      return rt_error(FFN_ERR_TENSOR, "dim %s is not bound by any input", p->dim_names[i]);
  for (int t = 0; t < p->ntensors; t++)
    if (p->tensors[t].kind == PT_OUTPUT &&
        (st = check_tensor(p, t, &outputs[p->tensors[t].index], "output", run->dims, false)))
      return st;
  return check_call_limits(p, run->dims);
}

/* What the GEMMs (and wgmma weight gradients) of this call need besides the planned buffers, for
 * their chosen variants. */
typedef struct {
  size_t ws_floats; /* split-K partials (the largest of any launch: launches are stream-ordered) */
  size_t tiles;     /* split-K tile counters */
  size_t stat_rows; /* rows of A's statistics from ffn_row_stats */
  size_t dq_bytes;  /* the largest bf16 copy of a `dq` launch's weights (KernelVariant.dq) */
} GemmNeeds;

/* Picks each launch's variant and split for its row count (run->choice). */
static GemmNeeds choose_launches(ExecRun *run) {
  const Plan *p = run->m->prog->plan;
  GemmNeeds g = {0};
  for (int s = 0; s < p->nsteps; s++) {
    const PlanStep *ps = &p->steps[s];
    if (ps->kind != STEP_LAUNCH)
      continue;
    int64_t rows = 1;
    for (int d = 0; d < ps->nrowdims; d++)
      rows *= ps->rowdims[d].sym >= 0 ? run->dims[ps->rowdims[d].sym] : ps->rowdims[d].size;
    const PlanKernel *k = &p->kernels[ps->kernel];
    LaunchChoice *c = &run->choice[s];
    *c = exec_choose(run->m, k, rows);
    if (rows <= 0 || (k->kind != KK_GEMM && !wgrad_wgmma(k, c->v)))
      continue;
    /* a weight gradient's tiles cover its output [k, n], not the rows (ffn_wgrad_config) */
    bool wg = wgrad_wgmma(k, c->v);
    int tile_rows = wg ? (int)k->k : (int)rows, streams = wg ? 1 : k->streams;
    size_t f = ffn_gemm_ws_floats(&c->v->cfg, tile_rows, (int)k->n, streams, c->splits);
    size_t t = (size_t)ffn_gemm_num_tiles(&c->v->cfg, tile_rows, (int)k->n, streams);
    g.ws_floats = f > g.ws_floats ? f : g.ws_floats;
    g.tiles = t > g.tiles ? t : g.tiles;
    if (c->v->ext_stats && (size_t)rows > g.stat_rows)
      g.stat_rows = (size_t)rows;
    size_t dq = c->v->dq ? exec_dq_bytes(k) : 0;
    g.dq_bytes = dq > g.dq_bytes ? dq : g.dq_bytes;
  }
  g.ws_floats = (g.ws_floats + 63) / 64 * 64; /* the row statistics follow the split-K partials */
  g.stat_rows = (g.stat_rows + 31) / 32 * 32; /* and the dequantized weights them, 256-byte aligned */
  return g;
}

/* Every tensor's device pointer for this call: the caller's inputs and outputs, the model's
 * weights, and the scratch buffers at their planned offsets in the workspace (after the
 * counters), followed by the split-K partials, the row statistics and the dequantized weights. */
static void resolve_pointers(ExecRun *run, const DLTensor *inputs, const DLTensor *outputs, const bool *in_ws,
                             const size_t *offsets, const int *input_of, size_t scratch, const GemmNeeds *g) {
  const Plan *p = run->m->prog->plan;
  Workspace *w = run->w;
  size_t base = w ? counters_bytes(w->ncounters) : 0;
  for (int t = 0; t < p->ntensors; t++) {
    const PlanTensor *pt = &p->tensors[t];
    const DLTensor *in = input_of && input_of[t] >= 0 ? &inputs[p->tensors[input_of[t]].index] : NULL;
    switch (pt->kind) {
    case PT_INPUT: run->ptr[t] = (CUdeviceptr)inputs[pt->index].data + inputs[pt->index].byte_offset; break;
    case PT_OUTPUT:
      run->ptr[t] = in_ws && in_ws[t] ? (w ? w->base + base + offsets[t] : 0)
                                      : (CUdeviceptr)outputs[pt->index].data + outputs[pt->index].byte_offset;
      break;
    case PT_SCRATCH:
      run->ptr[t] = in ? (CUdeviceptr)in->data + in->byte_offset : w ? w->base + base + offsets[t] : 0;
      break;
    default: run->ptr[t] = run->m->tensor[t]; break;
    }
  }
  run->ws = w ? w->base + base + scratch : 0;
  run->rowstats = w ? run->ws + g->ws_floats * 4 : 0;
  run->dq = w && g->dq_bytes ? run->rowstats + g->stat_rows * 8 : 0;
  run->counters = w ? w->base : 0;
}

ffn_status exec_begin(ffn_model *m, CUstream stream, const DLTensor *inputs, int ninputs, const DLTensor *outputs,
                      int noutputs, ExecRun *run) {
  return exec_begin_ex(m, stream, inputs, ninputs, outputs, noutputs, NULL, false, run);
}

ffn_status exec_begin_ex(ffn_model *m, CUstream stream, const DLTensor *inputs, int ninputs, const DLTensor *outputs,
                         int noutputs, const bool *in_workspace, bool write_inputs, ExecRun *run) {
  const Plan *p = m->prog->plan;
  *run = (ExecRun){.m = m, .stream = stream};
  ffn_status st = check_call(p, inputs, ninputs, outputs, noutputs, run);
  if (st != FFN_OK)
    return st;
  size_t *offsets = malloc(sizeof(size_t) * (size_t)(p->ntensors + 1));
  int *input_of = write_inputs ? malloc(sizeof(int) * (size_t)(p->ntensors + 1)) : NULL;
  run->choice = malloc(sizeof(LaunchChoice) * (size_t)(p->nsteps + 1));
  run->ptr = calloc((size_t)p->ntensors + 1, sizeof(CUdeviceptr));
  if (!offsets || (write_inputs && !input_of) || !run->choice || !run->ptr) {
    free(offsets), free(input_of);
    exec_end(run, FFN_OK);
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  size_t planned = memplan_assign_call(p, run->dims, in_workspace, offsets, input_of);
  if (planned == SIZE_MAX) {
    free(offsets), free(input_of);
    exec_end(run, FFN_OK);
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  size_t scratch = (planned + 255) / 256 * 256;
  GemmNeeds g = choose_launches(run);
  size_t rest = scratch + g.ws_floats * 4 + g.stat_rows * 8 + g.dq_bytes;
  CUresult r = m->cu->cuCtxPushCurrent(m->ctx);
  if (r != CUDA_SUCCESS)
    st = cu_fail(m->cu, r, "cu->cuCtxPushCurrent()");
  run->pushed = r == CUDA_SUCCESS;
  if (st == FFN_OK && (rest || g.tiles))
    st = acquire(m, stream, g.tiles, rest, &run->w);
  if (st == FFN_ERR_OUT_OF_MEMORY && g.dq_bytes) { /* say what the quantized products' part is */
    char why[768];
    snprintf(why, sizeof why, "%s", ffn_last_error());
    st = rt_error(st, "%s (%.2f GiB of it a weight-only quantized product's weights as bf16, for a call of this many "
                  "rows; FFNC_WQ_DEQUANT=0 runs without them, slower)", why, (double)g.dq_bytes / (1 << 30));
  }
  if (st == FFN_OK)
    resolve_pointers(run, inputs, outputs, in_workspace, offsets, input_of, scratch, &g);
  free(offsets), free(input_of);
  if (st != FFN_OK)
    exec_end(run, st);
  return st;
}

/* dst = the sum of src over the ranks: ncclAllReduce on `stream`, in place when the
 * plan gives src == dst. Every rank runs the same steps with the same dims, so a call with no
 * elements skips it on all of them. */
ffn_status exec_allreduce(ExecRun *run, int step, CUstream stream) {
  const ffn_model *m = run->m;
  const Plan *p = m->prog->plan;
  const PlanStep *ps = &p->steps[step];
  const PlanTensor *src = &p->tensors[ps->src], *dst = &p->tensors[ps->dst];
  int dtype = nccl_dtype(src->dtype);
  if (dtype < 0 || dst->dtype != src->dtype || ps->ranks != p->tp)
    return rt_error(FFN_ERR_IO, "launch plan: an all-reduce of %s into %s over %d ranks in a program of %d",
                    dtype_name(src->dtype), dtype_name(dst->dtype), ps->ranks, p->tp);
  char why[1024];
  const NcclApi *nccl = nccl_api(why, sizeof why);
  if (!nccl)
    return rt_error(FFN_ERR_UNSUPPORTED, "%s", why);
  size_t count = (size_t)plan_numel(p, ps->src, run->dims);
  if (!count)
    return FFN_OK;
  /* a collective that failed asynchronously (a rank died, a timeout) is reported here rather
   * than waited for */
  int async = NCCL_SUCCESS;
  NCCL_CHECK(nccl, nccl->CommGetAsyncError(m->comm, &async));
  if (async != NCCL_SUCCESS && async != NCCL_IN_PROGRESS)
    return rt_error(FFN_ERR_CUDA, "an earlier all-reduce failed: %s (ncclCommGetAsyncError: ncclResult_t %d)",
                    nccl->GetErrorString(async), async);
  NCCL_CHECK(nccl, nccl->AllReduce((const void *)run->ptr[ps->src], (void *)run->ptr[ps->dst], count, dtype, NCCL_SUM,
                                   m->comm, stream));
  return FFN_OK;
}

/* A tensor map over a row-major [rows, cols] matrix of 16-bit units at ptr (fp8 codes in pairs),
 * loaded in boxes of box0 columns by box1 rows with the 128-byte swizzle the wgmma descriptors
 * expect, zeros outside; `what` names the operand in the error. */
static ffn_status encode_map(const ffn_model *m, TmaMap *map, CUdeviceptr ptr, long long cols, long long rows,
                             unsigned box0, unsigned box1, const char *what) {
  _Static_assert(sizeof(TmaMap) == sizeof(CUtensorMap) && _Alignof(TmaMap) == _Alignof(CUtensorMap),
                 "TmaMap is a CUtensorMap");
  cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows}, stride[1] = {(cuuint64_t)cols * 2};
  cuuint32_t boxd[2] = {box0, box1}, estride[2] = {1, 1};
  CUresult r = m->cu->cuTensorMapEncodeTiled((CUtensorMap *)map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, (void *)ptr, dims,
                                             stride, boxd, estride, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                             CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r == CUDA_SUCCESS)
    return FFN_OK;
  const char *name = NULL;
  m->cu->cuGetErrorName(r, &name);
  return rt_error(FFN_ERR_CUDA,
                  "cuTensorMapEncodeTiled failed: %s (%s: %lld x %lld 16-bit units at %#llx; TMA needs a 16-byte "
                  "aligned address)",
                  name ? name : "?", what, rows, cols, (unsigned long long)ptr);
}

/* The tensor map of a TMA GEMM's operand (b: 0 for A, 1 for B): a row-major [rows, K] matrix in
 * the configuration's boxes; with kn, B as a row-major [K, rows] matrix (the variant's b_kn:
 * gemm_sm90p.cuh, B_KN), in boxes of 64 columns (128 bytes) by a k-tile, BN / 64 per stage. */
static ffn_status tma_map(const ffn_model *m, const PlanKernel *k, const ffn_gemm_config *c, int b, bool kn,
                          CUdeviceptr ptr, long long rows, TmaMap *map) {
  char what[96];
  snprintf(what, sizeof what, "operand %c of a matrix product, %s tiles", b ? 'B' : 'A', c->name);
  if (b && kn)
    return encode_map(m, map, ptr, rows, k->k, 64, (unsigned)c->bk, what);
  unsigned box[2];
  ffn_gemm_tma_box(c, b, box);
  return encode_map(m, map, ptr, k->k, rows, box[0], box[1], what);
}

/* The tensor maps of a wgmma weight gradient's operands (kernels/grad_sm90.cuh: wgrad_produce):
 * a [rows, K] and b [rows, N] (rows = tokens), boxes of 64 columns by a stage of tokens. No tokens:
 * no maps (no stage is loaded). */
static ffn_status wgrad_maps(const ffn_model *m, const PlanKernel *k, const ffn_gemm_config *c, const CUdeviceptr ptr[2],
                             long long rows, TmaMaps *maps) {
  memset(maps, 0, sizeof *maps);
  ffn_status st = FFN_OK;
  if (rows > 0)
    st = encode_map(m, &maps->a, ptr[0], k->k, rows, 64, (unsigned)c->bk, "operand a of a weight gradient");
  if (rows > 0 && st == FFN_OK)
    st = encode_map(m, &maps->b, ptr[1], k->n, rows, 64, (unsigned)c->bk, "operand b of a weight gradient");
  return st;
}

/* The most waves of its grid a GEMM's work may take for the next GEMM to start in its tail
 * (exec_step): above the 1024-token products of the suite (4-14), below the 8192-token ones
 * (30-110). */
enum { PDL_WAVES = 16 };

/* cuLaunchKernel, or with programmatic stream serialization when `chain` (the kernel's start
 * overlaps the tail of the plan kernel before it: abi.cuh, FFN_PDL_MIN_ARCH) */
static CUresult launch(const ffn_model *m, CUfunction f, const unsigned grid[3], unsigned threads, unsigned smem,
                       CUstream stream, void **params, bool chain) {
  if (!chain)
    return m->cu->cuLaunchKernel(f, grid[0], grid[1], grid[2], threads, 1, 1, smem, stream, params, NULL);
  CUlaunchAttribute attr = {.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION};
  attr.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig cfg = {.gridDimX = grid[0], .gridDimY = grid[1], .gridDimZ = grid[2], .blockDimX = threads,
                        .blockDimY = 1, .blockDimZ = 1, .sharedMemBytes = smem, .hStream = stream,
                        .attrs = &attr, .numAttrs = 1};
  return m->cu->cuLaunchKernelEx(&cfg, f, params, NULL);
}

/* A's row statistics, once, for a GEMM's epilogue that reads them (KernelVariant.ext_stats). */
static ffn_status launch_row_stats(ExecRun *run, const PlanStep *ps, const PlanKernel *k, long long M) {
  ffn_model *m = run->m;
  CUdeviceptr a = run->ptr[ps->args[0]], out = run->rowstats;
  int is_f16 = m->prog->plan->tensors[ps->args[0]].dtype == DT_F16, K = (int)k->k;
  long long blocks = (M + 7) / 8;
  void *sp[] = {&a, &is_f16, &M, &K, &out};
  CUresult r = m->cu->cuLaunchKernel(m->row_stats, (unsigned)(blocks < 65535 ? blocks : 65535), 1, 1, 256, 1, 1, 0,
                                     run->stream, sp, NULL);
  return r == CUDA_SUCCESS ? FFN_OK : cu_fail(m->cu, r, "cu->cuLaunchKernel(ffn_row_stats)");
}

/* The bytes of kernel k's weights as bf16 [S*N, K], what a `dq` variant reads (KernelVariant.dq). */
size_t exec_dq_bytes(const PlanKernel *k) { return ((size_t)k->streams * (size_t)k->n * (size_t)k->k * 2 + 255) / 256 * 256; }

/* A `dq` variant's weights: the codes (slot 1) and scales (slot 2) as bf16 into run->dq
 * (kernels/runtime.cuh: ffn_wq_dequant, a warp per tile of codes, grid-strided). */
static ffn_status launch_dequant(ExecRun *run, const PlanStep *ps, const PlanKernel *k) {
  ffn_model *m = run->m;
  CUdeviceptr codes = run->ptr[ps->args[1]], scales = run->ptr[ps->args[2]], out = run->dq;
  int bits = k->wq_bits, tile_k = bits == 8 ? 32 : 64; /* kernels/quant.cuh: WQ_TILE_K */
  long long R = (long long)k->streams * k->n, K = k->k, group = k->wq_group;
  long long blocks = ((R + 127) / 128 * 128 / 16 * ((K + tile_k - 1) / tile_k) + 7) / 8, most = (long long)m->sms * 8;
  void *sp[] = {&codes, &scales, &out, &R, &K, &bits, &group};
  CUresult r = m->cu->cuLaunchKernel(m->wq_dequant, (unsigned)(blocks < 1 ? 1 : blocks < most ? blocks : most), 1, 1,
                                     256, 1, 1, 0, run->stream, sp, NULL);
  return r == CUDA_SUCCESS ? FFN_OK : cu_fail(m->cu, r, "cu->cuLaunchKernel(ffn_wq_dequant)");
}

/* A kernel step's grid for its chosen variant c. */
static void step_grid(const ffn_model *m, const PlanKernel *k, const LaunchChoice *c, unsigned grid[3]) {
  grid[0] = grid[1] = grid[2] = 1;
  if (k->kind == KK_GEMM)
    ffn_gemm_launch_grid(&c->v->cfg, (int)c->m, (int)k->n, k->streams, c->splits, m->sms, grid);
  else if (wgrad_wgmma(k, c->v)) /* persistent over its tiles and splits, one CTA per SM (grad_sm90.cuh) */
    grid[0] = ffn_wgrad_grid((int)k->k, (int)k->n, c->splits, m->sms);
  else if (k->op == OP_MATMUL_AT) /* strides over its [K, N] tiles, not rows: as many as fit (grad.cuh) */
    grid[0] = (unsigned)m->sms * 2;
  else { /* a rowwise kernel: grid-strided over its rows, cfg.bm of them per block (lower.c: rowwise_kernel) */
    int64_t per_block = c->v->cfg.bm > 1 ? c->v->cfg.bm : 1, blocks = (c->m + per_block - 1) / per_block;
    grid[0] = (unsigned)(blocks < 1 ? 1 : blocks < (int64_t)m->sms * 16 ? blocks : (int64_t)m->sms * 16);
  }
}

/* The tensor maps of a kernel that loads by TMA (the wgmma weight gradient, FFN_GEMM_SM90T/P). */
static ffn_status step_maps(ExecRun *run, const PlanStep *ps, const PlanKernel *k, const LaunchChoice *c, TmaMaps *maps) {
  ffn_model *m = run->m;
  if (wgrad_wgmma(k, c->v)) {
    const CUdeviceptr ab[2] = {run->ptr[ps->args[0]], run->ptr[ps->args[1]]};
    return wgrad_maps(m, k, &c->v->cfg, ab, c->m, maps);
  }
  if (!ffn_gemm_tma(&c->v->cfg))
    return FFN_OK;
  ffn_status st = tma_map(m, k, &c->v->cfg, 0, false, run->ptr[ps->args[0]], c->m, &maps->a);
  CUdeviceptr b = c->v->dq ? run->dq : run->ptr[ps->args[1]];
  if (c->v->mx) { /* B's codes come by plain bulk copies (gemm_sm90.cuh: sm90_wq_producer) */
    memset(&maps->b, 0, sizeof maps->b);
    return st;
  }
  if (st == FFN_OK)
    st = tma_map(m, k, &c->v->cfg, 1, c->v->b_kn, b, (long long)k->streams * k->n, &maps->b);
  return st;
}

/* Whether the next GEMM may start during this one's tail: only if this one fills >= 3/4 of the
 * SMs' resident CTA slots (into the room a smaller grid leaves, the next one's CTAs would be
 * placed at once, to wait beside it, and that slowed it: kernels/NOTES.md, fourteenth session),
 * and only if its work is at most PDL_WAVES waves of that grid (behind a long persistent GEMM the
 * tail is a small part, and chaining cost 4-8% at 8192 tokens, 30-55 waves; at 1024 tokens, 4-14
 * waves, it gains up to 1.4%: fifteenth session). */
static bool chain_next(const ffn_model *m, const PlanKernel *k, const LaunchChoice *c, const unsigned grid[3]) {
  if (k->kind != KK_GEMM)
    return false;
  unsigned all[3];
  ffn_gemm_grid(&c->v->cfg, (int)c->m, (int)k->n, k->streams, c->splits, all);
  long long ctas = (long long)grid[0] * grid[1] * grid[2], items = (long long)all[0] * all[1] * all[2];
  long long slots = (long long)m->sms * (c->v->cfg.ctas_per_sm > 1 ? c->v->cfg.ctas_per_sm : 1);
  return 4 * ctas >= 3 * slots && items <= PDL_WAVES * ctas;
}

ffn_status exec_step(ExecRun *run, int s) {
  ffn_model *m = run->m;
  bool chain = run->chain && m->pdl; /* a GEMM after a large GEMM (rt.h: ffn_model.pdl) */
  run->chain = false;
  const Plan *p = m->prog->plan;
  const PlanStep *ps = &p->steps[s];
  CUresult r;
  if (ps->kind == STEP_ALLREDUCE)
    return exec_allreduce(run, s, run->stream);
  if (ps->kind == STEP_COPY) {
    size_t bytes = tensor_bytes(p, ps->dst, run->dims);
    if (bytes && (r = m->cu->cuMemcpyDtoDAsync(run->ptr[ps->dst], run->ptr[ps->src], bytes, run->stream)) != CUDA_SUCCESS)
      return cu_fail(m->cu, r, "cu->cuMemcpyDtoDAsync()");
    return FFN_OK;
  }
  const PlanKernel *k = &p->kernels[ps->kernel];
  LaunchChoice c = run->choice[s];
  /* zero tokens: nothing to do, but for a sum over the tokens (a weight or bias gradient of a
   * backward graph, kernels/grad.cuh), which is zero: one block writes it */
  bool sum_over_rows = k->op == OP_MATMUL_AT || k->op == OP_SUM_TO;
  if (c.m <= 0 && !sum_over_rows)
    return FFN_OK;
  KArgs args = {.m = c.m, .splits = c.splits, .ws = (float *)run->ws, .counters = (unsigned *)run->counters,
                .rowstats = (const float *)run->rowstats};
  for (int j = 0; j < ps->nargs; j++)
    args.p[j] = (void *)run->ptr[ps->args[j]];
  ffn_status st;
  if (c.v->ext_stats) {
    if ((st = launch_row_stats(run, ps, k, c.m)) != FFN_OK)
      return st;
    chain = false; /* ffn_row_stats came between */
  }
  if (c.v->dq) {
    if (!run->dq || ps->nargs < 3)
      return rt_error(FFN_ERR_IO, "launch plan: step %d reads dequantized weights but has no room or codes for them", s);
    if ((st = launch_dequant(run, ps, k)) != FFN_OK)
      return st;
    args.p[1] = (void *)run->dq;
    chain = false; /* ffn_wq_dequant came between */
  }
  chain = chain && k->kind == KK_GEMM;
  unsigned grid[3];
  step_grid(m, k, &c, grid);
  CUfunction f = m->funcs[m->func_base[ps->kernel] + (int)(c.v - k->variants)];
  TmaMaps maps;
  void *params[] = {&args, &maps};
  if ((st = step_maps(run, ps, k, &c, &maps)) != FFN_OK)
    return st;
  r = launch(m, f, grid, (unsigned)c.v->threads, (unsigned)c.v->smem, run->stream, params, chain);
  if (r != CUDA_SUCCESS)
    return cu_fail(m->cu, r, chain ? "cu->cuLaunchKernelEx(programmatic stream serialization)" : "cu->cuLaunchKernel()");
  run->chain = chain_next(m, k, &c, grid);
  return FFN_OK;
}

/* Whether v can stand in for the variant chosen, c: a direct form of the wgmma weight gradient,
 * with its tiles and launch (what the workspace, split and grid were sized for). */
static bool same_launch(const PlanKernel *k, const KernelVariant *c, const KernelVariant *v) {
  return wgrad_wgmma(k, c) && wgrad_wgmma(k, v) && v->out != DT_NONE && v->threads == c->threads &&
         v->smem == c->smem && v->cfg.bm == c->cfg.bm && v->cfg.bn == c->cfg.bn && v->cfg.bk == c->cfg.bk &&
         v->cfg.stages == c->cfg.stages;
}

ffn_status exec_step_variant(ExecRun *run, int step, int variant) {
  const Plan *p = run->m->prog->plan;
  const PlanStep *ps = &p->steps[step];
  const PlanKernel *k = ps->kind == STEP_LAUNCH ? &p->kernels[ps->kernel] : NULL;
  if (!k || variant < 0 || variant >= k->nvariants || !same_launch(k, run->choice[step].v, &k->variants[variant]))
    return rt_error(FFN_ERR_IO, "launch plan: step %d cannot launch variant %d of its kernel in place of %s", step,
                    variant, k ? run->choice[step].v->func : "a copy");
  const KernelVariant *chosen = run->choice[step].v;
  run->choice[step].v = &k->variants[variant];
  ffn_status st = exec_step(run, step);
  run->choice[step].v = chosen;
  return st;
}

ffn_status exec_end(ExecRun *run, ffn_status st) {
  ffn_model *m = run->m;
  if (run->w) {
    CUresult r = run->w->pinned ? CUDA_SUCCESS : m->cu->cuEventRecord(run->w->done, run->stream);
    bool recorded = r == CUDA_SUCCESS && !run->w->pinned;
    if (r != CUDA_SUCCESS && st == FFN_OK)
      st = cu_fail(m->cu, r, "cu->cuEventRecord()");
    release(m->pool, run->w, run->stream, recorded);
    run->w = NULL;
  }
  if (run->pushed) {
    CUcontext popped;
    m->cu->cuCtxPopCurrent(&popped);
    run->pushed = false;
  }
  free(run->choice);
  free(run->ptr);
  run->choice = NULL;
  run->ptr = NULL;
  return st;
}

/* How many row blocks the call runs as (tp_row_blocks; 1: whole), once it is checked whole, so
 * that a bad call is reported as the caller made it. */
static ffn_status call_blocks(ffn_model *m, const DLTensor *inputs, int ninputs, const DLTensor *outputs, int noutputs,
                              int *blocks, int64_t *starts) {
  const Plan *p = m->prog->plan;
  *blocks = 1;
  int first = -1; /* the first input: tp_row_dim has every input lead with the rows */
  for (int t = 0; t < p->ntensors && first < 0; t++)
    if (p->tensors[t].kind == PT_INPUT)
      first = p->tensors[t].index;
  if (m->row_dim < 0 || first < 0 || first >= ninputs || !inputs || inputs[first].ndim < 1)
    return FFN_OK; /* cannot be cut, or a call exec_begin refuses */
  if (tp_row_blocks(inputs[first].shape[0], m->tp_blocks, m->reduces, starts) == 1)
    return FFN_OK; /* a small call: no checks twice */
  ExecRun whole = {.m = m};
  ffn_status st = check_call(p, inputs, ninputs, outputs, noutputs, &whole);
  if (st == FFN_OK)
    *blocks = tp_row_blocks(whole.dims[m->row_dim], m->tp_blocks, m->reduces, starts);
  return st;
}

ffn_status exec_run(ffn_model *m, CUstream stream, const DLTensor *inputs, int ninputs, const DLTensor *outputs,
                    int noutputs) {
  int blocks;
  int64_t starts[TP_MAX_BLOCKS + 1];
  ffn_status st = call_blocks(m, inputs, ninputs, outputs, noutputs, &blocks, starts);
  if (st != FFN_OK)
    return st;
  if (blocks > 1)
    return tp_run_blocks(m, stream, inputs, ninputs, outputs, noutputs, blocks, starts);
  ExecRun run;
  st = exec_begin(m, stream, inputs, ninputs, outputs, noutputs, &run);
  if (st != FFN_OK)
    return st;
  for (int s = 0; s < m->prog->plan->nsteps && st == FFN_OK; s++)
    st = exec_step(&run, s);
  return exec_end(&run, st);
}
