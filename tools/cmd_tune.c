/* cmd_tune.c: `ffnc tune FILE.ffn [--tokens N[,N...]] [--weights W]`: ffn_model_tune on GPU 0,
 * the choices saved in the kernel cache for later runs (runtime/tune.c). */
#include "bench.h"
#include "cli.h"
#include "include/ffn.h"
#include "runtime/randinit.h"
#include "runtime/dlpack_dtype.h"

#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: ffnc tune FILE.ffn [--tokens N[,N...]] [--weights W.safetensors] [--arch sm_XX] [-O0..-O3]\n"
    "                 [--precision KEY=TYPE]... [--ffn-fusion A..B]... [-v]\n"
    "Times every tile configuration each GEMM kernel of FILE was compiled with, and the split-K factors it\n"
    "can take, on GPU 0 at each token count (default 1,16,64,128,256,512,1024,4096,8192; at most 32), on\n"
    "random activations with the weights of --weights (random weights of the right scale without it), and\n"
    "saves the fastest per count in the kernel cache ($FFNC_CACHE_DIR), keyed by the device, the driver,\n"
    "this ffnc and the kernel. Later runs of the program on such a device use them for a call's token\n"
    "count (the largest tuned count at or below it; the built-in rule below the first); FFNC_NO_TUNE=1\n"
    "turns that off. A line per GEMM on stderr as it is done, the table on stdout. -v: the NVRTC step, and\n"
    "which tuned choices existed before.\n";

enum { O_TOKENS, O_WEIGHTS };

static void report(void *user, const ffn_tune_progress *p) {
  (void)user;
  fprintf(stderr, "tune: [%d/%d] %s %s N %lld%s K %lld:", p->gemm, p->gemms, p->kernel, p->dtype, (long long)p->n,
          p->streams == 2 ? "x2" : "", (long long)p->k);
  for (int b = 0; b < p->nbuckets; b++)
    fprintf(stderr, " %lld %s/%d %.1fus%s", (long long)p->rows[b], p->config[b], p->splits[b], p->us[b],
            p->us[b] < p->default_us[b] ? "*" : "");
  fprintf(stderr, " (%.1f s)\n", p->seconds);
  printf("%s: %s, N %lld x %d streams, K %lld\n", p->kernel, p->dtype, (long long)p->n, p->streams, (long long)p->k);
  printf("  %7s  %-20s %6s %10s %10s %7s\n", "rows", "config", "splits", "time_us", "rule_us", "gain");
  for (int b = 0; b < p->nbuckets; b++)
    printf("  %7lld  %-20s %6d %10.1f %10.1f %6.2fx\n", (long long)p->rows[b], p->config[b], p->splits[b], p->us[b],
           p->default_us[b], p->us[b] > 0 ? p->default_us[b] / p->us[b] : 1.0);
  fflush(stdout);
}

/* Random weights of the right scale (randinit_weight_scale) for every weight of g, bound to m. */
static int bind_random(ffn_model *m, const Graph *g) {
  for (int i = 0; i < g->nodes.len; i++) {
    Node *n = GRAPH_NODE(g, i);
    if (n->op != OP_WEIGHT)
      continue;
    if (n->stored != DT_NONE)
      return cli_error("tune: weight '%s' is pre-quantized (%s codes with scales): give its checkpoint with --weights",
                       n->name, dtype_name(n->stored)),
             EXIT_USER;
    int64_t shape[FFN_MAX_RANK], numel = 1;
    for (int d = 0; d < n->shape.rank; d++)
      numel *= shape[d] = n->shape.d[d].size;
    double mean, std;
    randinit_weight_scale(g, n, &mean, &std);
    DLDataType dl;
    if (!dtype_to_dl(n->dtype, &dl))
      return cli_error("tune: weight '%s' is %s, which DLPack tensors cannot carry", n->name, dtype_name(n->dtype)),
             EXIT_USER;
    void *h = random_buffer(n->dtype, (size_t)numel, mean, std); /* the bench's: fast, the right scale */
    DLTensor t = {h, {kDLCPU, 0}, n->shape.rank, dl, shape, NULL, 0};
    ffn_status s = ffn_model_bind_weight(m, n->name, &t);
    free(h);
    if (s != FFN_OK)
      return cli_error("tune: %s", ffn_last_error()), cli_status_exit(s);
  }
  return 0;
}

/* The command line into ca, wpath and tokens; -1 to go on, else the exit status (0 after --help). */
static int tune_args(int argc, char **argv, CompileArgs *ca, const char **wpath, int64_t tokens[32], int *ntokens) {
  static const CliOpt opts[] = {CLI_OPT("--tokens", "N[,N...]", O_TOKENS),
                                CLI_OPT("--weights", "W.safetensors", O_WEIGHTS),
                                CLI_MANY("--precision", "KEY=TYPE", CO_PRECISION),
                                CLI_MANY("--ffn-fusion", "A..B", CO_FFN_FUSION),
                                CLI_TARGET_OPTIONS,
                                {0}};
  const char *v;
  CliParser p;
  cli_parser_init(&p, "tune", opts, argc, argv);
  for (int id; (id = cli_next(&p, &v)) != CLI_END;) {
    if (id == CLI_HELP)
      return fputs(usage, stdout), 0;
    if (id == CLI_BAD || cli_compile_option("tune", id, v, ca) < 0)
      return EXIT_USAGE;
    if (id == O_TOKENS && cli_int_list("tune", "--tokens", v, 1, 2147483647, tokens, 32, ntokens) != 0)
      return EXIT_USAGE;
    if (id == O_WEIGHTS)
      *wpath = v;
    else if (id == CLI_ARG && ca->file)
      return cli_error("tune: unexpected argument '%s' (one FILE.ffn)", v), EXIT_USAGE;
    else if (id == CLI_ARG)
      ca->file = v;
  }
  if (!ca->file)
    return cli_error("tune: usage: ffnc tune FILE.ffn [--tokens N[,N...]] [--weights W.safetensors]"), EXIT_USAGE;
  return -1;
}

int cmd_tune(int argc, char **argv) {
  CompileArgs ca = {.opt_level = 3};
  const char *wpath = NULL;
  int64_t tokens[32];
  int ntokens = 0, rc = tune_args(argc, argv, &ca, &wpath, tokens, &ntokens);
  if (rc >= 0)
    return rc;
  char why[1024];
  if (ffn_device_count(why, sizeof why) == 0) /* before spending time compiling */
    return cli_error("tune: %s; tuning measures on the GPU", why), EXIT_DEVICE;
  int status = 0;
  Graph *g = wpath ? NULL : cli_frontend(&ca, &status); /* the weights' names, shapes and scales */
  if (!wpath && !g)
    return status;
  ffn_options *o = NULL;
  ffn_program *prog = NULL;
  ffn_model *m = NULL;
  ffn_status s = cli_options(&ca, &o);
  if (s == FFN_OK)
    s = ffn_program_compile_file(ca.file, o, &prog);
  if (s == FFN_OK)
    s = ffn_model_create(prog, 0, &m);
  if (s != FFN_OK) {
    cli_error("tune: %s", ffn_last_error());
    status = cli_status_exit(s);
    goto out;
  }
  if (ca.verbose)
    fprintf(stderr, "tune: before: %s\n", ffn_model_tuning(m));
  if (wpath && (s = ffn_model_bind_weights_file(m, wpath)) != FFN_OK) {
    cli_error("tune: %s", ffn_last_error());
    status = cli_status_exit(s);
    goto out;
  }
  if (!wpath && (status = bind_random(m, g)) != 0)
    goto out;
  if ((s = ffn_model_prepare(m)) == FFN_OK)
    s = ffn_model_tune(m, ntokens ? tokens : NULL, ntokens, report, NULL);
  if (s != FFN_OK) {
    cli_error("tune: %s", ffn_last_error());
    status = cli_status_exit(s);
    goto out;
  }
  printf("%s\n", ffn_model_tuning(m));
out:
  ffn_model_destroy(m);
  ffn_program_destroy(prog);
  ffn_options_destroy(o);
  graph_destroy(g);
  return status;
}
