"""Which index each engine requirement may come from, and the environment uv runs in.

uv ranks `--index-url` *last* (it is the default index) and `--extra-index-url` first, and
`--index-strategy unsafe-best-match` takes the highest version from any index: a name that
PyTorch's index hosts can then be won by a higher version planted on PyPI (the torchtriton
attack, which uv's docs cite for that strategy). Hashes pin whatever was chosen; they do not
make the choice safe. So the lock follows uv's PyTorch guide (docs.astral.sh/uv/guides/
integration/pytorch): the torch index is an `explicit` index, the torch family is pinned to it
through `[tool.uv.sources]` in a generated input, and everything else comes from the default
index under uv's default `first-index` strategy.

The torch family is what PyTorch publishes itself (torch*, pytorch-triton*, triton, the
nvidia-* CUDA wheels torch names). The torch index also mirrors ordinary PyPI projects
(setuptools, jinja2, numpy...) at a few old versions; routing those there breaks real
resolutions (vLLM needs a newer setuptools than the mirror holds), so they come from the
default index, where they are published.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from packaging.utils import canonicalize_name

# Names PyTorch itself publishes: on the torch index they are the originals.
FAMILY = re.compile(r"^(torch[a-z0-9-]*|pytorch-triton(-[a-z0-9]+)?|triton|nvidia-[a-z0-9-]+)$")
TORCH_INDEX_NAME = "torch"
# What uv may still read from the environment: proxies, TLS trust, credentials (netrc via
# HOME or NETRC). Every UV_* variable is dropped (--no-config ignores files, not variables:
# UV_TORCH_BACKEND or UV_RESOLUTION would change the lock silently), UV_NATIVE_TLS aside,
# which only says where TLS roots come from.
KEPT_UV = ("UV_NATIVE_TLS",)


def is_family(name: str) -> bool:
    return bool(FAMILY.match(str(canonicalize_name(name))))


def strip_credentials(url: str) -> str:
    """`url` without user:password@ (an annotation or a message never carries a token)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def same_index(a: str, b: str) -> bool:
    return strip_credentials(a).rstrip("/") == strip_credentials(b).rstrip("/")


@dataclass(frozen=True)
class Layout:
    """The indexes of one lock: the torch index (explicit, for the family only) and the
    indexes for everything else, the last of them uv's default index."""

    torch_index: str
    indexes: tuple[str, ...]

    @classmethod
    def of(cls, index_url: str, extra_index_urls: Iterable[str]) -> Layout:
        """The lock's two inputs as the CLI has always taken them: `--index-url` is the torch
        index when extra indexes follow it; a lone `--index-url` serves everything."""
        extras = tuple(extra_index_urls)
        if extras:
            return cls(index_url, extras)
        return cls("", (index_url,) if index_url else ())

    @property
    def default_index(self) -> str:
        return self.indexes[-1] if self.indexes else ""

    def uv_args(self) -> list[str]:
        """The non-torch indexes in priority order: uv's --index ranks above --default-index."""
        args: list[str] = []
        for url in self.indexes[:-1]:
            args += ["--index", url]
        if self.default_index:
            args += ["--default-index", self.default_index]
        return args

    def pyproject(self, requirements: list[str], routed: Iterable[str]) -> str:
        """The generated input: the requirements, the torch index declared `explicit` and the
        routed names pinned to it. Written as JSON strings, which TOML reads as they are."""
        names = sorted({str(canonicalize_name(n)) for n in routed})
        direct = {str(canonicalize_name(requirement_name(r))) for r in requirements}
        dependencies = list(requirements) + [n for n in names if n not in direct]
        lines = ['[project]', 'name = "onecat-engine-image"', 'version = "0"',
                 f"dependencies = [{', '.join(json.dumps(d) for d in dependencies)}]"]
        if self.torch_index and names:
            lines += ["", "[[tool.uv.index]]", f'name = "{TORCH_INDEX_NAME}"',
                      f"url = {json.dumps(self.torch_index)}", "explicit = true",
                      "", "[tool.uv.sources]"]
            lines += [f'{json.dumps(n)} = {{ index = "{TORCH_INDEX_NAME}" }}' for n in names]
        return "\n".join(lines) + "\n"


def requirement_name(requirement: str) -> str:
    """The project name a PEP 508 requirement line starts with."""
    return re.split(r"[\s<>=!~;\[(@]", requirement.strip(), maxsplit=1)[0]


def clean_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment uv runs in: the caller's, without any UV_* setting."""
    source = os.environ if environ is None else environ
    return {key: value for key, value in source.items()
            if not key.startswith("UV_") or key in KEPT_UV}
