"""Save HAProxy's server states for the process that comes next (stdlib only).

    python3 -m onecat.gateway.save_state /run/haproxy/admin.sock STATE_FILE

haproxy.service runs it itself (roles/gateway's drop-in, haproxy-server-state.conf.j2) right
before every reload and at every stop: the server-state file then holds the states of the
process that ran last, whoever reloaded or restarted it (the role, a package upgrade, an
operator, a reboot), never those of an older one. One line on stderr and exit 1 when HAProxy
does not answer (the unit ignores it, '-'): a gateway that crashed has no state to hand over.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from .runtime import RuntimeApiError, save_server_state


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python3 -m onecat.gateway.save_state ADMIN_SOCKET STATE_FILE",
              file=sys.stderr)
        return 2
    try:
        count = save_server_state(args[0], args[1])
    except (RuntimeApiError, OSError) as error:
        print(f"onecat: the servers' state was not saved: {' '.join(str(error).split())[:300]}",
              file=sys.stderr)
        return 1
    print(f"onecat: saved the state of {count} server(s) to {args[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
