"""The package's shape: every module imports on its own, and what ships to nodes is self-contained.

Ansible modules under library/ import onecat's pure logic as ansible.module_utils.onecat.*
(module_utils/onecat links to the package); AnsiballZ then ships those files to the node.
There they must be stdlib only and reach their siblings by relative imports: an absolute
`onecat.` import would fail on a node, where no onecat package is installed.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "onecat"
MODULE_UTILS_PREFIX = "ansible.module_utils.onecat."


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


ALL_MODULES = sorted(
    _module_name(p) for p in PACKAGE.rglob("*.py") if p.name != "__main__.py"
)


@pytest.mark.parametrize("module", ALL_MODULES)
def test_every_module_imports_in_isolation(module: str) -> None:
    # A fresh interpreter per module: an import cycle or a hidden dependency on import
    # order shows here even when the whole test session happens to import things first.
    result = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=REPO,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"import {module} failed:\n{result.stderr}"


def _imports(path: Path) -> list[tuple[int, str]]:
    """(level, absolute-or-relative module name) of every import statement in `path`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((0, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is None:
            # `from .. import validate`: each name is a module of that package.
            found.extend((node.level, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module))
    return found


def _resolve(module: str, level: int, name: str) -> str:
    """The absolute name of a relative import made inside `module` (a module, not a package)."""
    base = module.split(".")[:-level]
    return ".".join([*base, name] if name else base)


def shipped_modules() -> set[str]:
    """onecat modules that library/*.py pulls in through ansible.module_utils, transitively."""
    todo = [
        name[len("ansible.module_utils."):]
        for path in (REPO / "library").glob("*.py")
        for _, name in _imports(path)
        if name.startswith(MODULE_UTILS_PREFIX)
    ]
    shipped: set[str] = set()
    while todo:
        module = todo.pop()
        if module in shipped:
            continue
        shipped.add(module)
        for level, name in _imports(REPO / (module.replace(".", "/") + ".py")):
            if level:
                todo.append(_resolve(module, level, name))
    return shipped


def test_library_modules_ship_something() -> None:
    # Guards the test below against passing on an empty set.
    assert {"onecat.health.judge", "onecat.model.plan", "onecat.serve.flags"} <= shipped_modules()


@pytest.mark.parametrize("module", sorted(shipped_modules()))
def test_shipped_module_is_stdlib_only_with_relative_imports(module: str) -> None:
    path = REPO / (module.replace(".", "/") + ".py")
    stdlib = sys.stdlib_module_names | {"__future__"}
    for level, name in _imports(path):
        if level:
            continue
        top = name.split(".")[0]
        assert top in stdlib, (
            f"{path.relative_to(REPO)} ships to nodes but imports {name!r}: use a relative import "
            "for onecat siblings and the standard library for everything else")


def test_module_utils_is_one_link_to_the_package() -> None:
    entries = sorted(p.name for p in (REPO / "module_utils").iterdir())
    assert entries == ["onecat"]
    link = REPO / "module_utils" / "onecat"
    assert link.is_symlink() and link.resolve() == PACKAGE


def test_package_inits_say_what_ships() -> None:
    for init in PACKAGE.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "Ships to nodes" in doc, f"{init.relative_to(REPO)}: say which files ship to nodes"
