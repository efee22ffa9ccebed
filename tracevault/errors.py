"""The one error hierarchy of tracevault.

Every error a user can meet derives from :class:`TraceVaultError`, so the CLI catches one type
and maps it to an exit code (docs/design.md: 0 ok, 1 verification failure or divergence, 2 usage
error, 3 not found / unreachable service). Messages say what went wrong *and* what to do next.

::

    TraceVaultError                      exit 2 unless a subclass says otherwise
    ├── ConfigError                      bad settings or flags
    ├── SchemaError                      bytes that are not a TraceEvent we can read
    │   ├── BadMagicError                not Avro single-object encoding
    │   ├── UnknownFingerprintError      writer schema not among the published versions
    │   ├── TruncatedError               body ends early, or has trailing bytes
    │   └── NonCanonicalJSONError        request/response bytes are not canonical JSON
    ├── PayloadError                     refused at record time in the agent (names the field)
    ├── ServiceUnavailableError          exit 3: broker or object store unreachable
    ├── NotFoundError                    exit 3: run, topic or object does not exist
    ├── TopicMismatchError               exit 1: an existing topic's config breaks a guarantee
    ├── ChainError                       exit 1: hash chain broken (names seq and object)
    ├── ReplayDivergence                 exit 1: re-run differs from the record
    ├── RetentionError                   retention under the legal minimum, or a locked object
    ├── ArchiveError                     the archive's objects are inconsistent or unwritable
    └── FencedError                      a sequencer stopped: another took its transactional id

Subclasses call ``super().__init__(message)`` with a single string so they pickle across
processes (batch replay runs in worker processes).
"""

from __future__ import annotations

__all__ = [
    "ArchiveError",
    "BadMagicError",
    "ChainError",
    "ConfigError",
    "FencedError",
    "NonCanonicalJSONError",
    "NotFoundError",
    "PayloadError",
    "ReplayDivergence",
    "RetentionError",
    "SchemaError",
    "ServiceUnavailableError",
    "TopicMismatchError",
    "TraceVaultError",
    "TruncatedError",
    "UnknownFingerprintError",
]


class TraceVaultError(Exception):
    """Root of every tracevault error; ``exit_code`` is what the CLI exits with."""

    exit_code: int = 2


class ConfigError(TraceVaultError):
    """Settings or flags that cannot work; the message names the setting."""


class SchemaError(TraceVaultError):
    """Bytes that cannot be read as a published tracevault schema."""


class BadMagicError(SchemaError):
    """The value does not start with Avro single-object encoding's ``C3 01`` marker."""


class UnknownFingerprintError(SchemaError):
    """The writer schema's fingerprint is not one of the published versions."""

    def __init__(self, message: str, fingerprint: str = "") -> None:
        super().__init__(message)
        self.fingerprint = fingerprint

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (str(self), self.fingerprint))


class TruncatedError(SchemaError):
    """The Avro body ended before the record did, or bytes were left over after it."""


class NonCanonicalJSONError(SchemaError):
    """A request/response field is not canonical JSON (sorted keys, compact, UTF-8)."""


class PayloadError(TraceVaultError):
    """Input refused in the agent before anything was published.

    ``path`` is the JSON path of the offending field (``$.request.messages[2].content``).
    """

    def __init__(self, message: str, path: str = "$") -> None:
        super().__init__(message)
        self.path = path

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (str(self), self.path))


class ServiceUnavailableError(TraceVaultError):
    """Kafka or the object store did not answer."""

    exit_code = 3


class NotFoundError(TraceVaultError):
    """A run, topic or object that was asked for does not exist."""

    exit_code = 3


class TopicMismatchError(TraceVaultError):
    """A topic exists but with settings that would break tracevault's guarantees."""

    exit_code = 1


class ChainError(TraceVaultError):
    """Verification failed: the first bad ``seq`` and, for the archive, the ``object`` key."""

    exit_code = 1

    def __init__(self, message: str, seq: int | None = None, obj: str | None = None) -> None:
        super().__init__(message)
        self.seq = seq
        self.obj = obj

    def __reduce__(self) -> tuple[type, tuple[str, int | None, str | None]]:
        return (type(self), (str(self), self.seq, self.obj))


class ReplayDivergence(TraceVaultError):
    """A re-run differed from the record at ``seq``; ``diff`` lists JSON-path differences."""

    exit_code = 1

    def __init__(
        self,
        message: str,
        seq: int = -1,
        expected: str | None = None,
        actual: str | None = None,
        diff: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.seq = seq
        self.expected = expected
        self.actual = actual
        self.diff = diff

    def __reduce__(
        self,
    ) -> tuple[type, tuple[str, int, str | None, str | None, tuple[str, ...]]]:
        return (type(self), (str(self), self.seq, self.expected, self.actual, self.diff))


class RetentionError(TraceVaultError):
    """Retention below the legal minimum, or an attempt to change a retained object."""


class ArchiveError(TraceVaultError):
    """The archive cannot be written, or what it holds is inconsistent."""


class FencedError(TraceVaultError):
    """A newer process with the same transactional id (or group member id) took over.

    The fenced sequencer stops at once: everything it wrote after the newer one started is
    aborted by the broker, so exactly-once holds. Give each instance its own ``--instance-id``.
    """
