"""Model: a program on a CUDA device, with its weights; called like a torch module."""
import ctypes
import sys

from . import _dlpack
from . import FFNCError, _check, _lib_handle, _live_models, _parse_device, checkpoint_files, SafetensorsFile

_torch = None


def _get_torch():
    """torch if it is installed (imported on first need: it is slow to import), else None."""
    global _torch
    if _torch is None:
        try:
            import torch
            _torch = torch
        except ImportError:
            _torch = False
    return _torch or None


class Model:
    """A program on device `device` with bound weights. Bind with load_safetensors() or
    load_state_dict(); then model(x, ...) runs on the caller's current CUDA stream."""

    def __init__(self, program, device="cuda"):
        self.program = program
        self.device = _parse_device(device)
        handle = ctypes.c_void_p()
        _check(_lib_handle.ffn_model_create(program._handle, self.device, ctypes.byref(handle)))
        self._handle = handle
        self._in_place = []  # device tensors the library uses in place: they must outlive the model
        self._prepared = False
        self._outputs = program.outputs
        self._num_inputs = len(program.inputs)
        _live_models.add(self)

    def close(self):
        """Release the model's device memory now; it cannot run afterwards."""
        if getattr(self, "_handle", None):
            torch = sys.modules.get("torch")  # never imported from a destructor
            if torch is not None and torch.cuda.is_initialized():
                torch.cuda.synchronize(self.device)  # captured graphs and pending runs use its memory
            _lib_handle.ffn_model_destroy(self._handle)
            self._handle = None

    __del__ = close

    def _check_device(self, obj, what, allow_host):
        kind, index = _dlpack.device_of(obj)
        if kind == _dlpack.KDL_CUDA and index == self.device:
            return
        if allow_host and kind == _dlpack.KDL_CPU:
            return
        place = f"cuda:{index}" if kind == _dlpack.KDL_CUDA else {1: "cpu"}.get(kind, f"dlpack device {kind}")
        raise ValueError(f"ffnc: {what} is on {place}, the model on cuda:{self.device}")

    # ---- weights ----

    def load_safetensors(self, path):
        """Bind every weight from a safetensors file, a sharded checkpoint's
        model.safetensors.index.json, or a directory holding either; then prepare."""
        files = checkpoint_files(str(path))
        if len(files) == 1:
            _check(_lib_handle.ffn_model_bind_weights_file(self._handle, files[0].encode()))
        else:
            self._bind_shards(files)
        return self.prepare()

    def _bind_shards(self, files):
        wanted = set(self.program.weights)
        for path in files:
            shard = SafetensorsFile(path)
            try:
                for name, dtype, shape, offset, _ in shard.tensors():
                    if name in wanted:
                        t = _dlpack.host_tensor(shard.address + offset, dtype, shape)
                        _check(_lib_handle.ffn_model_bind_weight(self._handle, name.encode(), ctypes.byref(t)))
                        wanted.discard(name)  # copied to the device: the mapping may go
            finally:
                shard.close()
        if wanted:
            raise FFNCError(3, f"ffnc: weights missing from the checkpoint: {', '.join(sorted(wanted))}")

    def load_state_dict(self, tensors, prepare=True):
        """Bind weights from a mapping name -> tensor (anything with __dlpack__: torch, numpy,
        cupy...). Host tensors are copied; tensors on the model's device are used in place and
        kept alive by the model. Names the program does not read are ignored."""
        for name in self.program.weights:
            if name not in tensors:
                raise FFNCError(3, f"ffnc: no tensor for weight '{name}'")
            obj = tensors[name]
            self._check_device(obj, f"weight '{name}'", allow_host=True)
            view = _dlpack.Borrowed(obj)
            _check(_lib_handle.ffn_model_bind_weight(self._handle, name.encode(), ctypes.byref(view.tensor)))
            if view.tensor.device.device_type == _dlpack.KDL_CUDA:
                self._in_place.append((obj, view))
        return self.prepare() if prepare else self

    def prepare(self):
        """Load-time weight transforms; once, after binding (load_* call it)."""
        if not self._prepared:
            _check(_lib_handle.ffn_model_prepare(self._handle))
            self._prepared = True
        return self

    # ---- running ----

    def _stream_handle(self, stream, torch):
        if stream is None:
            return torch.cuda.current_stream(self.device).cuda_stream if torch else 0
        return getattr(stream, "cuda_stream", stream)  # a torch.cuda.Stream or a raw handle

    def __call__(self, *inputs, out=None, stream=None):
        """Run on `stream` (default: torch's current stream on the model's device, else the
        default stream). Inputs in declaration order, on the model's device. Without out=,
        outputs are allocated with torch; returns one tensor, or a tuple for several."""
        if len(inputs) != self._num_inputs:
            raise TypeError(f"ffnc: the model takes {self._num_inputs} inputs, got {len(inputs)}")
        for i, x in enumerate(inputs):
            self._check_device(x, f"input {i}", allow_host=False)
        torch = _get_torch()
        views = [_dlpack.Borrowed(x) for x in inputs]
        dl_in = (_dlpack.DLTensor * max(len(views), 1))(*[v.tensor for v in views])
        outputs = self._outputs_for(dl_in, out, torch)
        for i, y in enumerate(outputs):
            self._check_device(y, f"output {i}", allow_host=False)
        out_views = [_dlpack.Borrowed(y) for y in outputs]
        dl_out = (_dlpack.DLTensor * max(len(out_views), 1))(*[v.tensor for v in out_views])
        handle = ctypes.c_void_p(self._stream_handle(stream, torch) or None)
        _check(_lib_handle.ffn_model_run(self._handle, handle, dl_in, len(views), dl_out, len(out_views)))
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _outputs_for(self, dl_in, out, torch):
        if out is not None:
            out = list(out) if isinstance(out, (list, tuple)) else [out]
            if len(out) != len(self._outputs):
                raise TypeError(f"ffnc: the model has {len(self._outputs)} outputs, got {len(out)} in out=")
            return out
        if torch is None:
            raise TypeError("ffnc: without torch, pass the output tensors with out=")
        result = []
        for i, info in enumerate(self._outputs):
            shape, ndim = (ctypes.c_int64 * 8)(), ctypes.c_int()
            _check(_lib_handle.ffn_model_output_shape(self._handle, i, dl_in, self._num_inputs, shape, ctypes.byref(ndim)))
            dims = [shape[d] for d in range(ndim.value)]
            result.append(torch.empty(dims, dtype=getattr(torch, info["dtype"]), device=f"cuda:{self.device}"))
        return result
