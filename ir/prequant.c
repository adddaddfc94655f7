/* prequant.c: see prequant.h. */
#include "prequant.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>


void prequant_dims(const Node *w, int64_t *rows, int64_t *cols) {
  *rows = w->shape.rank ? w->shape.d[0].size : 1;
  *cols = 1;
  for (int d = 1; d < w->shape.rank; d++)
    *cols *= w->shape.d[d].size;
}


int prequant_read(const Graph *g, const Node *w, const RawTensor *codes, const RawTensor *scale, PrequantWeight *out,
                  char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if (interp_check_weight(g, w, codes, err, errlen)) /* codes: the declared shape and fp8 type, whole */
    return -1;
  const char *T = dtype_name(w->stored);
  if (!scale)
    return ffn_errf(err, errlen, "weight '%s': its scale tensor '%s' is missing (an %s weight with `scale` needs one)",
                w->name, w->scale, T);
  int64_t rows, cols;
  prequant_dims(w, &rows, &cols);
  char got[128];
  if (scale->dtype != DT_F32 && scale->dtype != DT_BF16 && scale->dtype != DT_F16)
    return ffn_errf(err, errlen, "scale '%s' of weight '%s': dtype %s; scales are F32, BF16 or F16", w->scale, w->name,
                dtype_st_name(scale->dtype) ? dtype_st_name(scale->dtype) : dtype_name(scale->dtype));
  bool per_tensor = scale->rank == 0 || (scale->rank == 1 && scale->shape[0] == 1);
  bool per_row = (scale->rank == 1 && scale->shape[0] == rows) ||
                 (scale->rank == 2 && scale->shape[0] == rows && scale->shape[1] == 1);
  if (!per_tensor && !per_row)
    return ffn_errf(err, errlen,
                "scale '%s' of weight '%s': shape %s; expected [%lld] or [%lld, 1] (one per output row) or [] or [1] "
                "(one for the tensor)",
                w->scale, w->name, scale->rank >= 0 && scale->rank <= FFN_MAX_RANK ? ffn_shape_text(scale->rank, scale->shape, got, sizeof got) : "(bad rank)",
                (long long)rows, (long long)rows);
  int64_t count = per_row ? rows : 1;
  size_t need = dtype_bytes(scale->dtype, (size_t)count);
  if (scale->nbytes != need || !scale->data)
    return ffn_errf(err, errlen, "scale '%s' of weight '%s': %s %s needs %zu bytes, got %zu", w->scale, w->name,
                ffn_shape_text(scale->rank, scale->shape, got, sizeof got), dtype_name(scale->dtype), need,
                scale->data ? scale->nbytes : 0);
  float *s = malloc(sizeof(float) * (size_t)(rows > 0 ? rows : 1));
  if (!s)
    return ffn_errf(err, errlen, "weight '%s': out of host memory for its scales", w->name);
  for (int64_t i = 0; i < count; i++) {
    double v = dtype_load(scale->dtype, scale->data, (size_t)i);
    const char *why = isnan(v) ? "is NaN" : isinf(v) ? "is infinite" : v == 0 ? "is zero" : v < 0 ? "is negative"
                      : v < PREQUANT_MIN_SCALE || v > PREQUANT_MAX_SCALE ? "is outside 2^-110 .. 2^110"
                                                                          : NULL;
    if (why) {
      free(s);
      return ffn_errf(err, errlen, "scale '%s' of weight '%s': element %lld (%g) %s; scales must be positive finite numbers",
                  w->scale, w->name, (long long)i, v, why);
    }
    s[i] = (float)v;
  }
  for (int64_t i = count; i < rows; i++)
    s[i] = s[0];
  *out = (PrequantWeight){w->stored, rows, cols, codes->data, s, per_tensor && rows > 1};
  return 0;
}

void prequant_free(PrequantWeight *p) {
  free(p->scale);
  p->scale = NULL;
}

void prequant_dequantize(const PrequantWeight *p, float *out) {
  float table[256]; /* every code's value: f8 -> f32 is exact */
  for (int c = 0; c < 256; c++)
    table[c] = p->code_type == DT_F8E4M3 ? f8e4m3_bits_to_f32((uint8_t)c) : f8e5m2_bits_to_f32((uint8_t)c);
  for (int64_t r = 0; r < p->rows; r++) {
    const uint8_t *q = p->codes + r * p->cols;
    float s = p->scale[r];
    for (int64_t k = 0; k < p->cols; k++)
      out[r * p->cols + k] = table[q[k]] * s; /* one f32 multiplication */
  }
}
