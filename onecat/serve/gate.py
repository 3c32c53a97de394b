"""Is a freshly started vLLM server really serving? Health, model list, then a smoke completion.

Stdlib only: this file also ships to nodes as ``ansible.module_utils.onecat.serve.gate``, with
what asks a node a question and judges its answer (``..answers.ask`` and the degeneracy
detector it judges by, stdlib only too: the one home the watch and the burn-in share) and the
package's one blocking HTTP client (``..httpsync``, stdlib only: the node's system Python).
A server can answer /health and still produce garbage: NaNs in a broken kernel come out as a
runaway loop (" Paris!!!!!!!!", "…摄氏度度度度度度度度", "巴黎巴黎巴黎巴黎巴黎巴") or random-token
soup, the symptoms the smoke completion looks for.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..answers.ask import Malformed, judge_smoke, request, smoke

__all__ = ["judge_smoke", "key_from_env_file", "served_names", "smoke", "wait_ready"]


def key_from_env_file(text: str, name: str = "VLLM_API_KEY") -> str:
    """The value of `name` in an environment file ('' when it has none): the serve role's
    docker --env-file (NAME=value), or one a user wrote for a shell (`export NAME=value`, the
    value in quotes). The serve role's keys hold no quotes, so both read the same."""
    value = ""
    for line in (text or "").splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            continue
        key, sep, rest = stripped.removeprefix("export ").partition("=")
        if sep and key.strip() == name:
            value = rest.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
    return value


def served_names(models: Any) -> list[str]:
    """Model ids in an OpenAI /v1/models answer."""
    if not isinstance(models, dict) or not isinstance(models.get("data"), list):
        return []
    return [str(item.get("id")) for item in models["data"] if isinstance(item, dict)]


def wait_ready(base_url: str, served_name: str, timeout_s: float, api_key: str = "",
               is_dead: Callable[[], str] | None = None, interval_s: float = 2.0,
               clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep) -> tuple[bool, str]:
    """Poll until /health is 200 and /v1/models lists `served_name`; stop early when dead."""
    deadline = clock() + timeout_s
    last = "nothing answered yet"
    while True:
        status, health = request(f"{base_url}/health", api_key, None, 10)
        if isinstance(health, Malformed):
            last = f"/health gave a malformed HTTP answer ({health})"
        if status == 200:
            status, models = request(f"{base_url}/v1/models", api_key, None, 10)
            names = served_names(models)
            if status == 200 and served_name in names:
                return True, f"/health is 200 and /v1/models lists {served_name!r}"
            if status in (401, 403):
                # Upstream vLLM's --api-key guards /v1 only: /health answers anyone.
                return False, (f"/v1/models answered {status}: the server does not accept "
                               "the key it was given (the gate sends VLLM_API_KEY from the "
                               "unit's environment file)")
            last = (f"/v1/models answered {status} listing {names} (waiting for "
                    f"{served_name!r})")
        elif status in (401, 403):
            # A server that refuses the key will not change its mind: no point in waiting.
            return False, (f"/health answered {status}: the server does not accept the key "
                           "it was given (the gate sends VLLM_API_KEY from the unit's "
                           "environment file)")
        elif status:
            last = f"/health answered {status}"
        death = is_dead() if is_dead else ""
        if death:
            return False, f"the server died while starting: {death}"
        if clock() >= deadline:
            return False, f"not ready after {timeout_s:.0f} s: {last}"
        sleep(interval_s)
