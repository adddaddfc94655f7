/* cli.h: pieces shared by the ffnc subcommands (tools/cmd_*.c and friends). */
#ifndef FFNC_CLI_H
#define FFNC_CLI_H

#include "frontend/frontend.h"
#include "include/ffn.h"
#include "ir/interp.h"
#include "runtime/safetensors.h"

/* Exit statuses (cli.md): problems in the user's files, bad usage, device or driver. */
enum { EXIT_USER = 1, EXIT_USAGE = 2, EXIT_DEVICE = 3 };

/* ---- the option parser ----
 *
 * Each command describes its options in a table and loops over cli_next:
 *
 *   static const CliOpt opts[] = {CLI_OPT("--weights", "W", O_WEIGHTS), CLI_PASS_OPTIONS, {0}};
 *   CliParser p;
 *   cli_parser_init(&p, "run", opts, argc, argv);
 *   for (int id; (id = cli_next(&p, &v)) != CLI_END;)
 *     switch (id) { case CLI_HELP: ...; case CLI_BAD: return EXIT_USAGE; case CLI_ARG: ...; }
 *
 * `--opt VALUE` and `--opt=VALUE` are the same; an option with `attached` takes its value
 * glued on (-O3). `-h` and `--help` are CLI_HELP everywhere; `--` ends the options. A value
 * given as the next argument may not start with "--" (a forgotten value would swallow the
 * next option; `--opt=--x` says it on purpose). An option without `repeat` given twice is an
 * error: a second --weights silently replacing the first hid mistakes. */
typedef struct {
  const char *name;  /* "--weights", "-o" */
  const char *value; /* what the value is, for messages ("W.safetensors"); NULL: a flag */
  int id;            /* what cli_next returns for it (>= 0) */
  bool repeat;       /* may be given more than once (documented in the command's --help) */
  bool attached;     /* the value is glued to the name: -O3 */
} CliOpt;

/* Table entries: an option given at most once, one that may repeat, one with its value glued on. */
#define CLI_OPT(name, value, id) {(name), (value), (id), false, false}
#define CLI_MANY(name, value, id) {(name), (value), (id), true, false}
#define CLI_GLUED(name, value, id) {(name), (value), (id), false, true}

enum { CLI_END = -1, CLI_ARG = -2, CLI_HELP = -3, CLI_BAD = -4 };

typedef struct {
  const char *cmd; /* for messages: "build: ..." */
  const CliOpt *opts; /* ends with an entry whose name is NULL */
  int argc;
  char **argv;
  int next;        /* argv index */
  bool only_args;  /* after "--" */
  unsigned char seen[64]; /* by table index: given once already */
} CliParser;

void cli_parser_init(CliParser *p, const char *cmd, const CliOpt *opts, int argc, char **argv);
/* The next option's id (its value, or NULL for a flag, in *value), CLI_ARG (the argument in
 * *value), CLI_HELP, CLI_END, or CLI_BAD (message printed; exit EXIT_USAGE). */
int cli_next(CliParser *p, const char **value);

/* Numbers in option values: the whole text must be one number in [lo, hi]. Return 0, or -1
 * after a message naming the command, the option and what was expected. */
int cli_parse_int(const char *text, long long lo, long long hi, long long *out); /* no message */
int cli_int(const char *cmd, const char *opt, const char *text, long long lo, long long hi, long long *out);
int cli_double(const char *cmd, const char *opt, const char *text, double lo, double hi, double *out);
/* A comma-separated list of integers in [lo, hi] ("1,16,128"): at most max, at least one. */
int cli_int_list(const char *cmd, const char *opt, const char *text, long long lo, long long hi, int64_t *out,
                 int max, int *n);

/* ---- options common to the commands that compile ---- */

typedef struct {
  const char *file;
  PrecOverride prec[PREC_COUNT * 2];
  int nprec;
  FuseRequest fuse[16];
  int nfuse;
  const char *arch; /* NULL: default */
  int opt_level;    /* -O0..-O3, default 3 */
  const char *dump_after;
  bool verbose;     /* -v: what the NVRTC step did, on stderr */
  bool grad;        /* --grad (build): the backward graph */
  bool keep;        /* --keep: the keep policy (build: with --grad the backward graph reading the
                     * saved tensors, without it the training forward writing them) */
  int tp, tp_rank;  /* --tp N --tp-rank R: rank R's share over N ranks (tp 0 or 1: none) */
  bool tp_rank_given;
} CompileArgs;

/* Ids from 1000 up, so that a command's own ids (small) never meet them. */
enum { CO_PRECISION = 1000, CO_FFN_FUSION, CO_ARCH, CO_OPT_LEVEL, CO_DUMP_AFTER, CO_VERBOSE, CO_TP, CO_TP_RANK };
/* The options that change the passes (repeatable: each adds one override or one run)... */
#define CLI_PASS_OPTIONS \
  CLI_MANY("--precision", "KEY=TYPE", CO_PRECISION), CLI_MANY("--ffn-fusion", "A..B", CO_FFN_FUSION), \
      CLI_OPT("--tp", "N", CO_TP), CLI_OPT("--tp-rank", "R", CO_TP_RANK)
/* ...and those that choose the target, with -v (the commands that take them compile with NVRTC:
 * -v reports what that did). */
#define CLI_TARGET_OPTIONS \
  CLI_OPT("--arch", "sm_XX", CO_ARCH), CLI_GLUED("-O", "0..3", CO_OPT_LEVEL), CLI_OPT("-v", NULL, CO_VERBOSE)
#define CLI_DUMP_OPTION CLI_OPT("--dump-ir-after", "PASS", CO_DUMP_AFTER)

/* Applies the compile option id with its value. Returns 1 if id was one, 0 if not, -1 on a
 * bad value (message printed). */
int cli_compile_option(const char *cmd, int id, const char *value, CompileArgs *ca);
Graph *cli_frontend(const CompileArgs *ca, int *status);
/* After the options: --tp-rank needs --tp N > 1 and R < N; with all_ranks false, --tp N > 1
 * needs --tp-rank (the share to compile). 0, or -1 after a message (EXIT_USAGE). */
int cli_check_tp(const char *cmd, CompileArgs *ca, bool all_ranks);

/* The reference interpreter's TensorLookup over a safetensors file (ctx: the StFile). */
int cli_lookup_st(void *ctx, const char *name, RawTensor *out);

/* Prints "ffnc: error: ..." to stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The library's last error for status s on stderr (a source diagnostic as the front end wrote it,
 * anything else as "ffnc: error: CMD: [FILE: ]message"), and the exit status for s. */
int cli_fail(const char *cmd, const char *file, ffn_status s);

/* cmd_build.c: the exit status for an API status (cli.md: 1 files, 2 usage, 3 device), and
 * the API options for the compile arguments (with the NVRTC step's report: a line per program
 * and a summary on stderr with -v, a progress line when stderr is a terminal). */
int cli_status_exit(ffn_status s);
ffn_status cli_options(const CompileArgs *ca, ffn_options **out);
/* run_gpu.c: `ffnc run --device gpu` (--tp N: the N ranks on devices 0..N-1). */
int run_gpu(const CompileArgs *ca, StFile *wf, StFile *inf, const char *weights_path, const char *out_path);
/* --tp N on this machine's GPUs: 0, or EXIT_DEVICE after "CMD: --tp N needs N GPUs, this
 * machine has M" or the reason NCCL cannot be loaded. */
int cli_check_tp_devices(const char *cmd, int ranks);

int cmd_check(int argc, char **argv);
int cmd_build(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_gen(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_analyze(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_tune(int argc, char **argv);

#endif
