"""apt sources and key fingerprints as the roles read them on a host (onecat.host.apt)."""

from __future__ import annotations

from pathlib import Path

from onecat.host.apt import (
    file_fingerprints,
    find_entries,
    fingerprints,
    parse_deb822,
    parse_one_line,
    read_sources,
)

KEYS = Path(__file__).resolve().parents[1] / "fixtures" / "apt-keys"
FPR = (KEYS / "onecat-test.fingerprint").read_text().strip()
TOOLKIT = "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)"


def test_fingerprint_of_armored_and_binary_keys_matches_gpg():
    assert file_fingerprints(str(KEYS / "onecat-test.asc")) == [FPR]
    assert file_fingerprints(str(KEYS / "onecat-test.gpg")) == [FPR]


def test_fingerprint_of_an_inline_deb822_key():
    armored = (KEYS / "onecat-test.asc").read_text()
    # deb822 indents the block and writes its empty line as " ."
    inline = "\n".join(" " + (line or ".") for line in armored.splitlines())
    entry = parse_deb822("x.sources", f"Types: deb\nURIs: http://r.example/\nSuites: /\n"
                                      f"Signed-By:\n{inline}\n")[0]
    assert fingerprints(entry.signed_by.encode()) == [FPR]


def test_one_line_entries_with_options_and_comments():
    text = (f"# NVIDIA's instructions\n"
            "deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] "
            f"{TOOLKIT} /\n"
            "deb [arch=amd64 trusted=yes] http://mirror.example/debian bookworm main non-free\n"
            "#deb http://disabled.example/ bookworm main\n")
    first, second = parse_one_line("/etc/apt/sources.list.d/nvidia.list", text)
    assert (first.uri, first.suites, first.components) == (TOOLKIT, ["/"], [])
    assert first.signed_by == "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
    assert second.trusted and second.components == ["main", "non-free"]


def test_deb822_stanzas_and_disabled_entries():
    text = ("Types: deb\nURIs: https://download.docker.com/linux/debian\nSuites: bookworm\n"
            "Components: stable\nSigned-By: /etc/apt/keyrings/docker.asc\n\n"
            "Types: deb deb-src\nURIs: http://a.example/ http://b.example/\nSuites: x\n"
            "Enabled: no\n")
    docker, a, b = parse_deb822("/etc/apt/sources.list.d/docker.sources", text)
    assert docker.signed_by == "/etc/apt/keyrings/docker.asc" and docker.suites == ["bookworm"]
    assert (a.uri, b.uri, a.enabled) == ("http://a.example/", "http://b.example/", False)


def test_find_entries_by_uri_outside_our_own_files(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text("deb http://deb.debian.org/debian bookworm main\n")
    (tmp_path / "sources.list.d" / "docker.sources").write_text(
        "Types: deb\nURIs: https://Download.Docker.com/linux/debian/\nSuites: bookworm\n"
        "Components: stable\nSigned-By: /etc/apt/keyrings/docker.asc\n")
    ours = tmp_path / "sources.list.d" / "onecat-docker.sources"
    ours.write_text(
        "Types: deb\nURIs: https://download.docker.com/linux/debian\nSuites: bookworm\n")
    found = find_entries(read_sources(str(tmp_path)), ["https://download.docker.com/linux/debian"],
                         [str(ours)])
    assert [e.file for e in found] == [str(tmp_path / "sources.list.d" / "docker.sources")]
