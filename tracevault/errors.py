"""The one error hierarchy of tracevault, and the CLI's exit code for each class.

Every error a user can meet derives from :class:`TraceVaultError`, so the CLI catches one type
and exits with its ``exit_code``. Each class has exactly one code, and 2 means only "you asked
for something that cannot work": a supervisor or script can act on the code alone
(docs/design.md, "Service boundaries and errors").

::

    code  meaning
    0     ok
    1     verification failure or divergence: the evidence or a re-run disagrees with the record
    2     usage error: bad flags, settings or input; the API used out of order
    3     not found, or a service (Kafka, the object store) did not answer: retry later
    4     the archive is inconsistent or cannot be written: an operator must look at it
    5     fenced: the broker says another process took this instance's id; fenced again after
          a restart means two deployments share an id
    6     refused by retention: a lock, a legal hold or the legal minimum protects the evidence
    7     no content key: the run's content is encrypted under a tenant key this reader does not
          hold (another tenant's, or an erased one); its metadata and integrity stay readable
    130   interrupted (Ctrl-C)

    TraceVaultError                      2  misuse of the API (a Recorder reused, Publisher closed)
    ├── ConfigError                      2  bad settings or flags (names the setting)
    │   └── ForkRefusalError             2  a fork would run a side-effecting tool not named live
    ├── PayloadError                     2  refused at record time in the agent (names the field)
    ├── SchemaError                      1  bytes that are not a record we can read
    │   ├── BadMagicError                1  not Avro single-object encoding
    │   ├── UnknownFingerprintError      1  writer schema not among the published versions
    │   ├── TruncatedError               1  body ends early, or has trailing bytes
    │   └── NonCanonicalJSONError        1  request/response bytes are not canonical JSON
    ├── TopicMismatchError               1  an existing topic's config breaks a guarantee
    ├── ChainError                       1  hash chain broken (names seq and object)
    ├── LogError                         1  signed log disagrees: signature, proof, fork
    ├── ReplayDivergence                 1  re-run differs from the record
    ├── ServiceUnavailableError          3  broker or object store unreachable, or a service died
    ├── NotFoundError                    3  run, topic or object does not exist
    ├── ArchiveError                     4  the archive's objects are inconsistent or unwritable
    ├── FencedError                      5  a service stopped: another took its transactional id
    ├── RetentionError                   6  a delete or overwrite refused by retention or a hold
    └── ContentKeyError                  7  the run's content key cannot be unwrapped here

Why these codes: SchemaError is 1, not 2, because the CLI meets unreadable bytes only in data
it was asked to check (a topic, an archive, a bundle), so they are evidence that does not hold.
ArchiveError gets its own 4 because retrying does not help (unlike 3) and nothing was proven
false (unlike 1): a person must repair or restore objects. FencedError gets 5 so a supervisor
can tell "another instance took over" from a crash: a restart may be right once, but
repeated fencing means two deployments share an id, and restarting one fences the other.
RetentionError gets 6, not 4: the archive is healthy and did exactly what it must (keep
evidence); a purge job that meets it should report, not page someone about a broken archive.

Subclasses call ``super().__init__(message)`` with a single string so they pickle across
processes (batch replay runs in worker processes).
"""

from __future__ import annotations

__all__ = [
    "ArchiveError",
    "BadMagicError",
    "ChainError",
    "ConfigError",
    "ContentKeyError",
    "FencedError",
    "ForkRefusalError",
    "LogError",
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
    """Root of every tracevault error; ``exit_code`` is what the CLI exits with.

    Raised as such only for misuse of the API (usage, 2); every other failure has a subclass
    with its own code, listed in the module docstring.
    """

    exit_code: int = 2


class ConfigError(TraceVaultError):
    """Settings or flags that cannot work; the message names the setting."""

    exit_code = 2


def missing_extra(extra: str, exc: ImportError) -> ConfigError:
    """The error for an optional integration whose packages are not installed.

    Each integration imports its SDK only when it is used; without the extra a bare
    ``ModuleNotFoundError`` (or a 40-line traceback ending in ``google``) names a package the
    user never asked for, so this names the extra and the line that installs it. A usage
    error (2): this install cannot do what was asked, and retrying will not change that.
    """
    return ConfigError(
        f"this needs the `{extra}` extra, which is not installed ({exc}): "
        f"pip install 'tracevault[{extra}]' (or 'tracevault[all]')"
    )


class ForkRefusalError(ConfigError):
    """A fork would have had to run a side-effecting tool for real that the user did not name
    live (``--live-tools``): refused, as a usage error, before anything leaves the process."""


class SchemaError(TraceVaultError):
    """Bytes that cannot be read as a published tracevault schema."""

    exit_code = 1


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

    exit_code = 2

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


class LogError(TraceVaultError):
    """The signed log does not hold: a bad or unknown signature, a leaf not in the log, a
    proof that fails, a fork or a rollback (docs/log.md). ``run``, ``seq``, ``obj`` and
    ``checkpoint`` name where, when known."""

    exit_code = 1

    def __init__(
        self,
        message: str,
        run: str | None = None,
        seq: int | None = None,
        obj: str | None = None,
        checkpoint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.run = run
        self.seq = seq
        self.obj = obj
        self.checkpoint = checkpoint

    def __reduce__(
        self,
    ) -> tuple[type, tuple[str, str | None, int | None, str | None, str | None]]:
        return (type(self), (str(self), self.run, self.seq, self.obj, self.checkpoint))


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

    exit_code = 6


class ArchiveError(TraceVaultError):
    """The archive cannot be written, or what it holds is inconsistent."""

    exit_code = 4


class FencedError(TraceVaultError):
    """A newer process with the same transactional id (or group member id) took over.

    The fenced sequencer stops at once: everything it wrote after the newer one started is
    aborted by the broker, so exactly-once holds. Give each instance its own ``--instance-id``.
    """

    exit_code = 5


class ContentKeyError(TraceVaultError):
    """A run's content is encrypted and this reader cannot unwrap its data key.

    The run belongs to another tenant than the one configured here, the key provider refuses
    (no grant, a destroyed key), or a ciphertext does not open under the run's key (moved to
    another run, seq or field). Its own code, 7: nothing was proven false (not 1), retrying
    does not help (not 3), and the integrity of the run still verifies without any content key
    (docs/confidentiality.md).
    """

    exit_code = 7
