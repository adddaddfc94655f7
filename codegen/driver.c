/* driver.c: source text -> checked IR -> passes -> Plan and CUDA source. Used by the C API
 * (ffn_program_compile) and by `ffnc build`. */
#include "driver.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdlib.h>
#include <string.h>

int parse_arch(const char *s, int *sm, char *err, size_t errlen) {
  if (!s || strncmp(s, "sm_", 3) != 0 || !s[3]) {
    snprintf(err, errlen, "--arch %s: expected sm_XX (sm_80, sm_89, sm_90...)", s ? s : "(null)");
    return -1;
  }
  char *end;
  long v = strtol(s + 3, &end, 10);
  if (*end || v < 10 || v > 200) {
    snprintf(err, errlen, "--arch %s: expected sm_XX (sm_80, sm_89, sm_90...)", s);
    return -1;
  }
  if (v < 80) {
    snprintf(err, errlen, "--arch %s: ffnc generates tensor-core code for sm_80 and newer", s);
    return -1;
  }
  /* The architectures NVRTC knows: another number (sm_99) is a usage error here, not a
   * compiler failure after the whole source (exit 3). */
  static const int known[] = {80, 86, 87, 89, 90, 100, 101, 103, 110, 120, 121};
  bool ok = false;
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    ok |= known[i] == v;
  if (!ok) {
    snprintf(err, errlen, "--arch %s: unknown architecture (sm_80 sm_86 sm_87 sm_89 sm_90 sm_100 sm_101 sm_103 sm_110 "
                          "sm_120 sm_121)", s);
    return -1;
  }
  *sm = (int)v;
  return 0;
}

/* inputs keep their declaration order through the passes; the saved tensors a backward graph
 * of the keep policy reads come last (they sit where the forward computed them) */
static void number_inputs(Graph *g) {
  int idx = 0;
  for (int saved = 0; saved < 2; saved++)
    for (int i = 0; i < g->nodes.len; i++) {
      Node *n = GRAPH_NODE(g, i);
      if (n->op == OP_INPUT && (strncmp(n->name, "saved.", 6) == 0) == saved)
        n->ival[0] = idx++;
    }
}

/* The graph pass_grad makes for these options */
static GradGraph grad_graph(const DriverOptions *o) {
  return !o->keep ? GRAD_RECOMPUTE : o->grad ? GRAD_KEEP : GRAD_FORWARD;
}

Graph *driver_model_graph(const char *text, size_t len, const char *name, const DriverOptions *o, Diags *d) {
  FrontendOptions fo = {o->prec, o->nprec, o->fuse, o->nfuse};
  Graph *g = frontend_compile_string(text, len, name, &fo, d);
  if (!g)
    return NULL;
  number_inputs(g);
  SourceFile src = {name, text, len};
  Compile c = {.g = g, .src = &src, .diags = d, .arch = o->sm, .opt_level = o->opt_level, .tp = o->tp,
               .tp_rank = o->tp_rank};
  if (pass_ffn_fusion(&c) != 0 || c.broken || pass_tp(&c) != 0 || c.broken ||
      ((o->grad || o->keep) && (pass_grad(&c, grad_graph(o)) != 0 || c.broken))) {
    graph_destroy(g);
    return NULL;
  }
  number_inputs(g); /* again: the backward graph has an input per output gradient */
  return g;
}

int driver_compile_graph(Graph *g, const SourceFile *src, const DriverOptions *o, Diags *d, Plan **plan) {
  Compile c = {.g = g, .src = src, .diags = d, .arch = o->sm, .opt_level = o->opt_level, .tp = o->tp,
               .tp_rank = o->tp_rank, .weights_as_stored = grad_graph(o) == GRAD_FORWARD && o->keep};
  int rc = passes_run(&c, o->dump_after, o->dump ? o->dump : stdout);
  if (rc == 0 && plan)
    rc = codegen_cuda(&c, plan);
  return rc;
}

int driver_compile(const char *text, size_t len, const char *name, const DriverOptions *o, Diags *d, Plan **plan,
                   Graph **graph_out) {
  FrontendOptions fo = {o->prec, o->nprec, o->fuse, o->nfuse};
  bool training = o->grad || o->keep;
  Graph *g = training ? driver_model_graph(text, len, name, o, d) : frontend_compile_string(text, len, name, &fo, d);
  if (!g)
    return -1;
  if (training) /* driver_model_graph applied the requested FFN Fusion: the passes must not look again */
    g->nfuse = 0;
  number_inputs(g);
  SourceFile src = {name, text, len};
  int rc = driver_compile_graph(g, &src, o, d, plan);
  if (rc == 0 && graph_out)
    *graph_out = g;
  else
    graph_destroy(g);
  return rc;
}

/* A model description is small text; this is far above any real one (10,000 unrolled
 * Llama layers are a few MB) and keeps every offset an int in the front end. */
#define MAX_SOURCE_BYTES ((size_t)1 << 30)

/* Only regular files: a device (/dev/zero) would be read until memory runs out, a FIFO
 * would block, and neither has a size to check before reading. The size is checked from
 * fstat, before anything is read, and the read stops at it. */
int read_file(const char *path, char **text, size_t *len, char *err, size_t errlen) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* O_NONBLOCK: opening a FIFO must not hang */
  if (fd < 0) {
    snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return -1;
  }
  struct stat st;
  const char *why = fstat(fd, &st) != 0 ? strerror(errno)
                    : S_ISDIR(st.st_mode) ? "is a directory"
                    : !S_ISREG(st.st_mode) ? "not a regular file (a device, FIFO or socket)"
                    : (uint64_t)st.st_size > MAX_SOURCE_BYTES ? "too large for a model description (over 1 GiB)"
                                                              : NULL;
  size_t size = why ? 0 : (size_t)st.st_size, n = 0;
  char *buf = why ? NULL : malloc(size + 1);
  if (!why && !buf)
    why = "out of host memory";
  while (!why && n < size) { /* a file that shrinks meanwhile ends early; one that grows is cut at size */
    ssize_t r = read(fd, buf + n, size - n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      why = strerror(errno);
    if (r <= 0)
      break;
    n += (size_t)r;
  }
  close(fd);
  if (why) {
    snprintf(err, errlen, "%s: %s", path, why);
    free(buf);
    return -1;
  }
  buf[n] = 0;
  *text = buf;
  *len = n;
  return 0;
}
