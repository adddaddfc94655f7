/* bench_grad.c: `ffnc bench --grad FILE.ffn... --tokens N[,N...]`: the FFN part of a training step.
 *
 * For each model: the program (forward) and its backward graph (ffn_options_set_grad), bound to
 * the same random weights on the device. For each token count, with random inputs x and output
 * gradients dy:
 *   fwd      ffn_model_run of the program (y from x);
 *   bwd      ffn_model_run_grad of the backward graph, which recomputes the forward values it
 *            reads from x (the memory-saving policy), every gradient written into a tensor of its
 *            weight's or input's own type where that is bf16 (as torch's param.grad), else f32;
 *   fwd+bwd  both, one after the other: what a training step runs.
 * With --keep (the keep policy, ffn_options_set_grad_policy): fwd is the training forward, which
 * also writes the saved tensors, and bwd the backward graph that reads them instead of
 * recomputing, and consumes them (FFN_GRAD_CONSUME_SAVED, as a training step that frees them
 * after the backward: bwd alone is timed after an untimed forward each time); the saved tensors
 * count in the step's extra memory (and alone as saved_MiB).
 * Each is timed (median of --reps, CUDA events, after warm-up). The gradients are poisoned with
 * NaN first and checked to be written and finite (their values are the tests' work: gpu_grad_*).
 * TFLOP/s counts the step's model FLOPs, 3x the forward products' (forward, input and weight
 * gradients; the recomputation is not counted), the floor is those FLOPs at cuBLASLt's measured
 * bf16 rate. Peak extra memory: what a step holds beyond the parameters and the gradients: x,
 * y and dy, the workspace as the calls left it, and the load-time copies of the weights both
 * models keep (norm gains folded, gate/up merged, the transposed 16-bit weights of the backward's
 * input-gradient products), each also printed alone. The two models share one workspace
 * (ffn_model_share_workspace: the larger call's size, counted once), as a training loop should
 * have them; it is freed between token counts, so that each count's figure is what its own calls
 * need, not a smaller count's allocation grown with headroom.
 * Once per model: the time of preparing both models again, which a step that changes the
 * weights adds (the Python bridge's weight rule: the copies are made anew after an optimizer step).
 */
#include "bench.h"
#include "runtime/dlpack_dtype.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef FFNC_GIT_COMMIT
#define FFNC_GIT_COMMIT "unknown"
#endif

static const CuApi *cu;

enum { MAX_IO = 64 };

typedef struct {
  const char *file;
  Graph *g;
  ffn_program *prog[2]; /* forward, backward graph */
  ffn_model *model[2];
  CUdeviceptr *wdev;
  int nw;
  size_t param_bytes;
  double prepare_us; /* both models prepared again (time_prepare) */
} GradModel;

/* One token count's tensors: the program's inputs x and outputs y; the backward graph's inputs
 * (x, then dy per output) and its gradients. */
typedef struct {
  GradModel *md;
  int nin, nout, ngrads, nbin; /* nbin: the backward graph's inputs (x, dy, the saved tensors) */
  DLTensor x[MAX_IO], y[MAX_IO], gin[2 * MAX_IO], grads[MAX_IO];
  int64_t x_shape[MAX_IO][FFN_MAX_RANK], y_shape[MAX_IO][FFN_MAX_RANK], dy_shape[MAX_IO][FFN_MAX_RANK],
      g_shape[MAX_IO][FFN_MAX_RANK];
  size_t grad_bytes[MAX_IO], io_bytes, all_grad_bytes, saved_bytes;
  CUdeviceptr bufs[4 * MAX_IO];
  int nbufs;
  unsigned bwd_flags; /* keep: FFN_GRAD_CONSUME_SAVED (the step's forward writes them anew) */
} Step;

typedef struct {
  int64_t tokens;
  double fwd_us, bwd_us, step_us, tflops, floor_us;
  size_t ws_bytes, derived_bytes, io_bytes, grad_bytes, saved_bytes;
  bool check_ok;
} GradResult;

static void die(const char *file, ffn_status s) { exit(cli_fail("bench", file, s)); }

static void run_fwd(void *p, int rot, CUstream s) {
  Step *st = p;
  (void)rot;
  ffn_status r = ffn_model_run(st->md->model[0], s, st->x, st->nin, st->y, st->nout);
  if (r != FFN_OK)
    die(st->md->file, r);
}

static void run_bwd(void *p, int rot, CUstream s) {
  Step *st = p;
  (void)rot;
  ffn_status r = ffn_model_run_grad(st->md->model[1], s, st->gin, st->nbin, st->grads, st->ngrads, st->bwd_flags);
  if (r != FFN_OK)
    die(st->md->file, r);
}

static void run_step(void *p, int rot, CUstream s) {
  run_fwd(p, rot, s);
  run_bwd(p, rot, s);
}

static CUdeviceptr device_buffer(Step *st, size_t bytes) {
  CUdeviceptr d;
  CK(cu->cuMemAlloc(&d, bytes + 16));
  st->bufs[st->nbufs++] = d;
  return d;
}

/* The type of x's or a weight's gradient tensor: bf16 where the value is bf16, else f32. */
static DType grad_type(const Graph *g, const char *grad_name) {
  const char *name = grad_name + strlen("grad.");
  for (int i = 0; i < g->nodes.len; i++) {
    const Node *n = GRAPH_NODE(g, i);
    if ((n->op == OP_INPUT || n->op == OP_WEIGHT) && n->name && strcmp(n->name, name) == 0)
      return n->dtype == DT_BF16 ? DT_BF16 : DT_F32;
  }
  return DT_F32;
}

static void compile_grad_model(GradModel *md, const CompileArgs *base) {
  CompileArgs ca = *base;
  ca.file = md->file;
  ca.grad = false;
  int status;
  if (!(md->g = cli_frontend(&ca, &status)))
    exit(status);
  for (int i = 0; i < 2; i++) {
    ca.grad = i == 1;
    ffn_options *o;
    ffn_status s = cli_options(&ca, &o);
    if (s == FFN_OK)
      s = ffn_program_compile_file(md->file, o, &md->prog[i]);
    ffn_options_destroy(o);
    if (s != FFN_OK)
      die(md->file, s);
  }
}

static bool reads_weight(const ffn_program *p, const char *name) {
  for (int i = 0; i < ffn_program_num_weights(p); i++)
    if (strcmp(ffn_program_weight_name(p, i), name) == 0)
      return true;
  return false;
}

/* Random weights of the right scale on the device, bound in place to both models, prepared. */
static void setup_grad_model(GradModel *md) {
  for (int i = 0; i < 2; i++) {
    ffn_status s = ffn_model_create(md->prog[i], 0, &md->model[i]);
    if (s != FFN_OK)
      die(md->file, s);
  }
  ffn_status shared = ffn_model_share_workspace(md->model[1], md->model[0]);
  if (shared != FFN_OK)
    die(md->file, shared);
  Graph *g = md->g;
  md->wdev = calloc((size_t)g->nodes.len + 1, sizeof(CUdeviceptr));
  for (int i = 0; i < g->nodes.len; i++) {
    Node *n = GRAPH_NODE(g, i);
    if (n->op != OP_WEIGHT)
      continue;
    int64_t shape[FFN_MAX_RANK];
    size_t numel;
    DLDataType dl;
    void *h = random_weight(g, n, shape, &numel, &dl);
    size_t bytes = dtype_bytes(n->dtype, numel);
    CUdeviceptr d;
    CK(cu->cuMemAlloc(&d, bytes + 16));
    CK(cu->cuMemcpyHtoD(d, h, bytes));
    free(h);
    md->wdev[md->nw++] = d;
    md->param_bytes += bytes;
    if (n->stored != DT_NONE) {
      cli_error("bench: --grad: weight '%s' (%s) cannot be bound as a device tensor", n->name, dtype_name(n->dtype));
      exit(EXIT_USER);
    }
    DLTensor t = {(void *)d, {kDLCUDA, 0}, n->shape.rank, dl, shape, NULL, 0};
    for (int m = 0; m < 2; m++) {
      if (!reads_weight(md->prog[m], n->name))
        continue; /* the keep policy's backward may need fewer weights than the forward */
      ffn_status s = ffn_model_bind_weight(md->model[m], n->name, &t);
      if (s != FFN_OK)
        die(md->file, s);
    }
  }
  for (int m = 0; m < 2; m++) {
    ffn_status s = ffn_model_prepare(md->model[m]);
    if (s != FFN_OK)
      die(md->file, s);
  }
}

/* A DLTensor of program input/output info with every dynamic dim = tokens, on buffer d. */
static DLTensor tensor_of(const ffn_tensor_info *info, int64_t tokens, int64_t *shape, CUdeviceptr d, size_t *bytes) {
  size_t numel = 1;
  for (int k = 0; k < info->ndim; k++)
    numel *= (size_t)(shape[k] = info->shape[k] < 0 ? tokens : info->shape[k]);
  *bytes = numel * (size_t)((info->dtype.bits * info->dtype.lanes + 7) / 8);
  return (DLTensor){(void *)d, {kDLCUDA, 0}, info->ndim, info->dtype, shape, NULL, 0};
}

static int setup_step(GradModel *md, int64_t tokens, Step *st) {
  const ffn_program *fwd = md->prog[0], *bwd = md->prog[1];
  st->md = md;
  st->nin = ffn_program_num_inputs(fwd);
  st->nout = ffn_program_num_outputs(fwd);
  st->ngrads = ffn_program_num_outputs(bwd);
  if (st->nin > MAX_IO || st->nout > MAX_IO || st->ngrads > MAX_IO) {
    cli_error("bench: --grad: at most %d inputs, outputs and gradients", MAX_IO);
    return -1;
  }
  ffn_tensor_info info;
  for (int i = 0; i < st->nout; i++) { /* y, then the training forward's saved tensors */
    ffn_program_output_info(fwd, i, &info);
    size_t bytes;
    st->y[i] = tensor_of(&info, tokens, st->y_shape[i], 0, &bytes);
    st->y[i].data = (void *)device_buffer(st, bytes);
    st->io_bytes += bytes;
    st->saved_bytes += strncmp(info.name, "saved.", 6) == 0 ? bytes : 0;
  }
  st->nbin = ffn_program_num_inputs(bwd);
  if (st->nbin > 2 * MAX_IO) {
    cli_error("bench: --grad: at most %d inputs of the backward graph", 2 * MAX_IO);
    return -1;
  }
  for (int i = 0; i < st->nbin; i++) { /* the backward graph's inputs: x, dy, the saved tensors */
    ffn_program_input_info(bwd, i, &info);
    if (strncmp(info.name, "saved.", 6) == 0) { /* what the training forward writes */
      for (int o = 0; o < st->nout; o++)
        if (strcmp(ffn_program_output_name(fwd, o), info.name) == 0)
          st->gin[i] = st->y[o];
      st->bwd_flags = FFN_GRAD_CONSUME_SAVED; /* as a training step, which frees them after */
      continue;
    }
    size_t bytes;
    int64_t *shape = i < st->nin ? st->x_shape[i] : st->dy_shape[i - st->nin];
    st->gin[i] = tensor_of(&info, tokens, shape, 0, &bytes);
    CUdeviceptr d = device_buffer(st, bytes);
    st->gin[i].data = (void *)d;
    DType t = dtype_from_dl(info.dtype, DT_NONE);
    void *h = random_buffer(t, bytes / dtype_bytes(t, 1), 0, 1);
    CK(cu->cuMemcpyHtoD(d, h, bytes));
    free(h);
    st->io_bytes += bytes;
    if (i < st->nin)
      st->x[i] = st->gin[i];
  }
  for (int i = 0; i < st->ngrads; i++) {
    ffn_program_output_info(bwd, i, &info);
    DType t = grad_type(md->g, info.name);
    dtype_to_dl(t, &info.dtype);
    size_t bytes;
    st->grads[i] = tensor_of(&info, tokens, st->g_shape[i], 0, &bytes);
    st->grads[i].data = (void *)device_buffer(st, bytes);
    st->grad_bytes[i] = bytes;
    st->all_grad_bytes += bytes;
  }
  return 0;
}

/* The gradients after one step from NaN: all written and finite. */
static bool check_step(Step *st, CUstream s) {
  for (int i = 0; i < st->ngrads; i++)
    CK(cu->cuMemsetD8Async((CUdeviceptr)st->grads[i].data, 0xff, st->grad_bytes[i], s));
  run_step(st, 0, s);
  CK(cu->cuStreamSynchronize(s));
  bool ok = true;
  for (int i = 0; i < st->ngrads && ok; i++) {
    DType t = dtype_from_dl(st->grads[i].dtype, DT_NONE);
    size_t n = st->grad_bytes[i] / dtype_bytes(t, 1);
    void *h = malloc(st->grad_bytes[i] + 16);
    CK(cu->cuMemcpyDtoH(h, (CUdeviceptr)st->grads[i].data, st->grad_bytes[i]));
    for (size_t j = 0; j < n && ok; j++)
      ok = isfinite(dtype_load(t, h, j));
    if (!ok)
      cli_error("bench: %s: gradient %s has a non-finite element", st->md->file,
                ffn_program_output_name(st->md->prog[1], i));
    free(h);
  }
  return ok;
}

/* Forward FLOPs of the source's matrix products at `tokens`. */
static double forward_flops(const Graph *g, int64_t tokens) {
  double flops = 0;
  for (int i = 0; i < g->nodes.len; i++) {
    Node *n = GRAPH_NODE(g, i);
    if (n->op != OP_MATMUL || ir_is_const(n))
      continue;
    double numel = 1;
    for (int d = 0; d < n->shape.rank; d++)
      numel *= (double)(n->shape.d[d].sym >= 0 ? tokens : n->shape.d[d].size);
    flops += 2.0 * numel * (double)n->args[1]->shape.d[0].size;
  }
  return flops;
}

static size_t pool_bytes(const WorkspacePool *p) {
  size_t bytes = 0;
  for (int i = 0; i < p->nws; i++)
    bytes += p->ws[i]->size;
  return bytes;
}

/* The device memory of both models' workspaces, a pool they share counted once. */
static size_t workspace_bytes(const GradModel *md) {
  const WorkspacePool *fwd = md->model[0]->pool, *bwd = md->model[1]->pool;
  return pool_bytes(fwd) + (bwd != fwd ? pool_bytes(bwd) : 0);
}

/* Both models' workspaces freed once the stream's work is done: the next token count's calls
 * allocate exactly what they need. */
static void free_workspaces(GradModel *md, CUstream s) {
  CK(cu->cuStreamSynchronize(s));
  for (int m = 0; m < 2; m++)
    exec_free_workspaces(md->model[m]->pool);
}

static GradResult bench_one(GradModel *md, int64_t tokens, int reps, double bf16_tflops, CUstream s, int *failed) {
  Step *st = calloc(1, sizeof *st);
  GradResult r = {.tokens = tokens};
  if (!st || setup_step(md, tokens, st) != 0) {
    *failed = 1;
    free(st);
    return r;
  }
  r.check_ok = check_step(st, s);
  *failed |= !r.check_ok;
  r.fwd_us = time_runs(run_fwd, st, 1, reps, s);
  r.bwd_us = st->bwd_flags & FFN_GRAD_CONSUME_SAVED ? time_runs_after(run_fwd, run_bwd, st, 1, reps, s)
                                                   : time_runs(run_bwd, st, 1, reps, s);
  r.step_us = time_runs(run_step, st, 1, reps, s);
  double flops = 3.0 * forward_flops(md->g, tokens);
  r.tflops = flops / (r.step_us * 1e-6) / 1e12;
  r.floor_us = bf16_tflops > 0 ? flops / (bf16_tflops * 1e12) * 1e6 : 0; /* 0: --no-ceilings */
  r.ws_bytes = workspace_bytes(md);
  r.derived_bytes = model_weight_bytes(md->model[0]) + model_weight_bytes(md->model[1]);
  r.io_bytes = st->io_bytes;
  r.grad_bytes = st->all_grad_bytes;
  r.saved_bytes = st->saved_bytes;
  free_workspaces(md, s);
  for (int i = 0; i < st->nbufs; i++)
    cu->cuMemFree(st->bufs[i]);
  free(st);
  return r;
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

static int cmp_double(const void *p, const void *q) {
  double a = *(const double *)p, b = *(const double *)q;
  return (a > b) - (a < b);
}

/* What changed weights cost before the next step: both models prepared again (the load-time
 * copies made anew; ffn_model_prepare synchronizes), as the Python bridge does after every
 * optimizer step. Median of 5, host clock. */
static double time_prepare(GradModel *md) {
  enum { N = 5 };
  double t[N];
  for (int i = 0; i < N; i++) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int m = 0; m < 2; m++) {
      ffn_status s = ffn_model_prepare(md->model[m]);
      if (s != FFN_OK)
        die(md->file, s);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    t[i] = (double)(b.tv_sec - a.tv_sec) * 1e6 + (double)(b.tv_nsec - a.tv_nsec) * 1e-3;
  }
  qsort(t, N, sizeof t[0], cmp_double);
  return t[N / 2];
}

static void print_grad_results(const GradModel *md, const GradResult *r, int n, bool keep) {
  printf("\n%s: training step (%s)\n", md->file,
         keep ? "keep: fwd, the training forward writing the saved tensors; bwd, the backward graph reading them"
              : "fwd: the program; bwd: its backward graph, recomputing the forward");
  printf("parameters %.1f MiB; preparing both models again (after a weight update) %.1f us\n", mib(md->param_bytes),
         md->prepare_us);
  printf("%7s %10s %10s %11s %8s %10s %6s %10s %9s %9s %7s %9s %9s  %s\n", "tokens", "fwd_us", "bwd_us", "fwd+bwd_us",
         "TFLOP/s", "floor_us", "%floor", "extra_MiB", "ws_MiB", "copy_MiB", "io_MiB", "saved_MiB", "grads_MiB", "check");
  for (int i = 0; i < n; i++)
    printf("%7lld %10.1f %10.1f %11.1f %8.1f %10.1f %5.0f%% %10.1f %9.1f %9.1f %7.1f %9.1f %9.1f  %s\n",
           (long long)r[i].tokens, r[i].fwd_us, r[i].bwd_us, r[i].step_us, r[i].tflops, r[i].floor_us,
           100 * r[i].floor_us / r[i].step_us, mib(r[i].ws_bytes + r[i].derived_bytes + r[i].io_bytes),
           mib(r[i].ws_bytes), mib(r[i].derived_bytes), mib(r[i].io_bytes), mib(r[i].saved_bytes), mib(r[i].grad_bytes),
           r[i].check_ok ? "ok" : "NOT FINITE");
}

static void write_grad_json(const char *path, const char *card, double bf16_tflops, GradModel *models,
                            GradResult **res, int nmodels, int ntokens, bool keep) {
  time_t now = time(NULL);
  char date[64];
  strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
  json_t *root = json_pack("{s:s, s:s, s:s, s:s, s:s, s:f}", "ffnc", FFNC_VERSION, "commit", FFNC_GIT_COMMIT, "date",
                           date, "card", card, "mode", "grad", "bf16_tflops", bf16_tflops);
  json_object_set_new(root, "policy", json_string(keep ? "keep" : "recompute"));
  json_t *ms = json_array();
  for (int m = 0; m < nmodels; m++) {
    json_t *rs = json_array();
    for (int i = 0; i < ntokens; i++) {
      GradResult *r = &res[m][i];
      json_t *o = json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:b}", "tokens", (json_int_t)r->tokens, "fwd_us",
                            r->fwd_us, "bwd_us", r->bwd_us, "fwd_bwd_us", r->step_us, "tflops", r->tflops, "floor_us",
                            r->floor_us, "check_ok", r->check_ok);
      json_object_set_new(o, "saved_bytes", json_integer((json_int_t)r->saved_bytes));
      json_object_set_new(o, "peak_extra_bytes", json_integer((json_int_t)(r->ws_bytes + r->derived_bytes + r->io_bytes)));
      json_object_set_new(o, "workspace_bytes", json_integer((json_int_t)r->ws_bytes));
      json_object_set_new(o, "weight_copy_bytes", json_integer((json_int_t)r->derived_bytes));
      json_object_set_new(o, "io_bytes", json_integer((json_int_t)r->io_bytes));
      json_object_set_new(o, "grad_bytes", json_integer((json_int_t)r->grad_bytes));
      json_array_append_new(rs, o);
    }
    json_t *mo = json_pack("{s:s, s:I, s:f, s:o}", "model", models[m].file, "param_bytes",
                           (json_int_t)models[m].param_bytes, "prepare_us", models[m].prepare_us, "results", rs);
    json_array_append_new(ms, mo);
  }
  json_object_set_new(root, "models", ms);
  if (json_dump_file(root, path, JSON_INDENT(1)) != 0)
    cli_error("bench: cannot write %s", path);
  json_decref(root);
}

int bench_grad_compile(const CompileArgs *ca, const char *const *files, int nfiles) {
  for (int m = 0; m < nfiles; m++) {
    GradModel md = {.file = files[m]};
    compile_grad_model(&md, ca);
    for (int i = 0; i < 2; i++)
      ffn_program_destroy(md.prog[i]);
    graph_destroy(md.g);
  }
  printf("compiled %d model%s and their backward graphs into the kernel cache\n", nfiles, nfiles > 1 ? "s" : "");
  return 0;
}

int bench_grad(const CompileArgs *ca, const char *const *files, int nfiles, const int64_t *tokens, int ntokens,
               int reps, const char *json, const char *card, double bf16_tflops, CUstream s) {
  cu = cu_api(NULL, 0);
  GradModel *models = calloc((size_t)nfiles, sizeof *models);
  GradResult **res = calloc((size_t)nfiles, sizeof *res);
  int failed = 0;
  for (int m = 0; m < nfiles; m++) {
    GradModel *md = &models[m];
    md->file = files[m];
    fprintf(stderr, "bench: compiling %s and its backward graph\n", md->file);
    compile_grad_model(md, ca);
    setup_grad_model(md);
    res[m] = calloc((size_t)ntokens, sizeof(GradResult));
    for (int k = 0; k < ntokens; k++)
      res[m][k] = bench_one(md, tokens[k], reps, bf16_tflops, s, &failed);
    md->prepare_us = time_prepare(md);
    print_grad_results(md, res[m], ntokens, ca->keep);
    fflush(stdout);
    for (int i = 0; i < 2; i++) {
      ffn_model_destroy(md->model[i]);
      ffn_program_destroy(md->prog[i]);
    }
    for (int i = 0; i < md->nw; i++)
      cu->cuMemFree(md->wdev[i]);
    free(md->wdev);
  }
  if (json)
    write_grad_json(json, card, bf16_tflops, models, res, nfiles, ntokens, ca->keep);
  for (int m = 0; m < nfiles; m++) {
    free(res[m]);
    graph_destroy(models[m].g);
  }
  free(res);
  free(models);
  if (failed)
    cli_error("bench: --grad: a gradient was not written or not finite (see above)");
  return failed ? EXIT_USER : 0;
}
