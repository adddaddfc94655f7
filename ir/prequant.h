/* prequant.h: pre-quantized fp8 weights as checkpoints store them, read and checked once for
 * the reference interpreter (interp.c) and the runtime's weight binding (runtime/api.c; on the
 * GPU the codes are the weight's tensor and the scales reach the device through the load-time
 * step f8_scales, ops.def).
 *
 * `weight w : [N, K] f8e4m3 scale = "x.weight"` reads two tensors: "x.weight", the fp8 codes
 * q (F8_E4M3 or F8_E5M2, the declared shape), and its scale tensor ("x.weight_scale" unless
 * named), F32, BF16 or F16 of shape [N] or [N, 1] (one scale per output row: per channel) or
 * [] or [1] (one for the tensor), as in the official Llama-3.1-405B-FP8 checkpoint. The
 * weight's value is q[n, k] * s[n] in f32 arithmetic. The weight is seen as [rows, cols]:
 * rows its first dim, cols the product of the others (a rank-0 weight is one row).
 *
 * Scales must be finite, positive and within [2^-110, 2^110]: then code * scale, for every
 * finite nonzero code of both formats, is a normal f32 number (no overflow, no subnormal), so
 * its rounding error is at most 2^-24 relative and (code * scale) / scale rounds back to the
 * code: the codes are recovered from the values exactly, which interp.c's fp8 product does.
 */
#ifndef FFNC_PREQUANT_H
#define FFNC_PREQUANT_H

#include "interp.h"

#define PREQUANT_MIN_SCALE 0x1p-110
#define PREQUANT_MAX_SCALE 0x1p110

typedef struct {
  DType code_type;      /* DT_F8E4M3 or DT_F8E5M2 */
  int64_t rows, cols;   /* the weight as [rows, cols] */
  const uint8_t *codes; /* [rows, cols] bytes, row-major: the checkpoint's own bytes (not copied) */
  float *scale;         /* [rows], malloc'd: the scales as f32 (a per-tensor scale repeated) */
  bool per_tensor;      /* the checkpoint's scale was [] or [1] (and rows > 1) */
} PrequantWeight;

/* Checks weight node w (w->stored != DT_NONE) against its codes and scale tensors (NULL:
 * missing) and fills *out. 0, or -1 with one line naming the tensor, e.g.
 *   "weight 'x.weight': its scale tensor 'x.weight_scale' is missing (an f8e4m3 weight with `scale` needs one)"
 *   "scale 'x.weight_scale' of weight 'x.weight': element 3 is -0.5; scales must be positive" */
int prequant_read(const Graph *g, const Node *w, const RawTensor *codes, const RawTensor *scale, PrequantWeight *out,
                  char *err, size_t errlen);
void prequant_free(PrequantWeight *p);

/* The weight's value, code * scale in f32: out[rows * cols]. */
void prequant_dequantize(const PrequantWeight *p, float *out);

/* The rows and cols of a weight node (as above). */
void prequant_dims(const Node *w, int64_t *rows, int64_t *cols);

#endif
