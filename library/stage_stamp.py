#!/usr/bin/python
"""Ansible module: check or record a stage's stamp on a node (skip a stage with nothing to do)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: stage_stamp
short_description: Check or record whether a onecat stage still has nothing to do on a node
description:
  - With I(state=record), run right after a stage passed, writes
    C(<dir>/<stage>.json) on the node - the digest of what the controller wanted (I(want)),
    the files, packages and units the stage manages, and their fingerprint now (content
    digest, mode and owner of each file or C(absent); C(dpkg-query) status and version of
    each package; C(ActiveState/UnitFileState) of each unit and the content of its unit file
    and drop-ins; the ID of each image; each tree's file sizes and times; the value of each
    GPU setting on every GPU; each symlink set; the running kernel and
    C(/etc/os-release)).
  - With I(state=check), reads that stamp and fingerprints the same things again. I(current)
    is true only when the stamp exists, its I(want) equals the given one and nothing in the
    fingerprint differs; otherwise I(reason) says what differs (a wanted change, or drift
    by hand such as an edited file, a removed or unheld package, a stopped unit, persistence
    mode turned off, a C(/dev/char) link removed).
  - With I(state=record), I(outputs) (what the stage reported when it passed, such as the
    serve stage's result) are kept in the stamp and returned by a check, so a skipped host
    reports the same as one that ran.
  - With I(state=absent), removes the stamp (a stage that failed on the host runs in full
    next time).
  - Check never changes the node. Record writes only when the content differs and not in
    check mode.
version_added: "0.1.0"
author: onecat developers
options:
  stage:
    description: Stage name; the stamp file is C(<dir>/<stage>.json).
    type: str
    required: true
  state:
    description: C(check) compares, C(record) writes, C(absent) removes.
    type: str
    choices: [check, record, absent]
    default: check
  want:
    description: Digest of what the controller wants for this stage on this host (check, record).
    type: str
    default: ""
  outputs:
    description: What the stage reported when it passed (record only).
    type: dict
    default: {}
  files:
    description: Files the stage manages (record only; a missing file is fingerprinted as absent,
      a path with C(*) is a glob, fingerprinted as the set of matching files and each one's state).
    type: list
    elements: path
    default: []
  packages:
    description: Packages the stage manages (record only).
    type: list
    elements: str
    default: []
  units:
    description: systemd units the stage manages (record only).
    type: list
    elements: str
    default: []
  images:
    description:
      - Container images the stage manages, by ID or name (record only), fingerprinted with
        C(docker image inspect) (any image store, any data-root).
    type: list
    elements: str
    default: []
  trees:
    description:
      - Folders the stage manages (record only), fingerprinted by every file's path, size and
        modification time, not content (a model's weights); onecat's own C(.onecat-*) files are
        left out.
    type: list
    elements: path
    default: []
  gpus:
    description:
      - Fields of C(nvidia-smi --query-gpu) the stage sets on every GPU (record only), such as
        C(persistence_mode), fingerprinted as each GPU's value (C(0 Enabled, 1 Enabled)); a
        failing C(nvidia-smi) is fingerprinted by its exit code and first line, a missing one
        as C(no nvidia-smi).
    type: list
    elements: str
    default: []
  links:
    description:
      - Symlink sets the stage manages (record only), each C(FOLDER -> PATTERN) - the links in
        FOLDER whose target (normalized from FOLDER) matches the glob PATTERN, or every link of
        FOLDER without C(" -> PATTERN") - fingerprinted as each link's name and target, such as
        C(/dev/char -> /dev/nvidia*) for the NVIDIA devices' C(/dev/char) links.
    type: list
    elements: str
    default: []
  dir:
    description: Folder of the stamps on the node.
    type: path
    default: /var/lib/onecat/stamps
"""

EXAMPLES = r"""
- name: Check whether the driver stage is current on the host.
  stage_stamp:
    stage: driver
    want: "{{ want_digest }}"
  register: driver_stamp

- name: Record the driver stage's stamp after it passed.
  stage_stamp:
    stage: driver
    state: record
    want: "{{ want_digest }}"
    files: [/etc/apt/preferences.d/onecat-nvidia-driver]
    packages: [nvidia-driver]
    units: [nvidia-persistenced.service]
    gpus: [persistence_mode]

- name: Record the runtime stage's stamp, with the NVIDIA devices' /dev/char links.
  stage_stamp:
    stage: runtime
    state: record
    want: "{{ want_digest }}"
    links: ["/dev/char -> /dev/nvidia*"]
"""

RETURN = r"""
current:
  description: Whether the stage has nothing to do on the node (check); true after record.
  returned: always
  type: bool
reason:
  description: Why the stage is or is not current.
  returned: always
  type: str
path:
  description: The stamp file.
  returned: always
  type: str
fingerprint:
  description: What the stage manages, as found now (key to state).
  returned: when state is check or record
  type: dict
outputs:
  description: What the stage reported when it last passed (from the stamp; empty without one).
  returned: when state is check or record
  type: dict
unchanged:
  description:
    - With I(state=record), whether the stamp already held exactly this record. The stage ran,
      yet what was wanted and what it manages are as they were when it last passed (it put
      drift back, or only rebooted the node), so the stages built on it may trust their own
      stamps.
  returned: when state is record
  type: bool
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.onecat.host.stamp import (
    GPU_FIELD,
    HOST_FILES,
    MANAGED_KINDS,
    UNIT_PROPERTIES,
    compare,
    fingerprint,
    gpu_query,
    gpu_states,
    image_state,
    link_state,
    parse_dpkg,
    path_state,
    read_stamp,
    stamp_document,
    tree_state,
    unit_state,
    write_stamp,
)

DPKG_FORMAT = "-f=${Package}\t${Version}\t${db:Status-Abbrev}\n"


def _packages(module: AnsibleModule, names: list[str]) -> dict[str, str]:
    if not names:
        return {}
    # rc 1: some of the names are not installed at all (they are then "absent").
    rc, out, err = module.run_command(["dpkg-query", "-W", DPKG_FORMAT, *names])
    if rc not in (0, 1):
        module.fail_json(
            msg=f"stage_stamp: dpkg-query could not list {', '.join(names)}: {err.strip()}"
        )
    return parse_dpkg(out, names)


def _units(module: AnsibleModule, names: list[str]) -> dict[str, str]:
    states = {}
    for name in names:
        props = [arg for prop in UNIT_PROPERTIES for arg in ("-p", prop)]
        rc, out, err = module.run_command(["systemctl", "show", *props, name])
        states[name] = unit_state(out) if rc == 0 else f"unreadable ({err.strip() or rc})"
    return states


def _images(module: AnsibleModule, names: list[str]) -> dict[str, str]:
    # Docker's API through its CLI: the same answer with the containerd image store (Docker 29's
    # default on new installs) or a moved data-root, where a path under /var/lib/docker is not.
    states = {}
    for name in names:
        rc, out, _ = module.run_command(["docker", "image", "inspect", "--format", "{{.Id}}",
                                         name])
        states[name] = image_state(name, out, rc)
    return states


def _gpus(module: AnsibleModule, fields: list[str]) -> dict[str, str]:
    # One nvidia-smi call for every field: what the driver stage's own check reads.
    if not fields:
        return {}
    bad = [field for field in fields if not GPU_FIELD.fullmatch(field)]
    if bad:
        module.fail_json(msg=f"stage_stamp: {', '.join(map(repr, bad))} is not an nvidia-smi "
                         "--query-gpu field (lower-case letters, digits, _ and .)")
    if not module.get_bin_path("nvidia-smi"):
        return {field: "no nvidia-smi" for field in fields}
    rc, out, err = module.run_command(gpu_query(fields))
    return gpu_states(fields, out if rc == 0 or out.strip() else err, rc)


def _fingerprint(module: AnsibleModule, manages: dict[str, list[str]]) -> dict[str, str]:
    files = sorted(set(manages.get("files", [])) | set(HOST_FILES))
    return fingerprint(
        {path: path_state(path) for path in files},
        _packages(module, sorted(set(manages.get("packages", [])))),
        _units(module, sorted(set(manages.get("units", [])))),
        _images(module, sorted(set(manages.get("images", [])))),
        {path: tree_state(path) for path in sorted(set(manages.get("trees", [])))},
        _gpus(module, sorted(set(manages.get("gpus", [])))),
        {spec: link_state(spec) for spec in sorted(set(manages.get("links", [])))},
    )


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "stage": {"type": "str", "required": True},
            "state": {"type": "str", "choices": ["check", "record", "absent"], "default": "check"},
            "want": {"type": "str", "default": "", "no_log": False},
            "outputs": {"type": "dict", "default": {}},
            "files": {"type": "list", "elements": "path", "default": []},
            "packages": {"type": "list", "elements": "str", "default": []},
            "units": {"type": "list", "elements": "str", "default": []},
            "images": {"type": "list", "elements": "str", "default": []},
            "trees": {"type": "list", "elements": "path", "default": []},
            "gpus": {"type": "list", "elements": "str", "default": []},
            "links": {"type": "list", "elements": "str", "default": []},
            "dir": {"type": "path", "default": "/var/lib/onecat/stamps"},
        },
        supports_check_mode=True,
    )
    params = module.params
    stage = params["stage"]
    if not stage.replace("_", "").replace("-", "").isalnum():
        module.fail_json(
            msg=f"stage_stamp: stage {stage!r} must be letters, digits, - or _ (it names a file)"
        )
    path = os.path.join(params["dir"], f"{stage}.json")

    if params["state"] in ("check", "record") and not params["want"]:
        module.fail_json(
            msg=f"stage_stamp: want is empty for the {stage} stage (state={params['state']})"
        )

    if params["state"] == "absent":
        exists = os.path.exists(path)
        if exists and not module.check_mode:
            try:
                os.remove(path)
            except OSError as err:
                module.fail_json(msg=f"stage_stamp: cannot remove the {stage} stamp {path}: {err}")
        module.exit_json(changed=exists, current=False, reason="removed", path=path)

    if params["state"] == "check":
        stamp = read_stamp(path)
        manages = stamp.get("manages") if stamp else None
        now = _fingerprint(module, manages if isinstance(manages, dict) else {})
        verdict = compare(stamp, params["want"], now)
        outputs = stamp.get("outputs") if stamp else None
        module.exit_json(
            changed=False,
            current=verdict.current,
            reason=verdict.reason,
            path=path,
            fingerprint=now,
            outputs=outputs if isinstance(outputs, dict) else {},
        )

    manages = {kind: params[kind] for kind in MANAGED_KINDS}
    now = _fingerprint(module, manages)
    document = stamp_document(params["want"], manages, now, params["outputs"])
    if module.check_mode:
        changed = read_stamp(path) != document
    else:
        try:
            changed = write_stamp(path, document)
        except OSError as err:
            module.fail_json(
                msg=f"stage_stamp: cannot write the {stage} stamp {path}: {err}; "
                f"check that {params['dir']} is writable by root"
            )
    module.exit_json(
        changed=changed,
        current=True,
        reason="recorded",
        path=path,
        fingerprint=now,
        outputs=params["outputs"],
        unchanged=not changed,
    )


if __name__ == "__main__":
    main()
