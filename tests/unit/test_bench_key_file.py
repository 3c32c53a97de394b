"""The benchmark client's --api-key-file: a key alone, or the serve role's environment file."""

from __future__ import annotations

import pytest

from onecat.bench.cli import _read_key, _read_metrics_key
from onecat.bench.session import BenchError


@pytest.mark.parametrize(("text", "key"), [
    ("sk-abc123\n", "sk-abc123"),
    ("YWJjZGVm==\n", "YWJjZGVm=="),  # a base64 key alone keeps its "="
    ("# serve role\nVLLM_API_KEY=abc\nONECAT_METRICS_KEY=def\n", "abc"),
    ("export VLLM_API_KEY='abc'\n", "abc"),
    # The serve role's file on a loopback node without a key: the server has none.
    ("# serve role\nVLLM_API_KEY=\nONECAT_METRICS_KEY=\n", None),
    ("VLLM_API_KEY=\n", None),
])
def test_key_file_forms(tmp_path, text, key):
    path = tmp_path / "key"
    path.write_text(text)
    assert _read_key(path) == key


def test_empty_or_missing_key_file_is_refused(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n\n")
    with pytest.raises(BenchError, match="is empty"):
        _read_key(empty)
    with pytest.raises(BenchError, match="cannot read --api-key-file"):
        _read_key(tmp_path / "missing")


@pytest.mark.parametrize(("text", "key"), [
    # The serve role's file: the node's guard answers /metrics to the scrapers' key only.
    ("# serve role\nVLLM_API_KEY=abc\nONECAT_METRICS_KEY=def\n", "def"),
    ("export ONECAT_METRICS_KEY='def'\n", "def"),
    ("VLLM_API_KEY=abc\nONECAT_METRICS_KEY=\n", None),
    # A key alone: /metrics gets the API key, as an unguarded vLLM takes.
    ("sk-abc123\n", None),
])
def test_the_metrics_key_comes_from_the_serve_roles_file(tmp_path, text, key):
    path = tmp_path / "key"
    path.write_text(text)
    assert _read_metrics_key(path) == key
    assert _read_metrics_key(None) is None
    assert _read_metrics_key(tmp_path / "missing") is None
