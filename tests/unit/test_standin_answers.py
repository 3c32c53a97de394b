"""The stand-in engine answers like a V100 does: not batch-invariant, with logprobs in vLLM's
shapes, and gone bad in the seed's ways with a likelihood to match; onecat's probe catches
every bad mode and passes the healthy engine under load."""

from __future__ import annotations

import itertools
import json
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

STANDIN = Path(__file__).resolve().parents[1] / "standin_engine"
sys.path.insert(0, str(STANDIN))

from standin_harness import standin  # noqa: E402
from standin_vllm import answers  # noqa: E402
from standin_vllm.settings import from_env  # noqa: E402

from onecat.answers.probe import ask_all, likelihoods  # noqa: E402
from onecat.answers.prompts import DEFAULT_FILE, read  # noqa: E402

MODEL = "standin-model"


def _post(url: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def _take(stream, n: int = 32) -> list[str]:
    return list(itertools.islice(stream, n))


def test_greedy_tokens_after_the_first_few_depend_on_the_batch() -> None:
    idle = _take(answers.generate("The capital of France is", None, batch=0))
    loaded = [_take(answers.generate("The capital of France is", None, batch=b))
              for b in (1, 7, 31)]
    for tokens in loaded:
        assert tokens[:answers.STABLE_TOKENS] == idle[:answers.STABLE_TOKENS]
        assert tokens != idle
    assert "".join(idle).startswith(" Paris.")


def test_the_bad_modes_are_selected_like_the_other_faults() -> None:
    assert from_env({"STANDIN_BAD_MODE": "soup"}).bad_mode == "soup"
    with pytest.raises(SystemExit, match="collapse, cjk_loop, cut_loop, soup"):
        from_env({"STANDIN_BAD_MODE": "nan"})
    text = {mode: "".join(_take(answers.generate("The capital of France is", None, bad=mode,
                                                 count=31), 31))
            for mode in answers.BAD_MODES}
    assert text["collapse"].startswith(" Paris!!!!!!!!")
    assert text["cjk_loop"].startswith("水的沸点是100摄氏度度度度度")
    assert text["cut_loop"].endswith("巴黎巴黎巴")
    assert len({ch for ch in text["soup"]}) > 20


def test_logprobs_in_vllms_shapes(tmp_path: Path) -> None:
    text = "The capital of France is Paris."
    with standin(tmp_path) as server:
        echoed = _post(server.url, "/v1/completions", {
            "model": MODEL, "prompt": text, "max_tokens": 1, "echo": True, "logprobs": 0,
            "temperature": 0})
        scored = _post(server.url, "/v1/completions", {
            "model": MODEL, "prompt": text, "max_tokens": 0, "echo": True, "logprobs": 1})
        prompt_lps = _post(server.url, "/v1/completions", {
            "model": MODEL, "prompt": text, "max_tokens": 2, "prompt_logprobs": 0,
            "temperature": 0})
        plain = _post(server.url, "/v1/completions", {
            "model": MODEL, "prompt": text, "max_tokens": 3, "logprobs": 2, "temperature": 0})
    choice = echoed["choices"][0]
    n = echoed["usage"]["prompt_tokens"]
    assert choice["text"].startswith(text)
    lps = choice["logprobs"]
    assert set(lps) == {"text_offset", "token_logprobs", "tokens", "top_logprobs"}
    assert len(lps["tokens"]) == n + 1 and lps["token_logprobs"][0] is None
    assert lps["top_logprobs"][0] is None and all(v < 0 for v in lps["token_logprobs"][1:])
    assert "".join(lps["tokens"][:n]) == "<s>" + text and lps["text_offset"][0] == 0
    assert len(scored["choices"][0]["logprobs"]["tokens"]) == n  # max_tokens 0: the prompt
    assert scored["choices"][0]["logprobs"]["token_logprobs"][1:] == lps["token_logprobs"][1:n]
    entries = prompt_lps["choices"][0]["prompt_logprobs"]
    assert entries[0] is None and len(entries) == n
    first = next(iter(entries[1].values()))
    assert set(first) == {"logprob", "rank", "decoded_token"}
    assert len(plain["choices"][0]["logprobs"]["tokens"]) == 3


def test_the_likelihood_is_stable_under_load_and_falls_when_bad(tmp_path: Path) -> None:
    prompts = read(DEFAULT_FILE)
    flag = tmp_path / "bad"
    with standin(tmp_path / "engine", env={"STANDIN_BAD_FILE": str(flag)}) as server:
        idle = likelihoods(ask_all(server.url, MODEL, prompts, {}))
        with ThreadPoolExecutor(24) as pool:
            busy = [pool.submit(_post, server.url, "/v1/completions",
                                {"model": MODEL, "prompt": f"story {i}", "max_tokens": 64,
                                 "ignore_eos": True}) for i in range(24)]
            loaded = ask_all(server.url, MODEL, prompts, idle)
            for job in busy:
                job.result()
        flag.touch()
        bad = likelihoods(ask_all(server.url, MODEL, prompts, {}))
    assert all(r.ok for r in loaded), [r.reason for r in loaded if not r.ok]
    for text, nll in likelihoods(loaded).items():
        assert abs(nll - idle[text]) / idle[text] < 0.01  # batch noise: about a percent
    assert all(bad[text] > 4 * idle[text] for text in idle)  # orders of magnitude in perplexity


@pytest.mark.parametrize("mode", ["repeat", "wrong", "broken", "collapse", "cjk_loop",
                                  "cut_loop", "soup"])
def test_the_probe_catches_every_bad_mode(tmp_path: Path, mode: str) -> None:
    prompts = read(DEFAULT_FILE)
    flag = tmp_path / "bad"
    env = {"STANDIN_BAD_FILE": str(flag), "STANDIN_BAD_MODE": mode}
    with standin(tmp_path / "engine", env=env) as server:
        healthy = ask_all(server.url, MODEL, prompts, {})
        flag.touch()
        results = ask_all(server.url, MODEL, prompts, likelihoods(healthy))
    assert all(r.ok for r in healthy)
    failed = [r for r in results if not r.ok]
    # Every answer and every likelihood fails (wrong: the known answers and likelihoods).
    assert len(failed) == len(results), [(r.prompt, r.answer, r.reason) for r in results]
