"""A server on loopback that answers every request with the same malformed HTTP (for the
tests of every HTTP client in the package: the gate, the watch's probe, the burn-in, the bench).

    with serving(ANSWERS["bad-chunk"]) as url:
        ...  # http://127.0.0.1:PORT
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

# What each misbehaving server sends back, whatever it was asked (a tuple: pieces sent 50 ms
# apart, so that a client has parsed the head before the bad part comes).
ANSWERS: dict[str, bytes | tuple[bytes, ...]] = {
    "bad-chunk": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    "long-header": b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * 70_000 + b"\r\n\r\n",
    "not-http": b"SSH-2.0-OpenSSH_9.2\x00\x1b[31m\r\n",
    "cut-body": b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"choices\": [",
    "late-bad-chunk": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                       b"9\r\ndata: {}\n\r\n", b"zz\r\n"),
}


def read_request(conn: socket.socket) -> None:
    """The whole request (head and body), so the answer never races the client's send."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return
        body += chunk


@contextlib.contextmanager
def serving(answer: bytes | tuple[bytes, ...]) -> Iterator[str]:
    """The server's URL while it runs; each connection gets `answer`, then a half-close (the
    client reads to the end: no reset)."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    read_request(conn)
                    for i, piece in enumerate((answer,) if isinstance(answer, bytes) else answer):
                        if i:
                            time.sleep(0.05)
                        conn.sendall(piece)
                    conn.shutdown(socket.SHUT_WR)
                    while conn.recv(65536):
                        pass
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()
