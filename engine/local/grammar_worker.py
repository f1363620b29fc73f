"""Grammar compilation in a child process (:func:`child_main`), under a CPU time, wall time, memory and
document-length budget, at low priority: a constraint over any of them is a 400 and the child is
replaced, never the server harmed. Why, the budgets and the wire between the two processes:
docs/structured-outputs.md, "Inside the engine" ("The compile worker").
"""

from __future__ import annotations

import logging
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import orjson

log = logging.getLogger("tokenwire.engine")

COMPILE_CPU_S = 1.5  # CPU seconds one compile may take in the child
COMPILE_WALL_S = 15.0  # wall seconds, whatever the CPU (a loaded machine)
COMPILE_MEMORY_BYTES = 1 << 30  # address space one compile may add to the ready child
MAX_COMPLETION_BYTES = 32 * 1024  # longest shortest-completion a grammar may demand
MAX_REPLY_BYTES = 64 << 20  # largest serialized grammar the server reads back
START_TIMEOUT_S = 120.0  # for the child to import xgrammar and read the vocabulary
# Whitespace between JSON tokens is free (vLLM's default) but bounded: an unbounded run would let
# a model that favours whitespace fill max_tokens with it and never finish the document. 24
# characters hold a newline and the indentation of pretty-printed JSON five levels deep.
MAX_WHITESPACE = 24

_LEN = struct.Struct("!I")
_CHILD = "import sys; from engine.local.grammar_worker import child_main; sys.exit(child_main())"


@dataclass(frozen=True, slots=True)
class Refused:
    """Why the child (or the server, watching it) refused a constraint. ``reason``: ``invalid``
    (xgrammar cannot build it), ``too_long`` (its documents are too long), ``time``, ``memory``."""

    reason: str
    detail: str = ""


class CompileWorker:
    """The server side: starts the child, sends it one compile at a time, enforces the budgets.
    Thread-safe (one compile at a time; callers wait on a lock)."""

    def __init__(self, tokenizer_info: Any, *, cpu_s: float = COMPILE_CPU_S, wall_s: float = COMPILE_WALL_S,
                 memory_bytes: int = COMPILE_MEMORY_BYTES, max_completion: int = MAX_COMPLETION_BYTES) -> None:
        self.tokenizer_info = tokenizer_info
        self.cpu_s = cpu_s
        self.wall_s = wall_s
        self.memory_bytes = memory_bytes
        self.max_completion = max_completion
        self._info_json: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self.started = 0  # children started (for tests and logs)
        self.killed = 0  # children killed for a budget or a cancellation
        self.compiles = 0  # compiles asked of the child

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def compile(self, kind: str, value: Any, any_whitespace: bool,
                cancel: threading.Event | None = None) -> Any:
        """The compiled grammar (an ``xgrammar.CompiledGrammar``), or :class:`Refused`.
        Blocking: call it from a worker thread. Raises :class:`Cancelled` when ``cancel`` is set
        while it runs (the child is killed)."""
        with self._lock:
            proc = self._ready(cancel)
            request = {"kind": kind, "value": value, "any_whitespace": any_whitespace,
                       "max_completion": self.max_completion}
            self.compiles += 1
            try:
                _send(proc, orjson.dumps(request))
            except OSError:
                self._kill()
                return Refused("memory", "the compile worker stopped")
            cpu0 = _cpu_seconds(proc.pid)
            deadline = time.monotonic() + self.wall_s
            while True:
                if cancel is not None and cancel.is_set():
                    self._kill()
                    raise Cancelled
                ready, _, _ = select.select([_fd(proc)], [], [], 0.02)
                if ready:
                    break
                if time.monotonic() > deadline or _cpu_seconds(proc.pid) - cpu0 > self.cpu_s:
                    self._kill()
                    return Refused("time", f"{self.cpu_s:g} s")
            reply = self._read_reply(proc, deadline)
        if isinstance(reply, Refused):
            return reply
        status = reply.get("status")
        if status == "ok":
            import xgrammar as xgr

            return xgr.CompiledGrammar.deserialize_json(reply["grammar"], self.tokenizer_info)
        if status == "memory":  # xgrammar is not safe to use after a failed allocation: a fresh child
            with self._lock:
                if self._proc is proc:
                    self._kill()
        return Refused(str(status), str(reply.get("detail", "")))

    def close(self) -> None:
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None:
            proc.stdin.close()  # type: ignore[union-attr]
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    # --- internals ------------------------------------------------------------------------------
    def _ready(self, cancel: threading.Event | None) -> subprocess.Popen[bytes]:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            return proc
        if self._info_json is None:
            self._info_json = self.tokenizer_info.serialize_json()
        # one malloc arena: each thread's own arena would reserve 64 MiB of the capped address space
        env = {**os.environ, "MALLOC_ARENA_MAX": "1", "OMP_NUM_THREADS": "1"}
        proc = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                close_fds=True, env=env)
        self._proc = proc
        self.started += 1
        _send(proc, orjson.dumps({"tokenizer_info": self._info_json, "memory_bytes": self.memory_bytes}))
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if cancel is not None and cancel.is_set():
                self._kill()
                raise Cancelled
            ready, _, _ = select.select([_fd(proc)], [], [], 0.05)
            if ready:
                break
            if time.monotonic() > deadline:
                self._kill()
                raise RuntimeError("the grammar compile worker did not start")
        reply = self._read_reply(proc, deadline)
        if isinstance(reply, Refused) or reply.get("status") != "ready":
            self._kill()
            raise RuntimeError("the grammar compile worker did not start")
        log.info("grammar compile worker started (pid %d)", proc.pid)
        return proc

    def _read_reply(self, proc: subprocess.Popen[bytes], deadline: float) -> dict[str, Any] | Refused:
        fd = _fd(proc)
        head = _read_exact(fd, _LEN.size, deadline)
        if head is None:  # the child died (out of memory, a crash) or stalled mid-reply
            self._kill()
            return Refused("memory", "the compile worker stopped")
        (size,) = _LEN.unpack(head)
        if size > MAX_REPLY_BYTES:
            self._kill()
            return Refused("memory", f"its compiled form is over {MAX_REPLY_BYTES >> 20} MiB")
        body = _read_exact(fd, size, deadline)
        if body is None:
            self._kill()
            return Refused("memory", "the compile worker stopped")
        return orjson.loads(body)  # type: ignore[no-any-return]

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        self.killed += 1
        proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()


class Cancelled(Exception):
    """The compile was cancelled (its request went away)."""


def _fd(proc: subprocess.Popen[bytes]) -> int:
    assert proc.stdout is not None
    return proc.stdout.fileno()


def _send(proc: subprocess.Popen[bytes], payload: bytes) -> None:
    assert proc.stdin is not None
    proc.stdin.write(_LEN.pack(len(payload)) + payload)
    proc.stdin.flush()


def _read_exact(fd: int, size: int, deadline: float) -> bytes | None:
    chunks: list[bytes] = []
    left = size
    while left:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], min(remaining, 1.0))
        if not ready:
            continue
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- the child -----------------------------------------------------------------------------------

def _child_read(stream: Any) -> dict[str, Any] | None:
    head = stream.read(_LEN.size)
    if len(head) < _LEN.size:
        return None
    (size,) = _LEN.unpack(head)
    return orjson.loads(stream.read(size))  # type: ignore[no-any-return]


def _child_write(stream: Any, message: dict[str, Any]) -> None:
    data = orjson.dumps(message)
    stream.write(_LEN.pack(len(data)) + data)
    stream.flush()


def _grammar_of(xgr: Any, kind: str, value: Any, any_whitespace: bool) -> Any:
    ws = MAX_WHITESPACE if any_whitespace else None
    if kind == "json":
        return xgr.Grammar.from_json_schema(orjson.dumps(value).decode(), any_whitespace=any_whitespace,
                                            max_whitespace_cnt=ws)
    if kind == "json_object":
        # JSON mode: an object (what OpenAI's json_object promises), any content inside.
        return xgr.Grammar.from_json_schema('{"type": "object"}', any_whitespace=any_whitespace,
                                            strict_mode=False, max_whitespace_cnt=ws)
    if kind == "regex":
        return xgr.Grammar.from_regex(value)
    if kind == "choice":
        return xgr.Grammar.from_ebnf("root ::= " + " | ".join(orjson.dumps(c).decode() for c in value))
    if kind == "structural_tag":
        return xgr.Grammar.from_structural_tag(orjson.dumps(bounded_whitespace(value)).decode())
    return xgr.Grammar.from_ebnf(value)


def bounded_whitespace(node: Any) -> Any:
    """A structural tag with each ``json_schema`` format's unbounded whitespace (``max_whitespace_cnt``
    null, vLLM's default) bounded to :data:`MAX_WHITESPACE`, as JSON constraints are."""
    if isinstance(node, list):
        return [bounded_whitespace(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: bounded_whitespace(v) if isinstance(v, dict | list) and k != "json_schema" else v
           for k, v in node.items()}
    if out.get("type") == "json_schema" and out.get("max_whitespace_cnt") is None:
        out["max_whitespace_cnt"] = MAX_WHITESPACE
    return out


def _child_compile(xgr: Any, compiler: Any, request: dict[str, Any]) -> dict[str, Any]:
    from engine.local.grammar_bound import GrammarShapeError, completion_bound

    try:
        grammar = _grammar_of(xgr, request["kind"], request["value"], request["any_whitespace"])
    except MemoryError:
        return {"status": "memory"}
    except RuntimeError as exc:
        return {"status": "memory" if "bad_alloc" in str(exc) else "invalid", "detail": str(exc)[:500]}
    try:
        bound = completion_bound(str(grammar), lambda pattern: str(xgr.Grammar.from_regex(pattern)))
    except (GrammarShapeError, RecursionError, RuntimeError) as exc:
        return {"status": "invalid", "detail": f"cannot bound the grammar: {exc}"[:500]}
    if bound > request["max_completion"]:
        return {"status": "too_long", "detail": str(bound)}
    try:
        compiled = compiler.compile_grammar(grammar)
        return {"status": "ok", "grammar": compiled.serialize_json()}
    except MemoryError:
        return {"status": "memory"}
    except RuntimeError as exc:
        return {"status": "memory" if "bad_alloc" in str(exc) else "invalid", "detail": str(exc)[:500]}


def _address_space() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def child_main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server decides when this process ends
    os.nice(10)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but replies on the pipe
    init = _child_read(stdin)
    if init is None:
        return 0
    import resource

    import xgrammar as xgr

    info = xgr.TokenizerInfo.deserialize_json(init["tokenizer_info"])
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    del init["tokenizer_info"]
    compiler.compile_grammar(xgr.Grammar.from_ebnf('root ::= "a"'))  # warm: allocations of a first compile
    limit = _address_space() + int(init["memory_bytes"])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    _child_write(stdout, {"status": "ready"})
    while True:
        try:
            request = _child_read(stdin)
        except (MemoryError, ValueError):  # a request past the memory budget: the server sees the exit
            return 3
        if request is None:
            return 0
        _child_write(stdout, _child_compile(xgr, compiler, request))


if __name__ == "__main__":
    sys.exit(child_main())
