/* cmd_gen.c: `ffnc gen FILE.ffn --weights W.safetensors [--inputs IN.safetensors --dim T=N] [--seed S]`.
 *
 * Random weights of the right names, shapes and types for any model, so nobody needs a
 * download to try ffnc. Values are scaled so activations stay O(1) through deep stacks:
 * a matrix used in a product with inner dimension K gets N(0, 1/K); a norm gain 1 + N(0, 0.1^2);
 * other vectors (biases) N(0, 0.1^2); inputs N(0, 1). A pre-quantized fp8 weight gets those
 * values quantized per output row: its fp8 codes and an f32 [rows, 1] scale tensor.
 */
#include "cli.h"
#include "ir/size_limits.h"
#include "runtime/randinit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  void **bufs;
  int n;
} Bufs;

static void keep_buf(Bufs *keep, void *p) {
  keep->bufs = realloc(keep->bufs, sizeof(void *) * (size_t)(keep->n + 1));
  keep->bufs[keep->n++] = p;
}

static void *fill(Bufs *keep, const char *name, uint64_t seed, DType dt, int64_t numel, double mean, double std,
                  size_t *nbytes) {
  void *p = randinit_tensor(name, seed, dt, numel, mean, std, nbytes);
  if (!p) {
    cli_error("gen: out of host memory for %lld elements", (long long)numel);
    exit(EXIT_USER);
  }
  keep_buf(keep, p);
  return p;
}

/* A pre-quantized weight as fp8 checkpoints hold it: the codes, and the scales as f32
 * [rows, 1] under the scale tensor's name (Llama-3.1-405B-FP8's layout). */
static int add_prequant(StWriter *w, Bufs *keep, const Graph *g, const Node *n, uint64_t seed, int64_t numel,
                        double mean, double std) {
  (void)g;
  void *codes;
  float *scale;
  size_t nbytes;
  char err[512];
  if (numel < 0 || randinit_prequant(n, seed, mean, std, &codes, &nbytes, &scale) != 0) {
    cli_error("gen: out of host memory for %lld elements", (long long)numel);
    exit(EXIT_USER);
  }
  keep_buf(keep, codes);
  keep_buf(keep, scale);
  int64_t shape[FFN_MAX_RANK], sshape[2] = {n->shape.rank ? n->shape.d[0].size : 1, 1};
  for (int d = 0; d < n->shape.rank; d++)
    shape[d] = n->shape.d[d].size;
  if (st_writer_add(w, n->name, n->stored, n->shape.rank, shape, codes, nbytes, err, sizeof err) != 0 ||
      st_writer_add(w, n->scale, DT_F32, 2, sshape, scale, sizeof(float) * (size_t)sshape[0], err, sizeof err) != 0) {
    cli_error("gen: %s", err);
    return EXIT_USER;
  }
  return 0;
}

typedef struct {
  char name[64];
  int64_t size;
} DimArg;

/* --dim NAME=SIZE; each dim once. */
/* An input written by this call, by name, for the training forward (add_saved). */
typedef struct {
  const char *name;
  RawTensor t;
} GenInput;

typedef struct {
  const GenInput *v;
  int n;
} GenInputs;

static int lookup_gen(void *ctx, const char *name, RawTensor *out) {
  const GenInputs *in = ctx;
  for (int i = 0; i < in->n; i++)
    if (strcmp(in->v[i].name, name) == 0)
      return *out = in->v[i].t, 0;
  return -1;
}

/* The keep backward graph g's inputs saved.NAME: the training forward (the program compiled with
 * --keep, without --grad) run on the CPU reference with the weights at wpath and the inputs just
 * generated, its saved outputs stored in their types. */
static int add_saved(const CompileArgs *ca, const Graph *g, const char *wpath, const GenInput *gen, int ngen,
                     StWriter *w, Bufs *keep) {
  CompileArgs fa = *ca;
  fa.grad = false;
  int status;
  Graph *fwd = cli_frontend(&fa, &status);
  if (!fwd)
    return status;
  char err[512];
  StFile *wf = st_open(wpath, err, sizeof err);
  RefTensor *outs = calloc((size_t)fwd->noutputs + 1, sizeof *outs);
  GenInputs in = {gen, ngen};
  InterpSources src = {cli_lookup_st, wf, lookup_gen, &in};
  int rc = 0;
  if (!wf || interp_run(fwd, &src, outs, err, sizeof err) != 0) {
    cli_error("gen: the training forward: %s", err);
    rc = EXIT_USER;
  }
  for (int i = 0; i < g->nodes.len && rc == 0; i++) {
    const Node *n = GRAPH_NODE(g, i);
    if (n->op != OP_INPUT || strncmp(n->name, "saved.", 6) != 0)
      continue;
    int o = 0;
    while (o < fwd->noutputs && strcmp(fwd->outputs[o].name, n->name) != 0)
      o++;
    if (o == fwd->noutputs) {
      cli_error("gen: the training forward has no output '%s'", n->name);
      rc = EXIT_USER;
      break;
    }
    const RefTensor *t = &outs[o];
    int64_t numel = ref_numel(t);
    size_t nbytes = dtype_bytes(n->dtype, (size_t)numel);
    void *p = malloc(nbytes ? nbytes : 1);
    if (!p) {
      cli_error("gen: out of host memory for %lld elements", (long long)numel);
      rc = EXIT_USER;
      break;
    }
    keep_buf(keep, p);
    for (int64_t j = 0; j < numel; j++)
      dtype_store(n->dtype, p, (size_t)j, t->data[j]);
    if (st_writer_add(w, n->name, n->dtype, t->rank, t->shape, p, nbytes, err, sizeof err) != 0) {
      cli_error("gen: %s", err);
      rc = EXIT_USER;
    }
  }
  for (int i = 0; i < fwd->noutputs; i++)
    ref_free(&outs[i]);
  free(outs);
  st_close(wf);
  graph_destroy(fwd);
  return rc;
}

static int parse_dim(const char *s, DimArg *dims, int *n) {
  const char *eq = strchr(s, '=');
  long long size;
  if (!eq || eq == s || (size_t)(eq - s) >= sizeof dims[0].name || cli_parse_int(eq + 1, 1, FFN_MAX_DIM, &size)) {
    cli_error("gen: --dim %s: expected NAME=SIZE with 1 <= SIZE <= %lld", s, (long long)FFN_MAX_DIM);
    return -1;
  }
  for (int j = 0; j < *n; j++)
    if (strlen(dims[j].name) == (size_t)(eq - s) && strncmp(dims[j].name, s, (size_t)(eq - s)) == 0) {
      cli_error("gen: --dim %s: dim %s given more than once", s, dims[j].name);
      return -1;
    }
  if (*n == 16) {
    cli_error("gen: at most 16 --dim options");
    return -1;
  }
  snprintf(dims[*n].name, sizeof dims[*n].name, "%.*s", (int)(eq - s), s);
  dims[(*n)++].size = size;
  return 0;
}

static const char usage[] =
    "usage: ffnc gen FILE.ffn [--weights W.safetensors] [--inputs IN.safetensors --dim T=N...] [--seed S]\n"
    "                [--grad [--keep]]\n"
    "Writes random weights (and inputs, with every dynamic dim given by a --dim, one per dim) of the\n"
    "names, shapes and types FILE declares. Matrices ~ N(0, 1/K), norm gains ~ 1 + N(0, 0.01),\n"
    "biases ~ N(0, 0.01), inputs ~ N(0, 1); a weight declared `f8e4m3 scale` (or f8e5m2) gets those values\n"
    "quantized per output row: its codes and an f32 [rows, 1] scale tensor. The same seed (an integer\n"
    ">= 0, default 1) gives the same tensors. --grad: the inputs of the backward graph, with a random\n"
    "grad.OUTPUT for each output (`ffnc run --grad`); with --keep, those of the keep policy's backward graph,\n"
    "whose saved tensors saved.NAME are computed by the training forward on the CPU reference from the\n"
    "weights (--weights, written in the same call) and the inputs (`ffnc run --grad --keep`).\n";

enum { O_WEIGHTS, O_INPUTS, O_SEED, O_DIM, O_GRAD, O_KEEP };

typedef struct {
  CompileArgs ca;
  const char *wpath, *ipath;
  DimArg dims[16];
  int ndims;
  long long seed;
} GenArgs;

/* The command line into a; 0, or the exit status (-1: --help, printed). */
static int gen_args(int argc, char **argv, GenArgs *a) {
  static const CliOpt opts[] = {CLI_OPT("--weights", "W.safetensors", O_WEIGHTS),
                                CLI_OPT("--inputs", "IN.safetensors", O_INPUTS),
                                CLI_OPT("--seed", "S", O_SEED),
                                CLI_MANY("--dim", "NAME=SIZE", O_DIM),
                                CLI_OPT("--grad", NULL, O_GRAD),
                                CLI_OPT("--keep", NULL, O_KEEP),
                                {0}};
  *a = (GenArgs){.ca = {.opt_level = 3}, .seed = 1};
  const char *v;
  CliParser p;
  cli_parser_init(&p, "gen", opts, argc, argv);
  for (int id; (id = cli_next(&p, &v)) != CLI_END;) {
    if (id == CLI_HELP)
      return fputs(usage, stdout), -1;
    if (id == CLI_BAD || (id == O_SEED && cli_int("gen", "--seed", v, 0, INT64_MAX, &a->seed) != 0) ||
        (id == O_DIM && parse_dim(v, a->dims, &a->ndims) != 0))
      return EXIT_USAGE;
    if (id == O_WEIGHTS)
      a->wpath = v;
    else if (id == O_INPUTS)
      a->ipath = v;
    else if (id == O_GRAD)
      a->ca.grad = true;
    else if (id == O_KEEP)
      a->ca.keep = true;
    else if (id == CLI_ARG && a->ca.file)
      return cli_error("gen: unexpected argument '%s' (one FILE.ffn)", v), EXIT_USAGE;
    else if (id == CLI_ARG)
      a->ca.file = v;
  }
  if (!a->ca.file || (!a->wpath && !a->ipath))
    return cli_error("gen: usage: ffnc gen FILE.ffn [--weights W.safetensors] [--inputs IN.safetensors --dim T=N]"),
           EXIT_USAGE;
  if (a->ca.keep && !a->ca.grad)
    return cli_error("gen: --keep needs --grad (the training forward's inputs are the program's: ffnc gen without --keep)"),
           EXIT_USAGE;
  if (a->ca.keep && a->ipath && !a->wpath)
    return cli_error("gen: --grad --keep --inputs: give --weights too (the saved tensors are the training forward's, "
                     "computed from the weights)"),
           EXIT_USAGE;
  return 0;
}

/* Writes w to path and destroys it; rc, or EXIT_USER if rc was 0 and the file could not be written. */
static int save(StWriter *w, const char *path, int rc) {
  char err[512];
  if (rc == 0 && st_writer_save(w, path, err, sizeof err) != 0) {
    cli_error("gen: %s", err);
    rc = EXIT_USER;
  }
  st_writer_destroy(w);
  return rc;
}

/* Every weight of g, random, into the safetensors file a->wpath. */
static int gen_weights(const GenArgs *a, Graph *g, Bufs *keep) {
  StWriter *w = st_writer_create();
  char err[512];
  int rc = 0;
  for (int i = 0; i < g->nodes.len && rc == 0; i++) {
    Node *n = GRAPH_NODE(g, i);
    if (n->op != OP_WEIGHT)
      continue;
    int64_t shape[FFN_MAX_RANK], numel = 1;
    for (int d = 0; d < n->shape.rank; d++)
      shape[d] = n->shape.d[d].size;
    if (shape_check_limits(n->shape.rank, shape, &numel) != SHAPE_OK) /* check refuses these */
      numel = -1;
    double mean, std;
    randinit_weight_scale(g, n, &mean, &std);
    size_t nbytes;
    if (n->stored != DT_NONE) {
      rc = add_prequant(w, keep, g, n, (uint64_t)a->seed, numel, mean, std);
      continue;
    }
    void *p = fill(keep, n->name, (uint64_t)a->seed, n->dtype, numel, mean, std, &nbytes);
    if (st_writer_add(w, n->name, n->dtype, n->shape.rank, shape, p, nbytes, err, sizeof err) != 0) {
      cli_error("gen: %s", err);
      rc = EXIT_USER;
    }
  }
  return save(w, a->wpath, rc);
}

/* The shape of input n with the dynamic dims' sizes dims[] (-1: not given); 0 or the exit status. */
static int input_shape(const Graph *g, const Node *n, const int64_t *dims, int64_t *shape, int64_t *numel) {
  for (int d = 0; d < n->shape.rank; d++) {
    Dim dm = n->shape.d[d];
    if (dm.sym >= 0 && dims[dm.sym] < 0)
      return cli_error("gen: input '%s' needs dim %s: give it with --dim %s=N", n->name, g->dims[dm.sym].name,
                       g->dims[dm.sym].name),
             EXIT_USAGE;
    shape[d] = dm.sym >= 0 ? dims[dm.sym] : dm.size;
  }
  ShapeLimit why = shape_check_limits(n->shape.rank, shape, numel);
  if (why != SHAPE_OK)
    return cli_error("gen: input '%s' with these --dim sizes is too large: %s", n->name, shape_limit_words(why)),
           EXIT_USAGE;
  return 0;
}

/* Every input of g, random (with --grad --keep the saved tensors computed: add_saved), into the
 * safetensors file a->ipath. */
static int gen_inputs(const GenArgs *a, Graph *g, const int64_t *dims, Bufs *keep) {
  StWriter *w = st_writer_create();
  GenInput *gen = calloc((size_t)g->nodes.len + 1, sizeof *gen);
  char err[512];
  int ngen = 0, rc = gen ? 0 : (cli_error("gen: out of host memory"), EXIT_USER);
  for (int i = 0; i < g->nodes.len && rc == 0; i++) {
    Node *n = GRAPH_NODE(g, i);
    int64_t shape[FFN_MAX_RANK], numel = 1;
    if (n->op != OP_INPUT || (rc = input_shape(g, n, dims, shape, &numel)) != 0)
      continue;
    if (a->ca.keep && strncmp(n->name, "saved.", 6) == 0)
      continue; /* add_saved, below */
    size_t nbytes;
    void *p = fill(keep, n->name, (uint64_t)a->seed ^ 0x5eed, n->dtype, numel, 0.0, 1.0, &nbytes);
    if (st_writer_add(w, n->name, n->dtype, n->shape.rank, shape, p, nbytes, err, sizeof err) != 0) {
      cli_error("gen: %s", err);
      rc = EXIT_USER;
    }
    GenInput *gi = &gen[ngen++];
    *gi = (GenInput){n->name, {n->dtype, n->shape.rank, {0}, p, nbytes}};
    memcpy(gi->t.shape, shape, sizeof gi->t.shape);
  }
  if (rc == 0 && a->ca.keep)
    rc = add_saved(&a->ca, g, a->wpath, gen, ngen, w, keep);
  free(gen);
  return save(w, a->ipath, rc);
}

int cmd_gen(int argc, char **argv) {
  GenArgs a;
  int status = gen_args(argc, argv, &a);
  if (status)
    return status < 0 ? 0 : status;
  Graph *g = cli_frontend(&a.ca, &status);
  if (!g)
    return status;
  int64_t dims[64] = {0};
  for (int d = 0; d < g->ndims && d < 64; d++) {
    dims[d] = -1;
    for (int j = 0; j < a.ndims; j++)
      if (strcmp(a.dims[j].name, g->dims[d].name) == 0)
        dims[d] = a.dims[j].size;
  }
  int rc = 0;
  for (int j = 0; j < a.ndims && rc == 0; j++)
    if (graph_find_dim(g, a.dims[j].name) < 0)
      rc = (cli_error("gen: --dim %s: the model has no dynamic dim '%s'", a.dims[j].name, a.dims[j].name), EXIT_USAGE);
  Bufs keep = {0};
  if (rc == 0 && a.wpath)
    rc = gen_weights(&a, g, &keep);
  if (rc == 0 && a.ipath)
    rc = gen_inputs(&a, g, dims, &keep);
  for (int i = 0; i < keep.n; i++)
    free(keep.bufs[i]);
  free(keep.bufs);
  graph_destroy(g);
  return rc;
}
