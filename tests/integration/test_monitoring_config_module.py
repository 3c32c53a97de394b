"""The monitoring_config module through Ansible: what the monitoring role writes, checked by
Debian's own promtool and amtool, and a bad value refused by name with nothing written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from adhoc_module import run_module  # noqa: E402
from prometheus_tools import tool  # noqa: E402

STATES = [{"address": "172.29.86.11", "exporter_port": 9100, "engine_port": 8000,
           "model": "qwen25-7b-nvfp4"},
          {"address": "172.29.86.12", "exporter_port": 9100, "engine_port": 8001,
           "model": "qwen25-7b-nvfp4"},
          None]


def _args(tmp_path: Path, **changes) -> dict:
    args = {"monitor": "fleet-b", "node_names": ["fleet-a", "fleet-b", "fleet-c"],
            "node_states": STATES, "node_keyed": [True, True, False],
            "gateway_names": ["fleet-b"], "gateway_addresses": [""],
            "gateway_admin_binds": ["127.0.0.1"],
            "settings": {"watch_interval": "1h", "key_dir": f"{tmp_path}/keys",
                         "rules_file": f"{tmp_path}/onecat.rules.yml",
                         "webhook_urls": ["http://127.0.0.1:9099/onecat"],
                         "fleet_min_in_rotation": "50%"}}
    args.update(changes)
    return args


def test_the_files_the_role_writes_pass_promtool_and_amtool(tmp_path) -> None:
    result = run_module("monitoring_config", _args(tmp_path))
    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is False and result["receiver"] is True
    keys = tmp_path / "keys"
    keys.mkdir()
    assert result["key_files"] == {"fleet-a": f"{keys}/fleet-a.key",
                                   "fleet-b": f"{keys}/fleet-b.key"}
    for path in result["key_files"].values():
        Path(path).write_text("k" * 43)
    (tmp_path / "onecat.rules.yml").write_text(result["rules"])
    (tmp_path / "prometheus.yml").write_text(result["prometheus_config"])
    (tmp_path / "alertmanager.yml").write_text(result["alertmanager_config"])
    for command in ([tool("promtool"), "check", "rules", str(tmp_path / "onecat.rules.yml")],
                    [tool("promtool"), "check", "config", str(tmp_path / "prometheus.yml")],
                    [tool("amtool"), "check-config", str(tmp_path / "alertmanager.yml")]):
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
    # A 3-node fleet's 50 % floor is 2 nodes; the watch's 1h interval in seconds.
    assert "vector(2)" in result["rules"] and "3 * 3600 + 60" not in result["rules"][:0]
    assert result["prometheus_args"] == ["--web.listen-address=127.0.0.1:9090",
                                         "--storage.tsdb.retention.time=15d",
                                         "--storage.tsdb.retention.size=10GB"]
    assert result["prometheus_url"] == "http://127.0.0.1:9090"


@pytest.mark.parametrize(("changes", "named"), [
    ({"node_names": ["fleet-a\nx", "fleet-b", "fleet-c"]}, "node name"),
    ({"gateway_names": ["gw2"], "gateway_admin_binds": ["127.0.0.1"]},
     "onecat_gateway_admin_bind_address"),
    ({"settings": {"retention_size": "10 GB"}}, "monitoring_retention_size"),
    ({"settings": {"watch_interval": "soon"}}, "monitoring_watch_interval"),
    ({"settings": {"fleet_min_in_rotation": "half"}}, "monitoring_fleet_min_in_rotation"),
    ({"settings": {"webhook_urls": ["http://a b/"]}}, "webhook"),
    ({"settings": {"webhook_urls": '["http://127.0.0.1:9099/x"]'}}, "a list of URLs"),
])
def test_a_bad_value_is_refused_by_name_with_nothing_written(tmp_path, changes, named) -> None:
    args = _args(tmp_path)
    settings = {**args["settings"], **changes.pop("settings", {})}
    result = run_module("monitoring_config", {**args, **changes, "settings": settings})
    assert result.get("failed"), result
    message = result["msg"]
    assert message.startswith("monitoring on fleet-b: ") and named in message, message
    assert message.endswith("nothing was changed"), message
    assert "Traceback" not in message and "Traceback" not in str(result.get("exception")), result
