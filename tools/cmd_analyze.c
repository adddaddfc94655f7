/* cmd_analyze.c: `ffnc analyze` (FFN Fusion analysis): not implemented yet; says so. */
#include "cli.h"

#include <string.h>

int cmd_analyze(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0) {
      printf("usage: ffnc analyze FILE.ffn --weights W --calib X.safetensors\n"
             "FFN Fusion analysis (dependence between sublayers and the error fusing them introduces).\n"
             "Not implemented yet in this version.\n");
      return 0;
    }
  cli_error("analyze: FFN Fusion analysis is not implemented yet in ffnc %s", FFNC_VERSION);
  return EXIT_USAGE;
}
