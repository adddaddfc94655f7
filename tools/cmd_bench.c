/* cmd_bench.c: `ffnc bench` (see bench/). */
#include "cli.h"

int cmd_bench(int argc, char **argv) {
  (void)argc;
  (void)argv;
  cli_error("bench: not built yet");
  return EXIT_USAGE;
}
