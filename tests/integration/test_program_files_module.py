"""library/program_files.py, run through Ansible: many files in one call, each written only
where it differs, modes repaired, check mode writing nothing, no path out of its folder."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from adhoc_module import run_module

OWNER = {"owner": str(os.getuid()), "group": str(os.getgid())}


def _args(dest: Path, files: dict[str, str]) -> dict:
    return {"dest": str(dest), "files": files, **OWNER}


def test_files_written_once_then_left_alone_and_their_mode_repaired(tmp_path: Path) -> None:
    files = {"onecat/__init__.py": "", "onecat/watch/look.py": "print('look')\n"}
    first = run_module("program_files", _args(tmp_path, files))
    assert first["changed"] and sorted(first["written"]) == sorted(files), first
    assert (tmp_path / "onecat/watch/look.py").read_text() == "print('look')\n"
    assert stat.S_IMODE((tmp_path / "onecat/watch").stat().st_mode) == 0o755
    again = run_module("program_files", _args(tmp_path, files))
    assert not again["changed"] and again["written"] == [], again
    (tmp_path / "onecat/watch/look.py").chmod(0o600)
    repaired = run_module("program_files", _args(tmp_path, files))
    assert repaired["changed"] and repaired["written"] == []
    assert stat.S_IMODE((tmp_path / "onecat/watch/look.py").stat().st_mode) == 0o644
    changed = run_module("program_files", _args(tmp_path, {**files,
                                                           "onecat/watch/look.py": "v2\n"}))
    assert changed["written"] == ["onecat/watch/look.py"]
    assert (tmp_path / "onecat/watch/look.py").read_text() == "v2\n"
    assert not [p for p in (tmp_path / "onecat/watch").iterdir() if p.name.startswith(".")]


def test_check_mode_says_what_would_change_and_writes_nothing(tmp_path: Path) -> None:
    result = run_module("program_files", _args(tmp_path, {"a/b.py": "x\n"}), check=True)
    assert result["changed"] and result["written"] == ["a/b.py"]
    assert not (tmp_path / "a").exists()


def test_a_path_out_of_the_folder_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    for bad in ("../escape.py", "/etc/passwd", "a/../../b.py", "a//b.py"):
        result = run_module("program_files", _args(tmp_path / "dest", {"ok.py": "x",
                                                                       bad: "x"}))
        assert result.get("failed"), result
        assert "is not a relative path inside" in result["msg"]
    assert not (tmp_path / "dest").exists() and not (tmp_path / "escape.py").exists()
