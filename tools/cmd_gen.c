/* cmd_gen.c: `ffnc gen FILE.ffn --weights W.safetensors [--inputs IN.safetensors --dim T=N]`.
 *
 * Random weights of the right names, shapes and types for any model, so nobody needs a
 * download to try ffnc. Values are scaled so activations stay O(1) through deep stacks:
 * a matrix used in a product with inner dimension K gets N(0, 1/K); a norm gain 1 + N(0, 0.1^2);
 * other vectors (biases) N(0, 0.1^2); inputs N(0, 1).
 */
#include "cli.h"
#include "ir/size_limits.h"
#include "runtime/randinit.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  void **bufs;
  int n;
} Bufs;

static void *fill(Bufs *keep, const char *name, uint64_t seed, DType dt, int64_t numel, double mean, double std,
                  size_t *nbytes) {
  void *p = randinit_tensor(name, seed, dt, numel, mean, std, nbytes);
  if (!p) {
    cli_error("gen: out of host memory for %lld elements", (long long)numel);
    exit(EXIT_USER);
  }
  keep->bufs = realloc(keep->bufs, sizeof(void *) * (size_t)(keep->n + 1));
  keep->bufs[keep->n++] = p;
  return p;
}

static int parse_dim(const char *s, const char **name, int64_t *value) {
  const char *eq = strchr(s, '=');
  if (!eq || eq == s)
    return -1;
  char *end;
  errno = 0;
  long long v = strtoll(eq + 1, &end, 10);
  if (*end || errno == ERANGE || v <= 0 || v > FFN_MAX_DIM)
    return -1;
  static char names[16][64];
  static int used;
  if (used == 16 || (size_t)(eq - s) >= sizeof names[0])
    return -1;
  memcpy(names[used], s, (size_t)(eq - s));
  names[used][eq - s] = 0;
  *name = names[used++];
  *value = v;
  return 0;
}

int cmd_gen(int argc, char **argv) {
  CompileArgs ca = {.opt_level = 3};
  const char *wpath = NULL, *ipath = NULL, *v;
  const char *dim_names[16];
  int64_t dim_values[16];
  int ndimargs = 0;
  uint64_t seed = 1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0) {
      printf("usage: ffnc gen FILE.ffn [--weights W.safetensors] [--inputs IN.safetensors --dim T=N ...] [--seed S]\n"
             "Writes random weights (and inputs, with every dynamic dim given by --dim) of the names, shapes\n"
             "and types FILE declares. Matrices ~ N(0, 1/K), norm gains ~ 1 + N(0, 0.01), biases ~ N(0, 0.01),\n"
             "inputs ~ N(0, 1). The same seed gives the same tensors.\n");
      return 0;
    }
    if ((v = cli_value(argc, argv, &i, "--weights")))
      wpath = v;
    else if ((v = cli_value(argc, argv, &i, "--inputs")))
      ipath = v;
    else if ((v = cli_value(argc, argv, &i, "--seed")))
      seed = strtoull(v, NULL, 10);
    else if ((v = cli_value(argc, argv, &i, "--dim"))) {
      if (ndimargs == 16 || parse_dim(v, &dim_names[ndimargs], &dim_values[ndimargs]) != 0) {
        cli_error("gen: --dim %s: expected NAME=SIZE with 1 <= SIZE <= %lld", v, (long long)FFN_MAX_DIM);
        return EXIT_USAGE;
      }
      ndimargs++;
    } else if (argv[i][0] == '-' || ca.file) {
      cli_error("gen: unexpected argument '%s'", argv[i]);
      return EXIT_USAGE;
    } else
      ca.file = argv[i];
  }
  if (!ca.file || (!wpath && !ipath)) {
    cli_error("gen: usage: ffnc gen FILE.ffn [--weights W.safetensors] [--inputs IN.safetensors --dim T=N]");
    return EXIT_USAGE;
  }
  int status;
  Graph *g = cli_frontend(&ca, &status);
  if (!g)
    return status;
  int64_t dims[64] = {0};
  for (int d = 0; d < g->ndims && d < 64; d++) {
    dims[d] = -1;
    for (int j = 0; j < ndimargs; j++)
      if (strcmp(dim_names[j], g->dims[d].name) == 0)
        dims[d] = dim_values[j];
  }
  for (int j = 0; j < ndimargs; j++)
    if (graph_find_dim(g, dim_names[j]) < 0) {
      cli_error("gen: --dim %s: the model has no dynamic dim '%s'", dim_names[j], dim_names[j]);
      graph_destroy(g);
      return EXIT_USAGE;
    }
  Bufs keep = {0};
  char err[512];
  int rc = 0;
  if (wpath) {
    StWriter *w = st_writer_create();
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
      void *p = fill(&keep, n->name, seed, n->dtype, numel, mean, std, &nbytes);
      if (st_writer_add(w, n->name, n->dtype, n->shape.rank, shape, p, nbytes, err, sizeof err) != 0) {
        cli_error("gen: %s", err);
        rc = EXIT_USER;
      }
    }
    if (rc == 0 && st_writer_save(w, wpath, err, sizeof err) != 0) {
      cli_error("gen: %s", err);
      rc = EXIT_USER;
    }
    st_writer_destroy(w);
  }
  if (ipath && rc == 0) {
    StWriter *w = st_writer_create();
    for (int i = 0; i < g->nodes.len && rc == 0; i++) {
      Node *n = GRAPH_NODE(g, i);
      if (n->op != OP_INPUT)
        continue;
      int64_t shape[FFN_MAX_RANK], numel = 1;
      for (int d = 0; d < n->shape.rank; d++) {
        Dim dm = n->shape.d[d];
        if (dm.sym >= 0 && dims[dm.sym] < 0) {
          cli_error("gen: input '%s' needs dim %s: give it with --dim %s=N", n->name, g->dims[dm.sym].name,
                    g->dims[dm.sym].name);
          rc = EXIT_USAGE;
          break;
        }
        shape[d] = dm.sym >= 0 ? dims[dm.sym] : dm.size;
      }
      if (rc)
        break;
      ShapeLimit why = shape_check_limits(n->shape.rank, shape, &numel);
      if (why != SHAPE_OK) {
        cli_error("gen: input '%s' with these --dim sizes is too large: %s", n->name, shape_limit_words(why));
        rc = EXIT_USAGE;
        break;
      }
      size_t nbytes;
      void *p = fill(&keep, n->name, seed ^ 0x5eed, n->dtype, numel, 0.0, 1.0, &nbytes);
      if (st_writer_add(w, n->name, n->dtype, n->shape.rank, shape, p, nbytes, err, sizeof err) != 0) {
        cli_error("gen: %s", err);
        rc = EXIT_USER;
      }
    }
    if (rc == 0 && st_writer_save(w, ipath, err, sizeof err) != 0) {
      cli_error("gen: %s", err);
      rc = EXIT_USER;
    }
    st_writer_destroy(w);
  }
  for (int i = 0; i < keep.n; i++)
    free(keep.bufs[i]);
  free(keep.bufs);
  graph_destroy(g);
  return rc;
}
