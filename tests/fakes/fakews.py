"""The server side of a WebSocket (RFC 6455) for the contract fakes, over a
fakehttp.Handler's connection: the opening handshake (101 Switching
Protocols with Sec-WebSocket-Accept), frames read (masked, as RFC 6455
5.1 requires of a client; fragments joined; pings answered) and written
(unmasked), and the close handshake with a status code and a reason.

A provider's terminal WebSocket (Daytona's PTY sessions, Cloudflare's
Sandbox bridge PTY) is served with it; the libsbx side is libwebsockets.

Python 3 standard library only. One thread reads (recv); any thread may
send (a lock keeps frames whole).
"""

import base64
import hashlib
import struct
import threading

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


class Closed(Exception):
    """The connection ended: .code and .reason of the peer's close frame
    (code None when the transport ended without one)."""

    def __init__(self, code=None, reason=""):
        super().__init__("closed (%s) %s" % (code, reason))
        self.code = code
        self.reason = reason


def upgrade_error(handler):
    """Why the request of @handler is no WebSocket upgrade (a message), or
    None when it is one."""
    h = handler.headers
    if (h.get("Upgrade") or "").lower() != "websocket":
        return "WebSocket upgrade required"
    if "upgrade" not in (h.get("Connection") or "").lower():
        return "Connection: Upgrade required"
    if h.get("Sec-WebSocket-Version") != "13":
        return "Sec-WebSocket-Version 13 required"
    if not h.get("Sec-WebSocket-Key"):
        return "Sec-WebSocket-Key required"
    return None


class WebSocket:
    def __init__(self, handler, protocol=None):
        """Answers the upgrade of @handler (checked with upgrade_error()
        first) with 101, choosing @protocol when given."""
        key = handler.headers.get("Sec-WebSocket-Key").encode()
        accept = base64.b64encode(hashlib.sha1(key + GUID).digest()).decode()
        handler.send_response(101)
        handler.send_header("Upgrade", "websocket")
        handler.send_header("Connection", "Upgrade")
        handler.send_header("Sec-WebSocket-Accept", accept)
        if protocol:
            handler.send_header("Sec-WebSocket-Protocol", protocol)
        handler.end_headers()
        handler.wfile.flush()
        handler._status = 101
        handler.close_connection = True
        self.rfile = handler.rfile
        self.wfile = handler.wfile
        self.lock = threading.Lock()
        self.closed = False         # a close frame was sent

    # ------------------------------------------------------------ writing
    def _frame(self, op, payload):
        n = len(payload)
        head = bytes([0x80 | op])
        if n < 126:
            head += bytes([n])
        elif n < 65536:
            head += bytes([126]) + struct.pack(">H", n)
        else:
            head += bytes([127]) + struct.pack(">Q", n)
        with self.lock:
            if self.closed:
                raise Closed(None, "closed by this side")
            if op == OP_CLOSE:
                self.closed = True
            self.wfile.write(head + payload)
            self.wfile.flush()

    def send_text(self, s):
        self._frame(OP_TEXT, s.encode())

    def send_binary(self, b):
        self._frame(OP_BINARY, bytes(b))

    def close(self, code=1000, reason=""):
        """Sends the close frame (once; later calls do nothing)."""
        try:
            self._frame(OP_CLOSE, struct.pack(">H", code) + reason.encode()[:123])
        except (Closed, OSError, ValueError):
            pass

    # ------------------------------------------------------------ reading
    def _read(self, n):
        b = b""
        while len(b) < n:
            chunk = self.rfile.read(n - len(b))
            if not chunk:
                raise Closed(None, "the connection ended")
            b += chunk
        return b

    def _next_frame(self):
        b0, b1 = self._read(2)
        fin, op = b0 & 0x80, b0 & 0x0F
        if not b1 & 0x80:
            self.close(1002, "client frames must be masked")
            raise Closed(1002, "unmasked client frame")
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack(">H", self._read(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", self._read(8))[0]
        mask = self._read(4)
        data = bytearray(self._read(n))
        for i in range(n):
            data[i] ^= mask[i & 3]
        return fin, op, bytes(data)

    def recv(self):
        """The next whole message: (OP_TEXT | OP_BINARY, bytes). Answers
        pings; raises Closed at the peer's close frame (answered with one)
        or at the transport's end."""
        parts, first = [], None
        while True:
            try:
                fin, op, data = self._next_frame()
            except (OSError, ValueError):
                raise Closed(None, "the connection ended")
            if op == OP_PING:
                try:
                    self._frame(OP_PONG, data)
                except (Closed, OSError):
                    pass
                continue
            if op == OP_PONG:
                continue
            if op == OP_CLOSE:
                code = struct.unpack(">H", data[:2])[0] if len(data) >= 2 else 1005
                self.close(code if code != 1005 else 1000)
                raise Closed(code, data[2:].decode("utf-8", "replace"))
            if op in (OP_TEXT, OP_BINARY):
                first, parts = op, [data]
            elif op == OP_CONT and first is not None:
                parts.append(data)
            if fin and first is not None:
                return first, b"".join(parts)


class Client:
    """The client side, for the fakes' checkers: connects to
    ws://127.0.0.1:@port@path with @headers (a dict), masks its frames.
    .status is the HTTP status of the answer to the upgrade; .body the
    answer's body when it was not 101."""

    def __init__(self, port, path, headers=None, timeout=30):
        import os
        import socket
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = ["GET %s HTTP/1.1" % path, "Host: 127.0.0.1:%d" % port, "Upgrade: websocket",
                 "Connection: Upgrade", "Sec-WebSocket-Key: " + key,
                 "Sec-WebSocket-Version: 13"]
        lines += ["%s: %s" % kv for kv in (headers or {}).items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            self.buf += chunk
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        self.status = int(head.split(b" ")[1]) if head else 0
        self.body = b""
        if self.status != 101:
            n = 0
            for ln in head.split(b"\r\n"):
                if ln.lower().startswith(b"content-length:"):
                    n = int(ln.split(b":")[1])
            while len(self.buf) < n:
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                self.buf += chunk
            self.body = self.buf[:n]

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise Closed(None, "the connection ended")
            self.buf += chunk
        b, self.buf = self.buf[:n], self.buf[n:]
        return b

    def recv(self):
        """(OP_TEXT | OP_BINARY, bytes); raises Closed (code, reason) at the
        server's close frame."""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            data = self._read(n)
            op = b0 & 0x0F
            if op == OP_CLOSE:
                code = struct.unpack(">H", data[:2])[0] if len(data) >= 2 else None
                raise Closed(code, data[2:].decode("utf-8", "replace"))
            if op in (OP_TEXT, OP_BINARY):
                return op, data

    def send(self, op, data):
        import os
        mask = os.urandom(4)
        n = len(data)
        head = bytes([0x80 | op])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        self.sock.sendall(head + mask + bytes(b ^ mask[i & 3] for i, b in enumerate(data)))

    def close(self):
        self.sock.close()
