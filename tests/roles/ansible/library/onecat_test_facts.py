#!/usr/bin/python
"""TEST ONLY: report the given facts as the host's facts (fakes the operating system identity)."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: onecat_test_facts
short_description: Test-only module that reports the given dict as ansible_facts.
description: Lets role tests pretend to be another distribution without touching the host.
options:
  facts:
    description: Facts to report.
    type: dict
    required: true
"""


def main() -> None:
    module = AnsibleModule(argument_spec={"facts": {"type": "dict", "required": True}},
                           supports_check_mode=True)
    module.exit_json(changed=False, ansible_facts=module.params["facts"])


if __name__ == "__main__":
    main()
