"""`onecat model fetch/verify` and `onecat plan hf:` against the Hub stand-in, through the real
huggingface_hub client (HF_ENDPOINT is the only link between them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import hub_standin
import model_fixtures as mf

from onecat.model import fetch as model_fetch
from onecat.model.manifest import MANIFEST_NAME, STAMP_NAME, load_manifest, verify_dir

REPO = Path(__file__).resolve().parents[2]
TOKEN = "hf_standin_secret_token_1234"
# A small Qwen3-shaped checkpoint (a few MB of sparse data): real headers, real layout.
TINY = {**mf.QWEN3_4B, "hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 4,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 64, "vocab_size": 4096}


def _model(root: Path, name: str, shards: int = 2, **changes) -> Path:
    d = mf.build_model(root, TINY, "nvfp4-ct", name=name, shards=shards,
                       config_changes=changes or None)
    (d / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE"}}))
    (d / "tokenizer_config.json").write_text("{}")
    (d / "pytorch_model.bin").write_bytes(b"\x80pickle" * 100)  # never fetched
    (d / "original").mkdir()
    (d / "original" / "consolidated.00.pth").write_bytes(b"x" * 100)  # never fetched
    return d


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    v1 = _model(root, "v1")
    v2 = _model(root, "v2", max_position_embeddings=8192)
    big = mf.build_model(root, {**TINY, "vocab_size": 32768}, "nvfp4-ct", name="big")
    bins = root / "bins"
    bins.mkdir()
    (bins / "config.json").write_text(json.dumps(TINY))
    (bins / "pytorch_model.bin").write_bytes(b"x" * 10)
    return {"v1": v1, "v2": v2, "bins": bins, "big": big}


@pytest.fixture()
def hub(models, monkeypatch):
    server = hub_standin.HubStandin({
        "acme/tiny-nvfp4": {"revisions": {"main": str(models["v1"]), "v2": str(models["v2"])}},
        "acme/private": {"revisions": {"main": str(models["v1"])}, "private": True,
                         "tokens": [TOKEN]},
        "acme/gated": {"revisions": {"main": str(models["v1"])}, "gated": True,
                       "tokens": [TOKEN]},
        "acme/bins-only": {"revisions": {"main": str(models["bins"])}},
        "acme/big": {"revisions": {"main": str(models["big"])}},
    }, tokens=["hf_other_valid_token_000"]).start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setenv("HF_HOME", str(Path(os.environ.get("TMPDIR", "/tmp")) / "onecat-no-hf"))
    yield server
    server.stop()


def cli(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "onecat", *argv], capture_output=True,
                          text=True, cwd=REPO, env={**os.environ, **(env or {})}, timeout=120)


def test_fetch_writes_engine_files_and_a_manifest_checked_against_the_hub(hub, tmp_path):
    dest = tmp_path / "m"
    proc = cli("model", "fetch", "hf:acme/tiny-nvfp4", str(dest), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    commit = hub.repos["acme/tiny-nvfp4"].refs["main"]
    assert out["commit"] == commit and out["downloaded"] is True
    names = sorted(p.name for p in dest.iterdir())
    assert names == sorted(["config.json", "generation_config.json",
                            "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                            "model.safetensors.index.json", "tokenizer.json",
                            "tokenizer_config.json", MANIFEST_NAME, STAMP_NAME] if
                           (dest / STAMP_NAME).exists() else
                           ["config.json", "generation_config.json",
                            "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                            "model.safetensors.index.json", "tokenizer.json",
                            "tokenizer_config.json", MANIFEST_NAME])
    manifest = load_manifest(str(dest))
    snap = hub.repos["acme/tiny-nvfp4"].commits[commit]
    for row in manifest["files"]:
        assert row["sha256"] == snap.files[row["path"]].sha256
        assert row["size"] == snap.files[row["path"]].size
    assert manifest["source"] == "hf:acme/tiny-nvfp4@main" and manifest["commit"] == commit
    assert not Path(str(dest) + ".partial").exists()
    # *.bin and original/ were never requested, not even listed for download.
    assert not [r for r in hub.requests if r["path"].endswith((".bin", ".pth"))]
    # LFS bodies came from the CDN, without the Authorization header.
    cdn = [r for r in hub.requests if r["path"].startswith("/cdn/") and r["method"] == "GET"]
    assert len(cdn) == 2 and not any(r["auth"] for r in cdn)


def test_refetch_of_the_same_commit_downloads_nothing(hub, tmp_path):
    dest = tmp_path / "m"
    assert cli("model", "fetch", "hf:acme/tiny-nvfp4@main", str(dest)).returncode == 0
    sent = hub.body_bytes("/cdn/")
    proc = cli("model", "fetch", "hf:acme/tiny-nvfp4@main", str(dest))
    assert proc.returncode == 0 and "already current" in proc.stdout
    assert hub.body_bytes("/cdn/") == sent


def test_a_new_revision_replaces_the_directory(hub, tmp_path):
    dest = tmp_path / "m"
    assert cli("model", "fetch", "hf:acme/tiny-nvfp4@main", str(dest)).returncode == 0
    proc = cli("model", "fetch", "hf:acme/tiny-nvfp4@v2", str(dest), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["commit"] == hub.repos["acme/tiny-nvfp4"].refs["v2"]
    assert json.loads((dest / "config.json").read_text())["max_position_embeddings"] == 8192


MIB = 1024 * 1024
BIG_SHARD = "model.safetensors"


def _big_shard(hub) -> hub_standin.RepoFileEntry:
    repo = hub.repos["acme/big"]
    return repo.commits[repo.refs["main"]].files[BIG_SHARD]


def _cdn_gets(hub, entry, since: int = 0) -> list[dict]:
    return [r for r in hub.requests[since:] if r["method"] == "GET"
            and r["path"] == f"/cdn/{entry.sha256}" and r["status"] in (200, 206)]


def test_a_dropped_connection_resumes_with_a_range_request(hub, tmp_path):
    entry = _big_shard(hub)
    hub.drop_after[BIG_SHARD] = 15 * MIB
    result = model_fetch.fetch("hf:acme/big", str(tmp_path / "m"), progress=False)
    assert result.downloaded and verify_dir(str(tmp_path / "m"), mode="full")["ok"]
    gets = _cdn_gets(hub, entry)
    # The client writes in 10 MiB chunks: it resumes from the last whole chunk it kept.
    assert [r["range"] for r in gets] == [None, f"bytes={10 * MIB}-"]
    assert gets[0]["sent"] == 15 * MIB and gets[1]["sent"] == entry.size - 10 * MIB


class _Drops(dict):
    """drop_after for one file: the n-th body is cut after cuts[n] bytes (the last repeats)."""

    def __init__(self, name: str, cuts: list[int]) -> None:
        super().__init__({name: cuts[0]})
        self.name, self.cuts = name, list(cuts)

    def pop(self, key, default=None):
        if key != self.name:
            return default
        return self.cuts.pop(0) if len(self.cuts) > 1 else self.cuts[0]


def test_an_interrupted_fetch_leaves_dest_untouched_and_resumes_next_time(hub, tmp_path,
                                                                          monkeypatch):
    dest = tmp_path / "m"
    entry = _big_shard(hub)
    # 15 MiB arrive, then every retry of the client dies at once: the fetch fails.
    monkeypatch.setattr(hub, "drop_after", _Drops(BIG_SHARD, [15 * MIB, 0]))
    proc_error = None
    try:
        model_fetch.fetch("hf:acme/big", str(dest), progress=False)
    except model_fetch.FetchError as error:
        proc_error = str(error)
    assert proc_error and "cannot reach" in proc_error and "\n" not in proc_error
    assert not dest.exists() and Path(str(dest) + ".partial").is_dir()
    monkeypatch.setattr(hub, "drop_after", {})
    before = len(hub.requests)
    model_fetch.fetch("hf:acme/big", str(dest), progress=False)
    # The next run fetches only what is not complete in DEST.partial: this shard (from its
    # start: huggingface_hub >= 1.x keeps no partial file between processes; within one run
    # it resumes with Range, see above); the config files are not requested again.
    gets = _cdn_gets(hub, entry, before)
    assert [r["range"] for r in gets] == [None]
    assert not [r for r in hub.requests[before:] if "/resolve/" in r["path"]
                and r["method"] == "GET"]
    assert verify_dir(str(dest), mode="full")["ok"]


def test_a_corrupt_download_is_refused_and_removed(hub, tmp_path):
    hub.corrupt.add("model-00001-of-00002.safetensors")
    proc = cli("model", "fetch", "hf:acme/tiny-nvfp4", str(tmp_path / "m"))
    assert proc.returncode == 2
    assert "do not match the Hub's manifest" in proc.stderr
    assert "model-00001-of-00002.safetensors" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "m").exists()
    assert not (tmp_path / "m.partial" / "model-00001-of-00002.safetensors").exists()


@pytest.mark.parametrize(("source", "token", "expected"), [
    ("hf:acme/nope", None, "repository not found or private (401)"),
    ("hf:acme/nope", TOKEN, "repository not found (404)"),
    ("hf:acme/tiny-nvfp4@nope", None, "revision 'nope' not found (404)"),
    ("hf:acme/private", None, "set HF_TOKEN"),
    ("hf:acme/gated", None, "gated repository (401): set HF_TOKEN"),
    ("hf:acme/gated", "hf_other_valid_token_000", "has not been granted access (403)"),
    ("hf:acme/tiny-nvfp4", "hf_not_a_token", "HF_TOKEN is invalid"),
    ("hf:acme/bins-only", None, "no *.safetensors weights"),
    ("hf:acme", None, "ORG/NAME"),
    ("node:/srv/models/x", None, "nothing to fetch"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_written(hub, tmp_path, source, token,
                                                          expected):
    env = {"HF_TOKEN": token} if token else {}
    proc = cli("model", "fetch", source, str(tmp_path / "m"), env=env)
    assert proc.returncode == 2, proc.stdout
    assert expected in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "m").exists()
    if token:
        assert token not in proc.stderr + proc.stdout


def test_private_and_gated_with_a_token_from_env_or_file(hub, tmp_path):
    assert cli("model", "fetch", "hf:acme/private", str(tmp_path / "a"),
               env={"HF_TOKEN": TOKEN}).returncode == 0
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    proc = cli("model", "fetch", "hf:acme/gated", str(tmp_path / "b"), "--token-file",
               str(token_file))
    assert proc.returncode == 0, proc.stderr
    assert TOKEN not in proc.stdout + proc.stderr
    assert TOKEN not in (tmp_path / "b" / MANIFEST_NAME).read_text()


def test_unreachable_mirror(tmp_path, monkeypatch):
    proc = cli("model", "fetch", "hf:acme/tiny-nvfp4", str(tmp_path / "m"),
               env={"HF_ENDPOINT": "http://127.0.0.1:9"})
    assert proc.returncode == 2
    assert "cannot reach http://127.0.0.1:9" in proc.stderr and "HF_ENDPOINT" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_too_small_dest_is_refused_before_any_transfer(hub, tmp_path, monkeypatch):
    monkeypatch.setattr(model_fetch.shutil, "disk_usage",
                        lambda path: type("U", (), {"free": 1024})())
    with pytest.raises(model_fetch.FetchError, match="GiB free on its filesystem"):
        model_fetch.fetch("hf:acme/tiny-nvfp4", str(tmp_path / "m"), progress=False)
    assert not [r for r in hub.requests if "/resolve/" in r["path"] or "/cdn/" in r["path"]]
    assert not (tmp_path / "m").exists()


def test_verify_names_every_changed_or_missing_file(hub, tmp_path):
    dest = tmp_path / "m"
    assert cli("model", "fetch", "hf:acme/tiny-nvfp4", str(dest)).returncode == 0
    assert cli("model", "verify", str(dest)).returncode == 0
    shard = dest / "model-00002-of-00002.safetensors"
    with open(shard, "r+b") as handle:  # same size, one byte changed
        handle.seek(100)
        handle.write(b"\xff")
    (dest / "tokenizer.json").unlink()
    proc = cli("model", "verify", str(dest))
    assert proc.returncode == 1
    assert "model-00002-of-00002.safetensors: sha256" in proc.stderr
    assert "tokenizer.json: missing" in proc.stderr
    proc = cli("model", "verify", str(tmp_path))
    assert proc.returncode == 2 and "no onecat-manifest.json" in proc.stderr


def test_plan_over_http_equals_plan_on_disk_and_reads_headers_only(hub, models, tmp_path):
    remote = cli("plan", "hf:acme/tiny-nvfp4@main", "--json")
    assert remote.returncode in (0, 1), remote.stderr
    local = cli("plan", str(models["v1"]), "--json")
    a, b = json.loads(remote.stdout), json.loads(local.stdout)
    assert a.pop("source")["commit"] == hub.repos["acme/tiny-nvfp4"].refs["main"]
    assert a.pop("model_dir").startswith("hf:acme/tiny-nvfp4@main")
    b.pop("model_dir")
    assert a == b
    total = sum(f.size for f in hub.repos["acme/tiny-nvfp4"].commits[
        hub.repos["acme/tiny-nvfp4"].refs["main"]].files.values())
    fetched = sum(r["sent"] for r in hub.requests)
    weights = [r for r in hub.requests if r["path"].endswith(".safetensors") or
               r["path"].startswith("/cdn/")]
    # Every weight read is a range read of the header; the whole exchange is a small
    # fraction of the checkpoint.
    assert weights and all(r["range"] and r["range"].startswith("bytes=") for r in weights
                           if r["method"] == "GET")
    assert fetched < 400_000 < total
    table = cli("plan", "hf:acme/tiny-nvfp4@main")
    assert table.stdout.splitlines()[0].startswith("model       hf:acme/tiny-nvfp4@main")


def test_plan_of_a_missing_repo_is_exit_2(hub):
    proc = cli("plan", "hf:acme/nope@main")
    assert proc.returncode == 2 and "repository not found" in proc.stderr


def test_file_source_copies_sparse_and_keeps_a_fetched_manifest(hub, models, tmp_path):
    first = tmp_path / "cache"
    assert cli("model", "fetch", "hf:acme/tiny-nvfp4", str(first)).returncode == 0
    proc = cli("model", "fetch", f"file:{first}", str(tmp_path / "copy"), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["commit"] == hub.repos["acme/tiny-nvfp4"].refs["main"]
    assert out["digest"] == load_manifest(str(first))["digest"]
    # A plain directory (no manifest): hashed here, engine files only, holes kept.
    proc = cli("model", "fetch", f"file:{models['v1']}", str(tmp_path / "plain"), "--json")
    assert proc.returncode == 0, proc.stderr
    copied = tmp_path / "plain" / "model-00001-of-00002.safetensors"
    assert not (tmp_path / "plain" / "pytorch_model.bin").exists()
    assert copied.stat().st_blocks * 512 < copied.stat().st_size


# --- hostile sources, manifests and Hub answers (docs/hostile-input.md) ----------------------


def _one_line_exit_2(proc: subprocess.CompletedProcess, expected: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert expected in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_a_glob_in_a_hub_file_name_fetches_nothing_beside_it(models, tmp_path, monkeypatch):
    # The client takes allow_patterns as globs whose '*' crosses '/': a repository file named
    # 'x*.safetensors' would pull in xsub/evil.safetensors, listed nowhere.
    repo = tmp_path / "globbed"
    repo.mkdir()
    for name in ("config.json", "model.safetensors.index.json",
                 "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        os.link(models["v1"] / name, repo / name)
    (repo / "x*.safetensors").write_bytes(b"\0" * 16)
    (repo / "xsub").mkdir()
    (repo / "xsub" / "evil.safetensors").write_bytes(b"\0" * 16)
    server = hub_standin.HubStandin({"acme/globbed": {"revisions": {"main": str(repo)}}}).start()
    try:
        proc = cli("model", "fetch", "hf:acme/globbed", str(tmp_path / "m"),
                   env={"HF_ENDPOINT": server.url})
    finally:
        server.stop()
    _one_line_exit_2(proc, "'x*.safetensors' has a name onecat does not fetch")
    assert not [r for r in server.requests if "evil" in r["path"]]
    assert not (tmp_path / "m").exists()


COMMIT_B = "b" * 40


@pytest.mark.parametrize(("tamper", "revision", "expected"), [
    ({"sha": "a/../../etc"}, "main", "the commit 'a/../../etc' (not 40 hex digits)"),
    ({"sha": COMMIT_B}, None, f"and the server answered {COMMIT_B}"),
    ({"entry": {"size": None}}, "main", "with size None"),
    ({"entry": {"size": -5}}, "main", "with size -5"),
    ({"entry": {"lfs": {"oid": "../x", "size": 1, "pointerSize": 1}}}, "main",
     "the sha256 '../x'"),
    ({"loop": True}, "main", "twice (its pages loop)"),
])
def test_a_hostile_hub_answer_is_one_line(hub, tmp_path, tamper, revision, expected):
    hub.tamper.update(tamper)
    commit = hub.repos["acme/tiny-nvfp4"].refs["main"]
    proc = cli("model", "fetch", f"hf:acme/tiny-nvfp4@{revision or commit}", str(tmp_path / "m"))
    _one_line_exit_2(proc, expected)
    assert not (tmp_path / "m").exists()
    assert not [r for r in hub.requests if r["path"].startswith("/cdn/")]


def test_a_huge_api_answer_is_refused_before_it_is_read(hub, tmp_path, monkeypatch):
    monkeypatch.setattr(model_fetch, "MAX_API_BODY", 64 * 1024)
    hub.tamper["pad"] = 1024 * 1024
    with pytest.raises(model_fetch.FetchError, match=r"answered /api/models/.*at most"):
        model_fetch.fetch("hf:acme/tiny-nvfp4", str(tmp_path / "m"), progress=False)
    # (The stand-in records a request when its handler ends, after the client hung up: not
    # waited for here.) Nothing was listed or downloaded, nothing written.
    assert not [r for r in hub.requests if "/tree/" in r["path"] or r["path"].startswith("/cdn/")]
    assert not (tmp_path / "m").exists()


def test_a_token_never_goes_to_a_plain_http_mirror(tmp_path):
    proc = cli("model", "fetch", "hf:acme/tiny-nvfp4", str(tmp_path / "m"),
               env={"HF_ENDPOINT": "http://mirror.example.invalid", "HF_TOKEN": TOKEN})
    _one_line_exit_2(proc, "would cross the network in clear")
    assert TOKEN not in proc.stderr


def test_a_leftover_in_the_partial_folder_does_not_reach_dest(hub, tmp_path):
    partial = tmp_path / "m.partial"
    (partial / "sub").mkdir(parents=True)
    (partial / "stray.safetensors").write_bytes(b"x")
    (partial / "sub" / "notes.txt").write_text("x")
    assert cli("model", "fetch", "hf:acme/tiny-nvfp4", str(tmp_path / "m")).returncode == 0
    listed = {f["path"] for f in load_manifest(str(tmp_path / "m"))["files"]}
    on_disk = {str(p.relative_to(tmp_path / "m")) for p in (tmp_path / "m").rglob("*")}
    assert on_disk - listed <= {MANIFEST_NAME, STAMP_NAME}


def _plain_model(tmp_path: Path, models) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("config.json", "model.safetensors.index.json",
                 "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        os.link(models["v1"] / name, src / name)
    return src


def test_a_file_source_never_follows_a_link_out_of_the_model(models, tmp_path):
    secret = tmp_path / "id_ed25519"
    secret.write_text("PRIVATE KEY\n")
    src = _plain_model(tmp_path, models)
    (src / "merges.txt").symlink_to(secret)
    proc = cli("model", "fetch", f"file:{src}", str(tmp_path / "m"))
    _one_line_exit_2(proc, "merges.txt is a symbolic link")
    assert not (tmp_path / "m").exists() and not (tmp_path / "m.partial").exists()
    (src / "merges.txt").unlink()
    os.mkfifo(src / "vocab.txt")  # would block the copy for ever
    proc = cli("model", "fetch", f"file:{src}", str(tmp_path / "m"))
    _one_line_exit_2(proc, "vocab.txt is a FIFO")


def test_a_manifest_path_through_a_linked_folder_is_refused(models, tmp_path):
    from onecat.model.manifest import build_manifest, hash_file, write_json_atomic

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.json").write_text("{}")
    src = _plain_model(tmp_path, models)
    (src / "sub").symlink_to(outside)
    rows = [{"path": p, "size": os.path.getsize(src / p), "sha256": hash_file(str(src / p))}
            for p in ("config.json", "sub/a.json")]
    write_json_atomic(str(src / MANIFEST_NAME), build_manifest(rows, source=f"file:{src}"))
    proc = cli("model", "fetch", f"file:{src}", str(tmp_path / "m"))
    _one_line_exit_2(proc, "sub is a symbolic link")
    proc = cli("model", "verify", str(src))
    assert proc.returncode == 1 and "sub is a symbolic link" in proc.stderr


def _write_manifest(folder: Path, rows: list[dict]) -> None:
    from onecat.model.manifest import manifest_digest

    manifest = {"format": 1, "source": "file:/x", "files": rows, "total_size": 0}
    try:
        manifest["digest"] = manifest_digest(manifest)
    except (KeyError, TypeError):
        manifest["digest"] = "0" * 64
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest))


EMPTY_SHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def test_verify_never_blocks_on_a_fifo_or_reads_a_device(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    os.mkfifo(folder / "fifo.json")
    (folder / "zero.safetensors").symlink_to("/dev/zero")
    _write_manifest(folder, [{"path": "fifo.json", "size": 0, "sha256": EMPTY_SHA},
                             {"path": "zero.safetensors", "size": 0, "sha256": EMPTY_SHA}])
    proc = cli("model", "verify", str(folder))  # cli() times out after 120 s
    assert proc.returncode == 1, proc.stderr
    assert "fifo.json is a FIFO" in proc.stderr
    assert "zero.safetensors is a symbolic link" in proc.stderr


@pytest.mark.parametrize(("document", "expected"), [
    ({"files": [{"path": ".", "size": 0, "sha256": EMPTY_SHA}]}, "names no file"),
    ({"files": [{"path": "", "size": 0, "sha256": EMPTY_SHA}]}, "not a file name"),
    ({"files": [{"path": "a\0b", "size": 0, "sha256": EMPTY_SHA}]}, "control character"),
    ({"files": [{"path": "a/../../b", "size": 0, "sha256": EMPTY_SHA}]}, "leaves the model"),
    ({"files": [{"path": "a", "size": 1e400, "sha256": EMPTY_SHA}]}, "a byte count"),
    ({"files": [{"path": "a", "size": True, "sha256": EMPTY_SHA}]}, "a byte count"),
    ({"files": [{"path": "a", "size": 1, "sha256": "../../x"}]}, "64 hex digits"),
    ({"files": [{"path": "a", "size": 1, "sha256": EMPTY_SHA}] * 2}, "listed twice"),
    ({"files": {"a": 1}}, "not a onecat manifest"),
    ([1, 2], "not a onecat manifest"),
    ("deep", "nested too deeply"),
])
def test_a_hostile_manifest_is_one_line(tmp_path, document, expected):
    folder = tmp_path / "m"
    folder.mkdir()
    if document == "deep":
        (folder / MANIFEST_NAME).write_text("[" * 100_000 + "]" * 100_000)
    elif isinstance(document, dict):
        _write_manifest(folder, document["files"]) if isinstance(document["files"], list) \
            else (folder / MANIFEST_NAME).write_text(json.dumps(document))
    else:
        (folder / MANIFEST_NAME).write_text(json.dumps(document))
    proc = cli("model", "verify", str(folder))
    _one_line_exit_2(proc, expected)
