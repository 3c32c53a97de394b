"""The stand-in engine: real vLLM's flag rejections, API shapes, timing model, fault injection."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

STANDIN = Path(__file__).resolve().parents[1] / "standin_engine"
sys.path.insert(0, str(STANDIN))

from standin_harness import command, environment, standin, write_model  # noqa: E402
from standin_vllm import cli, tokenizer  # noqa: E402
from standin_vllm.engine import Engine  # noqa: E402
from standin_vllm.settings import Settings, from_env, hits  # noqa: E402

ONECAT_FLAGS = [
    "--host", "0.0.0.0", "--port", "8000", "--served-model-name", "qwen", "--dtype", "half",
    "--tensor-parallel-size", "2", "--max-model-len", "8192", "--gpu-memory-utilization", "0.85",
    "--max-num-seqs", "32", "--max-num-batched-tokens", "4096", "--attention-backend",
    "FLASH_ATTN_V100", "--disable-custom-all-reduce", "--kv-cache-dtype", "fp8_e5m2",
    "--api-key", "k", "--trust-remote-code", "--enable-prefix-caching",
    "--enable-chunked-prefill", "--seed", "0",
]


def _vllm(tmp_path: Path, *args: str, model: bool = True) -> subprocess.CompletedProcess:
    path = write_model(tmp_path / "model") if model else tmp_path / "absent"
    return subprocess.run(command("serve", str(path), *args), env=environment(),
                          capture_output=True, text=True, timeout=30)


# --- command line ---------------------------------------------------------------------------

def test_accepts_every_flag_onecat_passes(tmp_path):
    args = cli.build_parser().parse_args(["serve", str(write_model(tmp_path / "m")),
                                          *ONECAT_FLAGS])
    resolved = cli.resolve(args, Settings())
    assert resolved["served_names"] == ["qwen"]
    assert resolved["max_model_len"] == 8192
    assert resolved["dtype"] == "float16"
    assert resolved["detected_quantization"] == "compressed-tensors"
    assert resolved["api_keys"] == ["k"]  # --api-key takes a list, as in the fork


def _hybrid_config() -> dict:
    sys.path.insert(0, str(STANDIN.parent))
    import model_fixtures as mf

    return json.loads(json.dumps(mf.QWEN35_TINY))


def test_a_hybrid_wrapped_in_text_config_is_read_like_vllm(tmp_path):
    # Qwen3.5 checkpoints nest the text model under text_config (vLLM's get_hf_text_config);
    # the planner adds --language-model-only for them.
    model = write_model(tmp_path / "m", _hybrid_config())
    args = cli.build_parser().parse_args(["serve", str(model), *ONECAT_FLAGS,
                                          "--language-model-only"])
    resolved = cli.resolve(args, Settings())
    assert resolved["max_model_len"] == 8192
    assert resolved["text_config"]["vocab_size"] == 4096
    args = cli.build_parser().parse_args(["serve", str(model), "--max-model-len", "40000"])
    with pytest.raises(cli.EngineConfigError, match=r"max_position_embeddings=32768"):
        cli.resolve(args, Settings())


def test_a_hybrid_whose_linear_heads_do_not_split_fails_like_vllm(tmp_path):
    config = _hybrid_config()
    config["text_config"]["linear_num_value_heads"] = 9
    args = cli.build_parser().parse_args(["serve", str(write_model(tmp_path / "m", config)),
                                          "--tensor-parallel-size", "2"])
    with pytest.raises(cli.EngineConfigError, match="9 is not divisible by 2"):
        cli.resolve(args, Settings())


def test_removed_swap_space_is_an_argparse_error(tmp_path):
    run = _vllm(tmp_path, "--swap-space", "16")
    assert run.returncode == 2
    assert "unrecognized arguments: --swap-space 16" in run.stderr


def test_quantization_nvfp4_is_rejected_like_upstream(tmp_path):
    run = _vllm(tmp_path, "--quantization", "nvfp4")
    assert run.returncode == 1
    assert "ValueError: Unknown quantization method: nvfp4. Must be one of [" in run.stderr
    assert "'modelopt_fp4'" in run.stderr


@pytest.mark.parametrize(("flags", "message"), [
    (["--dtype", "bfloat16"], "Bfloat16 is only supported on GPUs with compute capability"),
    (["--max-model-len", "9000"], "User-specified max_model_len (9000) is greater"),
    (["--tensor-parallel-size", "4"], "World size (4) is larger than the number of available"),
    (["--attention-backend", "NOPE"], "Invalid attention backend: 'NOPE'"),
    (["--quantization", "awq"], "does not match the quantization method"),
])
def test_engine_config_errors(tmp_path, flags, message):
    args = cli.build_parser().parse_args(["serve", str(write_model(tmp_path / "m")), *flags])
    with pytest.raises(cli.EngineConfigError) as err:
        cli.resolve(args, Settings())
    assert message in str(err.value)


def test_missing_config_json_fails_like_vllm(tmp_path):
    run = _vllm(tmp_path, model=False)
    assert run.returncode == 1
    assert "Invalid repository ID or local directory specified" in run.stderr


def test_version_flag():
    run = subprocess.run(command("--version"), env=environment({"STANDIN_VERSION": "9.9"}),
                         capture_output=True, text=True, timeout=30)
    assert (run.returncode, run.stdout.strip()) == (0, "9.9")


def test_settings_from_env_and_bad_values():
    s = from_env({"STANDIN_DECODE_MS": "7.5", "STANDIN_BROKEN": "1", "STANDIN_NUM_GPUS": "4"})
    assert (s.decode_ms, s.broken, s.num_gpus, s.prefill_ms) == (7.5, True, 4, 10.0)
    with pytest.raises(SystemExit, match="STANDIN_DECODE_MS"):
        from_env({"STANDIN_DECODE_MS": "fast"})


def test_fault_injection_hits_exact_share_evenly():
    assert [n for n in range(1, 31) if hits(n, 10)] == [10, 20, 30]
    assert [n for n in range(1, 5) if hits(n, 50)] == [2, 4]
    assert not any(hits(n, 0) for n in range(1, 100))


# --- tokenizer ------------------------------------------------------------------------------

def test_tokenizer_rules():
    ids = tokenizer.tokenize_text("hello, world")  # BOS hell o , worl d
    assert len(ids) == 6 and ids[0] == tokenizer.BOS_ID
    assert len(tokenizer.tokenize_text("hello, world", add_special_tokens=False)) == 5
    assert tokenizer.tokenize_text("a b") == tokenizer.tokenize_text("a   b")
    chat = tokenizer.render_chat([{"role": "user", "content": "hi there"}])
    # 2 specials + "user" + "hi" + "ther" "e"; generation prompt 1 + "assi" "stan" "t".
    assert len(tokenizer.tokenize_text(chat, add_special_tokens=False)) == 6 + 4


@pytest.mark.parametrize("text", [
    "hello, world", "naïve café_x 12345678 a.b", "<|im_start|>user\nhi there<|im_end|>\n",
    "tabs\tand\nnewlines  ", "x_y __ ... é́", ""])
def test_fast_count_matches_the_tokenizer(text):
    for special in (True, False):
        expected = len(tokenizer.tokenize_text(text, add_special_tokens=special))
        assert tokenizer.count_tokens(text, special) == expected


def test_generated_words_are_single_tokens_and_varied():
    words = [w for _, w in zip(range(50), tokenizer.generate_words("p", None), strict=False)]
    assert len(set(words)) > 10
    assert len(tokenizer.tokenize_text("".join(words), add_special_tokens=False)) == 50
    broken = list(itertools.islice(tokenizer.generate_words("p", None, broken=True), 5))
    assert broken == ["!"] * 5


# --- timing model and admission -------------------------------------------------------------

def test_timing_formulas():
    engine = Engine(Settings(prefill_ms=10, prefill_ms_per_token=0.5, decode_ms=20,
                             decode_ms_per_seq=4), max_num_seqs=8, kv_tokens=4096)
    assert engine.prefill_s(100) == pytest.approx(0.060)
    assert engine.prefill_s(1000) == pytest.approx(0.510)
    engine.running = 1
    assert engine.gap_s() == pytest.approx(0.020)
    engine.running = 5
    assert engine.gap_s() == pytest.approx(0.036)


def test_max_num_seqs_queues_fifo():
    async def scenario() -> None:
        engine = Engine(Settings(), max_num_seqs=1, kv_tokens=4096)
        assert await engine.admit(10) is False  # a free slot: no wait
        order: list[str] = []

        async def later(name: str) -> None:
            assert await engine.admit(10) is True
            order.append(name)

        waiters = [asyncio.ensure_future(later(n)) for n in ("second", "third")]
        await asyncio.sleep(0)
        assert (engine.running, engine.waiting) == (1, 2)
        engine.release(16)
        await asyncio.sleep(0)
        assert order == ["second"] and engine.waiting == 1
        engine.release(16)
        await asyncio.gather(*waiters)
        assert order == ["second", "third"] and engine.waiting == 0

    asyncio.run(scenario())


def test_kv_cache_limits_admission():
    async def scenario() -> None:
        engine = Engine(Settings(), max_num_seqs=10, kv_tokens=64)
        await engine.admit(40)  # 48 tokens of blocks
        assert engine.kv_usage() == 0.75
        waiter = asyncio.ensure_future(engine.admit(20))
        await asyncio.sleep(0)
        assert engine.waiting == 1
        engine.release(48)
        await waiter
        assert engine.waiting == 0 and engine.kv_usage() == 0.5

    asyncio.run(scenario())


def test_run_emits_on_the_timing_model():
    async def scenario() -> list[float]:
        engine = Engine(Settings(prefill_ms=40, prefill_ms_per_token=0.1, decode_ms=15,
                                 decode_ms_per_seq=0), max_num_seqs=4, kv_tokens=4096)
        start = time.monotonic()
        stamps: list[float] = []
        assert await engine.run(100, 4, lambda i: stamps.append(time.monotonic() - start),
                                arrived=start)
        assert engine.generation_tokens_total == 4 and engine.running == 0
        return stamps

    stamps = asyncio.run(scenario())
    # Deadlines: 50 ms, then every 15 ms; late wake-ups must not accumulate.
    assert stamps[0] >= 0.050
    assert stamps[3] >= 0.095 and stamps[3] - 0.095 < stamps[0] - 0.050 + 0.030


@pytest.mark.parametrize(("serial", "second_due"), [(True, 0.100), (False, 0.050)])
def test_prefills_run_one_at_a_time_unless_disabled(serial, second_due):
    async def scenario() -> list[float]:
        engine = Engine(Settings(prefill_ms=50, prefill_ms_per_token=0, prefill_serial=serial),
                        max_num_seqs=4, kv_tokens=4096)
        start = time.monotonic()
        firsts: list[float] = []
        await asyncio.gather(*(
            engine.run(10, 1, lambda i: firsts.append(time.monotonic() - start), arrived=start)
            for _ in range(2)))
        return sorted(firsts)

    first, second = asyncio.run(scenario())
    assert 0.050 <= first < 0.050 + 0.040
    assert second_due <= second < second_due + 0.040


# --- HTTP API (one server for the module) ---------------------------------------------------

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with standin(tmp_path_factory.mktemp("standin"), args=["--api-key", "sekret"]) as s:
        yield s


def _call(server, path, body=None, key="sekret", raw=False):
    headers = {"content-type": "application/json"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(server.url + path, data=data, headers=headers)
    with urllib.request.urlopen(request, timeout=10) as resp:
        payload = resp.read()
        return resp.status, resp.headers, payload if raw else json.loads(payload or b"null")


def _events(payload: bytes) -> list[str]:
    assert payload.endswith(b"\n\n")
    events = payload.decode().strip().split("\n\n")
    assert all(e.startswith("data: ") for e in events)
    return [e[len("data: "):] for e in events]


def test_health_models_and_api_key(server):
    assert _call(server, "/health", key=None, raw=True)[0] == 200
    models = _call(server, "/v1/models")[2]
    assert [m["id"] for m in models["data"]] == ["standin-model"]
    assert models["data"][0]["max_model_len"] == 8192
    with pytest.raises(urllib.error.HTTPError) as err:
        _call(server, "/v1/models", key=None)
    assert err.value.code == 401
    with pytest.raises(urllib.error.HTTPError) as err:
        _call(server, "/v1/models", key="wrong")
    assert err.value.code == 401


def test_tokenize(server):
    body = _call(server, "/tokenize", {"model": "standin-model", "prompt": "hello, world"})[2]
    assert body["count"] == 6 and len(body["tokens"]) == 6
    chat = _call(server, "/tokenize", {"model": "standin-model",
                                       "messages": [{"role": "user", "content": "hi there"}]})[2]
    assert chat["count"] == 10


def test_completion_non_streaming(server):
    body = _call(server, "/v1/completions", {"model": "standin-model", "prompt": "hello, world",
                                             "max_tokens": 7, "ignore_eos": True,
                                             "temperature": 0})[2]
    text = body["choices"][0]["text"]
    assert body["usage"] == {"prompt_tokens": 6, "completion_tokens": 7, "total_tokens": 13,
                             "prompt_tokens_details": None}
    assert len(text.split()) == 7 and body["choices"][0]["finish_reason"] == "length"
    again = _call(server, "/v1/completions", {"model": "standin-model", "prompt": "hello, world",
                                              "max_tokens": 7, "ignore_eos": True,
                                              "temperature": 0})[2]
    assert again["choices"][0]["text"] == text  # temperature 0 is deterministic


def test_eos_ends_early_without_ignore_eos(server):
    prompt = "a prompt"
    natural = tokenizer.natural_length(prompt)
    body = _call(server, "/v1/completions", {"prompt": prompt, "max_tokens": 500})[2]
    assert body["usage"]["completion_tokens"] == natural
    assert body["choices"][0]["finish_reason"] == "stop"


def test_completion_stream_shape(server):
    payload = _call(server, "/v1/completions", {
        "model": "standin-model", "prompt": "one two three", "max_tokens": 4, "stream": True,
        "ignore_eos": True, "stream_options": {"include_usage": True}}, raw=True)[2]
    events = _events(payload)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text_chunks, usage_chunk = chunks[:-1], chunks[-1]
    assert len(text_chunks) == 4
    assert all(c["object"] == "text_completion" and c["usage"] is None for c in text_chunks)
    assert [c["choices"][0]["finish_reason"] for c in text_chunks] == [None, None, None, "length"]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == 4
    assert usage_chunk["usage"]["prompt_tokens"] == 5  # BOS one two thre e


def test_chat_stream_shape(server):
    payload = _call(server, "/v1/chat/completions", {
        "model": "standin-model", "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 3, "stream": True}, raw=True)[2]
    events = _events(payload)
    chunks = [json.loads(e) for e in events[:-1]]
    assert events[-1] == "[DONE]"
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [bool(c["choices"][0]["delta"].get("content")) for c in chunks[1:]] == [True] * 3
    assert "usage" not in chunks[1]  # no include_usage: no usage key, like vLLM


def test_request_errors(server):
    with pytest.raises(urllib.error.HTTPError) as err:
        _call(server, "/v1/completions", {"model": "other", "prompt": "x"})
    assert err.value.code == 404
    assert "does not exist" in json.loads(err.value.read())["error"]["message"]
    with pytest.raises(urllib.error.HTTPError) as err:
        _call(server, "/v1/completions", {"prompt": "x", "max_tokens": 9000})
    assert err.value.code == 400
    assert "maximum context length is 8192" in json.loads(err.value.read())["error"]["message"]


def test_metrics_names(server):
    text = _call(server, "/metrics", key=None, raw=True)[2].decode()
    for name in ("vllm:num_requests_running{", "vllm:num_requests_waiting{",
                 "vllm:kv_cache_usage_perc{", "vllm:generation_tokens_total{",
                 "vllm:prompt_tokens_total{", "vllm:time_to_first_token_seconds_count{"):
        assert name in text
    assert "# TYPE vllm:kv_cache_usage_perc gauge" in text


def test_broken_mode_repeats_one_token(tmp_path):
    with standin(tmp_path, env={"STANDIN_BROKEN": "1"}) as s:
        body = _call(s, "/v1/completions", {"prompt": "hi", "max_tokens": 6,
                                            "temperature": 0}, key=None)[2]
    assert body["choices"][0]["text"] == "!!!!!!"


def test_a_card_going_bad_answers_garbage_after_n_requests(tmp_path):
    from onecat.answers.probe import garbage

    request = {"prompt": "The capital of France is", "max_tokens": 16, "temperature": 0}
    with standin(tmp_path, env={"STANDIN_BAD_AFTER": "2"}) as s:
        answers = [_call(s, "/v1/completions", request, key=None)[2]["choices"][0]["text"]
                   for _ in range(3)]
    assert answers[0] == answers[1]  # greedy on a healthy card: the same answer
    assert garbage(answers[0]) is None
    assert "collapsed into repetition" in (garbage(answers[2]) or "")


def test_a_card_going_bad_while_a_file_exists_answers_wrong(tmp_path):
    from onecat.answers.probe import judge

    flag = tmp_path / "bad"
    request = {"prompt": "The capital of France is", "max_tokens": 16, "temperature": 0}
    env = {"STANDIN_BAD_FILE": str(flag), "STANDIN_BAD_MODE": "wrong"}
    with standin(tmp_path, env=env) as s:
        reference = _call(s, "/v1/completions", request, key=None)[2]["choices"][0]["text"]
        flag.touch()
        wrong = _call(s, "/v1/completions", request, key=None)[2]["choices"][0]["text"]
        flag.unlink()
        again = _call(s, "/v1/completions", request, key=None)[2]["choices"][0]["text"]
    # Not compared with the healthy answer (that would refuse a non-batch-invariant engine):
    # the wrong answer lacks what a right one contains (and its likelihood moved:
    # tests/unit/test_standin_answers.py).
    assert judge(reference, ("Paris",)).ok and judge(again, ("Paris",)).ok
    assert "does not contain 'Paris'" in judge(wrong, ("Paris",)).reason


def test_a_bad_mode_that_does_not_exist_is_refused():
    with pytest.raises(SystemExit, match="STANDIN_BAD_MODE='nan' is not one of"):
        from_env({"STANDIN_BAD_MODE": "nan"})


def test_no_tokenize_and_startup_failure(tmp_path):
    with standin(tmp_path, env={"STANDIN_NO_TOKENIZE": "1"}) as s, \
            pytest.raises(urllib.error.HTTPError) as err:
        _call(s, "/tokenize", {"prompt": "hi"}, key=None)
    assert err.value.code == 404
    run = subprocess.run(command("serve", str(write_model(tmp_path / "m2"))),
                         env=environment({"STANDIN_STARTUP_FAIL": "CUDA out of memory"}),
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 1 and "RuntimeError: CUDA out of memory" in run.stderr


def test_sigterm_shuts_down_cleanly(tmp_path):
    with standin(tmp_path) as s:
        s.process.terminate()
        assert s.process.wait(timeout=5) == 0
    assert "Shutting down" in s.log.read_text()
