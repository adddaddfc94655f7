/* plan.h: a compiled program, as the runtime sees it.
 *
 * The code generator turns the optimized IR into a Plan: the tensors the program touches,
 * the load-time steps that derive weights (gain folding, concatenation, interleaving...),
 * and the run-time steps (kernel launches and copies) in order, plus the CUDA source of
 * the kernels. The runtime needs nothing else, so a Plan plus a cubin is the AOT output
 * (plan_to_json / plan_from_json). Shapes may hold dynamic dims, bound at each run.
 */
#ifndef FFNC_PLAN_H
#define FFNC_PLAN_H

#include "../ir/ir.h"
#include "../kernels/abi.cuh"
#include "../kernels/gemm_host.h"

typedef enum {
  PT_INPUT,   /* the model input `index` (the caller's buffer) */
  PT_OUTPUT,  /* written straight into the caller's output `index` */
  PT_WEIGHT,  /* read from the weights (name) */
  PT_DERIVED, /* computed at load time by a prep step */
  PT_SCRATCH, /* run-time intermediate in the workspace; lifetime [first, last] steps */
} PlanTensorKind;

typedef struct {
  PlanTensorKind kind;
  DType dtype;
  int rank;
  Dim dims[FFN_MAX_RANK];
  int index;        /* PT_INPUT, PT_OUTPUT: position in the model's inputs/outputs */
  const char *name; /* PT_WEIGHT: tensor name; PT_INPUT/PT_OUTPUT: the model's name */
  int first, last;  /* PT_SCRATCH: first and last run step touching it */
  /* PT_SCRATCH: a scratch tensor whose bytes this one may take, or -1. The step that first
   * writes this one is an elementwise kernel that reads each element of that one before it
   * writes the same element of this one (lower.c: mark_in_place); where it is also that one's
   * last reader, the two share a buffer (memplan.c). */
  int alias;
  bool keep;        /* PT_WEIGHT, PT_DERIVED: needed at run time (else freed after prep) */
  /* PT_WEIGHT from a pre-quantized fp8 checkpoint (the IR weight's Node.stored/.scale): the
   * tensor `name` holds `stored` codes, the tensor `scale` their scales (ir/prequant.h), and
   * dtype is DT_U8: the device tensor is the codes' bytes, in the weight's shape.
   * ffn_model_bind_weights_file reads and checks both, uploads the codes and keeps the scales
   * on the host as ffn_model.prequant[t]; the load-time step f8_scales uploads them, and
   * f8_dequant makes the weight's f32 value where the program reads it. DT_NONE and NULL
   * otherwise. */
  DType stored;
  const char *scale;
} PlanTensor;

/* A load-time step: out = op(args) with the IR op's semantics (ir/ops.def). */
typedef struct {
  Op op;
  int out;
  int nargs;
  int args[8];
  int64_t ival[2];
  double fval;
} PrepStep;

typedef enum { KK_GEMM, KK_ROWWISE } KernelKind;

/* One compiled variant of a kernel (GEMM kernels have one per tile configuration). */
typedef struct {
  const char *func;    /* the __global__ function's name */
  int threads;
  int smem;            /* dynamic shared memory bytes */
  int64_t max_m;       /* use this variant when M <= max_m; 0: any M */
  ffn_gemm_config cfg; /* GEMM: the tile configuration (cfg.name points into the plan); the wgmma
                          variant of a weight gradient on sm_90 (op matmul_at): ffn_wgrad_config;
                          other rowwise kernels: cfg.bm rows per block (0 or 1: one) */
  bool ext_stats;      /* GEMM: A's row statistics come from ffn_row_stats, run just before */
  bool b_kn;           /* GEMM (FFN_GEMM_SM90P, 16-bit, one stream): B is [K, N] row-major, the weight as it
                          lies (gemm_sm90_persistent<..., B_KN = true>); false: [N, K] */
  /* A weight gradient's wgmma variant that writes a caller's gradient tensor in place of the
   * plan's f32 result (runtime/grad.c): of type `out` (f32 or bf16), the product added to what
   * the tensor holds when `accumulate`. DT_NONE: writes its result tensor as the plan types it. */
  DType out;
  bool accumulate;
  /* GEMM of weight-only quantized B (PlanKernel.wq_bits), bf16 A: a 16-bit tensor-core variant
   * (FFN_GEMM_SM80/SM90T/SM90P) for many rows, whose B is the weights as bf16 [S*N, K], made in
   * the call's workspace by ffn_wq_dequant (kernels/runtime.cuh) just before it; the runtime
   * passes them in place of the codes (slot 1). The contract at the top of ir/interp.c. */
  bool dq;
  /* GEMM of weight-only quantized B, bf16 A, sm_90: a TMA wgmma tile whose producer warpgroup turns
   * B's codes (slot 1) and scales (slot 2) into the bf16 tiles its consumers read, in shared
   * memory (kernels/gemm_sm90.cuh: WQ); the same weights as `dq` without the workspace's copy. */
  bool mx;
} KernelVariant;

/* Variants per kernel: an sm_90 GEMM compiles up to 8 (three mma.sync tiles for small M, the TMA
 * tiles, the clustered and persistent ones); room for more. */
enum { PLAN_MAX_VARIANTS = 20 }; /* i4 weight-only products compile 12, 3 `dq` and 2 `mx` (tmaq, tmar) */

typedef struct {
  KernelKind kind;
  int nvariants;
  KernelVariant variants[PLAN_MAX_VARIANTS];
  /* GEMM: output columns per stream, inner dim, streams; a weight gradient on sm_90 (op matmul_at):
   * out [k, n] (rowwise kernels: n the columns) */
  int64_t n, k;
  int streams;
  bool splittable; /* tensor-core GEMMs can split K across CTAs */
  int wq_bits, wq_group; /* weight-only quantized B: 8 or 4 (0: none) and the i4 group length */
  /* The one IR op the kernel computes when it computes just one (rowwise kernels at -O0,
   * GEMMs that only store their product: OP_MATMUL), else OP_COUNT. Its tensors are then its
   * operands in order (scalars are literals, repeats once), then its result. The bench's
   * eager baseline uses this to swap in cuBLASLt. */
  Op op;
} PlanKernel;

/* STEP_ALLREDUCE (tensor parallel): dst = the sum of src over the `ranks` ranks of the
 * program (each rank runs its own plan, compiled with its --tp-rank), NCCL's ncclAllReduce
 * with ncclSum in src's element type; src and dst have the same shape and type. */
typedef enum { STEP_LAUNCH, STEP_COPY, STEP_ALLREDUCE } StepKind;

typedef struct {
  StepKind kind;
  int kernel;          /* STEP_LAUNCH: index into kernels */
  int nargs;
  int args[FFN_KARGS_SLOTS]; /* tensor ids, in the order the kernel's KArgs.p[] expects */
  int nrowdims;        /* M = product of these dims (the leading dims of the rows) */
  Dim rowdims[FFN_MAX_RANK];
  int src, dst;        /* STEP_COPY, STEP_ALLREDUCE */
  int ranks;           /* STEP_ALLREDUCE */
} PlanStep;

typedef struct Plan {
  Arena *arena;
  const char *model;
  const char *arch;     /* "sm_90" */
  int tp, tp_rank;      /* tensor parallel: this is rank tp_rank's share over tp ranks (tp 1: none) */
  int ndims;
  const char **dim_names;
  int ninputs, noutputs;
  int ntensors;
  PlanTensor *tensors;
  int nprep;
  PrepStep *prep;
  int nkernels;
  PlanKernel *kernels;
  int nsteps;
  PlanStep *steps;
  const char *cuda_source;
} Plan;

/* Numbers of elements of tensor t with dynamic dims bound to dims[]. */
int64_t plan_numel(const Plan *p, int t, const int64_t *dims);

/* The op table, element types and kernel ABI of this ffnc (kernels/abi.cuh), hashed: 16 hex
 * digits. Written into every plan; plan_from_json refuses plans with another (codegen/abi.c). */
const char *plan_abi_hash(void);

/* JSON text (jansson) of everything but the CUDA source; and back. plan_from_json returns
 * NULL with the reason in err for any plan it cannot fully check (files may be damaged). */
char *plan_to_json(const Plan *p); /* malloc'd */
Plan *plan_from_json(const char *json, char *err, size_t errlen);
void plan_destroy(Plan *p);

/* Human-readable summary (`--emit plan`): tensors, prep and launch steps. */
void plan_print(const Plan *p, FILE *out);

#endif
