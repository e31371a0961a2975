"""A real, read-only HTTP server on 127.0.0.1 (port 0) serving one directory, for the tests of
artifacts and repositories read by URL. Python's `http.server` (GET/HEAD only: nothing can be
written through it); every requested path is recorded, so a test can show what was read over
HTTP. Imported by tests/artifact and tests/bridge/test_repository_*.py under this unique name.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Served:
    """A running server: `url` of the served directory, `requests` the paths asked for."""

    url: str
    requests: list[str] = field(default_factory=list)


@contextlib.contextmanager
def serving(directory: Path) -> Iterator[Served]:
    """Serve `directory` at http://127.0.0.1:PORT/ until the block ends (then shut down and
    the port closed)."""
    served = Served("")
    lock = threading.Lock()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            with lock:
                served.requests.append(self.path)

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(directory)))
    served.url = f"http://127.0.0.1:{server.server_port}"
    thread = threading.Thread(target=server.serve_forever, name="loopback-http", daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
