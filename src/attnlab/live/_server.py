"""``attnlab serve``: a local HTTP server whose page recomputes attention as the reader types.

The standard library's ThreadingHTTPServer (docs/design.md says why): each connection
on its own thread, the model's work on one worker thread (:mod:`._worker`), one request at
a time in the order they came. Safe by default: it listens on 127.0.0.1; every request
carries the random token the printed address holds; the Host and Origin headers must name
this server (against DNS rebinding); a body is read only up to MAX_BODY bytes; and a text
the model cannot take is a message in the page, never a traceback.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import os
import secrets
import signal
import sys
import threading
import traceback
from importlib.resources import files
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from .._json import json_text
from .._validation import AttnlabError, fail, is_integer
from ._session import MAX_GENERATE, Request, Session
from ._worker import DROPPED, Worker

if TYPE_CHECKING:
    from http.server import BaseHTTPRequestHandler

__all__ = ["DEFAULT_TEXT", "MAX_BODY", "LiveServer", "serve"]

DEFAULT_TEXT = "小明是个运动达人，他平时很爱打篮球"  # the article's sentence
MAX_BODY = 256 * 1024  # bytes of a request's JSON: two texts of MAX_TEXT characters, in UTF-8, fit
_LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
_PAGE_POLICY = (  # the shell's and its page's: nothing from the network; requests only to this server
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data: blob:; "
    "connect-src 'self'; frame-src 'self'"
)


class LiveServer:
    """A running ``attnlab serve``: its ``url`` (with the token), and :meth:`stop`.

    Made by :func:`serve`; a context manager that stops it on exit.
    """

    def __init__(self, session: Session, text: str, host: str, port: int) -> None:
        self.session, self.text, self.token = session, text, secrets.token_urlsafe(24)
        from http.server import ThreadingHTTPServer  # imported when a server starts, not with attnlab

        self._worker = Worker()
        self._httpd = ThreadingHTTPServer((host, port), _handler(self))
        self._httpd.daemon_threads = True  # a connection's thread never holds up the stop
        self.host, self.port = host, int(self._httpd.server_address[1])
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{self.port}/?token={self.token}"
        self._hosts = {f"{name}:{self.port}" for name in (*_LOOPBACK, shown)}
        self._any_address = host in ("0.0.0.0", "::")  # every interface: reached by any of its addresses
        self._thread: threading.Thread | None = None

    def serve_forever(self) -> None:
        """Say that Ctrl-C stops it, and serve until Ctrl-C (then stop at once; a second Ctrl-C
        while stopping exits the process)."""
        try:
            print("attnlab serve: Ctrl-C stops it", flush=True)  # in the try: a Ctrl-C from now on stops it
            self._httpd.serve_forever(poll_interval=0.1)
        except KeyboardInterrupt:
            in_main = threading.current_thread() is threading.main_thread()
            previous = signal.signal(signal.SIGINT, lambda *_: os._exit(130)) if in_main else None
            try:
                self.stop()
            finally:
                if in_main:
                    signal.signal(signal.SIGINT, previous)

    def start(self) -> LiveServer:
        """Serve on a background thread (a notebook's way) and return at once."""
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.1,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket; a forward half done is left to end on its own."""
        if self._thread is not None:
            self._httpd.shutdown()
        self._worker.stop()
        self._httpd.server_close()

    def __enter__(self) -> LiveServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"LiveServer({self.url!r}, model={self.session.name!r})"

    def _repr_html_(self) -> str:  # Jupyter: the address as a link
        return f'<a href="{self.url}" target="_blank" rel="noopener">attnlab serve: {self.session.name}</a>'

    def allowed(self, headers: Any) -> bool:
        """Whether a request's Host names this server, and its Origin (when sent) too: this
        machine's loopback names or the host it listens on, at its port; listening on every
        interface (0.0.0.0, ::), any IP address at its port too. A domain name other than
        localhost never: a rebinding attack comes by a name."""
        host, origin = headers.get("Host", ""), headers.get("Origin")
        return self._names_this(host) and (
            origin is None or (origin.startswith("http://") and self._names_this(origin[7:]))
        )

    def _names_this(self, host: str) -> bool:
        if host in self._hosts:
            return True
        name, _, port = host.rpartition(":")
        if not self._any_address or port != str(self.port):
            return False
        try:
            ipaddress.ip_address(name.removeprefix("[").removesuffix("]"))
        except ValueError:
            return False
        return True

    def has_token(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """The status and JSON of a page's request (``client``, ``number`` and the
        :class:`Request`'s fields): 200 with the page; 422 with a message the page shows;
        409 when a newer request of the same page replaced it before it ran."""
        try:
            client, number = body.get("client"), body.get("number")
            if not isinstance(client, str) or not is_integer(number) or len(client) > 64:
                raise fail("request", "a page's client id and request number", repr((client, number))[:80])
            request = Request.from_json(body)
        except AttnlabError as error:
            return 422, {"error": str(error)}
        job = self._worker.submit(client, int(number), lambda: self.session.answer(request))
        job.done.wait()
        if job.result is DROPPED:
            return 409, {"dropped": True}
        if isinstance(job.result, AttnlabError):
            return 422, {"error": str(job.result)}
        if isinstance(job.result, Exception):  # a bug: the traceback on the server's stderr, one line in the page
            traceback.print_exception(job.result, file=sys.stderr)
            return 422, {"error": f"attnlab could not compute this ({type(job.result).__name__}: {job.result})"}
        return 200, job.result

    def shell(self) -> str:
        """The live page: assets/live.html with its script and settings inline."""
        assets = files("attnlab.live") / "assets"
        name = self.session.name  # a local checkpoint by its folder or file, not its whole path; a hub id whole
        shown = os.path.basename(name.rstrip("/\\")) if os.path.exists(name) else name
        settings = {"text": self.text, "model": shown, "maxGenerate": MAX_GENERATE}
        filling = {
            "__LIVE_SETTINGS__": json_text(settings).replace("<", "\\u003c").replace(">", "\\u003e"),
            "__LIVE_SCRIPT__": (assets / "live.js").read_text(encoding="utf-8"),
        }
        page = (assets / "live.html").read_text(encoding="utf-8")
        for slot, text in filling.items():
            page = page.replace(slot, text)
        return page


def _handler(server: LiveServer) -> type[BaseHTTPRequestHandler]:
    from http.server import BaseHTTPRequestHandler

    class Handler(BaseHTTPRequestHandler):
        """GET / (the live page), POST /api/page (a redraw); anything else 404. The Host and
        Origin checks and the token come first, then the body's size."""

        server_version = "attnlab-serve"
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            address = urlsplit(self.path)
            if not self._allowed(parse_qs(address.query).get("token", [None])[0]):
                return
            if address.path != "/":
                return self._send(404, "text/plain", b"not found")
            self._send(200, "text/html; charset=utf-8", server.shell().encode(), policy=True)

        def do_POST(self) -> None:
            if not self._allowed(self.headers.get("X-Attnlab-Token")):
                return
            if urlsplit(self.path).path != "/api/page":
                return self._send(404, "text/plain", b"not found")
            length = self.headers.get("Content-Length", "")
            if not length.isdigit() or int(length) > MAX_BODY:
                self.close_connection = True  # the body is never read
                return self._json(413, {"error": f"a request of at most {MAX_BODY:,} bytes, got {length or 'no size'}"})
            try:
                body = json.loads(self.rfile.read(int(length)))
            except (UnicodeDecodeError, json.JSONDecodeError):
                return self._json(422, {"error": "request: expected a JSON object"})
            self._json(*server.answer(body if isinstance(body, dict) else {}))

        def _allowed(self, token: str | None) -> bool:
            if not server.allowed(self.headers):
                self._json(403, {"error": "the Host or Origin header does not name this server"})
                return False
            if not server.has_token(token):
                self._json(403, {"error": "a token is required: open the address attnlab serve printed"})
                return False
            return True

        def _json(self, status: int, data: dict[str, Any]) -> None:
            self._send(status, "application/json; charset=utf-8", json_text(data).encode())

        def _send(self, status: int, kind: str, body: bytes, policy: bool = False) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("Referrer-Policy", "no-referrer")  # the token stays out of any Referer
            self.send_header("X-Content-Type-Options", "nosniff")
            if policy:
                self.send_header("Content-Security-Policy", _PAGE_POLICY)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the page went away or replaced it
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # quiet: the page shows what happens
            pass

    return Handler


def serve(
    model: Any = None, *, tokenizer: Any = None, text: str = DEFAULT_TEXT, host: str = "127.0.0.1", port: int = 0,
    block: bool | None = None,
) -> LiveServer:  # fmt: skip
    """Serve the live page of ``model``: type a text, press Enter, and its attention is
    recomputed and redrawn in place (the same layer, head and query where they still
    exist), with a second text to compare, generated tokens, rollout and flow, and heads
    ablated by a click. Prints the address, with its token.

    Args:
        model: None (the seed's layer on the typed tokens), an :class:`attnlab.models.Model`
            (``attnlab.models.load("builtin:coref")``), or a transformers model.
        tokenizer: a transformers model's tokenizer.
        text: the text the page opens on (default: the article's sentence).
        host: the address to listen on; another than the loopback serves the network, and
            a warning says so.
        port: the port; 0 (default) a free one.
        block: serve until Ctrl-C (True), or in the background and return (False); None:
            in the background inside a Jupyter kernel, else block.

    Returns:
        :class:`LiveServer`: ``url``, ``stop()``; a context manager.

    Raises:
        ArgumentTypeError: a model of none of these kinds, a ``block`` that is not a bool or None.
        ArgumentError: a port outside 0..65535, a text over the page's limits.
        OSError: the port is taken or the host cannot be bound.
    """
    if block is not None and not isinstance(block, bool):
        raise fail("block", "True, False or None", repr(block), TypeError)
    if not (is_integer(port) and 0 <= port <= 65535):
        raise fail("port", "a port number 0..65535 (0: a free one)", repr(port))
    if not isinstance(text, str):
        raise fail("text", "a string", type(text).__name__, TypeError)
    server = LiveServer(Session(model, tokenizer), text, host, int(port))
    if not _loopback(host):
        print(
            f"attnlab serve: warning: listening on {host}, which other machines can reach; anyone with the "
            "address and its token can run the model",
            file=sys.stderr,
        )
    print(f"attnlab serve: {server.session.name} at {server.url}", flush=True)
    background = _in_kernel() if block is None else not block
    if background:
        return server.start()
    server.serve_forever()
    return server


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _in_kernel() -> bool:
    """Whether this runs inside a Jupyter kernel (IPython with a kernel)."""
    shell = sys.modules.get("IPython")
    get_ipython = getattr(shell, "get_ipython", None)
    return get_ipython is not None and getattr(get_ipython(), "kernel", None) is not None
