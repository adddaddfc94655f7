"""Finding and loading libffn.so, and the C prototypes of include/ffn.h."""
import ctypes
import ctypes.util
import glob
import os
import site
import sys

from ._dlpack import DLDataType, DLTensor

_HERE = os.path.dirname(os.path.abspath(__file__))


def _candidates():
    env = os.environ.get("FFNC_LIBRARY")
    if env:
        return [env]  # asked for: no fallback that would hide a wrong path
    here = sorted(glob.glob(os.path.join(_HERE, "libffn.so*")) + glob.glob(os.path.join(_HERE, "lib", "libffn.so*")))
    system = ["libffn.so.0.1", "libffn.so"]
    found = ctypes.util.find_library("ffn")
    return here + system + ([found] if found else [])


def _nvrtc_from_pip():
    """libnvrtc of pip's nvidia-cuda-nvrtc package (site-packages/nvidia/cuda_nvrtc/lib), if any."""
    dirs = list(sys.path)
    try:
        dirs += site.getsitepackages() + [site.getusersitepackages()]
    except AttributeError:  # virtualenvs of old Pythons
        pass
    for d in dirs:
        libs = sorted(glob.glob(os.path.join(d, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so*")))
        libs = [p for p in libs if "builtins" not in os.path.basename(p)]
        if libs:
            return libs[-1]
    return None


def load():
    # The library reads FFNC_NVRTC_LIBRARY when it first needs NVRTC; a path set by the user wins.
    if "FFNC_NVRTC_LIBRARY" not in os.environ:
        pip_nvrtc = _nvrtc_from_pip()
        if pip_nvrtc:
            os.environ["FFNC_NVRTC_LIBRARY"] = pip_nvrtc
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(str(e))
            continue
        _declare(lib)
        return lib
    raise OSError("ffnc: cannot load libffn.so (set FFNC_LIBRARY to its path): " + "; ".join(errors))


class TensorInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", DLDataType),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.c_int64 * 8),
        ("dim_names", ctypes.c_char_p * 8),
    ]


def _declare(lib):
    P, S, I, C = ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_char_p
    PP = ctypes.POINTER(ctypes.c_void_p)
    T = ctypes.POINTER(DLTensor)
    protos = {
        "ffn_status_string": (C, [S]),
        "ffn_last_error": (C, []),
        "ffn_options_create": (S, [PP]),
        "ffn_options_destroy": (None, [P]),
        "ffn_options_set_arch": (S, [P, C]),
        "ffn_options_set_precision": (S, [P, C, C]),
        "ffn_options_add_ffn_fusion": (S, [P, I, I]),
        "ffn_options_set_opt_level": (S, [P, I]),
        "ffn_options_set_grad": (S, [P, I]),
        "ffn_options_set_grad_policy": (S, [P, I]),
        "ffn_program_compile": (S, [C, ctypes.c_size_t, C, P, PP]),
        "ffn_program_compile_file": (S, [C, P, PP]),
        "ffn_program_save": (S, [P, C]),
        "ffn_program_load": (S, [C, PP]),
        "ffn_program_destroy": (None, [P]),
        "ffn_program_arch": (C, [P]),
        "ffn_program_num_kernels": (I, [P]),
        "ffn_program_num_load_steps": (I, [P]),
        "ffn_program_num_inputs": (I, [P]),
        "ffn_program_num_outputs": (I, [P]),
        "ffn_program_input_info": (S, [P, I, ctypes.POINTER(TensorInfo)]),
        "ffn_program_output_info": (S, [P, I, ctypes.POINTER(TensorInfo)]),
        "ffn_program_num_weights": (I, [P]),
        "ffn_program_weight_name": (C, [P, I]),
        "ffn_model_create": (S, [P, I, PP]),
        "ffn_model_destroy": (None, [P]),
        "ffn_model_bind_weights_file": (S, [P, C]),
        "ffn_model_bind_weight": (S, [P, C, T]),
        "ffn_model_prepare": (S, [P]),
        "ffn_model_run": (S, [P, P, T, I, T, I]),
        "ffn_model_run_grad": (S, [P, P, T, I, T, I, ctypes.c_uint]),
        "ffn_model_share_workspace": (S, [P, P]),
        "ffn_model_output_shape": (S, [P, I, T, I, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(I)]),
        "ffn_device_count": (I, [ctypes.c_char_p, ctypes.c_size_t]),
        "ffn_version": (C, []),
        "ffn_build_info": (C, []),
        "ffn_runtime_versions": (None, [C, ctypes.c_size_t, C, ctypes.c_size_t]),
    }
    for name, (restype, argtypes) in protos.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
