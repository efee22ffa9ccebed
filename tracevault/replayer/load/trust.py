"""What a run is verified against, built once for every reader: ``replay verify`` and the
commands that take a run as the record, ``search --verify``, ``replay batch`` and the desk.

:class:`Trust` is the deployment's settings plus what the caller added (``Trust.of``: the
flags of ``replay verify``, as keywords); :func:`verify_run` loads a run and verifies it with
one, the whole way: the run removed from the archive is named as such, then check L5
(freshness), the witness stores' cosignatures, the signed log, the records and who wrote them
(``verify``). The CLI only parses its flags into this and prints the report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from tracevault.archive import ObjectStore
from tracevault.config import Settings
from tracevault.errors import ConfigError, LogError, NotFoundError
from tracevault.replayer._results import LoadedRun, VerifyReport
from tracevault.replayer.load.fresh import ASK, Tails, removed
from tracevault.replayer.load.log_policy import (
    EndRule,
    LogPolicy,
    unverified_provenance,
    unverified_record,
)
from tracevault.replayer.load.source import load_run, refuse_bad_run_id
from tracevault.replayer.load.verify import verify
from tracevault.transparency import AgentKeys, Ed25519Verifier, operator_verifiers

__all__ = ["Trust", "unverified_freshness", "verify_run"]


@dataclass(frozen=True, slots=True)
class Trust:
    """How a run is checked before it is taken as the record: ``verify``'s options.

    ``policy`` None: no trusted log key, so the run is ``unverified`` (fail closed), unless
    ``chain_only`` (``verify --no-log-check``) waived the signed log. ``skip``: the command's
    ``--no-verify``, nothing checked (and said so). ``witness_stores``: read for their
    cosignatures and for L5 (empty: the deployment's ``witness_stores``). ``offline``: an
    archive nothing proved current (Kafka unreachable) is accepted, knowingly."""

    policy: LogPolicy | None
    end: EndRule
    agents: AgentKeys
    witness_stores: tuple[str, ...] = ()
    chain_only: bool = False
    skip: bool = False
    #: the operator vkeys an erasure record must be signed by (``operator_vkeys``)
    operators: tuple[Ed25519Verifier, ...] = ()
    #: False with ``--no-agent-check``: a run whose provenance was not proven may pass.
    agent_check: bool = True
    #: True with ``--offline``: check L5 does not ask the topic, and what it could not
    #: compare is accepted (said in the report's status), never ``unverified``.
    offline: bool = False

    @classmethod
    def of(
        cls,
        settings: Settings,
        *,
        trusted_keys: Sequence[str] = (),
        witness_keys: Sequence[str] = (),
        min_witnesses: int | None = None,
        agent_key_pairs: Sequence[str] = (),
        witness_stores: Sequence[str] = (),
        allow_unfinished: bool = False,
        require_finished: bool = False,
        no_log_check: bool = False,
        no_verify: bool = False,
        no_agent_check: bool = False,
        offline: bool = False,
    ) -> Trust:
        """The deployment's trust (``settings``: log, agent, witness and operator vkeys, the
        end rule) plus the caller's; raises :class:`ConfigError` on flags that contradict."""
        policy = _policy(settings, trusted_keys, witness_keys, min_witnesses, no_log_check)
        if witness_stores and policy is None:
            raise ConfigError("--witness-store needs the log's key too: give --trusted-key")
        if no_agent_check and agent_key_pairs:
            raise ConfigError("--no-agent-check skips check I: drop it, or drop --agent-key")
        agents = AgentKeys.from_setting(settings.agent_vkeys).merged(
            AgentKeys.from_pairs(tuple(agent_key_pairs))
        )
        return cls(
            policy,
            _end_rule(settings, allow_unfinished, require_finished),
            agents,
            tuple(witness_stores),
            no_log_check,
            no_verify,
            operators=tuple(operator_verifiers(settings.operator_vkeys)),
            agent_check=not no_agent_check,
            offline=offline,
        )

    def refusal(self, run_id: str | None, doing: str) -> LogError | None:
        """Why a command taking ``run_id`` as the record refuses it before loading anything
        (``unverified``: no trusted log key, or no trusted agent vkey), or None."""
        if self.skip:
            return None
        if self.policy is None and not self.chain_only:
            return unverified_record(run_id, doing)
        if self.agent_check and not self.agents:
            return unverified_provenance(run_id, doing)
        return None

    def verify(
        self,
        settings: Settings | None,
        run: LoadedRun,
        *,
        rebuild: bool,
        tails: Tails | Literal["ask"] = ASK,
        archive: ObjectStore | None = None,
    ) -> VerifyReport:
        """``verify`` of ``run`` (read from ``settings``' deployment) with this trust;
        ``tails``: the topic's archived checkpoints if the caller read them already;
        ``archive``: the store ``run`` was read from, if the caller holds it open."""
        return verify(
            run,
            rebuild=rebuild,
            log=self.policy,
            end=self.end,
            chain_only=self.chain_only,
            agents=self.agents,
            operators=self.operators,
            agent_check=self.agent_check,
            settings=settings,
            witness_stores=self.witness_stores,
            offline=self.offline,
            tails=tails,
            archive=archive,
        )


def _policy(
    settings: Settings,
    trusted: Sequence[str],
    witness: Sequence[str],
    least: int | None,
    no_log_check: bool,
) -> LogPolicy | None:
    """The keys ``verify`` trusts; none with ``--no-log-check`` (which takes no key flag)."""
    if not no_log_check:
        return LogPolicy.of(settings, tuple(trusted), tuple(witness), least)
    if trusted or witness or least:
        raise ConfigError(
            "--no-log-check skips the signed log: drop it, or drop --trusted-key/--witness-key"
        )
    return None


def _end_rule(settings: Settings, allow_unfinished: bool, required: bool) -> EndRule:
    """When a run without RUN_FINISHED fails (``log_policy.EndRule``)."""
    if allow_unfinished and required:
        raise ConfigError("--allow-unfinished and --require-finished contradict each other")
    if allow_unfinished:
        return EndRule()
    return EndRule(required, settings.sequencer_idle_close_s, settings.sequencer_clock_skew_s)


def unverified_freshness(run_id: str | None, doing: str | None = None) -> LogError:
    """Why a run from an archive that nothing proved current (check L5 compared nothing with
    the topic) is not the record; ``doing``: what ``--no-verify`` does instead, if offered."""
    what = f"run {run_id}" if run_id is not None else "the runs"
    instead = "" if doing is None else f", --no-verify {doing} it unverified"
    return LogError(
        f"unverified freshness: nothing proved the archive {what} was read from current (the "
        "sealed topic was not compared, and a witness store shows only a floor), so a "
        "rolled-back archive cannot be told apart. Verify where Kafka answers; --offline "
        f"accepts it knowingly{instead}",
        run=run_id,
    )


def verify_run(
    settings: Settings,
    run_id: str,
    trust: Trust,
    *,
    source: Literal["topic", "archive"] = "archive",
    rebuild: bool = False,
    doing: str | None = None,
) -> tuple[LoadedRun, VerifyReport]:
    """Load ``run_id`` from ``source`` and verify it as ``replay verify`` does, the whole way.

    A run the archive lacks but that the evidence says it held raises :class:`LogError`
    (removed); otherwise the ``NotFoundError`` stands. ``doing`` (what ``--no-verify``
    would do instead, e.g. ``"re-runs"``): the caller takes the run as the record, so one
    that is not a pass (``unverified``: no trusted key, provenance or freshness not
    proven) is refused with :class:`LogError`; None: the report says so. A failed check
    raises ``ChainError``/``LogError``."""
    refused = None if doing is None else trust.refusal(run_id, doing)
    if refused is not None:
        raise refused
    with_log = trust.policy is not None
    try:
        run = load_run(settings, run_id, source=source, with_log=with_log)
    except NotFoundError as exc:
        refuse_bad_run_id(run_id, exc)
        if source == "archive" and trust.policy is not None:
            removed(settings, run_id, trust.policy, trust.witness_stores, exc,
                    offline=trust.offline)  # fmt: skip
        raise
    report = trust.verify(settings, run, rebuild=rebuild)
    if doing is not None and not report.ok:
        if report.freshness == "unverified":
            raise unverified_freshness(run_id, doing)
        raise unverified_provenance(run_id, doing, f"it was {report.provenance}")
    return run, report
