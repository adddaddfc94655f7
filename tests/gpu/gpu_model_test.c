/* gpu_model_test.c: one model on the GPU against the CPU reference.
 *
 *   gpu_model_test MODEL.ffn [-O0..-O3] [--aot] [--grad]
 *
 * Compiles MODEL once (JIT through NVRTC), binds random weights, then for every token count
 * (1, 7, 64, 1000, 4096: edges that are not multiples of the tiles) runs fresh random
 * inputs and compares each output with the reference interpreter, with the tolerance of
 * its element type (gpu_util.h). With --aot the program also goes through
 * ffn_program_save / ffn_program_load and runs again from the loaded copy. With --grad the
 * model is its backward graph (passes/grad.c; ffn_options_set_grad): random grad.OUTPUT inputs,
 * every gradient compared with the reference's, with the tolerances of gradients (gpu_util.h:
 * tolerance_grad). Exits 77 (skip) where there is no GPU.
 */
#include "gpu/gpu_util.h"

#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: gpu_model_test MODEL.ffn [-O0..-O3] [--aot] [--grad]\n");
    return 2;
  }
  int opt = 3;
  bool aot = false, grad = false;
  for (int i = 2; i < argc; i++) {
    if (argv[i][0] == '-' && argv[i][1] == 'O')
      opt = argv[i][2] - '0';
    else if (strcmp(argv[i], "--aot") == 0)
      aot = true;
    else if (strcmp(argv[i], "--grad") == 0)
      grad = true;
  }
  require_gpu();
  size_t len;
  char *path = source_path(argv[1]), *text = source_text(argv[1], &len);
  Diags d;
  diags_init(&d);
  DriverOptions dopt = {.sm = 90, .opt_level = opt, .grad = grad};
  Graph *g = driver_model_graph(text, len, path, &dopt, &d), *gp = NULL;
  if (!g || driver_compile(text, len, path, &dopt, &d, NULL, &gp) != 0) {
    printf("FAIL: %s", d.text);
    return 1;
  }
  ffn_options *o;
  ffn_options_create(&o);
  ffn_options_set_opt_level(o, opt);
  ffn_options_set_grad(o, grad);
  ffn_program *prog;
  if (ffn_program_compile(text, len, path, o, &prog) != FFN_OK) {
    printf("FAIL: compile: %s\n", ffn_last_error());
    return 1;
  }
  printf("%s%s -O%d: %d kernels\n", argv[1], grad ? " (backward graph)" : "", opt, ffn_program_num_kernels(prog));
  if (aot) {
    char tmp[] = "/tmp/ffnc-aot-XXXXXX";
    int fd = mkstemp(tmp);
    close(fd);
    ffn_program *loaded;
    if (ffn_program_save(prog, tmp) != FFN_OK || ffn_program_load(tmp, &loaded) != FFN_OK) {
      printf("FAIL: AOT round trip: %s\n", ffn_last_error());
      unlink(tmp);
      return 1;
    }
    unlink(tmp);
    ffn_program_destroy(prog);
    prog = loaded;
  }
  ffn_model *m;
  if (ffn_model_create(prog, 0, &m) != FFN_OK) {
    printf("FAIL: model: %s\n", ffn_last_error());
    return 1;
  }
  uint64_t seed = test_seed();
  TensorSet w = {0};
  make_weights(g, seed, &w);
  if (bind_weights(m, &w) != 0)
    return 1;
  int64_t tokens[16];
  int nt = test_tokens(tokens, 16), failed = 0;
  for (int k = 0; k < nt; k++) {
    TensorSet in = {0};
    make_inputs(g, tokens[k], seed + 1000 + (uint64_t)k, &in);
    RefTensor ref[64] = {0}, refp[64] = {0}, refx[64] = {0};
    char label[128];
    snprintf(label, sizeof label, "T=%lld", (long long)tokens[k]);
    int exact = reference_unquantized(g, &w, &in, refx);
    if (exact < 0 || reference(g, &w, &in, ref) != 0 || reference(gp, &w, &in, refp) != 0 ||
        run_and_compare(label, m, g, &in, refp, ref, exact ? refx : NULL) != 0)
      failed++;
    for (int i = 0; i < g->noutputs; i++) {
      ref_free(&ref[i]);
      ref_free(&refp[i]);
      ref_free(&refx[i]);
    }
    set_free(&in);
  }
  ffn_model_destroy(m);
  ffn_program_destroy(prog);
  ffn_options_destroy(o);
  set_free(&w);
  graph_destroy(g);
  graph_destroy(gp);
  diags_free(&d);
  free(text);
  free(path);
  printf("%s\n", failed ? "FAILED" : "PASSED");
  return failed ? 1 : 0;
}
