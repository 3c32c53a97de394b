"""onecat's own code against the real vLLM server (CPU build, the tiny model): the serve gate,
the watch's probe and its judges, the metrics onecat reads, the guard, the benchmark.

One server is shared by the module (tests/real_engine/conftest.py `real_server`), started as
the serve role starts it: key in VLLM_API_KEY, onecat's guard as --middleware. Every test
leaves it serving. What the stand-in engine (tests/standin_engine) models, this checks on the
real thing.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import engine
import pytest

from onecat.answers import hung, likelihood
from onecat.answers.probe import judge, tokenize
from onecat.answers.prompts import DEFAULT_FILE, SCORE_TEXTS, parse
from onecat.serve.gate import smoke, wait_ready
from onecat.watch.look import Probe, run_probe

pytestmark = pytest.mark.real_engine

REPO = Path(__file__).resolve().parents[2]
PROMPTS = parse(DEFAULT_FILE.read_text())


def metrics(server: engine.Server) -> str:
    status, text = server.get("/metrics", key=server.metrics_key)
    assert status == 200, text[:300]
    return text


def counter(server: engine.Server, name: str) -> float:
    """A counter summed over its label sets."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics(server).splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


def moved(server: engine.Server, name: str, since: float, wait_s: float = 5.0) -> float:
    """How far a counter moved from `since`, polled for a few seconds: the engine records a
    request's stats when its output handler runs, which may be just after the answer."""
    deadline = time.monotonic() + wait_s
    while True:
        change = counter(server, name) - since
        if change > 0 or time.monotonic() >= deadline:
            return change
        time.sleep(0.2)


def sample_names(text: str) -> set[str]:
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            names.add(line.split("{", 1)[0].split(" ", 1)[0])
    return names


def test_the_gate_finds_the_real_server_ready_and_its_smoke_answer_is_the_models(
        real_server: engine.Server) -> None:
    ready, why = wait_ready(real_server.base_url, real_server.served_name, 30,
                            real_server.api_key)
    assert ready, why
    passed, reason, text = smoke(real_server.base_url, real_server.served_name,
                                 "The capital of France is", 8, real_server.api_key)
    assert passed, reason
    assert "Paris" in text, text


def test_the_gate_stops_at_once_when_the_guarded_server_refuses_the_key(
        real_server: engine.Server) -> None:
    began = time.monotonic()
    ready, why = wait_ready(real_server.base_url, real_server.served_name, 60, "not-the-key",
                            interval_s=0.5)
    assert not ready
    assert "/health answered 401" in why and "does not accept the key" in why, why
    assert time.monotonic() - began < 10


def test_the_watch_probe_asks_the_real_engine_and_records_its_likelihoods(
        real_server: engine.Server, tmp_path: Path) -> None:
    references = tmp_path / "references.json"
    config = Probe(real_server.base_url, real_server.served_name, PROMPTS, references,
                   api_key=real_server.api_key, metrics_key=real_server.metrics_key,
                   identity="tiny|real", timeout_s=30)
    results, findings = run_probe(config)
    assert findings == [], [f.message for f in findings]
    asked = {r.prompt: r for r in results}
    assert asked["The capital of France is"].ok, asked["The capital of France is"]
    assert all(r.ok for r in results), [(r.prompt, r.reason) for r in results]
    recorded = json.loads(references.read_text())
    # Real echoed logprobs (the first token's is None) give a finite NLL for every text, below
    # the bound a first reference must meet.
    assert set(recorded["likelihood"]) == set(SCORE_TEXTS)
    for nll in recorded["likelihood"].values():
        assert 0 < nll < likelihood.FIRST_MAX_NLL
    # The next look judges against them and passes: the same engine is the same engine.
    again, findings = run_probe(config)
    assert findings == [], [f.message for f in findings]
    assert len(again) == len(results)


def test_likelihood_tells_the_models_text_from_a_scramble_of_it(
        real_server: engine.Server) -> None:
    text = SCORE_TEXTS[0]
    scrambled = " ".join(reversed(text.split()))
    mine = likelihood.score(real_server.base_url, real_server.served_name, text,
                            real_server.api_key)
    other = likelihood.score(real_server.base_url, real_server.served_name, scrambled,
                             real_server.api_key)
    assert mine.nll is not None and other.nll is not None, (mine, other)
    assert mine.tokens > 10
    assert other.nll > mine.nll * 2
    assert likelihood.judge(mine, mine.nll) is None
    assert "likelihood moved" in (likelihood.judge(other, mine.nll) or "")


def test_degeneracy_is_judged_on_the_real_models_tokens(real_server: engine.Server) -> None:
    url, name, key = real_server.base_url, real_server.served_name, real_server.api_key
    answer = " Paris. Water boils at 100 degrees Celsius."
    tokens = tokenize(url, name, answer, key)
    assert tokens and all(isinstance(t, int) for t in tokens), tokens
    assert judge(answer, ("Paris",), tokens).ok
    # A loop of a multi-token phrase: the real tokenizer's ids repeat with it.
    loop = " the capital of France" * 6
    looped = tokenize(url, name, loop, key)
    assert looped and len(looped) > 6
    verdict = judge(loop, (), looped)
    assert not verdict.ok and "repetition" in verdict.reason, verdict


def test_every_engine_metric_onecat_reads_is_on_the_real_metrics_page(
        real_server: engine.Server) -> None:
    smoke(real_server.base_url, real_server.served_name, "Water boils at", 4,
          real_server.api_key)
    names = sample_names(metrics(real_server))
    read = set()
    for folder in ("onecat", "roles", "dashboards"):
        for path in (REPO / folder).rglob("*"):
            if path.suffix in (".py", ".yml", ".j2", ".json", ".cfg"):
                read |= set(re.findall(r"vllm:[a-z_]+", path.read_text(errors="replace")))
    # Older engines' names, read only as fallbacks beside today's (onecat/bench/observe.py,
    # multiturn.py); the fork's vLLM has the new ones.
    fallbacks = {"vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_hits_total",
                 "vllm:gpu_prefix_cache_queries_total"}
    # Prose names a counter without its _total, a histogram without _bucket.
    base = {n.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count") for n in names}
    # The scan found what the watch, the benchmark and the alerts read.
    assert {"vllm:generation_tokens_total", "vllm:kv_cache_usage_perc",
            "vllm:prefix_cache_hits_total", "vllm:num_requests_running"} <= read
    missing = sorted(n for n in read - fallbacks
                     if n not in names and n not in base and n + "_total" not in names)
    assert missing == [], f"onecat reads metrics the real engine does not export: {missing}"
    # The alerts and the dashboard group by the served model's name.
    page = metrics(real_server)
    for name in ("vllm:generation_tokens_total", "vllm:kv_cache_usage_perc"):
        labelled = rf'^{name}\{{[^}}]*model_name="{real_server.served_name}"'
        assert re.search(labelled, page, re.MULTILINE), name


def test_the_hung_judge_sees_the_real_generation_counter_move(
        real_server: engine.Server) -> None:
    before = hung.activity(metrics(real_server))
    assert before is not None
    smoke(real_server.base_url, real_server.served_name, "Count from one to ten:", 6,
          real_server.api_key)
    assert moved(real_server, hung.GENERATED, before.generated) > 0
    after = hung.activity(metrics(real_server))
    assert after is not None and after.generated > before.generated
    assert hung.stuck(before, after, 30) is None


def test_the_guard_closes_every_path_of_the_real_server(real_server: engine.Server) -> None:
    for path in ("/health", "/tokenize", "/version", "/v1/models", "/metrics"):
        assert real_server.get(path, key="")[0] == 401, path
    # The API key does not open /metrics: the scrapers have their own.
    assert real_server.get("/metrics")[0] == 401
    assert real_server.get("/metrics", key=real_server.metrics_key)[0] == 200


def test_the_guards_tenant_salt_keeps_the_real_prefix_cache_apart(
        real_server: engine.Server) -> None:
    # 300 tokens or more: whole blocks on the CPU build (its blocks are larger than on a GPU).
    prompt = " ".join(f"rack{i} node{i * 7}" for i in range(45))
    tokens = tokenize(real_server.base_url, real_server.served_name, prompt, real_server.api_key)
    assert tokens and 300 <= len(tokens) < 500, len(tokens or [])
    body = {"model": real_server.served_name, "prompt": prompt, "max_tokens": 1}

    hits = "vllm:prefix_cache_hits_total"
    queries = "vllm:prefix_cache_queries_total"

    def ask(tenant: str) -> None:
        status, text = engine.request(real_server.base_url + "/v1/completions", body,
                                      real_server.api_key, extra={"X-Onecat-Tenant": tenant})
        assert status == 200, text[:300]

    ask("a" * 64)
    first = counter(real_server, hits)
    asked = counter(real_server, queries)
    ask("a" * 64)
    same_tenant = moved(real_server, hits, first)
    asked = moved(real_server, queries, asked) + asked
    ask("b" * 64)
    # The queries counter moving says the engine recorded this request; hits must not have.
    assert moved(real_server, queries, asked) > 0
    other_tenant = counter(real_server, hits) - first - same_tenant
    # vLLM counts hits in tokens, in whole blocks on CPU: the same tenant hits, another not.
    assert same_tenant > 0
    assert other_tenant == 0


def test_the_real_engines_error_answers_are_named_by_the_gate(
        real_server: engine.Server) -> None:
    url, key = real_server.base_url, real_server.api_key
    passed, reason, _ = smoke(url, "no-such-model", "The capital of France is", 4, key)
    assert not passed and "HTTP 404" in reason, reason
    too_long = "word " * 700  # the server's --max-model-len is 512
    passed, reason, _ = smoke(url, real_server.served_name, too_long, 4, key)
    assert not passed and "HTTP 400" in reason, reason
    status, text = real_server.post("/v1/completions", {"model": real_server.served_name,
                                                         "prompt": too_long, "max_tokens": 4})
    # The engine names its limit: a client (and an operator reading the gate) can see why.
    assert status == 400 and "512" in text, text


def test_the_benchmark_streams_from_the_real_engine(real_server: engine.Server,
                                                    tmp_path: Path) -> None:
    summary = engine.onecat_bench(real_server, tmp_path / "bench", "--concurrency", "1,4",
                                  "--input-len", "32", "--output-len", "16",
                                  "--requests-per-level", "8", "--warmup", "1")
    levels = summary["levels"]
    assert [level["max_concurrency"] for level in levels] == [1, 4]
    for level in levels:
        assert level["failed"] == 0, level.get("errors")
        assert level["completed"] == 8, level
        # ignore_eos: every request gives exactly its 16 tokens, counted from the real stream.
        assert level["total_output_tokens"] == 8 * 16, level
        assert level["output_throughput"] > 0 and level["median_ttft_ms"] > 0, level


def env_file(server: engine.Server, folder: Path) -> Path:
    """The serve role's environment file as the benchmark role hands it to the client
    (roles/vllm_serve/templates/vllm.env.j2): both keys."""
    path = folder / "vllm.env"
    path.write_text(f"VLLM_API_KEY={server.api_key}\nONECAT_METRICS_KEY={server.metrics_key}\n"
                    "ONECAT_GUARD_OPEN_PATHS=\n")
    return path


def test_the_benchmark_reads_the_guarded_engines_metrics_with_the_scrapers_key(
        real_server: engine.Server, tmp_path: Path) -> None:
    # The benchmark role passes the serve role's environment file as --api-key-file: the guard
    # answers /metrics to ONECAT_METRICS_KEY only, so the KV-cache peak needs that key.
    summary = engine.onecat_bench(
        real_server, tmp_path / "bench", "--concurrency", "2", "--input-len", "32",
        "--output-len", "32", "--requests-per-level", "4", "--warmup", "0",
        key_file=env_file(real_server, tmp_path))
    level = summary["levels"][0]
    assert level["failed"] == 0
    # Read, not missing (a 401 leaves it None); a level this short may see an idle cache.
    assert level["kv_cache_usage_perc_max"] is not None


def test_multiturn_hit_rate_comes_from_the_real_engines_counters(
        real_server: engine.Server, tmp_path: Path) -> None:
    report = engine.onecat_bench(
        real_server, tmp_path / "multiturn", "--workload", "multiturn", "--conversations", "4",
        "--turns", "3", "--system-len", "160", "--turn-len", "20", "--output-len", "8",
        "--concurrency", "2", key_file=env_file(real_server, tmp_path))
    cache = report["prefix_cache"]
    # Every later turn resends its conversation, and all share the system prompt: the real
    # counters (in tokens, whole CPU blocks) must show hits.
    assert cache["queries"] > 0 and cache["hit_rate"] is not None and cache["hit_rate"] > 0.2, cache


def test_the_burn_in_judges_the_real_engine_under_load_and_records_its_references(
        real_server: engine.Server, libdir: Path, tmp_path: Path) -> None:
    # The GPUs are the NVML double's (the hardware edge); the answers, the load and the
    # likelihoods are the real engine's, under real batching.
    sys.path.insert(0, str(REPO / "tests" / "nvml_double"))
    import nvml_double_harness as double

    def burnin(name: str, *extra: str) -> tuple[int, str, dict]:
        out = tmp_path / f"{name}.json"
        done = subprocess.run(
            [sys.executable, "-m", "onecat.burnin", "--url", real_server.base_url,
             "--model", real_server.served_name,
             "--api-key-file", str(env_file(real_server, tmp_path)), "--seconds", "6",
             "--concurrency", "2", "--max-tokens", "16", "--ask-every", "2",
             "--prompts", str(DEFAULT_FILE), "--out", str(out),
             "--kernel-log", str(double.kernel_log("healthy_pcie_pair")), *extra],
            env=double.double_env(libdir, "healthy_pcie_pair"), capture_output=True,
            text=True, check=False, cwd=REPO, timeout=300)
        return done.returncode, done.stdout + done.stderr, json.loads(out.read_text())

    rc, said, doc = burnin("first")
    assert rc == 0, said
    assert doc["verdict"] == "healthy" and doc["admitted"], doc["findings"]
    assert doc["load"]["completed"] > 0 and doc["load"]["failed"] == 0, doc["load"]
    under_load = doc["answers"]["under_load"]
    assert under_load and all(answer["ok"] for answer in under_load), under_load
    likelihoods = doc["references"]["likelihood"]
    assert likelihoods.keys() == set(SCORE_TEXTS)
    assert all(0 < nll < likelihood.FIRST_MAX_NLL for nll in likelihoods.values())
    # The canary's references, halved: the same engine now "moved", and the burn-in refuses it.
    wrong = tmp_path / "references.json"
    wrong.write_text(json.dumps({"likelihood": {t: v / 2 for t, v in likelihoods.items()}}))
    rc, said, doc = burnin("second", "--references", str(wrong))
    assert rc == 1, said
    assert not doc["admitted"]
    assert any("likelihood moved" in finding["message"] for finding in doc["findings"]), \
        doc["findings"]
