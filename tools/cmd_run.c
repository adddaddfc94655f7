/* cmd_run.c: `ffnc run FILE.ffn --weights W --input IN --output OUT [--device gpu|cpu]`. */
#include "cli.h"
#include "include/ffn.h"
#include "runtime/rt.h"

#include <stdlib.h>
#include <string.h>

/* ranks[0..nranks-1]: the graphs of a tensor-parallel program's ranks (run in lockstep; rank
 * 0's outputs are written), or the one graph of the program. */
static int run_cpu(Graph *const *ranks, int nranks, StFile *wf, StFile *inf, const char *out_path) {
  InterpSources src = {cli_lookup_st, wf, cli_lookup_st, inf};
  Graph *g = ranks[0];
  RefTensor *outs = calloc((size_t)g->noutputs * (size_t)nranks, sizeof *outs);
  char err[512];
  int rc = 0;
  if ((nranks > 1 ? interp_run_tp((const Graph *const *)ranks, nranks, &src, outs, err, sizeof err)
                  : interp_run(g, &src, outs, err, sizeof err)) != 0) {
    cli_error("%s", err);
    free(outs);
    return EXIT_USER;
  }
  StWriter *w = st_writer_create();
  void **bufs = calloc((size_t)g->noutputs, sizeof *bufs);
  for (int i = 0; i < g->noutputs && rc == 0; i++) {
    RefTensor *t = &outs[i];
    int64_t numel = ref_numel(t);
    size_t nbytes = dtype_bytes(t->dtype, (size_t)numel);
    bufs[i] = malloc(nbytes ? nbytes : 1);
    for (int64_t j = 0; j < numel; j++)
      dtype_store(t->dtype, bufs[i], (size_t)j, t->data[j]);
    /* two outputs may name the same value; each is written under its own name */
    if (st_writer_add(w, g->outputs[i].name, t->dtype, t->rank, t->shape, bufs[i], nbytes, err, sizeof err) != 0) {
      cli_error("%s", err);
      rc = EXIT_USER;
    }
  }
  if (rc == 0 && st_writer_save(w, out_path, err, sizeof err) != 0) {
    cli_error("%s", err);
    rc = EXIT_USER;
  }
  st_writer_destroy(w);
  for (int i = 0; i < g->noutputs; i++)
    free(bufs[i]);
  for (int i = 0; i < g->noutputs * nranks; i++)
    ref_free(&outs[i]);
  free(bufs);
  free(outs);
  return rc;
}


static const char usage[] =
    "usage: ffnc run FILE.ffn --weights W.safetensors --input IN.safetensors --output OUT.safetensors\n"
    "                [--device gpu|cpu] [--arch sm_XX] [-O0..-O3] [--precision KEY=TYPE]... [--ffn-fusion A..B]... [-v]\n"
    "                [--tp N] [--grad] [--keep]\n"
    "Compiles FILE (JIT) and runs it once. Inputs are read by their `input` names, outputs written by\n"
    "their `output` names; dynamic dims are bound from the input shapes. --device cpu runs the reference\n"
    "interpreter and needs no GPU; the default is gpu where one is present, else cpu. -v: what NVRTC compiled\n"
    "and how long it took, on stderr. --tp N: the program sharded over N tensor-parallel ranks, rank 0's\n"
    "outputs written: on the GPU rank r runs on device r, one all-reduce per FFN sublayer through NCCL\n"
    "($FFNC_NCCL_LIBRARY, else libnccl.so.2; N GPUs needed); on the CPU the interpreter runs the ranks in\n"
    "lockstep. --grad: the backward graph instead, on the GPU or the CPU reference (with --tp, the CPU): its\n"
    "inputs are the program's and grad.OUTPUT for each output (`ffnc gen --grad` writes random ones), its\n"
    "outputs grad.INPUT and grad.WEIGHT (f32). --keep: the keep policy: without --grad the training forward\n"
    "(its outputs, then the saved tensors saved.NAME); with --grad the backward graph that reads them as\n"
    "inputs after grad.OUTPUT (`ffnc gen --grad --keep` computes them from the weights and inputs).\n";

enum { O_WEIGHTS, O_INPUT, O_OUTPUT, O_DEVICE, O_GRAD, O_KEEP };

typedef struct {
  CompileArgs ca;
  const char *wpath, *ipath, *opath, *device;
} RunArgs;

/* The command line into a; 0, or the exit status (-1: --help, printed). */
static int run_args(int argc, char **argv, RunArgs *a) {
  static const CliOpt opts[] = {CLI_OPT("--weights", "W.safetensors", O_WEIGHTS),
                                CLI_OPT("--input", "IN.safetensors", O_INPUT),
                                CLI_OPT("--output", "OUT.safetensors", O_OUTPUT),
                                CLI_OPT("--device", "gpu|cpu", O_DEVICE),
                                CLI_OPT("--grad", NULL, O_GRAD),
                                CLI_OPT("--keep", NULL, O_KEEP),
                                CLI_PASS_OPTIONS,
                                CLI_TARGET_OPTIONS,
                                {0}};
  *a = (RunArgs){.ca = {.opt_level = 3}};
  const char *v;
  CliParser p;
  cli_parser_init(&p, "run", opts, argc, argv);
  for (int id; (id = cli_next(&p, &v)) != CLI_END;) {
    if (id == CLI_HELP)
      return fputs(usage, stdout), -1;
    if (id == CLI_BAD || cli_compile_option("run", id, v, &a->ca) < 0)
      return EXIT_USAGE;
    if (id == O_WEIGHTS)
      a->wpath = v;
    else if (id == O_INPUT)
      a->ipath = v;
    else if (id == O_OUTPUT)
      a->opath = v;
    else if (id == O_DEVICE)
      a->device = v;
    else if (id == O_GRAD)
      a->ca.grad = true;
    else if (id == O_KEEP)
      a->ca.keep = true;
    else if (id == CLI_ARG && a->ca.file)
      return cli_error("run: unexpected argument '%s' (one FILE.ffn)", v), EXIT_USAGE;
    else if (id == CLI_ARG)
      a->ca.file = v;
  }
  if (!a->ca.file || !a->ipath || !a->opath)
    return cli_error("run: usage: ffnc run FILE.ffn --weights W.safetensors --input IN.safetensors --output OUT.safetensors"),
           EXIT_USAGE;
  if (a->device && strcmp(a->device, "cpu") != 0 && strcmp(a->device, "gpu") != 0)
    return cli_error("run: --device must be gpu or cpu, not '%s'", a->device), EXIT_USAGE;
  if (cli_check_tp("run", &a->ca, true) != 0)
    return EXIT_USAGE;
  if (a->ca.tp_rank_given)
    return cli_error("run: --tp-rank: ffnc run runs all the ranks of --tp N together (no rank runs alone)"), EXIT_USAGE;
  if (a->ca.grad && a->ca.tp > 1 && a->device && strcmp(a->device, "gpu") == 0)
    return cli_error("run: the backward graph of a tensor-parallel program on the GPU: not yet; --device cpu runs it"),
           EXIT_USER;
  if (a->ca.grad && a->ca.tp > 1)
    a->device = "cpu";
  return 0;
}

/* Without --device: the GPU where this machine has one for each rank (and NCCL for several),
 * else the CPU reference, saying why. */
static const char *pick_device(int nranks) {
  char why[1024];
  int count = ffn_device_count(why, sizeof why);
  const char *device = count >= nranks ? "gpu" : "cpu";
  if (count > 0 && count < nranks)
    snprintf(why, sizeof why, "--tp %d needs %d GPUs, this machine has %d", nranks, nranks, count);
  if (nranks > 1 && count >= nranks && !nccl_api(why, sizeof why))
    device = "cpu";
  if (strcmp(device, "cpu") == 0)
    fprintf(stderr, "ffnc: note: %s; running on the CPU reference interpreter\n", why);
  return device;
}

/* The program of rank r of nranks per rank (nranks 1: the whole program); NULL and *status on failure. */
static Graph **rank_graphs(const CompileArgs *ca, int nranks, int *status) {
  Graph **ranks = calloc((size_t)nranks, sizeof *ranks);
  if (!ranks)
    return cli_error("run: out of host memory"), *status = EXIT_USER, NULL;
  for (int r = 0; r < nranks; r++) {
    CompileArgs rank_args = *ca;
    rank_args.tp_rank = r;
    if (!(ranks[r] = cli_frontend(&rank_args, status))) {
      for (int k = 0; k < r; k++)
        graph_destroy(ranks[k]);
      free(ranks);
      return NULL;
    }
  }
  return ranks;
}

/* The weights and input files of a, opened; 0 or the exit status. */
static int open_files(const RunArgs *a, const Graph *g, StFile **wf, StFile **inf) {
  char err[512];
  bool needs_weights = false;
  for (int i = 0; i < g->nodes.len; i++)
    needs_weights |= GRAPH_NODE(g, i)->op == OP_WEIGHT;
  if (needs_weights && !a->wpath)
    return cli_error("run: %s reads weights: give them with --weights W.safetensors", a->ca.file), EXIT_USAGE;
  if (a->wpath && !(*wf = st_open(a->wpath, err, sizeof err)))
    return cli_error("%s", err), EXIT_USER;
  if (!(*inf = st_open(a->ipath, err, sizeof err)))
    return cli_error("%s", err), EXIT_USER;
  return 0;
}

int cmd_run(int argc, char **argv) {
  RunArgs a;
  int status = run_args(argc, argv, &a);
  if (status)
    return status < 0 ? 0 : status;
  int nranks = a.ca.tp > 1 ? a.ca.tp : 1;
  Graph **ranks = rank_graphs(&a.ca, nranks, &status);
  if (!ranks)
    return status;
  StFile *wf = NULL, *inf = NULL;
  int rc = open_files(&a, ranks[0], &wf, &inf);
  if (rc == 0) {
    const char *device = a.device ? a.device : pick_device(nranks);
    rc = strcmp(device, "cpu") == 0 ? run_cpu(ranks, nranks, wf, inf, a.opath) : run_gpu(&a.ca, wf, inf, a.wpath, a.opath);
  }
  st_close(wf);
  st_close(inf);
  for (int r = 0; r < nranks; r++)
    graph_destroy(ranks[r]);
  free(ranks);
  return rc;
}
