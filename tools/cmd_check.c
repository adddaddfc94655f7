/* cmd_check.c: `ffnc check FILE.ffn`. */
#include "cli.h"

#include <string.h>

int cmd_check(int argc, char **argv) {
  CompileArgs ca = {.opt_level = 3};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0) {
      printf("usage: ffnc check FILE.ffn [--precision KEY=TYPE]... [--ffn-fusion A..B]\n"
             "Parses and type-checks FILE; prints every error with its source line; exit 0 if clean, 1 if not.\n");
      return 0;
    }
    int r = cli_compile_option(argc, argv, &i, &ca);
    if (r < 0)
      return EXIT_USAGE;
    if (r)
      continue;
    if (argv[i][0] == '-' || ca.file) {
      cli_error("check: unexpected argument '%s'", argv[i]);
      return EXIT_USAGE;
    }
    ca.file = argv[i];
  }
  if (!ca.file) {
    cli_error("check: no input file (usage: ffnc check FILE.ffn)");
    return EXIT_USAGE;
  }
  int status;
  Graph *g = cli_frontend(&ca, &status);
  graph_destroy(g);
  return status;
}
