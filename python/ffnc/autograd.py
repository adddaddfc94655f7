"""Training with ffnc inside an ordinary torch step: a .ffn program as a torch.nn.Module whose
weights are torch Parameters, differentiated by ffnc's compiled backward graph.

    from ffnc.autograd import FFN
    ffn = FFN("llama3_tiny.ffn", weights=state_dict, device="cuda")   # Parameters, copied from state_dict
    opt = torch.optim.AdamW(ffn.parameters(), lr=1e-4)
    for x, target in batches:
        loss = loss_fn(ffn(x), target)      # forward: the compiled program
        loss.backward()                     # backward: the compiled backward graph (ffn_model_run_grad)
        opt.step(); opt.zero_grad()         # see the weight rule below

Two models share the Parameters' memory and one workspace (their calls' scratch memory: the
backward runs after the forward, so one the size of the larger need serves both): the program
(forward) and its backward graph. By default the backward graph recomputes the forward values it
needs from the inputs (the memory-saving policy: the forward saves only its inputs for backward,
no [T, F] intermediates). With keep=True (the keep policy, ffnc.compile(keep=True)) the forward
is the training forward, which also writes the outputs of the matrix products the backward reads
(for a bf16 SwiGLU sublayer the gate and up products, 2 F x 2 bytes per token), saved for
backward; the backward graph reads them instead of running those products again, and writes its
own values over them once read (FFN_GRAD_CONSUME_SAVED: a smaller workspace), so such a graph is
backwarded once: a second backward (retain_graph=True) raises RuntimeError. Gradients come
for every input and Parameter that requires one, in its own dtype (f32 or bf16; others through
f32).

The weight rule. Both models use the Parameters' memory in place. Some programs' kernels read
copies made at load time (ffn_model_prepare: norm gains folded into the projections, gate and
up merged, quantized codes: Program.num_load_steps > 0); the keep policy's training forward and
backward of a bf16 Llama-style sublayer read the weights as they are (no copies). FFN tracks each
Parameter's storage and version counter (torch bumps it on every in-place change: optimizer
steps, copy_, mul_ under no_grad) and re-binds a Parameter whose storage moved (p.data = ...);
where a model keeps copies, it makes them again, before the next forward, when any Parameter
changed. Call ffn.weights_changed() after a change torch does not count (a write through another
view made with .data, a DLPack consumer, a custom kernel). Making copies again synchronizes the
device and allocates them, so a training step that changes the weights of such a model is not
capturable as a whole in a CUDA graph; the forward and backward calls themselves are, and with no
copies (keep=True on a Llama-style bf16 sublayer) an optimizer step costs ffnc nothing.
Changing a Parameter between a forward and its backward is an error (torch's saved-tensor check).
"""
import weakref

import torch

from . import compile as _compile
from . import compile_file as _compile_file

__all__ = ["FFN", "FFNFunction"]


def _param_name(name):
    return name.replace(".", "__")


# Every optimizer step marks the FFN modules whose Parameters it holds as changed, besides the
# version counters (whether an optimizer's fused or foreach kernels bump those is theirs to say).
_live = weakref.WeakSet()


def _after_optimizer_step(optimizer, args, kwargs):
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    for module in list(_live):
        if any(id(p) in held for p in module._params):
            module.weights_changed()


_register_step_hook = getattr(getattr(torch.optim, "optimizer", None), "register_optimizer_step_post_hook", None)
if _register_step_hook is not None:
    _register_step_hook(_after_optimizer_step)


class FFNFunction(torch.autograd.Function):
    """ffn(*inputs, *weights) -> outputs, with ffnc's backward graph as its backward.
    FFN.forward applies it; the module carries the two compiled models."""

    @staticmethod
    def forward(ctx, module, *args):
        n = module._num_inputs
        inputs = [a.detach().contiguous() for a in args[:n]]  # DLPack exports no tensor that requires grad
        outputs = module._forward_model(*inputs)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        kept = outputs[module._num_outputs:]  # the keep policy's saved tensors ("saved.NAME")
        outputs = outputs[:module._num_outputs]
        ctx.module = module
        ctx.output_meta = [(y.shape, y.dtype) for y in outputs]
        ctx.num_kept = len(kept)
        # the inputs (and kept products) are what the backward graph reads; the weights are saved
        # too (no memory: they are the Parameters) so that torch refuses a step that changed them
        ctx.save_for_backward(*inputs, *kept, *args[n:])
        return outputs[0] if len(outputs) == 1 else outputs

    @staticmethod
    def backward(ctx, *grad_outputs):
        module = ctx.module
        if getattr(ctx, "consumed", False):
            raise RuntimeError("ffnc: this keep-policy forward's backward has run: it consumed the kept products "
                               "(FFN_GRAD_CONSUME_SAVED); run the forward again, or use keep=False to backward "
                               "twice through one graph (retain_graph=True)")
        saved = ctx.saved_tensors
        n, k = module._num_inputs, ctx.num_kept
        inputs, kept, weights = saved[:n], saved[n:n + k], saved[n + k:]
        dys = []
        for dy, (shape, dtype) in zip(grad_outputs, ctx.output_meta):
            if dy is None:  # an output the loss does not use
                dy = torch.zeros(shape, dtype=dtype, device=inputs[0].device)
            dys.append(dy.to(dtype).contiguous())
        wanted = ctx.needs_input_grad[1:]
        # one tensor per gradient of the backward graph, matched by name: "grad.<input or weight>"
        like = {name: t for name, t in zip(module._input_names, inputs)}
        like.update({name: t for name, t in zip(module._weight_names, weights)})
        index = {name: i for i, name in enumerate(module._input_names + module._weight_names)}
        out, casts = [], []
        for info in module._grad_outputs:
            name = info["name"][len("grad."):]
            i = index.get(name)  # None: a weight the program declares but never reads
            if i is None or not wanted[i]:
                out.append(None)
                continue
            t = like[name]
            dtype = t.dtype if t.dtype in (torch.float32, torch.bfloat16) else torch.float32
            out.append(torch.empty(t.shape, dtype=dtype, device=t.device))
            casts.append((len(out) - 1, t.dtype))
        # the kept products are this graph's alone (not returned): the backward may write over them
        module._grad_model.run_grad(*inputs, *dys, *kept, out=out, consume_saved=k > 0)
        ctx.consumed = k > 0
        for k, dtype in casts:
            out[k] = out[k].to(dtype)
        result = [None] * len(index)
        for info, g in zip(module._grad_outputs, out):
            i = index.get(info["name"][len("grad."):])
            if i is not None:
                result[i] = g
        return (None, *result)


class FFN(torch.nn.Module):
    """A .ffn program as a trainable torch module.

    path or source: the program (a file, or its text); weights: a mapping checkpoint name ->
    tensor for every weight the program reads, copied into Parameters on `device` (registered
    under the name with '.' as '__'; ffn.parameter(name) finds one by its checkpoint name); keep:
    the keep policy (save the products the backward reads; see the module's doc). Other keyword
    arguments are compile options (arch, precision, ffn_fusion, opt_level).
    forward(*inputs) takes the program's inputs in declaration order."""

    def __init__(self, path=None, *, source=None, weights, device="cuda", keep=False, **options):
        super().__init__()
        if (path is None) == (source is None):
            raise TypeError("ffnc.autograd.FFN: give a path or source=, not both")
        if path is not None:
            program = _compile_file(path, keep=keep, **options)
            grad_program = _compile_file(path, grad=True, keep=keep, **options)
        else:
            program = _compile(source, keep=keep, **options)
            grad_program = _compile(source, grad=True, keep=keep, **options)
        self.device = torch.device(device)
        self._forward_model = program.to(self.device)
        self._grad_model = grad_program.to(self.device).share_workspace(self._forward_model)
        self._input_names = [i["name"] for i in program.inputs]
        self._num_inputs = len(self._input_names)
        outputs = [o["name"] for o in program.outputs]  # the training forward's saved tensors last
        self._num_outputs = sum(not name.startswith("saved.") for name in outputs) if keep else len(outputs)
        self._copies = program.num_load_steps + grad_program.num_load_steps > 0
        self._weight_names = program.weights
        self._grad_outputs = grad_program.outputs
        self._grad_reads = set(grad_program.weights)
        self._params = []
        for name in self._weight_names:
            if name not in weights:
                raise KeyError(f"ffnc: no tensor for weight '{name}'")
            p = torch.nn.Parameter(weights[name].detach().to(self.device).contiguous().clone())
            self.register_parameter(_param_name(name), p)
            self._params.append(p)
        self._bound = [None] * len(self._params)  # (storage address, version) last bound and prepared
        self._sync_weights()
        _live.add(self)

    def parameter(self, name):
        """The Parameter of checkpoint weight `name`."""
        return self._params[self._weight_names.index(name)]

    def weights_changed(self):
        """The Parameters changed in a way torch does not count: re-derive before the next forward."""
        self._bound = [b and (b[0], None) for b in self._bound]  # the storage stays bound

    def _sync_weights(self):
        state = [(p.data_ptr(), p._version) for p in self._params]
        if state == self._bound:
            return
        rebound = False
        for i, (name, p) in enumerate(zip(self._weight_names, self._params)):
            if self._bound[i] is None or self._bound[i][0] != state[i][0]:  # new storage: bind it
                self._forward_model.bind_weight(name, p.detach())
                if name in self._grad_reads:
                    self._grad_model.bind_weight(name, p.detach())
                rebound = True
        if rebound or self._copies:  # values changed in place: only copies of them are stale
            # ffn_model_prepare runs on the legacy default stream: what changed the weights on
            # torch's current stream must be done first
            torch.cuda.current_stream(self.device).synchronize()
            self._forward_model.prepare(force=True)
            self._grad_model.prepare(force=True)
        self._bound = state

    def forward(self, *inputs):
        if len(inputs) != self._num_inputs:
            raise TypeError(f"ffnc: the program takes {self._num_inputs} inputs ({', '.join(self._input_names)}), "
                            f"got {len(inputs)}")
        self._sync_weights()
        return FFNFunction.apply(self, *inputs, *self._params)
