"""A local envd-protocol server: a *test double* of an E2B sandbox, for offline tests.

The real ``e2b`` SDK in debug mode (``debug=True``, ``sandbox_url=<this url>``)
skips the E2B API entirely (``Sandbox.create`` makes no request, ``kill`` is a
no-op) and talks straight to envd.  This module speaks envd's wire protocol the
way the SDK expects it:

- Connect protocol over HTTP/1.1 with JSON codec: unary calls are
  ``application/json`` with ``Connect-Protocol-Version: 1``; server streams are
  ``application/connect+json`` envelopes (1 flag byte + 4-byte big-endian
  length + JSON), closed by an end-of-stream envelope (flag ``0x02``) that
  carries ``{}`` or ``{"error": {...}}``.  ``Connect-Timeout-Ms`` is honoured
  the way envd does it: the process is killed at the deadline, so the stream
  ends with exit code -1 and ``"signal: killed"``.
- ``process.Process/Start`` (server stream: start, data, keepalive, end events),
  ``SendSignal``, ``SendInput``, ``CloseStdin``, ``Update``, ``List``;
  ``GET /health``; ``GET``/``POST /files`` (octet-stream and multipart uploads).
- PTYs as envd does them: a ``Start`` whose request carries ``pty {size}``
  runs the command on a real pty of that size (from the machine's own
  ``/dev/ptmx``, the command leading a new session with the pty as its
  controlling terminal, inside the same emulated machine and namespaces as
  every other command); its output
  comes as ``pty`` data events; ``SendInput`` with ``ProcessInput.pty`` types
  into it (plain ``stdin`` input and ``CloseStdin`` are refused for it, as
  envd refuses them); ``Update`` with a pty size resizes it (TIOCSWINSZ: the
  kernel sends SIGWINCH to its foreground process group).  ``double.starts``
  records each ``Start`` (argv, user, pty size) for tests.

Like envd, it runs the command *for real*, signals only the started process on
``SendSignal`` (envd does not kill the process group: the runner must), and
ends the stream when the started process exits.

Where the commands run: an emulated remote machine (``machine``), private
namespaces over ``root``.  Its filesystem is ``root`` (what the sandbox writes
lands there, where tests can look: ``/home/user`` is ``<root>/home/user``) plus
the host's read-only ``/usr``; it has its own pid namespace (pids in the
protocol are the machine's), its own loopback and its own users.  Started as
root, the double makes the users ``useradd`` creates real, unprivileged uids of
the machine; started unprivileged it has one uid, so ``useradd`` and ``chown``
are shimmed and non-root users only lose their capabilities.  ``sudo`` is a
shim either way (there is no setuid ``sudo`` to install): it works for the
users in ``sudoers``, like the template's ``user``, and runs the command as the
same user.  The files API reads and writes inside the machine, as the user.

This is a test double that emulates a separate machine with namespaces; it is
not E2B, and the project claims no security boundary from it.
"""

from __future__ import annotations

import base64
import json
import queue
import signal
import threading
import urllib.parse
from collections.abc import Callable, Iterable
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from e2b.envd.process import process_pb

from tests.runners.e2b.envd_state import CONNECT_HTTP_STATUS, ConnectError, EnvdDouble, oneof

_END_STREAM = 0x02
_DOUBLES: dict[str, EnvdDouble] = {}


def envd_double(url: str) -> EnvdDouble:
    """The sandbox state behind a running server (tests use it to expire the sandbox)."""
    return _DOUBLES[url]


def start_envd_server(
    root: Path, *, sudoers: Iterable[str] = ("user",), keepalive_s: float = 1.0
) -> tuple[str, Callable[[], None]]:
    """Serve envd on 127.0.0.1 (random port) over ``root``; return (url, stop).

    ``stop()`` kills every process the double started and drops every open
    connection, like a sandbox that dies.
    """
    double = EnvdDouble(Path(root), sudoers=tuple(sudoers), keepalive_s=keepalive_s)
    server = _Server(("127.0.0.1", 0), _Handler)
    server.double = double
    thread = threading.Thread(target=server.serve_forever, name="envd-double", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    _DOUBLES[url] = double

    stopped = threading.Event()

    def stop() -> None:
        if stopped.is_set():
            return
        stopped.set()
        _DOUBLES.pop(url, None)
        server.shutdown()
        server.server_close()
        # Connections first: a dying sandbox sends no end event, and a process
        # killed while its stream is still open would report one (SIGKILL).
        server.drop_connections()
        double.kill_all()
        thread.join(timeout=10)

    return url, stop


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    double: EnvdDouble

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.open_sockets: set[Any] = set()

    def process_request(self, request: Any, client_address: Any) -> None:
        self.open_sockets.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        self.open_sockets.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        import socket

        for sock in list(self.open_sockets):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet in tests
        pass

    # -- plumbing -----------------------------------------------------------
    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _user(self) -> str:
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Basic "):
            return base64.b64decode(auth[6:]).decode().split(":", 1)[0] or "user"
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        return query.get("username", ["user"])[0]

    # -- HTTP API -------------------------------------------------------------
    def _expired(self, path: str) -> bool:
        """After ``expire``: 502 from "the proxy", until a new sandbox's health check."""
        double = self.server.double
        if not double.expired:
            return False
        if path == "/health":
            double.revive()
            return False
        self._reply(502, json.dumps({"code": 502, "message": "The sandbox debug_sandbox_id "
                                     "was not found"}).encode())
        return True

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        if self._expired(url.path):
            return None
        if url.path == "/health":
            return self._reply(204, b"")
        if url.path != "/files":
            return self._reply(404, b'{"code":404,"message":"not found"}')
        query = urllib.parse.parse_qs(url.query)
        try:
            data = self.server.double.read_file(query["path"][0], self._user())
        except (KeyError, OSError, ConnectError) as exc:
            msg = json.dumps({"code": 404, "message": f"file not found: {exc}"})
            return self._reply(404, msg.encode())
        self._reply(200, data, "application/octet-stream")

    def do_POST(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        body = self._body()
        if self._expired(url.path):
            return None
        if url.path == "/files":
            return self._upload(url, body)
        if self.headers.get("Connect-Protocol-Version") != "1":
            return self._reply(400, b'{"code":"invalid_argument","message":"missing Connect-Protocol-Version"}')
        try:
            if url.path == "/process.Process/Start":
                return self._start(body)
            response = self._unary(url.path, json.loads(body or b"{}"))
        except ConnectError as exc:
            status = CONNECT_HTTP_STATUS.get(exc.code, 500)
            return self._reply(status, json.dumps(exc.to_json()).encode())
        self._reply(200, json.dumps(response).encode())

    def _upload(self, url: urllib.parse.SplitResult, body: bytes) -> None:
        query = urllib.parse.parse_qs(url.query)
        user = self._user()
        ctype = self.headers.get("Content-Type", "")
        if ctype.startswith("multipart/form-data"):
            msg = BytesParser(policy=HTTP).parsebytes(
                f"Content-Type: {ctype}\r\n\r\n".encode() + body)
            files = [(query.get("path", [str(part.get_filename())])[0],
                      part.get_payload(decode=True)) for part in msg.iter_parts()]
        else:
            files = [(query["path"][0], body)]
        written: list[dict[str, str]] = []
        try:
            for path, data in files:
                self.server.double.write_file(path, data if isinstance(data, bytes) else b"", user)
                written.append({"name": path.rsplit("/", 1)[-1], "type": "file", "path": path})
        except ConnectError as exc:
            return self._reply(CONNECT_HTTP_STATUS.get(exc.code, 500), json.dumps(exc.to_json()).encode())
        self._reply(200, json.dumps(written).encode())

    # -- Connect RPC ------------------------------------------------------------
    def _unary(self, path: str, msg: dict[str, Any]) -> dict[str, Any]:
        double = self.server.double
        if path == "/process.Process/SendSignal":
            signal_req = process_pb.SendSignalRequest.from_json(json.dumps(msg))
            sig = {"SIGKILL": signal.SIGKILL, "SIGTERM": signal.SIGTERM}.get(signal_req.signal.name)
            if sig is None:
                raise ConnectError("unimplemented", f"invalid signal: {signal_req.signal}")
            double.get(signal_req.process).signal(sig)  # the process only, like envd
            return {}
        if path == "/process.Process/SendInput":
            input_req = process_pb.SendInputRequest.from_json(json.dumps(msg))
            proc = double.get(input_req.process)
            data = input_req.input.input if input_req.input is not None else None
            if data is not None and data.field == "pty":
                proc.write_pty(data.value)
                return {}
            with proc.stdin_lock:
                if proc.master is not None:
                    raise ConnectError("failed_precondition", "tty assigned to process: input "
                                       "should be written to the pty, not the stdin")
                if proc.popen.stdin is None or proc.popen.stdin.closed:
                    raise ConnectError("failed_precondition", "stdin not enabled or closed")
                proc.popen.stdin.write(data.value if data is not None else b"")
                proc.popen.stdin.flush()
            return {}
        if path == "/process.Process/CloseStdin":
            close_req = process_pb.CloseStdinRequest.from_json(json.dumps(msg))
            proc = double.get(close_req.process)
            with proc.stdin_lock:
                if proc.master is not None:
                    raise ConnectError("failed_precondition", "cannot close stdin for a PTY "
                                       "process: send Ctrl+D (0x04) instead")
                if proc.popen.stdin is not None:
                    proc.popen.stdin.close()
            return {}
        if path == "/process.Process/Update":
            update_req = process_pb.UpdateRequest.from_json(json.dumps(msg))
            proc = double.get(update_req.process)
            size = update_req.pty.size if update_req.pty is not None else None
            if size is None:
                raise ConnectError("invalid_argument", "update: no pty size given")
            proc.resize(int(size.rows), int(size.cols))
            return {}
        if path == "/process.Process/List":
            with double.lock:
                live = [p for p in double.procs.values() if not p.ended.is_set()]
            return {"processes": [{"pid": p.pid, "config": {"cmd": p.argv[0], "args": p.argv[1:]}}
                                  for p in live]}
        raise ConnectError("unimplemented", f"{path} is not implemented by the envd double")

    def _start(self, body: bytes) -> None:
        if len(body) < 5:
            raise ConnectError("invalid_argument", "missing request envelope")
        size = int.from_bytes(body[1:5], "big")
        req = process_pb.StartRequest.from_json(body[5:5 + size])
        timeout = self.headers.get("Connect-Timeout-Ms")
        self.send_response(200)
        self.send_header("Content-Type", "application/connect+json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            size = req.pty.size if req.pty is not None else None
            pty = None if req.pty is None else (
                int(size.rows) if size is not None else 0, int(size.cols) if size is not None else 0)
            proc = self.server.double.spawn(
                req.process, self._user(), bool(req.stdin), int(timeout) if timeout else None, pty)
        except ConnectError as exc:
            self._envelope(_END_STREAM, {"error": exc.to_json()})
            return self._finish_chunks()
        start = process_pb.ProcessEvent.StartEvent(pid=proc.pid)
        try:
            self._event(process_pb.ProcessEvent(event=oneof("start", start)))
            while True:
                try:
                    event = proc.events.get(timeout=self.server.double.keepalive_s)
                except queue.Empty:
                    keepalive = process_pb.ProcessEvent.KeepAlive()
                    self._event(process_pb.ProcessEvent(event=oneof("keepalive", keepalive)))
                    continue
                self._event(event)
                if event.event.field == "end":
                    break
            self._envelope(_END_STREAM, {})
            self._finish_chunks()
        except OSError:  # the client went away; the process keeps running, as in envd
            self.close_connection = True

    def _event(self, event: Any) -> None:
        response = process_pb.StartResponse(event=event)
        self._envelope(0, json.loads(response.to_json()))

    def _envelope(self, flags: int, message: dict[str, Any]) -> None:
        payload = json.dumps(message).encode()
        frame = bytes([flags]) + len(payload).to_bytes(4, "big") + payload
        self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
        self.wfile.flush()

    def _finish_chunks(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
