"""The archiver's index step in a process of its own (docs/index.md, "Writing").

The index step's work (the C walk, each run's row, two Parquet files and their puts) is about
a third of the archiver's own CPU per event. Run on the archiver's threads, most of it holds
the GIL the archiver's consumer thread needs, so the archiver lost that third of its
throughput. Here it runs in a child process: the archiver's flush thread hands the child
the flush's values (references joined into one frame, no decoding) and waits, the GIL
released, for the keys the child wrote; the archiver's consumer thread goes on meanwhile.

What a flush writes and when is unchanged: the flush's thread waits for its index objects
before it puts the checkpoint object, exactly as with the step in-process, so a crash before
the checkpoint redoes both and nothing is owed after a restart. The child runs the same
``IndexStep`` (the rows are the same bytes, the tests pin them), holding its open runs'
rows between flushes as the step in-process does.

A child that dies is started again and the flush's index is asked again, once; an error the
step raises in the child (the store refused a put) is raised in the flush's thread as the
same error class, so the archiver handles it as it always did. Frames are pickles of plain
tuples between this process and a child it started itself from the same installation.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import struct
import subprocess
import sys
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tracevault import errors
from tracevault.errors import ArchiveError, TraceVaultError
from tracevault.index._step import FlushingLog, held

__all__ = ["IndexWorker"]

log = logging.getLogger(__name__)

_LEN = struct.Struct("<Q")
# what a flush sends, per run: (first seq, last finishes, last chain hash, values)
_Run = tuple[int, bool, bytes, list[bytes]]


def _protocol() -> str:
    """What both sides of the pipe must share: a digest of this module's and the step's
    source. A child started from files replaced under a running archiver (an upgrade in
    place) would read frames of another layout and both would wait on each other for ever;
    with this in the hello it refuses at once and the archiver's flush fails naming it."""
    import hashlib  # noqa: PLC0415 - once per process

    from tracevault.index import _step  # noqa: PLC0415

    digest = hashlib.sha256(Path(__file__).read_bytes())
    digest.update(Path(_step.__file__).read_bytes())
    return digest.hexdigest()[:16]


class IndexWorker:
    """The index step, run by a child process: ``take`` as ``IndexStep.take``."""

    def __init__(self, settings_json: str, archive_url: str, *, writer: str = "archiver") -> None:
        self._hello = (_protocol(), settings_json, archive_url, writer)
        self._lock = threading.Lock()  # one flush at a time through the pipe
        self._child: subprocess.Popen[bytes] | None = None
        self.events = 0  # events indexed
        self.cpu_s = 0.0  # the child's CPU time in the step (what the index costs)
        self.c_flushes = 0
        self.restarts = 0
        # the children's whole CPU past their start-up (bench/archiver_throughput.py adds it
        # to the archiver's own: the index's cost moved here, it did not vanish)
        self.child_cpu_s = 0.0
        self._cpu_at_ready = 0.0
        self._ready = False

    def wait_ready(self) -> None:
        """Start the child and wait until it has started (its imports and store: about a
        second), so the first flush does not wait for it (the archiver calls this as it
        starts); a child that failed to start is raised here."""
        with self._lock:
            self._ready_child()

    def take(self, plog: FlushingLog) -> _RemoteFlush:
        """What ``plog``'s next flush holds (the archiver's thread, before ``take_flush``):
        references only; the flush's thread sends them (``_RemoteFlush.__call__``)."""
        return _RemoteFlush(self, *held(plog))

    def close(self) -> None:
        """Stop the child (end of its input: it exits 0)."""
        with self._lock:
            if self._child is not None:
                self._retire(self._child)

    # -- the child ---------------------------------------------------------------------

    def _started(self) -> subprocess.Popen[bytes]:
        if self._child is not None and self._child.poll() is not None:
            log.warning("index: the index worker exited (code %s); starting it again",
                        self._child.returncode)  # fmt: skip
            self.restarts += 1
            _stop(self._child)
            self._child = None
        if self._child is None:
            self._child = subprocess.Popen(
                [sys.executable, "-c", "from tracevault.index._worker import main; main()"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
            self._ready = False
            # a worker dropped without close() (an archiver built and never run) still ends
            # its child: closing the child's input is its signal to exit
            weakref.finalize(self, _stop, self._child)
            _send(_stdin(self._child), self._hello)
        return self._child

    def _ready_child(self) -> subprocess.Popen[bytes]:
        """The child, started and past its start-up (it says "ready" once)."""
        child = self._started()
        if not self._ready:
            try:
                said = _receive(_stdout(child))
            except (OSError, EOFError) as exc:
                _stop(child)
                self._child = None
                raise ArchiveError(f"the index worker did not start: {exc}") from exc
            if said != "ready":
                _stop(child)
                self._child = None
                raise ArchiveError(f"the index worker said {said!r} at start, not 'ready'")
            self._ready = True
            self._cpu_at_ready = _cpu_of(child.pid)
        return child

    def _retire(self, child: subprocess.Popen[bytes]) -> None:
        if self._ready:
            self.child_cpu_s += max(0.0, _cpu_of(child.pid) - self._cpu_at_ready)
        _stop(child)
        self._child = None

    def ask(self, frame: tuple[Any, ...]) -> list[str]:
        """The keys the child wrote for ``frame``; a child that died is started again and
        asked again, once."""
        with self._lock:
            for attempt in (1, 2):
                child = self._ready_child()
                try:
                    _send(_stdin(child), frame)
                    got = _receive(_stdout(child))
                except (OSError, EOFError) as exc:
                    self._retire(child)
                    self.restarts += 1
                    if attempt == 2:
                        raise ArchiveError(
                            f"the index worker died twice indexing the flush of {frame[0]} "
                            f"to size {frame[3][1]}: {exc}"
                        ) from exc
                    log.warning("index: the index worker died (%s); starting it again", exc)
                    continue
                break
        ok, keys, cpu_s, c_flush, what = got
        self.cpu_s += cpu_s
        if not ok:
            raise _error_class(what)(str(keys))
        self.events += sum(len(r[3]) for r in frame[4].values())
        self.c_flushes += int(c_flush)
        return list(keys)


@dataclass(slots=True)
class _RemoteFlush:
    """One flush's index, sent to the child from the flush's thread."""

    worker: IndexWorker
    log: str
    origin: str
    partition: int
    sizes: tuple[int, int]
    runs: Mapping[str, Sequence[Any]]
    leaf_index: dict[str, Sequence[int]]
    holes: list[tuple[str, bytes]]

    def __call__(self) -> list[str]:
        runs: dict[str, _Run] = {}
        for run_id, recs in self.runs.items():
            if recs:
                last = recs[-1]
                runs[run_id] = (recs[0].seq, last.finishes, last.chain_hash,
                                [r.value for r in recs])  # fmt: skip
        frame = (self.log, self.origin, self.partition, self.sizes, runs, self.leaf_index,
                 self.holes)  # fmt: skip
        return self.worker.ask(frame)


# -- the wire -------------------------------------------------------------------------------


def _stdin(child: subprocess.Popen[bytes]) -> IO[bytes]:
    assert child.stdin is not None
    return child.stdin


def _stdout(child: subprocess.Popen[bytes]) -> IO[bytes]:
    assert child.stdout is not None
    return child.stdout


def _send(out: IO[bytes], obj: object) -> None:
    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_LEN.pack(len(body)) + body)
    out.flush()


def _receive(inp: IO[bytes]) -> Any:
    head = inp.read(_LEN.size)
    if len(head) < _LEN.size:
        raise EOFError("the index worker closed its output")
    (n,) = _LEN.unpack(head)
    body = inp.read(n)
    if len(body) < n:
        raise EOFError("the index worker's frame was cut short")
    return pickle.loads(body)  # noqa: S301 - our own child's frames


def _error_class(name: str) -> type[TraceVaultError]:
    """The error class the child named (``ServiceUnavailableError`` stays exit 3, a full
    disk's ``ArchiveError`` exit 4), or the hierarchy's root for a name it does not know."""
    cls = getattr(errors, name, None)
    if isinstance(cls, type) and issubclass(cls, TraceVaultError):
        return cls
    return TraceVaultError


def _cpu_of(pid: int) -> float:
    """User + system CPU seconds of a live process (Linux's /proc; 0.0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stop(child: subprocess.Popen[bytes]) -> None:
    for f in (child.stdin, child.stdout):
        if f is not None:
            with contextlib.suppress(OSError):
                f.close()
    try:
        child.wait(timeout=10)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


# -- the child's side -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Leaf:
    seq: int
    chain_hash: bytes
    finishes: bool
    value: bytes


@dataclass(frozen=True, slots=True)
class _Plog:
    log: str
    origin: str
    partition: int
    archived: int
    size: int
    runs: Mapping[str, Sequence[_Leaf]]
    leaf_index: Mapping[str, Sequence[int]]
    holes: Sequence[tuple[str, bytes]]


def _leaves(first_seq: int, finishes: bool, head: bytes, values: list[bytes]) -> list[_Leaf]:
    """The leaves the step reads: every value; the first's seq, the last's end and hash."""
    n = len(values)
    return [
        _Leaf(first_seq + i, head if i == n - 1 else b"", finishes and i == n - 1, v)
        for i, v in enumerate(values)
    ]


def serve(inp: IO[bytes], out: IO[bytes]) -> None:
    """The child: one ``IndexStep`` over the archive, a flush per frame, until its input
    ends."""
    import gc  # noqa: PLC0415 - the child's own start-up
    import time  # noqa: PLC0415

    from tracevault.archive import open_store  # noqa: PLC0415
    from tracevault.config import Settings  # noqa: PLC0415
    from tracevault.index._step import IndexStep  # noqa: PLC0415

    hello = _receive(inp)
    if not (isinstance(hello, tuple) and len(hello) == 4 and hello[0] == _protocol()):
        # not "ready": the archiver raises what this says, and the child exits
        _send(out, f"another version of tracevault (index worker protocol {_protocol()})")
        return
    _, settings_json, url, writer = hello
    settings = Settings.model_validate_json(settings_json)
    step = IndexStep(open_store(url, settings, create=False), writer=writer)
    gc.freeze()  # what start-up built lives as long as the child: no full collection walks it
    _send(out, "ready")
    while True:
        try:
            frame = _receive(inp)
        except EOFError:
            return
        log_key, origin, partition, sizes, runs, leaf_index, holes = frame
        plog = _Plog(
            log_key, origin, partition, sizes[0], sizes[1],
            {r: _leaves(*v) for r, v in runs.items()}, leaf_index, holes,
        )  # fmt: skip
        before, started = step.c_flushes, time.thread_time()
        try:
            keys = step.take(plog)()
            reply: tuple[Any, ...] = (True, keys, 0.0, step.c_flushes > before, "")
        except TraceVaultError as exc:
            reply = (False, str(exc), 0.0, False, type(exc).__name__)
        spent = time.thread_time() - started
        _send(out, (reply[0], reply[1], spent, reply[3], reply[4]))


def main() -> None:
    """The child's entry point (``IndexWorker`` starts it with ``python -c``)."""
    # frames go out on a copy of stdout; fd 1 becomes stderr, so nothing a library prints
    # can corrupt them
    frames = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    serve(sys.stdin.buffer, frames)
