"""A run's events with their content opened: the one place readers decrypt.

``replay show/run/diff``, ``export --otel --content`` and ``batch`` pass the events they
loaded (and verified: verify reads the ciphertext, never the plaintext) through
:func:`readable`. A run recorded in clear, before encryption or without a provider, is
returned as it is. An encrypted run's data key is unwrapped once, through the provider the
settings name, and its events are opened.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from types import ModuleType

from tracevault import native
from tracevault.content._cipher import RunCipher
from tracevault.content._keystore import RunKeyStore
from tracevault.content._provider import KeyProvider
from tracevault.content._wrapped import KEY_ATTRIBUTE, WrappedKey
from tracevault.errors import ContentKeyError
from tracevault.schemas import ErrorInfo, EventKind, TraceEvent, check_canonical
from tracevault.schemas.fast import with_content

#: The opener in C (``_cfields.c``): a run's fields opened in one call, about 4 x quicker.
_cfields: ModuleType | None = native.load("tracevault.content._cfields")

__all__ = [
    "data_key_of",
    "is_encrypted",
    "metadata_only",
    "open_event",
    "opened_with",
    "readable",
    "wrapped_key_of",
]


def wrapped_key_of(events: Sequence[TraceEvent]) -> WrappedKey | None:
    """The run's wrapped data key from its RUN_STARTED, or None for a run in clear."""
    if not len(events):
        return None
    first = events[0]
    if first.kind is not EventKind.RUN_STARTED:
        return None
    text = first.attributes.get(KEY_ATTRIBUTE)
    return None if text is None else WrappedKey.from_attribute(text, run_id=first.run_id)


def is_encrypted(events: Sequence[TraceEvent]) -> bool:
    return wrapped_key_of(events) is not None


def readable(
    events: Sequence[TraceEvent],
    provider: KeyProvider | None,
    tenant: str,
    store: RunKeyStore | None = None,
) -> Sequence[TraceEvent]:
    """``events`` with content in clear; ContentKeyError when this reader may not open them.

    Refused, naming the run's tenant and provider: see :func:`data_key_of`.
    """
    key = data_key_of(events, provider, tenant, store)
    return events if key is None else opened_with(events, key)


def opened_with(events: Sequence[TraceEvent], key: bytes) -> Sequence[TraceEvent]:
    """An encrypted run's events opened with its data key (a key revealed to a recipient,
    or one ``data_key_of`` unwrapped); ContentKeyError naming the first field that does not
    open."""
    cipher = RunCipher(events[0].run_id, key)
    # Opened all at once: every reader of the run (show, replay, diff, export) reads it all.
    if _cfields is None:
        return [open_event(ev, cipher) for ev in events]
    listed = events if isinstance(events, list) else list(events)
    out: list[TraceEvent] = []
    append, gap, rebuilt = out.append, EventKind.GAP, with_content
    # The C opens what RunCipher wrote (None: this event's fields are left to open_event,
    # which opens other shapes or names the field that does not open); its plaintext is
    # checked by the canonical subset, and what the subset declines by check_canonical.
    for ev, pair in zip(listed, _cfields.open_pairs(key, cipher.aad_prefix, listed), strict=True):
        if pair is None or ev.error is not None or ev.kind is gap:
            append(open_event(ev, cipher))
            continue
        request, response, canonical = pair
        if not canonical:
            _check_plaintext(ev, request, response)
        append(rebuilt(ev, request, response))
    return out


def data_key_of(
    events: Sequence[TraceEvent],
    provider: KeyProvider | None,
    tenant: str,
    store: RunKeyStore | None,
) -> bytes | None:
    """The run's data key, None for a run in clear; ContentKeyError when refused.

    Refused, naming the run's tenant and provider: no provider configured here, a provider of
    another kind, a run of another tenant than ``tenant`` (the reader's grant), a format-2 run
    whose entry the run-key store no longer holds (erased: "erased on DATE (REASON)"), or a
    provider that will not unwrap the run's key (no grant, an erased KEK).
    """
    wrapped = wrapped_key_of(events)
    if wrapped is None:
        return None
    run_id = events[0].run_id
    if provider is None:
        raise ContentKeyError(
            f"run {run_id} is encrypted under {wrapped.describe()}; no key provider is "
            "configured here (TRACEVAULT_KEY_PROVIDER): its content cannot be read. "
            "`replay verify` needs no key; `replay show --metadata` shows the timeline"
        )
    if wrapped.tenant != tenant:
        raise ContentKeyError(
            f"run {run_id} belongs to tenant {wrapped.tenant!r} (provider {wrapped.provider}); "
            f"this reader holds the keys of tenant {tenant!r} (TRACEVAULT_TENANT): refused"
        )
    if wrapped.provider != provider.name:
        raise ContentKeyError(
            f"run {run_id} is encrypted under {wrapped.describe()}; the provider configured "
            f"here is {provider.name}"
        )
    if wrapped.stored:
        if store is None:
            raise ContentKeyError(
                f"run {run_id} keeps its wrapped key in a run-key store; none is given here "
                "(TRACEVAULT_RUN_KEY_STORE)"
            )
        wrapped = store.get(run_id, wrapped)
    return provider.unwrap(wrapped, run_id)


def open_event(ev: TraceEvent, cipher: RunCipher) -> TraceEvent:
    seq = ev.seq
    if ev.kind is EventKind.GAP:  # written by the sequencer, never encrypted
        return ev
    err = ev.error
    if err is not None:
        msg = cipher.open(seq, "error", err.message.encode("utf-8")).decode("utf-8")
        err = ErrorInfo(err.type, msg)
    request, response = cipher.open_pair(seq, ev.request, ev.response)
    _check_plaintext(ev, request, response)
    # The constructor, not dataclasses.replace: a third of the cost of opening an event.
    return TraceEvent(ev.run_id, seq, ev.kind, ev.at, ev.agent, request, response, ev.model,
                      ev.seed, err, ev.idempotency_key, ev.parent_seq, ev.attributes,
                      ev.interleave)  # fmt: skip


def _check_plaintext(ev: TraceEvent, request: bytes, response: bytes) -> None:
    """The sequencer could check only the envelopes: the plaintext's canonical JSON is
    checked here, where it is first seen (NonCanonicalJSONError naming run, seq and field)."""
    where = f"run {ev.run_id} seq {ev.seq}: $."
    check_canonical(request, field=where + "request")
    check_canonical(response, field=where + "response")


_HIDDEN = b'"<encrypted>"'


def metadata_only(events: Sequence[TraceEvent]) -> Sequence[TraceEvent]:
    """An encrypted run's events for a timeline without its key: content as ``"<encrypted>"``
    (a TOOL_CALL request keeps its tool name, as its envelope does); a run in clear as is."""
    if wrapped_key_of(events) is None:
        return events
    out = []
    for ev in events:
        if ev.kind is EventKind.GAP:
            out.append(ev)
            continue
        request = _HIDDEN
        tool = _clear_tool(ev.request)
        if tool is not None:
            request = b'{"args":"<encrypted>","tool":' + tool + b"}"
        err = ev.error
        out.append(
            dataclasses.replace(
                ev,
                request=request,
                response=_HIDDEN,
                error=None if err is None else ErrorInfo(err.type, "<encrypted>"),
            )
        )
    return out


def _clear_tool(envelope: bytes) -> bytes | None:
    """The tool name's JSON literal an envelope carries in clear, or None."""
    at = envelope.rfind(b'","tool":')
    if at < 0 or not envelope.endswith(b',"v":1}'):
        return None
    return envelope[at + 9 : -len(b',"v":1}')]
