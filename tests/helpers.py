"""Helpers for integration tests that run real ``scrapy crawl`` workers.

Guarantees: workers run in their own session with their output in a log file,
are only ever signalled by their own PID, and a test that waits too long gets
a failure showing the tail of every worker's log (the workers are killed).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from distscraper.sandbox.servers import stop_process

REPO_ROOT = Path(__file__).resolve().parent.parent

__all__ = [
    "REPO_ROOT",
    "WorkerProcess",
    "scrapy_env",
    "setting_arg",
    "start_worker",
    "stop_worker",
    "wait_all",
    "log_tail",
    "fetch_counts",
]


class WorkerProcess(subprocess.Popen[bytes]):
    """A ``scrapy crawl`` subprocess that remembers where its log is."""

    log_path: Path


def scrapy_env(redis_url: str, mongo_uri: str) -> dict[str, str]:
    """A copy of os.environ pointing workers at the given servers and this checkout."""
    env = dict(os.environ)
    env["REDIS_URL"] = redis_url
    env["MONGO_URI"] = mongo_uri
    env["PYTHONPATH"] = str(REPO_ROOT)
    env.pop("SCRAPY_SETTINGS_MODULE", None)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def setting_arg(value: object) -> str:
    """Encode a setting value for ``-s K=V``.

    Strings as is; bools/numbers with str(); a flat list of strings joined with
    "," (what Scrapy's ``getlist`` splits); anything else (dicts, nested lists)
    as JSON (what ``getdict`` parses).
    """
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, int, float)):
        return str(value)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    return json.dumps(value)


def start_worker(settings: Mapping[str, object], env: Mapping[str, str],
                 log_path: str | os.PathLike[str], spider: str = "site") -> WorkerProcess:
    """Start ``python -m scrapy crawl <spider> -s K=V ...`` from REPO_ROOT.

    stdout and stderr go to ``log_path`` (appended); the worker gets its own session.
    """
    cmd = [sys.executable, "-m", "scrapy", "crawl", spider]
    for key, value in settings.items():
        cmd += ["-s", f"{key}={setting_arg(value)}"]
    path = Path(log_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as out:
        out.write(("$ " + " ".join(cmd) + "\n").encode())
        out.flush()
        proc = WorkerProcess(cmd, cwd=REPO_ROOT, env=dict(env), stdin=subprocess.DEVNULL,
                             stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    proc.log_path = path
    return proc


def stop_worker(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM,
                timeout: float | None = None) -> int | None:
    """Send ``sig`` to the worker's PID (if it still runs).

    With a timeout, wait for it to exit and return its exit code; a worker still
    running after the timeout is SIGKILLed and the test fails with its log tail.
    """
    if proc.poll() is None:
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass
    if timeout is None:
        return proc.poll()
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        pytest.fail(f"worker {proc.pid} did not exit {timeout:.0f}s after signal {sig}\n"
                    + log_tail(proc))


def _kill(proc: subprocess.Popen[bytes]) -> None:
    stop_process(proc, signal.SIGKILL)


def log_tail(proc: subprocess.Popen[bytes], lines: int = 40) -> str:
    """The last lines of a worker's log, with a header naming the worker."""
    path = getattr(proc, "log_path", None)
    if path is None:
        return f"--- worker {proc.pid}: no log file ---"
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        text = "<log not readable>"
    tail = "\n".join(text.splitlines()[-lines:])
    return f"--- worker {proc.pid} (exit {proc.returncode}) {path} ---\n{tail}"


def wait_all(procs: Iterable[subprocess.Popen[bytes]], timeout: float) -> list[int]:
    """Wait for every worker to exit and return their exit codes, in order.

    On timeout the ones still running are SIGKILLed (by PID) and the test fails
    with the tail of every worker's log.
    """
    procs = list(procs)
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in procs):
        if time.monotonic() > deadline:
            late = [p.pid for p in procs if p.poll() is None]
            for p in procs:
                _kill(p)
            pytest.fail(f"workers {late} still running after {timeout:.0f}s\n"
                        + "\n".join(log_tail(p) for p in procs))
        time.sleep(0.1)
    return [int(p.returncode) for p in procs]


def fetch_counts(hits: Iterable[Mapping[str, object]], host: str | None = None) -> Counter[str]:
    """How many times each path (with query) was requested, optionally for one Host only."""
    return Counter(str(h["path"]) for h in hits if host is None or h.get("host") == host)
