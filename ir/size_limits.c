/* size_limits.c: see size_limits.h. */
#include "size_limits.h"

#include "checked.h"

ShapeLimit shape_check_limits(int rank, const int64_t *size, int64_t *numel) {
  int64_t n = 1;
  *numel = 0;
  for (int i = 0; i < rank; i++) {
    if (size[i] < 0)
      return SHAPE_NEGATIVE;
    if (size[i] > FFN_MAX_DIM)
      return SHAPE_DIM;
  }
  /* Dims are below 2^31 here; a product that passed FFN_MAX_NUMEL stops before overflow. */
  for (int i = 0; i < rank; i++) {
    if (i == rank - 1 && rank > 1 && n > FFN_MAX_DIM)
      return SHAPE_ROWS;
    if (ckd_mul_i64(&n, n, size[i]) || n > FFN_MAX_NUMEL)
      return SHAPE_NUMEL;
  }
  *numel = n;
  return SHAPE_OK;
}

const char *shape_limit_words(ShapeLimit why) {
  switch (why) {
  case SHAPE_OK: return "within the limits";
  case SHAPE_NEGATIVE: return "a dim is negative";
  case SHAPE_DIM: return "a dim is above 2147483647, the limit (kernels index with 32-bit int)";
  case SHAPE_ROWS: return "its rows (all dims but the last) number more than 2147483647, the limit of a matrix product's M";
  case SHAPE_NUMEL: return "it has more than 2^40 elements, the limit of one tensor";
  }
  return "?";
}
