"""Check E (erasure record): a ``tracevault-erase`` run is signed by a trusted operator key.

An erasure record names a tenant, a subject and the runs whose keys were destroyed, and an
audit takes it as the evidence that an erasure was asked for and by whom. Anyone who can write
``raw`` can record a run claiming agent ``tracevault-erase`` (docs/confidentiality.md,
"Erasure records are signed"), so such a run is the record only when the operator's key
(``operator_key_file``; trusted as ``operator_vkeys``) signed it from seq 0 to RUN_FINISHED:
the same agent notes as check I (``_identity``), under the operator vkeys instead of the
agent vkeys, which never count here. Unsigned, signed by another key, unfinished, or checked
with no operator vkey trusted: verify fails naming the record (fail closed).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tracevault.errors import ChainError, SchemaError
from tracevault.replayer.load._identity import (
    IDENTITY_CHECK,
    VERIFIED,
    carries_note,
    check_identity,
)
from tracevault.replayer.load.checks import fail
from tracevault.schemas import decode_event
from tracevault.transparency import ERASE_AGENT, AgentKeys, Ed25519Verifier

__all__ = [
    "ERASURE_CHECK",
    "check_erasure_record",
    "check_writer",
    "failure_detail",
    "is_erasure_record",
]

ERASURE_CHECK = "E erasure: the erasure record is signed by a trusted operator key"
_CHECK = "E erasure"
_FRAME = re.compile(r"^verify failed: check [^:]*: ")
_ACTION_TAIL = re.compile(r"\. Operator action: .*$", re.DOTALL)
_UNSIGNED = (
    "carries no operator signature, so it is forged: anyone who can write raw can record "
    "a run under that agent_id"
)


def failure_detail(exc: ChainError) -> str:
    """What a check found, without its own "verify failed: check ..." frame and operator
    action: the check quoting it (E, C) says those once, its own wording first."""
    text = _ACTION_TAIL.sub("", str(exc))
    return _FRAME.sub("", text, count=1)


def check_erasure_record(
    run_id: str,
    raws: Sequence[bytes],
    hashes: Sequence[bytes],
    kinds: Sequence[str],
    operators: Sequence[Ed25519Verifier] | None,
    *,
    finished: bool,
    agent_ids: Sequence[str | None] | None = None,
) -> list[str]:
    """The checks passed by erasure record ``run_id``; ChainError (exit 1) naming it when
    its operator signature is missing, wrong, or cannot be checked."""
    forged = f"erasure record {run_id} (agent {ERASE_AGENT})"
    if not operators:
        raise fail(
            _CHECK,
            0,
            None,
            f"{forged} is unverified: no operator vkey is trusted (TRACEVAULT_OPERATOR_VKEYS), "
            "so whether an operator wrote it cannot be checked",
        )
    if not finished:
        raise fail(_CHECK, len(raws) - 1, None, f"{forged} is unfinished: no RUN_FINISHED")
    if not carries_note(raws):
        raise fail(_CHECK, 0, None, f"{forged} {_UNSIGNED}")
    keys = AgentKeys({ERASE_AGENT: operators})
    try:
        checks, warnings, provenance = check_identity(
            run_id, raws, hashes, kinds, keys, finished=True, agent_ids=agent_ids
        )
    except ChainError as exc:
        raise fail(
            _CHECK,
            exc.seq,
            None,
            f"{forged} is not signed by a trusted operator key, so it is forged "
            f"(check I: {failure_detail(exc)})",
        ) from None
    if IDENTITY_CHECK not in checks or warnings or provenance != VERIFIED:
        raise fail(
            _CHECK,
            0,
            None,
            f"{forged} {_UNSIGNED}",
        )
    return [ERASURE_CHECK]


def is_erasure_record(raws: Sequence[bytes], agent_ids: Sequence[str | None] | None) -> bool:
    """Whether the run claims to be an erasure record: its seq 0's agent_id."""
    if agent_ids is not None:
        return bool(agent_ids) and agent_ids[0] == ERASE_AGENT
    if not raws:
        return False
    try:
        return decode_event(raws[0], check_json=False).agent.agent_id == ERASE_AGENT
    except SchemaError:
        return False  # checks 1-6 read every event: not reached


def check_writer(
    run_id: str,
    raws: Sequence[bytes],
    hashes: Sequence[bytes],
    kinds: Sequence[str],
    keys: tuple[AgentKeys | None, Sequence[Ed25519Verifier] | None],
    *,
    finished: bool,
    agent_ids: Sequence[str | None] | None,
    required: bool = True,
) -> tuple[list[str], list[str], str]:
    """(checks, warnings, provenance) of who wrote the run: check E for an erasure record
    (the operator vkeys, ``keys[1]``; never waived), else check I (the agent vkeys,
    ``keys[0]``; ``required`` False is ``--no-agent-check``)."""
    agents, operators = keys
    if is_erasure_record(raws, agent_ids):
        checks = check_erasure_record(
            run_id, raws, hashes, kinds, operators, finished=finished, agent_ids=agent_ids
        )
        return checks, [], VERIFIED
    return check_identity(
        run_id,
        raws,
        hashes,
        kinds,
        agents,
        finished=finished,
        agent_ids=agent_ids,
        required=required,
    )
