"""The Recorder's side of agent identity: chain its own bytes, sign a note now and then.

The Recorder hands each event to the Publisher's thread as fields, and that thread makes its
exact bytes (``EventEncoder.encode_fields``), one run's events in seq order. So the attestor
wraps that encoder: it sees every raw value the run writes, in order, links the run's chain
as the sequencer will (``tracevault.chain``), keeps each hash, and puts a signed note over
``(run, k-1, hash_{k-1})`` and the hashes since the last note into event
``k``'s attributes when ``k`` is the run's first event, its RUN_FINISHED, ``every`` events
after the last note, or the first event ``interval_s`` after it (docs/identity.md). All of it
runs off the agent's thread: the agent's call path gains nothing but one attribute lookup.

``tracevault.transparency`` (notes, keys, Ed25519) is imported only when a run has a key:
``import tracevault.producer`` stays light for an agent that records without identity
(docs/design.md, "Layout").
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tracevault import native
from tracevault.chain import EVENT_DOMAIN, genesis
from tracevault.config import Settings
from tracevault.producer._wire import EventFields
from tracevault.schemas import EventKind

if TYPE_CHECKING:
    from tracevault.transparency import NoteSigner

__all__ = ["Attestor", "attested", "settings_signer"]

_FINISHED = EventKind.RUN_FINISHED
_EVENT = hashlib.sha256(EVENT_DOMAIN)  # chain.link's prefix, absorbed once
_monotonic = time.monotonic
#: hashlib releases the GIL to hash this many bytes or more at once. Beside a busy agent
#: thread each release costs the Publisher's thread the interpreter's switch interval (5 ms)
#: to get it back, so a value is hashed in pieces below it; the digest is the same
#: (docs/identity.md, "What identity costs").
_GIL_FREE = 2048


def link_python(prev: bytes, raw: bytes) -> bytes:
    """``chain.link`` in pieces below ``_GIL_FREE``, so hashlib never gives up the GIL."""
    h = _EVENT.copy()
    h.update(prev)
    if len(raw) < _GIL_FREE:
        h.update(raw)
    else:
        view = memoryview(raw)
        for i in range(0, len(raw), _GIL_FREE - 1):
            h.update(view[i : i + _GIL_FREE - 1])
    return h.digest()


_cwire = native.load("tracevault.producer._cwire")
#: The link each event pays: the C (libcrypto, the GIL held, 1-2 µs less per event with two
#: 1.5 KB payloads) where it is built, else ``link_python``; the same hash
#: (tests/producer/test_cwire.py).
_link: Callable[[bytes, bytes], bytes] = link_python if _cwire is None else _cwire.link


@functools.lru_cache(maxsize=8)
def _cached_signer(path: str | None, secret: str | None) -> NoteSigner:
    # the key's module: loaded only for a deployment that gives the agent a key
    from tracevault.transparency import Ed25519Signer, load_agent_signer  # noqa: PLC0415

    if path is None and secret is not None:
        return Ed25519Signer.from_skey(secret)
    return load_agent_signer(path)


def settings_signer(settings: Settings) -> NoteSigner | None:
    """The agent key the deployment gives this process (file or secret), or None.

    Read once per file or secret, not once per Recorder: a run must not pay a file read.
    """
    secret = settings.agent_key.get_secret_value() if settings.agent_key is not None else None
    if settings.agent_key_file is None and secret is None:
        return None
    return _cached_signer(settings.agent_key_file, secret)


def attested(
    settings: Settings,
    run_id: str,
    encode: Callable[[EventFields], bytes],
    agent_key: NoteSigner | None,
) -> tuple[Callable[[EventFields], bytes], Attestor | None, NoteSigner | None]:
    """The run's encoder, wrapped by an :class:`Attestor` when there is an agent key
    (``agent_key``, else the deployment's): (encoder, attestor or None, the key or None)."""
    key = agent_key or settings_signer(settings)
    if key is None:
        return encode, None, None
    att = Attestor(
        run_id,
        encode,
        key,
        every=settings.agent_attest_every,
        interval_s=settings.agent_attest_interval_s,
    )
    return att.encode_fields, att, key


class Attestor:
    """Wraps one run's ``encode_fields``: the run's chain, its hashes, its signed notes."""

    __slots__ = (
        "_chain",
        "_encode",
        "_every",
        "_first",
        "_interval",
        "_last_note",
        "_last_t",
        "_prev",
        "_run_id",
        "_signer",
        "notes",
    )

    def __init__(
        self,
        run_id: str,
        encode: Callable[[EventFields], bytes],
        signer: NoteSigner,
        *,
        every: int,
        interval_s: float,
    ) -> None:
        self._run_id = run_id
        self._encode = encode
        self._signer = signer
        self._every = every
        self._interval = interval_s
        self._prev = genesis(run_id)
        self._first = 0  # the first seq whose raw the next note vouches for
        self._chain = bytearray(self._prev)  # P_{first-1} .. P_{last encoded}
        self._last_note = -(1 << 62)  # seq of the event that carried the last note
        self._last_t = 0.0
        self.notes = 0  # notes signed (for tests and the benchmark)

    def encode_fields(self, fields: EventFields) -> bytes:
        """The event's exact bytes, with a note when one is due; the chain moves past it.

        It runs once per event on the Publisher's thread, whose time bounds a busy agent's
        throughput, and its link must keep the GIL (``_link``, ``_GIL_FREE``).
        """
        seq = fields[0]
        if (
            seq - self._last_note >= self._every
            or fields[1] is _FINISHED
            or seq == 0
            or _monotonic() - self._last_t >= self._interval
        ):
            fields = self._with_note(fields)
        raw = self._encode(fields)
        self._prev = prev = _link(self._prev, raw)
        self._chain += prev
        return raw

    def _with_note(self, fields: EventFields) -> EventFields:
        # already loaded: the signer this Attestor holds came from it (a note is ~50 µs)
        from tracevault.transparency import (  # noqa: PLC0415
            ATTEST_ATTRIBUTE,
            AgentNote,
            sign_agent_note,
        )

        seq = fields[0]
        note = AgentNote(self._run_id, seq - 1, self._prev, self._first, bytes(self._chain))
        signed = sign_agent_note(self._signer, note)
        extra: Any = fields[10]
        attrs = {"duration_us": str(extra)} if isinstance(extra, int) else dict(extra or {})
        attrs[ATTEST_ATTRIBUTE] = signed
        self._first = seq
        self._chain = bytearray(self._prev)
        self._last_note = seq
        self._last_t = time.monotonic()
        self.notes += 1
        return (*fields[:10], attrs, fields[11])
