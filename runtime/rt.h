/* rt.h: the runtime's internals: the CUDA driver and NVRTC loaded with dlopen, the kernel
 * cache, programs (a Plan plus its compiled image) and models (a program on a device with
 * its weights), and the error reporting every API call uses. */
#ifndef FFNC_RT_H
#define FFNC_RT_H

#include <cuda.h>
#include <nvrtc.h>
#include <pthread.h>

#include "../codegen/plan.h"
#include "../ir/prequant.h"
#include "../kernels/abi.cuh" /* KArgs, PrepArgs */
#include "../include/ffn.h"
#include "tune.h"

/* ---- errors (api.c) ---- */

/* Sets this thread's last error and returns s. */
ffn_status rt_error(ffn_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- the driver (cuda_api.c) ---- */

#define CU_FUNCS(X)                                                                                   \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetAttribute)          \
  X(cuDeviceGetName) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxPushCurrent)     \
  X(cuCtxPopCurrent) X(cuModuleLoadDataEx) X(cuModuleUnload)                      \
  X(cuModuleGetFunction) X(cuFuncSetAttribute) X(cuFuncGetAttribute) X(cuLaunchKernel) X(cuLaunchKernelEx) X(cuMemAlloc) \
  X(cuMemFree) X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync)              \
  X(cuMemcpyDtoDAsync) X(cuMemcpy2DAsync) X(cuMemsetD8Async) X(cuMemsetD32Async) X(cuMemGetInfo)     \
  X(cuStreamCreate) X(cuStreamCreateWithPriority) X(cuCtxGetStreamPriorityRange) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamBeginCapture)                 \
  X(cuStreamEndCapture) X(cuGraphInstantiate) X(cuGraphLaunch) X(cuGraphExecDestroy)                  \
  X(cuGraphDestroy) X(cuEventCreate) X(cuEventRecord) X(cuEventQuery) X(cuEventSynchronize)           \
  X(cuEventElapsedTime) X(cuEventDestroy) X(cuGetErrorName) X(cuGetErrorString)                       \
  X(cuPointerGetAttribute) X(cuStreamWaitEvent) X(cuStreamIsCapturing)    \
  X(cuTensorMapEncodeTiled)

typedef struct {
#define X(f) __typeof__(&f) f;
  CU_FUNCS(X)
#undef X
  int version; /* cuDriverGetVersion */
} CuApi;

/* Loads libcuda.so.1 and calls cuInit once (thread-safe). NULL with the reason in why. */
const CuApi *cu_api(char *why, size_t len);

/* The arch of device 0 as 90 for sm_90, or 90 where there is no device: what programs are
 * compiled for when the caller names no arch. */
int cu_default_arch(void);

/* If r is not CUDA_SUCCESS: sets the last error to "CALL failed: NAME (description)" and
 * returns FFN_ERR_CUDA (FFN_ERR_OUT_OF_MEMORY for CUDA_ERROR_OUT_OF_MEMORY). */
ffn_status cu_fail(const CuApi *cu, CUresult r, const char *call);
#define CU_CHECK(cu, call)                                          \
  do {                                                              \
    CUresult r_ = (call);                                           \
    if (r_ != CUDA_SUCCESS)                                         \
      return cu_fail((cu), r_, #call);                              \
  } while (0)

/* ---- NCCL (nccl.c) ----
 *
 * Loaded at run time like the driver, for tensor-parallel programs only: no nccl.h is needed
 * to build ffnc. The types and values below are NCCL's ABI (src/nccl.h.in): a communicator is
 * an opaque pointer, results and enums are ints. */

typedef struct ncclComm *NcclComm;
typedef struct {
  char internal[128]; /* NCCL_UNIQUE_ID_BYTES */
} NcclUniqueId;
enum {
  NCCL_SUCCESS = 0,     /* ncclSuccess */
  NCCL_IN_PROGRESS = 7, /* ncclInProgress (non-blocking communicators) */
  NCCL_FLOAT16 = 6,     /* ncclFloat16 */
  NCCL_FLOAT32 = 7,     /* ncclFloat32 */
  NCCL_BFLOAT16 = 9,    /* ncclBfloat16 */
  NCCL_SUM = 0,         /* ncclSum */
};

typedef struct {
  /* ncclGetUniqueId and ncclCommInitRank are for host programs that make their own
   * communicators (one process per GPU); ffnc itself uses ncclCommInitAll. */
  int (*GetUniqueId)(NcclUniqueId *id);
  int (*CommInitRank)(NcclComm *comm, int nranks, NcclUniqueId id, int rank);
  int (*CommInitAll)(NcclComm *comms, int ndev, const int *devices);
  int (*CommDestroy)(NcclComm comm);
  int (*CommCount)(NcclComm comm, int *count);
  int (*CommUserRank)(NcclComm comm, int *rank);
  int (*CommCuDevice)(NcclComm comm, int *device);
  int (*CommGetAsyncError)(NcclComm comm, int *error);
  int (*AllReduce)(const void *src, void *dst, size_t count, int dtype, int op, NcclComm comm, CUstream stream);
  int (*GroupStart)(void);
  int (*GroupEnd)(void);
  const char *(*GetErrorString)(int result);
  int version; /* ncclGetVersion: 22605 for 2.26.5 */
  char path[512]; /* what was loaded */
} NcclApi;

/* Loads NCCL once (thread-safe): $FFNC_NCCL_LIBRARY if set, else libnccl.so.2 from the
 * loader's search path. NULL with the reason, and how to point at the library, in why. */
const NcclApi *nccl_api(char *why, size_t len);

/* If r is not ncclSuccess: sets the last error to "CALL failed: DESCRIPTION" and returns
 * FFN_ERR_CUDA. */
ffn_status nccl_fail(const NcclApi *nccl, int r, const char *call);
#define NCCL_CHECK(nccl, call)                                      \
  do {                                                              \
    int r_ = (call);                                                \
    if (r_ != NCCL_SUCCESS)                                         \
      return nccl_fail((nccl), r_, #call);                          \
  } while (0)

/* NCCL's element type for t (NCCL_FLOAT32...), or -1 where NCCL has none we use. */
int nccl_dtype(DType t);

/* One communicator per model over devices[0..n) (ncclCommInitAll, rank i on devices[i]),
 * each owned by its model (destroyed with it): how `ffnc run --tp N` drives N GPUs. */
ffn_status nccl_init_models(ffn_model **models, const int *devices, int n);

/* ---- a tensor-parallel share's weight windows (tp_weights.c) ---- */

/* The part of a whole [rows, cols] weight a share holds: rows (axis 0) or columns (axis 1)
 * [off, off + len). */
typedef struct {
  bool on;
  int axis;
  int64_t off, len;
  int64_t rows, cols; /* the whole weight, as stored */
} WeightWindow;

/* For a plan with tp > 1: a copy in which every weight that only a slice reads is narrowed
 * to its window (windows[t], per plan tensor), and the steps that read it to match. *out
 * NULL where nothing narrows (tp 1, FFNC_TP_WHOLE_WEIGHTS=1, every weight read whole). */
ffn_status tp_narrow_plan(const Plan *p, Plan **out, WeightWindow **windows);
/* Copies w's part of the whole row-major weight at whole (esize-byte elements) to out,
 * contiguous. */
void window_gather(const WeightWindow *w, const void *whole, size_t esize, void *out);

/* ---- NVRTC (nvrtc.c) ---- */

typedef struct {
  void *image; /* cubin, or PTX text when ptx: then NUL-terminated, the NUL counted in size */
  size_t size;
  bool ptx;
} Image;

/* Whether image holds the symbol name: a cubin's string table has it NUL-terminated after a
 * NUL or '.' (".text.NAME"), PTX as ".entry NAME(" (api.c). */
bool image_names(const Image *im, const char *name);
/* Compiles source for arch ("sm_90") into a cubin (or PTX), through the cache. */
ffn_status nvrtc_compile(const char *source, const char *name, const char *arch, bool ptx, Image *out);
/* "13.0", or the reason NVRTC cannot be loaded; returns false if unavailable. */
bool nvrtc_version(char *buf, size_t len);

/* ---- compile units (units.c) ---- */

typedef struct {
  char *name;   /* for messages and -v: "runtime", "k0_sm90_128x256x64", "k2,k5" */
  char *source; /* a whole program for NVRTC */
  int cost;     /* rough compile time: units come largest first */
  int order;    /* position in the source (equal costs keep it) */
} CompileUnit;

/* The programs NVRTC compiles for a plan's CUDA source (units.c says how it is cut): the
 * runtime's kernels, each GEMM entry point, rowwise kernels a few at a time. Returns their
 * number, or -1 when out of host memory. */
int compile_units(const char *cuda_source, CompileUnit **out);
void compile_units_free(CompileUnit *u, int n);

/* Compiles units[0..n) into cubins images[0..n) for arch, a pool of threads at once
 * (FFNC_JIT_THREADS, else one per CPU), each through the cache; fn (if not NULL) hears how
 * it goes (ffn_options_set_progress). On failure the error of one failed unit, and images
 * are left empty. */
ffn_status nvrtc_compile_units(const CompileUnit *units, int n, const char *arch, ffn_progress_fn fn, void *user,
                               Image *images);

/* ---- kernel cache (cache.c) ---- */

/* Looks up / stores a compiled image by key text (the key is stored in the entry and
 * compared on lookup, so a hash collision can only miss). An entry that fails its checks
 * (checksum, lengths, a PTX image's NUL) is a miss. Disabled by FFNC_NO_CACHE=1. */
bool cache_get(const char *key, size_t keylen, Image *out);
void cache_put(const char *key, size_t keylen, const Image *img);
/* Why the cache directory is not used although it exists (it is not ours, or others can
 * write to it), once a lookup or store has found so; NULL otherwise. For the CLI's note:
 * the library prints nothing. */
const char *cache_untrusted(void);
/* The cache directory where it is used (exists, ours, private; FFNC_NO_CACHE unset), else
 * NULL: tuned GEMM choices (tune.h) live there too. */
const char *cache_directory(void);

/* ---- programs and models (api.c, exec.c) ---- */

struct ffn_program {
  Plan *plan;
  Image *images; /* a module each: the compile units of the plan's source (units.c) */
  int nimages;
};

/* A program from a compiled plan (taken over, destroyed on failure): NVRTC compiles its
 * source for its arch, reporting to opt's progress function (opt may be NULL). What
 * ffn_program_compile does after the compiler; `ffnc analyze` uses it for programs it builds
 * from rewritten graphs. */
ffn_status program_from_plan(Plan *plan, const ffn_options *opt, ffn_program **out);

/* ---- row blocks: a large call pipelined against its all-reduces (tp_overlap.c) ----
 *
 * Every kernel of a forward program computes each row (token) from that row alone, so a call
 * of T rows can run as row blocks, each a call of its own (its own workspace: its scratch,
 * split-K partials and counters, row statistics). A tensor-parallel call so cut enqueues its
 * blocks segment by segment (a segment: the steps between two all-reduces) on the caller's
 * stream, and each block's all-reduce on a second stream forked from it with events, so the
 * all-reduce of block b runs while block b+1 computes, and block b's next segment waits only for
 * its own. The policy (also FFNC_TP_OVERLAP and FFNC_TP_BLOCKS, read at ffn_model_create):
 * a program with all-reduce steps, from TP_OVERLAP_MIN_ROWS rows, in up to TP_DEFAULT_BLOCKS
 * blocks of at least TP_BLOCK_MIN_ROWS rows, each a multiple of TP_BLOCK_ALIGN rows but the
 * last. */
enum {
  TP_MAX_BLOCKS = 16,
  TP_DEFAULT_BLOCKS = 4,
  /* below 512-row blocks the GEMMs lose more to fewer tiles per launch and weights read again
   * per block than hiding part of a short all-reduce wins (kernels/NOTES.md, predictions) */
  TP_OVERLAP_MIN_ROWS = 1024,
  TP_BLOCK_MIN_ROWS = 512,
  TP_BLOCK_ALIGN = 128, /* the tallest GEMM tile: no block launches a partial tile but the last */
  TP_BLOCK_ALIGN_SMALL = 16, /* forced blocks of fewer rows (tests): 16 rows keep every slice 16-byte aligned */
};

/* The rows [starts[b], starts[b+1]) of each of the n row blocks of a call of `rows` rows; returns
 * n (1: the call runs whole). blocks: the model's setting (ffn_model.tp_blocks): -1 never cut,
 * 0 the policy (for a program that reduces: `reduces`), N > 0 that many where the rows allow.
 * starts has room for TP_MAX_BLOCKS + 1. */
int tp_row_blocks(int64_t rows, int blocks, bool reduces, int64_t *starts);

/* The dynamic dim that counts the rows of every run-time tensor and launch of p (its leading
 * dim, nowhere else), or -1 where p's calls cannot be cut into row blocks: a launch whose rows
 * are not just that dim, a kernel that sums over the rows (a backward graph's weight gradient),
 * an input or output that does not lead with it. */
int tp_row_dim(const Plan *p);

/* The order a call cut into `blocks` row blocks enqueues its work in: segment by segment, each
 * block's steps of the segment (after waiting for its all-reduce before the segment), then its
 * all-reduce at the segment's end. */
typedef enum {
  PIPE_WAIT,    /* the caller's stream waits for block's last all-reduce */
  PIPE_COMPUTE, /* block's steps [first, last) on the caller's stream */
  PIPE_REDUCE,  /* block's all-reduce step `first` on the side stream, after its steps so far */
} PipeOpKind;
typedef struct {
  PipeOpKind kind;
  int block, first, last;
} PipeOp;
/* Writes the ops into ops (room for tp_schedule_size) and returns their number. */
int tp_schedule_size(const Plan *p, int blocks);
int tp_schedule(const Plan *p, int blocks, PipeOp *ops);

/* A call's device memory: split-K tile counters first (always zero between launches: each
 * GEMM leaves them zero, so they are cleared only when the region is allocated), then the
 * planned buffers and the split-K partials. */
typedef struct {
  CUdeviceptr base;
  size_t size;
  size_t ncounters;     /* capacity of the counters region at base */
  CUstream last_stream;
  CUevent done;         /* recorded after the last run that used it */
  const ffn_model *sized_by; /* whose call last allocated it (acquire's headroom; never dereferenced) */
  bool busy;            /* taken by a run being enqueued */
  bool pinned;          /* baked into a captured CUDA graph: never handed out again */
  /* A call cut into row blocks (tp_overlap.c) whose first block holds this workspace: its
   * all-reduces run on `side`, each after `computed` (recorded on the call's stream), and
   * reduced[b] marks block b's latest one. Created at the first such call, 0 until then. */
  CUstream side;
  CUevent computed, reduced[TP_MAX_BLOCKS];
} Workspace;

/* The workspaces a model's calls take (exec.c: acquire): its own, or one shared with other
 * models on its context (ffn_model_share_workspace). A training forward and its backward graph
 * run one after the other on a stream, so with one pool they take turns in one workspace the
 * size of the larger need instead of holding two. Each model holds a reference; the last one
 * dropped frees the workspaces. */
typedef struct WorkspacePool {
  pthread_mutex_t lock; /* guards refs, the array and every Workspace's busy, pinned, last_stream */
  int refs;
  const CuApi *cu;
  CUcontext ctx;        /* the workspaces' memory is this context's: it is pushed to free them */
  Workspace **ws;       /* entries never move: a call holds a pointer to its own */
  int nws, capws;
} WorkspacePool;

/* exec.c: a new pool holding one reference (NULL: out of host memory, said through rt_error);
 * pool_release drops one, the last frees the pool as exec_free_workspaces does. */
WorkspacePool *pool_create(const CuApi *cu, CUcontext ctx);
void pool_retain(WorkspacePool *p);
void pool_release(WorkspacePool *p);

struct ffn_model {
  const ffn_program *prog;
  const CuApi *cu;
  CUdevice dev;
  CUcontext ctx;
  int sms;
  int dram_gbs; /* peak DRAM bandwidth, GB/s, from the memory clock and bus width (0: unknown) */
  /* a plan GEMM that follows a GEMM filling >= 3/4 of the SMs' CTA slots, with at most PDL_WAVES
   * (16) waves of work (exec.c), starts during its tail
   * (programmatic dependent launch, abi.cuh: FFN_PDL_MIN_ARCH; the plan's arch and the device's
   * from it; FFNC_PDL=0 turns it off; exec.c: exec_step). Weight-only decode 1-6% faster, bf16 ~1%;
   * after a rowwise kernel (fp8's quantizers) or a smaller GEMM it measured 7-18% slower
   * (kernels/NOTES.md, fourteenth session) */
  bool pdl;
  CUmodule *modules;  /* one per program image */
  int nmodules;
  CUfunction *funcs;   /* [kernel][variant] flattened, see func_index */
  int *func_base;      /* kernel -> first index in funcs */
  CUfunction prep_fill, prep_ewise, prep_transpose, prep_interleave, prep_rowsum, prep_matmul;
  CUfunction prep_wq_scale, prep_wq_pack; /* weight-only quantization (kernels/quant.cuh) */
  CUfunction prep_f8_scale, prep_f8_pack; /* fp8 weights (kernels/numfmt.cuh) */
  CUfunction prep_f8_dequant;             /* pre-quantized fp8 weights' values */
  CUfunction row_stats; /* for GEMM variants with row statistics from memory */
  CUfunction wq_dequant; /* quantized weights as bf16 for the GEMM variants with `dq` (plan.h) */
  CUfunction grad_store; /* ffn_model_run_grad's, looked up at its first call (grad.c) */
  CUdeviceptr *tensor; /* per plan tensor: device memory of weights and derived tensors */
  bool *owned;         /* we allocated tensor[i] (and free it) */
  bool prepared;
  bool *consumed;      /* weights released after the load-time steps that read them */
  /* Per plan tensor: a pre-quantized fp8 weight (PlanTensor.stored) as bound by
   * ffn_model_bind_weights_file, checked by ir/prequant.h's rules. Its codes, rows x cols
   * bytes as stored, are on the device at tensor[t] (prequant[t].codes is NULL: the file is
   * closed); prequant[t].scale holds its rows f32 scales on the host (per_tensor: one scale
   * repeated) for exec_prepare to upload or fold. code_type DT_NONE: not bound / not one. */
  PrequantWeight *prequant;
  char gemm_variant[256]; /* FFNC_GEMM_VARIANT at creation: force these tile configurations (a comma-separated
                            list: the first a GEMM has; "": none) */
  int gemm_splits;       /* FFNC_GEMM_SPLITS at creation: force split-K on splittable GEMMs (0: none) */
  bool wgrad_mma;        /* FFNC_WGRAD=mma at creation: weight gradients of sm_90 plans on mma.sync */
  bool no_dq;            /* FFNC_WQ_DEQUANT=0 at creation: quantized products never take their `dq` variants */
  bool no_mx;            /* FFNC_WQ_MIX=0 at creation: nor their `mx` variants (plan.h) */
  /* A tensor-parallel share's own copy of its program whose plan holds weight windows
   * (tp_weights.c; the images are the caller's program's): prog then points to it. window[t]
   * says what of weight t is bound; NULL: every weight whole. */
  ffn_program *narrowed;
  WeightWindow *window;
  int device;         /* the ordinal given to ffn_model_create */
  /* row blocks of a large call (tp_row_blocks): -1 never (FFNC_TP_OVERLAP=0), 0 the policy,
   * N forced (FFNC_TP_BLOCKS=N), read at ffn_model_create; the bench sets it to compare */
  int tp_blocks;
  int row_dim;   /* tp_row_dim of the plan: the dim a call is cut along, -1: none */
  bool reduces;  /* the plan has all-reduce steps */
  /* tensor parallel (a plan with tp > 1): this rank's NCCL communicator, the caller's
   * (ffn_model_set_communicator) or ours (nccl_init_models, then owns_comm) */
  NcclComm comm;
  bool owns_comm;
  /* Tuned GEMM choices (tune.c), per plan kernel (n == 0: none, the heuristic decides), and
   * what loading or tuning them found (ffn_model_tuning). */
  struct TunedKernel *tuned;
  char tuning[1024];
  pthread_mutex_t lock; /* guards grad_store's lookup at the first ffn_model_run_grad */
  WorkspacePool *pool;  /* never NULL once created; shared after ffn_model_share_workspace */
};

/* api.c: kernel `name` of the program's modules (FFN_ERR_IO naming it where none has it) */
ffn_status find_function(ffn_model *m, const char *name, CUfunction *f);

/* exec.c */
/* A load-time step's shapes against the IR's own shape rules (AOT plans come from files). */
ffn_status exec_check_prep(const Plan *p, const PrepStep *s);
typedef struct {
  const KernelVariant *v; /* the variant for this call's M */
  int splits;
  int64_t m;
} LaunchChoice;

/* A GEMM kernel's tuned choices: from `rows[i]` rows on (up to the next bucket, and at most
 * twice rows[i] unless the variant's max_m reaches further), variant[i] of the kernel with
 * split-K splits[i] (0: ffn_gemm_pick_splits for the call's rows). */
typedef struct TunedKernel {
  int n;
  int64_t rows[TUNE_MAX_BUCKETS];
  signed char variant[TUNE_MAX_BUCKETS];
  signed char splits[TUNE_MAX_BUCKETS];
} TunedKernel;

/* The row-count heuristic's variant and split-K for `rows` rows of kernel k on a card of sms SMs
 * and dram_gbs GB/s of DRAM bandwidth (0: unknown). */
LaunchChoice exec_heuristic(const PlanKernel *k, int64_t rows, int sms, int dram_gbs);
/* What a run launches: the tuned choice where there is one, else the heuristic's;
 * FFNC_GEMM_VARIANT and FFNC_GEMM_SPLITS (m->gemm_variant, m->gemm_splits) override both. A weight
 * gradient on sm_90 (two variants: wgmma, then mma.sync) takes the first unless FFNC_WGRAD=mma
 * (m->wgrad_mma); FFNC_GEMM_SPLITS forces its split too. */
LaunchChoice exec_choose(const ffn_model *m, const PlanKernel *k, int64_t rows);

/* tune.c: the tuned choices of the program's GEMM kernels on m's device from the kernel cache
 * directory, unless FFNC_NO_TUNE is set (ffn_model_create); fails only when out of memory. */
ffn_status tune_load_model(ffn_model *m);
/* Kernel `kernel`'s identity for tuning, 32 hex digits into out: a hash of the arch, N, K, the
 * streams, its variants' names and its generated text (less what names the .ffn file's path)
 * with NVRTC's version, or for a program loaded from an AOT file (no source), the compiled
 * image of each variant. */
void tune_kernel_id(const ffn_program *p, int kernel, char out[33]);
/* The key of GEMM kernel `kernel`'s tuned choices on m's device (tune.h). */
void tune_model_key(const ffn_model *m, int kernel, TuneKey *key);

/* The workspace bytes of kernel k's weights dequantized to bf16 (a `dq` variant: plan.h). */
size_t exec_dq_bytes(const PlanKernel *k);

/* One call in progress: exec_begin checks the tensors, binds the dims, lays out and takes a
 * workspace and resolves every tensor's device pointer; exec_step enqueues one plan step;
 * exec_end gives the workspace back (after recording its event). exec_run does all three.
 * The bench uses the pieces to run some steps its own way. */
typedef struct {
  ffn_model *m;
  CUstream stream;
  int64_t dims[64];
  LaunchChoice *choice; /* per step */
  CUdeviceptr *ptr;     /* per plan tensor */
  CUdeviceptr ws, counters, rowstats;
  CUdeviceptr dq; /* bf16 weights of the `dq` GEMM launched (plan.h: KernelVariant.dq), after the row statistics */
  Workspace *w;
  bool pushed;
  bool chain; /* the last thing exec_step enqueued on stream is a plan GEMM (m->pdl: a GEMM after it may overlap it) */
} ExecRun;

ffn_status exec_begin(ffn_model *m, CUstream stream, const DLTensor *inputs, int ninputs, const DLTensor *outputs,
                      int noutputs, ExecRun *run);
/* exec_begin, where the plan's outputs t with in_workspace[t] (per plan tensor, or NULL) are
 * computed into the call's workspace like scratch tensors, at run->ptr[t] (ffn_model_run_grad
 * stages gradients there; the outputs[] given for them are only checked); write_inputs: the
 * plan's results written over inputs (the saved tensors a call with FFN_GRAD_CONSUME_SAVED
 * gives up) take the inputs' bytes (memplan_assign_call) */
ffn_status exec_begin_ex(ffn_model *m, CUstream stream, const DLTensor *inputs, int ninputs, const DLTensor *outputs,
                         int noutputs, const bool *in_workspace, bool write_inputs, ExecRun *run);
ffn_status exec_step(ExecRun *run, int step);
/* exec_step with variant `variant` of the step's kernel in place of the call's choice: a weight
 * gradient's direct form (codegen/lower.c: wgrad_sm90_kernel, KernelVariant.out), which has the
 * tiles, split and grid of the wgmma variant chosen; refused (FFN_ERR_IO, "launch plan: ...") for
 * any other step or variant, or when the call chose the mma.sync form (FFNC_WGRAD=mma). */
ffn_status exec_step_variant(ExecRun *run, int step, int variant);
/* All-reduce step `step` of the call on `stream` (exec_step's, on the call's stream) */
ffn_status exec_allreduce(ExecRun *run, int step, CUstream stream);
ffn_status exec_end(ExecRun *run, ffn_status st); /* returns st, or the first error of its own */
ffn_status exec_prepare(ffn_model *m);
/* api.c: device bytes of the weights and load-time results the model holds (after
 * ffn_model_prepare: what its runs read), for tests and the bench */
size_t model_weight_bytes(const ffn_model *m);
ffn_status exec_run(ffn_model *m, CUstream stream, const DLTensor *inputs, int ninputs, const DLTensor *outputs,
                    int noutputs);
/* Waits for every workspace of p to be done with and frees them (p stays, empty): at the last
 * reference, and in the bench between token counts so that each count's figure is its own.
 * With no call of p's models being enqueued. */
void exec_free_workspaces(WorkspacePool *p);
/* tp_overlap.c: a checked call of a plan with a row dim (tp_row_dim) cut into blocks (rows
 * [starts[b], starts[b+1]) of every input and output), enqueued in tp_schedule's order */
ffn_status tp_run_blocks(ffn_model *m, CUstream stream, const DLTensor *inputs, int ninputs, const DLTensor *outputs,
                         int noutputs, int blocks, const int64_t *starts);

#endif
