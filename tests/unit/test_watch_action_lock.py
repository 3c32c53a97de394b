"""One writer of the watch's action state at a time (onecat/watch/action_lock.py, issue 46):
an operator's `--release` that lands while a look decides is applied after the look, not
written over by it."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from onecat.watch import act, action_lock
from onecat.watch import look as watch_look
from onecat.watch.__main__ import main as watch_main


def test_a_release_while_a_look_decides_is_not_lost(tmp_path: Path, monkeypatch) -> None:
    state_dir, agent = tmp_path / "state", tmp_path / "gateway" / "watch-state"
    state_dir.mkdir()
    agent.parent.mkdir()
    held = {**act.initial_state(), "mode": act.HELD, "since": 1.0,
            "reason": "the engine restart failed"}
    (state_dir / watch_look.ACTION_FILE).write_text(json.dumps(held))
    agent.write_text("maint down #onecat-watch held: the engine restart failed\n")
    release = threading.Thread(target=watch_main, args=([
        "--release", "--state-dir", str(state_dir), "--agent-file", str(agent)],))
    step = act.step

    def step_while_released(*args, **kwargs):
        decided = step(*args, **kwargs)  # from the state before the release: still held
        release.start()
        release.join(1.0)  # unlocked, the release is done by now and the look writes over it
        return decided

    monkeypatch.setattr(act, "step", step_while_released)
    acting = watch_look.Acting(agent_file=agent, restart_engine=lambda: None)
    mode, _, _ = watch_look._act(acting, state_dir, [], time.time())
    assert mode == act.HELD
    release.join(10)
    assert not release.is_alive()
    saved = json.loads((state_dir / watch_look.ACTION_FILE).read_text())
    assert saved["mode"] == act.IN, saved
    assert agent.read_text() == "up\n"


def test_a_holder_that_never_lets_go_is_named_after_the_wait(tmp_path: Path) -> None:
    with action_lock.held(tmp_path):
        started = time.monotonic()
        with pytest.raises(action_lock.ActionBusy, match="fuser -v"), \
                action_lock.held(tmp_path, wait_s=0.3):
            pass
        assert time.monotonic() - started >= 0.3
    with action_lock.held(tmp_path, wait_s=0.1):  # let go: free again
        assert oct(os.stat(tmp_path / action_lock.LOCK_FILE).st_mode & 0o777) == "0o600"
