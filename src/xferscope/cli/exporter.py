"""`xferscope exporter`: measured transfer capability as live Prometheus metrics."""

from __future__ import annotations

import signal
import threading
from typing import Any

from ..core import limits
from ..core.errors import OptionError
from ..core.units import parse_devices, parse_seconds
from ..fleet import thresholds as fleet_thresholds
from .app import cli, described, stderr
from .fleet import FLEET_CASES
from .options import names_option, option, seed_option, simulate_option

DEFAULT_LISTEN = "0.0.0.0:9877"


def parse_listen(text: str) -> tuple[str, int]:
    """--listen: HOST:PORT, [IPv6]:PORT or a bare PORT (every interface)."""
    given = text.strip()
    host, _, port = given.rpartition(":")
    host = host.strip("[]") if host else "0.0.0.0"
    if not port.isdigit() or not limits.PORT.contains(int(port)):
        raise OptionError("--listen", f"'{given}' is not HOST:PORT with a port from 1 to 65535")
    return host, int(port)


@cli.command(
    "exporter",
    **described(
        "Measured GPU transfer capability as live Prometheus metrics.",
        "xferscope exporter",
        "xferscope exporter --every 6h --listen :9877 --thresholds health.toml",
        "xferscope exporter -g 0,1 --every 30m --cases h2d_pinned_async_device",
    ),
)
@option(
    "--listen",
    default=DEFAULT_LISTEN,
    help="HOST:PORT the HTTP endpoint listens on: /metrics, /healthz, POST /measure.",
)
@option(
    "--every",
    default="6h",
    help="How often each GPU is measured: a time such as 30m, 6h or 1d (a bare number is "
    "seconds), from 1 s to 30 days.",
)
@names_option(
    "--cases",
    accepted=FLEET_CASES,
    blank=(),
    help="Transfer cases to measure, comma-separated keys from `xferscope cases` "
    "[default: the `run --quick` checks].",
)
@option(
    "--thresholds",
    "thresholds_path",
    help=f"A TOML file of pass/fail limits ({', '.join(fleet_thresholds.KEYS)}), as `xferscope "
    "fleet` reads it; each defaults to what the GPU's own link allows.",
)
@option("-g", "--device", "device", help="GPU indices, comma-separated [default: every GPU].")
@option(
    "--busy",
    "busy_percent",
    default=10.0,
    bounds=limits.BUSY_PERCENT,
    help="A GPU whose utilisation is above this percent, or that more processes use than "
    "--busy-processes allows, is not measured: the measurement is deferred and retried.",
)
@option(
    "--busy-processes",
    default=0,
    bounds=limits.BUSY_PROCESSES,
    help="Other processes a GPU may have on it (an idle CUDA context counts) and still be "
    "measured.",
)
@option(
    "--retry",
    default="5m",
    help="How soon a deferred or failed measurement is tried again (at most --every).",
)
@seed_option
@simulate_option("Measure the simulated engine's GPUs (no GPU needed).")
def exporter_command(**kw: Any) -> None:
    """Measure every GPU on a schedule (and on demand: POST /measure, or SIGUSR1) and serve the
    latest figures as Prometheus metrics with their age, pass/fail against the thresholds and
    the facts that explain a failure (link generation and width now and at most, NUMA node,
    PCIe replays). A busy GPU is never measured; no GPU memory is held between measurements;
    after a failed measurement the last figures stay, marked stale. SIGTERM stops it within
    two seconds, a measurement under way included. Where no GPU can be listed, or -g names one
    the node lacks, it refuses to start (one line) rather than serve an empty endpoint."""
    from ..exporter.server import serve
    from ..exporter.service import Exporter, ExporterOptions
    from .common import parse_seed

    host, port = parse_listen(kw["listen"])
    every = limits.EVERY.check("--every", parse_seconds("--every", kw["every"]), kw["every"])
    retry = limits.EVERY.check("--retry", parse_seconds("--retry", kw["retry"]), kw["retry"])
    devices = None if kw["device"] is None else parse_devices("--device", kw["device"])
    given = fleet_thresholds.load(kw["thresholds_path"])
    options = ExporterOptions(
        devices=devices,
        every_s=every,
        cases=tuple(kw["cases"] or ()),
        thresholds=tuple(sorted(given.items())),
        busy_percent=float(kw["busy_percent"]),
        busy_processes=int(kw["busy_processes"]),
        retry_s=retry,
        simulate=bool(kw["simulate"]),
        seed=parse_seed(kw["seed"]),
    )
    exporter = Exporter(
        options, say=lambda line: stderr.print(f"xferscope exporter: {line}", soft_wrap=True)
    )
    exporter.discover()  # no GPU, or one asked for that is not there: refused, nothing served
    try:
        server = serve(exporter, host, port)
    except OSError as exc:
        raise OptionError("--listen", f"cannot listen on {host}:{port}: {exc.strerror}") from None
    stderr.print(f"xferscope exporter: serving http://{host}:{port}/metrics", soft_wrap=True)
    signal.signal(signal.SIGUSR1, lambda *_: exporter.trigger())
    schedule = threading.Thread(target=exporter.run, name="schedule", daemon=True)
    try:
        schedule.start()
        while schedule.is_alive():
            schedule.join(0.2)
    finally:  # SIGTERM or Ctrl-C (KeyboardInterrupt here), or the schedule's end
        exporter.stop()
        server.shutdown()
        server.server_close()
        schedule.join(2.0)
