"""A free local TCP port (the trainers' rendezvous, the sglang server): one helper both the driver's
placement and an actor use, so neither imports the other."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
