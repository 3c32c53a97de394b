"""The guard's hold (issue 49 item 1): while the node's watch keeps its hold file, the
gateway's health check (and only it) is answered 503 with the file's reason, so HAProxy takes
the node out on the one channel left when its agent cannot be heard."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from onecat.serve import guard

API, METRICS = "a" * 32, "m" * 32
CHECK = (b"x-onecat-gateway-check", b"1")


def _call(middleware: guard.Guard, path: str, *headers: tuple[bytes, bytes]) -> tuple[int, dict]:
    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    async def app(scope, receive, send_):
        await send_({"type": "http.response.start", "status": 200, "headers": []})
        await send_({"type": "http.response.body", "body": b"{}"})

    middleware.app = app
    scope = {"type": "http", "path": path,
             "headers": [(b"authorization", f"Bearer {API}".encode()), *headers]}
    asyncio.run(middleware(scope, None, send))
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], json.loads(body or b"{}")


@pytest.fixture
def held(tmp_path: Path) -> guard.Guard:
    return guard.Guard(None, api_key=API, metrics_key=METRICS, retiring=(),
                       hold_file=str(tmp_path / "hold"))


def test_without_a_hold_file_the_gateways_check_passes(held: guard.Guard) -> None:
    assert _call(held, "/health", CHECK)[0] == 200


def test_a_hold_file_answers_the_gateways_check_503_with_its_reason(
        held: guard.Guard, tmp_path: Path) -> None:
    (tmp_path / "hold").write_text("the gateway agent on 10.0.0.5:8003 does not answer\x1b[2J\n"
                                   "second line\n")
    status, body = _call(held, "/health", CHECK)
    assert status == 503
    assert body["error"]["message"] == ("held out by the node's watch: the gateway agent on "
                                        "10.0.0.5:8003 does not answer [2J")


def test_the_hold_leaves_every_other_request_alone(held: guard.Guard, tmp_path: Path) -> None:
    (tmp_path / "hold").write_text("held\n")
    # The serve gate's and the watch's own /health carry no gateway header; clients stream on.
    assert _call(held, "/health")[0] == 200
    assert _call(held, "/v1/completions")[0] == 200
    assert _call(held, "/v1/models")[0] == 200


def test_a_check_without_the_key_is_still_401_not_a_reason(held: guard.Guard,
                                                           tmp_path: Path) -> None:
    (tmp_path / "hold").write_text("held\n")
    middleware = held
    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    asyncio.run(middleware({"type": "http", "path": "/health", "headers": [CHECK]}, None, send))
    assert sent[0]["status"] == 401


def test_the_hold_file_defaults_to_the_guards_own_folder(monkeypatch) -> None:
    monkeypatch.delenv("ONECAT_GUARD_HOLD_FILE", raising=False)
    assert guard.Guard(None).hold_file == str(Path(guard.__file__).resolve().parent / "hold")
    monkeypatch.setenv("ONECAT_GUARD_HOLD_FILE", "/run/x/hold")
    assert guard.Guard(None).hold_file == "/run/x/hold"
