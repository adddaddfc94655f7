/* cli.h: pieces shared by the ffnc subcommands (tools/cmd_*.c and friends). */
#ifndef FFNC_CLI_H
#define FFNC_CLI_H

#include "frontend/frontend.h"
#include "include/ffn.h"
#include "ir/interp.h"
#include "runtime/safetensors.h"

/* Exit statuses (cli.md): problems in the user's files, bad usage, device or driver. */
enum { EXIT_USER = 1, EXIT_USAGE = 2, EXIT_DEVICE = 3 };

/* Options common to the commands that compile. */
typedef struct {
  const char *file;
  PrecOverride prec[PREC_COUNT * 2];
  int nprec;
  FuseRequest fuse[16];
  int nfuse;
  const char *arch; /* NULL: default */
  int opt_level;    /* -O0..-O3, default 3 */
  const char *dump_after;
} CompileArgs;

/* Parses one compile option at argv[*i] (advancing *i past its value). Returns 1 if it was
 * one, 0 if not, -1 on a bad value (message printed). */
int cli_compile_option(int argc, char **argv, int *i, CompileArgs *ca);
Graph *cli_frontend(const CompileArgs *ca, int *status);

/* Prints "ffnc: error: ..." to stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Value of `--opt VALUE` or `--opt=VALUE` at argv[*i] for option name opt, else NULL. */
const char *cli_value(int argc, char **argv, int *i, const char *opt);

/* cmd_build.c: the exit status for an API status (cli.md: 1 files, 2 usage, 3 device), and
 * the API options for the compile arguments. */
int cli_status_exit(ffn_status s);
ffn_status cli_options(const CompileArgs *ca, ffn_options **out);
/* run_gpu.c: `ffnc run --device gpu`. */
int run_gpu(const CompileArgs *ca, StFile *wf, StFile *inf, const char *weights_path, const char *out_path);

int cmd_check(int argc, char **argv);
int cmd_build(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_gen(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_analyze(int argc, char **argv);
int cmd_compare(int argc, char **argv);

#endif
