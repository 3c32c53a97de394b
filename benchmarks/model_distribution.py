"""Wall time of the model stage: fetch once, distribute a multi-GB model to 1 and 3 nodes, re-run.

Builds a sparse synthetic checkpoint on the controller (real safetensors headers; Qwen2.5-7B
NVFP4 by default, 5.45 GB apparent size, a few MB on disk), starts N throw-away Debian 12
containers from the node image (`onecat-modelbench-<i>`, docker connection, rsync
preinstalled so the transfer itself is measured), and times `playbooks/model.yml` with
`onecat_model=file:<dir>`:

- fetch: `onecat model fetch` into the controller cache (sparse copy + sha256 of every file);
- distribute to 1 node, then the idempotent re-run (nothing changed: a stat per file);
- distribute to 3 nodes at once (fresh model roots), then the re-run;
- the re-run with `-e onecat_model_verify=full` (every file hashed again on every node).

Nothing is dense on disk: rsync runs with --sparse. The transfer still moves every byte of
the apparent size through the connection (rsync does not know the zeros are holes until
the receiver writes them), so the numbers are a fair stand-in for real weights on a fast
link. Needs what scripts/bootstrap.sh installs (Docker, the node image, rsync).

    PATH=$PWD/.venv/bin:$PATH python benchmarks/model_distribution.py [--model 7b|14b]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
import model_fixtures as mf  # noqa: E402

MODELS = {"7b": mf.QWEN25_7B, "14b": mf.QWEN25_14B,
          # A few MB: checks the script itself in seconds.
          "tiny": {**mf.QWEN25_7B, "hidden_size": 512, "intermediate_size": 1024,
                   "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4,
                   "vocab_size": 4096}}
PREFIX = "onecat-modelbench-"


def sh(*argv: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=check, capture_output=True, text=True, **kwargs)


def node_image() -> str:
    out = sh("docker", "images", "--format", "{{.Repository}}:{{.Tag}}",
             "onecat/debian12-systemd").stdout.split()
    if not out:
        raise SystemExit("model_distribution: no onecat/debian12-systemd image: run "
                         "scripts/bootstrap.sh")
    return "onecat/debian12-systemd:latest" if any(o.endswith(":latest") for o in out) \
        else out[0]


def start_nodes(count: int) -> list[str]:
    image = node_image()
    names = [f"{PREFIX}{i}" for i in range(1, count + 1)]
    for name in names:
        sh("docker", "rm", "-f", name, check=False)
        sh("docker", "run", "-d", "--name", name, "--entrypoint", "sleep", image, "infinity")
        sh("docker", "exec", name, "sh", "-c",
           "command -v rsync >/dev/null || (apt-get install -y -qq rsync >/dev/null 2>&1 || "
           "(apt-get update -qq && apt-get install -y -qq rsync >/dev/null))")
    return names


def stop_nodes(names: list[str]) -> None:
    for name in names:
        sh("docker", "rm", "-f", name, check=False)


def play(inventory: Path, source: str, cache: Path, limit: str, *extra: str) -> float:
    env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_STDOUT_CALLBACK": "default"}
    started = time.monotonic()
    proc = subprocess.run(
        ["ansible-playbook", "-i", str(inventory), str(REPO / "playbooks" / "model.yml"),
         "--limit", limit, "-e", f"onecat_model={source}",
         "-e", f"onecat_model_cache_dir={cache}", *extra],
        cwd=REPO, env=env, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - started
    if proc.returncode:
        raise SystemExit(f"model_distribution: the model stage failed:\n{proc.stdout[-3000:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="7b")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="onecat-modelbench-"))
    names: list[str] = []
    try:
        src = mf.build_model(work / "src", MODELS[args.model], "nvfp4-ct",
                             name=f"qwen25-{args.model}-nvfp4",
                             shards=4 if args.model == "14b" else 2)
        size = sum(p.stat().st_size for p in src.iterdir())
        cache = work / "cache"
        cache.mkdir()
        started = time.monotonic()
        # The folder name the model role gives a file: source's cache copy.
        key = hashlib.sha1(str(src).encode()).hexdigest()[:12]
        sh(sys.executable, "-m", "onecat", "model", "fetch", f"file:{src}",
           str(cache / f"{src.name}@file-{key}"), "--quiet", cwd=REPO)
        fetch_s = time.monotonic() - started
        names = start_nodes(3)
        inventory = work / "inventory.yml"
        inventory.write_text(json.dumps({"v100": {"hosts": {
            n: {"ansible_connection": "community.docker.docker",
                "ansible_python_interpreter": "/usr/bin/python3"} for n in names}}}))
        source = f"file:{src}"
        rows = []
        rows.append(("fetch once on the controller (copy + sha256)", 0, fetch_s))
        first = play(inventory, source, cache, names[0])
        rows.append(("plan + distribute + verify on the node", 1, first))
        rows.append(("re-run, node current", 1, play(inventory, source, cache, names[0])))
        for name in names:
            sh("docker", "exec", name, "rm", "-rf", "/srv/models")
        rows.append(("distribute + verify, 3 nodes at once", 3,
                     play(inventory, source, cache, ",".join(names))))
        rows.append(("re-run, nodes current", 3, play(inventory, source, cache,
                                                       ",".join(names))))
        rows.append(("re-run with -e onecat_model_verify=full", 3,
                     play(inventory, source, cache, ",".join(names),
                          "-e", "onecat_model_verify=full")))
        print(f"model: {src.name}, {size / 1e9:.2f} GB apparent size, "
              f"{len(list(src.iterdir()))} files; {os.cpu_count()} CPU cores")
        print(f"{'step':<54} {'nodes':>5} {'wall s':>7}")
        for label, count, seconds in rows:
            print(f"{label:<54} {count:>5} {seconds:>7.1f}")
    finally:
        stop_nodes(names)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
