/* driver.c: source text -> checked IR -> passes -> Plan and CUDA source. Used by the C API
 * (ffn_program_compile) and by `ffnc build`. */
#include "driver.h"

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
  *sm = (int)v;
  return 0;
}

/* inputs keep their declaration order through the passes */
static void number_inputs(Graph *g) {
  int idx = 0;
  for (int i = 0; i < g->nodes.len; i++)
    if (GRAPH_NODE(g, i)->op == OP_INPUT)
      GRAPH_NODE(g, i)->ival[0] = idx++;
}

Graph *driver_model_graph(const char *text, size_t len, const char *name, const DriverOptions *o, Diags *d) {
  FrontendOptions fo = {o->prec, o->nprec, o->fuse, o->nfuse};
  Graph *g = frontend_compile_string(text, len, name, &fo, d);
  if (!g)
    return NULL;
  number_inputs(g);
  SourceFile src = {name, text, len};
  Compile c = {.g = g, .src = &src, .diags = d, .arch = o->sm, .opt_level = o->opt_level};
  if (pass_ffn_fusion(&c) != 0 || c.broken) {
    graph_destroy(g);
    return NULL;
  }
  return g;
}

int driver_compile_graph(Graph *g, const SourceFile *src, const DriverOptions *o, Diags *d, Plan **plan) {
  Compile c = {.g = g, .src = src, .diags = d, .arch = o->sm, .opt_level = o->opt_level};
  int rc = passes_run(&c, o->dump_after, o->dump ? o->dump : stdout);
  if (rc == 0 && plan)
    rc = codegen_cuda(&c, plan);
  return rc;
}

int driver_compile(const char *text, size_t len, const char *name, const DriverOptions *o, Diags *d, Plan **plan,
                   Graph **graph_out) {
  FrontendOptions fo = {o->prec, o->nprec, o->fuse, o->nfuse};
  Graph *g = frontend_compile_string(text, len, name, &fo, d);
  if (!g)
    return -1;
  number_inputs(g);
  SourceFile src = {name, text, len};
  int rc = driver_compile_graph(g, &src, o, d, plan);
  if (rc == 0 && graph_out)
    *graph_out = g;
  else
    graph_destroy(g);
  return rc;
}

int read_file(const char *path, char **text, size_t *len, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "%s: cannot open: %m", path);
    return -1;
  }
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  for (;;) {
    if (n + 1 >= cap) {
      if (cap > ((size_t)1 << 30)) {
        snprintf(err, errlen, "%s: too large for a model description", path);
        free(buf);
        fclose(f);
        return -1;
      }
      cap *= 2;
      buf = realloc(buf, cap);
    }
    size_t r = fread(buf + n, 1, cap - n - 1, f);
    n += r;
    if (r == 0)
      break;
  }
  bool bad = ferror(f);
  fclose(f);
  if (bad) {
    snprintf(err, errlen, "%s: read error", path);
    free(buf);
    return -1;
  }
  buf[n] = 0;
  *text = buf;
  *len = n;
  return 0;
}
