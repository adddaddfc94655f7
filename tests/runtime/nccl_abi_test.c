/* nccl_abi_test.c: the NCCL values and types rt.h declares itself (ffnc builds without nccl.h)
 * against NCCL's own header, where one is installed (built only then; no GPU needed). */
#include <nccl.h>
#include <stdio.h>

#include "runtime/rt.h"

_Static_assert(NCCL_SUCCESS == ncclSuccess && NCCL_IN_PROGRESS == ncclInProgress, "ncclResult_t");
_Static_assert(NCCL_FLOAT16 == ncclFloat16 && NCCL_FLOAT32 == ncclFloat32 && NCCL_BFLOAT16 == ncclBfloat16,
               "ncclDataType_t");
_Static_assert(NCCL_SUM == ncclSum, "ncclRedOp_t");
_Static_assert(sizeof(NcclUniqueId) == sizeof(ncclUniqueId) && sizeof(NcclComm) == sizeof(ncclComm_t),
               "ncclUniqueId, ncclComm_t");
_Static_assert(sizeof(ncclResult_t) == sizeof(int) && sizeof(ncclDataType_t) == sizeof(int) &&
                   sizeof(ncclRedOp_t) == sizeof(int),
               "NCCL's enums are passed as int");

int main(void) {
  printf("nccl_abi_test: rt.h matches nccl.h %d.%d.%d\n", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
  return 0;
}
