"""A TCP proxy on loopback that delays every chunk, in each direction, by a fixed time.

With ``delay=0.0005`` a request/response round trip through it costs about
1 ms more than a direct one: Redis "1 ms away". :func:`ping_rtt_ms` verifies
that with timed PINGs.

Why threads and not asyncio: asyncio sleeps in ``epoll_wait``, whose timeout is
whole milliseconds (rounded up), so a 0.5 ms timer fires after 1 ms or more.
Here each direction of each connection has a reader thread that stamps every
chunk with its due time and a writer thread that sleeps until then
(``nanosleep``, sub-millisecond) and forwards it; order and pipelining are kept.
The proxy also counts client->server chunks: each is one request flight.

``python -m benchmarks.latency_proxy --target-port 6379`` runs one until Ctrl-C.
"""

from __future__ import annotations

import argparse
import queue
import socket
import statistics
import threading
import time

from distscraper.sandbox.servers import free_port


class LatencyProxy:
    """Forwards 127.0.0.1:<port> to <target_host>:<target_port> with *delay* s each way."""

    def __init__(self, target_port: int, delay: float = 0.0005, target_host: str = "127.0.0.1",
                 port: int | None = None) -> None:
        self.target = (target_host, target_port)
        self.delay = delay
        self.port = port or free_port()
        self.requests = 0  # client->server chunks forwarded
        self._listener: socket.socket | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "LatencyProxy":
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        self._listener = listener
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()
        return self

    def calibrate(self, rtt_ms: float = 1.0, rounds: int = 4) -> float:
        """Tune the per-direction delay so a PING costs about *rtt_ms* more than direct; returns it."""
        direct = ping_rtt_ms(self.target[1])
        for _ in range(rounds):
            added = ping_rtt_ms(self.port, 100) - direct
            self.delay = max(0.0, self.delay + (rtt_ms - added) / 2000)
        return ping_rtt_ms(self.port) - direct

    def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        with self._lock:
            socks, self._sockets = self._sockets, []
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def _accept(self) -> None:
        while self._listener is not None:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [client, upstream]
            self._pipe(client, upstream, count=True)
            self._pipe(upstream, client, count=False)

    def _pipe(self, src: socket.socket, dst: socket.socket, count: bool) -> None:
        chunks: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()

        def read() -> None:
            while True:
                try:
                    data = src.recv(262144)
                except OSError:
                    data = b""
                chunks.put((time.monotonic() + self.delay, data))
                if not data:
                    return
                if count:
                    self.requests += 1

        def write() -> None:
            while True:
                due, data = chunks.get()
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                try:
                    if not data:
                        dst.shutdown(socket.SHUT_WR)
                        return
                    dst.sendall(data)
                except OSError:
                    return

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=write, daemon=True).start()


def ping_rtt_ms(port: int, n: int = 200) -> float:
    """Median time (ms) of a Redis PING round trip to 127.0.0.1:<port>."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            sock.sendall(b"PING\r\n")
            got = b""
            while not got.endswith(b"\r\n"):
                got += sock.recv(64)
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description="Delay TCP traffic to a local Redis.")
    parser.add_argument("--target-port", type=int, required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay-ms", type=float, default=0.5, help="added each way")
    args = parser.parse_args()
    proxy = LatencyProxy(args.target_port, args.delay_ms / 1000, port=args.port or None).start()
    print(f"proxy 127.0.0.1:{proxy.port} -> {args.target_port}: PING "
          f"{ping_rtt_ms(proxy.port):.2f} ms (direct {ping_rtt_ms(args.target_port):.2f} ms)", flush=True)
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        proxy.stop()


if __name__ == "__main__":
    main()
