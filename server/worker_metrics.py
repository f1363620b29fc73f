"""``/metrics`` under ``--workers N`` (server/workers.py): each worker answers a Unix socket in the
workers' private folder with its own exposition, and ``/metrics`` on any worker reads every
worker's and labels each sample ``worker="K"`` (prometheus_client's multiprocess ``all`` style; sum
them in PromQL, ``sum without (worker) (...)``). A worker that does not answer in
:data:`METRICS_TIMEOUT_S` (dead, or restarting) is left out."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from server import metrics
from server.workers import Seat

METRICS_TIMEOUT_S = 2.0

_servers: list[asyncio.AbstractServer] = []  # this worker's metrics socket, kept open while it serves


async def started(seat: Seat) -> None:
    """The worker serves: open its metrics socket, then tell the supervisor."""
    with contextlib.suppress(FileNotFoundError):
        seat.metrics_path.unlink()  # a previous worker of this index's
    _servers.append(await asyncio.start_unix_server(_answer_metrics, path=str(seat.metrics_path)))
    seat.ready()


async def _answer_metrics(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        writer.write(metrics.exposition())
        await writer.drain()
    finally:
        writer.close()


async def _read_worker(path: Path) -> bytes | None:
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(str(path)), METRICS_TIMEOUT_S)
    except (OSError, TimeoutError):
        return None  # dead, or restarting
    try:
        return await asyncio.wait_for(reader.read(), METRICS_TIMEOUT_S)
    except (OSError, TimeoutError):
        return None
    finally:
        writer.close()


async def gathered_metrics(seat: Seat) -> bytes:
    """Every worker's metrics, each sample labelled ``worker`` (a worker that does not answer is
    left out); parsed and merged off the event loop."""
    texts: list[tuple[int, bytes | None]] = []
    others = await asyncio.gather(*(_read_worker(seat.folder / f"{k}.sock") for k in range(seat.count)
                                    if k != seat.index))
    it = iter(others)
    for k in range(seat.count):
        texts.append((k, metrics.exposition() if k == seat.index else next(it)))
    return await asyncio.to_thread(merge_expositions, [(k, t) for k, t in texts if t is not None])


def merge_expositions(texts: Iterable[tuple[int, bytes]]) -> bytes:
    """Prometheus text expositions of several workers as one, each sample labelled ``worker``."""
    families: dict[str, Metric] = {}
    for worker, text in texts:
        for family in text_string_to_metric_families(text.decode()):
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
            merged.samples.extend(Sample(s.name, {**s.labels, "worker": str(worker)}, s.value, s.timestamp, s.exemplar)
                                  for s in family.samples)

    class _Merged:
        def collect(self) -> Iterable[Metric]:
            return families.values()

    return generate_latest(_Merged())
