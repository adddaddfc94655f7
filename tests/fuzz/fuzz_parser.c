/* fuzz_parser.c: libFuzzer target for the front end (lexer, parser, sema, diagnostics).
 *
 * Any input must end in a graph or in diagnostics, never in a crash, a leak, undefined
 * behaviour or a hang; and a graph the front end accepts must pass the IR verifier.
 */
#include "frontend/frontend.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  Diags d;
  diags_init(&d);
  Graph *g = frontend_compile_string((const char *)data, size, "fuzz.ffn", NULL, &d);
  if (g) {
    char why[512];
    if (d.nerrors != 0 || ir_verify(g, why, sizeof why) != 0)
      abort(); /* accepted with errors, or accepted an invalid graph */
  } else if (d.nerrors == 0) {
    abort(); /* rejected without saying why */
  }
  graph_destroy(g);
  diags_free(&d);
  return 0;
}
