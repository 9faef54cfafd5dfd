"""A generated sandbox site, pre-rendered to files and served by nginx.

:class:`StaticSite` guarantees:

* the files are exactly what :meth:`SiteSpec.render` gives for every path a
  robots-obeying crawler reaches from ``/`` (plus ``robots.txt``); 404 pages
  answer 404 with one generic body;
* nginx is a child process in its own session, started on a free loopback
  port with a generated config, and only ever signalled by its own PID;
* every response is one line ``<unix time, ms> <status> <path>`` in the access
  log, written at once; :meth:`mark` and :meth:`hits` read the lines of one
  benchmark run by byte offset.

nginx comes from Debian (``nginx-light``): :func:`ensure_binary` installs it
with apt-get only when the binary is missing.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from distscraper.sandbox.servers import free_port
from distscraper.sandbox.site import SiteSpec

NGINX_CONF = """\
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  log_format bench '$msec $status $request_uri';
  access_log {dir}/access.log bench;
  types {{ }}
  default_type "text/html; charset=utf-8";
  sendfile on;
  tcp_nodelay on;
  keepalive_timeout 120;
  keepalive_requests 1000000;
  client_body_temp_path {dir}/tmp/body;
  proxy_temp_path {dir}/tmp/proxy;
  fastcgi_temp_path {dir}/tmp/fastcgi;
  uwsgi_temp_path {dir}/tmp/uwsgi;
  scgi_temp_path {dir}/tmp/scgi;
  server {{
    listen 127.0.0.1:{port} backlog=4096;
    root {dir}/www;
    error_page 404 /__404.html;
    location = /robots.txt {{ default_type "text/plain; charset=utf-8"; }}
    location / {{ try_files $uri ${{uri}}index.html =404; }}
  }}
}}
"""


def ensure_binary(name: str, package: str) -> str:
    """The path of *name*; install Debian's *package* with apt-get when it is missing."""
    found = shutil.which(name) or (f"/usr/sbin/{name}" if os.path.exists(f"/usr/sbin/{name}") else None)
    if found:
        return found
    print(f"[bench] {name} not found: apt-get install -y {package}", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=False, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", package], check=True, env=env)
    found = shutil.which(name) or (f"/usr/sbin/{name}" if os.path.exists(f"/usr/sbin/{name}") else None)
    if not found:
        raise RuntimeError(f"{name} still missing after installing {package}")
    return found


@dataclass(frozen=True)
class Hit:
    t: float  # unix time (s) the response was logged
    status: int
    path: str


class StaticSite:
    """A SiteSpec on disk behind nginx (see module docstring)."""

    def __init__(self, spec: SiteSpec, work_dir: Path) -> None:
        self.spec = spec
        self.dir = Path(work_dir)
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.pages = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str = "/") -> str:
        return self.base_url + path

    def expected_urls(self) -> set[str]:
        return self.spec.expected_urls(self.base_url)

    def render(self) -> int:
        """Write every reachable page to ``www/``; returns the number of pages."""
        www = self.dir / "www"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o755)  # nginx's worker runs as www-data (the parents must be 0755 too)
        shutil.rmtree(www, ignore_errors=True)
        www.mkdir(parents=True)
        for tmp in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (self.dir / "tmp" / tmp).mkdir(parents=True, exist_ok=True)
        paths = self.spec.expected_statuses()
        for path, status in paths.items():
            if status != 200:
                continue
            target = www / (path.lstrip("/") + ("index.html" if path.endswith("/") else ""))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(self.spec.render(path, self.base_url).body)
        (www / "robots.txt").write_bytes(self.spec.render("/robots.txt", self.base_url).body)
        (www / "__404.html").write_bytes(self.spec.render("/missing/0", self.base_url).body)
        self.pages = len(paths)
        return self.pages

    def start(self) -> "StaticSite":
        nginx = ensure_binary("nginx", "nginx-light")
        conf = self.dir / "nginx.conf"
        conf.write_text(NGINX_CONF.format(dir=self.dir, port=self.port))
        (self.dir / "access.log").touch()
        self.proc = subprocess.Popen(
            [nginx, "-c", str(conf), "-p", str(self.dir), "-g", "daemon off;"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(self.dir / "nginx.stderr", "ab"), start_new_session=True)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"nginx did not start: {(self.dir / 'error.log').read_text()[-2000:]}"
                                       if (self.dir / "error.log").exists() else "nginx did not start")
                time.sleep(0.05)

    def stop(self) -> None:
        """SIGQUIT (graceful) by PID, SIGKILL after 5 s."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGQUIT)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()

    # --- the access log ---------------------------------------------------------
    def mark(self) -> int:
        """A position in the access log: :meth:`hits` reads from there."""
        return (self.dir / "access.log").stat().st_size

    def hits(self, since: int = 0, until: int | None = None) -> list[Hit]:
        """Responses logged between two marks, in log order."""
        out: list[Hit] = []
        with open(self.dir / "access.log", "rb") as fh:
            fh.seek(since)
            data = fh.read() if until is None else fh.read(max(0, until - since))
        for line in data.decode("utf-8", "replace").splitlines():
            parts = line.split(" ", 2)
            if len(parts) == 3:
                out.append(Hit(float(parts[0]), int(parts[1]), parts[2]))
        return out


WRK_SCRIPT = """\
paths = {%s}
i = 0
request = function()
  i = i + 1
  return wrk.format("GET", paths[(i %% #paths) + 1])
end
"""


def load_test(site: StaticSite, seconds: int = 5, connections: int = 16) -> dict[str, float]:
    """Requests/s nginx serves alone: wrk, 1 thread, cycling through up to 5,000 pages of the site."""
    wrk = ensure_binary("wrk", "wrk")
    paths = sorted(p for p, s in site.spec.expected_statuses().items() if s == 200)[:5000]
    script = site.dir / "paths.lua"
    script.write_text(WRK_SCRIPT % ",".join(f'"{p}"' for p in paths))
    mark = site.mark()
    out = subprocess.run([wrk, "-t1", f"-c{connections}", f"-d{seconds}s", "-s", str(script), site.url("/")],
                         capture_output=True, text=True, timeout=seconds + 30).stdout
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    latency = re.search(r"Latency\s+([\d.]+)(us|ms|s)", out)
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    errors = sum(1 for h in site.hits(mark) if h.status != 200)
    return {"requests_per_s": round(float(rps.group(1))) if rps else 0.0,
            "latency_ms_mean": round(float(latency.group(1)) * scale[latency.group(2)], 3) if latency else 0.0,
            "connections": connections, "seconds": seconds, "distinct_pages": len(paths),
            "non_200": errors}
