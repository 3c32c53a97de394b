"""The scrape configuration (onecat/monitoring/scrape.py): what Prometheus is told to scrape,
checked by Debian's own promtool, and hostile inventory values refused or inert."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml
from prometheus_tools import tool

from onecat.monitoring.scrape import Gateway, Node, ScrapeSettings, key_file, render, scrape_config

NODES = [Node("fleet-a", "172.29.86.11", engine_port=8000, model="qwen25-7b-nvfp4",
              engine_key=True),
         Node("fleet-b", "172.29.86.12", engine_port=8001, model="qwen25-7b-nvfp4",
              engine_key=True),
         Node("fleet-c", "172.29.86.13")]
GATEWAYS = [Gateway("fleet-b", "127.0.0.1")]


def _check_config(tmp_path, text: str, settings: ScrapeSettings) -> subprocess.CompletedProcess:
    config = tmp_path / "prometheus.yml"
    config.write_text(text)
    for path in settings.rule_files:
        assert path.startswith(str(tmp_path))
        (tmp_path / path.rsplit("/", 1)[1]).write_text("groups: []\n")
    return subprocess.run([tool("promtool"), "check", "config", str(config)],
                          capture_output=True, text=True, check=False)


def _settings(tmp_path) -> ScrapeSettings:
    return ScrapeSettings(rule_files=(f"{tmp_path}/onecat.rules.yml",),
                          key_dir=f"{tmp_path}/keys")


def test_every_exporter_is_a_job_with_the_labels_a_person_filters_by(tmp_path) -> None:
    settings = _settings(tmp_path)
    (tmp_path / "keys").mkdir()
    for node in NODES:
        if node.engine_key:
            (tmp_path / "keys" / f"{node.name}.key").write_text("k" * 43)
    text = render(NODES, GATEWAYS, settings)
    checked = _check_config(tmp_path, text, settings)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    document = yaml.safe_load(text)
    jobs = {job["job_name"]: job for job in document["scrape_configs"]}
    nodes = jobs["onecat_node"]["static_configs"]
    assert [(g["targets"], g["labels"]) for g in nodes] == [
        (["172.29.86.11:9100"], {"node": "fleet-a"}), (["172.29.86.12:9100"], {"node": "fleet-b"}),
        (["172.29.86.13:9100"], {"node": "fleet-c"})]
    # fleet-c does not serve: no engine job; each serving node's engine has its own key file.
    engine_a = jobs["onecat_engine_fleet-a"]
    assert engine_a["static_configs"] == [{"targets": ["172.29.86.11:8000"],
                                           "labels": {"node": "fleet-a",
                                                      "model": "qwen25-7b-nvfp4"}}]
    assert engine_a["authorization"] == {"type": "Bearer",
                                         "credentials_file": f"{tmp_path}/keys/fleet-a.key"}
    assert {"target_label": "job", "replacement": "onecat_engine"} in engine_a["relabel_configs"]
    assert "onecat_engine_fleet-c" not in jobs
    assert jobs["onecat_gateway"]["static_configs"] == [{"targets": ["127.0.0.1:8404"],
                                                         "labels": {"gateway": "fleet-b"}}]
    # No key in the configuration: only the path of its file.
    assert "k" * 43 not in text


def test_a_node_name_haproxy_rewrites_is_labelled_as_its_server(tmp_path) -> None:
    odd = Node('rack 1"a', "10.0.0.1", engine_port=8000, model='m"{{ $labels.node }}',
               engine_key=True)
    settings = _settings(tmp_path)
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "rack_1_a.key").write_text("k" * 43)
    text = render([odd], [], settings)
    checked = _check_config(tmp_path, text, settings)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    document = yaml.safe_load(text)
    engine = [job for job in document["scrape_configs"]
              if job["job_name"].startswith("onecat_engine")]
    # The label joins HAProxy's server name; the model's braces and quote stay text.
    assert engine[0]["static_configs"][0]["labels"] == {"node": "rack_1_a",
                                                        "model": 'm"{{ $labels.node }}'}
    assert key_file(settings, odd) == f"{tmp_path}/keys/rack_1_a.key"


@pytest.mark.parametrize(("nodes", "gateways", "named"), [
    ([Node("a\nb", "10.0.0.1")], [], "node name"),
    ([Node("a", "10.0.0.1 evil")], [], "node a"),
    ([Node("a", "10.0.0.1", exporter_port=70000)], [], "node a"),
    ([Node("a", "10.0.0.1", engine_port=8000, model="m\nx")], [], "model"),
    ([Node("a b", "10.0.0.1"), Node("a_b", "10.0.0.2")], [], "both be labelled"),
    ([], [Gateway("", "10.0.0.1")], "gateway name"),
])
def test_hostile_values_are_refused_naming_what_to_fix(nodes, gateways, named) -> None:
    with pytest.raises(ValueError) as refused:
        scrape_config(nodes, gateways)
    assert named in str(refused.value)
    assert "\n" not in str(refused.value).replace("\\n", "")


@pytest.mark.parametrize("settings", [
    ScrapeSettings(scrape_interval="15 s"), ScrapeSettings(scrape_interval="1h\n"),
    ScrapeSettings(rule_files=("relative.yml",)),
    ScrapeSettings(extra_labels={"__name__": "x"}),
    ScrapeSettings(extra_labels={"site": "a\nb"}),
])
def test_bad_settings_are_refused(settings) -> None:
    with pytest.raises(ValueError):
        scrape_config(NODES, GATEWAYS, settings)


def test_the_file_is_json_so_no_value_adds_yaml() -> None:
    text = render([Node("a", "10.0.0.1", engine_port=1, model="x: y\n- z".replace("\n", " "))],
                  [])
    body = text.split("\n", 1)[1]
    assert json.loads(body)["scrape_configs"][4]["static_configs"][0]["labels"]["model"] == \
        "x: y - z"
