"""The lifecycle the WSGI fakes share: serve ``self._wsgi`` on a loopback port in a thread."""

from __future__ import annotations

import threading

from werkzeug.serving import make_server

from tests.integration.fake_http import SERVE_FOREVER


class WsgiFake:
    """``with Fake() as fake:`` serves ``fake._wsgi`` at ``fake.url`` until the block ends."""

    port: int
    url: str

    @property
    def endpoint(self) -> str:
        return self.url

    def __enter__(self):
        self._server = make_server("127.0.0.1", 0, self._wsgi, threaded=True)
        self.port = self._server.server_port
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._server.serve_forever,
                         kwargs=SERVE_FOREVER, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _wsgi(self, environ, start_response):  # pragma: no cover - each fake defines it
        raise NotImplementedError
