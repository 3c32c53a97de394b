"""What every fuzz test shares: Hypothesis profiles, a per-input hang watchdog, the tallies.

A fuzz test is a Hypothesis test whose body is wrapped by ``@fuzz("name")``: each generated
input is counted, runs under a SIGALRM watchdog (an input that takes longer than
``HANG_S`` fails the test as a hang, naming the input), and an unexpected exception is
counted as a crash before Hypothesis shrinks it. ``tests/fuzz/conftest.py`` prints the
tallies in pytest's terminal summary.

Profiles (``ONECAT_FUZZ_PROFILE``):

- ``ci`` (default): derandomized (the same inputs every run, so CI is never flaky), no
  example database, ``examples(n)`` inputs per fuzzer: the whole suite stays well under
  two minutes on two shared cores;
- ``long``: random, with Hypothesis's example database (``.hypothesis/``, so a failure
  found once replays first next time), ``ONECAT_FUZZ_FACTOR`` (default 50) times as many
  inputs. ``benchmarks/fuzz.py`` runs it.
"""

from __future__ import annotations

import functools
import json
import math
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.errors import UnsatisfiedAssumption

PROFILE = os.environ.get("ONECAT_FUZZ_PROFILE", "ci")
FACTOR = float(os.environ.get("ONECAT_FUZZ_FACTOR", "50" if PROFILE == "long" else "1"))
HANG_S = float(os.environ.get("ONECAT_FUZZ_HANG_S", "5"))

_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
          HealthCheck.function_scoped_fixture]
settings.register_profile("ci", deadline=None, derandomize=True, database=None,
                          suppress_health_check=_QUIET, print_blob=True)
settings.register_profile("long", deadline=None, derandomize=False,
                          suppress_health_check=_QUIET, print_blob=True)
settings.load_profile(PROFILE)


def examples(count: int) -> int:
    """Inputs per fuzzer in this profile: `count` in CI, FACTOR times more on demand."""
    return max(1, int(count * FACTOR))


@dataclass
class Tally:
    inputs: int = 0
    crashed: int = 0
    hung: int = 0
    seconds: float = 0.0
    slowest: float = 0.0


TALLIES: dict[str, Tally] = {}


class Hung(BaseException):
    """Raised by the watchdog inside an input that runs past HANG_S (a BaseException, so the
    code under test cannot swallow it with `except Exception`)."""


def _alarm(signum: int, frame: Any) -> None:
    raise Hung()


def fuzz(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Count, time and watch each input of the decorated test body (place it under @given)."""

    def decorate(body: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(body)
        def run_one(*args: Any, **kwargs: Any) -> Any:
            tally = TALLIES.setdefault(name, Tally())
            tally.inputs += 1
            previous = signal.signal(signal.SIGALRM, _alarm)
            signal.setitimer(signal.ITIMER_REAL, HANG_S)
            started = time.perf_counter()
            try:
                return body(*args, **kwargs)
            except Hung:
                tally.hung += 1
                raise AssertionError(f"{name}: one input ran longer than {HANG_S:g} s "
                                     "(a hang); Hypothesis prints it below") from None
            except UnsatisfiedAssumption:
                raise
            except Exception:
                tally.crashed += 1
                raise
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
                elapsed = time.perf_counter() - started
                tally.seconds += elapsed
                tally.slowest = max(tally.slowest, elapsed)

        return run_one

    return decorate


# Strategies -------------------------------------------------------------------------------

SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(-(2**70), 2**70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12))

JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=16)


def deep_json(depth: int) -> str:
    """A JSON text nested `depth` levels deep (Python's parser recurses once per level)."""
    return "[" * depth + "]" * depth


def dumps(value: Any) -> str:
    """JSON text the way a careless writer produces it: NaN and Infinity included."""
    return json.dumps(value, allow_nan=True)


@st.composite
def mutated(draw: st.DrawFn, document: Any, max_edits: int = 4) -> Any:
    """`document` with a few values somewhere inside replaced, removed or retyped."""
    doc = json.loads(json.dumps(document))
    for _ in range(draw(st.integers(0, max_edits))):
        paths = list(_paths(doc))
        if not paths:
            break
        # Shallow keys are the shapes parsers assume first: pick them more often.
        depth = draw(st.integers(1, max(len(p) for p in paths)))
        path = draw(st.sampled_from([p for p in paths if len(p) <= depth]))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        action = draw(st.sampled_from(("replace", "replace", "replace", "drop")))
        if action == "drop" and isinstance(parent, dict):
            del parent[key]
        else:
            parent[key] = draw(JSON)
    return doc


def _paths(doc: Any, prefix: tuple = ()) -> Any:
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield (*prefix, key)
            yield from _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            yield (*prefix, index)
            yield from _paths(value, (*prefix, index))


def finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)
