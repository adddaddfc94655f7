#!/usr/bin/env python3
"""bench/torch_peer.py: PyTorch as ffnc's peer, on the GPU machine (its python3 has torch).

    python3 bench/torch_peer.py --tokens 1,16,128,1024,8192 [--ffnc OUT/bench.json]
                                [--json OUT/torch.json] [--models a,b] [--reps 30] [--grad]

Times every bench-suite model (bench/suite/*.ffn, written out here in torch with the same
shapes and dtypes) in three ways: eager, eager captured in a CUDA graph, and torch.compile
(Inductor, dynamic token count: one compile per model) captured in a CUDA graph. Timing as
ffnc bench does it: CUDA events, median of --reps, inputs rotated through enough buffers to
exceed the L2, warm-up first. With --ffnc (the JSON of `ffnc bench` from the same device call)
it prints ffnc's best (plain or graph) beside torch's best and the ratio torch / ffnc (> 1:
ffnc is faster). Before timing, each torch variant is checked against eager in float32.

--grad: training instead (the models torch can differentiate as written: the Llama and GPT
sublayers and the 4-layer stack): a step is y = f(x); y.backward(dy) with bf16 Parameters and x
requiring grad, gradients set to None first (as zero_grad does), timed eager and torch.compile'd
(Inductor, dynamic token count: one compile per model), each checked against eager's gradients; and the peak
extra memory of a step, what `ffnc bench --grad` reports as its own (x, y, dy, workspaces,
saved tensors, weight copies; its gradient tensors exist throughout and are not counted): from
the caching allocator's trace of the step (torch.cuda.memory._record_memory_history), the most
bytes held at once by the step's allocations that do not survive it (the gradients do), plus x
and dy. torch's gradients appear one by one during the backward, so the simpler figure printed
before the seventeenth session, max_memory_allocated() less the memory before the step and all
the gradients, undercounts wherever the peak comes before the last gradient (it is kept as
`*_peak_extra_lower_bytes`). With --ffnc (the JSON of `ffnc bench --grad`) ffnc's fwd+bwd time
and memory are printed beside.

Not a dependency of ffnc: only the bench's peer.
"""
import argparse
import json
import math
import statistics
import sys

import torch
import torch.nn.functional as F

L2_BYTES = 60 << 20


def rmsnorm(x, g, eps=1e-5):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * g.float()).to(x.dtype)


def layernorm(x, g, b, eps=1e-5):
    return F.layer_norm(x.float(), (x.shape[-1],), g.float(), b.float(), eps).to(x.dtype)


def llama_weights(d, f, layers, gen):
    def w(*shape, scale):
        return (torch.randn(*shape, generator=gen, device="cuda") * scale).bfloat16()
    return [dict(g=(1 + 0.1 * torch.randn(d, generator=gen, device="cuda")).bfloat16(),
                 wg=w(f, d, scale=d ** -0.5), wu=w(f, d, scale=d ** -0.5), wd=w(d, f, scale=f ** -0.5))
            for _ in range(layers)]


def llama_stack(ws):
    def fn(x):
        for w in ws:
            h = rmsnorm(x, w["g"])
            x = x + (F.silu(h @ w["wg"].t()) * (h @ w["wu"].t())) @ w["wd"].t()
        return x
    return fn


def llama_fused(ws):
    """FFN Fusion of the stack done the best way in torch: one wide FFN (gains folded)."""
    wg = torch.cat([w["wg"] * w["g"] for w in ws])
    wu = torch.cat([w["wu"] * w["g"] for w in ws])
    wd = torch.cat([w["wd"] for w in ws], dim=1)
    one = torch.ones_like(ws[0]["g"])

    def fn(x):
        h = rmsnorm(x, one)
        return x + (F.silu(h @ wg.t()) * (h @ wu.t())) @ wd.t()
    return fn


def gpt_weights(d, f, gen):
    def w(*shape, scale):
        return (torch.randn(*shape, generator=gen, device="cuda") * scale).bfloat16()
    return dict(g=(1 + 0.1 * torch.randn(d, generator=gen, device="cuda")).bfloat16(), b=w(d, scale=0.1),
                w1=w(f, d, scale=d ** -0.5), b1=w(f, scale=0.1), w2=w(d, f, scale=f ** -0.5), b2=w(d, scale=0.1))


def gpt_layer(w):
    def fn(x):
        h = layernorm(x, w["g"], w["b"])
        return x + F.gelu(h @ w["w1"].t() + w["b1"], approximate="tanh") @ w["w2"].t() + w["b2"]
    return fn


def f8_rows(a):
    """Rows of a (bf16) to e4m3 codes and f32 scales [rows, 1]: ffnc's rule (max |a| / 448 per row)."""
    amax = a.float().abs().amax(dim=-1, keepdim=True)
    s = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    return (a.float() / s).clamp(-448, 448).to(torch.float8_e4m3fn), s


def llama_f8(ws):
    """The Llama sublayer with fp8 e4m3 products as torch runs them best: torch._scaled_mm with
    row-wise scales (activations per row, weights per output channel), as ffnc's contract."""
    w = ws[0]
    q = {k: f8_rows(w[k]) for k in ("wg", "wu", "wd")}

    def mm(a, k):
        qa, sa = f8_rows(a)
        qb, sb = q[k]
        return torch._scaled_mm(qa, qb.t(), scale_a=sa, scale_b=sb.t(), out_dtype=torch.bfloat16)

    def fn(x):
        h = rmsnorm(x, w["g"])
        return x + mm(F.silu(mm(h, "wg")) * mm(h, "wu"), "wd")
    return fn


def models(gen):
    """name (as ffnc bench prints the file) -> (torch function, d, weight bytes, flops per token)"""
    out = {}
    def add(name, fn, d, weights, flops_per_token):
        out[name] = (fn, d, weights, flops_per_token)
    l8 = llama_weights(4096, 14336, 1, gen)
    add("llama3_8b_layer.ffn", llama_stack(l8), 4096, 3 * 4096 * 14336 * 2, 6 * 4096 * 14336)
    l70 = llama_weights(8192, 28672, 1, gen)
    add("llama3_70b_layer.ffn", llama_stack(l70), 8192, 3 * 8192 * 28672 * 2, 6 * 8192 * 28672)
    add("gpt_gelu_4096.ffn", gpt_layer(gpt_weights(4096, 16384, gen)), 4096, 2 * 4096 * 16384 * 2,
        4 * 4096 * 16384)
    l4 = llama_weights(4096, 14336, 4, gen)
    add("llama3_8b_4layers.ffn", llama_stack(l4), 4096, 4 * 3 * 4096 * 14336 * 2, 4 * 6 * 4096 * 14336)
    add("llama3_8b_4layers_fused.ffn", llama_fused(l4), 4096, 4 * 3 * 4096 * 14336 * 2, 4 * 6 * 4096 * 14336)
    add("llama3_8b_layer_f8.ffn", llama_f8(l8), 4096, 3 * 4096 * 14336, 6 * 4096 * 14336)
    add("llama3_70b_layer_f8.ffn", llama_f8(l70), 8192, 3 * 8192 * 28672, 6 * 8192 * 28672)
    return out


def time_calls(call, rotations, reps):
    for r in range(rotations * 2):  # warm-up
        call(r % rotations)
    torch.cuda.synchronize()
    times = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(reps):
        start.record()
        call(i % rotations)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return statistics.median(times)


def graphs_of(fn, xs):
    """One CUDA graph per rotation buffer (each reads its own input)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for x in xs[:2]:
            fn(x)
    torch.cuda.current_stream().wait_stream(s)
    gs, outs = [], []
    for x in xs:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            outs.append(fn(x))
        gs.append(g)
    return gs, outs


def rel_err(a, b):
    a, b = a.float(), b.float()
    return (torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b)).item()


def bench_model(name, fn, d, tokens, reps, compiled, ours):
    rows = []
    for t in tokens:
        rotations = max(2, min(16, math.ceil(2 * L2_BYTES / (t * d * 2 * 2))))
        gen = torch.Generator(device="cuda").manual_seed(t)
        xs = [torch.randn(t, d, generator=gen, device="cuda").bfloat16() for _ in range(rotations)]
        with torch.no_grad():
            ref = fn(xs[0])
            res = {"eager": time_calls(lambda r: fn(xs[r]), rotations, reps)}
            gs, outs = graphs_of(fn, xs)
            gs[0].replay()
            torch.cuda.synchronize()
            assert rel_err(outs[0], ref) < 1e-2, f"{name} T={t}: eager graph differs from eager"
            res["eager+graph"] = time_calls(lambda r: gs[r].replay(), rotations, reps)
            del gs, outs
            cgs, couts = graphs_of(compiled, xs)
            cgs[0].replay()
            torch.cuda.synchronize()
            err = rel_err(couts[0], ref)
            # fp8: compiled and eager quantize slightly different activations (fused norms round
            # differently), so their results differ by about the quantization error itself
            assert err < (6e-2 if "_f8" in name else 2e-2), f"{name} T={t}: torch.compile differs from eager by {err}"
            res["compile+graph"] = time_calls(lambda r: cgs[r].replay(), rotations, reps)
            del cgs, couts
        best = min(res, key=res.get)
        rows.append(dict(model=name, tokens=t, **{k: round(v, 2) for k, v in res.items()}, best=best,
                         best_us=round(res[best], 2), compile_check_rel_err=err))
        mine = ours.get((name, t))
        vs = f"  ffnc {mine:9.1f}  torch/ffnc {res[best] / mine:5.2f}x" if mine else ""
        print(f"{name:30s} T={t:5d}  eager {res['eager']:9.1f}  graph {res['eager+graph']:9.1f}  "
              f"compile+graph {res['compile+graph']:9.1f}  best {best}{vs}", flush=True)
    return rows


GRAD_MODELS = ("llama3_8b_layer.ffn", "llama3_70b_layer.ffn", "gpt_gelu_4096.ffn", "llama3_8b_4layers.ffn")


def leaves(fn):
    """The bf16 weights a model function closes over (dicts, or lists of them)."""
    found = []

    def walk(v):
        if isinstance(v, torch.Tensor):
            found.append(v)
        elif isinstance(v, dict):
            for w in v.values():
                walk(w)
        elif isinstance(v, (list, tuple)):
            for w in v:
                walk(w)
    for cell in fn.__closure__ or ():
        walk(cell.cell_contents)
    return found


def nbytes(t):
    return t.numel() * t.element_size()


def transient_peak(step):
    """The most bytes held at once, during step(), by its allocations that step() frees again
    (from the caching allocator's trace; the allocations alive at the end, the gradients, are left
    out), or None where the trace is not available."""
    mem = torch.cuda.memory
    torch.cuda.synchronize()
    try:
        mem._record_memory_history(max_entries=1000000)
    except Exception as e:  # noqa: BLE001 (an API of torch's that may move)
        print(f"no allocator trace ({e}): peak extra memory as a lower bound only", flush=True)
        return None
    try:
        step()
        torch.cuda.synchronize()
        events = mem._snapshot()["device_traces"][torch.cuda.current_device()]
    finally:
        mem._record_memory_history(enabled=None)
    live, survivors = {}, set()
    for i, e in enumerate(events):  # allocations still alive at the end: the gradients
        if e["action"] == "alloc":
            live[e["addr"]] = i
        elif e["action"] in ("free_requested", "free_completed"):
            live.pop(e["addr"], None)
    survivors = set(live.values())
    held, cur, peak = {}, 0, 0
    for i, e in enumerate(events):
        if e["action"] == "alloc" and i not in survivors:
            held[e["addr"]] = e["size"]
            cur += e["size"]
            peak = max(peak, cur)
        elif e["action"] in ("free_requested", "free_completed") and e["addr"] in held:
            cur -= held.pop(e["addr"])
    return peak


def bench_grad_model(name, fn, d, tokens, reps, ours):
    params = leaves(fn)
    for p in params:
        p.requires_grad_(True)
    compiled = torch.compile(fn, dynamic=True)
    rows = []
    for t in tokens:
        gen = torch.Generator(device="cuda").manual_seed(t)
        x = torch.randn(t, d, generator=gen, device="cuda").bfloat16().requires_grad_(True)
        dy = torch.randn(t, d, generator=gen, device="cuda").bfloat16()
        grads = params + [x]
        res, mem, lower, check = {}, {}, {}, {}
        for variant, f in (("eager", fn), ("compile", compiled)):
            def step():
                for p in grads:
                    p.grad = None
                f(x).backward(dy)
            step()  # compiles; warm-up
            got = [p.grad.clone() for p in grads]
            if variant == "eager":
                want = got
            check[variant] = max(rel_err(a, b) for a, b in zip(got, want))
            assert check[variant] < 2e-2, f"{name} T={t}: {variant} gradients differ from eager by {check[variant]}"
            del got
            for p in grads:
                p.grad = None
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            step()
            torch.cuda.synchronize()
            grad_bytes = sum(nbytes(p.grad) for p in grads)
            lower[variant] = torch.cuda.max_memory_allocated() - before + nbytes(x) + nbytes(dy) - grad_bytes
            for p in grads:
                p.grad = None
            peak = transient_peak(step)
            mem[variant] = lower[variant] if peak is None else peak + nbytes(x) + nbytes(dy)
            res[variant] = time_calls(lambda r: step(), 1, reps)
        del want
        best = min(res, key=res.get)
        rows.append(dict(model=name, tokens=t, mode="grad", eager_us=round(res["eager"], 2),
                         compile_us=round(res["compile"], 2), best=best, best_us=round(res[best], 2),
                         eager_peak_extra_bytes=mem["eager"], compile_peak_extra_bytes=mem["compile"],
                         eager_peak_extra_lower_bytes=lower["eager"], compile_peak_extra_lower_bytes=lower["compile"],
                         compile_check_rel_err=check["compile"],
                         param_bytes=sum(nbytes(p) for p in params)))
        mine = ours.get((name, t))
        vs = (f"  ffnc {mine[0]:9.1f} us {mine[1] / 2**20:8.1f} MiB  torch/ffnc {res[best] / mine[0]:5.2f}x"
              if mine else "")
        print(f"{name:30s} T={t:5d}  fwd+bwd eager {res['eager']:9.1f} us {mem['eager'] / 2**20:8.1f} MiB  "
              f"compile {res['compile']:9.1f} us {mem['compile'] / 2**20:8.1f} MiB{vs}", flush=True)
    for p in params:
        p.requires_grad_(False)
        p.grad = None
    return rows


def ffnc_grad(path):
    """(model file name, tokens) -> (fwd+bwd us, peak extra bytes) from `ffnc bench --grad --json`."""
    out = {}
    with open(path) as f:
        data = json.load(f)
    for m in data["models"]:
        name = m["model"].rsplit("/", 1)[-1]
        for r in m["results"]:
            if r.get("check_ok", True):
                out[(name, r["tokens"])] = (r["fwd_bwd_us"], r["peak_extra_bytes"])
    return out


def ffnc_best(path):
    """(model file name, tokens) -> ffnc's best time (plain or graph) from ffnc bench's JSON."""
    best = {}
    with open(path) as f:
        data = json.load(f)
    for m in data["models"]:
        name = m["model"].rsplit("/", 1)[-1]
        for r in m["results"]:
            if r["variant"] == "ffnc" and r.get("check_ok", True):
                key = (name, r["tokens"])
                best[key] = min(best.get(key, math.inf), r["time_us"])
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", default="1,16,128,1024,8192")
    ap.add_argument("--models", default="")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--ffnc", help="ffnc bench --json output of the same device call")
    ap.add_argument("--json", help="write every number here")
    ap.add_argument("--grad", action="store_true", help="training: fwd+bwd, eager and torch.compile, peak memory")
    a = ap.parse_args()
    tokens = [int(t) for t in a.tokens.split(",")]
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True  # torch's default
    gen = torch.Generator(device="cuda").manual_seed(0)
    ms = models(gen)
    wanted = [m for m in ms if not a.models or any(w in m for w in a.models.split(","))]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    if a.grad:
        return main_grad(a, ms, wanted, tokens)
    rows, ours = [], ffnc_best(a.ffnc) if a.ffnc else {}
    for name in wanted:
        fn, d, _, _ = ms[name]
        compiled = torch.compile(fn, dynamic=True)
        rows += bench_model(name, fn, d, tokens, a.reps, compiled, ours)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(torch=torch.__version__, device=torch.cuda.get_device_name(), rows=rows), f, indent=1)
    if a.ffnc:
        best = ours
        print("\n| model | tokens | ffnc | torch best | (which) | torch / ffnc |")
        print("|---|---:|---:|---:|---|---:|")
        for r in rows:
            ours = best.get((r["model"], r["tokens"]))
            if ours is None:
                continue
            print(f"| {r['model'][:-4]} | {r['tokens']} | {ours:.1f} us | {r['best_us']:.1f} us | {r['best']} | "
                  f"{r['best_us'] / ours:.2f}x |")


def main_grad(a, ms, wanted, tokens):
    rows, ours = [], ffnc_grad(a.ffnc) if a.ffnc else {}
    for name in wanted:
        if name not in GRAD_MODELS:
            continue
        fn, d, _, _ = ms[name]
        rows += bench_grad_model(name, fn, d, tokens, a.reps, ours)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(torch=torch.__version__, device=torch.cuda.get_device_name(), mode="grad", rows=rows), f,
                      indent=1)
    if a.ffnc:
        print("\n| model | tokens | ffnc fwd+bwd | extra MiB | torch eager | extra MiB | torch.compile | extra MiB "
              "| torch best / ffnc |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            mine = ours.get((r["model"], r["tokens"]))
            if mine is None:
                continue
            print(f"| {r['model'][:-4]} | {r['tokens']} | {mine[0] / 1000:.2f} ms | {mine[1] / 2**20:.0f} | "
                  f"{r['eager_us'] / 1000:.2f} ms | {r['eager_peak_extra_bytes'] / 2**20:.0f} | "
                  f"{r['compile_us'] / 1000:.2f} ms | {r['compile_peak_extra_bytes'] / 2**20:.0f} | "
                  f"{r['best_us'] / mine[0]:.2f}x |")


if __name__ == "__main__":
    sys.exit(main())
