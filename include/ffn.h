/* ffn.h: the ffnc library. Compile transformer feed-forward blocks written in the `.ffn`
 * language into fused CUDA kernels, and run them on your own CUDA streams.
 *
 * A short tour:
 *
 *   #include <ffn.h>
 *
 *   ffn_program *prog;      // compiled code: from source (JIT, needs NVRTC) or an AOT file
 *   if (ffn_program_compile_file("llama3_8b.ffn", NULL, &prog) != FFN_OK) {
 *     fprintf(stderr, "%s\n", ffn_last_error());   // diagnostics with file:line:col
 *     return 1;
 *   }
 *   // or, with no NVRTC at run time: ffn_program_load("llama3_8b.ffnx", &prog);
 *
 *   ffn_model *model;       // a program on a device, with its weights
 *   ffn_model_create(prog, 0, &model);              // device 0
 *   ffn_model_bind_weights_file(model, "model.safetensors");
 *   ffn_model_prepare(model);                       // load-time weight transforms, once
 *
 *   DLTensor x = {...};     // [T, 4096] bf16 on the device (kDLCUDA), any T
 *   DLTensor y = {...};     // output, same shape
 *   ffn_model_run(model, stream, &x, 1, &y, 1);     // enqueued on your stream
 *
 *   ffn_model_destroy(model);
 *   ffn_program_destroy(prog);
 *
 * Training: compile the program's backward graph (ffn_options_set_grad) and let
 * ffn_model_run_grad write or accumulate the gradients into your f32/bf16 tensors (below);
 * with ffn_options_set_grad_policy(o, FFN_GRAD_KEEP), a training forward keeps what the
 * backward needs instead of the backward recomputing it; ffn_model_share_workspace lets the two
 * models use one workspace.
 *
 * Every function returns an ffn_status; on failure ffn_last_error() describes what went
 * wrong (which CUDA/NVRTC call failed and why, which tensor is missing...). The CUDA driver
 * and NVRTC are loaded at run time, so programs start on machines without them and get
 * FFN_ERR_NO_DEVICE / FFN_ERR_NO_COMPILER with a clear message.
 *
 * Threads: programs are immutable and can be shared. A prepared model can be run from
 * several host threads at once on different streams (each run takes its own scratch
 * memory); binding weights and preparing must not overlap with runs.
 */
#ifndef FFN_H
#define FFN_H

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is compiled with hidden visibility: what is marked FFN_API is all libffn.so
 * exports. */
#if defined(__GNUC__)
#define FFN_API __attribute__((visibility("default")))
#else
#define FFN_API
#endif

typedef enum {
  FFN_OK = 0,
  FFN_ERR_INVALID_ARGUMENT, /* a bad argument to an API call (NULL, wrong count...) */
  FFN_ERR_SOURCE,           /* the .ffn file has errors (diagnostics in ffn_last_error) */
  FFN_ERR_TENSOR,           /* a weight or input is missing or has the wrong shape/type */
  FFN_ERR_IO,               /* a file could not be read or written, or is malformed */
  FFN_ERR_UNSUPPORTED,      /* valid, but not supported for this target (arch, dtype...) */
  FFN_ERR_NO_COMPILER,      /* NVRTC could not be loaded */
  FFN_ERR_COMPILE,          /* NVRTC rejected the generated code (log in ffn_last_error) */
  FFN_ERR_NO_DEVICE,        /* no CUDA driver or no CUDA device */
  FFN_ERR_CUDA,             /* a CUDA driver call failed */
  FFN_ERR_OUT_OF_MEMORY,    /* device or host memory */
} ffn_status;

FFN_API const char *ffn_status_string(ffn_status s);
/* The message of the last failed call on this thread ("" if none). */
FFN_API const char *ffn_last_error(void);

/* ---- compile options ---- */

typedef struct ffn_options ffn_options;

FFN_API ffn_status ffn_options_create(ffn_options **out);
FFN_API void ffn_options_destroy(ffn_options *o);
/* "sm_90", "sm_80"...; default: the arch of device 0, or sm_90 where there is no device. */
FFN_API ffn_status ffn_options_set_arch(ffn_options *o, const char *arch);
/* A precision setting that overrides the file's: key is default, accumulate, norm, matmul
 * or weights; value a type name ("f8e4m3", "i4,group=128"). */
FFN_API ffn_status ffn_options_set_precision(ffn_options *o, const char *key, const char *value);
/* FFN Fusion of sublayers [first, last) (in addition to the file's `fuse ffn`). */
FFN_API ffn_status ffn_options_add_ffn_fusion(ffn_options *o, int first, int last);
/* Tensor parallel: compile rank `rank`'s share of the program over `ranks` ranks (each FFN
 * sublayer's hidden columns split `ranks` ways, one all-reduce of its [T, D] partial sums).
 * ranks = 1: the whole program (the default). A model of such a program runs only with its
 * rank's NCCL communicator: see ffn_model_set_communicator. */
FFN_API ffn_status ffn_options_set_tensor_parallel(ffn_options *o, int ranks, int rank);
/* on != 0: compile the program's backward graph instead of the program (training). Its inputs
 * are the program's, then "grad.OUT" for each output OUT (dL/dOUT, OUT's shape and type); its
 * outputs "grad.NAME" (f32, NAME's shape) for every input and weight, in declaration order.
 * Not with tensor parallel (an all-reduce has no backward rule yet). */
FFN_API ffn_status ffn_options_set_grad(ffn_options *o, int on);
/* What the forward keeps for the backward (training), for the compiles of this options object:
 *   FFN_GRAD_RECOMPUTE (the default): nothing; the backward graph recomputes the forward values
 *     it reads from the inputs (the least memory).
 *   FFN_GRAD_KEEP: the forward keeps the outputs of its matrix products that the backward reads
 *     ("saved tensors": for a SwiGLU sublayer the gate and up products, [T, F] each, in the
 *     products' type), so the backward runs no forward product again. A compile with
 *     ffn_options_set_grad(o, 1) gives the backward graph that reads them: its inputs are the
 *     program's, "grad.OUT" per output, then "saved.NAME" per saved tensor; a compile without it
 *     gives the training forward: the program with outputs "saved.NAME" after its own, the same
 *     names, shapes and types in the same order (see "training" below). */
typedef enum { FFN_GRAD_RECOMPUTE = 0, FFN_GRAD_KEEP = 1 } ffn_grad_policy;
FFN_API ffn_status ffn_options_set_grad_policy(ffn_options *o, ffn_grad_policy policy);
/* 0: no fusion (one kernel per op, for debugging); 1..3: full (default 3). */
FFN_API ffn_status ffn_options_set_opt_level(ffn_options *o, int level);

/* How the NVRTC step of ffn_program_compile goes: the source is compiled as several programs
 * (the runtime's kernels, each GEMM entry point, rowwise kernels a few at a time), as many at
 * once as there are CPUs (FFNC_JIT_THREADS=N sets the number), each through the cache. */
typedef struct {
  int total;           /* programs to compile */
  int done;            /* finished so far, compiled or found in the cache */
  int cached;          /* of those, found in the cache */
  int threads;         /* compiling at once */
  const char *unit;    /* the program just finished ("k0_sm90_128x256x64"); NULL in the first call */
  int unit_cached;     /* 1: it came from the cache */
  double unit_seconds; /* its time */
  double seconds;      /* since the NVRTC step began */
} ffn_compile_progress;
typedef void (*ffn_progress_fn)(void *user, const ffn_compile_progress *p);
/* fn(user, p) is called once before the first program is done (done = 0) and after each one;
 * the calls come from the compiling threads, one at a time. NULL: no calls (the default). */
FFN_API ffn_status ffn_options_set_progress(ffn_options *o, ffn_progress_fn fn, void *user);

/* ---- programs ---- */

typedef struct ffn_program ffn_program;

/* Parse, check, optimize and generate code, then compile it with NVRTC (through the on-disk
 * kernel cache: $FFNC_CACHE_DIR, else $XDG_CACHE_HOME/ffnc, else ~/.cache/ffnc;
 * FFNC_NO_CACHE=1 bypasses it). opt may be NULL. */
FFN_API ffn_status ffn_program_compile(const char *source, size_t len, const char *filename, const ffn_options *opt,
                               ffn_program **out);
FFN_API ffn_status ffn_program_compile_file(const char *path, const ffn_options *opt, ffn_program **out);
/* Ahead-of-time output (`ffnc build -o`): write, and load without NVRTC. */
FFN_API ffn_status ffn_program_save(const ffn_program *p, const char *path);
FFN_API ffn_status ffn_program_load(const char *path, ffn_program **out);
FFN_API void ffn_program_destroy(ffn_program *p);

FFN_API const char *ffn_program_arch(const ffn_program *p);
FFN_API int ffn_program_num_kernels(const ffn_program *p);
/* The model's interface, in declaration order. */
FFN_API int ffn_program_num_inputs(const ffn_program *p);
FFN_API int ffn_program_num_outputs(const ffn_program *p);
FFN_API const char *ffn_program_input_name(const ffn_program *p, int i);
FFN_API const char *ffn_program_output_name(const ffn_program *p, int i);
/* Name, element type and shape of input or output i; dynamic dims are -1 in shape (and
 * named in dim_names[d], NULL for static dims). */
typedef struct {
  const char *name;
  DLDataType dtype; /* fp8 types are reported as kDLUInt 8 */
  int ndim;
  int64_t shape[8];
  const char *dim_names[8];
} ffn_tensor_info;
FFN_API ffn_status ffn_program_input_info(const ffn_program *p, int i, ffn_tensor_info *out);
FFN_API ffn_status ffn_program_output_info(const ffn_program *p, int i, ffn_tensor_info *out);
/* Weights the program reads (tensor names as in the weights file). */
FFN_API int ffn_program_num_weights(const ffn_program *p);
FFN_API const char *ffn_program_weight_name(const ffn_program *p, int i);
/* Load-time steps ffn_model_prepare runs: weight copies made from the bound weights (norm gains
 * folded, gate/up merged, quantized codes). 0: the kernels read the weights as bound, so weights
 * changed in place (an optimizer step) need no ffn_model_prepare before the next run. The keep
 * policy's training forward of a bf16 Llama-style sublayer has none. */
FFN_API int ffn_program_num_load_steps(const ffn_program *p);

/* ---- models: a program loaded on a device, with weights ---- */

typedef struct ffn_model ffn_model;
struct CUstream_st; /* CUstream and cudaStream_t are both `struct CUstream_st *` */

FFN_API ffn_status ffn_model_create(const ffn_program *p, int device, ffn_model **out);
FFN_API void ffn_model_destroy(ffn_model *m);
/* Every weight the program needs, from a safetensors file (copied to the device). */
FFN_API ffn_status ffn_model_bind_weights_file(ffn_model *m, const char *path);
/* One weight by name, from host memory (kDLCPU, copied) or device memory (kDLCUDA, used in
 * place: it must stay valid while the model lives). Contiguous row-major only. */
FFN_API ffn_status ffn_model_bind_weight(ffn_model *m, const char *name, const DLTensor *t);
/* Tensor parallel (a program compiled with ffn_options_set_tensor_parallel(o, N, R)): the
 * model runs only with rank R's NCCL communicator of N ranks, an `ncclComm_t` passed as an
 * opaque pointer (ffnc needs no nccl.h), made by the caller on this model's device
 * (ncclCommInitRank in one process per GPU, or ncclCommInitAll over N devices in one):
 *
 *   ncclComm_t comm;  ncclCommInitRank(&comm, N, id, R);   // on the model's device
 *   ffn_model_set_communicator(model, comm);              // checked: N ranks, rank R, device
 *
 * Each run enqueues an ncclAllReduce of every sublayer's [T, D] partial sums on the run's
 * stream: all N ranks must run with the same inputs' shapes, at once, one host thread or
 * process per rank (a run interleaves kernels and collectives, so one thread cannot drive
 * several ranks' runs, not even in an NCCL group). The communicator stays the caller's:
 * destroy it after the model. NULL detaches it. NCCL is loaded at run time from
 * $FFNC_NCCL_LIBRARY, else libnccl.so.2: FFN_ERR_UNSUPPORTED, saying how to point at it,
 * where it is missing. A tensor-parallel model run without a communicator fails with
 * FFN_ERR_INVALID_ARGUMENT. Every rank binds the whole weights (the checkpoint's tensors);
 * each copies only its slices of the matrices to its device. */
FFN_API ffn_status ffn_model_set_communicator(ffn_model *m, void *nccl_comm);
/* Checks every weight is bound, then runs the load-time transforms (gain folding,
 * concatenation, interleaving...). Call once after binding, before running. */
FFN_API ffn_status ffn_model_prepare(ffn_model *m);
/* Runs the model on `stream` (NULL: the default stream). inputs and outputs are device
 * tensors (kDLCUDA), in the program's declaration order, contiguous row-major, with the
 * declared dtypes (bf16 is kDLBfloat 16; f8 types are passed as kDLUInt 8); dynamic dims
 * are bound from the input shapes and every output shape must match. Asynchronous: returns
 * once the work is enqueued. */
FFN_API ffn_status ffn_model_run(ffn_model *m, struct CUstream_st *stream, const DLTensor *inputs, int ninputs,
                         const DLTensor *outputs, int noutputs);

/* Shape of output i for the given inputs (their shapes bind the dynamic dims). */
FFN_API ffn_status ffn_model_output_shape(const ffn_model *m, int i, const DLTensor *inputs, int ninputs, int64_t *shape,
                                  int *ndim);
/* Convenience for tools and tests: inputs and outputs in host memory (kDLCPU, outputs
 * allocated by the caller with ffn_model_output_shape). Copies in, runs, copies out, waits. */
FFN_API ffn_status ffn_model_run_host(ffn_model *m, const DLTensor *inputs, int ninputs, const DLTensor *outputs, int noutputs);

/* ---- autotuning ----
 *
 * The runtime picks each GEMM launch's tile configuration and split-K from the call's rows by a
 * rule fitted on one card. ffn_model_tune measures instead, on this model's device: for each
 * GEMM kernel, at each of `rows` row counts (NULL: 1, 16, 64, 128, 256, 512, 1024, 4096, 8192;
 * at most 32), every configuration the kernel was compiled with and the split-K factors it can
 * take, on the model's weights and random activations (CUDA events, warm-up, the median of
 * several runs), and keeps the fastest. The model uses the choices at once, and they are saved
 * in the kernel cache directory, keyed by the device's name and SM count, the driver version,
 * this ffnc build and the kernel's compiled code, so that a later ffn_model_create of the same
 * program on such a device loads them (FFNC_NO_TUNE=1: it does not). A call with R rows uses
 * the choice measured at the largest row count B <= R while R <= 2B (or the configuration's
 * own range covers R); below the first, beyond that, or without a saved choice, the built-in
 * rule. FFNC_GEMM_VARIANT and FFNC_GEMM_SPLITS override both.
 *
 * Call it on a prepared model, with no run in flight on it; fn (may be NULL) is called after
 * each GEMM kernel. FFN_ERR_IO when the choices could not be saved (no kernel cache
 * directory in use): they still apply to this model. */
typedef struct {
  int gemm, gemms;           /* this GEMM kernel (1-based) of how many */
  const char *kernel;        /* "k0" */
  const char *dtype;         /* its activations' type: "bf16" */
  int64_t n, k;              /* output columns per stream, inner dim */
  int streams;               /* 2: gate/up pairs */
  int nbuckets;
  const int64_t *rows;       /* per row count measured (its M) */
  const char *const *config; /* the fastest tile configuration (kernels/gemm_host.h) */
  const int *splits;         /* and its split-K */
  const double *us;          /* its time, microseconds */
  const double *default_us;  /* the built-in rule's choice's time */
  double seconds;            /* since tuning began */
} ffn_tune_progress;
typedef void (*ffn_tune_progress_fn)(void *user, const ffn_tune_progress *p);
FFN_API ffn_status ffn_model_tune(ffn_model *m, const int64_t *rows, int nrows, ffn_tune_progress_fn fn, void *user);
/* One line: which tuned choices the model uses and from where, or why none. */
FFN_API const char *ffn_model_tuning(const ffn_model *m);

/* ---- training: gradients into your tensors ----
 *
 * A model of a backward graph (a program compiled with ffn_options_set_grad) computes dL/d of
 * every input and weight from the program's inputs and dL/d of its outputs. It recomputes the
 * forward values it needs from the inputs (nothing is kept between a forward and a backward
 * call: the memory-saving policy), and computes every gradient in f32. ffn_model_run_grad writes
 * them into, or adds them to, gradient tensors you own, e.g. an optimizer's:
 *
 *   ffn_options_set_grad(opt, 1);  ffn_program_compile_file("llama.ffn", opt, &prog);
 *   ...create, bind the same weights as the forward model, prepare...
 *   DLTensor in[]    = {x, dy};               // the program's inputs, then grad.OUT per output
 *   DLTensor grads[] = {dx, dg, dwg, dwu, dwd};  // one per grad output, f32 or bf16, or data NULL
 *   ffn_model_run_grad(model, stream, in, 2, grads, 5, FFN_GRAD_ACCUMULATE);  // grads += ...
 *
 * inputs are the model's inputs (ffn_program_input_name: the program's, then "grad.OUT");
 * grads[i] receives output i ("grad.NAME", ffn_program_output_name): a device tensor (kDLCUDA)
 * of NAME's shape, contiguous, 16-byte aligned, f32 (kDLFloat 32) or bf16 (kDLBfloat 16). A
 * tensor whose data is NULL is not wanted: it is computed (the graph computes every gradient)
 * and dropped. flags: 0 writes the gradients, FFN_GRAD_ACCUMULATE adds them to what the tensors
 * hold (in f32; a bf16 tensor gets the sum rounded once). A wrong count, device, dtype or shape
 * is refused before anything is enqueued (FFN_ERR_TENSOR or FFN_ERR_INVALID_ARGUMENT, naming
 * the gradient), as is a model that is not a backward graph.
 *
 * Memory: f32 tensors written without FFN_GRAD_ACCUMULATE are written in place. On sm_90 a
 * weight's gradient computed by one product alone (a weight read once) is written, or added, by
 * that product's kernel straight into your tensor, f32 or bf16 (summed in f32, your old value
 * added in f32, rounded once to nearest even). Every other gradient (the input's, norm gains', a
 * tied weight's sum, all of them on sm_80) is computed into f32 space in the call's workspace,
 * then stored or added by one small kernel right after the last kernel that touches it, so
 * gradients computed at different times share that space (about the largest such gradient's f32
 * size). Both give the same bits; FFNC_GRAD_DIRECT=0 in the environment stages every gradient.
 *
 * Like ffn_model_run it enqueues on `stream` and returns: no host synchronization, and no
 * allocation once a call of as many tokens has run on that stream (the workspace is reused),
 * so it can be captured in a CUDA graph after a warm-up call on the capturing stream.
 *
 * The keep policy (ffn_options_set_grad_policy(o, FFN_GRAD_KEEP) for both compiles): the
 * training forward is run with ffn_model_run like any program; its outputs are the program's,
 * then the saved tensors, in tensors you own (allocated like outputs: ffn_program_output_info
 * gives their names, shapes and types). Pass them, unchanged, after the output gradients:
 *
 *   ffn_options_set_grad_policy(opt, FFN_GRAD_KEEP);
 *   ffn_program_compile_file("llama.ffn", opt, &fwd);            // outputs y, saved.* (2 per SwiGLU)
 *   ffn_options_set_grad(opt, 1);
 *   ffn_program_compile_file("llama.ffn", opt, &bwd);            // inputs x, grad.y, saved.*
 *   DLTensor outs[] = {y, s0, s1};      ffn_model_run(fwd_model, stream, &x, 1, outs, 3);
 *   DLTensor in[]   = {x, dy, s0, s1};  ffn_model_run_grad(bwd_model, stream, in, 4, grads, 5, 0);
 *
 * The saved tensors must hold what the training forward wrote for these inputs and these weights
 * (nothing checks that); they are read, never written, by the backward, and may be freed or
 * reused once it has run. Missing saved tensors, or ones of the wrong shape or type, are refused
 * naming the tensor. Extra memory: the saved tensors, e.g. 2 F x 2 bytes per token and bf16
 * SwiGLU sublayer (56 KiB for Llama-3-8B), while the backward's workspace no longer holds the
 * recomputed products.
 *
 * flags | FFN_GRAD_CONSUME_SAVED gives the saved tensors to the call: it may write its own
 * intermediate values over them once it has read them (a SwiGLU's derivative is written over the
 * gate and up products it is computed from), so their contents are undefined afterwards, as a
 * training step that frees them after the backward wants, and the workspace is smaller (the
 * Llama-3-8B sublayer at 8192 tokens: its intermediate values 736 -> 384 MiB). Run the training
 * forward again before another backward. No effect on a backward graph without saved tensors. */
enum { FFN_GRAD_ACCUMULATE = 1, FFN_GRAD_CONSUME_SAVED = 2 };
FFN_API ffn_status ffn_model_run_grad(ffn_model *m, struct CUstream_st *stream, const DLTensor *inputs, int ninputs,
                                      const DLTensor *grads, int ngrads, unsigned flags);

/* One workspace for two models. Each call takes device scratch memory, its workspace (the
 * call's intermediate values, split-K partials, staged gradients), which the model keeps for its
 * next calls and grows to the largest call so far. A training forward and its backward graph run
 * one after the other on a stream, so their two workspaces are never in use at once: let them
 * share one, the size of the larger need, instead of holding both:
 *
 *   ffn_model_share_workspace(bwd_model, fwd_model);
 *
 * From then on m's calls take their workspaces where with's do (with's own, or those it shares in
 * turn); m's former ones are freed unless another model still shares them (the host waits for
 * the work queued on them first). Calls in flight at once on different streams still take a
 * workspace each; calls one after the other on a stream take turns in one. Both models must be on
 * the same device, else FFN_ERR_INVALID_ARGUMENT naming both devices; m and with must be non-NULL
 * and distinct (FFN_ERR_INVALID_ARGUMENT). Allowed at any time, but not while a call of m is being
 * enqueued on another thread (as binding weights); a CUDA graph captured from m's calls before
 * must not be replayed after it (its workspace may be freed). The shared workspace is freed with
 * the last model that uses it, whatever the order of ffn_model_destroy. */
FFN_API ffn_status ffn_model_share_workspace(ffn_model *m, ffn_model *with);

/* ---- devices and versions ---- */

/* Number of usable CUDA devices; 0 with the reason in why (no driver, no device...). */
FFN_API int ffn_device_count(char *why, size_t why_len);

FFN_API const char *ffn_version(void); /* "0.1.0" */
/* One line for bug reports: the version and the git commit built ("0.1.0 (git 1a2b3c4d5e6f)"). */
FFN_API const char *ffn_build_info(void);
/* NVRTC and driver versions as "13.0", or a reason they are unavailable. */
FFN_API void ffn_runtime_versions(char *nvrtc, size_t nvrtc_len, char *driver, size_t driver_len);

#ifdef __cplusplus
}
#endif
#endif
