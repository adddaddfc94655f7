"""A whole training step through the Python bridge, weight update included, beside torch.

    python3 bench/py_train_step.py [--tokens 1024,8192] [--steps 30] [--json OUT.json]
                                   [--profile] [--sides "ffnc keep,torch.compile"]

`ffnc bench --grad` times the forward and backward calls alone. A training loop also changes the
weights every step, and where a model's kernels read load-time copies of them (the recompute
policy's forward: norm gains folded, gate/up merged) ffnc.autograd.FFN makes those copies again
before the next forward. This times what a user's loop runs, on the Llama-3-8B FFN sublayer
(bench/suite/llama3_8b_layer.ffn, bf16): loss = sum(y * r), backward, an SGD step on every
weight (torch's own optimizer, the same on every side), for
  ffnc recompute   FFN(path, weights)             (copies made again after every step)
  ffnc keep        FFN(path, weights, keep=True)  (the training forward saves the products; no copies)
  torch eager / torch.compile of the same math (bench/torch_peer.py's Llama sublayer).
Median of --steps steps after warm-up (CUDA events around each, the host waiting for each
step's end: what one step costs), then the mean of --steps steps run back to back (the host's
work overlapping the device's), per token count.
--profile: then 5 more steps of each side under torch.profiler (CUPTI sees ffnc's kernels too):
the device time per step against the wall time, and the kernels taking the most device time.
Needs torch and a GPU (the GPU machine's python3); ffnc from PYTHONPATH / FFNC_LIBRARY as the tests."""
import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from torch_peer import llama_stack  # noqa: E402

from ffnc.autograd import FFN  # noqa: E402

D, F_ = 4096, 14336
NAMES = {"g": "post_attention_layernorm.weight", "wg": "mlp.gate_proj.weight", "wu": "mlp.up_proj.weight",
         "wd": "mlp.down_proj.weight"}


def weights(seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    def w(*shape, scale):
        return (torch.randn(*shape, generator=gen, device="cuda") * scale).bfloat16()
    return dict(g=(1 + 0.1 * torch.randn(D, generator=gen, device="cuda")).bfloat16(),
                wg=w(F_, D, scale=D ** -0.5), wu=w(F_, D, scale=D ** -0.5), wd=w(D, F_, scale=F_ ** -0.5))


def time_steps(module, x, r, steps):
    opt = torch.optim.SGD(module.parameters(), lr=1e-6)
    def step():
        opt.zero_grad(set_to_none=True)
        (module(x).float() * r).sum().backward()
        opt.step()
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0)
    # the same steps back to back, the host never waiting: what the device needs a step when the
    # host's work (Python, autograd, launches) overlaps it
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(steps):
        step()
    b.record()
    b.synchronize()
    return statistics.median(times), a.elapsed_time(b) * 1000.0 / steps


class TorchLayer(torch.nn.Module):
    def __init__(self, w, compiled):
        super().__init__()
        self.p = torch.nn.ParameterDict({k: torch.nn.Parameter(v.clone()) for k, v in w.items()})
        fn = llama_stack([self.p])
        self.fn = torch.compile(fn, dynamic=True) if compiled else fn

    def forward(self, x):
        return self.fn(x)


def profile(name, module, x, r):
    """5 steps under torch.profiler: device time by kernel, against the wall time of the steps."""
    from torch.profiler import ProfilerActivity, profile as torch_profile
    opt = torch.optim.SGD(module.parameters(), lr=1e-6)
    def step():
        opt.zero_grad(set_to_none=True)
        (module(x).float() * r).sum().backward()
        opt.step()
    step()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        a.record()
        for _ in range(5):
            step()
        b.record()
        b.synchronize()
    events = prof.key_averages()
    device = sum(e.self_device_time_total for e in events) / 5
    print(f"--- {name}, T={x.shape[0]}: {a.elapsed_time(b) * 200:.1f} us a step, {device:.1f} us of device time "
          f"(kernels and copies) a step", flush=True)
    print(events.table(sort_by="self_device_time_total", row_limit=18, max_name_column_width=60), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="1024,8192")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--json")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--sides", help="a comma-separated subset of the sides")
    args = ap.parse_args()
    path = os.path.join(os.path.dirname(__file__), "suite", "llama3_8b_layer.ffn")
    w = weights(1)
    state = {NAMES[k]: v for k, v in w.items()}
    sides = {"ffnc recompute": FFN(path, weights=state), "ffnc keep": FFN(path, weights=state, keep=True),
             "torch eager": TorchLayer(w, False), "torch.compile": TorchLayer(w, True)}
    if args.sides:
        sides = {k: v for k, v in sides.items() if k in args.sides.split(",")}
    rows = []
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}; Llama-3-8B FFN sublayer, bf16; "
          f"fwd + bwd + SGD step, median of {args.steps}, us")
    for t in (int(v) for v in args.tokens.split(",")):
        gen = torch.Generator(device="cuda").manual_seed(t)
        x = torch.randn(t, D, generator=gen, device="cuda").bfloat16().requires_grad_(True)
        r = torch.randn(t, D, generator=gen, device="cuda")
        row = {"tokens": t}
        for name, module in sides.items():
            synced, streamed = time_steps(module, x, r, args.steps)
            row[name] = round(synced, 1)
            row[name + " back to back"] = round(streamed, 1)
        rows.append(row)
        print(f"T={t:5d}  " + "  ".join(f"{k} {v:9.1f}" for k, v in row.items() if k != "tokens"), flush=True)
        for name, module in sides.items() if args.profile else ():
            profile(name, module, x, r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
