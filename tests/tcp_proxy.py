"""A TCP proxy on loopback that a test can cut: the network between a client and a server going away and coming back.

`TcpProxy(target_host, target_port)` listens on a free loopback port (`.port`, `.endpoint`) and forwards bytes both
ways, two threads per connection. `.cut()` resets every open connection and closes the listening socket, so
requests in flight fail and new connections are refused; `.restore()` listens again on the same port; `.close()`
cuts for good. `.cut_on(marker)` cuts at a chosen moment: when a request holding `marker` is sent (before the server
sees it), or once that many bytes of the server's answer to it have passed. Free of pytest: benchmarks use it too.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time

HOST = "127.0.0.1"


class TcpProxy:
    def __init__(self, target_host: str, target_port: int, host: str = HOST, port: int = 0) -> None:
        self.target = (target_host, target_port)
        self.host = host
        self.port = port
        self.accepted = 0  # connections accepted since the start
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._connections: set[socket.socket] = set()
        self._closed = False
        self._trigger: tuple[bytes, int | None] | None = None  # cut_on's (marker, answer bytes)
        self._answers: dict[socket.socket, int] = {}  # upstream socket -> answer bytes still let through
        self.triggered = threading.Event()
        self._listen()

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def is_cut(self) -> bool:
        return self._listener is None

    def open_connections(self) -> int:
        """Client connections open through the proxy now."""
        with self._lock:
            return len(self._connections) // 2

    # -- listening -------------------------------------------------------------------------------------------
    def _listen(self) -> None:
        deadline = time.monotonic() + 10
        while True:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                listener.bind((self.host, self.port))
                break
            except OSError:
                listener.close()
                if not self.port or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        listener.listen(128)
        listener.settimeout(0.1)  # the accept loop notices a cut within this time on any platform
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True, name=f"tcp-proxy-{self.port}").start()

    def _accept(self, listener: socket.socket) -> None:
        while self._listener is listener:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed by cut()
            client.settimeout(None)
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _reset(client)
                continue
            with self._lock:
                if self._listener is not listener:  # cut meanwhile
                    _reset(client)
                    _reset(upstream)
                    continue
                self._connections.update((client, upstream))
                self.accepted += 1
            for src, dst, request in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pump, args=(src, dst, request), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, request: bool = False) -> None:
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                if request and self._trigger is not None and self._trigger[0] in data:
                    with self._lock:
                        trigger, self._trigger = self._trigger, None
                    if trigger is not None:
                        if trigger[1] is None:  # the request never reaches the server
                            self.triggered.set()
                            self.cut()
                            break
                        self._answers[dst] = trigger[1]
                elif not request and src in self._answers:
                    left = self._answers[src]
                    if len(data) >= left:  # the answer cut after `left` bytes
                        dst.sendall(data[:left])
                        self.triggered.set()
                        self.cut()
                        break
                    self._answers[src] = left - len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:  # either side ending ends the connection (HTTP clients do not half-close)
            with self._lock:
                self._connections.discard(src)
                self._connections.discard(dst)
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()

    # -- cutting ---------------------------------------------------------------------------------------------
    def cut_on(self, marker: bytes, answer_bytes: int | None = None) -> None:
        """Cut (as `cut`) when a client sends bytes holding `marker` (a request line: b"PUT /bucket/key"): at once,
        the request not forwarded, or, with `answer_bytes`, once that many bytes of the server's answer on that
        connection reached the client. `triggered` is set when it happened."""
        self.triggered.clear()
        self._answers.clear()
        self._trigger = (marker, answer_bytes)

    def cut(self) -> None:
        """Reset every open connection and stop listening: requests in flight fail, new connections are refused."""
        with self._lock:
            listener, self._listener = self._listener, None
            connections, self._connections = list(self._connections), set()
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for sock in connections:
            _reset(sock)

    def restore(self) -> None:
        """Listen again on the same port."""
        if self._closed:
            raise RuntimeError("the proxy is closed")
        if self._listener is None:
            self._listen()

    def close(self) -> None:
        self._closed = True
        self.cut()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset (linger 0), as a dropped network looks to the peer."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)  # wakes the thread reading it (closing alone does not); sends nothing
    with contextlib.suppress(OSError):
        sock.close()
