"""The onecat modules a module imports (modulefinder over the repository): what a role that
ships stdlib-only code to a host must copy (tests/unit/test_repair_lease_program_files.py,
tests/integration/test_gateway_server_state.py)."""

from __future__ import annotations

import modulefinder
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def onecat_imports(module: str, scratch: Path) -> list[str]:
    """The repository paths of the onecat modules `module` imports (itself included), sorted."""
    entry = scratch / "entry.py"
    entry.write_text(f"import {module}\n")
    finder = modulefinder.ModuleFinder(path=[str(REPO)])
    finder.run_script(str(entry))
    return sorted(os.path.relpath(found.__file__, REPO)
                  for name, found in finder.modules.items()
                  if name.startswith("onecat") and found.__file__)
