"""roles/watch ships exactly the onecat modules `python3 -m onecat.watch` imports."""

from __future__ import annotations

import modulefinder
import os
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def test_the_role_ships_what_the_watch_imports(tmp_path: Path) -> None:
    entry = tmp_path / "entry.py"
    entry.write_text("import onecat.watch.__main__\n")
    finder = modulefinder.ModuleFinder(path=[str(REPO)])
    finder.run_script(str(entry))
    imported = sorted(os.path.relpath(module.__file__, REPO)
                      for name, module in finder.modules.items()
                      if name.startswith("onecat") and module.__file__)
    shipped = yaml.safe_load((REPO / "roles/watch/vars/main.yml").read_text())
    assert sorted(shipped["__watch_program_files"]) == imported
    folders = {str(Path(path).parent) for path in imported} - {"onecat"}
    tasks = (REPO / "roles/watch/tasks/main.yml").read_text()
    assert all(f"{{{{ watch_install_dir }}}}/{folder}" in tasks for folder in folders)
