"""GPU: the Python package against torch's own computation of the same FFN stack
(examples/llama3_tiny.ffn: Llama MLP sublayers, bf16), with weights from torch tensors and from
a sharded checkpoint, eagerly and inside torch.cuda.graph capture. ctest: gpu_python_torch;
exits 77 where there is no torch or no CUDA device."""
import ctypes
import json
import os
import sys
import tempfile
import unittest

try:
    import torch
except ImportError:
    print("SKIP: torch is not installed")
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIP: no CUDA device")
    sys.exit(77)
import ffnc

SOURCE_DIR = os.environ.get("FFNC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
TINY = os.path.join(SOURCE_DIR, "examples", "llama3_tiny.ffn")
LAYERS, D, F = 4, 256, 704


def make_weights(seed):
    g = torch.Generator().manual_seed(seed)
    w = {}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        w[p + "post_attention_layernorm.weight"] = 1 + 0.1 * torch.randn(D, generator=g)
        w[p + "mlp.gate_proj.weight"] = torch.randn(F, D, generator=g) / D ** 0.5
        w[p + "mlp.up_proj.weight"] = torch.randn(F, D, generator=g) / D ** 0.5
        w[p + "mlp.down_proj.weight"] = torch.randn(D, F, generator=g) / F ** 0.5
    return {k: v.to(torch.bfloat16) for k, v in w.items()}


def reference(x, w):
    """Each sublayer in f32 from bf16 values, its output rounded to bf16 as ffnc stores it."""
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        xf = x.float()
        h = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5) * w[p + "post_attention_layernorm.weight"].float()
        gate = h @ w[p + "mlp.gate_proj.weight"].float().T
        up = h @ w[p + "mlp.up_proj.weight"].float().T
        x = (xf + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].float().T).to(torch.bfloat16)
    return x


def write_shards(directory, weights):
    """A Hugging Face style checkpoint: two shards and model.safetensors.index.json."""
    names = sorted(weights)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    weight_map = {}
    for shard, shard_names in shards.items():
        header, blobs, offset = {}, [], 0
        for name in shard_names:
            t = weights[name].contiguous().cpu()
            data = ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())
            header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
            blobs.append(data)
            offset += len(data)
            weight_map[name] = shard
        text = json.dumps(header).encode()
        with open(os.path.join(directory, shard), "wb") as f:
            f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


class AgainstTorch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.weights = make_weights(1)
        cls.program = ffnc.compile_file(TINY)
        cls.model = cls.program.to("cuda").load_state_dict({k: v.cuda() for k, v in cls.weights.items()})

    def assertClose(self, got, x):
        want = reference(x, {k: v.cuda() for k, v in self.weights.items()})
        self.assertEqual(got.shape, want.shape)
        self.assertEqual(got.dtype, torch.bfloat16)
        err = (got.float() - want.float()).abs().max().item()
        scale = want.float().abs().max().item()
        self.assertLess(err, 2e-2 * scale, f"max error {err} (scale {scale})")

    def test_eager_on_current_stream(self):
        for tokens in (1, 7, 64):
            x = torch.randn(tokens, D, device="cuda").to(torch.bfloat16)
            self.assertClose(self.model(x), x)

    def test_on_a_side_stream(self):
        x = torch.randn(5, D, device="cuda").to(torch.bfloat16)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            y = self.model(x)
        torch.cuda.current_stream().wait_stream(s)
        self.assertClose(y, x)

    def test_caller_provided_output(self):
        x = torch.randn(3, D, device="cuda").to(torch.bfloat16)
        y = torch.empty_like(x)
        self.assertIs(self.model(x, out=y), y)
        self.assertClose(y, x)

    def test_sharded_checkpoint(self):
        with tempfile.TemporaryDirectory() as d:
            write_shards(d, self.weights)
            model = self.program.to("cuda:0").load_safetensors(os.path.join(d, "model.safetensors.index.json"))
        x = torch.randn(9, D, device="cuda").to(torch.bfloat16)
        self.assertClose(model(x), x)

    def test_aot_program(self):
        with tempfile.TemporaryDirectory() as d:
            self.program.save(os.path.join(d, "tiny.ffnx"))
            model = ffnc.load(os.path.join(d, "tiny.ffnx")).to("cuda").load_state_dict(self.weights)  # host weights
        x = torch.randn(4, D, device="cuda").to(torch.bfloat16)
        self.assertClose(model(x), x)

    def test_cuda_graph_capture(self):
        static_x = torch.randn(16, D, device="cuda").to(torch.bfloat16)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm-up on the capture stream: the workspace exists before capture
            self.model(static_x)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=s):
            static_y = self.model(static_x)
        for _ in range(2):
            static_x.copy_(torch.randn(16, D, device="cuda").to(torch.bfloat16))
            graph.replay()
            torch.cuda.synchronize()
            self.assertClose(static_y, static_x)

    def test_wrong_device_is_an_error(self):
        with self.assertRaisesRegex(ValueError, "is on cpu"):
            self.model(torch.zeros(2, D, dtype=torch.bfloat16))
        if torch.cuda.device_count() > 1:
            with self.assertRaisesRegex(ValueError, "cuda:1"):
                self.model(torch.zeros(2, D, dtype=torch.bfloat16, device="cuda:1"))

    def test_wrong_shape_is_an_error(self):
        with self.assertRaises(ffnc.FFNCError):
            self.model(torch.zeros(2, D + 1, dtype=torch.bfloat16, device="cuda"))


if __name__ == "__main__":
    unittest.main()
