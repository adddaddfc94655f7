/* randinit.h: random weights and inputs of the right names, shapes and types for a model,
 * so nobody needs a download to try ffnc (`ffnc gen`, the tests, the bench).
 *
 * Scales keep activations O(1) through deep residual stacks: a matrix used in a product
 * with inner dimension K gets N(0, 1/K); a norm gain 1 + N(0, 0.1^2); other vectors (biases)
 * N(0, 0.1^2); inputs N(0, 1). The same (name, seed) always gives the same tensor.
 */
#ifndef FFNC_RANDINIT_H
#define FFNC_RANDINIT_H

#include "../ir/ir.h"

/* Mean and standard deviation for weight node w of graph g: the same for a program, its training
 * forward and its backward graphs (either policy), so their random weights agree by name. */
void randinit_weight_scale(const Graph *g, const Node *w, double *mean, double *std);
/* numel values ~ N(mean, std^2) stored as dt into a malloc'd buffer (*nbytes bytes);
 * NULL if out of memory. */
void *randinit_tensor(const char *name, uint64_t seed, DType dt, int64_t numel, double mean, double std, size_t *nbytes);

/* A pre-quantized fp8 weight w (w->stored != DT_NONE) as a checkpoint holds it: values ~
 * N(mean, std^2) quantized per output row as fp8 checkpoints are made (s = max|row| / FMAX,
 * 1 for a row of zeros; code = RNE(v / s) in w->stored, saturating): *codes, rows x cols bytes,
 * and *scale, rows f32 (both malloc'd; write the scale as [rows, 1], the official layout).
 * Returns 0, or -1 if out of memory. */
int randinit_prequant(const Node *w, uint64_t seed, double mean, double std, void **codes, size_t *codes_bytes,
                      float **scale);

#endif
