/* bench.h: what `ffnc bench --tp N` (bench_tp.c) shares with the bench (cmd_bench.c). */
#ifndef FFNC_BENCH_H
#define FFNC_BENCH_H

#include "cli.h"
#include "runtime/rt.h"

typedef void (*RunFn)(void *ctx, int rotation, CUstream s);

/* A driver call of the bench (a file-scope `cu` in view): on failure the call and the driver's
 * reason, exit 3. */
#define CK(call)                                                     \
  do {                                                               \
    CUresult r_ = (call);                                            \
    if (r_ != CUDA_SUCCESS) {                                        \
      cu_fail(cu, r_, #call);                                        \
      cli_error("bench: %s", ffn_last_error());                      \
      exit(EXIT_DEVICE);                                             \
    }                                                                \
  } while (0)

/* Host values of the given mean and standard deviation, stored as dt (malloc'd). */
void *random_buffer(DType dt, size_t n, double mean, double std);
/* Random values for weight w of g at the scale its model expects (runtime/randinit.h), on the
 * host (malloc'd, numel elements), with its shape and DLPack type for binding; a type DLPack
 * cannot carry exits with a message naming the weight. */
void *random_weight(const Graph *g, const Node *w, int64_t shape[FFN_MAX_RANK], size_t *numel, DLDataType *dl);
/* Median microseconds of reps runs of fn on s (after warm-up), each between two events; the
 * caller's context must be current. */
double time_runs(RunFn fn, void *ctx, int rotations, int reps, CUstream s);
/* The same with pre(ctx, rotation, s) enqueued, untimed, before each fn (bench --grad --keep: a
 * forward that writes the saved tensors the timed backward consumes). */
double time_runs_after(RunFn pre, RunFn fn, void *ctx, int rotations, int reps, CUstream s);
/* ||a - b|| / ||b|| over n values of type t. */
double rel_err(const void *a, const void *b, DType t, size_t n);

/* `ffnc bench --tp N`: each model's N ranks on devices 0..N-1 against the whole program on
 * device 0, and NCCL's all-reduce of a [T, D] tensor alone. The exit status. */
int bench_tp(const CompileArgs *ca, const char *const *files, int nfiles, const int64_t *tokens, int ntokens, int reps);

/* `ffnc bench --grad`: each model's forward and backward graph (bench_grad.c), timed alone and
 * together, with the peak extra memory of a step; bf16_tflops is the measured ceiling for the
 * floor. The exit status. */
int bench_grad(const CompileArgs *ca, const char *const *files, int nfiles, const int64_t *tokens, int ntokens,
               int reps, const char *json, const char *card, double bf16_tflops, CUstream s);
/* `ffnc bench --grad --compile-only`: the programs and backward graphs into the kernel cache (no GPU). */
int bench_grad_compile(const CompileArgs *ca, const char *const *files, int nfiles);

#endif
