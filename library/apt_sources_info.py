#!/usr/bin/python
"""Ansible module: which apt entries already list given repositories, and whose keys sign them."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: apt_sources_info
short_description: Find apt entries for given repository URIs and read key fingerprints
description:
  - Reads every file apt reads (C(sources.list), C(sources.list.d/*.list) in one-line format,
    C(sources.list.d/*.sources) in deb822 format) and returns the enabled entries whose URI
    is one of I(uris), leaving out the files in I(exclude) (the caller's own).
  - For each entry it returns the fingerprints of the key its C(Signed-By) names (a keyring
    path or an inline key block), and the fingerprints of the files in I(key_files).
  - Fingerprints are computed from the OpenPGP packets (armored or binary); neither gpg nor
    apt is needed. Read-only; supports check mode.
version_added: "0.1.0"
author: onecat developers
options:
  uris:
    description: Repository URIs to look for (compared without trailing slash).
    type: list
    elements: str
    default: []
  exclude:
    description: Source files to ignore (the ones the caller writes itself).
    type: list
    elements: path
    default: []
  key_files:
    description: Key files whose fingerprints to return.
    type: list
    elements: path
    default: []
  root:
    description: apt's configuration folder.
    type: path
    default: /etc/apt
"""

EXAMPLES = r"""
- name: Look for an existing entry of NVIDIA's toolkit repository.
  apt_sources_info:
    uris: ["https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)"]
    exclude: [/etc/apt/sources.list.d/onecat-nvidia-container-toolkit.sources]
  register: existing
"""

RETURN = r"""
entries:
  description: Matching entries, each with file, format (list or deb822), types, uri, suites,
    components, signed_by, trusted, enabled and signed_by_fingerprints.
  returned: always
  type: list
  elements: dict
key_fingerprints:
  description: File path to the fingerprints (upper-case hex) of the primary keys in it; an
    empty list when the file is missing or holds no key.
  returned: always
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.onecat.host.apt import file_fingerprints, find_entries, read_sources


def _fingerprints(source: str) -> list[str]:
    try:
        if source.lstrip().startswith("-----BEGIN PGP") or os.path.isfile(source):
            return file_fingerprints(source)
    except (OSError, ValueError, IndexError):
        pass
    return []


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "uris": {"type": "list", "elements": "str", "default": []},
            "exclude": {"type": "list", "elements": "path", "default": []},
            "key_files": {"type": "list", "elements": "path", "default": []},
            "root": {"type": "path", "default": "/etc/apt"},
        },
        supports_check_mode=True,
    )
    params = module.params
    entries = []
    for entry in find_entries(read_sources(params["root"]), params["uris"], params["exclude"]):
        item = entry.as_dict()
        item["signed_by_fingerprints"] = _fingerprints(entry.signed_by) if entry.signed_by else []
        entries.append(item)
    keys = {path: _fingerprints(path) for path in params["key_files"]}
    module.exit_json(changed=False, entries=entries, key_fingerprints=keys)


if __name__ == "__main__":
    main()
