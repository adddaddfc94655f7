/* grad_keep_test.c: the keep policy on the GPU against the CPU reference.
 *
 *   grad_keep_test [MODEL.ffn]      (default examples/llama3_tiny.ffn)
 *
 * Compiles the training forward and the backward graph of the keep policy
 * (ffn_options_set_grad_policy(o, FFN_GRAD_KEEP)), binds the same random weights to both, then
 * for each token count (FFNC_TEST_TOKENS, default 1, 64, 1000): random inputs and output
 * gradients; ffn_model_run of the training forward into device tensors poisoned first (NaN
 * bytes), its outputs and saved tensors compared with the reference's training forward;
 * ffn_model_run_grad with the saved tensors the GPU wrote, passed by name (ffn_program_input_name),
 * into f32 gradients poisoned first, each compared with the source's gradients (the recompute
 * backward graph on the CPU: the same values as keep there, grad_keep_test in tests/grad) and with
 * the keep backward graph's reference fed the GPU's own saved tensors (the backward alone, the
 * program's tolerance). Then the refusals: the saved tensors left out, one with a wrong shape.
 * Then every token count again with the backward graph sharing the training forward's workspace
 * (ffn_model_share_workspace), against the same references with the same tolerances, and the
 * shared pool holding one workspace after each forward and backward pair on the stream; a
 * backward without FFN_GRAD_CONSUME_SAVED leaves the saved tensors bit for bit as they were.
 * Then every count once more with FFN_GRAD_CONSUME_SAVED (the backward writes over the saved
 * tensors): the same gradients within the same tolerances.
 * The seed is printed (FFNC_TEST_SEED replays it). Exits 77 (skip) where there is no GPU. */
#include "gpu/gpu_util.h"
#include "runtime/rt.h"

static const CuApi *cu;

#define CUCALL(call)                                                                 \
  do {                                                                               \
    CUresult r_ = (call);                                                            \
    if (r_ != CUDA_SUCCESS) {                                                        \
      const char *name_ = "?";                                                       \
      cu->cuGetErrorName(r_, &name_);                                                \
      printf("FAIL: %s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, name_);      \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

/* A device tensor of ref's shape and type, poisoned (NaN bytes) or holding host data. */
typedef struct {
  CUdeviceptr ptr;
  size_t bytes;
  DLTensor dl;
} DevTensor;

static void dev_alloc(DevTensor *d, const RefTensor *like, DType dt, const void *host, CUstream s) {
  d->bytes = dtype_bytes(dt, (size_t)ref_numel(like));
  d->ptr = 0;
  if (d->bytes)
    CUCALL(cu->cuMemAlloc(&d->ptr, d->bytes));
  if (d->bytes && host)
    CUCALL(cu->cuMemcpyHtoDAsync(d->ptr, host, d->bytes, s));
  else if (d->bytes)
    CUCALL(cu->cuMemsetD8Async(d->ptr, 0xff, d->bytes, s));
  d->dl = (DLTensor){(void *)d->ptr, {kDLCUDA, 0}, like->rank, dl_of(dt), (int64_t *)like->shape, NULL, 0};
}

static void *download(const DevTensor *d, CUstream s) {
  void *h = malloc(d->bytes + 16);
  if (d->bytes)
    CUCALL(cu->cuMemcpyDtoHAsync(h, d->ptr, d->bytes, s));
  CUCALL(cu->cuStreamSynchronize(s));
  return h;
}

static Graph *graph(const char *text, size_t len, const char *path, bool grad, bool keep) {
  Diags d;
  diags_init(&d);
  DriverOptions o = {.sm = 90, .opt_level = 3, .grad = grad, .keep = keep};
  Graph *g = driver_model_graph(text, len, path, &o, &d);
  if (!g) {
    printf("FAIL: %s", d.text);
    exit(1);
  }
  diags_free(&d);
  return g;
}

/* Both models are bound to weights of the same values, made from the training forward's graph:
 * the scale of a random weight follows the first product that reads it (randinit_weight_scale),
 * and in the backward graph that can be a dgrad product of the other orientation (other values:
 * the cause of the seventh session's "wrong" keep gradients). */
static ffn_model *model(const char *text, size_t len, const char *path, bool grad, const TensorSet *w) {
  ffn_options *o;
  ffn_program *p;
  ffn_model *m;
  ffn_options_create(&o);
  ffn_options_set_grad(o, grad);
  ffn_options_set_grad_policy(o, FFN_GRAD_KEEP);
  if (ffn_program_compile(text, len, path, o, &p) != FFN_OK || ffn_model_create(p, 0, &m) != FFN_OK) {
    printf("FAIL: compile or create: %s\n", ffn_last_error());
    exit(1);
  }
  printf("%s (%s, keep): %d kernels, %d inputs, %d outputs\n", path, grad ? "backward graph" : "training forward",
         ffn_program_num_kernels(p), ffn_program_num_inputs(p), ffn_program_num_outputs(p));
  if (bind_weights(m, w) != 0)
    exit(1);
  ffn_options_destroy(o);
  return m; /* the program stays alive with the model's process (a test) */
}

static int find_name(const char *const *names, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(names[i], name) == 0)
      return i;
  return -1;
}

/* The refusals: the nsaved saved tensors (the last inputs) left out, and one with a row too many. */
static int check_refusals(ffn_model *bwd, CUstream s, DLTensor *in, int nin, int nsaved, DLTensor *grads, int ng) {
  int rc = 0;
  ffn_status st = ffn_model_run_grad(bwd, s, in, nin - nsaved, grads, ng, 0);
  if (st != FFN_ERR_INVALID_ARGUMENT || !strstr(ffn_last_error(), "saved")) {
    printf("FAIL: without the saved tensors: status %d '%s'\n", (int)st, ffn_last_error());
    rc = -1;
  }
  int64_t shape[FFN_MAX_RANK];
  DLTensor good = in[nin - 1], bad = good;
  memcpy(shape, bad.shape, sizeof(int64_t) * (size_t)bad.ndim);
  shape[0] += 1;
  bad.shape = shape;
  in[nin - 1] = bad;
  st = ffn_model_run_grad(bwd, s, in, nin, grads, ng, 0);
  in[nin - 1] = good;
  if (st != FFN_ERR_TENSOR || !strstr(ffn_last_error(), "saved.")) {
    printf("FAIL: a misshapen saved tensor: status %d '%s'\n", (int)st, ffn_last_error());
    rc = -1;
  }
  printf("%s refusals, the last: '%s'\n", rc ? "FAIL" : "ok  ", ffn_last_error());
  return rc;
}

/* What every token count's check reads: the graphs of the training forward (gf), of the keep
 * backward (gk) and of the recompute backward (gr: the source's gradients), the forward's
 * weights, the seed and the stream. */
typedef struct {
  Graph *gf, *gk, *gr;
  const TensorSet *wf;
  uint64_t seed;
  DType narrow;
  CUstream s;
} Case;

/* The training forward then the backward at `tokens` tokens (the k-th count) on c->s, against the
 * reference; with `shared` the two models share one workspace, and after the pair it must be
 * one; flags: ffn_model_run_grad's (0: the saved tensors must be left as they were). Returns the
 * number of failures (exits on one that stops the test). */
static int check_tokens(const Case *c, ffn_model *fwd, ffn_model *bwd, int64_t tokens, int k, bool shared,
                        unsigned flags) {
  Graph *gf = c->gf, *gk = c->gk, *gr = c->gr;
  CUstream s = c->s;
  int failed = 0;
  char label[64];
  snprintf(label, sizeof label, "T=%lld%s%s", (long long)tokens, shared ? " (shared workspace)" : "",
           flags & FFN_GRAD_CONSUME_SAVED ? " (saved tensors consumed)" : "");
  TensorSet in = {0};
  make_inputs(gr, tokens, c->seed + 1000 + (uint64_t)k, &in); /* x..., grad.OUT... */
  RefTensor ref_f[64] = {0}, ref_g[64] = {0}, ref_k[64] = {0};
  if (reference(gf, c->wf, &in, ref_f) != 0 || reference(gr, c->wf, &in, ref_g) != 0)
    exit(1);
  /* the training forward: the program's inputs (the first of `in`), outputs poisoned */
  int nfin = 0;
  DevTensor din[64], dout[64], dgrad[64];
  DLTensor fin[64], fout[64];
  for (int i = 0; i < in.n; i++) {
    const RawTensor *t = &in.items[i].t;
    RefTensor like = {t->dtype, t->rank, {0}, NULL};
    memcpy(like.shape, t->shape, sizeof t->shape);
    dev_alloc(&din[i], &like, t->dtype, t->data, s);
    din[i].dl.shape = (int64_t *)t->shape; /* not like's: it goes out of scope */
    if (strncmp(in.items[i].name, "grad.", 5) != 0)
      fin[nfin++] = din[i].dl;
  }
  for (int i = 0; i < gf->noutputs; i++) {
    dev_alloc(&dout[i], &ref_f[i], ref_f[i].dtype, NULL, s);
    fout[i] = dout[i].dl;
  }
  if (ffn_model_run(fwd, s, fin, nfin, fout, gf->noutputs) != FFN_OK) {
    printf("FAIL %s: training forward: %s\n", label, ffn_last_error());
    exit(1);
  }
  TensorSet saved = in; /* the backward's reference reads the GPU's saved tensors */
  saved.items = malloc(sizeof(Named) * (size_t)(in.n + gf->noutputs));
  memcpy(saved.items, in.items, sizeof(Named) * (size_t)in.n);
  for (int i = 0; i < gf->noutputs; i++) {
    void *h = download(&dout[i], s);
    failed += compare_one(label, "source", gf->outputs[i].name, tolerance_of(gf, narrowest_type(gf), true),
                          ref_f[i].dtype, h, &ref_f[i]) != 0;
    if (strncmp(gf->outputs[i].name, "saved.", 6) == 0)
      saved.items[saved.n++] = (Named){(char *)gf->outputs[i].name,
                                       {.dtype = ref_f[i].dtype, .rank = ref_f[i].rank, .data = h, .nbytes = dout[i].bytes}};
    else
      free(h);
    if (strncmp(gf->outputs[i].name, "saved.", 6) == 0)
      memcpy(saved.items[saved.n - 1].t.shape, ref_f[i].shape, sizeof ref_f[i].shape);
  }
  if (reference(gk, c->wf, &saved, ref_k) != 0)
    exit(1);
  /* the backward: inputs by name, from the inputs or the forward's outputs */
  DLTensor bin[64], grads[64];
  const char *fnames[64];
  for (int i = 0; i < gf->noutputs; i++)
    fnames[i] = gf->outputs[i].name;
  int nbin = 0, nsaved = 0;
  for (int i = 0; i < gk->nodes.len; i++) { /* interface order: ival[0] */
    const Node *n = GRAPH_NODE(gk, i);
    if (n->op != OP_INPUT)
      continue;
    /* saved tensors from the forward's outputs; the rest (an input may share an output's name,
     * as a residual stream's x does) from the inputs */
    int at = strncmp(n->name, "saved.", 6) == 0 ? find_name(fnames, gf->noutputs, n->name) : -1, j = 0;
    for (; j < in.n && strcmp(in.items[j].name, n->name) != 0; j++)
      ;
    bin[n->ival[0]] = at >= 0 ? dout[at].dl : din[j].dl;
    nbin++;
    nsaved += at >= 0;
  }
  for (int i = 0; i < gk->noutputs; i++) {
    dev_alloc(&dgrad[i], &ref_g[i], DT_F32, NULL, s);
    grads[i] = dgrad[i].dl;
  }
  if (ffn_model_run_grad(bwd, s, bin, nbin, grads, gk->noutputs, flags) != FFN_OK) {
    printf("FAIL %s: backward: %s\n", label, ffn_last_error());
    exit(1);
  }
  for (int i = 0, j = in.n; i < gf->noutputs && !(flags & FFN_GRAD_CONSUME_SAVED); i++) /* read, never written */
    if (strncmp(gf->outputs[i].name, "saved.", 6) == 0) {
      void *h = download(&dout[i], s);
      if (memcmp(h, saved.items[j++].t.data, dout[i].bytes) != 0) {
        printf("FAIL %s: the backward changed %s without FFN_GRAD_CONSUME_SAVED\n", label, gf->outputs[i].name);
        failed++;
      }
      free(h);
    }
  for (int i = 0; i < gk->noutputs; i++) {
    void *h = download(&dgrad[i], s);
    failed += compare_one(label, "source", gk->outputs[i].name, tolerance_of(gk, c->narrow, true), DT_F32, h,
                          &ref_g[i]) != 0;
    failed += compare_one(label, "keep program", gk->outputs[i].name, tolerance_of(gk, c->narrow, false), DT_F32, h,
                          &ref_k[i]) != 0;
    free(h);
  }
  /* one stream, the backward after the forward: both calls took the same workspace */
  if (shared && (bwd->pool != fwd->pool || fwd->pool->nws != 1)) {
    printf("FAIL %s: the shared pool holds %d workspaces, not 1\n", label, fwd->pool->nws);
    failed++;
  }
  if (k == 0 && !shared && !flags)
    failed += nsaved && check_refusals(bwd, s, bin, nbin, nsaved, grads, gk->noutputs) != 0;
  CUCALL(cu->cuStreamSynchronize(s));
  for (int i = 0; i < in.n; i++)
    if (din[i].ptr)
      CUCALL(cu->cuMemFree(din[i].ptr));
  for (int i = 0; i < gf->noutputs; i++)
    if (dout[i].ptr)
      CUCALL(cu->cuMemFree(dout[i].ptr));
  for (int i = 0; i < gk->noutputs; i++)
    if (dgrad[i].ptr)
      CUCALL(cu->cuMemFree(dgrad[i].ptr));
  for (int i = in.n; i < saved.n; i++)
    free((void *)saved.items[i].t.data);
  free(saved.items);
  for (int i = 0; i < 64; i++)
    ref_free(&ref_f[i]), ref_free(&ref_g[i]), ref_free(&ref_k[i]);
  set_free(&in);
  return failed;
}

int main(int argc, char **argv) {
  require_gpu();
  const char *rel = argc > 1 ? argv[1] : "examples/llama3_tiny.ffn";
  size_t len;
  char *path = source_path(rel), *text = source_text(rel, &len);
  Graph *gf = graph(text, len, path, false, true), *gk = graph(text, len, path, true, true);
  Graph *gr = graph(text, len, path, true, false);
  uint64_t seed = test_seed();
  TensorSet wf = {0}, wk = {0};
  cu = cu_api(NULL, 0);
  CUdevice dev;
  CUcontext ctx;
  CUstream s;
  CUCALL(cu->cuDeviceGet(&dev, 0));
  CUCALL(cu->cuDevicePrimaryCtxRetain(&ctx, dev));
  CUCALL(cu->cuCtxPushCurrent(ctx));
  CUCALL(cu->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  make_weights(gf, seed, &wf);
  make_weights(gk, seed, &wk); /* the backward's weights (a subset), with the forward's values */
  for (int i = 0; i < wk.n; i++) {
    int j = 0;
    for (; j < wf.n && strcmp(wf.items[j].name, wk.items[i].name) != 0; j++)
      ;
    if (j == wf.n || wf.items[j].t.nbytes != wk.items[i].t.nbytes) {
      printf("FAIL: the backward's weight '%s' is not the forward's\n", wk.items[i].name);
      return 1;
    }
    memcpy((void *)wk.items[i].t.data, wf.items[j].t.data, wk.items[i].t.nbytes);
  }
  ffn_model *fwd = model(text, len, path, false, &wf), *bwd = model(text, len, path, true, &wk);
  if (!getenv("FFNC_TEST_TOKENS"))
    setenv("FFNC_TEST_TOKENS", "1,64,1000", 1);
  int64_t tokens[16];
  int nt = test_tokens(tokens, 16), failed = 0;
  Case c = {gf, gk, gr, &wf, seed, narrowest_type(gk), s};
  /* each model with its own workspace, then the backward taking the training forward's (which
   * already holds one: its old one is freed, the forward's grows for it) */
  for (int pass = 0; pass < 3; pass++) { /* own workspaces, shared, shared and consumed */
    bool shared = pass > 0;
    if (pass == 1 && ffn_model_share_workspace(bwd, fwd) != FFN_OK) {
      printf("FAIL: ffn_model_share_workspace: %s\n", ffn_last_error());
      return 1;
    }
    for (int k = 0; k < nt; k++)
      failed += check_tokens(&c, fwd, bwd, tokens[k], k, shared, pass == 2 ? FFN_GRAD_CONSUME_SAVED : 0);
  }
  CUCALL(cu->cuStreamDestroy(s));
  ffn_model_destroy(fwd); /* first: the shared workspace lives on with bwd */
  ffn_model_destroy(bwd);
  CUCALL(cu->cuCtxPopCurrent(&ctx));
  CUCALL(cu->cuDevicePrimaryCtxRelease(dev));
  set_free(&wf);
  set_free(&wk);
  graph_destroy(gf), graph_destroy(gk), graph_destroy(gr);
  free(text);
  free(path);
  printf("%s\n", failed ? "FAILED" : "PASSED");
  return failed ? 1 : 0;
}
