"""Is a freshly started vLLM server really serving? Health, model list, then a smoke completion.

Stdlib only: this file also ships to nodes as ``ansible.module_utils.onecat.serve.gate``, with
the watch's degeneracy detector (``..watch.degenerate``, stdlib only too) that it judges by and
the package's one blocking HTTP client (``..httpsync``, stdlib only: the node's system Python).
A server can answer /health and still produce garbage: NaNs in a broken kernel come out as a
runaway loop (" Paris!!!!!!!!", "…摄氏度度度度度度度度", "巴黎巴黎巴黎巴黎巴黎巴") or random-token
soup, the symptoms the smoke completion looks for.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..httpsync import AnswerTimeout, BadAnswer, request_json
from ..watch.degenerate import degenerate


def judge_smoke(text: str) -> tuple[bool, str]:
    """(passed, reason) for the text of a temperature-0 smoke completion, judged by the watch's
    own degeneracy rules (one detector: a canary that passes here becomes the fleet's reference).
    On characters: the gate asks no /tokenize, and characters are what catch a CJK loop."""
    if not text.strip():
        return False, "the smoke completion returned no text"
    why = degenerate(text)
    if why is not None:
        return False, (f"the smoke completion has degenerated ({why}), the garbage/NaN "
                       "symptom of a broken engine or kernel")
    return True, f"the smoke completion answered {text.strip()[:60]!r}"


# How a malformed answer is named in a reason (the watch's probe tells it from no answer).
MALFORMED_ANSWER = "a malformed HTTP answer"


class Malformed(str):
    """Status 0's answer when something answered, but not with well-formed HTTP: what was wrong."""


# How a request the server accepted and never answered is named in a reason (the watch's
# probe tells a stuck engine from one that is down: onecat/watch/hung.py).
NO_ANSWER_IN_TIME = "no answer in time"


class TimedOut(str):
    """Status 0's answer when the server accepted the request and said nothing in time."""


def _request(url: str, api_key: str, body: dict[str, Any] | None, timeout: float
             ) -> tuple[int, Any]:
    """(HTTP status, parsed JSON or None); status 0 when nothing answered, with a Malformed
    answer when what answered was not well-formed HTTP, or a 200 whose body is not JSON, and
    a TimedOut one when the server took the request and said nothing within the timeout."""
    try:
        answer = request_json(url, body, api_key, timeout)
        if answer.status != 200:
            return answer.status, None
        return 200, answer.json() if answer.body.strip() else None
    except BadAnswer as error:
        return 0, Malformed(str(error))
    except AnswerTimeout as error:
        return 0, TimedOut(str(error))
    except (OSError, ValueError):
        return 0, None


def key_from_env_file(text: str, name: str = "VLLM_API_KEY") -> str:
    """The value of `name` in a docker --env-file text ('' when it has none)."""
    value = ""
    for line in (text or "").splitlines():
        key, sep, rest = line.partition("=")
        if sep and key.strip() == name and not line.lstrip().startswith("#"):
            value = rest.strip()
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
        status, health = _request(f"{base_url}/health", api_key, None, 10)
        if isinstance(health, Malformed):
            last = f"/health gave a malformed HTTP answer ({health})"
        if status == 200:
            status, models = _request(f"{base_url}/v1/models", api_key, None, 10)
            names = served_names(models)
            if status == 200 and served_name in names:
                return True, f"/health is 200 and /v1/models lists {served_name!r}"
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


def smoke(base_url: str, served_name: str, prompt: str, max_tokens: int, api_key: str = "",
          timeout_s: float = 120) -> tuple[bool, str, str]:
    """(passed, reason, text) of one short temperature-0 completion."""
    body = {"model": served_name, "prompt": prompt, "max_tokens": max_tokens,
            "temperature": 0}
    status, answer = _request(f"{base_url}/v1/completions", api_key, body, timeout_s)
    if isinstance(answer, Malformed):
        return False, f"the smoke completion failed: {MALFORMED_ANSWER} ({answer})", ""
    if isinstance(answer, TimedOut):
        return False, (f"the smoke completion failed: {NO_ANSWER_IN_TIME} (the server took "
                       f"the request and said nothing for {timeout_s:.0f} s)"), ""
    if status != 200 or not isinstance(answer, dict):
        return False, f"the smoke completion failed: HTTP {status or 'no answer'}", ""
    try:
        text = str(answer["choices"][0]["text"])
    except (KeyError, IndexError, TypeError):
        return False, "the smoke completion's answer has no choices[0].text", ""
    passed, reason = judge_smoke(text)
    return passed, reason, text
