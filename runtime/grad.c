/* grad.c: ffn_model_run_grad, a backward graph's gradients into the caller's tensors.
 *
 * The backward graph (passes/grad.c) has f32 outputs grad.NAME. An f32 tensor that is only
 * written is passed to the plan as that output, so its kernels write it in place. A bf16 or
 * accumulated gradient that one weight-gradient kernel alone writes, and no other step reads, is
 * written by that kernel's direct form straight into the caller's tensor (grad_plan_direct: on
 * sm_90, kernels/grad_sm90.cuh stores bf16 or adds to f32 or bf16 values, rounding once, as
 * ffn_grad_store would; FFNC_GRAD_DIRECT=0 or FFNC_WGRAD=mma turn it off). Every other gradient
 * (a gain's, grad.x, a sum of several products such as a tied weight's, one not wanted, all of
 * them on sm_80) is staged: the plan computes it in f32 into the call's workspace, placed like a
 * scratch tensor over the steps that touch it (exec_begin_ex, memplan_assign_call: in the bytes
 * of intermediate values dead by then, and of gradients stored before), and right after the last
 * of those steps ffn_grad_store (kernels/runtime.cuh) writes or adds it into the caller's
 * tensor. All of it on the caller's stream, from the workspace pool: nothing allocated once a
 * call of as many tokens has run on that stream, nothing waited for, so the call can be captured
 * in a CUDA graph.
 */
#include "grad.h"

#include <stdlib.h>
#include <string.h>

#include "../ir/dims.h"
#include "dlpack_dtype.h"

/* A backward graph's extra inputs are the output gradients "grad.OUT", a name no program input
 * can have (identifiers have no '.'). */
static bool is_backward_graph(const Plan *p) {
  for (int t = 0; t < p->ntensors; t++)
    if (p->tensors[t].kind == PT_INPUT && strncmp(p->tensors[t].name, "grad.", 5) == 0)
      return true;
  return false;
}

/* The keep policy's backward graph reads the training forward's saved tensors, "saved.NAME". */
static int saved_inputs(const Plan *p) {
  int n = 0;
  for (int t = 0; t < p->ntensors; t++)
    n += p->tensors[t].kind == PT_INPUT && strncmp(p->tensors[t].name, "saved.", 6) == 0;
  return n;
}

static int output_tensor(const Plan *p, int i) {
  for (int t = 0; t < p->ntensors; t++)
    if (p->tensors[t].kind == PT_OUTPUT && p->tensors[t].index == i)
      return t;
  return -1;
}

static ffn_status check_grad(const Plan *p, int t, const DLTensor *d, const int64_t *dims) {
  const PlanTensor *pt = &p->tensors[t];
  const char *name = pt->name;
  if (d->device.device_type != kDLCUDA && d->device.device_type != kDLCUDAManaged)
    return rt_error(FFN_ERR_INVALID_ARGUMENT,
                    "ffn_model_run_grad: gradient '%s': must be in device memory (kDLCUDA), got device type %d", name,
                    (int)d->device.device_type);
  DType dt = dtype_from_dl(d->dtype, DT_F32);
  if (dt != DT_F32 && dt != DT_BF16)
    return rt_error(FFN_ERR_TENSOR,
                    "ffn_model_run_grad: gradient '%s': must be f32 (kDLFloat 32) or bf16 (kDLBfloat 16), got DLPack "
                    "code %d bits %d lanes %d", name, d->dtype.code, d->dtype.bits, d->dtype.lanes);
  int64_t bound[64];
  memcpy(bound, dims, sizeof(int64_t) * (size_t)p->ndims);
  int axis;
  DimsResult r = dims_bind(pt->dims, pt->rank, d->ndim, d->shape, bound, false, &axis);
  if (r != DIMS_OK) {
    char why[600];
    dims_mismatch_str(r, axis, pt->dims, pt->rank, p->dim_names, d->ndim, d->shape, bound, why, sizeof why);
    return rt_error(FFN_ERR_TENSOR, "ffn_model_run_grad: gradient '%s': %s", name, why);
  }
  int64_t expect = 1;
  for (int i = pt->rank - 1; i >= 0; i--) {
    if (d->strides && d->shape[i] > 1 && d->strides[i] != expect)
      return rt_error(FFN_ERR_TENSOR, "ffn_model_run_grad: gradient '%s': must be contiguous row-major", name);
    expect *= d->shape[i];
  }
  if (expect && ((uintptr_t)d->data + d->byte_offset) % 16)
    return rt_error(FFN_ERR_INVALID_ARGUMENT, "ffn_model_run_grad: gradient '%s': data must be 16-byte aligned", name);
  return FFN_OK;
}

ffn_status grad_check_call(const Plan *p, const DLTensor *inputs, int ninputs, const DLTensor *grads, int ngrads,
                           unsigned flags, GradTarget *targets, int64_t *dims) {
  if (!is_backward_graph(p))
    return rt_error(FFN_ERR_INVALID_ARGUMENT, "ffn_model_run_grad: the program is not a backward graph (compile it "
                    "with ffn_options_set_grad, or `ffnc build --grad`)");
  if (flags & ~(unsigned)(FFN_GRAD_ACCUMULATE | FFN_GRAD_CONSUME_SAVED))
    return rt_error(FFN_ERR_INVALID_ARGUMENT,
                    "ffn_model_run_grad: unknown flags 0x%x (FFN_GRAD_ACCUMULATE is 0x%x, FFN_GRAD_CONSUME_SAVED 0x%x)",
                    flags, (unsigned)FFN_GRAD_ACCUMULATE, (unsigned)FFN_GRAD_CONSUME_SAVED);
  int nsaved = saved_inputs(p);
  if (nsaved && ninputs == p->ninputs - nsaved)
    return rt_error(FFN_ERR_INVALID_ARGUMENT, "ffn_model_run_grad: the backward graph keeps (FFN_GRAD_KEEP): pass "
                    "the %d saved tensors the training forward wrote (saved.NAME, its outputs after the program's) "
                    "after the output gradients", nsaved);
  if (ninputs != p->ninputs || ngrads != p->noutputs)
    return rt_error(FFN_ERR_INVALID_ARGUMENT, "ffn_model_run_grad: the backward graph has %d inputs (the program's, "
                    "then grad.OUT per output%s) and %d gradients, got %d and %d", p->ninputs,
                    nsaved ? ", then saved.NAME per saved tensor" : "", p->noutputs, ninputs, ngrads);
  if (p->ndims > 64)
    return rt_error(FFN_ERR_INVALID_ARGUMENT, "too many dynamic dims");
  /* the dims as the inputs bind them (exec_begin checks the inputs themselves again) */
  for (int i = 0; i < p->ndims; i++)
    dims[i] = -1;
  for (int t = 0; t < p->ntensors; t++) {
    const PlanTensor *pt = &p->tensors[t];
    if (pt->kind != PT_INPUT)
      continue;
    const DLTensor *d = &inputs[pt->index];
    int axis;
    DimsResult r = dims_bind(pt->dims, pt->rank, d->ndim, d->shape, dims, true, &axis);
    if (r != DIMS_OK) {
      char why[600];
      dims_mismatch_str(r, axis, pt->dims, pt->rank, p->dim_names, d->ndim, d->shape, dims, why, sizeof why);
      return rt_error(FFN_ERR_TENSOR, "input '%s': %s", pt->name, why);
    }
  }
  for (int i = 0; i < p->ndims; i++)
    if (dims[i] < 0)
      return rt_error(FFN_ERR_TENSOR, "dim %s is not bound by any input", p->dim_names[i]);
  for (int i = 0; i < ngrads; i++) {
    int t = output_tensor(p, i);
    if (t < 0 || p->tensors[t].dtype != DT_F32)
      return rt_error(FFN_ERR_IO, "launch plan: gradient %d is not an f32 output", i);
    GradTarget *g = &targets[i];
    *g = (GradTarget){.tensor = t, .wanted = grads[i].data != NULL, .direct = -1, .variant = -1};
    g->numel = plan_numel(p, t, dims);
    if (g->wanted) {
      ffn_status s = check_grad(p, t, &grads[i], dims);
      if (s != FFN_OK)
        return s;
      g->bf16 = dtype_from_dl(grads[i].dtype, DT_F32) == DT_BF16;
    }
    g->staged = !g->wanted || g->bf16 || (flags & FFN_GRAD_ACCUMULATE);
  }
  return FFN_OK;
}

/* ffn_grad_store, found at the first call: AOT packages built before it existed still load
 * (and run ffn_model_run) without it. */
static ffn_status store_kernel(ffn_model *m, CUfunction *f) {
  CUresult r = m->cu->cuCtxPushCurrent(m->ctx);
  if (r != CUDA_SUCCESS)
    return cu_fail(m->cu, r, "cu->cuCtxPushCurrent()");
  pthread_mutex_lock(&m->lock);
  ffn_status s = m->grad_store ? FFN_OK : find_function(m, "ffn_grad_store", &m->grad_store);
  *f = m->grad_store;
  pthread_mutex_unlock(&m->lock);
  CUcontext c;
  m->cu->cuCtxPopCurrent(&c);
  if (s != FFN_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", ffn_last_error());
    return rt_error(s, "%s: the package predates ffn_model_run_grad; rebuild it with this ffnc", why);
  }
  return FFN_OK;
}

static bool step_touches(const PlanStep *ps, int t) {
  if (ps->kind != STEP_LAUNCH)
    return ps->src == t || ps->dst == t;
  for (int j = 0; j < ps->nargs; j++)
    if (ps->args[j] == t)
      return true;
  return false;
}

/* The variant of launch step s's kernel that writes tensor t, its only output slot, straight into
 * a caller's tensor of type dt (accumulate: adding to it), or -1. */
static int direct_variant(const Plan *p, const PlanStep *s, int t, DType dt, bool accumulate) {
  const PlanKernel *k = s->kind == STEP_LAUNCH ? &p->kernels[s->kernel] : NULL;
  if (!k || k->op != OP_MATMUL_AT || s->nargs != 3 || s->args[2] != t || s->args[0] == t || s->args[1] == t)
    return -1;
  for (int v = 0; v < k->nvariants; v++)
    if (k->variants[v].out == dt && k->variants[v].accumulate == accumulate)
      return v;
  return -1;
}

int grad_plan_direct(const Plan *p, GradTarget *g, int n, unsigned flags) {
  int count = 0;
  for (int i = 0; i < n; i++) {
    if (!g[i].staged || !g[i].wanted)
      continue;
    int step = -1, touching = 0;
    for (int s = 0; s < p->nsteps; s++)
      if (step_touches(&p->steps[s], g[i].tensor))
        step = s, touching++;
    if (touching != 1)
      continue;
    int v = direct_variant(p, &p->steps[step], g[i].tensor, g[i].bf16 ? DT_BF16 : DT_F32,
                           (flags & FFN_GRAD_ACCUMULATE) != 0);
    if (v >= 0) {
      g[i].staged = false;
      g[i].direct = step;
      g[i].variant = v;
      count++;
    }
  }
  return count;
}

void grad_staging_plan(const Plan *p, GradTarget *g, int n, bool *in_workspace) {
  for (int i = 0; i < n; i++) {
    if (!g[i].staged)
      continue;
    in_workspace[g[i].tensor] = true;
    /* the plan's lifetime (memplan_lifetimes), which memplan_assign_call places it by */
    g[i].first = p->tensors[g[i].tensor].first, g[i].last = p->tensors[g[i].tensor].last;
    if (g[i].first < 0) /* no step writes it (it has no elements): live throughout */
      g[i].first = 0, g[i].last = p->nsteps;
  }
}

/* Enqueues ffn_grad_store of the wanted staged gradients whose last step is `step`. */
static ffn_status store_after(ffn_model *m, CUstream stream, CUfunction store, const ExecRun *run,
                              const GradTarget *g, const DLTensor *grads, int ngrads, unsigned flags, int step) {
  for (int i = 0; i < ngrads; i++) {
    if (!g[i].staged || !g[i].wanted || g[i].numel == 0 || g[i].last != step)
      continue;
    CUdeviceptr dst = (CUdeviceptr)grads[i].data + grads[i].byte_offset, src = run->ptr[g[i].tensor];
    long long n = g[i].numel, blocks = (n + 255) / 256, cap = (long long)m->sms * 8;
    int is_bf16 = g[i].bf16, accumulate = (flags & FFN_GRAD_ACCUMULATE) != 0;
    void *params[] = {&dst, &src, &n, &is_bf16, &accumulate};
    CUresult r = m->cu->cuLaunchKernel(store, (unsigned)(blocks < cap ? blocks : cap), 1, 1, 256, 1, 1, 0, stream,
                                       params, NULL);
    if (r != CUDA_SUCCESS)
      return cu_fail(m->cu, r, "cu->cuLaunchKernel(ffn_grad_store)");
  }
  return FFN_OK;
}

/* FFNC_GRAD_DIRECT=0 stages every gradient grad_plan_direct would have written directly (for A/B
 * measurements and tests); so does FFNC_WGRAD=mma, whose kernels have no direct forms. Read at
 * each call, so that one process can compare both paths. */
static bool direct_allowed(const ffn_model *m) {
  const char *e = getenv("FFNC_GRAD_DIRECT");
  return !m->wgrad_mma && !(e && strcmp(e, "0") == 0);
}

/* The tensors exec_begin sees as the plan's outputs: the caller's f32 tensors written in place,
 * else an f32 stand-in of the right shape whose pointer is replaced once the call has begun (by
 * the staging space, or by the caller's tensor that a direct form writes). Finds the store
 * kernel when a gradient is staged. */
static ffn_status plan_outputs(ffn_model *m, const GradTarget *g, const DLTensor *grads, int ngrads,
                               const int64_t *dims, DLTensor *outputs, int64_t (*shapes)[FFN_MAX_RANK],
                               CUfunction *store) {
  const Plan *p = m->prog->plan;
  for (int i = 0; i < ngrads; i++) {
    const PlanTensor *pt = &p->tensors[g[i].tensor];
    if (!g[i].staged && g[i].direct < 0) {
      outputs[i] = grads[i];
      continue;
    }
    ffn_status s = g[i].staged && !*store ? store_kernel(m, store) : FFN_OK;
    if (s != FFN_OK)
      return s;
    for (int d = 0; d < pt->rank; d++)
      shapes[i][d] = pt->dims[d].sym >= 0 ? dims[pt->dims[d].sym] : pt->dims[d].size;
    outputs[i] = (DLTensor){(void *)(uintptr_t)256, {kDLCUDA, 0}, pt->rank, {kDLFloat, 32, 1}, shapes[i], NULL, 0};
  }
  return FFN_OK;
}

/* Step `step`: with the direct form of the gradient it writes into the caller's tensor, if any. */
static ffn_status run_step(ExecRun *run, const GradTarget *g, int ngrads, int step) {
  for (int i = 0; i < ngrads; i++)
    if (g[i].direct == step)
      return exec_step_variant(run, step, g[i].variant);
  return exec_step(run, step);
}

ffn_status ffn_model_run_grad(ffn_model *m, struct CUstream_st *stream, const DLTensor *inputs, int ninputs,
                              const DLTensor *grads, int ngrads, unsigned flags) {
  if (!m || (!inputs && ninputs) || (!grads && ngrads) || ninputs < 0 || ngrads < 0 || ngrads > 4096)
    return rt_error(FFN_ERR_INVALID_ARGUMENT, "ffn_model_run_grad: bad arguments");
  const Plan *p = m->prog->plan;
  GradTarget *g = calloc((size_t)ngrads + 1, sizeof *g);
  DLTensor *outputs = calloc((size_t)ngrads + 1, sizeof *outputs);
  int64_t(*shapes)[FFN_MAX_RANK] = calloc((size_t)ngrads + 1, sizeof *shapes);
  int64_t dims[64];
  ffn_status s = g && outputs && shapes ? FFN_OK : rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
  if (s == FFN_OK)
    s = grad_check_call(p, inputs, ninputs, grads, ngrads, flags, g, dims);
  if (s == FFN_OK && direct_allowed(m))
    grad_plan_direct(p, g, ngrads, flags);
  CUfunction store = NULL;
  bool *in_ws = NULL;
  if (s == FFN_OK)
    s = plan_outputs(m, g, grads, ngrads, dims, outputs, shapes, &store);
  if (s == FFN_OK && store && !(in_ws = calloc((size_t)p->ntensors + 1, sizeof(bool))))
    s = rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
  if (s == FFN_OK && store)
    grad_staging_plan(p, g, ngrads, in_ws);
  ExecRun run;
  bool begun = false;
  if (s == FFN_OK)
    begun = (s = exec_begin_ex(m, (CUstream)stream, inputs, ninputs, outputs, ngrads, in_ws,
                               (flags & FFN_GRAD_CONSUME_SAVED) != 0, &run)) == FFN_OK;
  for (int i = 0; i < ngrads && begun; i++) /* the staged ones are in the workspace (in_ws) */
    if (g[i].direct >= 0)
      run.ptr[g[i].tensor] = (CUdeviceptr)grads[i].data + grads[i].byte_offset;
  /* each staged gradient is stored right after the last step that touches it, so its bytes can
   * serve the next one (step nsteps: after all of them) */
  for (int step = 0; begun && s == FFN_OK && step <= p->nsteps; step++) {
    if (step < p->nsteps)
      s = run_step(&run, g, ngrads, step);
    if (s == FFN_OK && store)
      s = store_after(m, (CUstream)stream, store, &run, g, grads, ngrads, flags, step);
  }
  if (begun)
    s = exec_end(&run, s);
  free(g);
  free(outputs);
  free(shapes);
  free(in_ws);
  return s;
}
