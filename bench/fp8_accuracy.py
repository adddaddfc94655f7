#!/usr/bin/env python3
"""bench/fp8_accuracy.py: what fp8 e4m3 costs on the Llama-3-8B FFN sublayer, in torch, on the GPU
machine (its python3 has torch); ffnc's own numbers come from `ffnc analyze --device gpu` on the
same kind of input (bench/gpu_fp8_accuracy.sh runs both).

    python3 bench/fp8_accuracy.py [--tokens 64]
        relative L2 against the unquantized f32 result for torch's per-tensor fp8 (one scale per
        tensor, the common recipe) and row-wise fp8 (activations per row, weights per output
        channel: ffnc's contract), on normal activations and on activations with outlier channels
    python3 bench/fp8_accuracy.py --outliers IN.safetensors OUT.safetensors
        copies an ffnc input file, multiplying the first 8 channels of every 2-D bf16 tensor by 30
        (the outlier channels LLM activations have)

Not a dependency of ffnc.
"""
import argparse
import json
import struct
import sys

OUTLIER_CHANNELS, OUTLIER_GAIN = 8, 30.0


def bf16_to_f32(h):
    return struct.unpack("<f", struct.pack("<I", h << 16))[0]


def f32_to_bf16(f):
    u = struct.unpack("<I", struct.pack("<f", f))[0]
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def rewrite_outliers(src, dst):
    with open(src, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = bytearray(f.read())
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] != "BF16" or len(t["shape"]) != 2:
            continue
        rows, cols = t["shape"]
        off = t["data_offsets"][0]
        for r in range(rows):
            for c in range(min(OUTLIER_CHANNELS, cols)):
                i = off + 2 * (r * cols + c)
                h = data[i] | data[i + 1] << 8
                h = f32_to_bf16(bf16_to_f32(h) * OUTLIER_GAIN)
                data[i], data[i + 1] = h & 0xFF, h >> 8
    with open(dst, "wb") as f:
        raw = json.dumps(header).encode()
        f.write(struct.pack("<Q", len(raw)) + raw + data)


def torch_errors(tokens):
    import torch
    import torch.nn.functional as F
    gen = torch.Generator(device="cuda").manual_seed(0)
    d, ff = 4096, 14336
    w = {k: (torch.randn(*s, generator=gen, device="cuda") * s[1] ** -0.5).bfloat16()
         for k, s in (("wg", (ff, d)), ("wu", (ff, d)), ("wd", (d, ff)))}
    g = (1 + 0.1 * torch.randn(d, generator=gen, device="cuda")).bfloat16()

    def rms(x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5) * g.float()).bfloat16()

    def quant(a, rowwise):
        amax = a.float().abs().amax(dim=-1, keepdim=True) if rowwise else a.float().abs().amax().reshape(1, 1)
        s = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
        return (a.float() / s).clamp(-448, 448).to(torch.float8_e4m3fn), s

    def mm(a, k, mode):
        if mode == "f32":
            return a.float() @ w[k].float().t()
        qa, sa = quant(a, mode == "rowwise")
        qb, sb = quant(w[k], mode == "rowwise")
        sb = sb.t() if mode == "rowwise" else sb
        return torch._scaled_mm(qa, qb.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16).float()

    def layer(x, mode):
        h = rms(x) if mode != "f32" else rms(x).float()
        a = F.silu(mm(h, "wg", mode)) * mm(h, "wu", mode)
        return x.float() + mm(a if mode == "f32" else a.bfloat16(), "wd", mode)

    for label, gain in (("normal activations", 1.0), ("outlier channels", OUTLIER_GAIN)):
        x = torch.randn(tokens, d, generator=gen, device="cuda")
        x[:, :OUTLIER_CHANNELS] *= gain
        x = x.bfloat16()
        ref = layer(x, "f32")
        for mode in ("per-tensor", "rowwise"):
            y = layer(x, mode)
            err = (torch.linalg.vector_norm(y - ref) / torch.linalg.vector_norm(ref)).item()
            print(f"torch {torch.__version__} fp8 e4m3 {mode:10s} {label:20s} T={tokens}: rel_l2 {err:.4f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--outliers", nargs=2, metavar=("IN", "OUT"))
    a = ap.parse_args()
    if a.outliers:
        rewrite_outliers(*a.outliers)
    else:
        torch_errors(a.tokens)


if __name__ == "__main__":
    sys.exit(main())
