"""DLPack structures as ctypes sees them, and the capsule handling of the __dlpack__ protocol."""
import ctypes

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST = 1, 2, 3
KDL_INT, KDL_UINT, KDL_FLOAT, KDL_BFLOAT = 0, 1, 2, 4


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_get = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get.restype = ctypes.c_void_p
_capsule_get.argtypes = [ctypes.py_object, ctypes.c_char_p]


class Borrowed:
    """A DLTensor view of an object that speaks __dlpack__. The capsule is kept (not renamed to
    "used_dltensor"), so the producer's capsule destructor frees the managed tensor once this
    object is gone; the DLTensor is valid while it lives."""

    def __init__(self, obj):
        self.capsule = obj.__dlpack__()
        managed = ctypes.cast(_capsule_get(self.capsule, b"dltensor"), ctypes.POINTER(DLManagedTensor))
        self.tensor = managed.contents.dl_tensor

    @property
    def shape(self):
        return tuple(self.tensor.shape[i] for i in range(self.tensor.ndim))


def device_of(obj):
    """(device_type, device_id) of a __dlpack__ object."""
    kind, index = obj.__dlpack_device__()
    return int(kind), int(index)


def host_tensor(address, dtype, shape):
    """A DLTensor over host memory at `address`; the shape array is kept on the tensor."""
    dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    t = DLTensor(ctypes.c_void_p(address), DLDevice(KDL_CPU, 0), len(shape), dtype, dims, None, 0)
    t._dims = dims
    return t
