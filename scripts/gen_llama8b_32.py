# scripts/gen_llama8b_32.py DIR: random weights for examples/llama3_8b.ffn (32 layers, bf16) and
# 64 calibration rows, written with torch on the GPU machine (ffnc gen takes minutes for 11 GB).
# Used by scripts/gpu_session.sh analyze32 only; ffnc itself does not need Python.
import sys, torch
from safetensors.torch import save_file
out = sys.argv[1]
g = torch.Generator(device="cuda").manual_seed(9)
D, F, L = 4096, 14336, 32
w = {}
for i in range(L):
    p = f"model.layers.{i}."
    w[p + "post_attention_layernorm.weight"] = (1 + 0.1 * torch.randn(D, generator=g, device="cuda")).bfloat16().cpu()
    for name, shape in (("mlp.gate_proj.weight", (F, D)), ("mlp.up_proj.weight", (F, D)), ("mlp.down_proj.weight", (D, F))):
        w[p + name] = (torch.randn(shape, generator=g, device="cuda") / shape[1] ** 0.5).bfloat16().cpu()
save_file(w, f"{out}/w32.safetensors")
save_file({"x": torch.randn(64, D, generator=g, device="cuda").bfloat16().cpu()}, f"{out}/c32.safetensors")
