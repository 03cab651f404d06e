"""Where local processes meet: a free TCP port (the sglang server) and the trainers' rendezvous.
One module both the driver's placement and an actor use, so neither imports the other."""

from __future__ import annotations

import os
import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def file_rendezvous(folder: str) -> str:
    """The train ranks' ``init_method``: a file store in FOLDER (the ranks always share one node).

    Not a port picked free beforehand: between the pick and the rank's bind, any process's
    outgoing connection may take it (EADDRINUSE, seen with Ray's many connections under
    ``record --parallel 2``). FOLDER must be new for each run and hold nothing else.
    """
    return "file://" + os.path.join(os.path.abspath(folder), "store")
