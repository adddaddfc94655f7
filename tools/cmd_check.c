/* cmd_check.c: `ffnc check FILE.ffn`. */
#include "cli.h"

static const char usage[] =
    "usage: ffnc check FILE.ffn [-O0..-O3] [--precision KEY=TYPE]... [--ffn-fusion A..B]...\n"
    "                  [--tp N [--tp-rank R]]\n"
    "Parses and type-checks FILE; prints every error with its source line; exit 0 if clean, 1 if not.\n";

int cmd_check(int argc, char **argv) {
  static const CliOpt opts[] = {CLI_PASS_OPTIONS, CLI_GLUED("-O", "0..3", CO_OPT_LEVEL), {0}};
  CompileArgs ca = {.opt_level = 3};
  CliParser p;
  const char *v;
  cli_parser_init(&p, "check", opts, argc, argv);
  for (int id; (id = cli_next(&p, &v)) != CLI_END;) {
    if (id == CLI_HELP)
      return fputs(usage, stdout), 0;
    if (id == CLI_BAD || cli_compile_option("check", id, v, &ca) < 0)
      return EXIT_USAGE;
    if (id == CLI_ARG && ca.file)
      return cli_error("check: unexpected argument '%s' (one FILE.ffn)", v), EXIT_USAGE;
    if (id == CLI_ARG)
      ca.file = v;
  }
  if (!ca.file) {
    cli_error("check: no input file (usage: ffnc check FILE.ffn)");
    return EXIT_USAGE;
  }
  if (cli_check_tp("check", &ca, true) != 0) /* without --tp-rank: rank 0's share */
    return EXIT_USAGE;
  int status;
  Graph *g = cli_frontend(&ca, &status);
  graph_destroy(g);
  return status;
}
