#!/usr/bin/python
"""Write a set of small files in one module call, each only where it differs."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: program_files
short_description: Write many small files (a program's modules) in one call
description:
  - Writes each file of O(files) under O(dest) where its content differs, atomically (a
    temporary file in the same folder, then a rename), and sets mode and owner where they
    differ. Folders are created as needed.
  - One call instead of one M(ansible.builtin.copy) per file, so shipping the watch's or the
    burn-in's twenty modules costs one round trip to the node, not forty.
  - Paths are relative to O(dest) and may not leave it (no C(..), no absolute path).
version_added: "0.1.0"
options:
  dest:
    description: The folder the files go under.
    type: path
    required: true
  files:
    description: Relative path of each file mapped to its content (text).
    type: dict
    required: true
  mode:
    description: Mode of the files.
    type: str
    default: "0644"
  dir_mode:
    description: Mode of the folders this module creates.
    type: str
    default: "0755"
  owner:
    description: Owner of the files and of the folders this module creates.
    type: str
    default: root
  group:
    description: Group of the files and of the folders this module creates.
    type: str
    default: root
author: onecat
"""

EXAMPLES = r"""
- name: Ship the watch's code.
  program_files:
    dest: /opt/onecat/watch
    files:
      onecat/__init__.py: "{{ lookup('ansible.builtin.file', 'onecat/__init__.py', rstrip=false) }}"
"""

RETURN = r"""
written:
  description: The relative paths whose content was (or in check mode would be) written.
  type: list
  elements: str
  returned: always
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule


def _inside(dest: str, relative: str) -> str | None:
    """The full path of `relative` under `dest`, or None when it would leave it."""
    if not relative or os.path.isabs(relative) or "\x00" in relative:
        return None
    parts = relative.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None
    return os.path.join(dest, *parts)


def _content_differs(path: str, data: bytes) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(len(data) + 1) != data
    except FileNotFoundError:
        return True


def _attributes(module: AnsibleModule, path: str, mode: str, changed: bool) -> bool:
    """Mode, owner and group where they differ; whether anything changed so far."""
    changed = module.set_mode_if_different(path, mode, changed)
    changed = module.set_owner_if_different(path, module.params["owner"], changed)
    return module.set_group_if_different(path, module.params["group"], changed)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "path", "required": True},
            "files": {"type": "dict", "required": True},
            "mode": {"type": "str", "default": "0644"},
            "dir_mode": {"type": "str", "default": "0755"},
            "owner": {"type": "str", "default": "root"},
            "group": {"type": "str", "default": "root"},
        },
        supports_check_mode=True,
    )
    p = module.params
    dest = p["dest"]
    targets = {}
    for relative in sorted(p["files"]):
        path = _inside(dest, relative)
        if path is None:
            module.fail_json(msg=f"program_files: {relative!r} is not a relative path inside "
                                 f"{dest}: give paths like 'onecat/watch/look.py'")
        targets[relative] = path
    changed = False
    written = []
    for relative, path in targets.items():
        data = str(p["files"][relative]).encode("utf-8")
        folder = os.path.dirname(path)
        if not os.path.isdir(folder):
            changed = True
            if not module.check_mode:
                os.makedirs(folder, exist_ok=True)
                _attributes(module, folder, p["dir_mode"], False)
        if _content_differs(path, data):
            changed = True
            written.append(relative)
            if not module.check_mode:
                handle, temporary = tempfile.mkstemp(dir=folder, prefix=".program_files.")
                try:
                    with os.fdopen(handle, "wb") as out:
                        out.write(data)
                    os.replace(temporary, path)
                except OSError as error:
                    if os.path.exists(temporary):
                        os.unlink(temporary)
                    module.fail_json(msg=f"program_files: cannot write {path}: {error.strerror}")
        if module.check_mode and not os.path.exists(path):
            continue
        changed = _attributes(module, path, p["mode"], changed)
    module.exit_json(changed=changed, written=written)


if __name__ == "__main__":
    main()
