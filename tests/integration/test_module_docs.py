"""Every custom module documents itself: `ansible-doc -M library <module>` renders it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODULES = sorted(p.stem for p in (REPO / "library").glob("*.py"))


@pytest.mark.parametrize("module", MODULES)
def test_module_renders_with_ansible_doc(module: str) -> None:
    ansible_doc = Path(sys.executable).parent / "ansible-doc"
    proc = subprocess.run(
        [str(ansible_doc), "-M", str(REPO / "library"), module],
        capture_output=True, text=True, check=False, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"MODULE {module}" in proc.stdout.replace("\x1b[1m", "").replace("\x1b[0m", "")
    assert "EXAMPLES:" in proc.stdout and "RETURN VALUES:" in proc.stdout
