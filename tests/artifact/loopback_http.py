"""A real, read-only HTTP server on 127.0.0.1 (port 0) serving one directory, for the tests of
artifacts and repositories read by URL. Python's `http.server` (GET/HEAD only: nothing can be
written through it); every requested path is recorded, so a test can show what was read over
HTTP. Imported by tests/artifact, tests/bridge/test_repository_*.py and tests/scale under this
unique name.

A bridge serves such a repository as `jaxport serve --repository URL` (`BridgeProcess(url)`).
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import ssl
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Served:
    """A running server: `url` of the served directory, `requests` the paths asked for,
    `errors` the connections that failed (e.g. a client refusing the certificate)."""

    url: str
    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@contextlib.contextmanager
def serving(directory: Path, tls: tuple[Path, Path] | None = None) -> Iterator[Served]:
    """Serve `directory` at http://127.0.0.1:PORT/ until the block ends (then shut down and
    the port closed); with `tls` = (certificate, key) PEM files, at https://127.0.0.1:PORT/."""
    served = Served("")
    lock = threading.Lock()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            with lock:
                served.requests.append(self.path)

    class Server(http.server.ThreadingHTTPServer):
        def handle_error(self, request: object, client_address: object) -> None:
            # A client that drops the connection (one refusing our TLS certificate does)
            # is recorded, not printed as a traceback.
            with lock:
                served.errors.append(str(sys.exc_info()[1]))

    server = Server(("127.0.0.1", 0), functools.partial(Handler, directory=str(directory)))
    scheme = "http"
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(tls[0]), str(tls[1]))
        server.socket = context.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    served.url = f"{scheme}://127.0.0.1:{server.server_port}"
    thread = threading.Thread(target=server.serve_forever, name="loopback-http", daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
