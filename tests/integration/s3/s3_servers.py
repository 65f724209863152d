"""Real S3 over HTTP for the tests: a moto server in its own process, and a proxy on loopback that injects faults.

The moto server runs in a child process so that switching its IAM authentication on (``/moto-api/reset-auth``) cannot
affect any other moto use in the test process. The proxy forwards every request unchanged (the Host header too, so
SigV4 signatures stay valid) and answers chosen requests with real HTTP errors or a dropped connection.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3

REGION = "us-east-1"
_MOTO_CHILD = """
import sys
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print(server.get_host_and_port()[1], flush=True)
sys.stdin.read()  # the parent closes our stdin to stop us
server.stop()
"""

_S3_ERRORS = {
    500: ("InternalError", "We encountered an internal error. Please try again."),
    503: ("SlowDown", "Please reduce your request rate."),
    409: (
        "ConditionalRequestConflict",
        "A conflicting operation occurred. If using PutObject you can retry the request.",
    ),
    412: ("PreconditionFailed", "At least one of the pre-conditions you specified did not hold"),  # no <Condition>
}


class MotoServer:
    """A moto server process on 127.0.0.1; ``stop()`` ends it (closing its stdin), also when the test fails."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-c", _MOTO_CHILD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # werkzeug logs every request there
            text=True,
        )
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line.strip().isdigit():
            self.stop()
            raise RuntimeError(f"moto server did not start: {line!r}")
        self.port = int(line)
        self.url = f"http://127.0.0.1:{self.port}"

    def client(self, access_key: str = "testing", secret_key: str = "testing", endpoint: str | None = None) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=endpoint or self.url,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            region_name=REGION,
        )

    def _iam(self) -> Any:
        """IAM as moto's bootstrap identity: only usable before ``require_authentication``."""
        return boto3.client(
            "iam",
            endpoint_url=self.url,
            aws_access_key_id="bootstrap",
            aws_secret_access_key="bootstrap",
            region_name=REGION,
        )

    def create_user_with_s3_access(self, name: str) -> tuple[str, str]:
        """An IAM user allowed everything on S3; returns its access key id and secret."""
        iam = self._iam()
        iam.create_user(UserName=name)
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
        iam.put_user_policy(UserName=name, PolicyName="s3-all", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName=name)["AccessKey"]
        return str(key["AccessKeyId"]), str(key["SecretAccessKey"])

    def create_user_without_access(self, name: str) -> tuple[str, str]:
        """An IAM user with valid keys and no policy: every S3 request is denied."""
        iam = self._iam()
        iam.create_user(UserName=name)
        key = iam.create_access_key(UserName=name)["AccessKey"]
        return str(key["AccessKeyId"]), str(key["SecretAccessKey"])

    def require_authentication(self) -> None:
        """From now on every request must be signed by a known IAM key with the right policy, as on AWS."""
        request = urllib.request.Request(
            f"{self.url}/moto-api/reset-auth", data=b"0", method="POST", headers={"Content-Type": "text/plain"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200

    def stop(self) -> None:
        if self._process.poll() is None:
            assert self._process.stdin is not None
            self._process.stdin.close()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()


@dataclass
class Fault:
    """Answer the next ``times`` matching requests with ``status``: 500 or 503 (an S3 error document), ``"reset"``
    (the connection drops before the request reaches S3) or ``"lost"`` (S3 handles it, then the answer is lost)."""

    method: str
    path: str  # a regular expression searched in the request path (with the query string)
    status: int | str
    times: int = 1
    hits: int = 0

    def matches(self, method: str, path: str) -> bool:
        return self.hits < self.times and method == self.method and re.search(self.path, path) is not None


@dataclass(frozen=True)
class Exchange:
    method: str
    path: str
    status: int | str  # the status S3 answered, or the injected one
    injected: bool
    body_bytes: int = 0  # of the answer from S3 (what a ranged read fetched)
    request_range: str | None = None
    headers: dict[str, str] = field(default_factory=dict)  # of the request as the client sent it, lowercase names


class Link:
    """One direction of a network link of ``bytes_per_second`` (None: unlimited): transfers through it queue up, so
    together they never pass that rate, as on a pod's network interface."""

    def __init__(self, bytes_per_second: float | None) -> None:
        self.bytes_per_second = bytes_per_second
        self._free_at = 0.0
        self._lock = threading.Lock()

    def carry(self, size: int) -> None:
        """Returns once ``size`` bytes would have crossed the link."""
        if not self.bytes_per_second or not size:
            return
        with self._lock:
            done = max(time.monotonic(), self._free_at) + size / self.bytes_per_second
            self._free_at = done
        time.sleep(max(0.0, done - time.monotonic()))


@dataclass
class _ProxyState:
    upstream_port: int
    uplink: Link = field(default_factory=lambda: Link(None))  # request bodies, to S3
    downlink: Link = field(default_factory=lambda: Link(None))  # answers, from S3
    faults: list[Fault] = field(default_factory=list)
    exchanges: list[Exchange] = field(default_factory=list)
    conditions_ignored: bool = False  # answer a refused If-None-Match PUT with 200, as a store without them would
    lock: threading.Lock = field(default_factory=threading.Lock)


class FaultyProxy:
    """An HTTP proxy on 127.0.0.1 in front of an S3 endpoint: records every exchange, injects the faults it is given.

    ``bytes_per_second`` limits each direction (full duplex) to that rate, shared by every connection.
    """

    def __init__(self, upstream_port: int, bytes_per_second: float | None = None) -> None:
        self.state = _ProxyState(upstream_port, Link(bytes_per_second), Link(bytes_per_second))
        handler = type("Handler", (_ProxyHandler,), {"state": self.state})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def inject(self, *faults: Fault) -> None:
        with self.state.lock:
            self.state.faults.extend(faults)

    def clear(self) -> None:
        """Forget the faults still pending and the exchanges seen so far; honour conditional writes again."""
        with self.state.lock:
            self.state.conditions_ignored = False
            self.state.faults.clear()
            self.state.exchanges.clear()

    def ignore_conditional_writes(self) -> None:
        """Act as an S3-compatible store without conditional PUTs: a create that S3 refuses (412) succeeds.

        The header itself stays: it is signed, so dropping it would fail the request's signature instead."""
        with self.state.lock:
            self.state.conditions_ignored = True

    def forget_exchanges(self) -> None:
        with self.state.lock:
            self.state.exchanges.clear()

    def exchanges(self) -> list[Exchange]:
        with self.state.lock:
            return list(self.state.exchanges)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


class _ProxyHandler(BaseHTTPRequestHandler):
    state: _ProxyState
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.state.uplink.carry(len(body))
        with self.state.lock:
            fault = next((f for f in self.state.faults if f.matches(self.command, self.path)), None)
            if fault is not None:
                fault.hits += 1
        if fault is not None and fault.status != "lost":
            self._record(fault.status, injected=True)
            if fault.status == "reset":
                self._reset()
                return
            self._send_error(int(fault.status))
            return
        upstream = http.client.HTTPConnection("127.0.0.1", self.state.upstream_port, timeout=60)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "expect")}
            upstream.request(self.command, self.path, body=body, headers=headers)
            response = upstream.getresponse()
            payload = response.read()
            self.state.downlink.carry(len(payload))
            if response.status == 412 and self.state.conditions_ignored and "If-None-Match" in self.headers:
                self._record(200, injected=True)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self._record(response.status, injected=fault is not None, body_bytes=len(payload))
            if fault is not None:  # "lost": S3 did the work, the client never hears of it
                self._reset()
                return
            self.send_response(response.status, response.reason)
            for key, value in response.getheaders():
                if key.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                    self.send_header(key, value)
            # A HEAD answer has no body but announces the object's length: pass that on unchanged.
            length = response.getheader("Content-Length") if self.command == "HEAD" else None
            self.send_header("Content-Length", length or str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
        finally:
            upstream.close()

    def _send_error(self, status: int) -> None:
        code, message = _S3_ERRORS.get(status, ("InternalError", "injected"))
        payload = (
            f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}</Message>'
            f"<RequestId>injected</RequestId></Error>"
        ).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _reset(self) -> None:
        # SO_LINGER 0 makes close() send a TCP RST: the client sees "connection reset by peer".
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()

    def _record(self, status: int | str, *, injected: bool, body_bytes: int = 0) -> None:
        headers = {key.lower(): value for key, value in self.headers.items()}
        exchange = Exchange(self.command, self.path, status, injected, body_bytes, self.headers.get("Range"), headers)
        with self.state.lock:
            self.state.exchanges.append(exchange)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward


def wait_until(predicate: Any, timeout: float, interval: float = 0.5, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def pending_uploads(client: Any, key: str, bucket: str = "videos") -> list[Any]:
    """The multipart uploads under ``key`` begun and never completed or aborted (a failure must leave none)."""
    return list(client.list_multipart_uploads(Bucket=bucket, Prefix=key).get("Uploads", []))
