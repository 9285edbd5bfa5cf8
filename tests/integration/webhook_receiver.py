"""A local HTTP receiver for webhook notifications: records every POST (JSON bodies), can
answer 503 a number of times first, or be down (a closed port). With ``slack=True`` it
answers 400 to a ``text`` that breaks Slack's escaping rule (``&``, ``<`` and ``>`` only as
``&amp;``, ``&lt;``, ``&gt;``, except around a ``<http...|label>`` link)."""

from __future__ import annotations

import json
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.integration.fake_http import SERVE_FOREVER


class WebhookReceiver:
    """``with WebhookReceiver(fail_first=1) as hook: ... hook.messages``."""

    def __init__(self, fail_first: int = 0, path: str = "/hooks/T0P-SECRET-9c1e",
                 slack: bool = False):
        self.messages: list[dict] = []
        self.rejected: list[str] = []
        self.attempts = 0
        self.fail_first = fail_first
        self.path = path
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                outer.attempts += 1
                if self.path != outer.path:
                    status = 404
                elif outer.attempts <= outer.fail_first:
                    status = 503
                elif slack and not slack_text_ok(json.loads(body).get("text", "")):
                    outer.rejected.append(json.loads(body).get("text", ""))
                    status = 400
                else:
                    outer.messages.append(json.loads(body))
                    status = 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs=SERVE_FOREVER, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{self.path}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


_SLACK_LINK = re.compile(r"<https?://[^<>|\s]+\|[^<>]*>")
_SLACK_ENTITY = re.compile(r"&(amp|lt|gt);")


def slack_text_ok(text: str) -> bool:
    """Whether ``text`` follows Slack's escaping rule: with its links taken out, no ``<``
    or ``>`` remains and every ``&`` starts one of the three entities."""
    rest = _SLACK_ENTITY.sub("", _SLACK_LINK.sub("", text))
    return not re.search(r"[<>&]", rest)


def down_url() -> str:
    """A URL nobody listens on: what a notification endpoint that is down looks like."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/hooks/T0P-SECRET-9c1e"
