/* abi.cuh: the contracts between ffnc's code generator, the code it generates and the runtime,
 * in one place. Valid C11 (included by codegen/ and runtime/) and CUDA C++ (embedded with the
 * other kernels/ *.cuh and included by ewise.cuh and prep.cuh under NVRTC), so both sides see
 * the same numbers and the same struct layouts.
 *
 * AOT output bakes all of this into its cubin, together with the op and element-type codes of
 * ir/ops.def and ir/ir.h. ffnc hashes this file's text with those tables (codegen/abi.c,
 * plan_abi_hash) and records the hash in every launch plan; ffn_program_load refuses a plan
 * with another hash, and the kernel cache keys on it. So a change here needs no hand-kept
 * version bump, only a rebuild of AOT files.
 *
 * The GEMM tile configuration (ffn_gemm_config) and the template arguments printed from it
 * live in kernels/gemm_host.h, next to the tile tables; its layout is hashed too.
 */
#ifndef FFN_KERNELS_ABI_H
#define FFN_KERNELS_ABI_H

/* Tensor pointers a generated kernel can take (KArgs.p): the code generator refuses a kernel
 * that reads more, and launch plans list at most this many operands per launch. */
#define FFN_KARGS_SLOTS 30

/* Gate/up interleave: a merged gate/up weight holds the two halves' rows alternating in groups
 * of this many rows (OP_INTERLEAVE ival[0]); the GEMM epilogue pairs column c of one stream
 * with column c of the other within such a group. gateup.c merges only products whose column
 * count it divides. */
#define FFN_GATEUP_GROUP 8

/* Programmatic dependent launch: from this arch on, every generated kernel of a plan starts with
 * ffn::pdl_entry(): it lets the next launch on the stream be
 * scheduled, then waits until the kernels before it on the stream have finished and their writes
 * are visible, before it reads or writes any tensor. So the runtime may launch a plan's kernel
 * that follows another of its kernels with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
 * its start (launch, shared memory, barriers, tensor maps) overlaps the tail of the one before.
 * It does so for a GEMM after a GEMM that fills the GPU (runtime/rt.h: ffn_model.pdl).
 * Plans for older archs launch plainly. */
#define FFN_PDL_MIN_ARCH 90

/* The most dynamic shared memory a block may take on sm_90 (227 KB): the wgmma kernels' rings are
 * sized within it (static_asserts), and the code generator drops a configuration past it. */
#define FFN_SM90_MAX_SMEM 232448

/* Dims of a load-time elementwise step's broadcast index (FfnPrepIndex). */
#define FFN_PREP_MAX_RANK 6

#ifdef __cplusplus
namespace ffn {
#endif

/* Every generated kernel takes one of these by value (__grid_constant__); the runtime fills it
 * (runtime/exec.c). p[] holds tensor pointers in the order the plan's launch step lists them. */
typedef struct KArgs {
  void *p[FFN_KARGS_SLOTS];
  long long m;           /* rows: the product of the leading dims */
  int splits;            /* GEMM split-K factor */
  int pad_;
  float *ws;             /* GEMM split-K partials */
  unsigned *counters;    /* GEMM split-K tile counters (zero between launches) */
  const float *rowstats; /* [m][2] sum and sum of squares of A's rows, for the GEMM variants
                            that take them from ffn_row_stats instead of computing them per tile */
} KArgs;

/* The second argument of the GEMM kernels whose operands come through the Tensor Memory
 * Accelerator (FFN_GEMM_SM90T, kernels/gemm_sm90.cuh): the tensor maps of A and B, encoded by
 * the runtime for each launch (runtime/exec.c, cuTensorMapEncodeTiled) and passed by value
 * (__grid_constant__), as the driver's CUtensorMap: 128 opaque bytes aligned to 128. */
#ifdef __cplusplus
#define FFN_ALIGN128 alignas(128)
#else
#define FFN_ALIGN128 _Alignas(128)
#endif
typedef struct TmaMap {
  FFN_ALIGN128 unsigned long long opaque[16];
} TmaMap;
typedef struct TmaMaps {
  TmaMap a, b;
} TmaMaps;

/* Broadcast indexing of a load-time elementwise step: out has `rank` dims; sa/sb are element
 * strides of a and b per out dim (0 where that operand is broadcast). */
typedef struct PrepIndex {
  int rank;
  long long dims[FFN_PREP_MAX_RANK];
  long long sa[FFN_PREP_MAX_RANK], sb[FFN_PREP_MAX_RANK];
} PrepIndex;

/* The one argument of every load-time kernel (kernels/prep.cuh, ffn_prep_*), filled by
 * runtime/exec.c. Element types are DT_* codes; which fields a kernel reads: */
typedef struct PrepArgs {
  void *out;
  const void *a, *b;   /* operands (b: ewise with two operands, matmul) */
  int dto, dta, dtb;   /* element types of out, a, b */
  int op;              /* ewise: the OP_* code */
  long long n;         /* fill, ewise: elements of out */
  long long rows, cols; /* transpose, rowsum: a is [rows, cols]; interleave: [rows, cols = K];
                           matmul: out [rows = M, cols = N] */
  long long inner;     /* matmul: the shared dim K */
  long long group, streams; /* interleave: rows per group (FFN_GATEUP_GROUP), number of blocks;
                               matmul: i4 group, bits of b's weight-only quantization (0: none) */
  double value;        /* fill */
  PrepIndex ix;        /* ewise */
} PrepArgs;

#ifdef __cplusplus
} // namespace ffn
static_assert(sizeof(ffn::KArgs) == 280, "KArgs layout: see kernels/abi.cuh");
static_assert(sizeof(ffn::TmaMaps) == 256 && alignof(ffn::TmaMaps) == 128, "TmaMaps layout");
#else
_Static_assert(sizeof(KArgs) == 280, "KArgs layout: see kernels/abi.cuh");
_Static_assert(sizeof(TmaMaps) == 256 && _Alignof(TmaMaps) == 128, "TmaMaps layout");
#endif

#endif /* FFN_KERNELS_ABI_H */
