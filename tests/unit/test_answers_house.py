"""The house's import direction (issue 47 item 7): onecat/answers sits below the serve gate, the
watch and the burn-in, and nothing runs back up: serve imports no watch, answers imports none of
the three."""

from __future__ import annotations

import ast
from pathlib import Path

ONECAT = Path(__file__).resolve().parents[2] / "onecat"


def _imports(package: str) -> dict[str, set[str]]:
    """{file: the onecat packages it imports}, relative imports resolved."""
    found: dict[str, set[str]] = {}
    for path in sorted((ONECAT / package).glob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = ["onecat", package][: max(2 - node.level + 1, 1)]
                    module = ".".join([*base, *(node.module or "").split(".")]).strip(".")
                else:
                    module = node.module or ""
                names.add(module)
                names.update(f"{module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
        found[path.name] = {n.split(".")[1] for n in names
                            if n.startswith("onecat.") and n.count(".") >= 1}
    return found


def test_the_serve_package_imports_nothing_from_the_watch() -> None:
    offenders = {f: p for f, p in _imports("serve").items() if "watch" in p or "burnin" in p}
    assert offenders == {}


def test_the_answers_package_imports_none_of_the_packages_above_it() -> None:
    imports = _imports("answers")
    assert {"ask.py", "degenerate.py", "likelihood.py", "probe.py", "prompts.py",
            "hung.py"} <= set(imports)
    offenders = {f: p & {"serve", "watch", "burnin", "repair"} for f, p in imports.items()
                 if p & {"serve", "watch", "burnin", "repair"}}
    assert offenders == {}
    assert "answers" in _imports("serve")["gate.py"]
