#!/usr/bin/python
"""Ansible module: check a model directory on the node against its onecat manifest."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_verify
short_description: Check a model directory on the node against its onecat manifest
description:
  - Compares every file of O(path) with the manifest (path, size, sha256) that
    C(onecat model fetch) wrote, and reports what is missing or changed.
  - C(fast) trusts a file whose size and modification time equal what the last full check on
    this node recorded in C(.onecat-verified.json) and hashes every other file, so a current
    copy costs one C(stat) per file; C(full) hashes every file.
  - Also reports the free space of the filesystem that holds O(path) and the bytes already
    there, so a play can refuse a transfer that cannot fit before it starts.
  - A directory that does not exist is reported (C(exists=false)), not an error.
version_added: "0.1.0"
author: onecat developers
options:
  path:
    description: The model directory on the node.
    type: path
    required: true
  manifest:
    description:
      - The manifest the directory must match (the controller's copy). Without it, the
        C(onecat-manifest.json) inside O(path) is used.
    type: dict
  mode:
    description: C(fast) (size and mtime stamp, hash what changed) or C(full) (hash every file).
    type: str
    choices: [fast, full]
    default: fast
  fail_on_mismatch:
    description: Fail when files are missing or changed.
    type: bool
    default: false
notes:
  - Check mode is supported; the module only reads the files (outside check mode it refreshes
    the C(.onecat-verified.json) stamp after hashing, which is a cache, not a change).
seealso:
  - name: onecat model verify
    description: The same check on the command line.
    link: https://example.invalid/onecat/docs/model.md
"""

EXAMPLES = r"""
- name: Check the node's copy of the model.
  model_verify:
    path: /srv/models/Qwen2.5-14B-Instruct-NVFP4@0123456789ab
    manifest: "{{ lookup('ansible.builtin.file', manifest_path) | from_json }}"
  register: model_copy
"""

RETURN = r"""
exists:
  description: Whether O(path) is a directory.
  returned: always
  type: bool
ok:
  description: Every file of the manifest is present with its size and sha256.
  returned: always
  type: bool
problems:
  description: One line per missing or changed file.
  returned: always
  type: list
  elements: str
bad_files:
  description: The paths (relative to O(path)) that are missing or changed.
  returned: always
  type: list
  elements: str
hashed:
  description: Files read and hashed by this check.
  returned: always
  type: int
trusted:
  description: Files passed on their size and mtime stamp.
  returned: always
  type: int
digest:
  description: The manifest's digest.
  returned: always
  type: str
commit:
  description: The commit the manifest records (empty for a directory fetched without one).
  returned: always
  type: str
source:
  description: The source the manifest records.
  returned: always
  type: str
free_bytes:
  description: Free bytes on the filesystem that holds O(path) (or its nearest existing parent).
  returned: always
  type: int
present_bytes:
  description: Bytes already allocated under O(path).
  returned: always
  type: int
msg:
  description: One line saying what was found.
  returned: always
  type: str
"""

import os
import platform

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.onecat.model.manifest import (
    ManifestError,
    load_manifest,
    manifest_digest,
    verify_dir,
)


def _free_bytes(path: str) -> int:
    probe = path
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    stat = os.statvfs(probe)
    return stat.f_bavail * stat.f_frsize


def _present_bytes(path: str) -> int:
    total = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue
    return total


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "manifest": {"type": "dict"},
            "mode": {"type": "str", "default": "fast", "choices": ["fast", "full"]},
            "fail_on_mismatch": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    path, manifest = module.params["path"], module.params["manifest"]
    host = platform.node() or "this host"
    exists = os.path.isdir(path)
    result = {"exists": exists, "ok": False, "problems": [], "bad_files": [], "hashed": 0,
              "trusted": 0, "digest": "", "commit": "", "source": "",
              "free_bytes": _free_bytes(path),
              "present_bytes": _present_bytes(path) if exists else 0}
    try:
        if manifest is None:
            if not exists:
                module.fail_json(msg=f"{host}: {path}: no such model directory", **result)
            manifest = load_manifest(path)
        result["digest"] = manifest_digest(manifest)
        result["commit"] = manifest.get("commit") or ""
        result["source"] = manifest.get("source") or ""
        if manifest.get("digest") not in (None, result["digest"]):
            module.fail_json(msg=f"{host}: the manifest given for {path} does not match its own "
                             "digest (edited or truncated): fetch the model again", **result)
        if exists:
            checked = verify_dir(path, manifest, mode=module.params["mode"],
                                 write_stamp=not module.check_mode)
            result.update({key: checked[key] for key in
                           ("ok", "problems", "bad_files", "hashed", "trusted")})
        else:
            result["bad_files"] = [f["path"] for f in manifest["files"]]
    except ManifestError as error:
        module.fail_json(msg=f"{host}: {error}", **result)
    except OSError as error:
        module.fail_json(msg=f"{host}: {path}: cannot read: {error}", **result)
    if result["ok"]:
        msg = (f"{host}: {path} matches the manifest ({result['hashed']} file(s) hashed, "
               f"{result['trusted']} unchanged since the last full check)")
    elif not exists:
        msg = f"{host}: {path} is not there yet"
    else:
        msg = (f"{host}: {path}: {len(result['problems'])} file(s) do not match the manifest: "
               + "; ".join(result["problems"]))
    if not result["ok"] and exists and module.params["fail_on_mismatch"]:
        module.fail_json(msg=msg, **result)
    module.exit_json(changed=False, msg=msg, **result)


if __name__ == "__main__":
    main()
