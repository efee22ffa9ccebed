"""The Dask engine of ``replay batch``: the same tasks as ``--workers``, on a Dask cluster.

Dask, not Ray (docs/replay-batch.md, "Why Dask"): ``distributed`` is pure Python (about 25 MB
installed against Ray's 80 MB wheel and its C++ raylet and GCS processes), installs in
seconds in CI's fresh virtualenv, and a real cluster is two commands (``dask scheduler``,
``dask worker ADDRESS``) that start in a few seconds on a 2-core machine with no Docker.

The client sends each task by reference to :func:`tracevault.replayer.batch.jobs.replay_chunk`
with plain arguments, so every worker needs tracevault (same version) and the agent's module
importable; the job runs unchanged against ``tcp://127.0.0.1:8786`` or a remote scheduler.
``distributed`` is imported only when this engine is asked for (the ``dask`` extra).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from types import TracebackType
from typing import Any

from tracevault.errors import ConfigError, ServiceUnavailableError, missing_extra
from tracevault.replayer.batch.jobs import ArchiveAccess, BatchItem, load_agent, lost, replay_chunk

__all__ = ["DaskEngine"]

log = logging.getLogger(__name__)


def probe_agent(spec: str) -> str:
    """Run on a worker: '' if the agent loads there, else why not (plain text travels back)."""
    try:
        load_agent(spec)
    except ConfigError as exc:
        return str(exc)
    return ""


class DaskEngine:
    """A connection to the scheduler at ``address``; use as a context manager."""

    def __init__(self, address: str, *, timeout_s: float = 60.0) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self._client: Any = None
        self._threads = 0

    def __enter__(self) -> DaskEngine:
        try:
            from distributed import Client  # noqa: PLC0415 - only this engine needs it
        except ImportError as exc:
            raise missing_extra("dask", exc) from exc
        try:
            client = Client(  # type: ignore[no-untyped-call]
                self.address, timeout=self.timeout_s, set_as_default=False
            )
        except (OSError, TimeoutError) as exc:
            raise ServiceUnavailableError(
                f"no Dask scheduler answered at {self.address} within {self.timeout_s:g}s "
                f"({type(exc).__name__}: {exc}); start one with `dask scheduler`"
            ) from exc
        self._client = client
        try:
            client.wait_for_workers(1, timeout=self.timeout_s)
        except (OSError, TimeoutError) as exc:
            self.close()
            raise ServiceUnavailableError(
                f"no Dask worker joined the scheduler at {self.address} within "
                f"{self.timeout_s:g}s; start one with `dask worker {self.address}`"
            ) from exc
        self._threads = sum(
            w.get("nthreads", 1) for w in client.scheduler_info()["workers"].values()
        )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    @property
    def name(self) -> str:
        return f"dask ({self.address}, {self._threads} worker threads)"

    @property
    def parallelism(self) -> int:
        return max(1, self._threads)

    def check_agent(self, spec: str) -> None:
        """Fail before the batch if a worker cannot import tracevault or the agent."""
        try:
            why = self._client.submit(probe_agent, spec, pure=False).result(self.timeout_s)
        except Exception as exc:
            raise ConfigError(
                f"the Dask workers at {self.address} cannot run tracevault's tasks "
                f"({type(exc).__name__}: {exc}); install tracevault (the same version) on them"
            ) from exc
        if why:
            raise ConfigError(
                f"on the Dask workers at {self.address}: {why}; the agent's module must be "
                "importable there (installed, or on the workers' PYTHONPATH)"
            )

    def map_chunks(
        self, access: ArchiveAccess, chunks: list[list[str]], agent_spec: str
    ) -> Iterator[list[BatchItem]]:
        from distributed import as_completed  # noqa: PLC0415

        self.check_agent(agent_spec)
        futures = [
            self._client.submit(replay_chunk, access, chunk, agent_spec, pure=False)
            for chunk in chunks
        ]
        by_key = {fut.key: chunk for fut, chunk in zip(futures, chunks, strict=True)}
        done = as_completed(futures, loop=self._client.loop)  # type: ignore[no-untyped-call]
        del futures  # as_completed holds them; each is released once its items are out
        for fut in done:
            chunk = by_key.pop(fut.key)
            try:
                items: list[BatchItem] = fut.result()
            except Exception as exc:  # the worker died, or the task could not run there
                log.warning("a Dask task of %d runs was lost: %s", len(chunk), exc)
                items = self._one_by_one(access, chunk, agent_spec, exc)
            finally:
                fut.release()
            yield items

    def _one_by_one(
        self, access: ArchiveAccess, chunk: list[str], agent_spec: str, exc: Exception
    ) -> list[BatchItem]:
        """A lost task's runs again, each alone and one after another, so a run that kills
        its worker loses only itself (queued beside it, an innocent run would die too)."""
        if len(chunk) == 1:
            return lost(chunk, exc, f"the Dask cluster at {self.address}")
        items: list[BatchItem] = []
        for rid in chunk:
            single = self._client.submit(replay_chunk, access, [rid], agent_spec, pure=False)
            try:
                items.extend(single.result())
            except Exception as again:
                items.extend(lost([rid], again, f"the Dask cluster at {self.address}"))
            finally:
                single.release()
        return items
