"""``scrapy dashboard``: a live web page of the cluster's status, with charts. Read-only.

Serves http://HOST:PORT/ (default 127.0.0.1:8089) until Ctrl-C; see
:mod:`distscraper.monitor.dashboard` for the page and its JSON endpoints.
"""

from __future__ import annotations

import argparse

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from distscraper.monitor.dashboard import DashboardServer
from distscraper.monitor.source import StatusSource


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return "[--spider NAME] [--host HOST] [--port PORT]"

    def short_desc(self) -> str:
        return "Serve a live web dashboard of the cluster"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("--spider", default="site", help="spider whose frontier to show (default: site)")
        parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
        parser.add_argument("--port", type=int, default=8089, help="port to listen on (default: 8089)")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if args:
            raise UsageError(f"unexpected arguments: {' '.join(args)}", print_help=False)
        if not 0 <= opts.port <= 65535:
            raise UsageError(f"--port {opts.port} is not a port number", print_help=False)
        assert self.settings is not None
        try:
            source = StatusSource.from_settings(self.settings, opts.spider)
        except ValueError as exc:
            raise UsageError(str(exc), print_help=False) from None
        try:
            server = DashboardServer(source, opts.host, opts.port)
        except OSError as exc:
            source.close()
            raise UsageError(f"cannot listen on {opts.host}:{opts.port}: {exc}", print_help=False) from None
        print(f"Dashboard of {source.keys.prefix} on {server.url} (Redis {source.redis_url}); Ctrl-C stops it",
              flush=True)
        try:
            server.serve_forever(poll_interval=0.5)
        except KeyboardInterrupt:
            print()
        finally:
            server.server_close()
            source.close()
