"""The exporter's HTTP endpoint: GET /metrics (Prometheus' exposition format, or OpenMetrics
when the scraper asks for it), GET /healthz (200 while the schedule runs), POST /measure
(measure every GPU now, or one: /measure?gpu=1)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from .metrics import ExporterCollector
from .service import Exporter


def serve(exporter: Exporter, host: str, port: int) -> ThreadingHTTPServer:
    """Binds (OSError when the port is taken) and serves in a thread of its own."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ExporterCollector(exporter))

    class Handler(BaseHTTPRequestHandler):
        server_version = "xferscope-exporter"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a scrape every few seconds is not news

        def _answer(self, code: int, body: bytes, kind: str = "text/plain; charset=utf-8") -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            if path == "/metrics":
                encoder, kind = choose_encoder(self.headers.get("Accept", ""))
                self._answer(200, encoder(registry), kind)
            elif path == "/healthz":
                ok = not exporter.stopping
                self._answer(200 if ok else 503, b"ok\n" if ok else b"stopping\n")
            elif path == "/measure":
                self._answer(405, b"POST /measure (or /measure?gpu=N) to measure now\n")
            else:
                self._answer(404, b"/metrics, /healthz, POST /measure\n")

        def do_POST(self) -> None:
            url = urlsplit(self.path)
            if url.path != "/measure":
                self._answer(404, b"POST /measure (or /measure?gpu=N)\n")
                return
            given = parse_qs(url.query).get("gpu", [None])[0]
            if given is not None and not given.isdigit():
                self._answer(400, f"gpu={given!r} is not a GPU index\n".encode())
                return
            chosen = exporter.trigger(None if given is None else int(given))
            if given is not None and not chosen:
                self._answer(404, f"GPU {given} is not one this exporter measures\n".encode())
                return
            names = ", ".join(map(str, chosen)) or "none"
            self._answer(202, f"measuring GPU {names} now (busy GPUs are deferred)\n".encode())

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="exporter-http", daemon=True)
    thread.start()
    return server
