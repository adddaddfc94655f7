"""The Python package without a GPU and without torch: loading, diagnostics as exceptions,
compiling, AOT round trip, sharded checkpoint reading, and the clean no-device error.
Run by ctest (python_api) with FFNC_LIBRARY and FFNC_SOURCE_DIR set."""
import ctypes
import json
import os
import struct
import tempfile
import unittest

import ffnc
from ffnc import _dlpack
from ffnc._safetensors import SafetensorsFile, checkpoint_files

SOURCE_DIR = os.environ.get("FFNC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
TINY = os.path.join(SOURCE_DIR, "examples", "llama3_tiny.ffn")
BAD = "model m\ndim D = 4\ninput x : [D] f32\noutput y\n"


def write_safetensors(path, tensors):
    """tensors: name -> (dtype, shape, bytes)."""
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


_programs = {}


def tiny(arch=None):
    """examples/llama3_tiny.ffn compiled once per arch (NVRTC is the slow part)."""
    if arch not in _programs:
        _programs[arch] = ffnc.compile_file(TINY, arch=arch)
    return _programs[arch]


class Api(unittest.TestCase):
    def test_version_has_commit(self):
        self.assertEqual(ffnc.version(), "0.1.0")
        self.assertRegex(ffnc.build_info(), r"^0\.1\.0 \(git ([0-9a-f]+|unknown)\)$")

    def test_compile_error_carries_diagnostics(self):
        with self.assertRaises(ffnc.CompileError) as cm:
            ffnc.compile(BAD, "bad.ffn")
        self.assertEqual(cm.exception.status, "source")
        self.assertIn("bad.ffn:4:8: error:", cm.exception.diagnostics)
        self.assertIn("`y`", str(cm.exception))

    def test_missing_file_is_an_error(self):
        with self.assertRaises(ffnc.FFNCError) as cm:
            ffnc.compile_file("/nonexistent/model.ffn")
        self.assertIn("/nonexistent/model.ffn", str(cm.exception))

    def test_compile_file_and_interface(self):
        prog = tiny("sm_80")
        self.assertEqual(prog.arch, "sm_80")
        self.assertGreater(prog.num_kernels, 0)
        self.assertEqual([i["name"] for i in prog.inputs], ["x"])
        self.assertEqual(prog.inputs[0]["dtype"], "bfloat16")
        self.assertIsNone(prog.inputs[0]["shape"][0])  # T is bound at run time
        self.assertEqual(prog.inputs[0]["dims"][0], "T")
        self.assertIn("model.layers.0.mlp.gate_proj.weight", prog.weights)

    def test_backward_graph_interface(self):
        prog = ffnc.compile_file(TINY, arch="sm_90", grad=True)
        self.assertEqual([i["name"] for i in prog.inputs], ["x", "grad.x"])
        names = [o["name"] for o in prog.outputs]
        self.assertEqual(names[0], "grad.x")
        self.assertIn("grad.model.layers.3.mlp.down_proj.weight", names)
        self.assertEqual(len(names), 1 + 4 * 4)  # x and four weights in each of four layers
        self.assertTrue(all(o["dtype"] == "float32" for o in prog.outputs))

    def test_keep_policy_interface(self):
        fwd = ffnc.compile_file(TINY, arch="sm_90", keep=True)
        bwd = ffnc.compile_file(TINY, arch="sm_90", grad=True, keep=True)
        outs = [o["name"] for o in fwd.outputs]
        self.assertEqual(outs[0], "x")
        self.assertIn("saved.model.layers.0.mlp.gate_proj", outs)
        saved = [n for n in outs if n.startswith("saved.")]
        self.assertEqual(len(saved), len(outs) - 1)
        # the backward graph reads the same saved tensors, in the same order, after grad.x
        self.assertEqual([i["name"] for i in bwd.inputs], ["x", "grad.x"] + saved)
        # the keep policy reads the weights as bound (no load-time copies: an optimizer step
        # needs no prepare); the recompute forward folds and merges them
        self.assertEqual(fwd.num_load_steps, 0)
        self.assertEqual(bwd.num_load_steps, 0)
        self.assertGreater(tiny("sm_90").num_load_steps, 0)

    def test_bad_option_is_an_error(self):
        with self.assertRaises(ffnc.FFNCError):
            ffnc.compile_file(TINY, precision={"nonsense": "f32"})

    def test_aot_round_trip(self):
        prog = tiny("sm_90")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tiny.ffnx")
            prog.save(path)
            back = ffnc.load(path)
        self.assertEqual(back.arch, "sm_90")
        self.assertEqual(back.num_kernels, prog.num_kernels)
        self.assertEqual(back.inputs, prog.inputs)
        self.assertEqual(back.outputs, prog.outputs)
        self.assertEqual(back.weights, prog.weights)

    def test_load_of_garbage_is_an_error(self):
        with tempfile.NamedTemporaryFile(suffix=".ffnx") as f:
            f.write(b"not a program")
            f.flush()
            with self.assertRaises(ffnc.FFNCError) as cm:
                ffnc.load(f.name)
        self.assertEqual(cm.exception.status, "io")

    @unittest.skipIf(ffnc.device_count() > 0, "this machine has a CUDA device")
    def test_no_device_is_a_clean_error(self):
        prog = tiny("sm_90")
        with self.assertRaises(ffnc.NoDeviceError) as cm:
            prog.to("cuda:0")
        self.assertEqual(cm.exception.status, "no_device")
        self.assertIn("no CUDA", str(cm.exception))

    def test_share_workspace_refuses_null_models(self):
        # refused before anything touches a device, so no GPU is needed
        lib = ffnc._lib_handle
        self.assertEqual(lib.ffn_model_share_workspace(None, None), 1)  # invalid_argument
        self.assertIn("ffn_model_share_workspace", lib.ffn_last_error().decode())

    def test_device_names(self):
        self.assertEqual(ffnc._parse_device("cuda:1"), 1)
        self.assertEqual(ffnc._parse_device("cuda"), 0)
        with self.assertRaises(ValueError):
            ffnc._parse_device("cpu")


class Checkpoints(unittest.TestCase):
    def test_sharded_index_lists_every_shard_once(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
                json.dump({"weight_map": {"a": "model-00002-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                                          "c": "model-00002-of-00002.safetensors"}}, f)
            self.assertEqual(checkpoint_files(d), [os.path.join(d, "model-00001-of-00002.safetensors"),
                                                   os.path.join(d, "model-00002-of-00002.safetensors")])

    def test_shard_tensors_point_at_their_bytes(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "s.safetensors")
            write_safetensors(path, {"w": ("F32", (2,), struct.pack("<2f", 1.5, -2.0)),
                                     "g": ("BF16", (1, 1), b"\x80\x3f")})
            shard = SafetensorsFile(path)
            found = {name: (dtype, shape, offset) for name, dtype, shape, offset, _ in shard.tensors()}
            dtype, shape, offset = found["w"]
            self.assertEqual((dtype.code, dtype.bits, shape), (_dlpack.KDL_FLOAT, 32, (2,)))
            view = _dlpack.host_tensor(shard.address + offset, dtype, shape)
            values = ctypes.cast(view.data, ctypes.POINTER(ctypes.c_float))
            self.assertEqual((values[0], values[1]), (1.5, -2.0))
            self.assertEqual(found["g"][0].code, _dlpack.KDL_BFLOAT)
            del view, values
            shard.close()

    def test_malformed_shard_is_rejected(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bad.safetensors")
            with open(path, "wb") as f:
                f.write(struct.pack("<Q", 1 << 40) + b"{}")
            with self.assertRaises(ValueError):
                SafetensorsFile(path)


if __name__ == "__main__":
    unittest.main()
