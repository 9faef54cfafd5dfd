"""What the benchmarks ran on: date, machine, load and the versions of everything measured."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import time
from datetime import datetime, timezone
from importlib import metadata
from typing import Any


def _first(path: str, pattern: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                found = re.match(pattern, line)
                if found:
                    return found.group(1).strip()
    except OSError:
        return None
    return None


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _tool_version(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "not installed"
    text = (out.stdout + out.stderr).strip().splitlines()
    return text[0] if text else "unknown"


def code_state(repo: str) -> dict[str, Any]:
    """The commit measured, and the source files that differ from it (uncommitted edits)."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""
    dirty = [line[3:] for line in git("status", "--porcelain", "distscraper").splitlines()]
    return {"commit": git("rev-parse", "--short", "HEAD") or "unknown", "uncommitted": dirty}


def changed_since(repo: str, since: float) -> list[str]:
    """distscraper source files modified after *since* (unix time): edits during the run."""
    root = os.path.join(repo, "distscraper")
    out = []
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if name.endswith((".py", ".lua")) and os.path.getmtime(path) > since:
                out.append(os.path.relpath(path, repo))
    return sorted(out)


def load() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    return [round(x, 2) for x in os.getloadavg()]


def describe(redis_version: str) -> dict[str, Any]:
    """Date, machine and versions, for RESULTS.md and results.json."""
    mem_kb = _first("/proc/meminfo", r"MemTotal:\s+(\d+)")
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "started": time.time(),
        "cpu": _first("/proc/cpuinfo", r"model name\s*:\s*(.*)") or platform.processor(),
        "cores": os.cpu_count(),
        "ram_gib": round(int(mem_kb) / 1024 / 1024, 1) if mem_kb else None,
        "os": (_first("/etc/os-release", r'PRETTY_NAME="?([^"]*)"?') or platform.system())
        + f", kernel {platform.release()}",
        "load_at_start": load(),
        "versions": {
            "Python": platform.python_version(),
            "Scrapy": _version("scrapy"),
            "scrapy-redis": _version("scrapy-redis"),
            "redis-py": _version("redis"),
            "Redis server": redis_version,
            "pymongo": _version("pymongo"),
            "Twisted": _version("twisted"),
            "MongoDB-wire server (SecantusDB)": _version("SecantusDB"),
            "nginx": _tool_version(["nginx", "-v"]).replace("nginx version: ", ""),
            "wrk": _tool_version(["wrk", "--version"]).split(" [")[0],
        },
    }
