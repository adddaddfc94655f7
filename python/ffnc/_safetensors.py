"""Reading safetensors files and sharded Hugging Face checkpoints (model.safetensors.index.json)
without the safetensors package: the header is JSON, the data follows it."""
import ctypes
import json
import mmap
import os
import struct

from ._dlpack import DLDataType, KDL_BFLOAT, KDL_FLOAT, KDL_INT, KDL_UINT

# fp8 types travel as uint8 (the library knows the real type from the program)
DTYPES = {
    "F32": DLDataType(KDL_FLOAT, 32, 1), "F16": DLDataType(KDL_FLOAT, 16, 1),
    "BF16": DLDataType(KDL_BFLOAT, 16, 1), "F64": DLDataType(KDL_FLOAT, 64, 1),
    "I8": DLDataType(KDL_INT, 8, 1), "U8": DLDataType(KDL_UINT, 8, 1),
    "F8_E4M3": DLDataType(KDL_UINT, 8, 1), "F8_E5M2": DLDataType(KDL_UINT, 8, 1),
}


class SafetensorsFile:
    """One file, mapped read-only: tensors() yields (name, dtype, shape, offset, nbytes)."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            # copy-on-write: ctypes takes the address of writable buffers only; nothing writes
            self.map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        if len(self.map) < 8:
            raise ValueError(f"{path}: too short for a safetensors file")
        (header_len,) = struct.unpack("<Q", self.map[:8])
        if header_len > len(self.map) - 8:
            raise ValueError(f"{path}: header length {header_len} past the end of the file")
        self.header = json.loads(bytes(self.map[8:8 + header_len]))
        self.data_start = 8 + header_len
        self._anchor = ctypes.c_char.from_buffer(self.map)
        self.address = ctypes.addressof(self._anchor)  # of byte 0 of the file

    def tensors(self):
        for name, entry in self.header.items():
            if name == "__metadata__":
                continue
            begin, end = entry["data_offsets"]
            if entry["dtype"] not in DTYPES:
                raise ValueError(f"{self.path}: tensor '{name}' has unsupported dtype {entry['dtype']}")
            if not 0 <= begin <= end <= len(self.map) - self.data_start:
                raise ValueError(f"{self.path}: tensor '{name}' lies outside the file")
            yield name, DTYPES[entry["dtype"]], tuple(entry["shape"]), self.data_start + begin, end - begin

    def close(self):
        del self._anchor  # the mapping cannot close while ctypes holds it
        self.map.close()


def checkpoint_files(path):
    """The safetensors files of a checkpoint: a file, an index.json, or a directory holding
    model.safetensors or model.safetensors.index.json."""
    if os.path.isdir(path):
        index = os.path.join(path, "model.safetensors.index.json")
        path = index if os.path.exists(index) else os.path.join(path, "model.safetensors")
    if not path.endswith(".json"):
        return [path]
    with open(path) as f:
        weight_map = json.load(f)["weight_map"]
    base = os.path.dirname(path)
    return [os.path.join(base, shard) for shard in sorted(set(weight_map.values()))]
