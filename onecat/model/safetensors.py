"""Read safetensors headers (never tensor data) for a whole checkpoint directory.

Stdlib only: this file also ships to nodes as ``ansible.module_utils.onecat.model.safetensors``.

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON
({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}), then the
data region. Reading the first 8 + N bytes of each shard is enough to know every
tensor's size, so a 70B directory plans in milliseconds.
"""

from __future__ import annotations

import glob
import json
import os
import struct
from typing import Any, NamedTuple

INDEX_NAME = "model.safetensors.index.json"

# Bits per element of each safetensors dtype ("F4" is the packed FP4 dtype of newer writers).
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32,
    "I64": 64, "U64": 64, "F64": 64,
    "F4": 4,
}

# A real header is at most a few MiB (tens of thousands of tensors); anything larger is garbage.
MAX_HEADER_BYTES = 100 * 1024 * 1024


class CheckpointError(ValueError):
    """The model directory cannot be read as a checkpoint (invalid input, not a misfit)."""


class Tensor(NamedTuple):
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    file: str


def numel(shape: tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def read_header(path: str) -> dict[str, Tensor]:
    """Parse and validate one file's header; raise CheckpointError naming the file and fault."""
    name = os.path.basename(path)
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise CheckpointError(
                    f"{path}: truncated safetensors file ({size} bytes, no header length): "
                    "download it again"
                )
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > MAX_HEADER_BYTES or 8 + header_len > size:
                raise CheckpointError(
                    f"{path}: corrupt or truncated safetensors header (says {header_len} bytes, "
                    f"file has {size}): download it again"
                )
            raw = handle.read(header_len)
    except OSError as error:
        raise CheckpointError(f"{path}: cannot read: {error.strerror or error}") from error
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise CheckpointError(
            f"{path}: corrupt safetensors header (not JSON: {error}): download it again"
        ) from error
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: corrupt safetensors header (not a JSON object)")
    data_size = size - 8 - header_len
    tensors: dict[str, Tensor] = {}
    for tensor_name, entry in header.items():
        if tensor_name == "__metadata__":
            continue
        tensors[tensor_name] = _tensor(path, tensor_name, entry, data_size, name)
    return tensors


def _tensor(path: str, tensor_name: str, entry: Any, data_size: int, file: str) -> Tensor:
    try:
        dtype = str(entry["dtype"])
        shape = tuple(int(dim) for dim in entry["shape"])
        begin, end = (int(offset) for offset in entry["data_offsets"])
    except (KeyError, TypeError, ValueError) as error:
        raise CheckpointError(
            f"{path}: corrupt safetensors header: tensor {tensor_name!r} lacks dtype/shape/"
            "data_offsets"
        ) from error
    bits = DTYPE_BITS.get(dtype)
    if bits is None:
        raise CheckpointError(f"{path}: tensor {tensor_name!r} has unknown dtype {dtype!r}")
    nbytes = (numel(shape) * bits + 7) // 8
    if end - begin != nbytes or begin < 0:
        raise CheckpointError(
            f"{path}: corrupt safetensors header: tensor {tensor_name!r} {dtype}{list(shape)} "
            f"needs {nbytes} bytes but its data_offsets span {end - begin}"
        )
    if end > data_size:
        raise CheckpointError(
            f"{path}: truncated safetensors file: tensor {tensor_name!r} ends at byte {end} of "
            f"the data region but the file holds only {data_size}: download it again"
        )
    return Tensor(dtype, shape, nbytes, file)


def read_index(model_dir: str) -> dict[str, str] | None:
    """The index's weight_map (tensor name -> shard file), or None without an index."""
    index_path = os.path.join(model_dir, INDEX_NAME)
    if not os.path.exists(index_path):
        return None
    try:
        with open(index_path, encoding="utf-8") as handle:
            weight_map = json.load(handle)["weight_map"]
        if not isinstance(weight_map, dict):
            raise TypeError("weight_map is not an object")
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CheckpointError(
            f"{index_path}: unreadable index (needs a JSON object with weight_map): {error}"
        ) from error
    return {str(name): str(shard) for name, shard in weight_map.items()}


def weight_files(model_dir: str, weight_map: dict[str, str] | None) -> list[str]:
    """The shard paths: from the index when there is one (each must exist), else *.safetensors."""
    if weight_map is not None:
        shard_names = sorted(set(weight_map.values()))
        paths = [os.path.join(model_dir, shard) for shard in shard_names]
        missing = [shard for shard in shard_names
                   if not os.path.isfile(os.path.join(model_dir, shard))]
        if missing:
            raise CheckpointError(
                f"{model_dir}: shard {missing[0]} is named in {INDEX_NAME} but missing "
                f"({len(missing)} of {len(paths)} missing): finish the download"
            )
        return paths
    paths = sorted(glob.glob(os.path.join(glob.escape(model_dir), "*.safetensors")))
    if not paths:
        raise CheckpointError(
            f"{model_dir}: no *.safetensors files (only safetensors checkpoints can be planned)"
        )
    return paths


def read_checkpoint(model_dir: str) -> dict[str, Tensor]:
    """Every tensor of the checkpoint, read from headers only, checked against the index."""
    weight_map = read_index(model_dir)
    tensors: dict[str, Tensor] = {}
    for path in weight_files(model_dir, weight_map):
        for tensor_name, tensor in read_header(path).items():
            if tensor_name in tensors:
                raise CheckpointError(
                    f"{model_dir}: tensor {tensor_name!r} appears in both "
                    f"{tensors[tensor_name].file} and {tensor.file}"
                )
            tensors[tensor_name] = tensor
    for tensor_name, shard in (weight_map or {}).items():
        found = tensors.get(tensor_name)
        if found is None or found.file != shard:
            raise CheckpointError(
                f"{model_dir}: {INDEX_NAME} puts tensor {tensor_name!r} in {shard} but that "
                "shard's header lacks it: the index and shards are from different downloads"
            )
    return tensors
