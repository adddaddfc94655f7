/* cmd_build.c: `ffnc build FILE.ffn -o OUT [--emit ir|cuda|plan|ptx|cubin]`: two programs in
 * one. Without --emit, the AOT package through the public API (build_aot); with it, one stage
 * of the compiler through the internal driver (emit_stage). */
#include "cli.h"
#include "codegen/driver.h"
#include "runtime/outfile.h"
#include "runtime/rt.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int status_exit(ffn_status s) {
  switch (s) {
  case FFN_OK: return 0;
  case FFN_ERR_INVALID_ARGUMENT: return EXIT_USAGE;
  case FFN_ERR_NO_DEVICE:
  case FFN_ERR_CUDA:
  case FFN_ERR_OUT_OF_MEMORY:
  case FFN_ERR_NO_COMPILER:
  case FFN_ERR_COMPILE: return EXIT_DEVICE;
  default: return EXIT_USER;
  }
}

int cli_status_exit(ffn_status s) { return status_exit(s); }

/* The NVRTC step as it goes: with -v a line per program compiled and a summary; on a terminal
 * a progress line, rewritten in place and erased at the end. Nothing otherwise. */
typedef struct {
  bool verbose, terminal;
} Report;

static void report_progress(void *user, const ffn_compile_progress *p) {
  const Report *r = user;
  if (r->terminal && p->done > 0)
    fprintf(stderr, "\r%*s\r", 60, "");
  if (r->verbose && p->done == 0)
    fprintf(stderr, "nvrtc: %d program%s, %d thread%s\n", p->total, p->total == 1 ? "" : "s", p->threads,
            p->threads == 1 ? "" : "s");
  else if (r->verbose)
    fprintf(stderr, "nvrtc:   %-28s %.2f s%s\n", p->unit, p->unit_seconds, p->unit_cached ? " (cache)" : "");
  if (r->verbose && p->done == p->total)
    fprintf(stderr, "nvrtc: %d program%s (%d from the cache), %d thread%s, %.2f s\n", p->total,
            p->total == 1 ? "" : "s", p->cached, p->threads, p->threads == 1 ? "" : "s", p->seconds);
  if (r->terminal && p->done < p->total)
    fprintf(stderr, "nvrtc: compiling %d/%d (%d threads)", p->done, p->total, p->threads);
}

/* Options for the compile API from the command line. */
ffn_status cli_options(const CompileArgs *ca, ffn_options **out) {
  ffn_options *o;
  ffn_status s = ffn_options_create(&o);
  if (s == FFN_OK && ca->arch)
    s = ffn_options_set_arch(o, ca->arch);
  if (s == FFN_OK)
    s = ffn_options_set_opt_level(o, ca->opt_level);
  for (int i = 0; i < ca->nprec && s == FFN_OK; i++) {
    char v[64];
    if (ca->prec[i].group)
      snprintf(v, sizeof v, "%s,group=%d", dtype_name(ca->prec[i].type), ca->prec[i].group);
    else
      snprintf(v, sizeof v, "%s", dtype_name(ca->prec[i].type));
    s = ffn_options_set_precision(o, prec_class_names[ca->prec[i].cls], v);
  }
  for (int i = 0; i < ca->nfuse && s == FFN_OK; i++)
    s = ffn_options_add_ffn_fusion(o, ca->fuse[i].first, ca->fuse[i].last);
  if (s == FFN_OK && ca->tp > 1)
    s = ffn_options_set_tensor_parallel(o, ca->tp, ca->tp_rank);
  if (s == FFN_OK && ca->grad)
    s = ffn_options_set_grad(o, 1);
  if (s == FFN_OK && ca->keep)
    s = ffn_options_set_grad_policy(o, FFN_GRAD_KEEP);
  static Report verbose = {.verbose = true}, terminal = {.terminal = true}, both = {true, true};
  bool tty = isatty(STDERR_FILENO);
  if (s == FFN_OK && (ca->verbose || tty))
    s = ffn_options_set_progress(o, report_progress, ca->verbose && tty ? &both : ca->verbose ? &verbose : &terminal);
  if (s != FFN_OK) {
    ffn_options_destroy(o);
    return s;
  }
  *out = o;
  return FFN_OK;
}

/* -o PATH or -o -: see runtime/outfile.h (regular files atomically, stdout and devices in
 * place, every write error reported and nothing partial left). */
static int write_out(const char *path, const void *data, size_t len) {
  char err[4200];
  if (fflush(stdout) != 0) { /* what was printed before (--dump-ir-after) goes first */
    cli_error("cannot write to standard output: %s", strerror(errno));
    return EXIT_USER;
  }
  if (outfile_save(path, data, len, err, sizeof err) != 0) {
    cli_error("%s", err);
    return EXIT_USER;
  }
  return 0;
}

/* The AOT package (plan and cubin), through the public API. */
static int build_aot(const CompileArgs *ca, const char *out) {
  ffn_options *o;
  ffn_program *p = NULL;
  ffn_status s = cli_options(ca, &o);
  if (s == FFN_OK) {
    s = ffn_program_compile_file(ca->file, o, &p);
    ffn_options_destroy(o);
  }
  if (s == FFN_OK)
    s = ffn_program_save(p, out);
  if (s != FFN_OK) {
    const char *e = ffn_last_error();
    if (s == FFN_ERR_SOURCE)
      fputs(e, stderr); /* diagnostics, already formatted */
    else
      cli_error("%s", e);
  }
  ffn_program_destroy(p);
  return status_exit(s);
}

/* Text (IR or plan) printed by a function into memory, then written out. */
static int write_printed(const char *out, const Graph *g, const Plan *plan) {
  char *buf;
  size_t blen;
  FILE *m = open_memstream(&buf, &blen);
  if (g)
    ir_print(g, m);
  else
    plan_print(plan, m);
  fclose(m);
  int rc = write_out(out, buf, blen);
  free(buf);
  return rc;
}

/* -O0 --emit ir: the front end's IR, untouched by any pass. */
static int emit_frontend_ir(const CompileArgs *ca, const char *text, size_t len, const char *out, Diags *d) {
  FrontendOptions fo = {ca->prec, ca->nprec, ca->fuse, ca->nfuse};
  Graph *g = frontend_compile_string(text, len, ca->file, &fo, d);
  if (!g)
    return EXIT_USER;
  int rc = write_printed(out, g, NULL);
  graph_destroy(g);
  return rc;
}

/* --emit ptx|cubin: the generated source compiled by NVRTC. */
static int emit_image(const CompileArgs *ca, const Plan *plan, bool ptx, const char *out) {
  Image img;
  ffn_status s = nvrtc_compile(plan->cuda_source, ca->file, plan->arch, ptx, &img);
  if (s != FFN_OK) {
    cli_error("%s", ffn_last_error());
    return status_exit(s);
  }
  /* PTX is text: written without its NUL, and never read past the image */
  int rc = write_out(out, img.image, ptx ? strnlen(img.image, img.size) : img.size);
  free(img.image);
  return rc;
}

/* --keep: the saved tensors, as the training forward writes them and the backward graph reads
 * them, in comment lines before the graph (whichever of the two g is) */
static void print_saved(const Graph *g, FILE *m) {
  fprintf(m, "# keep policy: the training forward (ffnc build --keep) writes these outputs after its own,\n"
             "# the backward graph (ffnc build --grad --keep) reads them as inputs after grad.OUT:\n");
  int n = 0;
  for (int i = 0; i < g->nodes.len; i++) {
    const Node *v = GRAPH_NODE(g, i);
    if (v->op == OP_INPUT && strncmp(v->name, "saved.", 6) == 0 && ++n)
      fprintf(m, "#   %s : %s %s\n", v->name, shape_str(g, &v->shape, (char[256]){0}, 256), dtype_name(v->dtype));
  }
  for (int i = 0; i < g->noutputs; i++) {
    const Node *v = g->outputs[i].node;
    if (strncmp(g->outputs[i].name, "saved.", 6) == 0 && ++n)
      fprintf(m, "#   %s : %s %s\n", g->outputs[i].name, shape_str(g, &v->shape, (char[256]){0}, 256),
              dtype_name(v->dtype));
  }
  if (!n)
    fprintf(m, "#   (none: the backward reads no product of the forward)\n");
}

/* --grad or --keep --emit ir: the backward graph or the training forward (passes/grad.c), before
 * any optimization. */
static int emit_grad_ir(const DriverOptions *o, const char *text, size_t len, const char *file, const char *out,
                        Diags *d) {
  Graph *g = driver_model_graph(text, len, file, o, d);
  if (!g)
    return EXIT_USER;
  char *buf;
  size_t blen;
  FILE *m = open_memstream(&buf, &blen);
  if (o->keep)
    print_saved(g, m);
  ir_print(g, m);
  fclose(m);
  int rc = write_out(out, buf, blen);
  free(buf);
  graph_destroy(g);
  return rc;
}

/* One stage of the compiler (--emit) for arch sm, through the internal driver. */
static int emit_stage(const CompileArgs *ca, const char *emit, int sm, const char *text, size_t len, const char *out,
                      Diags *d) {
  if (strcmp(emit, "ir") == 0 && ca->opt_level == 0 && !ca->dump_after && !ca->grad && !ca->keep)
    return emit_frontend_ir(ca, text, len, out, d);
  DriverOptions o = {.sm = sm, .opt_level = ca->opt_level, .prec = ca->prec, .nprec = ca->nprec, .fuse = ca->fuse,
                     .nfuse = ca->nfuse, .tp = ca->tp, .tp_rank = ca->tp_rank, .dump_after = ca->dump_after,
                     .dump = stdout, .grad = ca->grad, .keep = ca->keep};
  if ((ca->grad || ca->keep) && strcmp(emit, "ir") == 0)
    return emit_grad_ir(&o, text, len, ca->file, out, d);
  Graph *g = NULL;
  Plan *plan = NULL;
  bool ir = strcmp(emit, "ir") == 0;
  int rc;
  if (driver_compile(text, len, ca->file, &o, d, ir ? NULL : &plan, &g) != 0)
    rc = EXIT_USER;
  else if (ir || strcmp(emit, "plan") == 0)
    rc = write_printed(out, ir ? g : NULL, plan);
  else if (strcmp(emit, "cuda") == 0)
    rc = write_out(out, plan->cuda_source, strlen(plan->cuda_source));
  else
    rc = emit_image(ca, plan, strcmp(emit, "ptx") == 0, out);
  graph_destroy(g);
  plan_destroy(plan);
  return rc;
}

static const char usage[] =
    "usage: ffnc build FILE.ffn -o OUT [--arch sm_XX] [--emit ir|cuda|plan|ptx|cubin] [-O0..-O3]\n"
    "                  [--precision KEY=TYPE]... [--ffn-fusion A..B]... [--dump-ir-after=PASS] [-v] [--grad]\n"
    "                  [--keep]\n"
    "                  [--tp N --tp-rank R]\n"
    "Compiles FILE ahead of time. Without --emit, OUT is what a host program needs to run the model with\n"
    "no compiler at run time (the launch plan and a cubin for the arch), loaded by\n"
    "ffn_program_load(); it is binary, so it goes to a file, not standard output. --emit writes one stage\n"
    "instead: ir (the IR after the passes of this -O level; -O0 prints the front end's IR), cuda\n"
    "(generated source), plan (launch plan, text), ptx or cubin; `-o -` writes it to standard output.\n"
    "--arch defaults to the GPU's, or sm_90 without one. -v: what NVRTC compiled, the time of each program\n"
    "(kernel) and in all, on stderr (a terminal shows the progress anyway).\n"
    "--tp N --tp-rank R: rank R's share of the program over N tensor-parallel ranks (each FFN sublayer's\n"
    "hidden columns split N ways, one all-reduce per sublayer; --emit plan shows the allreduce steps).\n"
    "PASS is one of frontend ffn_fusion tp canon normfold gateup fuse precision all.\n"
    "--grad: the backward graph instead (inputs: the program's and grad.OUTPUT; outputs: grad.INPUT and\n"
    "grad.WEIGHT, f32), compiled like a program; --emit ir prints it before any optimization (the passes'\n"
    "output with --dump-ir-after=PASS).\n"
    "--keep: the keep policy of training (default: recompute). The training forward keeps the outputs of the\n"
    "matrix products the backward reads (saved tensors, e.g. a SwiGLU's gate and up products, [T, F] each):\n"
    "without --grad, the program with outputs saved.NAME after its own; with --grad, the backward graph that\n"
    "reads them as inputs saved.NAME after grad.OUTPUT instead of recomputing them. --emit ir lists the saved\n"
    "tensors (both graphs' interface) in comments before the graph.\n";

enum { O_OUT, O_EMIT, O_GRAD, O_KEEP };

/* Parses the command line; returns -1 to go on, else the exit status. */
static int parse_build_args(int argc, char **argv, CompileArgs *ca, const char **out, const char **emit) {
  static const CliOpt opts[] = {CLI_OPT("-o", "OUT", O_OUT), CLI_OPT("--emit", "STAGE", O_EMIT),
                                CLI_OPT("--grad", NULL, O_GRAD), CLI_OPT("--keep", NULL, O_KEEP), CLI_PASS_OPTIONS,
                                CLI_TARGET_OPTIONS, CLI_DUMP_OPTION, {0}};
  const char *v;
  CliParser p;
  cli_parser_init(&p, "build", opts, argc, argv);
  for (int id; (id = cli_next(&p, &v)) != CLI_END;) {
    if (id == CLI_HELP)
      return fputs(usage, stdout), 0;
    if (id == CLI_BAD || cli_compile_option("build", id, v, ca) < 0)
      return EXIT_USAGE;
    if (id == O_OUT)
      *out = v;
    else if (id == O_EMIT)
      *emit = v;
    else if (id == O_GRAD)
      ca->grad = true;
    else if (id == O_KEEP)
      ca->keep = true;
    else if (id == CLI_ARG && ca->file)
      return cli_error("build: unexpected argument '%s' (one FILE.ffn)", v), EXIT_USAGE;
    else if (id == CLI_ARG)
      ca->file = v;
  }
  const char *emits[] = {"ir", "cuda", "plan", "ptx", "cubin"};
  bool known = !*emit;
  for (size_t i = 0; i < 5 && *emit; i++)
    known |= strcmp(*emit, emits[i]) == 0;
  if (!known) {
    cli_error("build: --emit %s: expected ir, cuda, plan, ptx or cubin", *emit);
    return EXIT_USAGE;
  }
  if (!ca->file || !*out) {
    cli_error("build: usage: ffnc build FILE.ffn -o OUT [--emit ir|cuda|plan|ptx|cubin]");
    return EXIT_USAGE;
  }
  if (!*emit && strcmp(*out, "-") == 0) { /* a binary package on a terminal or in a pipe helps nobody */
    cli_error("build: -o -: the AOT package is binary; write it to a file (standard output takes --emit stages)");
    return EXIT_USAGE;
  }
  return -1;
}

int cmd_build(int argc, char **argv) {
  CompileArgs ca = {.opt_level = 3};
  const char *out = NULL, *emit = NULL;
  int rc = parse_build_args(argc, argv, &ca, &out, &emit);
  if (rc >= 0)
    return rc;
  if (cli_check_tp("build", &ca, false) != 0)
    return EXIT_USAGE;
  char err[512];
  int sm = 90;
  if (ca.arch && parse_arch(ca.arch, &sm, err, sizeof err) != 0) {
    cli_error("%s", err);
    return EXIT_USAGE;
  }
  if (!emit)
    return build_aot(&ca, out);
  char *text;
  size_t len;
  if (read_file(ca.file, &text, &len, err, sizeof err) != 0) {
    cli_error("%s", err);
    return EXIT_USER;
  }
  Diags d;
  diags_init(&d);
  rc = emit_stage(&ca, emit ? emit : "cubin", ca.arch ? sm : cu_default_arch(), text, len, out, &d);
  if (d.len)
    fputs(d.text, stderr);
  diags_free(&d);
  free(text);
  return rc;
}
