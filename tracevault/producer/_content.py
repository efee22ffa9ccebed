"""The Recorder's encryption hook: a run's content sealed on the Publisher's thread.

``content_hook`` is the one call the Recorder makes (docs/confidentiality.md). When the
settings name a key provider, it asks the provider for the run's data key (once, in the
agent, before anything is published: an unreachable provider fails the run's start, nothing
goes out in clear), returns the RUN_STARTED attribute carrying the wrapped key, and wraps
the run's ``encode_fields`` so that request, response and error message are sealed right
before the Avro bytes are made, off the agent's thread. Everything the Recorder checks
(canonical JSON, sizes, model ids) it has already checked on the plaintext.

``tracevault.content`` (providers, the run-key store, and through them boto3) is imported
only for a run that encrypts or redacts: an agent recording in clear never loads it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from tracevault.config import Settings
from tracevault.errors import ConfigError
from tracevault.producer._wire import EventEncoder, EventFields
from tracevault.schemas import ErrorInfo, EventKind

if TYPE_CHECKING:
    from tracevault.content import KeyProvider, Redactor, RunKeyStore

__all__ = ["ContentHook", "confidential", "content_hook", "redactor"]

Encode = Callable[[EventFields], bytes]
_TOOL = EventKind.TOOL_CALL
_TENANT = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _is_str(value: object) -> bool:
    # Callers are typed, agents are not: a runtime check of what the annotation promises.
    return isinstance(value, str)


class ContentHook:
    """One run's sealing: the attribute for RUN_STARTED and the wrapped encoder."""

    __slots__ = ("attributes", "cipher", "provider", "subject", "tenant")

    def __init__(
        self,
        provider: KeyProvider,
        store: RunKeyStore,
        run_id: str,
        tenant: str,
        subject: str | None,
    ) -> None:
        from tracevault.content import KEY_ATTRIBUTE, RunCipher  # noqa: PLC0415 - see module doc

        self.provider, self.tenant, self.subject = provider, tenant, subject
        ref = None if subject is None else provider.subject_ref(tenant, subject)
        data_key, wrapped = provider.generate(tenant, ref, run_id)
        # Stored before anything of the run is published: a run whose key was not kept
        # would be unreadable from its first record. The record names the entry only.
        store.put(run_id, wrapped)
        self.cipher = RunCipher(run_id, data_key)
        self.attributes = {KEY_ATTRIBUTE: wrapped.to_reference()}

    def wrap(self, encode: Encode) -> Encode:
        # one call per event seals request and response, in C where it is built
        # (docs/confidentiality.md, "What encryption costs")
        seal, seal_event = self.cipher.seal, self.cipher.event_sealer

        def sealed(fields: EventFields) -> bytes:
            seq, kind, at, request, response, model, seed, error, key, parent, extra, il = fields
            req, resp = seal_event(seq, kind is _TOOL, request, response)
            if error is not None:
                text = seal(seq, "error", error.message.encode("utf-8")).decode("ascii")
                error = ErrorInfo(error.type, text)
            return encode((seq, kind, at, req, resp, model, seed, error, key, parent, extra, il))

        return sealed


def content_hook(
    settings: Settings,
    run_id: str,
    *,
    tenant: str | None,
    subject: str | None,
) -> ContentHook | None:
    """The run's hook, or None when no key provider is configured (content in clear).

    ``subject`` without a provider is refused: the agent asked for erasable content and
    would get plaintext.
    """
    if subject is not None and (not _is_str(subject) or not subject):
        raise ConfigError(f"Recorder(subject=...) must be a non-empty str, got {subject!r}")
    if tenant is not None and (not _is_str(tenant) or not _TENANT.fullmatch(tenant)):
        raise ConfigError(
            f"Recorder(tenant=...) must be 1 to 64 of A-Z a-z 0-9 _ -, got {tenant!r}"
        )
    provider: KeyProvider | None = None
    if settings.key_provider != "none":  # only then is tracevault.content loaded
        from tracevault.content import open_provider  # noqa: PLC0415

        provider = open_provider(settings)
    if provider is None:
        if subject is not None or tenant is not None:
            raise ConfigError(
                "Recorder(subject=/tenant=) asks for encrypted content, but no key provider "
                "is configured: set TRACEVAULT_KEY_PROVIDER (keyring or kms)"
            )
        return None
    from tracevault.content import open_key_store  # noqa: PLC0415

    store = open_key_store(settings)
    return ContentHook(provider, store, run_id, tenant or settings.tenant, subject)


def redactor(settings: Settings, rules: Iterable[str] | None) -> Redactor | None:
    """``Recorder(redact=...)``'s rules with the deployment's key, or None without rules."""
    if not rules:
        return None
    if isinstance(rules, str):
        raise ConfigError(f"Recorder(redact=...) takes a list of rules, got the string {rules!r}")
    from tracevault.content import Redactor  # noqa: PLC0415 - see the module doc

    key = settings.redaction_key
    return Redactor(rules, b"" if key is None else key.get_secret_value().encode())


def confidential(
    settings: Settings,
    encoder: EventEncoder,
    attributes: dict[str, str],
    *,
    tenant: str | None,
    subject: str | None,
    redact: Iterable[str] | None,
) -> tuple[Encode, ContentHook | None, Redactor | None]:
    """The Recorder's one call: its encoder (sealing content when a key provider is set), the
    hook, and the redactor; the RUN_STARTED ``attributes`` get the wrapped key and the rules."""
    encode: Encode = encoder.encode_fields
    hook = content_hook(settings, encoder.run_id, tenant=tenant, subject=subject)
    if hook is not None:
        encode = hook.wrap(encode)
        attributes.update(hook.attributes)
    r = redactor(settings, redact)
    if r is not None:
        from tracevault.content import REDACT_ATTRIBUTE  # noqa: PLC0415 - loaded by redactor

        attributes[REDACT_ATTRIBUTE] = r.attribute()
        encode = _redacting_errors(encode, r)  # outermost: redacted before it is sealed
    return encode, hook, r


def _redacting_errors(encode: Encode, r: Redactor) -> Encode:
    """``encode`` with the pattern rules applied to an error's message first.

    Why here: every error the Recorder records (a callee's exception, a refused payload, the
    agent's own exception, a sub-agent's) passes through the one encoder, and an exception's
    message is content like a request: ``card 4111 ... for bob@example.com declined``."""

    def redacted(fields: EventFields) -> bytes:
        error = fields[7]
        if error is not None:
            message = r.text(error.message)
            if message != error.message:
                fields = (*fields[:7], ErrorInfo(error.type, message), *fields[8:])
        return encode(fields)

    return redacted
