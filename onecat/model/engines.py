"""Can this engine load this checkpoint format on this GPU? Rules from the field notes.

Stdlib only: this file also ships to nodes as ``ansible.module_utils.onecat.model.engines``.
The rules are tables so a new engine release or a confirmed fact is a one-line change.
"""

from __future__ import annotations

import re
from typing import Any

ENGINES = ("1cat-vllm", "vllm")
DEFAULT_ENGINE = "1cat-vllm"
DEFAULT_ENGINE_VERSION = "1.5.0"
DEFAULT_COMPUTE_CAPABILITY = "7.0"

# Upstream vLLM's get_min_capability() per format (70 = Volta, 75 = Turing, 80 = Ampere).
UPSTREAM_MIN_CAPABILITY: dict[str, int] = {
    "nvfp4-compressed-tensors": 75,
    "nvfp4-modelopt": 75,
    "awq": 75,
    "fp8": 80,
    "gptq": 60,
    "fp16": 70,
    "bf16": 70,
}
# The name upstream puts in its refusal for formats checked by the generic config check.
UPSTREAM_METHOD: dict[str, str] = {"nvfp4-modelopt": "modelopt_fp4", "awq": "awq", "fp8": "fp8",
                                   "gptq": "gptq"}

# 1Cat-vLLM: the first release that loads each NVFP4 flavour on SM70.
ONECAT_MIN_VERSION: dict[str, tuple[int, int, int]] = {
    "nvfp4-compressed-tensors": (1, 3, 0),
    "nvfp4-modelopt": (1, 5, 0),
}
# Formats whose support in 1Cat-vLLM nobody here has verified (warn, do not refuse).
ONECAT_UNCONFIRMED = ("awq", "gptq")


def parse_version(text: str) -> tuple[int, int, int]:
    """'1.5.0', 'v1.3', '1.5.0rc1' -> (1, 5, 0); ValueError for anything else."""
    match = re.match(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", str(text).strip())
    if not match:
        raise ValueError(f"engine version {text!r} is not a version like 1.5.0")
    return (int(match.group(1)), int(match.group(2) or 0), int(match.group(3) or 0))


def parse_capability(text: Any) -> int:
    """'7.0' -> 70, '8.6' -> 86, '10.0' -> 100, '75' -> 75; ValueError for anything else."""
    value = str(text).strip()
    match = re.match(r"^(\d+)\.(\d)$", value)
    if match:
        return int(match.group(1)) * 10 + int(match.group(2))
    if re.match(r"^\d{2,3}$", value):
        return int(value)
    raise ValueError(f"compute capability {text!r} is not like 7.0")


def _cc_text(capability: int) -> str:
    return f"{capability // 10}.{capability % 10}"


def upstream_refusal(quant_format: str, minimum: int, current: int) -> str:
    """The exact error upstream vLLM raises for this format on a too-old GPU."""
    if quant_format == "nvfp4-compressed-tensors":
        return ("Quantization scheme is not supported for the current GPU. "
                f"Min capability: {minimum}. Current capability: {current}.")
    return (f"The quantization method {UPSTREAM_METHOD[quant_format]} is not supported for the "
            f"current GPU. Minimum capability: {minimum}. Current capability: {current}.")


def check_engine(engine: str, version: str, quant_format: str,
                 capability: int) -> tuple[dict[str, Any], list[str]]:
    """({name, version, compatible, reason}, warnings) for one engine, format and GPU."""
    warnings: list[str] = []
    result: dict[str, Any] = {"name": engine, "version": version or None, "compatible": True,
                              "reason": ""}
    if quant_format == "unknown":
        result.update(compatible=False, reason=(
            "the checkpoint's format is unknown, so no engine can be vouched for: use an "
            "NVFP4 (compressed-tensors or ModelOpt), AWQ, GPTQ or FP16 checkpoint"))
        return result, warnings
    if engine == "vllm":
        minimum = UPSTREAM_MIN_CAPABILITY[quant_format]
        if capability < minimum:
            reason = (f"upstream vLLM needs compute capability >= {_cc_text(minimum)} for "
                      f"{quant_format}; this GPU is {_cc_text(capability)} and upstream fails "
                      f"with: \"{upstream_refusal(quant_format, minimum, capability)}\"")
            if quant_format.startswith("nvfp4"):
                needed = ".".join(str(p) for p in ONECAT_MIN_VERSION[quant_format])
                reason += (f". Use --engine 1cat-vllm (>= {needed} for this format), which runs "
                           "NVFP4 on SM70 as W4A16 (FP4 weights expanded to FP16 in its GEMMs)")
            result.update(compatible=False, reason=reason)
            return result, warnings
        result["reason"] = f"upstream vLLM supports {quant_format} on compute capability " \
                           f"{_cc_text(capability)}"
        return result, warnings
    # 1cat-vllm
    if capability != 70:
        warnings.append(f"1cat-vllm targets SM70 (V100); this GPU is {_cc_text(capability)}, "
                        "where upstream vllm may be the better engine")
    needed_version = ONECAT_MIN_VERSION.get(quant_format)
    have = parse_version(version)
    if needed_version is not None and have < needed_version:
        needed = ".".join(str(p) for p in needed_version)
        result.update(compatible=False, reason=(
            f"1cat-vllm {version} cannot load {quant_format} checkpoints: that needs >= {needed}"
            f" (compressed-tensors NVFP4 from 1.3.0, ModelOpt NVFP4 on SM70 from 1.5.0): "
            f"--engine-version {needed} or newer"))
        return result, warnings
    if quant_format == "fp8":
        result.update(compatible=False, reason=(
            "V100 has no FP8; upstream needs compute capability >= 8.0 for fp8 checkpoints and "
            "1cat-vllm is not known to lift that (UNCONFIRMED): use an NVFP4 or FP16 checkpoint"))
        return result, warnings
    if quant_format in ONECAT_UNCONFIRMED:
        warnings.append(f"1cat-vllm support for {quant_format} on SM70 is UNCONFIRMED: "
                        "smoke-test before relying on it")
    if quant_format.startswith("nvfp4"):
        result["reason"] = (f"1cat-vllm {version} runs {quant_format} on SM70 as W4A16 "
                            "(no --quantization flag: the format is auto-detected)")
    else:
        result["reason"] = f"1cat-vllm {version} serves {quant_format} on SM70"
    return result, warnings


# 1Cat-vLLM's SM70 TurboMind path (VLLM_SM70_NVFP4_TURBOMIND, default on since 1.2.1:
# vllm/envs.py:1736-1737 at v1.2.1, 1832-1833 at ae13773a) rebuilds the FP8 E4M3 block scales of
# every NVFP4 linear as FP16 (sm70_turbomind.py:256-287, prepare_nvfp4_linear) and frees the FP8
# originals (compressed_tensors_w4a16_nvfp4.py:96-114, compressed_tensors_w4a4_nvfp4.py:150-164,
# modelopt.py:1025-1048). Packed FP4 stays 1/2 byte: 0.5 + 2/16 = 0.625 bytes per parameter on
# the GPU against 0.5 + 1/16 = 0.5625 on disk.
TURBOMIND_DEFAULT_FROM = (1, 2, 1)
NVFP4_FORMATS = ("nvfp4-compressed-tensors", "nvfp4-modelopt")


def resident_rule(engine: str, version: str, quant_format: str) -> dict[str, Any]:
    """How the engine holds the checkpoint's tensors on the GPU: {block_scale_factor, text}.

    block_scale_factor multiplies the bytes of the FP8 block scales (``weight_scale``) of
    NVFP4 linears; everything else is resident as stored (16-bit tensors as float16).
    """
    if quant_format not in NVFP4_FORMATS:
        return {"block_scale_factor": 1, "text": "as stored (float16 for 16-bit tensors)"}
    if engine == "1cat-vllm" and version and parse_version(version) >= TURBOMIND_DEFAULT_FROM:
        return {"block_scale_factor": 2, "text": (
            "1cat-vllm SM70 TurboMind (VLLM_SM70_NVFP4_TURBOMIND=1, default since 1.2.1): FP8 "
            "block scales rebuilt as FP16, FP8 originals freed: 0.625 bytes/parameter vs 0.5625 "
            "on disk")}
    if engine == "1cat-vllm":
        return {"block_scale_factor": 1, "text": (
            "1cat-vllm before 1.2.1 (Marlin path): assumed as stored (UNCONFIRMED)")}
    return {"block_scale_factor": 1, "text": "upstream vllm: as stored (UNCONFIRMED)"}
