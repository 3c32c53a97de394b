"""Ansible filters over onecat.validate: the roles' input checks use the package's own rules.

A thin wrapper: every rule lives in onecat/validate.py (stdlib only), loaded from this
checkout by its path, so neither an installed onecat of another version nor the repository
root on sys.path can change what is checked. Wired by ansible.cfg (filter_plugins) and
linked into each role that uses it (roles/ROLE/filter_plugins), so the role also finds it
under a configuration of its own (molecule writes one).

    {{ {'gateway_port': ['port', gateway_port],
        'gateway_retries': ['count', gateway_retries, 0, 100]} | onecat_input_problems }}
        -> ["gateway_port \"8000\\nx\" is refused: set it to a port from 1 to 65535"]
    {{ '[::1]' | onecat_bare_address }} -> "::1"
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

_SOURCE = Path(__file__).resolve().parents[2] / "onecat" / "validate.py"
_NAME = "_onecat_validate_for_ansible"


def _load() -> Any:
    if _NAME in sys.modules:
        return sys.modules[_NAME]
    spec = importlib.util.spec_from_file_location(_NAME, _SOURCE)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {_SOURCE}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_NAME] = module
    spec.loader.exec_module(module)
    return module


validate = _load()


def input_problems(specs: Mapping[str, Sequence[Any]]) -> list[str]:
    """One message per bad variable: its name, its value as JSON and what it must be."""
    return validate.problems(specs)


def bare_address(value: str) -> str:
    """A bind address without the brackets of an IPv6 literal."""
    return validate.bare_address(str(value))


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"onecat_input_problems": input_problems, "onecat_bare_address": bare_address}
