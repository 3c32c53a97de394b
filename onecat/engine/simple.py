"""A package index's simple API, read as pip and uv read it: does it host a project, which
files (and sha256s) does it list, does a file still download.

JSON (PEP 691) where the index offers it, else the HTML of PEP 503, whose links carry the
file's sha256 as a `#sha256=` fragment. Every call goes through net.request (a timeout, https
or loopback http, one line per failure).
"""

from __future__ import annotations

import html.parser
import json
import urllib.parse
from dataclasses import dataclass

from packaging.utils import canonicalize_name

from .errors import EngineLockError
from .indexes import strip_credentials
from .net import request

ACCEPT = ("application/vnd.pypi.simple.v1+json, "
          "application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01")


@dataclass(frozen=True)
class File:
    filename: str
    url: str
    sha256: str


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href") or ""
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append((self._href, "".join(self._text).strip()))
            self._href = None


def project_url(index: str, name: str) -> str:
    return f"{index.rstrip('/')}/{canonicalize_name(name)}/"


def hosts(index: str, name: str) -> bool:
    """Whether `index` serves a page for project `name` (a 404 says it does not)."""
    url = project_url(index, name)
    with request(url, what=f"the package index {strip_credentials(index)}",
                 headers={"Accept": ACCEPT}, ok=(200, 404)) as answer:
        return answer.status == 200


def files(index: str, name: str) -> list[File]:
    """The files `index` lists for project `name` (an empty list when it has no page)."""
    url = project_url(index, name)
    what = f"the package index {strip_credentials(index)}"
    with request(url, what=what, headers={"Accept": ACCEPT}, ok=(200, 404)) as answer:
        if answer.status == 404:
            return []
        body = answer.read()
        kind = answer.headers.get("Content-Type", "")
    if "json" in kind:
        try:
            data = json.loads(body)
            entries = [(f["url"], f["filename"], (f.get("hashes") or {}).get("sha256", ""))
                       for f in data["files"]]
        except (ValueError, KeyError, TypeError) as err:
            raise EngineLockError(f"{what} answered unreadable JSON for {url}: {err}") from None
    else:
        parser = _Links()
        parser.feed(body.decode("utf-8", "replace"))
        entries = []
        for href, text in parser.links:
            base, _, fragment = href.partition("#")
            digest = fragment[len("sha256="):] if fragment.startswith("sha256=") else ""
            entries.append((base, text or base.rsplit("/", 1)[-1], digest))
    return [File(filename, urllib.parse.urljoin(url, link), digest.lower())
            for link, filename, digest in entries]


def downloads(file: File, index: str) -> bool:
    """Whether the file answers (HEAD; an index that refuses HEAD is asked for one byte)."""
    what = f"the package index {strip_credentials(index)}"
    with request(file.url, what=what, method="HEAD", ok=(200, 404, 403, 405, 501)) as answer:
        status = answer.status
    if status in (405, 501):
        with request(file.url, what=what, headers={"Range": "bytes=0-0"},
                     ok=(200, 206, 404, 403)) as answer:
            status = answer.status
    return status in (200, 206)
