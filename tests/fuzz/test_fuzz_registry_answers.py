"""Fuzz what a registry, its token service and a wheel URL give the engine lock (issue 49).

Contract: `registry.resolve` returns the base's digests or raises one EngineLockError line,
whatever the registry answers (status, headers, bodies that are not JSON, JSON of any shape,
challenges naming any realm); `wheel.filename` returns a plain file name (no separator, no
NUL, not hidden) or one EngineLockError line. Never another exception. The registry's
answers are served from memory (Registry._call patched), so each input costs microseconds;
tests/integration/test_engine_lock_hostile_answers.py asks the same over real HTTP.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fuzzkit import JSON, examples, fuzz, mutated
from hypothesis import example, given, settings
from hypothesis import strategies as st

from onecat.engine import registry, wheel
from onecat.engine.errors import EngineLockError

DIGEST = "sha256:" + "a" * 64
CONFIG = "sha256:" + "b" * 64
INDEX = {"schemaVersion": 2, "mediaType": registry.OCI_INDEX,
         "manifests": [{"mediaType": registry.OCI_MANIFEST, "digest": DIGEST, "size": 10,
                        "platform": {"os": "linux", "architecture": "amd64"}}]}
MANIFEST = {"schemaVersion": 2, "mediaType": registry.OCI_MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": CONFIG, "size": 5}, "layers": []}


@contextmanager
def serving(answers: list[tuple[int, dict[str, str], bytes]]) -> Iterator[None]:
    """Registry._call answers these, in turn (the last one again when they run out), with a
    Docker-Content-Digest that matches each body unless the answer sets its own."""
    original = registry.Registry._call
    calls = iter(range(10_000))

    def call(self: registry.Registry, path: str, repository: str, method: str = "GET",
             accept: str = registry.ACCEPT) -> tuple[int, dict[str, str], bytes]:
        status, headers, body = answers[min(next(calls), len(answers) - 1)]
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        return status, {"docker-content-digest": digest, **headers}, body

    registry.Registry._call = call  # type: ignore[method-assign]
    try:
        yield
    finally:
        registry.Registry._call = original  # type: ignore[method-assign]


def body_of(value: Any) -> bytes:
    return value if isinstance(value, bytes) else json.dumps(value, allow_nan=True).encode()


ANSWER = st.tuples(st.sampled_from([200, 200, 200, 401, 404, 500]),
                   st.fixed_dictionaries({}, optional={
                       "content-type": st.sampled_from([registry.OCI_INDEX, registry.DOCKER_LIST,
                                                        registry.OCI_MANIFEST, "text/html", ""]),
                       "docker-content-digest": st.sampled_from(["", "sha256:zz", DIGEST])}),
                   (mutated(INDEX, max_edits=3) | mutated(MANIFEST, max_edits=3) | JSON
                    | st.binary(max_size=64)).map(body_of))


def resolved_or_one_line() -> None:
    try:
        registry.resolve("127.0.0.1:5000/test/base:1.0")
    except EngineLockError as err:
        assert "\n" not in str(err), str(err)


@settings(max_examples=examples(300))
@given(st.lists(ANSWER, min_size=1, max_size=4))
@example([(200, {"content-type": registry.OCI_INDEX}, body_of({"manifests": 5}))])
@example([(200, {"content-type": registry.OCI_INDEX},
           body_of({"manifests": [1, "x", {"platform": "linux"}]}))])
@example([(200, {"content-type": registry.OCI_MANIFEST}, b"[1, 2]")])
@example([(200, {"content-type": registry.OCI_MANIFEST},
           body_of({**MANIFEST, "config": "not an object"}))])
@fuzz("engine lock: registry answers")
def test_any_registry_answer_gives_the_digests_or_one_line(answers):
    with serving(answers):
        resolved_or_one_line()


REALMS = st.sampled_from(["file:///etc/passwd", "ftp://127.0.0.1/t", "http://10.0.0.1/t",
                          "gopher://x", "", "https://", "http://[::1", "data:,token"])


@settings(max_examples=examples(100))
@given(REALMS | st.text(max_size=40), st.text(max_size=20))
@example("file:///dev/stdin", "reg")
@fuzz("engine lock: token challenges")
def test_any_token_challenge_is_asked_over_http_only_or_refused(realm, service):
    """A 401 whose challenge names any realm: only an https one (http on loopback) is asked
    (the token service is recorded here, never reached)."""
    challenge = f'Bearer realm="{realm}",service="{service}"'
    asked: list[str] = []
    original = registry.request

    def request(url: str, **kwargs: Any) -> Any:
        asked.append(url)
        raise EngineLockError("the token service is not reachable here")

    registry.request = request  # type: ignore[assignment]
    try:
        registry.Registry("https://reg.example", 1.0)._token(challenge, "r", "u")
    except EngineLockError as err:
        assert "\n" not in str(err)
    finally:
        registry.request = original  # type: ignore[assignment]
    for url in asked:
        assert url.startswith(("https://", "http://127.0.0.1", "http://localhost",
                               "http://[::1]")), url


@settings(max_examples=examples(300))
@given(st.text(max_size=60) | st.builds(lambda s: f"https://h/dl/{s}", st.text(max_size=40)))
@example("https://h/dl/1cat_vllm-1.5.0-1%2F..%2F..%2Fevil-cp312-cp312-linux_x86_64.whl")
@example("https://h/dl/%2e%2e%2fx.whl")
@example("https://h/dl/a%00.whl")
@fuzz("engine lock: wheel names")
def test_a_wheel_name_is_a_plain_file_name_or_refused(source):
    try:
        name = wheel.filename(source)
    except EngineLockError as err:
        assert "\n" not in str(err)
        return
    assert name and not name.startswith(".") and name.isprintable()
    assert not any(c in name for c in "/\\\0"), name
