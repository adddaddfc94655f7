/* bench_tp.c: `ffnc bench --tp N FILE.ffn... --tokens N[,N...]`: tensor parallel on this
 * machine's GPUs.
 *
 * For each model: the N ranks' programs on devices 0..N-1 (one NCCL communicator each) and the
 * whole program on device 0, bound to the same random weights. For each token count rank 0's
 * outputs are checked against the whole program's, then both are timed (median of --reps; the
 * ranks run one host thread each, rank 0's time is reported), and NCCL's all-reduce of a
 * [T, D] tensor of the program's all-reduce type alone, on the same communicators: the
 * communication ceiling (a run does one per FFN sublayer, or one per fused run). Each rank's
 * weight bytes on its device are printed against the whole program's.
 *
 * Where the call is cut into row blocks (runtime/tp_overlap.c: each block's all-reduce
 * overlapped with the next blocks' kernels), the ranks run, are checked and are timed twice:
 * as the models' setting says (the policy, or FFNC_TP_BLOCKS / FFNC_TP_OVERLAP), and whole,
 * every all-reduce on the call's stream after the kernels before it (serial_us).
 */
#include "bench.h"
#include "runtime/dlpack_dtype.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const CuApi *cu;
static const NcclApi *nccl;

static void die(const char *file, ffn_status s) { exit(cli_fail("bench", file, s)); }

enum { MAX_IO = 16 };

/* One model on one device with its call's buffers. */
typedef struct {
  const char *file;
  ffn_model *m;
  CUstream stream;
  int nin, nout;
  DLTensor in[MAX_IO], out[MAX_IO];
  int64_t in_shape[MAX_IO][FFN_MAX_RANK], out_shape[MAX_IO][FFN_MAX_RANK];
  DType out_type[MAX_IO];
  size_t out_bytes[MAX_IO];
  CUdeviceptr reduce; /* the all-reduce alone: [T, D] */
  size_t reduce_count;
  int reduce_type;
  int reps;
  double us, reduce_us;
} Runner;

static void push(const Runner *r) { CK(cu->cuCtxPushCurrent(r->m->ctx)); }
static void pop(void) {
  CUcontext c;
  CK(cu->cuCtxPopCurrent(&c));
}

static void run_model(void *p, int rot, CUstream s) {
  Runner *r = p;
  (void)rot;
  ffn_status st = ffn_model_run(r->m, s, r->in, r->nin, r->out, r->nout);
  if (st != FFN_OK)
    die(r->file, st);
}

static void run_reduce(void *p, int rot, CUstream s) {
  Runner *r = p;
  (void)rot;
  int e = nccl->AllReduce((const void *)r->reduce, (void *)r->reduce, r->reduce_count, r->reduce_type, NCCL_SUM,
                          r->m->comm, s);
  if (e != NCCL_SUCCESS) {
    nccl_fail(nccl, e, "nccl->AllReduce()");
    cli_error("bench: %s", ffn_last_error());
    exit(EXIT_DEVICE);
  }
}

/* What a rank's thread does: one run (to check), or timings of the model, with the all-reduce
 * alone after it or not. */
typedef enum { RANK_RUN, RANK_TIME, RANK_TIME_MODEL } RankWork;
typedef struct {
  Runner *r;
  RankWork work;
} RankJob;

static void *rank_job(void *p) {
  RankJob *j = p;
  push(j->r);
  if (j->work == RANK_RUN) {
    run_model(j->r, 0, j->r->stream);
    CK(cu->cuStreamSynchronize(j->r->stream));
  } else {
    j->r->us = time_runs(run_model, j->r, 1, j->r->reps, j->r->stream);
    if (j->work == RANK_TIME && j->r->reduce_count)
      j->r->reduce_us = time_runs(run_reduce, j->r, 1, j->r->reps, j->r->stream);
  }
  pop();
  return NULL;
}

/* All ranks at once, one thread each (their collectives meet on the GPUs). */
static void run_ranks(Runner *ranks, int n, RankWork work) {
  pthread_t *t = calloc((size_t)n, sizeof *t);
  RankJob *jobs = calloc((size_t)n, sizeof *jobs);
  if (!t || !jobs) {
    cli_error("bench: out of host memory");
    exit(EXIT_USER);
  }
  for (int i = 0; i < n; i++) {
    jobs[i] = (RankJob){&ranks[i], work};
    if (pthread_create(&t[i], NULL, rank_job, &jobs[i]) != 0) {
      cli_error("bench: cannot start the thread of rank %d", i);
      exit(EXIT_USER);
    }
  }
  for (int i = 0; i < n; i++)
    pthread_join(t[i], NULL);
  free(t);
  free(jobs);
}

static ffn_program *compile(const CompileArgs *base, const char *file, int tp, int rank) {
  CompileArgs ca = *base;
  ca.file = file;
  ca.tp = tp;
  ca.tp_rank = rank;
  ffn_options *o = NULL;
  ffn_program *p = NULL;
  ffn_status s = cli_options(&ca, &o);
  if (s == FFN_OK)
    s = ffn_program_compile_file(file, o, &p);
  ffn_options_destroy(o);
  if (s != FFN_OK)
    die(file, s);
  return p;
}

/* Random weights of the right scale, the same bound to every model (copied to each device;
 * each rank keeps its slices after prepare). */
static void bind_random_weights(const Graph *g, Runner *models, int n, const char *file) {
  for (int i = 0; i < g->nodes.len; i++) {
    const Node *w = GRAPH_NODE(g, i);
    if (w->op != OP_WEIGHT)
      continue;
    int64_t shape[FFN_MAX_RANK];
    size_t numel;
    DLDataType dl;
    void *h = random_weight(g, w, shape, &numel, &dl);
    DLTensor t = {h, {kDLCPU, 0}, w->shape.rank, dl, shape, NULL, 0};
    for (int m = 0; m < n; m++) {
      ffn_status s = ffn_model_bind_weight(models[m].m, w->name, &t);
      if (s != FFN_OK)
        die(file, s);
    }
    free(h);
  }
  for (int m = 0; m < n; m++) {
    ffn_status s = ffn_model_prepare(models[m].m);
    if (s != FFN_OK)
      die(file, s);
  }
}

/* The inputs for `tokens` (the same values on every device), the outputs, and the all-reduce
 * alone's buffer, on r's device. */
static void alloc_call(Runner *r, const ffn_program *p, int64_t tokens, void *const *host_in) {
  push(r);
  r->nin = ffn_program_num_inputs(p);
  r->nout = ffn_program_num_outputs(p);
  for (int i = 0; i < r->nin; i++) {
    ffn_tensor_info info;
    ffn_program_input_info(p, i, &info);
    size_t numel = 1;
    for (int d = 0; d < info.ndim; d++)
      numel *= (size_t)(r->in_shape[i][d] = info.shape[d] < 0 ? tokens : info.shape[d]);
    size_t bytes = (size_t)(info.dtype.bits / 8) * numel;
    CUdeviceptr d;
    CK(cu->cuMemAlloc(&d, bytes + 16));
    CK(cu->cuMemcpyHtoD(d, host_in[i], bytes));
    r->in[i] = (DLTensor){(void *)d, {kDLCUDA, r->m->device}, info.ndim, info.dtype, r->in_shape[i], NULL, 0};
  }
  for (int i = 0; i < r->nout; i++) {
    ffn_tensor_info info;
    ffn_program_output_info(p, i, &info);
    int nd;
    ffn_status s = ffn_model_output_shape(r->m, i, r->in, r->nin, r->out_shape[i], &nd);
    if (s != FFN_OK)
      die(r->file, s);
    size_t numel = 1;
    for (int d = 0; d < nd; d++)
      numel *= (size_t)r->out_shape[i][d];
    for (int t = 0; t < p->plan->ntensors; t++)
      if (p->plan->tensors[t].kind == PT_OUTPUT && p->plan->tensors[t].index == i)
        r->out_type[i] = p->plan->tensors[t].dtype;
    r->out_bytes[i] = dtype_bytes(r->out_type[i], numel);
    CUdeviceptr d;
    CK(cu->cuMemAlloc(&d, r->out_bytes[i] + 16));
    r->out[i] = (DLTensor){(void *)d, {kDLCUDA, r->m->device}, nd, info.dtype, r->out_shape[i], NULL, 0};
  }
  /* the program's first all-reduce sets the size and type */
  const Plan *plan = p->plan;
  r->reduce = 0;
  r->reduce_count = 0;
  for (int s = 0; s < plan->nsteps && r->m->comm; s++) {
    const PlanStep *ps = &plan->steps[s];
    if (ps->kind != STEP_ALLREDUCE)
      continue;
    const PlanTensor *t = &plan->tensors[ps->src];
    size_t numel = 1;
    for (int d = 0; d < t->rank; d++)
      numel *= (size_t)(t->dims[d].sym >= 0 ? tokens : t->dims[d].size);
    r->reduce_count = numel;
    r->reduce_type = nccl_dtype(t->dtype);
    CK(cu->cuMemAlloc(&r->reduce, dtype_bytes(t->dtype, numel) + 16));
    CK(cu->cuMemsetD8Async(r->reduce, 0, dtype_bytes(t->dtype, numel), r->stream));
    break;
  }
  pop();
}

static void free_call(Runner *r) {
  push(r);
  CK(cu->cuStreamSynchronize(r->stream));
  for (int i = 0; i < r->nin; i++)
    CK(cu->cuMemFree((CUdeviceptr)r->in[i].data));
  for (int i = 0; i < r->nout; i++)
    CK(cu->cuMemFree((CUdeviceptr)r->out[i].data));
  if (r->reduce)
    CK(cu->cuMemFree(r->reduce));
  pop();
}

/* The row blocks a call of `tokens` rows runs as on m (1: whole). */
static int call_blocks(const ffn_model *m, int64_t tokens) {
  int64_t starts[TP_MAX_BLOCKS + 1];
  return m->row_dim < 0 ? 1 : tp_row_blocks(tokens, m->tp_blocks, m->reduces, starts);
}

/* Largest relative error of a's outputs against b's. */
static double check(const Runner *a, const Runner *b) {
  double worst = 0;
  for (int i = 0; i < a->nout; i++) {
    void *ha = malloc(a->out_bytes[i] + 16), *hb = malloc(b->out_bytes[i] + 16);
    if (!ha || !hb) {
      cli_error("bench: out of host memory");
      exit(EXIT_USER);
    }
    push(a);
    CK(cu->cuMemcpyDtoH(ha, (CUdeviceptr)a->out[i].data, a->out_bytes[i]));
    pop();
    push(b);
    CK(cu->cuMemcpyDtoH(hb, (CUdeviceptr)b->out[i].data, b->out_bytes[i]));
    pop();
    double e = rel_err(ha, hb, a->out_type[i], a->out_bytes[i] / (dtype_bits(a->out_type[i]) / 8));
    if (e > worst || e != e)
      worst = e;
    free(ha);
    free(hb);
  }
  return worst;
}

/* Random host values for each input of the whole program at `tokens` rows into host_in; the
 * count of inputs, or -1 after a message. */
static int random_inputs(const ffn_program *whole, int64_t tokens, void *host_in[MAX_IO]) {
  int nin = ffn_program_num_inputs(whole);
  if (nin > MAX_IO || ffn_program_num_outputs(whole) > MAX_IO) {
    cli_error("bench: at most %d inputs and outputs", MAX_IO);
    return -1;
  }
  for (int i = 0; i < nin; i++) {
    ffn_tensor_info info;
    ffn_program_input_info(whole, i, &info);
    size_t numel = 1;
    for (int d = 0; d < info.ndim; d++)
      numel *= (size_t)(info.shape[d] < 0 ? tokens : info.shape[d]);
    DType t = DT_F32;
    for (int pt = 0; pt < whole->plan->ntensors; pt++)
      if (whole->plan->tensors[pt].kind == PT_INPUT && whole->plan->tensors[pt].index == i)
        t = whole->plan->tensors[pt].dtype;
    host_in[i] = random_buffer(t, numel, 0, 1);
  }
  return nin;
}

/* One token count: the ranks against the whole program on one GPU (and, where the call runs in
 * blocks, against the ranks with the all-reduces after the kernels); a row of the table.
 * Returns whether the ranks' results matched, or -1 after a message. */
static int bench_tp_tokens(Runner *run, int n, ffn_program **progs, ffn_program *whole, int64_t tokens, int reductions,
                           double tol) {
  void *host_in[MAX_IO];
  int nin = random_inputs(whole, tokens, host_in);
  if (nin < 0)
    return -1;
  for (int r = 0; r <= n; r++)
    alloc_call(&run[r], r < n ? progs[r] : whole, tokens, host_in);
  for (int i = 0; i < nin; i++)
    free(host_in[i]);
  push(&run[n]);
  run_model(&run[n], 0, run[n].stream);
  CK(cu->cuStreamSynchronize(run[n].stream));
  pop();
  run_ranks(run, n, RANK_RUN);
  double err = check(&run[0], &run[n]);
  push(&run[n]);
  run[n].us = time_runs(run_model, &run[n], 1, run[n].reps, run[n].stream);
  pop();
  run_ranks(run, n, RANK_TIME);
  double tp_us = run[0].us, serial_us = 0;
  int blocks = call_blocks(run[0].m, tokens);
  if (blocks > 1) { /* the same call whole: the all-reduces after the kernels, not beside them */
    int keep[64];
    for (int r = 0; r < n; r++)
      keep[r] = run[r].m->tp_blocks, run[r].m->tp_blocks = -1;
    run_ranks(run, n, RANK_RUN);
    double e = check(&run[0], &run[n]);
    err = e > err || e != e ? e : err;
    run_ranks(run, n, RANK_TIME_MODEL);
    serial_us = run[0].us;
    for (int r = 0; r < n; r++)
      run[r].m->tp_blocks = keep[r];
  }
  bool ok = err <= tol;
  char serial[32] = "-";
  if (blocks > 1)
    snprintf(serial, sizeof serial, "%.1f", serial_us);
  printf("%7lld %6d %10.1f %10s %10.1f %7.2fx %13.1f %14.1f  %s (%.1e)\n", (long long)tokens, blocks, tp_us, serial,
         run[n].us, run[n].us / tp_us, run[0].reduce_us, reductions * run[0].reduce_us, ok ? "ok" : "MISMATCH", err);
  fflush(stdout);
  for (int r = 0; r <= n; r++)
    free_call(&run[r]);
  return ok;
}

/* The table's heading: the all-reduces per run, each rank's share of the weights. */
static void print_tp_heading(const char *file, DType type, const Runner *run, int n, int reductions) {
  double whole_mib = (double)model_weight_bytes(run[n].m) / 1048576.0;
  printf("\n%s (%s), tensor parallel over %d GPUs: %d all-reduce%s per run\n", file, dtype_name(type), n, reductions,
         reductions == 1 ? "" : "s");
  printf("weights on the device: whole program %.1f MiB; rank", whole_mib);
  for (int r = 0; r < n; r++)
    printf(" %d %.1f MiB (%.2f)%s", r, (double)model_weight_bytes(run[r].m) / 1048576.0,
           (double)model_weight_bytes(run[r].m) / 1048576.0 / (whole_mib > 0 ? whole_mib : 1), r + 1 < n ? "," : "\n");
  printf("%7s %6s %10s %10s %10s %8s %13s %14s  %s\n", "tokens", "blocks", "tp_us", "serial_us", "1gpu_us", "speedup",
         "allreduce_us", "comm_floor_us", "check vs 1 GPU");
}

/* Models and streams for the ranks (run[0..n)) and the whole program on GPU 0 (run[n]), their
 * weights random and alike, the ranks' NCCL communicators; exits on failure. */
static void open_runners(Runner *run, int n, ffn_program **progs, ffn_program *whole, const Graph *g, const char *file,
                         int reps) {
  for (int r = 0; r <= n; r++) {
    ffn_status s = ffn_model_create(r < n ? progs[r] : whole, r < n ? r : 0, &run[r].m);
    if (s != FFN_OK)
      die(file, s);
    run[r].file = file;
    run[r].reps = reps;
    push(&run[r]);
    CK(cu->cuStreamCreate(&run[r].stream, CU_STREAM_NON_BLOCKING));
    pop();
  }
  run[n].m->tp_blocks = -1; /* the one-GPU baseline whole, whatever FFNC_TP_BLOCKS says */
  bind_random_weights(g, run, n + 1, file);
  ffn_model *ms[64];
  int devices[64];
  for (int r = 0; r < n; r++)
    ms[r] = run[r].m, devices[r] = r;
  ffn_status s = nccl_init_models(ms, devices, n);
  if (s != FFN_OK)
    die(file, s);
}

static void close_runners(Runner *run, int n) {
  for (int r = 0; r <= n; r++) {
    push(&run[r]);
    CK(cu->cuStreamDestroy(run[r].stream));
    pop();
    ffn_model_destroy(run[r].m);
  }
}

static int bench_model(const CompileArgs *ca, const char *file, int n, const int64_t *tokens, int ntokens, int reps) {
  CompileArgs one = *ca;
  one.file = file;
  one.tp = 1;
  one.tp_rank = 0;
  int status;
  Graph *g = cli_frontend(&one, &status);
  if (!g)
    return status;
  fprintf(stderr, "bench: compiling %s (the whole program and %d ranks)\n", file, n);
  ffn_program *whole = compile(ca, file, 1, 0);
  ffn_program **progs = calloc((size_t)n, sizeof *progs);
  Runner *run = calloc((size_t)n + 1, sizeof *run); /* run[0..n): the ranks, run[n]: the whole program */
  if (!progs || !run) {
    cli_error("bench: out of host memory");
    exit(EXIT_USER);
  }
  for (int r = 0; r < n; r++)
    progs[r] = compile(ca, file, n, r);
  open_runners(run, n, progs, whole, g, file, reps);
  DType type = g->noutputs ? g->outputs[0].node->dtype : DT_F32;
  int reductions = 0;
  for (int i = 0; i < progs[0]->plan->nsteps; i++)
    reductions += progs[0]->plan->steps[i].kind == STEP_ALLREDUCE;
  print_tp_heading(file, type, run, n, reductions);
  int rc = 0;
  double tol = type == DT_F32 ? 1e-3 : 2e-2; /* the partial sums are rounded to the type before the sum */
  for (int k = 0; k < ntokens && rc != -1; k++) {
    int ok = bench_tp_tokens(run, n, progs, whole, tokens[k], reductions, tol);
    rc = ok < 0 ? -1 : ok ? rc : 1;
  }
  close_runners(run, n);
  for (int r = 0; r < n; r++)
    ffn_program_destroy(progs[r]);
  ffn_program_destroy(whole);
  free(progs);
  free(run);
  graph_destroy(g);
  return rc ? EXIT_USER : 0;
}

int bench_tp(const CompileArgs *ca, const char *const *files, int nfiles, const int64_t *tokens, int ntokens, int reps) {
  if (ca->tp > 64) {
    cli_error("bench: --tp %d: at most 64 ranks", ca->tp);
    return EXIT_USAGE;
  }
  int rc; /* cmd_bench checked the GPUs and NCCL (cli_check_tp_devices) */
  char why[1024];
  if (!(cu = cu_api(why, sizeof why)) || !(nccl = nccl_api(why, sizeof why))) {
    cli_error("bench: %s", why);
    return EXIT_DEVICE;
  }
  int failed = 0;
  for (int f = 0; f < nfiles; f++)
    if ((rc = bench_model(ca, files[f], ca->tp, tokens, ntokens, reps)) != 0 && rc != EXIT_USER)
      return rc;
    else
      failed |= rc != 0;
  if (failed)
    cli_error("bench: a tensor-parallel run disagreed with the whole program (see MISMATCH above)");
  return failed ? EXIT_USER : 0;
}
