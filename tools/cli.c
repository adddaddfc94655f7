/* cli.c: option parsing shared by the subcommands. */
#include "cli.h"
#include "codegen/driver.h"
#include "passes/passes.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Messages echo paths and names from the command line and from files: their control bytes
 * are shown as \xNN so that they cannot drive the terminal (frontend/diag.c does the same). */
void cli_error(const char *fmt, ...) {
  char msg[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fputs("ffnc: error: ", stderr);
  for (const unsigned char *p = (const unsigned char *)msg; *p; p++)
    if ((*p < 0x20 && *p != '\n' && *p != '\t') || *p == 0x7f) /* logs (NVRTC) keep their lines */
      fprintf(stderr, "\\x%02X", *p);
    else
      fputc(*p, stderr);
  fputc('\n', stderr);
}

const char *cli_value(int argc, char **argv, int *i, const char *opt) {
  size_t n = strlen(opt);
  if (strncmp(argv[*i], opt, n) != 0)
    return NULL;
  if (argv[*i][n] == '=')
    return argv[*i] + n + 1;
  if (argv[*i][n] != 0)
    return NULL;
  if (*i + 1 >= argc) {
    cli_error("%s needs a value", opt);
    exit(EXIT_USAGE);
  }
  return argv[++*i];
}

static int parse_range(const char *s, int *a, int *b) {
  char *end;
  long x = strtol(s, &end, 10);
  if (end == s || strncmp(end, "..", 2) != 0)
    return -1;
  const char *t = end + 2;
  long y = strtol(t, &end, 10);
  if (end == t || *end || x < 0 || y <= x + 1 || y > 100000)
    return -1;
  *a = (int)x;
  *b = (int)y;
  return 0;
}

int cli_compile_option(int argc, char **argv, int *i, CompileArgs *ca) {
  const char *v;
  char err[256];
  if ((v = cli_value(argc, argv, i, "--precision"))) {
    if (ca->nprec == (int)(sizeof ca->prec / sizeof ca->prec[0])) {
      cli_error("too many --precision options");
      return -1;
    }
    if (parse_precision_override(v, &ca->prec[ca->nprec], err, sizeof err) != 0) {
      cli_error("--precision %s: %s", v, err);
      return -1;
    }
    ca->nprec++;
    return 1;
  }
  if ((v = cli_value(argc, argv, i, "--ffn-fusion"))) {
    FuseRequest *f = &ca->fuse[ca->nfuse];
    if (ca->nfuse == (int)(sizeof ca->fuse / sizeof ca->fuse[0]) || parse_range(v, &f->first, &f->last) != 0) {
      cli_error("--ffn-fusion %s: expected A..B with A < B-1 (at least two sublayers)", v);
      return -1;
    }
    f->loc = (SrcLoc){0};
    ca->nfuse++;
    return 1;
  }
  if ((v = cli_value(argc, argv, i, "--arch"))) { /* usage errors here (exit 2), not at compile time */
    int sm;
    if (parse_arch(v, &sm, err, sizeof err) != 0) {
      cli_error("%s", err);
      return -1;
    }
    ca->arch = v;
    return 1;
  }
  if ((v = cli_value(argc, argv, i, "--dump-ir-after"))) {
    bool known = strcmp(v, "all") == 0;
    for (int p = 0; pass_names[p]; p++)
      known |= strcmp(v, pass_names[p]) == 0;
    if (!known) {
      cli_error("--dump-ir-after=%s: no such pass (frontend ffn_fusion canon normfold gateup fuse precision all)", v);
      return -1;
    }
    ca->dump_after = v;
    return 1;
  }
  const char *a = argv[*i];
  if (a[0] == '-' && a[1] == 'O' && a[2] >= '0' && a[2] <= '3' && !a[3]) {
    ca->opt_level = a[2] - '0';
    return 1;
  }
  return 0;
}

Graph *cli_frontend(const CompileArgs *ca, int *status) {
  char *text, err[512];
  size_t len;
  *status = EXIT_USER;
  if (read_file(ca->file, &text, &len, err, sizeof err) != 0) {
    cli_error("%s", err);
    return NULL;
  }
  Diags d;
  diags_init(&d);
  DriverOptions o = {.prec = ca->prec, .nprec = ca->nprec, .fuse = ca->fuse, .nfuse = ca->nfuse,
                     .opt_level = ca->opt_level};
  Graph *g = driver_model_graph(text, len, ca->file, &o, &d);
  if (d.len)
    fputs(d.text, stderr);
  if (g)
    *status = 0;
  diags_free(&d);
  free(text);
  return g;
}
