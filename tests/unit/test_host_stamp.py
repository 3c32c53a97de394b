"""Stage stamps (onecat.host.stamp): a stage is skipped only while nothing it depends on changed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from onecat.host.stamp import (
    ABSENT,
    STAMP_FORMAT,
    compare,
    file_state,
    fingerprint,
    gpu_query,
    parse_dpkg,
    path_state,
    read_stamp,
    stamp_document,
    unit_state,
    write_stamp,
)

DPKG = (
    "nvidia-container-toolkit\t1.17.8-1\thi \n"
    "docker.io\t20.10.24+dfsg1-1+b3\tii \n"
    "containerd\t1.6.20~ds1-1+b1\trc \n"
)


def _now(tmp_path: Path) -> dict[str, str]:
    return fingerprint(
        {str(tmp_path / "daemon.json"): file_state(str(tmp_path / "daemon.json"))},
        parse_dpkg(DPKG, ["nvidia-container-toolkit", "docker.io"]),
        {"docker.service": "active/enabled"},
    )


def test_file_state_tracks_content_mode_and_absence(tmp_path: Path) -> None:
    path = tmp_path / "daemon.json"
    assert file_state(str(path)) == ABSENT
    path.write_text('{"runtimes": {}}\n')
    path.chmod(0o644)
    first = file_state(str(path))
    assert first.startswith("sha256 ") and "mode 0644" in first
    path.chmod(0o600)
    assert file_state(str(path)) != first
    path.chmod(0o644)
    assert file_state(str(path)) == first
    path.write_text('{"runtimes": {"nvidia": {}}}\n')
    assert file_state(str(path)) != first


def test_a_glob_notices_a_file_added_beside_the_others(tmp_path: Path) -> None:
    (tmp_path / "a.sources").write_text("Types: deb\n")
    pattern = str(tmp_path / "*")
    before = path_state(pattern)
    assert before.startswith("1 files")
    (tmp_path / "docker.sources").write_text("Types: deb\n")
    after = path_state(pattern)
    assert after != before
    # Another stage's file (onecat-*) is that stage's business, not drift here.
    (tmp_path / "onecat-docker.sources").write_text("Types: deb\n")
    assert path_state(pattern) == after
    assert path_state(str(tmp_path / "none" / "*")) == "no match"


def test_dpkg_lines_keep_the_hold_and_name_missing_packages() -> None:
    states = parse_dpkg(DPKG, ["nvidia-container-toolkit", "docker.io", "containerd", "runc"])
    assert states == {
        "nvidia-container-toolkit": "hi 1.17.8-1",
        "docker.io": "ii 20.10.24+dfsg1-1+b3",
        "containerd": "rc 1.6.20~ds1-1+b1",
        "runc": ABSENT,
    }
    unheld = parse_dpkg(DPKG.replace("\thi ", "\tii "), ["nvidia-container-toolkit"])
    assert unheld["nvidia-container-toolkit"] != states["nvidia-container-toolkit"]


def test_a_dpkg_pattern_is_every_package_it_matches() -> None:
    kernels = ("linux-image-6.1.0-28-amd64\t6.1.119-1\tii \n"
               "linux-image-amd64\t6.1.119-1\tii \n"
               "linux-image-6.1.0-25-amd64\t6.1.106-3\trc \n")
    states = parse_dpkg(kernels, ["linux-image-[0-9]*", "linux-image-unsigned-[0-9]*"])
    assert states == {
        "linux-image-[0-9]*": "linux-image-6.1.0-25-amd64 rc 6.1.106-3, "
                              "linux-image-6.1.0-28-amd64 ii 6.1.119-1",
        "linux-image-unsigned-[0-9]*": "no match",
    }


def test_unit_state_includes_its_drop_ins(tmp_path: Path) -> None:
    fragment = tmp_path / "docker.service"
    fragment.write_text("[Service]\nExecStart=/usr/bin/dockerd\n")
    dropin = tmp_path / "override.conf"
    show = (
        f"ActiveState=active\nUnitFileState=enabled\nFragmentPath={fragment}\n"
        f"DropInPaths={dropin}\n"
    )
    dropin.write_text(
        "[Service]\nExecStart=\nExecStart=/usr/bin/dockerd --exec-opt native.cgroupdriver=cgroupfs"
    )
    before = unit_state(show)
    assert before.startswith("active/enabled; ")
    dropin.write_text(
        "[Service]\nExecStart=\nExecStart=/usr/bin/dockerd --exec-opt native.cgroupdriver=systemd\n"
    )
    assert unit_state(show) != before
    assert (
        unit_state("ActiveState=inactive\nUnitFileState=\nFragmentPath=\nDropInPaths=\n")
        == "inactive/none"
    )


def test_compare_is_current_only_when_want_and_fingerprint_match(tmp_path: Path) -> None:
    (tmp_path / "daemon.json").write_text("{}\n")
    now = _now(tmp_path)
    stamp = stamp_document("want-1", {"files": [str(tmp_path / "daemon.json")]}, now)

    assert compare(stamp, "want-1", now).current
    assert not compare(None, "want-1", now).current
    assert "wanted changed" in compare(stamp, "want-2", now).reason
    assert "format" in compare({**stamp, "format": STAMP_FORMAT + 1}, "want-1", now).reason

    (tmp_path / "daemon.json").write_text('{"default-runtime": "runc"}\n')
    verdict = compare(stamp, "want-1", _now(tmp_path))
    assert not verdict.current
    assert verdict.reason.startswith("drift on the node: file:") and "daemon.json" in verdict.reason


def test_compare_names_a_removed_package() -> None:
    then = fingerprint({}, {"nvidia-container-toolkit": "hi 1.17.8-1"}, {})
    now = fingerprint({}, {"nvidia-container-toolkit": ABSENT}, {})
    verdict = compare(
        stamp_document("w", {"packages": ["nvidia-container-toolkit"]}, then), "w", now
    )
    assert not verdict.current
    assert "package:nvidia-container-toolkit: hi 1.17.8-1 -> absent" in verdict.reason


def test_write_stamp_is_atomic_and_reports_only_real_writes(tmp_path: Path) -> None:
    path = str(tmp_path / "stamps" / "driver.json")
    document = stamp_document("w", {"files": ["/b", "/a", "/a"]}, {"file:/a": ABSENT})
    assert write_stamp(path, document) is True
    assert write_stamp(path, document) is False
    assert read_stamp(path) == json.loads(json.dumps(document))
    assert read_stamp(path)["manages"]["files"] == ["/a", "/b"]
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    assert [p.name for p in (tmp_path / "stamps").iterdir()] == ["driver.json"]


def test_a_broken_stamp_reads_as_none_so_the_stage_runs(tmp_path: Path) -> None:
    path = tmp_path / "driver.json"
    path.write_text("{not json")
    assert read_stamp(str(path)) is None
    path.write_text("[1, 2]")
    assert read_stamp(str(path)) is None
    assert not compare(read_stamp(str(path)), "w", {}).current


def test_a_drift_reason_cuts_digests_short(tmp_path: Path) -> None:
    then = fingerprint(
        {"/etc/onecat/vllm.env": "sha256 " + "a" * 64 + " mode 0600 owner 0:0"}, {}, {}
    )
    now = fingerprint(
        {"/etc/onecat/vllm.env": "sha256 " + "b" * 64 + " mode 0600 owner 0:0"}, {}, {}
    )
    reason = compare(stamp_document("w", {}, then), "w", now).reason
    assert reason == (
        "drift on the node: file:/etc/onecat/vllm.env: sha256 aaaaaaaaaaaa… mode 0600 owner 0:0"
        " -> sha256 bbbbbbbbbbbb… mode 0600 owner 0:0"
    )


def test_outputs_are_kept_for_a_skipped_host(tmp_path: Path) -> None:
    result = {"vllm_serve_result": {"serving": True, "image_id": "sha256:abc"}}
    document = stamp_document("w", {"units": ["vllm.service"]}, {}, result)
    path = str(tmp_path / "serve.json")
    write_stamp(path, document)
    assert read_stamp(path)["outputs"] == result
    assert stamp_document("w", {}, {})["outputs"] == {}


def test_a_symlink_moved_to_another_target_is_a_change(tmp_path: Path) -> None:
    for revision in ("rev-a", "rev-b"):
        (tmp_path / revision).mkdir()
        (tmp_path / revision / "config.json").write_text("{}\n")
    link = tmp_path / "qwen"
    link.symlink_to(tmp_path / "rev-a")
    before = file_state(str(link))
    assert before.startswith(f"symlink to {tmp_path / 'rev-a'}; directory mode")
    link.unlink()
    link.symlink_to(tmp_path / "rev-b")
    assert file_state(str(link)) != before
    # The same content behind the link reads the same.
    assert file_state(str(link / "config.json")) == file_state(
        str(tmp_path / "rev-a" / "config.json")
    )


def test_the_driver_stage_reads_persistence_mode_as_its_stamp_does() -> None:
    """kernel.yml turns persistence mode back on by what this query answers; the stamp compares
    the same answer: one command line, or the stage and its stamp could disagree."""
    role_vars = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "roles/nvidia_driver/vars/main.yml").read_text())
    assert role_vars["__nvidia_driver_persistence_query"] == gpu_query(["persistence_mode"])
