/* driver.h: the whole compiler as one call. */
#ifndef FFNC_DRIVER_H
#define FFNC_DRIVER_H

#include "codegen.h"

typedef struct {
  int sm;        /* target arch, e.g. 90 */
  int opt_level; /* 0..3 */
  const PrecOverride *prec;
  int nprec;
  const FuseRequest *fuse;
  int nfuse;
  int tp, tp_rank;        /* tensor parallel: rank tp_rank's share over tp ranks (0 or 1: none) */
  const char *dump_after; /* --dump-ir-after */
  FILE *dump;
  bool grad;     /* the backward graph (passes/grad.c) instead of the program */
  bool keep;     /* the keep policy: with grad, the backward graph that reads the saved tensors
                  * (inputs saved.NAME); without, the training forward that writes them */
} DriverOptions;

/* Parses, checks, optimizes and generates code. plan and graph_out (the optimized graph)
 * may be NULL. Returns 0, or -1 with diagnostics in d. */
int driver_compile(const char *text, size_t len, const char *name, const DriverOptions *o, Diags *d, Plan **plan,
                   Graph **graph_out);

/* The passes and code generation on a graph the caller built or rewrote (src for the
 * diagnostics' source lines); g is optimized in place. */
int driver_compile_graph(Graph *g, const SourceFile *src, const DriverOptions *o, Diags *d, Plan **plan);

/* The model's function as the user wrote it: the checked IR with the requested FFN Fusion
 * applied (it changes the function), before any optimization; with o->tp > 1, rank
 * o->tp_rank's share of it (passes/tp.c; run the ranks together with interp_run_tp). This is what
 * the CPU reference runs and what compiled programs are compared against. With o->grad, the
 * backward graph of that function; with o->keep, the keep policy's training forward or backward
 * graph (passes/grad.c). NULL with diagnostics in d on error. */
Graph *driver_model_graph(const char *text, size_t len, const char *name, const DriverOptions *o, Diags *d);

/* "sm_90" -> 90; sm_80 and newer only. */
int parse_arch(const char *s, int *sm, char *err, size_t errlen);

/* Reads a whole regular file (NUL-terminated), refusing devices, FIFOs, directories and
 * files over 1 GiB before reading them. */
int read_file(const char *path, char **text, size_t *len, char *err, size_t errlen);

#endif
