/* gen.h: what the two halves of the CUDA code generator share (internal to codegen/).
 *
 *   lower.c      kernel groups -> the Plan: tensors, load-time steps, one kernel per group
 *                (kernels with identical text merged), the tile configurations a GEMM is
 *                compiled in, launch steps and copies; the entry point codegen_cuda()
 *   emit_cuda.c  the CUDA text: the prelude, GEMM epilogue functors and entry points, rowwise
 *                kernel bodies
 *
 * Tensor pointers reach a kernel through KArgs.p[], in the order the launch step lists them
 * (Kgen.slot_tensor); everything else (N, K, eps...) is a compile-time constant in the text.
 */
#ifndef FFNC_CODEGEN_GEN_H
#define FFNC_CODEGEN_GEN_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "codegen.h"

/* Appends room for one element to a realloc'd array, doubling it when full. */
#define GROW(arr, len, cap)                                       \
  do {                                                            \
    if ((len) == (cap)) {                                         \
      (cap) = (cap) ? (cap) * 2 : 16;                             \
      (arr) = ffn_xrealloc((arr), sizeof(*(arr)) * (size_t)(cap)); \
    }                                                             \
  } while (0)

typedef struct {
  char *body; /* generated text without the kernel's name */
  int kernel;
} Dedup;

/* The program being generated. */
typedef struct {
  Compile *c;
  Graph *g;
  int *tensor_of; /* node id -> plan tensor, -1 */
  /* pre-quantized weight node id -> its codes (the bound tensor, u8) and its f8_scales tensor
   * (f32 [rows, 1]), -1; tensor_of holds its value (f8_dequant), made only if read */
  int *codes_of, *scales_of;
  /* an fp8 product's A written as codes and row scales by the rowwise kernel that computes it
   * (lower.c: f8_fused_consumer): node id -> those tensors, -1 */
  int *act_codes_of, *act_scales_of;
  PlanTensor *tensors;
  int nt, capt;
  PrepStep *prep;
  int nprep, capprep;
  PlanKernel *kernels;
  int nk, capk;
  PlanStep *steps;
  int nsteps, capsteps;
  Dedup *dedup;
  int ndedup, capdedup;
  Buf src; /* the CUDA source */
  int rc;
} Gen;

/* Per-group state while generating one kernel. */
typedef struct {
  Gen *G;
  Group *gr;
  int slot_tensor[FFN_KARGS_SLOTS]; /* KArgs.p[i] -> plan tensor */
  int nslots;
  int nvars;           /* generated variables so far (their names' numbers) */
  Shape full;          /* the group's element shape */
  int64_t ncols;       /* its last dim */
  int wq_bits;         /* 8 or 4: B is weight-only quantized (gemm_wq.cuh); 0: not */
  int wq_group;        /* i4 group length along K (0: one group) */
  int wq_codes, wq_scales; /* the packed B and its scales (plan tensors), when wq_bits */
  DType f8;            /* DT_F8E4M3 / DT_F8E5M2: an fp8 product (fp8.cuh); DT_NONE: not */
  int f8_a, f8_sa, f8_b, f8_sb; /* its codes and scales of A (run time) and B (load time) */
  int f8_stats;        /* A's row sums and sums of squares for a folded norm (the quantizer's), or -1 */
  /* rowwise kernels (emit_cuda.c, "rows in registers"): the row in chunks of `vec` elements, each
   * thread's chunks of its operands held as words; 0 in GEMM epilogues */
  int vec;
  int max_chunks;      /* chunks per thread of the variant with the fewest threads per row */
  bool resident;       /* the operands' words are read once per row (else in every pass) */
  uint64_t row_slots, col_slots, nc_slots; /* slots read as rows, per column, through .nc */
  uint64_t pass_slots; /* those the pass being generated reads */
} Kgen;

/* Reports an error at n (without a location if n has none) and fails the generation. */
static inline int fail(Gen *G, const Node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline int fail(Gen *G, const Node *n, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (n && n->loc.line)
    diag_error(G->c->diags, G->c->src, n->loc, "%s", msg);
  else
    diag_plain(G->c->diags, "%s", msg);
  G->rc = -1;
  return -1;
}

static inline const char *tname(DType t) { /* storage suffix of ld_/st_ helpers */
  switch (t) {
  case DT_F32: return "f32";
  case DT_BF16: return "bf16";
  case DT_F16: return "f16";
  default: return NULL;
  }
}

/* ---- lower.c ---- */

/* The plan tensor holding node n's value (created on first use; constants get their load-time
 * step); -1 after an error. */
int gen_tensor_for(Gen *G, Node *n);

/* ---- emit_cuda.c ---- */

/* The device type name of element type t (ffn::bf16, ...; float for f32). */
const char *gen_ctype(DType t);
/* body into out with every '@' replaced by name. */
void emit_named(Buf *out, const char *name, const char *body);

/* The head of the source: version, the dtype and op codes, the device templates. */
void emit_prelude(Gen *G);
/* `struct Epi_@`: the epilogue functor of GEMM group k->gr. Assigns A and B the first two slots
 * (the entry points read them there), then the epilogue's operands and results. */
void emit_gemm_functor(Kgen *k, Buf *body);
/* The __global__ entry point of GEMM k for tile configuration c; ext: A's row statistics come
 * from ffn_row_stats instead of the GEMM; wq_mix: the bits of B's codes, which a TMA wgmma tile
 * turns into bf16 in shared memory (KernelVariant.mx), else 0. */
void emit_gemm_entry(Kgen *k, const ffn_gemm_config *c, bool ext, int wq_mix, Buf *body);
void emit_wqrs_entry(Kgen *k, const ffn_gemm_config *c, Buf *body);
/* A rowwise kernel's launch forms: blocks of `threads`, `tpr` threads per row (so threads / tpr
 * rows per block), `name` the suffix of its entry point, max_m the most rows it runs (0: any;
 * the forms in increasing max_m, the plan's variants in that order). */
typedef struct {
  int threads, tpr;
  const char *name;
  int64_t max_m;
} RowForm;
enum { ROW_MAX_FORMS = 3 };
/* The row layout of a rowwise kernel over n columns: chunks of *vec elements, and its forms
 * (returns 1 to 3): for the few rows of decode a block of up to 1024 threads per row, where
 * the row is wide; a block per row, for few rows; for many, a few rows per block. */
int rowwise_forms(int64_t n, int *vec, RowForm forms[ROW_MAX_FORMS]);
/* The rowwise kernel of group k->gr (k->vec set): a row loop templated on its form, and an entry
 * point per form. */
void emit_rowwise_kernel(Kgen *k, const RowForm *forms, int nforms, Buf *body);
void emit_rowwise_f8_kernel(Kgen *k, const RowForm *forms, int nforms, int codes, int scales, DType f8, Buf *body);
/* GEMM kernel text into the program: a heading comment, then body with '@' replaced by name. */
void emit_gemm_text(Kgen *k, const char *name, bool tc, const char *body);

#endif
