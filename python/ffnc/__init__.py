"""ffnc from Python: compile .ffn feed-forward blocks, run them on PyTorch tensors.

    import ffnc, torch
    prog = ffnc.compile_file("llama3_tiny.ffn")        # or ffnc.compile(src), ffnc.load("m.ffnx")
    model = prog.to("cuda:0").load_safetensors("model.safetensors.index.json")
    y = model(x)                                        # x: a CUDA tensor; on the current stream

A thin ctypes layer over libffn.so (found next to this package, through FFNC_LIBRARY, or on the
system path); needs only the standard library. Torch is optional: without it, pass outputs
(any objects that speak __dlpack__) with out= and a stream handle with stream=.
"""
import atexit
import ctypes
import weakref

from . import _dlpack, _lib
from ._safetensors import SafetensorsFile, checkpoint_files

__all__ = ["compile", "compile_file", "load", "Program", "Model", "FFNCError", "CompileError",
           "NoDeviceError", "device_count", "version", "build_info"]

_STATUS = ["ok", "invalid_argument", "source", "tensor", "io", "unsupported", "no_compiler",
           "compile", "no_device", "cuda", "out_of_memory"]
_lib_handle = _lib.load()

# Objects holding library handles, released in order (models, then programs) when the
# interpreter exits, while the CUDA driver and torch are still whole: __del__ at shutdown runs
# in no defined order, after other modules may have torn their state down.
_live_models = weakref.WeakSet()
_live_programs = weakref.WeakSet()


@atexit.register
def _release_all():
    for m in list(_live_models):
        m.close()
    for p in list(_live_programs):
        p.close()


class FFNCError(RuntimeError):
    """A failed library call: .status is the ffn_status name ("source", "no_device"...), the
    message is ffn_last_error()."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = _STATUS[status] if 0 <= status < len(_STATUS) else str(status)


class CompileError(FFNCError):
    """The .ffn source has errors; .diagnostics holds them (file:line:col, source line, caret)."""

    @property
    def diagnostics(self):
        return str(self)


class NoDeviceError(FFNCError):
    """No CUDA driver or device (message says which)."""


def _check(status):
    if status == 0:
        return
    message = _lib_handle.ffn_last_error().decode(errors="replace")
    kind = {2: CompileError, 8: NoDeviceError}.get(status, FFNCError)
    raise kind(status, message)


def version():
    return _lib_handle.ffn_version().decode()


def build_info():
    """Version and git commit, e.g. "0.1.0 (git 1a2b3c4d5e6f)"."""
    return _lib_handle.ffn_build_info().decode()


def device_count():
    """Usable CUDA devices (0 where there is no driver or device)."""
    why = ctypes.create_string_buffer(512)
    return _lib_handle.ffn_device_count(why, len(why))


def _options(arch, precision, ffn_fusion, opt_level, grad, keep):
    if arch is None and not precision and not ffn_fusion and opt_level is None and not grad and not keep:
        return None
    opt = ctypes.c_void_p()
    _check(_lib_handle.ffn_options_create(ctypes.byref(opt)))
    try:
        if arch is not None:
            _check(_lib_handle.ffn_options_set_arch(opt, arch.encode()))
        for key, value in (precision or {}).items():
            _check(_lib_handle.ffn_options_set_precision(opt, key.encode(), value.encode()))
        for first, last in ffn_fusion or ():
            _check(_lib_handle.ffn_options_add_ffn_fusion(opt, first, last))
        if opt_level is not None:
            _check(_lib_handle.ffn_options_set_opt_level(opt, opt_level))
        if grad:
            _check(_lib_handle.ffn_options_set_grad(opt, 1))
        if keep:
            _check(_lib_handle.ffn_options_set_grad_policy(opt, 1))  # FFN_GRAD_KEEP
    except FFNCError:
        _lib_handle.ffn_options_destroy(opt)
        raise
    return opt


def _compile(call, arch, precision, ffn_fusion, opt_level, grad, keep):
    opt = _options(arch, precision, ffn_fusion, opt_level, grad, keep)
    handle = ctypes.c_void_p()
    try:
        _check(call(opt, ctypes.byref(handle)))
    finally:
        if opt is not None:
            _lib_handle.ffn_options_destroy(opt)
    return Program(handle)


def compile(source, filename="<string>", *, arch=None, precision=None, ffn_fusion=None, opt_level=None, grad=False,
            keep=False):
    """Compile .ffn source text (NVRTC, through the kernel cache). arch: "sm_90"...; precision:
    {"weights": "f8e4m3"...}; ffn_fusion: [(first, last)...]; opt_level: 0..3; grad: the backward
    graph instead (inputs: the program's, then "grad.OUT" per output; outputs: "grad.NAME", f32,
    per input and weight). keep: the keep policy (ffn_options_set_grad_policy): without grad the
    training forward (outputs: the program's, then the saved tensors "saved.NAME"), with grad the
    backward graph that reads them (inputs: the program's, "grad.OUT", then the same "saved.NAME").
    Raises CompileError with the diagnostics."""
    data = source.encode()
    return _compile(lambda opt, out: _lib_handle.ffn_program_compile(data, len(data), filename.encode(), opt, out),
                    arch, precision, ffn_fusion, opt_level, grad, keep)


def compile_file(path, *, arch=None, precision=None, ffn_fusion=None, opt_level=None, grad=False, keep=False):
    """Compile a .ffn file; see compile()."""
    return _compile(lambda opt, out: _lib_handle.ffn_program_compile_file(str(path).encode(), opt, out),
                    arch, precision, ffn_fusion, opt_level, grad, keep)


def load(path):
    """Load the ahead-of-time output of `ffnc build` or Program.save (no NVRTC needed)."""
    handle = ctypes.c_void_p()
    _check(_lib_handle.ffn_program_load(str(path).encode(), ctypes.byref(handle)))
    return Program(handle)


def _parse_device(device):
    """0, "cuda", "cuda:1" or a torch.device -> the CUDA device index."""
    if isinstance(device, int):
        return device
    text = str(device)
    if text == "cuda":
        return 0
    if text.startswith("cuda:") and text[5:].isdigit():
        return int(text[5:])
    raise ValueError(f"ffnc runs on CUDA devices, not '{text}'")


class Program:
    """Compiled code: immutable, shareable. .inputs/.outputs describe the interface."""

    def __init__(self, handle):
        self._handle = handle
        _live_programs.add(self)

    def close(self):
        """Release the compiled code now (models made from it must be closed first)."""
        if getattr(self, "_handle", None):
            _lib_handle.ffn_program_destroy(self._handle)
            self._handle = None

    __del__ = close

    def _info(self, fn, count):
        infos = []
        for i in range(count):
            info = _lib.TensorInfo()
            _check(fn(self._handle, i, ctypes.byref(info)))
            shape = tuple(None if info.shape[d] < 0 else info.shape[d] for d in range(info.ndim))
            dims = tuple((info.dim_names[d] or b"").decode() or None for d in range(info.ndim))
            infos.append({"name": info.name.decode(), "dtype": _dtype_name(info.dtype), "shape": shape, "dims": dims})
        return infos

    @property
    def inputs(self):
        """[{"name", "dtype", "shape" (None for dynamic dims), "dims" (their names)}...]"""
        return self._info(_lib_handle.ffn_program_input_info, _lib_handle.ffn_program_num_inputs(self._handle))

    @property
    def outputs(self):
        return self._info(_lib_handle.ffn_program_output_info, _lib_handle.ffn_program_num_outputs(self._handle))

    @property
    def weights(self):
        """Names of the weights the program reads, as in the checkpoint."""
        n = _lib_handle.ffn_program_num_weights(self._handle)
        return [_lib_handle.ffn_program_weight_name(self._handle, i).decode() for i in range(n)]

    @property
    def arch(self):
        return _lib_handle.ffn_program_arch(self._handle).decode()

    @property
    def num_kernels(self):
        return _lib_handle.ffn_program_num_kernels(self._handle)

    @property
    def num_load_steps(self):
        """Load-time steps Model.prepare runs (weight copies); 0: the kernels read the weights as
        bound, so weights changed in place need no prepare (ffn_program_num_load_steps)."""
        return _lib_handle.ffn_program_num_load_steps(self._handle)

    def save(self, path):
        """Ahead-of-time output: load() reads it back without NVRTC."""
        _check(_lib_handle.ffn_program_save(self._handle, str(path).encode()))

    def to(self, device="cuda"):
        """A Model of this program on a CUDA device ("cuda", "cuda:1", 1 or a torch.device)."""
        return Model(self, device)


def _dtype_name(dt):
    names = {(_dlpack.KDL_FLOAT, 32): "float32", (_dlpack.KDL_FLOAT, 16): "float16",
             (_dlpack.KDL_BFLOAT, 16): "bfloat16", (_dlpack.KDL_FLOAT, 64): "float64",
             (_dlpack.KDL_INT, 8): "int8", (_dlpack.KDL_UINT, 8): "uint8"}
    return names.get((dt.code, dt.bits), f"dlpack({dt.code},{dt.bits})")


from ._model import Model  # noqa: E402  (Model needs the helpers above)
