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

int run_gpu(const CompileArgs *ca, StFile *wf, StFile *inf, const char *weights_path, const char *out_path) {
  int nranks = ca->tp > 1 ? ca->tp : 1;
  char why[512];
  int rc = 0;
  if (nranks > 1 && (rc = cli_check_tp_devices("run", nranks)) != 0) /* before spending time compiling */
    return rc;
  if (ffn_device_count(why, sizeof why) == 0) {
    cli_error("%s", why);
    return EXIT_DEVICE;
  }
  ffn_program **progs = calloc((size_t)nranks, sizeof *progs);
  ffn_model **models = calloc((size_t)nranks, sizeof *models);
  ffn_status s = FFN_OK;
  for (int r = 0; r < nranks && s == FFN_OK; r++) {
    CompileArgs rank_args = *ca;
    rank_args.tp_rank = r;
    ffn_options *o = NULL;
    s = cli_options(&rank_args, &o);
    if (s == FFN_OK)
      s = ffn_program_compile_file(ca->file, o, &progs[r]);
    ffn_options_destroy(o);
  }
  if (s != FFN_OK)
    rc = fail(s);
  const Plan *p = progs[0] ? progs[0]->plan : NULL;
  DLTensor *in = NULL, **out = calloc((size_t)nranks, sizeof *out);
  int64_t(*shapes)[FFN_MAX_RANK] = NULL;
  DType *odt = NULL;
  void ***bufs = calloc((size_t)nranks, sizeof *bufs);
  if (rc == 0) {
    in = calloc((size_t)p->ninputs + 1, sizeof *in);
    shapes = calloc((size_t)p->noutputs + 1, sizeof *shapes);
    odt = calloc((size_t)p->noutputs + 1, sizeof *odt);
  }
  /* inputs by name, checked against the declarations */
  for (int t = 0; rc == 0 && t < p->ntensors; t++) {
    const PlanTensor *pt = &p->tensors[t];
    if (pt->kind == PT_OUTPUT)
      odt[pt->index] = pt->dtype;
    if (pt->kind != PT_INPUT)
      continue;
    const StTensor *st = st_find(inf, pt->name);
    if (!st) {
      cli_error("%s: missing input '%s'", st_label(inf), pt->name);
      rc = EXIT_USER;
    } else if (st->dtype != pt->dtype) {
      cli_error("%s: input '%s' is %s, the model declares %s", st_label(inf), pt->name, dtype_name(st->dtype),
                dtype_name(pt->dtype));
      rc = EXIT_USER;
    } else {
      in[pt->index] = (DLTensor){(void *)st->data, {kDLCPU, 0}, st->rank, dl_type(st->dtype), (int64_t *)st->shape, NULL, 0};
    }
  }
  for (int r = 0; r < nranks && rc == 0; r++) {
    if ((s = ffn_model_create(progs[r], r, &models[r])) != FFN_OK) {
      rc = fail(s);
      break;
    }
    if (ca->verbose && r == 0) /* which `ffnc tune` choices it uses, or why none */
      fprintf(stderr, "run: %s\n", ffn_model_tuning(models[r]));
    if (wf && (s = ffn_model_bind_weights_file(models[r], weights_path)) != FFN_OK)
      rc = fail(s);
    else if ((s = ffn_model_prepare(models[r])) != FFN_OK)
      rc = fail(s);
  }
  if (rc == 0 && nranks > 1) {
    int *devices = calloc((size_t)nranks, sizeof *devices);
    for (int r = 0; devices && r < nranks; r++)
      devices[r] = r;
    s = devices ? nccl_init_models(models, devices, nranks) : rt_error(FFN_ERR_OUT_OF_MEMORY, "out of host memory");
    free(devices);
    if (s != FFN_OK)
      rc = fail(s);
  }
  for (int r = 0; r < nranks && rc == 0; r++) {
    out[r] = calloc((size_t)p->noutputs + 1, sizeof **out);
    bufs[r] = calloc((size_t)p->noutputs + 1, sizeof(void *));
    for (int i = 0; i < p->noutputs && rc == 0; i++) {
      int nd;
      if ((s = ffn_model_output_shape(models[r], i, in, p->ninputs, shapes[i], &nd)) != FFN_OK) {
        rc = fail(s);
        break;
      }
      size_t numel = 1;
      for (int d = 0; d < nd; d++)
        numel *= (size_t)shapes[i][d];
      bufs[r][i] = malloc(dtype_bytes(odt[i], numel) + 16);
      out[r][i] = (DLTensor){bufs[r][i], {kDLCPU, 0}, nd, dl_type(odt[i]), shapes[i], NULL, 0};
    }
  }
  if (rc == 0 && (s = run_ranks(models, nranks, in, p->ninputs, out, p->noutputs)) != FFN_OK)
    rc = fail(s);
  if (rc == 0) {
    char err[512];
    StWriter *w = st_writer_create();
    for (int i = 0; i < p->noutputs && rc == 0; i++) {
      size_t numel = 1;
      for (int d = 0; d < out[0][i].ndim; d++)
        numel *= (size_t)shapes[i][d];
      if (st_writer_add(w, ffn_program_output_name(progs[0], i), odt[i], out[0][i].ndim, shapes[i], bufs[0][i],
                        dtype_bytes(odt[i], numel), err, sizeof err) != 0) {
        cli_error("%s", err);
        rc = EXIT_USER;
      }
    }
    if (rc == 0 && st_writer_save(w, out_path, err, sizeof err) != 0) {
      cli_error("%s", err);
      rc = EXIT_USER;
    }
    st_writer_destroy(w);
  }
  for (int r = 0; r < nranks; r++) {
    for (int i = 0; bufs[r] && i < p->noutputs; i++)
      free(bufs[r][i]);
    free(bufs[r]);
    free(out[r]);
    ffn_model_destroy(models[r]);
  }
  for (int r = 0; r < nranks; r++)
    ffn_program_destroy(progs[r]);
  free(bufs);
  free(in);
  free(out);
  free(shapes);
  free(odt);
  free(models);
  free(progs);
  return rc;
}
