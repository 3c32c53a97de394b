"""Where a model comes from: ``hf:ORG/NAME@REVISION``, ``file:/path``, ``node:/path``.

Stdlib only. Which files of a repository the engine loads is decided here too, so that the
fetch, the plan and the docs agree.
"""

from __future__ import annotations

import fnmatch
import os
import re
from typing import NamedTuple

KINDS = ("hf", "file", "node")
DEFAULT_REVISION = "main"

# What vLLM reads from a Hugging Face checkpoint directory (top level only): configs,
# tokenizer, safetensors weights and their index. Never *.bin/*.pth/*.pt (pickles, and a
# second copy of the weights), never original/ (Meta's consolidated checkpoints).
ENGINE_FILES = (
    "config.json", "generation_config.json", "hf_quant_config.json",
    "model.safetensors.index.json", "*.safetensors",
    "tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
    "added_tokens.json", "vocab.json", "vocab.txt", "merges.txt", "chat_template.json",
    "chat_template.jinja", "preprocessor_config.json", "processor_config.json",
)
_REPO_PART = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}"
_REPO_RE = re.compile(rf"{_REPO_PART}/{_REPO_PART}")
_REVISION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,254}")


class SourceError(ValueError):
    """The model source cannot be parsed (invalid input)."""


class Source(NamedTuple):
    kind: str  # hf, file or node
    repo: str | None = None  # hf: ORG/NAME
    revision: str | None = None  # hf: branch, tag or commit
    path: str | None = None  # file:, node:

    @property
    def name(self) -> str:
        """The model's directory name on the nodes (without the commit)."""
        if self.kind == "hf":
            return (self.repo or "").split("/")[1]
        return os.path.basename(os.path.normpath(self.path or ""))

    def __str__(self) -> str:
        if self.kind == "hf":
            return f"hf:{self.repo}@{self.revision}"
        return f"{self.kind}:{self.path}"


def parse_source(text: str) -> Source:
    """Parse a source string; a bare absolute path or directory means ``file:``."""
    text = (text or "").strip()
    if not text:
        raise SourceError("empty model source: use hf:ORG/NAME@REVISION, file:/path or "
                          "node:/path")
    kind, sep, rest = text.partition(":")
    if not sep or kind not in KINDS:
        if text.startswith(("/", "./", "../")) or os.path.isdir(text):
            kind, rest = "file", os.path.abspath(text)  # a bare path: checked as file:PATH
        else:
            raise SourceError(f"model source {text!r}: use hf:ORG/NAME@REVISION, file:/path "
                              "or node:/path")
    if kind == "hf":
        repo, _, revision = rest.partition("@")
        repo = repo.strip().strip("/")
        if not _REPO_RE.fullmatch(repo) or ".." in repo:
            raise SourceError(f"model source {text!r}: the Hub repository must be ORG/NAME")
        revision = revision.strip() or DEFAULT_REVISION
        if not _REVISION_RE.fullmatch(revision) or ".." in revision:
            raise SourceError(f"model source {text!r}: revision {revision!r} is not a branch, "
                              "tag or commit")
        return Source("hf", repo=repo, revision=revision)
    if not rest.startswith("/"):
        raise SourceError(f"model source {text!r}: {kind}: needs an absolute path")
    path = os.path.normpath(rest)
    if path == "/":
        raise SourceError(f"model source {text!r}: {kind}: needs a model directory, not /")
    return Source(kind, path=path)


def legacy_source(model_root: str, model_dir: str) -> Source:
    """The old knob ``onecat_model_dir`` (a directory under the model root, already on the
    node): a ``node:`` source."""
    path = model_dir if model_dir.startswith("/") else os.path.join(model_root, model_dir)
    return parse_source(f"node:{path}")


def engine_file(rel: str) -> bool:
    """Whether the engine loads this repository file (top-level, an ENGINE_FILES pattern)."""
    return "/" not in rel and any(fnmatch.fnmatchcase(rel, pattern) for pattern in ENGINE_FILES)


def select_engine_files(paths: list[str]) -> list[str]:
    """The files to fetch, sorted; SourceError when no safetensors weights are among them."""
    chosen = sorted(p for p in paths if engine_file(p))
    if not any(p.endswith(".safetensors") for p in chosen):
        others = sorted({os.path.splitext(p)[1] or p for p in paths if "/" not in p})
        raise SourceError("no *.safetensors weights at the top level (found: "
                          f"{', '.join(others) or 'nothing'}): onecat serves safetensors "
                          "checkpoints only (convert *.bin/*.pth first)")
    return chosen


def short_commit(commit: str | None) -> str:
    return (commit or "local")[:12]


def revision_dir_name(name: str, commit: str | None) -> str:
    """``<name>@<short-commit>``: one directory per revision under the model root."""
    return f"{name}@{short_commit(commit)}"
