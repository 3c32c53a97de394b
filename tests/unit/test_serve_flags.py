"""The vllm serve command: planner flags + overrides, refusals, systemd quoting."""

from __future__ import annotations

import shlex

import pytest

from onecat.serve.flags import (
    accepted_flags,
    check_argv,
    flag_name,
    group_lines,
    help_problems,
    merge_args,
    normalise_flag,
    serve_argv,
    systemd_quote,
)
from onecat.serve.image_ref import check_lock

PLANNED = {"--dtype": "half", "--tensor-parallel-size": 2, "--max-model-len": 8192,
           "--gpu-memory-utilization": 0.85, "--max-num-seqs": 40,
           "--attention-backend": "FLASH_ATTN_V100"}


def test_overrides_replace_add_and_remove_planner_flags():
    merged = merge_args({"--attention-backend": "FLASH_ATTN_V100", **PLANNED,
                         "--disable-custom-all-reduce": None},
                        {"max_num_seqs": 16, "kv-cache-dtype": "fp8_e5m2",
                         "--attention-backend": None, "enforce_eager": True})
    assert merged == {"--dtype": "half", "--tensor-parallel-size": 2, "--max-model-len": 8192,
                      "--gpu-memory-utilization": 0.85, "--max-num-seqs": 16,
                      "--kv-cache-dtype": "fp8_e5m2", "--enforce-eager": True}
    assert list(merged)[:5] == ["--dtype", "--tensor-parallel-size", "--max-model-len",
                                "--gpu-memory-utilization", "--max-num-seqs"]


def test_serve_argv_puts_model_and_name_first_and_extra_args_last():
    argv = serve_argv("/models/q", "q", "0.0.0.0", 8000,
                      {"--dtype": "half", "--disable-custom-all-reduce": True}, ["--seed", "7"])
    assert argv == ["serve", "/models/q", "--served-model-name", "q", "--host", "0.0.0.0",
                    "--port", "8000", "--dtype", "half", "--disable-custom-all-reduce",
                    "--seed", "7"]


@pytest.mark.parametrize(("argv", "expected"), [
    (["--swap-space", "4"], "--swap-space was removed from vLLM's CLI with the V0 engine"),
    (["--quantization", "nvfp4"], "--quantization nvfp4 is not a vLLM quantization method"),
    (["--quantization=NVFP4"], "--quantization NVFP4 is not a vLLM quantization method"),
    (["--dtype", "bfloat16"], "--dtype bfloat16: this GPU (compute capability 7.0) has no "
                              "bfloat16; use --dtype half"),
    (["--api-key", "x"], "--api-key is set by the role: use vllm_serve_api_key"),
    (["--port", "9000"], "--port is set by the role: use vllm_serve_port"),
    (["--config", "/etc/vllm.yaml"], "--config is set by the role: use vllm_serve_args, one flag"),
])
def test_refused_flags_name_the_fix(argv, expected):
    problems = check_argv("1cat-vllm", ["--dtype", "half", *argv], 70)
    assert len(problems) == 1
    assert problems[0].startswith(expected)


def test_bfloat16_is_fine_on_ampere_and_good_flags_pass():
    assert check_argv("vllm", ["--dtype", "bfloat16", "--max-num-seqs", "8"], 80) == []
    # Flags that only begin like the role's --config stay the user's.
    assert check_argv("vllm", ["--config-format", "hf", "--compilation-config", "{}"], 80) == []


def test_flags_the_image_does_not_list_are_refused():
    help_text = "usage: vllm serve\n  --dtype {auto,half}\n  --max-num-seqs MAX_NUM_SEQS\n" \
                "  --enable-prefix-caching, --no-enable-prefix-caching\n"
    assert accepted_flags(help_text) == {"--dtype", "--max-num-seqs", "--enable-prefix-caching",
                                         "--no-enable-prefix-caching"}
    problems = check_argv("1cat-vllm", ["--dtype", "half", "--attention-backend", "X"], 70,
                          accepted_flags(help_text))
    assert problems == ["--attention-backend is not accepted by this engine image (its `vllm "
                        "serve --help=all` does not list it); remove it or pin an image that "
                        "has it"]


def test_unknown_engine_is_refused():
    assert check_argv("tgi", [], 70) == ["engine 'tgi' is not one of 1cat-vllm, vllm"]


@pytest.mark.parametrize(("arg", "quoted"), [
    ("--dtype", "--dtype"),
    ("/models/q:/models/q:ro", "/models/q:/models/q:ro"),
    ('"device=0,1"', '"\\"device=0,1\\""'),
    ("a b", '"a b"'),
    ("50%", '"50%%"'),
    ("$HOME", '"$$HOME"'),
])
def test_systemd_quote(arg, quoted):
    assert systemd_quote(arg) == quoted


def test_systemd_quoting_round_trips_like_a_shell_for_quotes_and_spaces():
    # systemd's quoting of these cases matches POSIX shell double quotes.
    for arg in ['"device=0,1"', "a b", 'say "hi"']:
        assert shlex.split(systemd_quote(arg)) == [arg]


def test_group_lines_keeps_each_value_with_its_flag():
    argv = serve_argv("/models/q", "q", "0.0.0.0", 8000,
                      {"--dtype": "half", "--enforce-eager": True, "--seed": -1}, [])
    assert group_lines(argv) == ["serve /models/q", "--served-model-name q", "--host 0.0.0.0",
                                 "--port 8000", "--dtype half", "--enforce-eager", "--seed -1"]


@pytest.mark.parametrize(("item", "normal"), [
    ("--api_key", "--api-key"), ("--api_key=a_b", "--api-key=a_b"), ("a_b", "a_b"),
    ("-q", "-q"), ("--max-num-seqs", "--max-num-seqs"),
])
def test_flag_names_are_normalised_like_vllm(item, normal):
    assert normalise_flag(item) == normal
    assert flag_name("--max_num_seqs") == flag_name("max_num_seqs") == "--max-num-seqs"


@pytest.mark.parametrize("argv", [
    ["--api_key", "s"], ["--api_key=s"], ["--API-KEY".lower(), "s"], ["--api-k", "s"],
    ["--served_model_name", "x"], ["--hos", "1.2.3.4"], ["--middleware", "m.M"],
])
def test_role_owned_flags_cannot_be_smuggled(argv):
    problems = check_argv("1cat-vllm", argv, 70)
    assert len(problems) == 1 and "is set by the role" in problems[0], problems


def test_a_listed_flag_is_not_taken_for_an_abbreviation():
    assert check_argv("vllm", ["--model-impl", "auto"], 70, {"--model-impl"}) == []
    assert "read as --model" in check_argv("vllm", ["--mod", "x"], 70, {"--model-impl"})[0]


def test_the_flag_check_fails_closed():
    assert help_problems("", True) and help_problems("usage: nothing", True)
    assert help_problems("", False) == []
    assert help_problems("  --max-model-len MAX_MODEL_LEN\n", True) == []


@pytest.mark.parametrize("arg", ["a\nExecStartPre=/bin/sh", "a\rb", "a\x00", "tab\tx"])
def test_systemd_quote_refuses_control_characters(arg):
    with pytest.raises(ValueError, match="control character"):
        systemd_quote(arg)


def test_safe_arguments_are_matched_whole():
    # `^...$` used to let "x\n" through unquoted (a trailing newline matches `$`).
    assert systemd_quote("x y") == '"x y"'
    with pytest.raises(ValueError):
        systemd_quote("x\n")


HASH = "--hash=sha256:" + "a" * 64


@pytest.mark.parametrize(("lock", "torch", "problem"), [
    (f"torch==2.10.0+cu128 \\\n    {HASH}\nnumpy==2.1.0 {HASH}\n", "torch==2.10.0", None),
    ("# only comments\n", "", None),
    ("six==1.16.0\n", "", "has no --hash=sha256"),
    (f"six>=1.16 {HASH}\n", "", "is not pinned with =="),
    (f"--index-url https://x {HASH}\n", "", "a lock holds requirements only"),
    (f"numpy==2.1.0 {HASH}\n", "torch==2.10.0", "does not pin torch"),
    (f"torch==2.9.0 {HASH}\n", "torch==2.10.0", "pins torch==2.9.0, not 'torch==2.10.0'"),
])
def test_the_image_lock_pins_every_requirement_by_hash(lock, torch, problem):
    problems = check_lock(lock, "lock.txt", torch)
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problem in problems[0], problems


@pytest.mark.parametrize("argv", [
    ["--attention-backend", "FLASH_ATTN_V100"],
    ["--attention-backend=FLASHINFER_SM70"],
    ["--attention-backend", "flash_attn_v100"],  # vLLM upper-cases a backend's name
    ["--calculate-kv-scales"],
    ["--max-num-partial-prefills", "2"],
])
def test_the_forks_own_flags_and_values_are_refused_for_upstream_vllm_only(argv):
    upstream = check_argv("vllm", argv, 70)
    assert len(upstream) == 1
    assert "only in the 1CatAI/1Cat-vLLM fork" in upstream[0]
    assert "vllm_serve_engine 1cat-vllm" in upstream[0]
    assert check_argv("1cat-vllm", argv, 70) == []


def test_a_fork_only_flag_with_no_value_before_the_next_flag_takes_only_itself():
    from onecat.serve.fork_flags import split_fork_only

    kept, taken = split_fork_only(["--max-num-partial-prefills", "--dtype", "half",
                                   "--attention-backend", "FLASH_ATTN_V100", "--seed", "0"])
    assert kept == ["--dtype", "half", "--seed", "0"]
    assert taken == [["--max-num-partial-prefills"], ["--attention-backend", "FLASH_ATTN_V100"]]
