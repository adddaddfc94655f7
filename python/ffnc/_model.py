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
        self._in_place = {}  # name -> device tensor the library uses in place: it must outlive the binding
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
            self.bind_weight(name, tensors[name])
        return self.prepare() if prepare else self

    def bind_weight(self, name, obj):
        """Bind one weight (see load_state_dict); call prepare() before the next run."""
        self._check_device(obj, f"weight '{name}'", allow_host=True)
        view = _dlpack.Borrowed(obj)
        _check(_lib_handle.ffn_model_bind_weight(self._handle, name.encode(), ctypes.byref(view.tensor)))
        if view.tensor.device.device_type == _dlpack.KDL_CUDA:
            self._in_place[name] = (obj, view)
        else:
            self._in_place.pop(name, None)
        self._prepared = False
        return self

    def prepare(self, force=False):
        """Load-time weight transforms (norm gains folded into projections, gate/up merged...):
        once after binding (load_* call it), and again (force=True) after weights bound in place
        changed: the kernels read the copies this makes. Synchronizes the device."""
        if force or not self._prepared:
            _check(_lib_handle.ffn_model_prepare(self._handle))
            self._prepared = True
        return self

    def share_workspace(self, other):
        """Take the workspace of this model's calls (their device scratch memory) where `other`'s
        calls take theirs from now on (ffn_model_share_workspace): models whose calls run one
        after the other on a stream, as a training forward and its backward graph, then hold one
        workspace the size of the larger need instead of two. Both on one device. Returns self."""
        if not isinstance(other, Model):
            raise TypeError(f"ffnc: share_workspace takes a Model, got {type(other).__name__}")
        _check(_lib_handle.ffn_model_share_workspace(self._handle, other._handle))
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

    def run_grad(self, *inputs, out=None, accumulate=False, consume_saved=False, dtype=None, stream=None):
        """A backward graph's gradients (a program compiled with grad=True; ffn_model_run_grad).
        Inputs: the program's, then dL/d of each output ("grad.OUT"), then (keep policy) the saved
        tensors. out: one tensor per output ("grad.NAME", self.program.outputs) on the model's
        device, f32 or bf16, or None for one not wanted; accumulate=True adds to what they hold
        instead of writing; consume_saved=True lets the call write over the saved tensors
        (FFN_GRAD_CONSUME_SAVED: less workspace, their contents undefined afterwards). Without
        out=, tensors of `dtype` (default torch.float32) are allocated. Returns the list of
        gradients (None where not wanted). On `stream` as __call__, asynchronous, capturable."""
        if len(inputs) != self._num_inputs:
            raise TypeError(f"ffnc: the model takes {self._num_inputs} inputs, got {len(inputs)}")
        for i, x in enumerate(inputs):
            self._check_device(x, f"input {i}", allow_host=False)
        torch = _get_torch()
        views = [_dlpack.Borrowed(x) for x in inputs]
        dl_in = (_dlpack.DLTensor * max(len(views), 1))(*[v.tensor for v in views])
        if out is None:
            if torch is None:
                raise TypeError("ffnc: without torch, pass the gradient tensors with out=")
            out = self._outputs_for(dl_in, None, torch, dtype or torch.float32)
        out = list(out)
        if len(out) != len(self._outputs):
            raise TypeError(f"ffnc: the model has {len(self._outputs)} gradients, got {len(out)} in out=")
        out_views = []
        for i, g in enumerate(out):
            if g is not None:
                self._check_device(g, f"gradient {i} ({self._outputs[i]['name']})", allow_host=False)
            out_views.append(_dlpack.Borrowed(g) if g is not None else None)
        dl_out = (_dlpack.DLTensor * max(len(out_views), 1))(
            *[v.tensor if v is not None else _dlpack.DLTensor() for v in out_views])
        handle = ctypes.c_void_p(self._stream_handle(stream, torch) or None)
        flags = (1 if accumulate else 0) | (2 if consume_saved else 0)  # FFN_GRAD_ACCUMULATE, _CONSUME_SAVED
        _check(_lib_handle.ffn_model_run_grad(self._handle, handle, dl_in, len(views), dl_out, len(out_views), flags))
        return out

    def _outputs_for(self, dl_in, out, torch, dtype=None):
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
            result.append(torch.empty(dims, dtype=dtype or getattr(torch, info["dtype"]), device=f"cuda:{self.device}"))
        return result
