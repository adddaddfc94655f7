/* run_gpu.c: `ffnc run --device gpu`: compile (JIT), load, bind, run once, write outputs.
 *
 * With --tp N the program's N shares run on devices 0..N-1 of this process: each rank's
 * program compiled (--tp-rank r), a model per device bound to the same weights file (each
 * rank keeps its slices after prepare), one NCCL communicator per model (ncclCommInitAll),
 * and the ranks run at once, one host thread each; rank 0's outputs are written. */
#include "cli.h"
#include "runtime/dlpack_dtype.h"
#include "runtime/rt.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>


static DLDataType dl_type(DType t) {
  DLDataType d = {kDLOpaqueHandle, 0, 0}; /* no DLPack type: the run refuses the tensor by name */
  dtype_to_dl(t, &d);
  return d;
}

static int fail(ffn_status s) {
  const char *e = ffn_last_error();
  if (s == FFN_ERR_SOURCE)
    fputs(e, stderr);
  else
    cli_error("%s", e);
  return cli_status_exit(s);
}

int cli_check_tp_devices(const char *cmd, int ranks) {
  char why[512] = "";
  int count = ffn_device_count(why, sizeof why);
  if (count < ranks) {
    if (count == 0)
      cli_error("%s: --tp %d needs %d GPUs, this machine has none (%s)", cmd, ranks, ranks, why);
    else
      cli_error("%s: --tp %d needs %d GPUs, this machine has %d", cmd, ranks, ranks, count);
    return EXIT_DEVICE;
  }
  const NcclApi *nccl = nccl_api(why, sizeof why);
  if (!nccl) {
    cli_error("%s: %s", cmd, why);
    return EXIT_DEVICE;
  }
  return 0;
}

/* One rank's run on its own host thread: NCCL's collectives of the N ranks meet on the GPUs,
 * so the ranks' runs must be enqueued at once. */
typedef struct {
  ffn_model *m;
  const DLTensor *in, *out;
  int nin, nout;
  ffn_status status;
  char error[1024];
} RankRun;

static void *run_rank(void *p) {
  RankRun *r = p;
  r->status = ffn_model_run_host(r->m, r->in, r->nin, r->out, r->nout);
  if (r->status != FFN_OK) /* the last error is per thread */
    snprintf(r->error, sizeof r->error, "%s", ffn_last_error());
  return NULL;
}

/* Runs the ranks' models at once (one thread each; rank 0 on this one). */
static ffn_status run_ranks(ffn_model **models, int nranks, const DLTensor *in, int nin, DLTensor **outs, int nout) {
  RankRun *runs = calloc((size_t)nranks, sizeof *runs);
  pthread_t *threads = calloc((size_t)nranks, sizeof *threads);
  bool *started = calloc((size_t)nranks, sizeof *started);
  if (!runs || !threads || !started) {
    free(runs), free(threads), free(started);
    return rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
  }
  for (int r = 0; r < nranks; r++)
    runs[r] = (RankRun){models[r], in, outs[r], nin, nout, FFN_OK, ""};
  ffn_status s = FFN_OK;
  for (int r = 1; r < nranks; r++)
    if (pthread_create(&threads[r], NULL, run_rank, &runs[r]) != 0) {
      /* the ranks already started wait for this one in their all-reduce: nothing can undo
       * that, so this is fatal */
      cli_error("run: cannot start the thread of rank %d", r);
      exit(EXIT_USER);
    } else {
      started[r] = true;
    }
  run_rank(&runs[0]);
  for (int r = 1; r < nranks; r++)
    if (started[r])
      pthread_join(threads[r], NULL);
  for (int r = 0; r < nranks && s == FFN_OK; r++)
    if ((s = runs[r].status) != FFN_OK && nranks > 1)
      rt_error(s, "rank %d: %s", r, runs[r].error);
    else if (s != FFN_OK)
      rt_error(s, "%s", runs[r].error);
  free(runs), free(threads), free(started);
  return s;
}

/* One `ffnc run` on the GPU, rank by rank: what run_gpu's steps share, freed by run_free. */
typedef struct {
  int nranks;
  ffn_program **progs;
  ffn_model **models;
  const Plan *p;                     /* rank 0's plan: the ranks share inputs and outputs */
  DLTensor *in, **out;               /* in[input]; out[rank][output] */
  void ***bufs;                      /* bufs[rank][output]: host memory of out */
  int64_t (*shapes)[FFN_MAX_RANK];   /* shapes[output] */
  DType *odt;                        /* odt[output] */
} Run;

static int out_of_memory(void) {
  cli_error("run: out of host memory");
  return EXIT_USER;
}

/* Each rank's program (--tp-rank r), then the host arrays sized by rank 0's plan. */
static int compile_ranks(const CompileArgs *ca, Run *g) {
  g->progs = calloc((size_t)g->nranks, sizeof *g->progs);
  g->models = calloc((size_t)g->nranks, sizeof *g->models);
  g->out = calloc((size_t)g->nranks, sizeof *g->out);
  g->bufs = calloc((size_t)g->nranks, sizeof *g->bufs);
  if (!g->progs || !g->models || !g->out || !g->bufs)
    return out_of_memory();
  for (int r = 0; r < g->nranks; r++) {
    CompileArgs rank_args = *ca;
    rank_args.tp_rank = r;
    ffn_options *o = NULL;
    ffn_status s = cli_options(&rank_args, &o);
    if (s == FFN_OK)
      s = ffn_program_compile_file(ca->file, o, &g->progs[r]);
    ffn_options_destroy(o);
    if (s != FFN_OK)
      return fail(s);
  }
  g->p = g->progs[0]->plan;
  g->in = calloc((size_t)g->p->ninputs + 1, sizeof *g->in);
  g->shapes = calloc((size_t)g->p->noutputs + 1, sizeof *g->shapes);
  g->odt = calloc((size_t)g->p->noutputs + 1, sizeof *g->odt);
  return g->in && g->shapes && g->odt ? 0 : out_of_memory();
}

/* The inputs by name from the input file, checked against the declarations. */
static int bind_inputs(Run *g, StFile *inf) {
  for (int t = 0; t < g->p->ntensors; t++) {
    const PlanTensor *pt = &g->p->tensors[t];
    if (pt->kind == PT_OUTPUT)
      g->odt[pt->index] = pt->dtype;
    if (pt->kind != PT_INPUT)
      continue;
    const StTensor *st = st_find(inf, pt->name);
    if (!st) {
      cli_error("%s: missing input '%s'", st_label(inf), pt->name);
      return EXIT_USER;
    }
    if (st->dtype != pt->dtype) {
      cli_error("%s: input '%s' is %s, the model declares %s", st_label(inf), pt->name, dtype_name(st->dtype),
                dtype_name(pt->dtype));
      return EXIT_USER;
    }
    g->in[pt->index] = (DLTensor){(void *)st->data, {kDLCPU, 0}, st->rank, dl_type(st->dtype), (int64_t *)st->shape, NULL, 0};
  }
  return 0;
}

/* A model per rank on device r, its weights bound and prepared; with several, their NCCL
 * communicators. */
static int load_models(const CompileArgs *ca, Run *g, bool weights, const char *weights_path) {
  ffn_status s;
  for (int r = 0; r < g->nranks; r++) {
    if ((s = ffn_model_create(g->progs[r], r, &g->models[r])) != FFN_OK)
      return fail(s);
    if (ca->verbose && r == 0) /* which `ffnc tune` choices it uses, or why none */
      fprintf(stderr, "run: %s\n", ffn_model_tuning(g->models[r]));
    if (weights && (s = ffn_model_bind_weights_file(g->models[r], weights_path)) != FFN_OK)
      return fail(s);
    if ((s = ffn_model_prepare(g->models[r])) != FFN_OK)
      return fail(s);
  }
  if (g->nranks == 1)
    return 0;
  int *devices = calloc((size_t)g->nranks, sizeof *devices);
  if (!devices)
    return out_of_memory();
  for (int r = 0; r < g->nranks; r++)
    devices[r] = r;
  s = nccl_init_models(g->models, devices, g->nranks);
  free(devices);
  return s == FFN_OK ? 0 : fail(s);
}

/* Host memory for each rank's outputs, shaped by the inputs. */
static int alloc_outputs(Run *g) {
  const Plan *p = g->p;
  for (int r = 0; r < g->nranks; r++) {
    g->out[r] = calloc((size_t)p->noutputs + 1, sizeof **g->out);
    g->bufs[r] = calloc((size_t)p->noutputs + 1, sizeof(void *));
    if (!g->out[r] || !g->bufs[r])
      return out_of_memory();
    for (int i = 0; i < p->noutputs; i++) {
      int nd;
      ffn_status s = ffn_model_output_shape(g->models[r], i, g->in, p->ninputs, g->shapes[i], &nd);
      if (s != FFN_OK)
        return fail(s);
      size_t numel = 1;
      for (int d = 0; d < nd; d++)
        numel *= (size_t)g->shapes[i][d];
      if (!(g->bufs[r][i] = malloc(dtype_bytes(g->odt[i], numel) + 16)))
        return out_of_memory();
      g->out[r][i] = (DLTensor){g->bufs[r][i], {kDLCPU, 0}, nd, dl_type(g->odt[i]), g->shapes[i], NULL, 0};
    }
  }
  return 0;
}

/* Rank 0's outputs into a safetensors file (st_writer_save: whole or not at all). */
static int save_outputs(const Run *g, const char *out_path) {
  char err[512];
  int rc = 0;
  StWriter *w = st_writer_create();
  if (!w)
    return out_of_memory();
  for (int i = 0; i < g->p->noutputs && rc == 0; i++) {
    const DLTensor *o = &g->out[0][i];
    size_t numel = 1;
    for (int d = 0; d < o->ndim; d++)
      numel *= (size_t)o->shape[d];
    if (st_writer_add(w, ffn_program_output_name(g->progs[0], i), g->odt[i], o->ndim, o->shape, o->data,
                      dtype_bytes(g->odt[i], numel), err, sizeof err) != 0) {
      cli_error("%s", err);
      rc = EXIT_USER;
    }
  }
  if (rc == 0 && st_writer_save(w, out_path, err, sizeof err) != 0) {
    cli_error("%s", err);
    rc = EXIT_USER;
  }
  st_writer_destroy(w);
  return rc;
}

static void run_free(Run *g) {
  for (int r = 0; r < g->nranks; r++) {
    for (int i = 0; g->bufs && g->bufs[r] && i < g->p->noutputs; i++)
      free(g->bufs[r][i]);
    if (g->bufs)
      free(g->bufs[r]);
    if (g->out)
      free(g->out[r]);
    if (g->models)
      ffn_model_destroy(g->models[r]);
  }
  for (int r = 0; g->progs && r < g->nranks; r++)
    ffn_program_destroy(g->progs[r]);
  free(g->bufs), free(g->in), free(g->out), free(g->shapes), free(g->odt), free(g->models), free(g->progs);
}

int run_gpu(const CompileArgs *ca, StFile *wf, StFile *inf, const char *weights_path, const char *out_path) {
  Run g = {.nranks = ca->tp > 1 ? ca->tp : 1};
  char why[512];
  int rc;
  if (g.nranks > 1 && (rc = cli_check_tp_devices("run", g.nranks)) != 0) /* before spending time compiling */
    return rc;
  if (ffn_device_count(why, sizeof why) == 0) {
    cli_error("%s", why);
    return EXIT_DEVICE;
  }
  if ((rc = compile_ranks(ca, &g)) == 0 && (rc = bind_inputs(&g, inf)) == 0 &&
      (rc = load_models(ca, &g, wf != NULL, weights_path)) == 0 && (rc = alloc_outputs(&g)) == 0) {
    ffn_status s = run_ranks(g.models, g.nranks, g.in, g.p->ninputs, g.out, g.p->noutputs);
    rc = s == FFN_OK ? save_outputs(&g, out_path) : fail(s);
  }
  run_free(&g);
  return rc;
}
