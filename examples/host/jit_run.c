/* jit_run.c: a host program that compiles a model at start-up (JIT, through NVRTC and the
 * kernel cache) and runs it on its own CUDA stream.
 *
 *   jit_run MODEL.ffn WEIGHTS.safetensors TOKENS
 *
 * Inputs are filled with a fixed pseudo-random pattern; the program prints the shape and a
 * checksum of each output (aot_run prints the same for the same model, from the AOT file).
 */
#include <cuda_runtime.h>
#include <ffn.h>
#include <stdio.h>
#include <stdlib.h>

#include "host_util.h"

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: jit_run MODEL.ffn WEIGHTS.safetensors TOKENS\n");
    return 2;
  }
  ffn_program *prog;
  if (ffn_program_compile_file(argv[1], NULL, &prog) != FFN_OK) {
    fprintf(stderr, "jit_run: %s\n", ffn_last_error());
    return 1;
  }
  int rc = run_model(prog, argv[2], atoll(argv[3]));
  ffn_program_destroy(prog);
  return rc;
}
