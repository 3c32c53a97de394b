"""The repair lease secret rotated (issue 49 item 7), with the real server process on loopback.

After a rotation the server takes the new secret's tokens and, until the next run retires it,
the old secret's: a node that has not got its new token yet keeps its leases. Once the retiring
secret is gone, a token made from it (one copied off a node, say) opens nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lease_harness import SECRET, LeaseServer, token

from onecat.repair import lease_client

NEW = "a-new-secret-for-tests-0123456789abcdefghij"


def new_token(node: str) -> str:
    return hmac.new(NEW.encode(), node.encode(), hashlib.sha256).hexdigest()


def rotated(tmp_path: Path) -> LeaseServer:
    """A server started as the role leaves it after a rotation: the new secret, the old one
    kept as the retiring secret beside it."""
    server = LeaseServer(tmp_path, max_parallel=2, extra=(
        "--retiring-secret-file", str(tmp_path / "secret.retiring")))
    retiring = tmp_path / "secret.retiring"
    retiring.write_text(SECRET + "\n")
    retiring.chmod(0o600)
    server.secret.write_text(NEW + "\n")
    return server


def test_after_a_rotation_the_old_and_the_new_tokens_both_open(tmp_path) -> None:
    server = rotated(tmp_path).start()
    try:
        old = lease_client.take(server.url, "n1", token("n1"), "reset", 600)
        assert old.granted, old
        new = lease_client.take(server.url, "n2", new_token("n2"), "reset", 600)
        assert new.granted, new
        # Each token is its own node's, whichever secret made it.
        assert not lease_client.take(server.url, "n3", token("n1"), "reset", 600).granted
        assert "the retiring secret's tokens still open" in server.events()
    finally:
        server.kill()


def test_once_the_retiring_secret_is_gone_the_old_tokens_open_nothing(tmp_path) -> None:
    server = rotated(tmp_path).start()
    try:
        assert lease_client.take(server.url, "n1", token("n1"), "reset", 600).granted
        (tmp_path / "secret.retiring").unlink()  # what the next run without rotate does
        server.restart()
        refused = lease_client.take(server.url, "n1", token("n1"), "reset, renewed", 600)
        assert not refused.granted and "401" in refused.error, refused
        # The node that got its new token renews the lease it held under the old one.
        renewed = lease_client.take(server.url, "n1", new_token("n1"), "reset, renewed", 600)
        assert renewed.granted, renewed
        assert "renewed node=n1" in server.events()
        assert "still open" not in server.events().rsplit("listening on", 1)[-1]
    finally:
        server.kill()


def test_a_retiring_secret_others_can_read_is_not_used_and_said(tmp_path) -> None:
    server = rotated(tmp_path)
    (tmp_path / "secret.retiring").chmod(0o644)
    server.start()
    try:
        assert not lease_client.take(server.url, "n1", token("n1"), "reset", 600).granted
        assert lease_client.take(server.url, "n1", new_token("n1"), "reset", 600).granted
        assert "the retiring secret is not used" in server.events()
        assert "chmod 600" in server.events()
    finally:
        server.kill()
