/* interp.h: the CPU reference interpreter, the oracle every GPU result is checked against.
 *
 * It evaluates the IR one node at a time in f64 (reductions and matrix products accumulate
 * in double) and rounds every value to its node's element type (round to nearest even; fp8
 * saturating) before storing it, as float (every type ffnc computes in fits a float
 * exactly). It aims to be simple and obviously right; only the matrix product is blocked
 * and split over threads (FFNC_INTERP_THREADS caps them), with a result that does not
 * depend on the thread count. The precision policy's quantization rules, which the GPU
 * kernels follow, are spelled out at the top of interp.c.
 *
 * Only the nodes the outputs depend on are evaluated (an unused weight is never looked up);
 * every input is looked up and checked, since the inputs are the model's interface.
 */
#ifndef FFNC_INTERP_H
#define FFNC_INTERP_H

#include "ir.h"

/* A dense row-major tensor of values already rounded to `dtype`. */
typedef struct {
  DType dtype;
  int rank;
  int64_t shape[FFN_MAX_RANK];
  float *data; /* numel floats, malloc'd */
} RefTensor;

int64_t ref_numel(const RefTensor *t);
void ref_free(RefTensor *t);

/* Supplies tensors by name: weights by tensor name, inputs by input name. Returns 0 and
 * fills *out with a view of the raw data (the interpreter converts from `dtype`), or -1 if
 * there is no such tensor. */
typedef struct {
  DType dtype;
  int rank;
  int64_t shape[FFN_MAX_RANK];
  const void *data;
  size_t nbytes;
} RawTensor;
typedef int (*TensorLookup)(void *ctx, const char *name, RawTensor *out);

typedef struct {
  TensorLookup weights;
  void *weights_ctx;
  TensorLookup inputs;
  void *inputs_ctx;
} InterpSources;

/* Binds dynamic dims from the input shapes: fills dims[g->ndims] (-1 for a dim no input
 * has). Checks each input's rank, static dims and dtype against its declaration, and that
 * every dynamic dim gets one consistent size. On error writes one line naming the input,
 * e.g. "input 'x': dim T is 7 here but 9 in input 'y'",
 *      "input 'x': dim 1: expected 4096, got 4095 (declared [T, 4096], got [7, 4095])". */
int interp_bind_dims(const Graph *g, const InterpSources *src, int64_t *dims, char *err, size_t errlen);

/* Checks that a weight exists (t == NULL: it does not) with the declared dtype and shape,
 * and that its data has the size they imply, e.g.
 *   "weight 'model.layers.0.mlp.up_proj.weight': expected shape [14336, 4096] bf16, got [4096, 14336] bf16" */
int interp_check_weight(const Graph *g, const Node *w, const RawTensor *t, char *err, size_t errlen);

/* Runs the graph. outputs[i] corresponds to g->outputs[i]; the caller frees them with
 * ref_free. Returns 0, or -1 with one line in err (missing tensor, wrong shape/dtype...). */
int interp_run(const Graph *g, const InterpSources *src, RefTensor *outputs, char *err, size_t errlen);

/* ---- tensor parallel (interp.c, interp_tp.c) ---- */

/* Tensor parallel: allreduce sums the n values of an ALLREDUCE (already rounded to dt) over
 * the ranks in place and rounds the sums to dt; 0, or -1 with err. interp_run refuses a
 * graph with an ALLREDUCE (one rank's share alone is not the model); interp_run_rank runs
 * one rank of interp_run_tp with its communicator. */
typedef struct {
  int (*allreduce)(void *ctx, float *data, int64_t n, DType dt, char *err, size_t errlen);
  void *ctx;
} InterpComm;
int interp_run_rank(const Graph *g, const InterpSources *src, const InterpComm *comm, RefTensor *outputs, char *err,
                    size_t errlen);

/* Runs the graphs of the ranks 0..n-1 of a tensor-parallel program (passes/tp.c) in
 * lockstep, one thread each, every ALLREDUCE summing the ranks' values in f64 in rank order
 * (so every rank gets the same bits). All ranks read the same weights and inputs (src's
 * allreduce is ignored). outputs[r * noutputs + i] is rank r's output i (every rank computes
 * every output). Returns 0, or -1 with the first failing rank's error. */
int interp_run_tp(const Graph *const *ranks, int n, const InterpSources *src, RefTensor *outputs, char *err,
                  size_t errlen);

#endif
