/* dlpack_dtype.c: see dlpack_dtype.h. */
#include "dlpack_dtype.h"

static const struct {
  DType t;
  DLDataType dl;
} table[] = {
    {DT_F32, {kDLFloat, 32, 1}}, {DT_F16, {kDLFloat, 16, 1}}, {DT_BF16, {kDLBfloat, 16, 1}}, {DT_F64, {kDLFloat, 64, 1}},
    {DT_I8, {kDLInt, 8, 1}},     {DT_U8, {kDLUInt, 8, 1}},    {DT_F8E4M3, {kDLUInt, 8, 1}}, {DT_F8E5M2, {kDLUInt, 8, 1}},
};

bool dtype_to_dl(DType t, DLDataType *out) {
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (table[i].t == t) {
      *out = table[i].dl;
      return true;
    }
  return false;
}

DType dtype_from_dl(DLDataType t, DType want) {
  if (t.lanes != 1)
    return DT_NONE;
  if (t.code == kDLUInt && t.bits == 8 && (want == DT_F8E4M3 || want == DT_F8E5M2))
    return want;
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) /* the first of a code is its own type */
    if (table[i].dl.code == t.code && table[i].dl.bits == t.bits)
      return table[i].t;
  return DT_NONE;
}
