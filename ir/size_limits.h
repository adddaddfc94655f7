/* size_limits.h: the sizes ffnc accepts, one set for every stage.
 *
 * `check` rejects a declaration that breaks them (at the declaration), `build` cannot
 * produce a plan that breaks them, the AOT loader refuses a plan file that does, and the
 * runtime and the reference interpreter refuse a call whose bound shapes do. A model that
 * passes `check` therefore never fails later for its sizes alone, only for memory.
 *
 *   FFN_MAX_DIM    every dim, and the rows of a tensor (the product of all dims but the
 *                  last: a matrix product's M): the kernels index rows, columns and the
 *                  inner dimension K with 32-bit int.
 *   FFN_MAX_NUMEL  the elements of one tensor: 2^40 (4 TiB as f32) is above any device or
 *                  host memory, and keeps every byte count and offset far from int64 overflow.
 */
#ifndef FFNC_IR_SIZE_LIMITS_H
#define FFNC_IR_SIZE_LIMITS_H

#include <stdint.h>

#define FFN_MAX_DIM ((int64_t)INT32_MAX)
#define FFN_MAX_NUMEL ((int64_t)1 << 40)

typedef enum {
  SHAPE_OK,
  SHAPE_NEGATIVE, /* a dim below 0 */
  SHAPE_DIM,      /* a dim above FFN_MAX_DIM */
  SHAPE_ROWS,     /* the product of the leading dims above FFN_MAX_DIM */
  SHAPE_NUMEL,    /* more than FFN_MAX_NUMEL elements */
} ShapeLimit;

/* Checks a concrete shape against the limits; on SHAPE_OK *numel is its element count. */
ShapeLimit shape_check_limits(int rank, const int64_t *size, int64_t *numel);

/* "dim 4294967296 is above the limit of 2147483647 (kernels index with 32-bit int)" and the
 * like, for messages; never NULL. */
const char *shape_limit_words(ShapeLimit why);

#endif
