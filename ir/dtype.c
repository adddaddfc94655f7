/* dtype.c: the element-type table. */
#include "ir.h"

#include <string.h>

typedef struct {
  const char *name, *st_name;
  int bits;
  bool is_float;
} DTypeInfo;

static const DTypeInfo dtype_info[DT_COUNT] = {
    [DT_NONE] = {"none", NULL, 0, false},
#define X(e, n, b, s, f) [DT_##e] = {n, s, b, f},
    FFN_DTYPES(X)
#undef X
};

const char *dtype_name(DType t) {
  if (t <= DT_NONE || t >= DT_COUNT)
    return "none";
  return dtype_info[t].name ? dtype_info[t].name : dtype_info[t].st_name;
}

const char *dtype_st_name(DType t) { return t > DT_NONE && t < DT_COUNT ? dtype_info[t].st_name : NULL; }

int dtype_bits(DType t) { return t > DT_NONE && t < DT_COUNT ? dtype_info[t].bits : 0; }

bool dtype_is_float(DType t) { return t > DT_NONE && t < DT_COUNT && dtype_info[t].is_float; }

DType dtype_from_name(const char *name) {
  for (int t = 1; t < DT_COUNT; t++)
    if (dtype_info[t].name && strcmp(dtype_info[t].name, name) == 0)
      return (DType)t;
  return DT_NONE;
}

DType dtype_from_st_name(const char *st) {
  for (int t = 1; t < DT_COUNT; t++)
    if (dtype_info[t].st_name && strcmp(dtype_info[t].st_name, st) == 0)
      return (DType)t;
  return DT_NONE;
}

/* Saturates at SIZE_MAX instead of wrapping: a size that large matches no buffer and fails
 * every allocation, where a wrapped one could be small. */
size_t dtype_bytes(DType t, size_t n) {
  size_t bits = (size_t)dtype_bits(t);
  if (bits && n > (SIZE_MAX - 7) / bits)
    return SIZE_MAX;
  return (n * bits + 7) / 8;
}
