"""A server that answers every request with a sign-in web page (200, text/html): what an
API address in front of an identity-aware proxy or Dex answers an unauthenticated client,
or what another site at a mistyped address answers."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.integration.fake_http import SERVE_FOREVER

SIGN_IN = b"<!DOCTYPE html><html><body><form action='/login'>Sign in</form></body></html>"


class _SignInPage(BaseHTTPRequestHandler):
    def _answer(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(SIGN_IN)))
        self.end_headers()
        self.wfile.write(SIGN_IN)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _answer

    def log_message(self, *args):
        pass


@contextmanager
def sign_in_page() -> Iterator[int]:
    """The port of a running sign-in page server on 127.0.0.1."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SignInPage)
    thread = threading.Thread(target=server.serve_forever, kwargs=SERVE_FOREVER, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
