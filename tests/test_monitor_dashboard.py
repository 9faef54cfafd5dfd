"""The dashboard: its endpoints (fast, in-process) and the page in a real headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest
import redis
from scrapy.settings import Settings

from distscraper.frontier.keys import FrontierKeys
from distscraper.monitor.dashboard import DashboardServer, page
from distscraper.monitor.source import StatusSource
from distscraper.sandbox.servers import free_port
from helpers import REPO_ROOT, log_tail, scrapy_env, start_worker, stop_worker, wait_all

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
FIGURE = re.compile(r'data-figure="([a-z_-]+)"[^>]*>([^<]*)<')


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=20) as resp:
            body, code = resp.read(), resp.status
    except urllib.error.HTTPError as exc:
        body, code = exc.read(), exc.code
    return code, json.loads(body) if body[:1] in (b"{", b"[") else body


@pytest.fixture
def dashboard(redis_server: Any, mongo_server: Any, prefix: str) -> Iterator[DashboardServer]:
    settings = Settings({"REDIS_URL": redis_server.url, "MONGO_URI": mongo_server.uri,
                         "FRONTIER_KEY_PREFIX": prefix, "MONGO_DATABASE": prefix})
    server = DashboardServer(StatusSource.from_settings(settings), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        server.source.close()


def test_page_is_self_contained() -> None:
    html = page().decode()
    assert "<script>" in html and "<style>" in html
    # The only URL is the SVG namespace name; nothing is fetched but /api/*.
    assert re.findall(r"https?://[^\s\"')]+", html) == ["http://www.w3.org/2000/svg"]
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", html)
    assert "@import" not in html and "url(" not in html
    assert re.findall(r'fetch\(([^,)]*)', html) == ["url"]  # only getJSON fetches
    assert set(re.findall(r'getJSON\("([^"]+)"\)', html)) == {"/api/status", "/api/history"}


def test_endpoints(dashboard: DashboardServer, redis_client: redis.Redis, prefix: str) -> None:
    keys = FrontierKeys(prefix)
    redis_client.zadd(keys.queue("a.com"), {b'{"u":"u1"}': 1, b'{"u":"u2"}': 2})
    for t, done in ((100.0, 1), (101.0, 5)):
        redis_client.lpush(keys.history, json.dumps({"t": t, "done": done, "queued": 2, "inflight": 0,
                                                     "delayed": 0, "dead": 0, "errors": 0}))
    code, html = get(dashboard.url)
    assert code == 200 and b"data-figure=\"queued\"" in html
    code, status = get(dashboard.url + "api/status")
    assert code == 200 and status["queued"] == 2 and status["frontier"] == prefix
    assert status["documents"] == 0
    expected = dashboard.source.status()
    assert {k: v for k, v in status.items() if k != "at"} == {k: v for k, v in expected.items() if k != "at"}
    code, history = get(dashboard.url + "api/history")
    assert code == 200 and [s["done"] for s in history] == [1, 5]
    assert get(dashboard.url + "api/history?limit=1")[1] == [history[-1]]
    assert get(dashboard.url + "nope")[0] == 404


def test_unreachable_redis_is_a_503(mongo_server: Any, prefix: str) -> None:
    settings = Settings({"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0", "MONGO_URI": mongo_server.uri,
                         "FRONTIER_KEY_PREFIX": prefix})
    server = DashboardServer(StatusSource.from_settings(settings), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        code, body = get(server.url + "api/status")
    finally:
        server.shutdown()
        server.server_close()
        server.source.close()
    assert code == 503 and "cannot read Redis" in body["error"]


# -- the browser ---------------------------------------------------------------------------
def png_colours(data: bytes) -> int:
    """Distinct pixel colours of an 8-bit RGB/RGBA PNG (decoded here: no imaging library)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width, height, bpp = 8, [], 0, 0, 3
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6), f"unexpected PNG format {depth}/{ctype}"
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + length
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    prev = bytearray(stride)
    colours: set[bytes] = set()
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride) if kind else ():
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if kind == 1:
                pred = a
            elif kind == 2:
                pred = b
            elif kind == 3:
                pred = (a + b) >> 1
            else:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
            line[i] = (line[i] + pred) & 255
        colours.update(bytes(line[i:i + bpp]) for i in range(0, stride, bpp))
        prev = line
    return len(colours)


def chromium(url: str, tmp: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp}", "--window-size=1280,900", "--virtual-time-budget=5000", *args, url]
    return subprocess.run(cmd, capture_output=True, timeout=120, check=True)


def shown_figures(html: str) -> dict[str, str]:
    return {name: text.strip() for name, text in FIGURE.findall(html)}


def as_number(text: str) -> float | None:
    return None if text in ("–", "-", "") else float(text)


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_dashboard_in_headless_chromium(redis_server: Any, mongo_server: Any, redis_client: redis.Redis,
                                        prefix: str, site: Callable[..., Any], tmp_path: Path) -> None:
    server = site(pages=300, categories=5)
    env = scrapy_env(redis_server.url, mongo_server.uri)
    common = [f"FRONTIER_KEY_PREFIX={prefix}", f"MONGO_DATABASE={prefix}", "HEARTBEAT_TTL=3"]
    worker = start_worker({"FRONTIER_KEY_PREFIX": prefix, "MONGO_DATABASE": prefix, "HEARTBEAT_INTERVAL": 0.5,
                           "HEARTBEAT_TTL": 3, "MAX_IDLE_TIME_BEFORE_CLOSE": 3,
                           "CONCURRENT_REQUESTS_PER_DOMAIN": 1}, env, tmp_path / "worker.log")
    port = free_port()
    cmd = [os.fspath(Path(os.sys.executable)), "-m", "scrapy", "dashboard", "--port", str(port)]
    for setting in common:
        cmd += ["-s", setting]
    dash = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        redis_client.lpush(FrontierKeys(prefix).start_urls, server.url("/"))
        deadline = time.monotonic() + 60
        while True:  # the dashboard is up and the crawl has started
            try:
                if get(url + "api/status")[1]["done"] > 0:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, log_tail(worker)
            time.sleep(0.3)
        chromium(url, tmp_path / "profile1", f"--screenshot={tmp_path / 'dash.png'}")
        assert png_colours((tmp_path / "dash.png").read_bytes()) > 100, "the screenshot is (nearly) blank"

        assert wait_all([worker], timeout=120) == [0]  # quiet from here on: every figure is stable
        dom = chromium(url, tmp_path / "profile2", "--dump-dom").stdout.decode()
        status = get(url + "api/status")[1]
        shown = shown_figures(dom)
        assert shown.pop("frontier") == prefix
        assert len(shown) >= 15, shown
        for name, text in shown.items():
            value = status["queue_bands"][name[5:]] if name.startswith("band-") else status[name]
            assert as_number(text) == (None if value is None else round(float(value), 1)), name
        assert status["documents"] == len(server.spec.expected_urls(server.base_url))
        assert status["queued"] == 0 and status["live_nodes"] == 0

        os.kill(dash.pid, signal.SIGINT)  # Ctrl-C stops it cleanly
        out, _ = dash.communicate(timeout=20)
        assert dash.returncode == 0, out.decode(errors="replace")
        assert b"Traceback" not in out
    finally:
        stop_worker(worker, signal.SIGKILL, timeout=10)
        if dash.poll() is None:
            os.kill(dash.pid, signal.SIGKILL)
            dash.wait()
