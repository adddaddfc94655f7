/* dlpack_dtype.h: ffnc element types <-> DLPack data types, the one mapping that the API,
 * the runtime, the command line and the tests use. */
#ifndef FFNC_DLPACK_DTYPE_H
#define FFNC_DLPACK_DTYPE_H

#include <dlpack/dlpack.h>
#include <stdbool.h>

#include "../ir/ir.h"

/* The DLPack type of t (fp8 travels as bytes, kDLUInt 8); false for types DLPack tensors
 * cannot carry here (i4, bool...), *out untouched. */
bool dtype_to_dl(DType t, DLDataType *out);
/* The ffnc type of a DLPack type, DT_NONE if there is none. `want` settles the one ambiguity:
 * bytes (kDLUInt 8) are fp8 where an fp8 tensor is expected. */
DType dtype_from_dl(DLDataType t, DType want);

#endif
