"""Agent identity: the signed note an agent's Recorder puts in its run (docs/identity.md).

The chain proves order, not authorship: anyone who can write ``raw`` can compute SHA-256.
So the Recorder, which knows the exact bytes it writes, computes its run's chain itself and
signs a C2SP signed note (``_note``) over ``(run id, seq, chain hash)`` with the agent's own
Ed25519 key, carried in the event's ``attributes`` under :data:`ATTEST_ATTRIBUTE`. The note
in event ``k`` covers seq ``k-1`` (event ``k``'s own bytes cannot be inside its hash), and
lists the producer's own chain hashes since the previous note, so a verifier can name the
*exact* seq the producer did not write: raw ``i`` is the producer's when
``link(P_{i-1}, raw_i) == P_i``, whatever the sealed chain did before it. The chain hashes
are the ones the producer computes anyway: one SHA-256 per event, none more. The text::

    tracevault/agent/v1
    run <run id>
    seq <covered seq k-1, -1 for the genesis>
    hash <base64 chain hash of that seq>
    hashes <first seq a> <base64 of the 32-byte chain hashes P_{a-1} .. P_{k-1}>

The first line keeps an agent note from ever reading as a checkpoint (and the other way
round), so the same Ed25519 signer type serves both without one standing in for the other.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tracevault.errors import ConfigError, LogError
from tracevault.transparency._note import (
    Ed25519Verifier,
    NoteSigner,
    Signature,
    parse_vkey,
    sign_note,
    split_note,
)

__all__ = [
    "ATTEST_ATTRIBUTE",
    "ATTEST_MARK",
    "AgentKeys",
    "AgentNote",
    "open_agent_note",
    "sign_agent_note",
]

#: The attribute that carries the note; the Avro-encoded key (``ATTEST_MARK``) is what the
#: sequencer's fast path looks for to hand such an event to the Python check.
ATTEST_ATTRIBUTE = "tracevault.attest"
ATTEST_MARK = b"\x22" + ATTEST_ATTRIBUTE.encode()  # Avro string: zig-zag length 17, bytes
_HEADER = "tracevault/agent/v1"
#: ``agent_vkeys``'s entry for every agent id it does not list by name (one key per deployment).
ANY_AGENT = "*"
_H = 32  # a chain hash


@dataclass(frozen=True, slots=True)
class AgentNote:
    """What one agent note says: the run, the seq it covers, its chain hash, and the
    producer's chain hashes ``P_{first-1} .. P_seq`` (``chain``, 32 bytes each)."""

    run_id: str
    seq: int
    chain_hash: bytes
    first: int
    chain: bytes

    def text(self) -> str:
        return (
            f"{_HEADER}\nrun {self.run_id}\nseq {self.seq}\n"
            f"hash {base64.b64encode(self.chain_hash).decode()}\n"
            f"hashes {self.first} {base64.b64encode(self.chain).decode()}\n"
        )

    @property
    def covers(self) -> range:
        """The seqs whose raw values the note vouches for (by the producer's hashes)."""
        return range(self.first, self.seq + 1)

    def around(self, seq: int) -> tuple[bytes, bytes]:
        """The producer's ``(P_{seq-1}, P_seq)`` for a seq in :attr:`covers`."""
        i = (seq - self.first) * _H
        return self.chain[i : i + _H], self.chain[i + _H : i + 2 * _H]

    @classmethod
    def parse(cls, text: str) -> AgentNote:
        lines = text.split("\n")
        if len(lines) != 6 or lines[0] != _HEADER or lines[5] != "":
            raise LogError(f"not a {_HEADER} note")
        try:
            run = _field(lines[1], "run")
            seq = int(_field(lines[2], "seq"))
            chain_hash = base64.b64decode(_field(lines[3], "hash"), validate=True)
            first_s, _, blob = _field(lines[4], "hashes").partition(" ")
            first = int(first_s)
            chain = base64.b64decode(blob, validate=True)
        except (ValueError, binascii.Error) as exc:
            raise LogError(f"malformed agent note: {exc}") from None
        if (
            len(chain_hash) != _H
            or not 0 <= first <= seq + 1
            or len(chain) != _H * (seq - first + 2)
            or chain[-_H:] != chain_hash
        ):
            raise LogError("malformed agent note: its hash, hashes or seqs disagree")
        return cls(run, seq, chain_hash, first, chain)


def _field(line: str, name: str) -> str:
    if not line.startswith(name + " "):
        raise ValueError(f"expected the {name!r} line, got {line[:40]!r}")
    return line[len(name) + 1 :]


def sign_agent_note(signer: NoteSigner, note: AgentNote) -> str:
    """The signed note, as the attribute carries it."""
    return sign_note(note.text(), [signer])


def open_agent_note(value: str) -> tuple[AgentNote, Signature, bytes]:
    """The note, its (single) signature and the signed message; the signature unchecked."""
    text, sigs = split_note(value)
    if len(sigs) != 1:
        raise LogError(f"an agent note has one signature, this one {len(sigs)}")
    return AgentNote.parse(text), sigs[0], text.encode()


class AgentKeys:
    """Which agent vkeys may record under which ``agent_id`` (the deployment's list)."""

    __slots__ = ("_allowed", "_by_id")

    def __init__(self, allowed: Mapping[str, Iterable[Ed25519Verifier]]) -> None:
        self._allowed = {a: tuple(vs) for a, vs in allowed.items()}
        self._by_id: dict[tuple[str, bytes], Ed25519Verifier] = {
            (v.name, v.key_id): v for vs in self._allowed.values() for v in vs
        }

    def __bool__(self) -> bool:
        return bool(self._by_id)

    def key(self, sig: Signature) -> Ed25519Verifier | None:
        """The trusted agent key that made ``sig`` (by name and id), if any."""
        return self._by_id.get((sig.name, sig.key_id))

    def allows(self, agent_id: str, key: Ed25519Verifier) -> bool:
        """Whether ``key`` may record as ``agent_id``: its own list, else the ``"*"`` list
        (a key for every agent id the deployment does not list by name)."""
        own = self._allowed.get(agent_id)
        return key in (own if own is not None else self._allowed.get(ANY_AGENT, ()))

    def keyed(self, agent_id: str) -> bool:
        """Whether some trusted key may record as ``agent_id`` (as :meth:`allows` reads the
        list: its own, else ``"*"``'s): a run claiming it must be signed (docs/identity.md,
        "Provenance is required"). An id listed with no key is keyed by none."""
        own = self._allowed.get(agent_id)
        return bool(own if own is not None else self._allowed.get(ANY_AGENT))

    def agents_of(self, key: Ed25519Verifier) -> list[str]:
        return sorted(a for a, vs in self._allowed.items() if key in vs)

    def merged(self, other: AgentKeys) -> AgentKeys:
        out = {a: list(vs) for a, vs in self._allowed.items()}
        for a, vs in other._allowed.items():
            out.setdefault(a, []).extend(v for v in vs if v not in out[a])
        return AgentKeys(out)

    @classmethod
    def from_setting(cls, text: str) -> AgentKeys:
        """``agent_vkeys``: a JSON object ``{"agent_id": ["vkey", ...]}``, or ``@FILE`` of one."""
        text = text.strip()
        if not text:
            return cls({})
        if text.startswith("@"):
            try:
                text = Path(text[1:]).read_text(encoding="utf-8")
            except OSError as e:
                raise ConfigError(f"agent_vkeys: cannot read {text[1:]}: {e.strerror}") from None
        try:
            data = json.loads(text)
        except ValueError as e:
            raise ConfigError(f"agent_vkeys is not JSON: {e}") from None
        if not isinstance(data, dict) or not all(
            isinstance(a, str) and isinstance(vs, list) and all(isinstance(v, str) for v in vs)
            for a, vs in data.items()
        ):
            raise ConfigError('agent_vkeys must map agent ids to lists of vkeys: {"a": ["k"]}')
        return cls({a: [parse_vkey(v) for v in vs] for a, vs in data.items()})

    @classmethod
    def from_pairs(cls, pairs: Sequence[str]) -> AgentKeys:
        """``AGENT_ID=VKEY`` or ``AGENT_ID=@FILE`` items (verify's ``--agent-key``)."""
        out: dict[str, list[Ed25519Verifier]] = {}
        for item in pairs:
            agent, sep, vkey = item.partition("=")
            if not sep or not agent or not vkey:
                raise ConfigError(f"--agent-key reads AGENT_ID=VKEY, got {item[:60]!r}")
            if vkey.startswith("@"):
                try:
                    vkey = Path(vkey[1:]).read_text(encoding="utf-8").strip()
                except OSError as e:
                    raise ConfigError(
                        f"--agent-key: cannot read {vkey[1:]}: {e.strerror}"
                    ) from None
            out.setdefault(agent, []).append(parse_vkey(vkey))
        return cls(out)
