#!/usr/bin/env python3
"""http_clients.py — misbehaving HTTP clients for tests/integration/test_api_http.sh.

    http_clients.py slowloris HOST PORT N        N connections sending a request head one byte
                                                 per second; prints how many the server
                                                 answered 408 and closed, and how many it
                                                 closed otherwise, once all are closed
    http_clients.py idle HOST PORT N HOLD_S      N connections that send nothing; holds them
                                                 open HOLD_S seconds (printing "open" once all
                                                 are connected, for the caller to look at the
                                                 server meanwhile), then reports how many the
                                                 server had closed and waits for the rest

Every loop is bounded (60 s at most); exit status 1 when the server kept a connection open
past that.
"""
import select
import socket
import sys
import time

LIMIT_S = 60
HEAD = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nUser-Agent: slowloris\r\nX-Pad: " + b"a" * 200


def connect(host, port, n):
    socks = []
    for _ in range(n):
        s = socket.create_connection((host, port), timeout=10)
        s.setblocking(False)
        socks.append(s)
    return socks


def drain(s):
    """Reads what is there; returns (bytes, closed)."""
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except BlockingIOError:
            return data, False
        except ConnectionResetError:
            return data, True
        if not chunk:
            return data, True
        data += chunk


def slowloris(host, port, n):
    socks = connect(host, port, n)
    got = {s: b"" for s in socks}
    open_ = set(socks)
    sent = 0
    start = time.monotonic()
    while open_ and time.monotonic() - start < LIMIT_S:
        for s in list(open_):
            if sent < len(HEAD):
                try:
                    s.send(HEAD[sent:sent + 1])
                except (BrokenPipeError, ConnectionResetError):
                    pass
        sent += 1
        deadline = time.monotonic() + 1.0
        while open_ and time.monotonic() < deadline:
            ready, _, _ = select.select(list(open_), [], [], max(0.0, deadline - time.monotonic()))
            for s in ready:
                data, closed = drain(s)
                got[s] += data
                if closed:
                    open_.discard(s)
    timed_out = sum(1 for s in socks if got[s].startswith(b"HTTP/1.1 408 "))
    print(f"slowloris: {n} connections, {timed_out} answered 408, "
          f"{n - timed_out - len(open_)} closed otherwise, {len(open_)} still open, "
          f"{sent} bytes sent each, {time.monotonic() - start:.1f} s")
    return 0 if not open_ else 1


def idle(host, port, n, hold):
    socks = connect(host, port, n)
    print("open", flush=True)
    closed = set()
    start = time.monotonic()
    while time.monotonic() - start < hold:
        ready, _, _ = select.select([s for s in socks if s not in closed], [], [], 0.2)
        for s in ready:
            if drain(s)[1]:
                closed.add(s)
    early = len(closed)
    while len(closed) < n and time.monotonic() - start < LIMIT_S:
        ready, _, _ = select.select([s for s in socks if s not in closed], [], [], 0.5)
        for s in ready:
            if drain(s)[1]:
                closed.add(s)
    print(f"idle: {n} connections, {early} closed by the server within {hold} s, "
          f"{len(closed)} in all, {n - len(closed)} still open")
    return 0 if len(closed) == n else 1


def main():
    mode = sys.argv[1]
    host, port, n = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if mode == "slowloris":
        return slowloris(host, port, n)
    return idle(host, port, n, float(sys.argv[5]))


if __name__ == "__main__":
    sys.exit(main())
