/* cli.c: option parsing shared by the subcommands. */
#include "cli.h"
#include "codegen/driver.h"
#include "passes/passes.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
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

int cli_fail(const char *cmd, const char *file, ffn_status s) {
  if (s == FFN_ERR_SOURCE)
    fputs(ffn_last_error(), stderr);
  else if (file)
    cli_error("%s: %s: %s", cmd, file, ffn_last_error());
  else
    cli_error("%s: %s", cmd, ffn_last_error());
  return cli_status_exit(s);
}

void cli_parser_init(CliParser *p, const char *cmd, const CliOpt *opts, int argc, char **argv) {
  *p = (CliParser){.cmd = cmd, .opts = opts, .argc = argc, .argv = argv, .next = 1};
}

/* The table entry arg names, with its value (NULL for a flag) in *value; NULL and a message
 * if it names none or its value is missing or misplaced. */
static const CliOpt *match_option(CliParser *p, const char *arg, const char **value) {
  for (const CliOpt *o = p->opts; o->name; o++) {
    size_t n = strlen(o->name);
    if (strncmp(arg, o->name, n) != 0)
      continue;
    if (o->attached) {
      if (!arg[n])
        return cli_error("%s: %s needs its value attached: %s%s", p->cmd, o->name, o->name, o->value), NULL;
      *value = arg + n;
      return o;
    }
    if (arg[n] == '=') {
      if (!o->value)
        return cli_error("%s: %s takes no value", p->cmd, o->name), NULL;
      *value = arg + n + 1;
      return o;
    }
    if (arg[n])
      continue; /* a longer name: --input vs --inputs */
    *value = NULL;
    if (!o->value)
      return o;
    const char *next = p->next < p->argc ? p->argv[p->next] : NULL;
    if (!next || strncmp(next, "--", 2) == 0)
      return cli_error("%s: %s needs a value (%s %s)%s%s%s", p->cmd, o->name, o->name, o->value,
                       next ? "; a value that starts with -- is written " : "", next ? o->name : "",
                       next ? "=VALUE" : ""),
             NULL;
    *value = p->argv[p->next++];
    return o;
  }
  return cli_error("%s: unknown option '%s' (ffnc %s --help lists them)", p->cmd, arg, p->cmd), NULL;
}

int cli_next(CliParser *p, const char **value) {
  if (p->next >= p->argc)
    return CLI_END;
  const char *arg = p->argv[p->next++];
  if (!p->only_args && strcmp(arg, "--") == 0) {
    p->only_args = true;
    return cli_next(p, value);
  }
  /* "-" alone is an argument (standard output or input where a command allows it) */
  if (p->only_args || arg[0] != '-' || !arg[1]) {
    *value = arg;
    return CLI_ARG;
  }
  if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0)
    return CLI_HELP;
  const CliOpt *o = match_option(p, arg, value);
  if (!o)
    return CLI_BAD;
  if (o->value && !**value) {
    cli_error("%s: %s: the value is empty", p->cmd, o->name);
    return CLI_BAD;
  }
  size_t k = (size_t)(o - p->opts);
  if (k < sizeof p->seen && p->seen[k]++ && !o->repeat) {
    cli_error("%s: %s given more than once", p->cmd, o->name);
    return CLI_BAD;
  }
  return o->id;
}

int cli_parse_int(const char *text, long long lo, long long hi, long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  /* strtoll skips leading blanks and takes a prefix: neither is a number here */
  if (end == text || *end || isspace((unsigned char)text[0]) || errno == ERANGE || v < lo || v > hi)
    return -1;
  *out = v;
  return 0;
}

int cli_int(const char *cmd, const char *opt, const char *text, long long lo, long long hi, long long *out) {
  if (cli_parse_int(text, lo, hi, out) == 0)
    return 0;
  cli_error("%s: %s %s: expected an integer from %lld to %lld", cmd, opt, text, lo, hi);
  return -1;
}

int cli_double(const char *cmd, const char *opt, const char *text, double lo, double hi, double *out) {
  char *end;
  double v = strtod(text, &end);
  if (end == text || *end || isspace((unsigned char)text[0]) || !isfinite(v) || v < lo || v > hi) {
    if (isinf(hi))
      cli_error("%s: %s %s: expected a finite number >= %g", cmd, opt, text, lo);
    else
      cli_error("%s: %s %s: expected a number from %g to %g", cmd, opt, text, lo, hi);
    return -1;
  }
  *out = v;
  return 0;
}

int cli_int_list(const char *cmd, const char *opt, const char *text, long long lo, long long hi, int64_t *out,
                 int max, int *n) {
  char item[32];
  *n = 0;
  for (const char *p = text;; p++) {
    size_t len = strcspn(p, ",");
    if (*n == max) {
      cli_error("%s: %s %s: at most %d values", cmd, opt, text, max);
      return -1;
    }
    if (len == 0 || len >= sizeof item) { /* "1,,2", a trailing comma, or no number at all */
      cli_error("%s: %s %s: expected integers from %lld to %lld separated by commas", cmd, opt, text, lo, hi);
      return -1;
    }
    memcpy(item, p, len);
    item[len] = 0;
    long long v;
    if (cli_int(cmd, opt, item, lo, hi, &v) != 0)
      return -1;
    out[(*n)++] = v;
    p += len;
    if (!*p)
      return 0;
  }
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

int cli_compile_option(const char *cmd, int id, const char *v, CompileArgs *ca) {
  char err[256];
  switch (id) {
  case CO_PRECISION:
    if (ca->nprec == (int)(sizeof ca->prec / sizeof ca->prec[0]))
      return cli_error("%s: too many --precision options", cmd), -1;
    if (parse_precision_override(v, &ca->prec[ca->nprec], err, sizeof err) != 0)
      return cli_error("%s: --precision %s: %s", cmd, v, err), -1;
    ca->nprec++;
    return 1;
  case CO_FFN_FUSION: {
    FuseRequest *f = &ca->fuse[ca->nfuse];
    if (ca->nfuse == (int)(sizeof ca->fuse / sizeof ca->fuse[0]) || parse_range(v, &f->first, &f->last) != 0)
      return cli_error("%s: --ffn-fusion %s: expected A..B with A < B-1 (at least two sublayers)", cmd, v), -1;
    f->loc = (SrcLoc){0};
    ca->nfuse++;
    return 1;
  }
  case CO_ARCH: { /* usage errors here (exit 2), not at compile time */
    int sm;
    if (parse_arch(v, &sm, err, sizeof err) != 0)
      return cli_error("%s: %s", cmd, err), -1;
    ca->arch = v;
    return 1;
  }
  case CO_OPT_LEVEL:
    if (!(v[0] >= '0' && v[0] <= '3' && !v[1]))
      return cli_error("%s: -O%s: expected -O0, -O1, -O2 or -O3", cmd, v), -1;
    ca->opt_level = v[0] - '0';
    return 1;
  case CO_DUMP_AFTER: {
    bool known = strcmp(v, "all") == 0;
    for (int p = 0; pass_names[p]; p++)
      known |= strcmp(v, pass_names[p]) == 0;
    if (!known)
      return cli_error("%s: --dump-ir-after=%s: no such pass (frontend ffn_fusion tp canon normfold gateup fuse "
                       "precision all)", cmd, v), -1;
    ca->dump_after = v;
    return 1;
  }
  case CO_VERBOSE:
    ca->verbose = true;
    return 1;
  case CO_TP:
  case CO_TP_RANK: {
    long long n;
    if (cli_int(cmd, id == CO_TP ? "--tp" : "--tp-rank", v, id == CO_TP ? 1 : 0, 4096, &n) != 0)
      return -1;
    *(id == CO_TP ? &ca->tp : &ca->tp_rank) = (int)n;
    ca->tp_rank_given |= id == CO_TP_RANK;
    return 1;
  }
  default: return 0;
  }
}

int cli_check_tp(const char *cmd, CompileArgs *ca, bool all_ranks) {
  if (ca->tp_rank_given && ca->tp <= 1)
    return cli_error("%s: --tp-rank needs --tp N with N >= 2", cmd), -1;
  if (ca->tp_rank_given && ca->tp_rank >= ca->tp)
    return cli_error("%s: --tp-rank %d: the ranks are 0..%d (--tp %d)", cmd, ca->tp_rank, ca->tp - 1, ca->tp), -1;
  if (ca->tp > 1 && !ca->tp_rank_given && !all_ranks)
    return cli_error("%s: --tp %d needs --tp-rank R: the rank whose share to compile", cmd, ca->tp), -1;
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
                     .opt_level = ca->opt_level, .tp = ca->tp, .tp_rank = ca->tp_rank, .grad = ca->grad,
                     .keep = ca->keep};
  Graph *g = driver_model_graph(text, len, ca->file, &o, &d);
  if (d.len)
    fputs(d.text, stderr);
  if (g)
    *status = 0;
  diags_free(&d);
  free(text);
  return g;
}

int cli_lookup_st(void *ctx, const char *name, RawTensor *out) {
  const StTensor *t = st_find((StFile *)ctx, name);
  if (!t)
    return -1;
  *out = (RawTensor){.dtype = t->dtype, .rank = t->rank, .data = t->data, .nbytes = t->nbytes};
  memcpy(out->shape, t->shape, sizeof out->shape);
  return 0;
}
