"""Fuzz the custom modules' arguments, in process, through AnsibleModule's own type checks.

Each generated argument set runs a module's real main() (module_utils imported the way
AnsiballZ ships them); the module must answer with exit_json or fail_json (one readable
msg), never an uncaught exception (Ansible shows those as "Module failed: <repr>").
"""

from __future__ import annotations

import contextlib
import decimal
import importlib.util
import io
import json
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import ansible.module_utils
import pytest
from ansible.module_utils.testing import patch_module_args
from fuzzkit import JSON, examples, fuzz
from hypothesis import example, given, reject, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
from model_fixtures import build_model  # noqa: E402

# What AnsiballZ does on a node: the repository's module_utils under ansible.module_utils.
if str(REPO / "module_utils") not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(str(REPO / "module_utils"))

TINY = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 256,
    "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
    "num_hidden_layers": 2, "max_position_embeddings": 32768, "vocab_size": 1024,
    "torch_dtype": "bfloat16",
}


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"onecat_fuzz_{name}",
                                                  REPO / "library" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def _overflows(value: object) -> bool:
    """Whether check_type_int's own conversion, int(Decimal(value)), overflows: an infinity, or
    an exponent so large that the integer cannot be made."""
    if isinstance(value, int):  # past 64 bits the same check fails too ("C ssize_t")
        return not isinstance(value, bool) and abs(value) >= 2**63
    try:
        int(decimal.Decimal(value))  # type: ignore[arg-type]
    except (OverflowError, MemoryError):  # MemoryError: "1e99999999999999999", same path
        return True
    except (decimal.DecimalException, TypeError, ValueError):
        return False
    return False


def skip_upstream_int_overflow(args: dict) -> None:
    """ansible-core 2.19's check_type_int raises OverflowError (not its TypeError) for an
    infinite value of a `type: int` option ("Module failed: cannot convert Infinity to
    integer") or one whose exponent is past the C integer range ("Python int too large to
    convert to C ssize_t"), an element of a list of ints too, before any module code runs.
    Fixed upstream (ansible/ansible#87253, not in the pinned release); such inputs are left out
    rather than counted against onecat."""
    int_options = {"gpus", "max_model_len", "tensor_parallel_size", "expected_gpus",
                   "min_memory_mib", "max_aggregate_uncorrected_ecc", "max_retired_pages",
                   "max_volatile_uncorrected_ecc", "max_volatile_corrected_ecc",
                   "warn_retired_pages", "min_pcie_gen", "min_pcie_width", "max_temperature_c",
                   "max_num_batched_tokens", "max_num_seqs", "typical_input_tokens",
                   "typical_output_tokens"}
    for name, value in args.items():
        values = value if isinstance(value, list) else [value]
        if (name in int_options or name == "xid_error_codes") and any(map(_overflows, values)):
            reject()


def run(module: ModuleType, args: dict) -> dict:
    """The module's JSON answer; an uncaught exception propagates (that is the crash)."""
    skip_upstream_int_overflow(args)
    out = io.StringIO()
    with patch_module_args(args), contextlib.redirect_stdout(out), \
            contextlib.suppress(SystemExit):
        module.main()
    answer = json.loads(out.getvalue())
    if answer.get("failed"):
        assert isinstance(answer.get("msg"), str) and answer["msg"], answer
    return answer


ANY = JSON | st.sampled_from(("nan", "inf", "-inf", "-1", "1e400", "", "x", "7.0", "0"))


def arguments(sane: dict[str, st.SearchStrategy]) -> st.SearchStrategy:
    """Sane values for a random subset of options, anything at all for one or two of them."""

    @st.composite
    def build(draw: st.DrawFn) -> dict:
        names = sorted(sane)
        args = {name: draw(sane[name]) for name in sorted(draw(st.sets(st.sampled_from(names))))}
        for name in draw(st.lists(st.sampled_from(names), max_size=2)):
            args[name] = draw(ANY)
        return args

    return build()


@pytest.fixture(scope="module")
def tiny_model() -> Path:
    root = Path(tempfile.mkdtemp(prefix="onecat-fuzz-"))
    yield build_model(root, TINY, "nvfp4-ct", name="tiny")
    shutil.rmtree(root)


MODEL_PLAN = load("model_plan")
PLAN_ARGS = {
    "gpus": st.integers(1, 8), "gpu_memory_gib": st.floats(1, 80),
    "gpu_memory_utilization": st.floats(0.1, 1), "max_model_len": st.integers(1, 1 << 16),
    "tensor_parallel_size": st.sampled_from((1, 2)), "kv_cache_dtype": st.just("auto"),
    "engine": st.sampled_from(("1cat-vllm", "vllm")), "engine_version": st.just("1.5.0"),
    "compute_capability": st.just("7.0"), "cuda_graph_gib": st.floats(0, 4),
    "max_num_batched_tokens": st.integers(1, 1 << 16),
    "health": st.none(), "fail_on_misfit": st.booleans(),
}


@settings(max_examples=examples(120))
@given(args=arguments(PLAN_ARGS))
@example(args={"gpu_memory_gib": "nan"})
@example(args={"cuda_graph_gib": "inf"})
@fuzz("module: model_plan arguments")
def test_fuzz_model_plan_arguments(tiny_model: Path, args: dict) -> None:
    answer = run(MODEL_PLAN, {"model_dir": str(tiny_model), **args})
    if not answer.get("failed"):
        assert answer["plan"]["weight_bytes"] > 0


PREFLIGHT = load("preflight_facts")
SYSFS = REPO / "tests" / "fixtures" / "sysfs" / "pcie-pair"
DISK = st.fixed_dictionaries({"path": st.just("/tmp"), "min_free_gib": st.floats(0, 10)},
                             optional={"purpose": st.just("data")})
PREFLIGHT_ARGS = {
    "os_name": st.just("Debian"), "os_version": st.just("12"),
    "expected_gpus": st.integers(0, 4), "disk_requirements": st.lists(DISK, max_size=2),
    "sysfs_root": st.just(str(SYSFS)), "modules_root": st.just(str(SYSFS / "lib" / "modules")),
}


@settings(max_examples=examples(120))
@given(args=arguments(PREFLIGHT_ARGS), minimum=ANY)
@example(args={"os_name": "Debian", "os_version": "12", "sysfs_root": str(SYSFS)},
         minimum="nan")
@fuzz("module: preflight_facts arguments")
def test_fuzz_preflight_arguments(args: dict, minimum: object) -> None:
    args = {"os_name": "Debian", "os_version": "12", **args}
    args.setdefault("disk_requirements", [{"path": "/tmp", "min_free_gib": minimum}])
    answer = run(PREFLIGHT, args)
    if not answer.get("failed"):
        facts = answer["ansible_facts"]["onecat_preflight"]
        for requirement in args["disk_requirements"]:
            if not isinstance(requirement, dict):
                continue
            minimum_text = str(requirement.get("min_free_gib")).lower()
            assert "nan" not in minimum_text and "inf" not in minimum_text, facts


GPU_HEALTH = load("gpu_health")
HEALTH_ARGS = {
    "expected_gpus": st.integers(0, 8), "min_compute_capability": st.just("7.0"),
    "allowed_processes": st.lists(st.text(max_size=5), max_size=2),
    "xid_error_codes": st.lists(st.integers(0, 200), max_size=3), "check_xid": st.booleans(),
    "fail_on": st.sampled_from(("error", "warning", "never")),
    "max_retired_pages": st.integers(0, 100), "kernel_log_path": st.just("/nonexistent"),
}


@settings(max_examples=examples(100))
@given(args=arguments(HEALTH_ARGS))
@fuzz("module: gpu_health arguments")
def test_fuzz_gpu_health_arguments(args: dict) -> None:
    run(GPU_HEALTH, args)  # no NVML here: a valid argument set ends in "driver not loaded"


ROLLOUT = load("rollout_summary")


@settings(max_examples=examples(100))
@given(hosts=st.dictionaries(st.text(min_size=1, max_size=6), st.none() | st.fixed_dictionaries(
    {}, optional={"onecat_stage": JSON, "onecat_stages_passed": JSON, "onecat_preflight": JSON,
                  "gpu_health": JSON, "vllm_serve_result": JSON, "onecat_hold_reason": JSON}),
    max_size=3), run_id=st.text(max_size=8))
@fuzz("module: rollout_summary arguments")
def test_fuzz_rollout_summary_arguments(hosts: dict, run_id: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run(ROLLOUT, {"hosts": hosts, "run_id": run_id, "dest": f"{tmp}/rollout.json"})
