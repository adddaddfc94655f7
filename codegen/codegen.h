/* codegen.h: from kernel groups to a Plan and CUDA source (codegen/lower.c, the text in
 * codegen/emit_cuda.c, what they share in codegen/gen.h), and the text
 * utilities the generator uses (codegen/buf.c). */
#ifndef FFNC_CODEGEN_H
#define FFNC_CODEGEN_H

#include "../passes/passes.h"
#include "plan.h"

/* Growable text buffer. */
typedef struct {
  char *s;
  size_t len, cap;
} Buf;
void buf_printf(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_puts(Buf *b, const char *s);
void buf_free(Buf *b);

/* Builds the plan (tensors, load-time steps, kernels, launch steps) and the CUDA source for
 * c->arch. Returns 0, or -1 after reporting into c->diags. */
int codegen_cuda(Compile *c, Plan **out);

/* The embedded device templates (kernels/ *.cuh), for NVRTC's header list. */
typedef struct {
  const char *name, *text;
} KernelSource;
extern const KernelSource ffn_kernel_sources[]; /* ends with {NULL, NULL} */

#endif
