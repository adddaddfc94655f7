/* aot_run.c: a host program that runs a model compiled ahead of time with
 *
 *   ffnc build MODEL.ffn -o MODEL.ffnx
 *
 * and needs no compiler at run time: ffn_program_load reads the launch plan and the cubin.
 *
 *   aot_run MODEL.ffnx WEIGHTS.safetensors TOKENS
 */
#include <cuda_runtime.h>
#include <ffn.h>
#include <stdio.h>
#include <stdlib.h>

#include "host_util.h"

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: aot_run MODEL.ffnx WEIGHTS.safetensors TOKENS\n");
    return 2;
  }
  ffn_program *prog;
  if (ffn_program_load(argv[1], &prog) != FFN_OK) {
    fprintf(stderr, "aot_run: %s\n", ffn_last_error());
    return 1;
  }
  int rc = run_model(prog, argv[2], atoll(argv[3]));
  ffn_program_destroy(prog);
  return rc;
}
