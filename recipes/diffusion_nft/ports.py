"""A free TCP port on this host, for the processes a run starts (the trainers' rendezvous, the
sglang server): used by the driver's placement and by the actors, so it sits below both."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port that nothing listens on now (the OS picks it; a race with another process is possible)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
