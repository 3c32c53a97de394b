"""Asking a node's server one question, and judging a smoke completion: the serve gate, the
watch's probe and the burn-in all ask through here.

Stdlib only: ships to nodes with the serve gate (``ansible.module_utils.onecat.answers.ask``),
with the degeneracy detector it judges by and the package's one blocking HTTP client.
"""

from __future__ import annotations

from typing import Any

from ..httpsync import AnswerTimeout, BadAnswer, request_json
from .degenerate import degenerate


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
# probe tells a stuck engine from one that is down: onecat/answers/hung.py).
NO_ANSWER_IN_TIME = "no answer in time"


class TimedOut(str):
    """Status 0's answer when the server accepted the request and said nothing in time."""


def request(url: str, api_key: str, body: dict[str, Any] | None, timeout: float
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


def smoke(base_url: str, served_name: str, prompt: str, max_tokens: int, api_key: str = "",
          timeout_s: float = 120) -> tuple[bool, str, str]:
    """(passed, reason, text) of one short temperature-0 completion."""
    body = {"model": served_name, "prompt": prompt, "max_tokens": max_tokens,
            "temperature": 0}
    status, answer = request(f"{base_url}/v1/completions", api_key, body, timeout_s)
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
