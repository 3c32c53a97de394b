"""Which engine images can run on a V100: CUDA 12.x only, and never a moving tag.

Stdlib only: this file also ships to nodes as ``ansible.module_utils.onecat.serve.image_ref``.
CUDA 13 dropped sm_70, and upstream `vllm/vllm-openai:latest` is built on it, so an
upstream image must be a pinned tag; its CUDA version is read from the image itself
(NVIDIA's CUDA bases set CUDA_VERSION) once it is on the node.
"""

from __future__ import annotations

import re

MOVING_TAGS = ("latest", "nightly", "main", "stable")
_CUDA_IN_TAG = re.compile(r"(?:^|[-_.])cu(?:da)?-?(\d{2})(\d)?(?:\.\d+)*(?=$|[-_.])")
_CUDA_REPO_TAG = re.compile(r"^(\d+)\.\d+")


def split_ref(ref: str) -> tuple[str, str, str]:
    """'host:5000/repo/name:tag@sha256:...' -> (repository, tag, digest); '' when absent."""
    text = ref.strip()
    digest = ""
    if "@" in text:
        text, digest = text.split("@", 1)
    repo, tag = text, ""
    last = text.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = text.rsplit(":", 1)
    return repo, tag, digest


def cuda_major_of_tag(repo: str, tag: str) -> int | None:
    """CUDA major version a tag names: 'v0.9.2-cu128' -> 12, nvidia/cuda '12.8.1-...' -> 12."""
    if repo.rsplit("/", 1)[-1] == "cuda":
        match = _CUDA_REPO_TAG.match(tag)
        return int(match.group(1)) if match else None
    match = _CUDA_IN_TAG.search(tag.lower())
    return int(match.group(1)) if match else None


def check_image_ref(ref: str, what: str) -> list[str]:
    """Problems with an image reference that must be pinned and CUDA 12.x."""
    if not ref.strip():
        return [f"{what} is empty: name a pinned CUDA 12.x image"]
    repo, tag, digest = split_ref(ref)
    if not tag and not digest:
        return [f"{what} {ref!r} has no tag, so Docker reads it as ':latest' (built on CUDA 13, "
                "no sm_70 kernels): pin a CUDA 12.x tag"]
    if tag.lower() in MOVING_TAGS:
        return [f"{what} {ref!r} uses the moving tag {tag!r} (upstream's latest is built on "
                "CUDA 13, which dropped the V100's sm_70): pin a CUDA 12.x release tag"]
    major = cuda_major_of_tag(repo, tag) if tag else None
    if major is not None and major != 12:
        return [f"{what} {ref!r} is built on CUDA {major}; V100 needs CUDA 12.x "
                "(CUDA 13 removed sm_70)"]
    return []


def check_image_env(env: list[str], what: str, required: bool) -> list[str]:
    """Problems with the CUDA_VERSION an image declares (NVIDIA bases set it)."""
    values = [item.split("=", 1)[1] for item in env if item.startswith("CUDA_VERSION=")]
    if not values:
        if required:
            return [f"{what} declares no CUDA_VERSION, so nobody can tell it is CUDA 12.x; "
                    "use an image built on nvidia/cuda 12.x"]
        return []
    match = re.match(r"^(\d+)\.", values[-1])
    if not match or int(match.group(1)) != 12:
        return [f"{what} is built on CUDA {values[-1]}; V100 needs CUDA 12.x "
                "(CUDA 13 removed sm_70)"]
    return []


def lock_requirements(text: str) -> list[str]:
    """The requirement lines of a pip requirements file, continuation lines joined."""
    joined = re.sub(r"\\\r?\n", " ", text or "")
    lines = []
    for line in joined.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if line:
            lines.append(" ".join(line.split()))
    return lines


# The build variant a torch index serves, from its last path segment (download.pytorch.org's
# whl/cu128, whl/cpu, whl/rocm6.4, whl/xpu; a mirror keeps the segment).
_TORCH_VARIANT = re.compile(r"^(cu\d+|cpu|rocm\d+(\.\d+)*|xpu)$")


def torch_variant(index_url: str) -> str:
    """The local version label (`cu128`, `cpu`...) torch from this index carries, or ""."""
    path = re.sub(r"[?#].*$", "", re.sub(r"^[a-z+]+://[^/]*", "", (index_url or "").strip()))
    last = path.rstrip("/").rsplit("/", 1)[-1]
    return last if _TORCH_VARIANT.match(last) else ""


def _release(version: str) -> tuple[tuple[int, ...], str, str]:
    """PEP 440 as far as `==` needs it (stdlib: this file ships to nodes): the release numbers
    without trailing zeros (2.10 == 2.10.0), the rest of the public version, the local label."""
    public, _, local = version.strip().lower().partition("+")
    match = re.match(r"^v?(\d+(?:\.\d+)*)(.*)$", public)
    if not match:
        return (), public, local
    numbers = [int(n) for n in match.group(1).split(".")]
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers), match.group(2), local


def torch_pin_problem(pinned: str, torch_spec: str, variant: str = "") -> str:
    """Why `pinned` (a version) does not satisfy `torch==V` and the index's variant, or "".

    A prefix match is not enough: `torch==2.1` must not accept 2.10.0, and `torch==2.10.0`
    from a cu128 index must not accept 2.10.0+cpu (a CPU build locked by a resolver that
    guessed the backend)."""
    spec = re.match(r"^\s*torch\s*===?\s*([^\s;,*]+)\s*$", torch_spec or "")
    have = _release(pinned)
    if spec:
        want = _release(spec.group(1))
        if have[:2] != want[:2] or (want[2] and have[2] != want[2]):
            return f"torch=={pinned}, not {torch_spec.strip()!r}"
    if variant and have[2] != variant:
        found = f"+{have[2]}" if have[2] else "no local label"
        return (f"torch=={pinned} ({found}), not the +{variant} build its index "
                f"(.../{variant}) serves")
    return ""


def check_lock(text: str, name: str, torch_spec: str = "", variant: str = "") -> list[str]:
    """Problems of a requirements lock for `pip install --require-hashes`, one sentence each.

    pip refuses the same lock at build time; this names the line before anything is built.
    ``variant`` is the local label torch must carry (torch_variant of its index URL)."""
    problems: list[str] = []
    requirements = lock_requirements(text)
    for line in requirements:
        if line.startswith("-"):
            problems.append(f"{name}: option line {line[:60]!r}: a lock holds requirements only "
                            "(indexes are vllm_serve_image_*_index_url)")
            continue
        if "--hash=sha256:" not in line:
            problems.append(f"{name}: {line[:60]!r} has no --hash=sha256:...: pin every "
                            "requirement by hash (generate the lock with --generate-hashes)")
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?==[^=\s;]+", line):
            problems.append(f"{name}: {line.split()[0][:60]!r} is not pinned with ==")
    if torch_spec and torch_spec.strip():
        pinned = [line for line in requirements if re.match(r"^torch==", line, re.IGNORECASE)]
        if not pinned:
            problems.append(f"{name} does not pin torch (vllm_serve_image_torch_spec is "
                            f"{torch_spec!r}): regenerate the lock with torch in it")
        else:
            version = pinned[0].split()[0].split("==", 1)[1]
            wrong = torch_pin_problem(version, torch_spec, variant)
            if wrong:
                problems.append(f"{name} pins {wrong}: regenerate the lock (onecat engine lock)")
    return problems
