"""`scrapy crawl` worker processes for the benchmarks: start, wait with CPU time, read stats.

Guarantees: a worker runs from the repository root in its own session with its
output in a log file; it is only ever signalled by its own PID; :func:`wait`
reaps it with ``wait4`` so its user+sys CPU time is exact; :func:`log_stats`
reads the numbers of the final "Dumping Scrapy stats" block of its log.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import psutil

REPO_ROOT = Path(__file__).resolve().parent.parent


def scrapy_env(redis_url: str, mongo_uri: str) -> dict[str, str]:
    """os.environ pointing workers at the benchmark's servers and this checkout."""
    env = dict(os.environ)
    env.update(REDIS_URL=redis_url, MONGO_URI=mongo_uri, PYTHONPATH=str(REPO_ROOT),
               PYTHONUNBUFFERED="1")
    env.pop("SCRAPY_SETTINGS_MODULE", None)
    return env


@dataclass
class Worker:
    """One `scrapy crawl` process."""

    proc: subprocess.Popen[bytes]
    log_path: Path
    cpu_at_start: float | None = None  # user+sys seconds when the crawl began fetching
    cpu_total: float | None = None  # user+sys seconds at exit
    started: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.returncode is None

    def cpu_now(self) -> float | None:
        try:
            t = psutil.Process(self.pid).cpu_times()
            return t.user + t.system
        except psutil.Error:
            return None

    def reap(self, block: bool = False) -> bool:
        """Collect the exit status and CPU time if the process ended; True once it has."""
        if self.proc.returncode is not None:
            return True
        try:
            pid, status, usage = os.wait4(self.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            self.proc.poll()
            return self.proc.returncode is not None
        if pid == 0:
            return False
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.cpu_total = usage.ru_utime + usage.ru_stime
        return True

    def signal(self, sig: int) -> None:
        if self.proc.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass


def start(spider: str, settings: Mapping[str, object], env: Mapping[str, str], log_path: Path,
          args: Mapping[str, str] | None = None) -> Worker:
    """``python -m scrapy crawl <spider> -s K=V ... -a K=V ...`` with output to *log_path*."""
    cmd = [sys.executable, "-m", "scrapy", "crawl", spider]
    for key, value in settings.items():
        cmd += ["-s", f"{key}={value}"]
    for key, value in (args or {}).items():
        cmd += ["-a", f"{key}={value}"]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        out.write(("$ " + " ".join(cmd) + "\n").encode())
        out.flush()
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=dict(env), stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return Worker(proc, log_path)


def wait_all(workers: list[Worker], timeout: float, on_tick: Callable[[], None] | None = None) -> None:
    """Reap every worker; SIGKILL (by PID) those still running after *timeout* seconds."""
    deadline = time.monotonic() + timeout
    while not all(w.reap() for w in workers):
        if on_tick is not None:
            on_tick()
        if time.monotonic() > deadline:
            for w in workers:
                w.signal(signal.SIGKILL)
                w.reap(block=True)
            raise TimeoutError(f"workers still running after {timeout:.0f}s; logs: "
                               + ", ".join(str(w.log_path) for w in workers))
        time.sleep(0.05)


_STAT = re.compile(r"'([^']+)':\s*(-?\d+(?:\.\d+)?(?:e-?\d+)?)[,}]")


def log_stats(log_path: Path) -> dict[str, float]:
    """The numeric stats of the last 'Dumping Scrapy stats' block in a worker's log."""
    text = log_path.read_text(errors="replace")
    start = text.rfind("Dumping Scrapy stats:")
    if start < 0:
        return {}
    block = text[start:]
    end = block.find("}")
    block = block[:end + 1] if end >= 0 else block
    return {k: float(v) for k, v in _STAT.findall(block)}
