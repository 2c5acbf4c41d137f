"""A TCP proxy for the tests that cuts connections for real: between a Kafka client and `mqindex serve`, it
relays bytes both ways and closes a connection (both sockets) once it has relayed that connection's budget of
bytes, wherever in a request or a response that falls. `hold()` stops relaying answers to the client (the
server has the request, the client never sees the acknowledgement) until `cut_all()`."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator


class CuttingProxy:
    def __init__(self, target: tuple[str, int], budgets: Iterator[int | None]) -> None:
        self.target = target
        self.budgets = budgets  # bytes relayed (both ways) before each new connection is cut; None: never
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.cuts = 0
        self.upstream_bytes = 0  # client -> server, all connections
        self.downstream_bytes = 0
        self.dropped_bytes = 0  # answers not relayed while held
        self._held = threading.Event()
        self._lock = threading.Lock()
        self._conns: list[tuple[socket.socket, socket.socket]] = []
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def hold(self) -> None:
        self._held.set()

    def cut_all(self) -> None:
        """Close every open connection and relay answers again to the connections that come next."""
        with self._lock:
            conns, self._conns = self._conns, []
            self._held.clear()
        for a, b in conns:
            self._close(a, b)

    def close(self) -> None:
        self._closed = True
        self.listener.close()
        self.cut_all()
        self._thread.join(10)

    @staticmethod
    def _close(a: socket.socket, b: socket.socket) -> None:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=10)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            state = {"left": next(self.budgets, None)}
            with self._lock:
                self._conns.append((client, server))
            for src, dst, up in ((client, server, True), (server, client, False)):
                threading.Thread(target=self._pump, args=(src, dst, up, state, client, server), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, up: bool, state: dict[str, int | None],
              client: socket.socket, server: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if not up and self._held.is_set():
                    with self._lock:
                        self.dropped_bytes += len(data)
                    continue  # the answer is dropped: the client waits for it until the connection is cut
                with self._lock:
                    left = state["left"]
                    if left is not None:
                        if len(data) >= left:
                            data, state["left"] = data[:left], 0
                        else:
                            state["left"] = left - len(data)
                    if up:
                        self.upstream_bytes += len(data)
                    else:
                        self.downstream_bytes += len(data)
                if data:
                    dst.sendall(data)
                if state["left"] == 0:
                    with self._lock:
                        if not state.get("cut"):
                            state["cut"] = 1
                            self.cuts += 1
                    break
        except OSError:
            pass
        self._close(client, server)
