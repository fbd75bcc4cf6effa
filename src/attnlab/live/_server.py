"""``attnlab serve``: a local HTTP server whose page recomputes attention as the reader types.

The standard library's ThreadingHTTPServer (docs/design.md says why): each connection
on its own thread, the model's work on one worker thread (:mod:`._worker`), one request at
a time in the order they came; a request whose page closed its connection, or sent a newer
one, stops at its next stage. Safe by default: it listens on 127.0.0.1; every request
carries the random token the printed address holds; the Host and Origin headers must name
this server (against DNS rebinding); a request RFC 9112 calls malformed is a 400, every
refusal (a request line or headers it cannot read, a method other than GET and POST) a
JSON message naming what was wrong; a connection idle for _IDLE seconds is closed; a body
is read only up to MAX_BODY bytes, a JSON object MAX_DEPTH deep; and a text the model
cannot take, or a field the page would never send, is a message in the page, never a
traceback.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import os
import re
import secrets
import selectors
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import CancelledError
from functools import partial
from importlib.resources import files
from itertools import accumulate
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from .._json import json_text
from .._validation import AttnlabError, fail, is_integer
from ..trace._display import shown_name
from ._session import MAX_GENERATE, Request, RowRequest, Session
from ._worker import Job, Worker

if TYPE_CHECKING:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["DEFAULT_TEXT", "MAX_BODY", "MAX_DEPTH", "LiveServer", "serve"]

DEFAULT_TEXT = "小明是个运动达人，他平时很爱打篮球"  # the article's sentence
MAX_BODY = 256 * 1024  # bytes of a request's JSON: two texts of MAX_TEXT characters, in UTF-8, fit
MAX_DEPTH = 3  # how deep a request's JSON nests: {"ablate": [[layer, head], …]}
_MAX_DIGITS = 20  # a JSON integer longer reads as a float, as JavaScript reads it: no field takes one
_API = {"/api/page": "page", "/api/row": "row"}  # the POST paths and what each asks for
_WATCH = 0.05  # seconds between two looks at a waiting request's connection
_IDLE = 30  # seconds a connection may wait for its request's next bytes (idle, or slow to send): then closed
MAX_CONNECTIONS = 64  # open at once, each a thread: one more is closed at once (a page holds one or two)
# a JSON string, from its quote to its closing quote or, never closed, to the text's end: it matches at every
# quote it starts at, so a scan never restarts inside a string (one that must close backtracks from each quote
# of an unclosed one to the end: quadratic, minutes for 256 KB of \")
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
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
        self._worker = Worker()
        self._httpd = _http_server(host, port, _handler(self))
        self.host, self.port = host, int(self._httpd.server_address[1])
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{self.port}/?token={self.token}"
        self._hosts = {f"{name}:{self.port}" for name in (*_LOOPBACK, shown)}
        self._any_address = host in ("0.0.0.0", "::")  # every interface: reached by any of its addresses
        self._thread: threading.Thread | None = None

    def serve_forever(self) -> None:
        """Say that Ctrl-C stops it, and serve until Ctrl-C; then stop, and wait for a
        request running to end at its next stage (saying so), where a second Ctrl-C exits
        the process at once."""
        try:
            print("attnlab serve: Ctrl-C stops it", flush=True)  # in the try: a Ctrl-C from now on stops it
            self._httpd.serve_forever(poll_interval=0.1)
        except KeyboardInterrupt:
            in_main = threading.current_thread() is threading.main_thread()
            previous = signal.signal(signal.SIGINT, lambda *_: os._exit(130)) if in_main else None
            try:
                self.stop()
                if self._worker.busy:
                    print(
                        "attnlab serve: stopping: the request running ends at its next stage (Ctrl-C again exits now)",
                        file=sys.stderr, flush=True,
                    )  # fmt: skip
                self._worker.join()  # here, not in the interpreter's exit, where a second Ctrl-C would not exit
            finally:
                if in_main:
                    signal.signal(signal.SIGINT, previous)

    def start(self) -> LiveServer:
        """Serve on a background thread (a notebook's way) and return at once."""
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.1,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket; drop the requests that wait, and stop the one
        running at its next stage (the process's exit waits for that stage, no longer)."""
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

    def malformed(self, target: str, headers: Any) -> str | None:
        """Why RFC 9112 calls a request malformed (a 400), or None: a header line that is
        not ``name: value`` or is folded onto the next, two Host headers, Content-Length
        values that disagree, a Transfer-Encoding (this server reads a Content-Length body
        only), a target in absolute form naming another server."""
        if line := _bad_header_line(headers):
            return str(fail("headers", "lines of 'name: value', each on one line", repr(line)[:80]))
        if len(hosts := headers.get_all("Host") or []) > 1:
            return str(fail("Host", "one Host header", f"{len(hosts)}: {', '.join(map(repr, hosts))}"[:120]))
        if len(sizes := _sizes(headers)) > 1:
            return str(fail("Content-Length", "one size", ", ".join(sorted(sizes))[:80]))
        if encoding := headers.get("Transfer-Encoding"):
            return str(fail("Transfer-Encoding", "none (send Content-Length)", repr(encoding)[:80]))
        address = urlsplit(target)
        if (address.scheme or address.netloc) and not (address.scheme == "http" and self._names_this(address.netloc)):
            return str(fail("request target", "a path, or this server's http:// address", repr(target)[:80]))
        return None

    def answer(
        self, body: dict[str, Any], connection: socket.socket | None = None, kind: str = "page"
    ) -> tuple[int, dict[str, Any]]:
        """The status and JSON of a page's request (``client``, ``number`` and the fields of
        a :class:`Request`, or for ``kind`` "row" (``POST /api/row``) of a
        :class:`RowRequest`): 200 with the page (:meth:`Session.answer`) or the row
        (:meth:`Session.row`); 422 with a message the page shows; 409 when a newer request
        of the same ``client`` replaced it, or ``connection`` (the page's, watched while the
        request waits and runs) closed, before it ended. A page asks for its rows under a
        client id of their own, so that a row never replaces the page being drawn."""
        try:
            client, number = body.get("client"), body.get("number")
            if not isinstance(client, str) or len(client) > 64:
                raise fail("client", "a page's id of at most 64 characters", repr(client)[:80])
            if not is_integer(number):
                raise fail("number", "a whole number (the page's count of its requests)", repr(number)[:80])
            work: Callable[[Callable[[], None]], dict[str, Any]]  # called with the job's check
            if kind == "row":
                work = partial(self.session.row, RowRequest.from_json(body))
            else:
                work = partial(self.session.answer, Request.from_json(body))
        except AttnlabError as error:
            return 422, {"error": str(error)}
        job = self._worker.submit(client, int(number), work)
        _wait(job, connection)
        try:
            return 200, job.future.result()
        except CancelledError:
            return 409, {"dropped": True}
        except AttnlabError as error:
            return 422, {"error": str(error)}
        except Exception as error:  # a bug: the traceback on the server's stderr, one line in the page
            traceback.print_exception(error, file=sys.stderr)
            return 422, {"error": f"attnlab could not compute this ({type(error).__name__}: {error})"}

    def shell(self) -> str:
        """The live page: assets/live.html with its script and settings inline."""
        assets = files("attnlab.live") / "assets"
        shown = shown_name(self.session.name)  # a local checkpoint by its folder or file, never its path
        limit = self.session.stated_flow_limit  # attnlab view --rollout's limit, the page's too
        settings = {"text": self.text, "model": shown, "maxGenerate": MAX_GENERATE, "maxFlowTokens": limit}
        filling = {
            "__LIVE_SETTINGS__": json_text(settings).replace("<", "\\u003c").replace(">", "\\u003e"),
            "__LIVE_SCRIPT__": (assets / "live.js").read_text(encoding="utf-8"),
        }
        page = (assets / "live.html").read_text(encoding="utf-8")
        for slot, text in filling.items():
            page = page.replace(slot, text)
        return page


def _http_server(host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """The standard library's ThreadingHTTPServer on (host, port), its connections' threads
    daemons (never holding up the stop) and at most MAX_CONNECTIONS of them: a connection
    past them is closed as it comes, so that idle connections cannot pile up threads."""
    from http.server import ThreadingHTTPServer  # imported when a server starts, not with attnlab

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def __init__(self) -> None:
            self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
            super().__init__((host, port), handler)

        def process_request(self, request: Any, client_address: Any) -> None:
            if not self.slots.acquire(blocking=False):
                self.shutdown_request(request)
                return
            try:
                super().process_request(request, client_address)
            except BaseException:  # no thread started: its slot is free again
                self.slots.release()
                raise

        def process_request_thread(self, request: Any, client_address: Any) -> None:
            try:
                super().process_request_thread(request, client_address)
            finally:
                self.slots.release()

    return Server()


def _handler(server: LiveServer) -> type[BaseHTTPRequestHandler]:
    from http.server import BaseHTTPRequestHandler

    class Handler(BaseHTTPRequestHandler):
        """GET / (the live page), POST /api/page (a redraw); another path 404, another
        method 405. The Host and Origin checks and the token come first, then the body's
        size. A connection waiting over ``timeout`` seconds for its request's next bytes is
        closed (the page's next fetch opens another)."""

        server_version = "attnlab-serve"
        protocol_version = "HTTP/1.1"
        timeout = _IDLE

        def parse_request(self) -> bool:
            """The standard library's, and a request line without a version (HTTP/0.9's) refused."""
            if not super().parse_request():
                return False
            if self.request_version == "HTTP/0.9":
                self.send_error(400)
                return False
            return True

        def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
            """The standard library's refusals as JSON naming what was wrong (its own are
            HTML), the connection closed: what follows cannot be trusted to start a request."""
            status, error = _refusal(code, message, self.command, self.requestline)
            self.close_connection = True
            if self.request_version == "HTTP/0.9":  # its default before a version was read: answer in HTTP/1.1
                self.request_version = "HTTP/1.1"
            self._json(status, {"error": error}, allow="GET, POST" if status == 405 else None)

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
            kind = _API.get(urlsplit(self.path).path)
            if kind is None:
                return self._send(404, "text/plain", b"not found")
            size = _size(self.headers)
            if isinstance(size, tuple):
                self.close_connection = True  # the body is never read
                return self._json(*size)
            try:
                body = _request_json(self.rfile.read(size))
            except AttnlabError as error:
                return self._json(422, {"error": str(error)})
            self._json(*server.answer(body, self.connection, kind))

        def _allowed(self, token: str | None) -> bool:
            """Whether the request is well formed, names this server and has the token; if
            not, its refusal is sent (400, its connection closed; 403)."""
            if malformed := server.malformed(self.path, self.headers):
                self.close_connection = True  # its framing cannot be trusted: the next request may start anywhere
                self._json(400, {"error": malformed})
                return False
            if not server.allowed(self.headers):
                self._json(403, {"error": "the Host or Origin header does not name this server"})
                return False
            if not server.has_token(token):
                self._json(403, {"error": "a token is required: open the address attnlab serve printed"})
                return False
            return True

        def _json(self, status: int, data: dict[str, Any], allow: str | None = None) -> None:
            self._send(status, "application/json; charset=utf-8", json_text(data).encode(), allow=allow)

        def _send(self, status: int, kind: str, body: bytes, policy: bool = False, allow: str | None = None) -> None:
            self.send_response(status)
            if allow is not None:
                self.send_header("Allow", allow)
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
            if self.command == "HEAD":  # its answer has no body
                return
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the page went away or replaced it
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # quiet: the page shows what happens
            pass

    return Handler


def _bad_header_line(headers: Any) -> str | None:
    """The first header line the parser could not read as ``name: value`` (the headers
    stop there, the rest read as a body: its defect), or one folded onto the next line
    (obs-fold); None when there is none."""
    if getattr(headers, "defects", None):
        line = getattr(headers.defects[0], "line", None) or str(headers.get_payload() or "")
        return next(iter(line.splitlines()), "") or "a line it could not read"
    return next((f"{name}: {value}" for name, value in headers.items() if "\n" in value or "\r" in value), None)


def _refusal(code: int, message: str | None, command: str | None, line: str) -> tuple[int, str]:
    """The status and message of a refusal the standard library's handler makes (its
    ``send_error``), naming what was wrong: a method no ``do_`` method serves (a 405), a
    request line or headers it cannot read."""
    if code == 501 and command:
        return 405, str(fail("method", "GET or POST", command[:40]))
    if code == 505:
        return 505, str(fail("request line", "HTTP/1.0 or HTTP/1.1", repr(line)[:80]))
    if code == 414:
        return 414, str(fail("request line", "at most 65,536 bytes", "more"))
    if code == 431 and message == "Too many headers":
        return 431, str(fail("headers", "at most 100 header lines", "more"))
    if code == 431:
        return 431, str(fail("headers", "lines of at most 65,536 bytes", "a longer one"))
    if code == 400:
        expected = "a method, a target and HTTP/1.0 or HTTP/1.1, apart by spaces"
        return 400, str(fail("request line", expected, repr(line)[:80]))
    return code, message or f"error {code}"  # pragma: no cover - the handler sends no other


def _sizes(headers: Any) -> set[str]:
    """The Content-Length values given, each header's comma-separated list included."""
    return {size.strip() for value in headers.get_all("Content-Length") or [] for size in value.split(",")}


def _size(headers: Any) -> int | tuple[int, dict[str, str]]:
    """The body's size in bytes (its one Content-Length, the others refused by
    LiveServer.malformed), or the status and JSON of its refusal: 411 without one, 400 not
    in ASCII digits (``int`` takes "²"), 413 over MAX_BODY."""
    size = next(iter(_sizes(headers)), None)
    if size is None:
        return 411, {"error": str(fail("Content-Length", "the body's size in bytes", "none"))}
    if not (size.isascii() and size.isdigit()):
        return 400, {"error": str(fail("Content-Length", "the body's size in bytes, digits 0-9", repr(size)[:80]))}
    if len(size) > len(str(MAX_BODY)) or int(size) > MAX_BODY:
        return 413, {"error": str(fail("Content-Length", f"at most {MAX_BODY:,} bytes", size[:80]))}
    return int(size)


def _request_json(data: bytes) -> dict[str, Any]:
    """A request's JSON object, at most MAX_DEPTH deep (json's parser recurses: a deeper one
    could exhaust the stack; the depth is counted first, over the brackets outside strings,
    in one pass of linear time, a string never closed running to the end, which json
    refuses); an integer of over _MAX_DIGITS digits reads as a float, which
    the field that holds it refuses by name (``int`` refuses 4,300 digits and takes
    quadratic time to get there).

    Raises:
        ArgumentError: not UTF-8 JSON, not an object, nested deeper than MAX_DEPTH.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise fail("request", "a JSON object in UTF-8", "other bytes") from None
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))  # the brackets outside strings
    depth = max(accumulate(1 if bracket in "[{" else -1 for bracket in brackets), default=0)
    if depth > MAX_DEPTH:
        raise fail("request", f"a JSON object nested at most {MAX_DEPTH} deep", f"{depth:,} levels")
    try:
        body = json.loads(text, parse_int=_integer)
    except json.JSONDecodeError:
        raise fail("request", "a JSON object", "text that is not JSON") from None
    if not isinstance(body, dict):
        raise fail("request", "a JSON object", type(body).__name__)
    return body


def _integer(digits: str) -> int | float:
    """A JSON integer: an int up to _MAX_DIGITS digits, a float past them (inf past 308)."""
    return int(digits) if len(digits) <= _MAX_DIGITS else float(digits)


def _wait(job: Job, connection: socket.socket | None) -> None:
    """Wait until ``job`` is done, cancelling it when ``connection`` (None: not watched)
    reaches its end while it waits or runs: the page went away, and the job stops at its
    next stage."""
    if connection is not None:
        with selectors.DefaultSelector() as watch:  # select.select refuses a descriptor past 1023
            watch.register(connection, selectors.EVENT_READ)
            while not futures.wait([job.future], _WATCH).done:
                if watch.select(0) and _ended(connection):
                    job.cancel()
                    break
    futures.wait([job.future])  # a cancelled job ends at its next stage; its 409 goes nowhere


def _ended(connection: socket.socket) -> bool:
    """Whether a readable ``connection`` has nothing to read: the other end closed it.
    Bytes waiting (a next request) are left there, and read as not ended."""
    try:
        return connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:  # reset by the other end
        return True


def serve(
    model: Any = None, *, tokenizer: Any = None, text: str = DEFAULT_TEXT, host: str = "127.0.0.1", port: int = 0,
    block: bool | None = None,
) -> LiveServer:  # fmt: skip
    """Serve the live page of ``model``: type a text, press Enter, and its attention is
    recomputed and redrawn in place (the same layer, head and query where they still
    exist), with a second text to compare, generated tokens, rollout and flow, and heads
    ablated by a click. Prints the address, with its token.

    Args:
        model: None (the seed's layer on the typed tokens), a model from
            :func:`attnlab.load_model` (``attnlab.load_model("builtin:coref")``), an
            :class:`attnlab.models.Model`, or a transformers model.
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
