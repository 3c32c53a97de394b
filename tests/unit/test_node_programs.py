"""roles/watch and roles/burnin ship exactly the onecat modules their programs import (the
watch role ships two: the watch and the repair ladder it starts)."""

from __future__ import annotations

import modulefinder
import os
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


PROGRAMS = {"watch": ["watch", "repair"], "burnin": ["burnin"]}


@pytest.mark.parametrize("role", ["watch", "burnin"])
def test_the_role_ships_what_its_program_imports(role: str, tmp_path: Path) -> None:
    entry = tmp_path / "entry.py"
    entry.write_text("".join(f"import onecat.{p}.__main__\n" for p in PROGRAMS[role]))
    finder = modulefinder.ModuleFinder(path=[str(REPO)])
    finder.run_script(str(entry))
    imported = sorted(os.path.relpath(module.__file__, REPO)
                      for name, module in finder.modules.items()
                      if name.startswith("onecat") and module.__file__)
    shipped = yaml.safe_load((REPO / f"roles/{role}/vars/main.yml").read_text())
    assert sorted(shipped[f"__{role}_program_files"]) == imported
    folders = {str(Path(path).parent) for path in imported} - {"onecat"}
    tasks = (REPO / f"roles/{role}/tasks/main.yml").read_text()
    assert all(f"{{{{ {role}_install_dir }}}}/{folder}" in tasks for folder in folders)
