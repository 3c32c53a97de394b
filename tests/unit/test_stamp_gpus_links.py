"""What a stamp asks of the GPUs and of a folder of links (onecat.host.stamp): persistence mode as
nvidia-smi reports it for every GPU, the NVIDIA devices' /dev/char links by name and target."""

from __future__ import annotations

from pathlib import Path

from onecat.host.stamp import (
    ABSENT,
    STAMP_FORMAT,
    compare,
    fingerprint,
    gpu_query,
    gpu_states,
    link_state,
    stamp_document,
)

# What `nvidia-smi --query-gpu=index,persistence_mode --format=csv,noheader` prints (the real
# tool and tests/kernel_doubles/nvidia-smi alike).
ON = "0, Enabled\n1, Enabled\n"


def test_the_query_is_the_one_the_driver_stage_verifies_persistence_mode_with() -> None:
    assert gpu_query(["persistence_mode"]) == [
        "nvidia-smi", "--query-gpu=index,persistence_mode", "--format=csv,noheader"]


def test_persistence_mode_is_read_per_gpu() -> None:
    assert gpu_states(["persistence_mode"], ON, 0) == {"persistence_mode": "0 Enabled, 1 Enabled"}
    off = gpu_states(["persistence_mode"], "0, Enabled\n1, Disabled\n", 0)
    assert off == {"persistence_mode": "0 Enabled, 1 Disabled"}
    two = gpu_states(["persistence_mode", "compute_mode"], "0, Enabled, Default\n", 0)
    assert two == {"persistence_mode": "0 Enabled", "compute_mode": "0 Default"}
    assert gpu_states(["persistence_mode"], "", 0) == {"persistence_mode": "no GPU"}


def test_a_failing_nvidia_smi_is_a_state_of_its_own() -> None:
    down = gpu_states(["persistence_mode"], "Failed to initialize NVML: Driver/library version "
                      "mismatch\nNVML library version: 535.216\n", 18)
    assert down == {"persistence_mode": "unreadable (nvidia-smi exit 18: Failed to initialize "
                                        "NVML: Driver/library version mismatch)"}
    # An answer of another shape is kept, not dropped: it differs from the usual one.
    odd = gpu_states(["persistence_mode"], "[N/A]\n", 0)
    assert odd != gpu_states(["persistence_mode"], ON, 0)


def test_persistence_mode_turned_off_runs_the_stage_again() -> None:
    then = fingerprint({}, {}, {}, gpus=gpu_states(["persistence_mode"], ON, 0))
    stamp = {"format": STAMP_FORMAT, "want": "w", "fingerprint": then}
    assert compare(stamp, "w", then).current
    now = fingerprint({}, {}, {}, gpus=gpu_states(["persistence_mode"], "0, Enabled\n"
                                                   "1, Disabled\n", 0))
    verdict = compare(stamp, "w", now)
    assert not verdict.current
    assert "gpu:persistence_mode: 0 Enabled, 1 Enabled -> 0 Enabled, 1 Disabled" in verdict.reason


def _dev(root: Path) -> Path:
    """A device folder as nvidia-ctk leaves it: the NVIDIA devices linked from char/, with
    another device's link beside them (udev makes one for every device)."""
    dev = root / "dev"
    (dev / "char").mkdir(parents=True)
    (dev / "nvidia-caps").mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "null",
                 "nvidia-caps/nvidia-cap1"):
        (dev / name).touch()
    links = {"195:0": "../nvidia0", "195:1": "../nvidia1", "195:255": "../nvidiactl",
             "508:0": "../nvidia-uvm", "237:1": "../nvidia-caps/nvidia-cap1", "1:3": "../null"}
    for name, target in links.items():
        (dev / "char" / name).symlink_to(target)
    return dev


def test_the_nvidia_links_are_listed_by_name_and_target(tmp_path: Path) -> None:
    dev = _dev(tmp_path)
    spec = f"{dev}/char -> {dev}/nvidia*"
    assert link_state(spec) == (
        "5 links: 195:0 -> ../nvidia0, 195:1 -> ../nvidia1, 195:255 -> ../nvidiactl, "
        "237:1 -> ../nvidia-caps/nvidia-cap1, 508:0 -> ../nvidia-uvm")
    # Without a pattern: every link of the folder.
    assert link_state(str(dev / "char")).startswith("6 links: 195:0 -> ../nvidia0")
    # Another device's link is not the stage's business.
    (dev / "char" / "1:3").unlink()
    (dev / "char" / "1:5").symlink_to("../null")
    assert link_state(spec).startswith("5 links: ")
    assert link_state(f"{tmp_path}/none -> /dev/nvidia*") == ABSENT
    (dev / "char" / "195:0").unlink()
    (dev / "char" / "195:1").unlink()
    (dev / "char" / "195:255").unlink()
    (dev / "char" / "237:1").unlink()
    (dev / "char" / "508:0").unlink()
    assert link_state(spec) == "no links"


def test_a_removed_or_moved_link_runs_the_stage_again(tmp_path: Path) -> None:
    dev = _dev(tmp_path)
    spec = f"{dev}/char -> {dev}/nvidia*"
    then = fingerprint({}, {}, {}, links={spec: link_state(spec)})
    stamp = {"format": STAMP_FORMAT, "want": "w", "fingerprint": then}
    assert compare(stamp, "w", fingerprint({}, {}, {}, links={spec: link_state(spec)})).current

    (dev / "char" / "195:1").unlink()
    verdict = compare(stamp, "w", fingerprint({}, {}, {}, links={spec: link_state(spec)}))
    assert not verdict.current and f"link:{spec}: 5 links" in verdict.reason
    assert "-> 4 links: 195:0 -> ../nvidia0, 195:255" in verdict.reason

    (dev / "char" / "195:1").symlink_to("../nvidia0")  # back, but to the wrong device
    assert not compare(stamp, "w", fingerprint({}, {}, {},
                                               links={spec: link_state(spec)})).current
    (dev / "char" / "195:1").unlink()
    (dev / "char" / "195:1").symlink_to("../nvidia1")
    assert compare(stamp, "w", fingerprint({}, {}, {}, links={spec: link_state(spec)})).current
    (dev / "nvidia1").unlink()  # the device is gone, its link stays
    assert "195:1 -> ../nvidia1 (dangling)" in link_state(spec)


def test_the_stamp_lists_the_gpu_settings_and_links_it_manages() -> None:
    document = stamp_document("w", {"gpus": ["persistence_mode"],
                                    "links": ["/dev/char -> /dev/nvidia*"]}, {})
    assert document["manages"]["gpus"] == ["persistence_mode"]
    assert document["manages"]["links"] == ["/dev/char -> /dev/nvidia*"]
