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
import stat
import struct
from typing import IO, Any, NamedTuple

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
# config.json, hf_quant_config.json, the index, --health: kilobytes to a few MiB when real.
MAX_JSON_BYTES = 64 * 1024 * 1024


class CheckpointError(ValueError):
    """The model directory cannot be read as a checkpoint (invalid input, not a misfit)."""


class Tensor(NamedTuple):
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    file: str


def open_regular(path: str) -> IO[bytes]:
    """Open a regular file for reading; CheckpointError for anything else.

    Opened non-blocking first, so a FIFO (which would block open() until a writer comes)
    or a device such as /dev/zero (which never ends) is refused instead of hanging.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise CheckpointError(f"{path}: cannot read: {error.strerror or error}") from error
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode)
                    else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                    else "not a regular file")
            raise CheckpointError(f"{path}: is {kind}, not a file: put the real file there")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def parse_json(raw: bytes, path: str, header: bool = False) -> Any:
    """JSON from bytes; CheckpointError (never RecursionError) for anything unparseable."""
    what, fix = ("corrupt safetensors header", ": download it again") if header \
        else ("unreadable JSON", "")
    try:
        return json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise CheckpointError(f"{path}: {what} (nested too deeply to be real){fix}") from None
    except (UnicodeDecodeError, ValueError) as error:
        reason = " ".join(str(error).split())
        raise CheckpointError(f"{path}: {what} (not JSON: {reason}){fix}") from error


def read_json(path: str) -> Any:
    """A whole JSON file (at most MAX_JSON_BYTES), read with open_regular and parse_json."""
    with open_regular(path) as handle:
        try:
            raw = handle.read(MAX_JSON_BYTES + 1)
        except OSError as error:
            raise CheckpointError(f"{path}: cannot read: {error.strerror or error}") from error
    if len(raw) > MAX_JSON_BYTES:
        raise CheckpointError(f"{path}: larger than {MAX_JSON_BYTES // 2**20} MiB: not a real "
                              "configuration file")
    return parse_json(raw, path)


def numel(shape: tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def read_header(path: str) -> dict[str, Tensor]:
    """Parse and validate one file's header; raise CheckpointError naming the file and fault."""
    name = os.path.basename(path)
    try:
        with open_regular(path) as handle:
            size = os.fstat(handle.fileno()).st_size
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
    header = parse_json(raw, path, header=True)
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: corrupt safetensors header (not a JSON object)")
    data_size = size - 8 - header_len
    tensors: dict[str, Tensor] = {}
    for tensor_name, entry in header.items():
        if tensor_name == "__metadata__":
            continue
        tensors[tensor_name] = _tensor(path, tensor_name, entry, data_size, name)
    return tensors


def _natural(value: Any) -> bool:
    """A JSON integer >= 0 (not a bool, not a float such as 1e400 or 2.5)."""
    return type(value) is int and value >= 0


def _tensor(path: str, tensor_name: str, entry: Any, data_size: int, file: str) -> Tensor:
    try:
        dtype = str(entry["dtype"])
        shape, offsets = entry["shape"], entry["data_offsets"]
    except (KeyError, TypeError) as error:
        raise CheckpointError(
            f"{path}: corrupt safetensors header: tensor {tensor_name!r} lacks dtype/shape/"
            "data_offsets"
        ) from error
    if not isinstance(shape, list) or not all(_natural(dim) for dim in shape):
        raise CheckpointError(
            f"{path}: corrupt safetensors header: tensor {tensor_name!r} has shape {shape!r} "
            "(dimensions must be integers >= 0): download it again"
        )
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(map(_natural, offsets)) \
            or offsets[0] > offsets[1]:
        raise CheckpointError(
            f"{path}: corrupt safetensors header: tensor {tensor_name!r} has data_offsets "
            f"{offsets!r} (needs [begin, end], integers, begin <= end): download it again"
        )
    shape, (begin, end) = tuple(shape), offsets
    bits = DTYPE_BITS.get(dtype)
    if bits is None:
        raise CheckpointError(f"{path}: tensor {tensor_name!r} has unknown dtype {dtype!r}")
    nbytes = (numel(shape) * bits + 7) // 8
    if end - begin != nbytes:
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
    if not os.path.lexists(index_path):
        return None
    index = read_json(index_path)
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(
            f"{index_path}: unreadable index (needs a JSON object whose weight_map maps tensor "
            "names to shard files): download it again"
        )
    for tensor_name, shard in weight_map.items():
        if not isinstance(shard, str) or not shard or os.path.isabs(shard) \
                or ".." in shard.replace("\\", "/").split("/"):
            raise CheckpointError(
                f"{index_path}: tensor {tensor_name!r} is mapped to {shard!r}, not a shard file "
                "inside the model directory: download the index again"
            )
    return dict(weight_map)


def weight_files(model_dir: str, weight_map: dict[str, str] | None) -> list[str]:
    """The shard paths: from the index when there is one (each must exist), else *.safetensors."""
    if weight_map is not None:
        shard_names = sorted(set(weight_map.values()))
        paths = [os.path.join(model_dir, shard) for shard in shard_names]
        missing = [shard for shard in shard_names
                   if not os.path.lexists(os.path.join(model_dir, shard))]
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
    if not any(tensor.nbytes for tensor in tensors.values()):
        raise CheckpointError(
            f"{model_dir}: the safetensors files hold no weights ({len(tensors)} tensor(s), "
            "0 bytes): the download is incomplete or this is not a model; fetch it again"
        )
    for tensor_name, shard in (weight_map or {}).items():
        found = tensors.get(tensor_name)
        if found is None or found.file != shard:
            raise CheckpointError(
                f"{model_dir}: {INDEX_NAME} puts tensor {tensor_name!r} in {shard} but that "
                "shard's header lacks it: the index and shards are from different downloads"
            )
    return tensors
