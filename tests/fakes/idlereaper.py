"""An idle reaper (CASE-52 A): a loopback TCP proxy that closes a connection
after IDLE seconds in which no byte went in either direction, as a NAT, a
load balancer or a provider's idle sweep does.

    python3 idlereaper.py TARGET_PORT IDLE_SECONDS

Listens on 127.0.0.1 on an ephemeral port and prints "PORT <n>" on stdout
once it listens; each accepted connection is joined to 127.0.0.1:TARGET_PORT
and the bytes are copied both ways. A connection with no byte either way for
IDLE_SECONDS is closed at both ends (shutdown, then close), and one line
"REAPED <n>" (n: the connections reaped so far) goes to stderr. SIGTERM or
SIGINT stop it and close every connection.

Python 3 standard library only.
"""

import selectors
import signal
import socket
import sys
import time


def main():
    target = int(sys.argv[1])
    idle = float(sys.argv[2])
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(128)
    lsock.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(lsock, selectors.EVENT_READ, None)
    pairs = {}          # socket -> [peer, last activity (monotonic)]
    reaped = 0
    stop = []

    def on_signal(*_):
        stop.append(1)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # A signal wakes the select at once (it is otherwise resumed after the
    # handler, and would sleep up to IDLE_SECONDS more).
    rsig, wsig = socket.socketpair()
    rsig.setblocking(False)
    wsig.setblocking(False)
    signal.set_wakeup_fd(wsig.fileno())
    sel.register(rsig, selectors.EVENT_READ, None)
    sys.stdout.write("PORT %d\n" % lsock.getsockname()[1])
    sys.stdout.flush()

    def close_pair(s):
        peer = pairs.pop(s, [None])[0]
        for x in (s, peer):
            if x is None:
                continue
            pairs.pop(x, None)
            try:
                sel.unregister(x)
            except (KeyError, ValueError):
                pass
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            x.close()

    while not stop:
        now = time.monotonic()
        # The next connection to go idle decides how long to wait.
        wait = idle
        for s, (peer, last) in list(pairs.items()):
            if s not in pairs:
                continue        # its peer was reaped with it
            left = last + idle - now
            if left <= 0:
                close_pair(s)
                reaped += 1
                sys.stderr.write("REAPED %d\n" % reaped)
                sys.stderr.flush()
            else:
                wait = min(wait, left)
        try:
            events = sel.select(timeout=wait)
        except InterruptedError:
            continue
        for key, _ in events:
            s = key.fileobj
            if s is rsig:
                try:
                    rsig.recv(64)
                except OSError:
                    pass
                continue
            if s is lsock:
                try:
                    c, _ = lsock.accept()
                except BlockingIOError:
                    continue
                u = socket.create_connection(("127.0.0.1", target))
                for x in (c, u):
                    x.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    x.setblocking(False)
                    sel.register(x, selectors.EVENT_READ, None)
                t = time.monotonic()
                pairs[c] = [u, t]
                pairs[u] = [c, t]
                continue
            if s not in pairs:
                continue
            peer = pairs[s][0]
            try:
                data = s.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""
            if not data:
                close_pair(s)
                continue
            try:
                peer.setblocking(True)
                peer.sendall(data)
                peer.setblocking(False)
            except OSError:
                close_pair(s)
                continue
            t = time.monotonic()
            pairs[s][1] = t
            pairs[peer][1] = t
    for s in list(pairs):
        close_pair(s)
    lsock.close()
    signal.set_wakeup_fd(-1)
    rsig.close()
    wsig.close()


if __name__ == "__main__":
    main()
