"""Where a streamed token's server CPU goes: py-spy raw stacks (``streams_bench --profile DIR``) sorted
into the stages of the path, as shares of the event-loop thread's busy samples.

    .venv/bin/python -m bench.experiments.budget DIR/ws-c256-d256r0.txt [--us-per-token 39.5]

With ``--us-per-token`` (the same run's server CPU per token), each share is also given in µs. A
sample goes to the first stage, in the order of :data:`STAGES`, that has a frame in its stack: the
write system call before the frames that led to it, and so on down to the event loop itself. The
samples of other threads (idle workers) are left out. py-spy pauses the process to read it, so its
shares are indicative, not exact. streams_bench records only GIL-holding samples (``--gil``), so the
shares are of the event loop thread's CPU, the write system calls included (uvloop writes holding the GIL).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

# (stage, frame-name fragments); a stack belongs to the first stage with a matching frame
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("write system call (loopback: the receiver's wake-up too)", ("FrameWriter.write", "send_data")),
    ("frame encoding (JSON, seq, header)", ("ServerFrame.encode", "Session.stamp", "text_frame", "to_dict",
                                            "pipeline_delta_bytes")),
    ("derender and chunk building", ("ChatDerenderer.push", "CompletionDerenderer.push", "ChoiceStream",
                                     "Detokenizer")),
    ("per-request work (frame parsing, render, admission, engine call, done frames)",
     ("Connection._reader", "Connection._request", "SessionStream.open", "open_stream", "render", "receive_text",
      "LinkEngine.generate", "run_asgi", "handle_connect")),
    ("session machine per delta (state, frame object, action)", ("Session.pipeline_delta", "Session._delta",
                                                                 "Session._do_send_delta", "Session._emit")),
    ("metrics per output", ("Generation._measure", "TokenMetrics")),
    ("connection: readiness, end-of-tick flush", ("Connection._do", "Connection.carry_out", "_end_of_tick",
                                                  "_flush_ticks", "Connection._flush", "FrameWriter.ready",
                                                  "Connection._writable", "Connection._first_of_tick",
                                                  "Connection._open_tick")),
    ("pipeline fan-out (feed, events, callbacks)", ("PipelineStream", "_pipeline.<locals>", "_listened.<locals>",
                                                    "_Report.pipeline_delta", "OutboxStream", "Generation.listen")),
    ("engine link: reading and dispatching a step", ("_Link._read", "_Link._dispatch", "_Call.delta", "Outbox.push",
                                                     # the link's websockets client parsing a step's message
                                                     "ClientProtocol.parse", "Connection.data_received")),
    ("event loop and task switching", ("Runner.run", "TaskHandle", "run_forever")),
)


def budget(path: Path) -> tuple[int, dict[str, int]]:
    shares: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or "Thread._bootstrap" in stack:  # worker threads (idle) are not the loop's work
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        names = [f.split(" (")[0] for f in frames]
        for stage, fragments in STAGES:
            if any(frag in name for name in names for frag in fragments):
                shares[stage] += n
                break
        else:
            shares["other"] += n
    return total, dict(shares)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("profile", help="a py-spy raw profile (streams_bench --profile writes them)")
    p.add_argument("--us-per-token", type=float, default=None, help="the run's server CPU per token")
    a = p.parse_args(argv)
    total, shares = budget(Path(a.profile))
    rows = []
    for stage, _ in (*STAGES, ("other", ())):
        share = shares.get(stage, 0) / max(total, 1)
        row = {"stage": stage, "share": round(share, 3)}
        if a.us_per_token:
            row["us_per_token"] = round(share * a.us_per_token, 1)
        rows.append(row)
    print(json.dumps({"profile": a.profile, "samples": total, "stages": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
