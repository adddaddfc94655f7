/* fe_driver.c: the front end alone, with the command lines of ffnc that only need it:
 *
 *   fe_driver check FILE [--precision KEY=TYPE]... [--ffn-fusion A..B]...
 *   fe_driver build FILE --emit ir -o - [-O0] [same options]   the front end's IR
 *
 * Diagnostics go to stderr; the exit status is 1 when there are errors, 2 for bad usage
 * (as ffnc). It is built from the front-end and IR sources only, so the front end can be
 * debugged (and its goldens run, see tests/frontend.cmake) while the rest of the library
 * does not build.
 */
#include "frontend/frontend.h"

#include <stdlib.h>
#include <string.h>

static int usage(void) {
  fprintf(stderr, "usage: fe_driver check FILE [--precision KEY=TYPE]... [--ffn-fusion A..B]...\n"
                  "       fe_driver build FILE --emit ir -o - [-O0] [options]\n");
  return 2;
}

int main(int argc, char **argv) {
  if (argc < 3)
    return usage();
  bool build = strcmp(argv[1], "build") == 0;
  if (!build && strcmp(argv[1], "check") != 0)
    return usage();
  PrecOverride prec[16];
  FuseRequest fuse[16];
  FrontendOptions opt = {prec, 0, fuse, 0};
  bool emit_ir = false, to_stdout = false;
  for (int i = 3; i < argc; i += 2) { /* every option takes a value */
    char err[256];
    const char *next = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(argv[i], "--precision") == 0 && next && opt.nprec < 16) {
      if (parse_precision_override(next, &prec[opt.nprec++], err, sizeof err) != 0) {
        fprintf(stderr, "ffnc: error: --precision %s: %s\n", next, err);
        return 2;
      }
    } else if (strcmp(argv[i], "--ffn-fusion") == 0 && next && opt.nfuse < 16) {
      FuseRequest *f = &fuse[opt.nfuse++];
      if (sscanf(next, "%d..%d", &f->first, &f->last) != 2) {
        fprintf(stderr, "ffnc: error: --ffn-fusion expects A..B\n");
        return 2;
      }
      f->loc = (SrcLoc){0};
    } else if (build && strcmp(argv[i], "--emit") == 0 && next && strcmp(next, "ir") == 0) {
      emit_ir = true;
    } else if (build && strcmp(argv[i], "-o") == 0 && next && strcmp(next, "-") == 0) {
      to_stdout = true;
    } else if (build && strcmp(argv[i], "-O0") == 0) {
      i--; /* no value */
    } else {
      return usage();
    }
  }
  if (build && (!emit_ir || !to_stdout))
    return usage();
  Diags d;
  diags_init(&d);
  Graph *g = frontend_compile_file(argv[2], &opt, &d);
  if (d.len)
    fputs(d.text, stderr);
  int rc = g ? 0 : 1;
  if (g && build)
    ir_print(g, stdout);
  graph_destroy(g);
  diags_free(&d);
  return rc;
}
