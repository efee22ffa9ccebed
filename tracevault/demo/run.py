"""The demo job, step by step.

1. find a broker (or start the local one) and create the topics;
2. start the sequencer and the archiver as subprocesses;
3. run the fleet: ``agents`` threads, each recording ``runs`` tickets through one Publisher;
4. wait until every run is sealed (its head is finished) and archived (its final receipt);
5. verify and replay a sample from the archive and from the topic;
6. stop everything it started and return a :class:`DemoSummary`.

Content is encrypted, as in production whenever a key provider is configured: with none
configured, the demo uses a keyring of its own beside its log key (``keyring.json`` in its
state folder, mode 0600). The sequencer and archiver never see a content key; verify needs
none; reading and replaying open the runs through the keyring (docs/confidentiality.md).
``encrypt=False`` (``--plaintext``) records in clear.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tracevault.archive import ObjectStore, archived_run, open_store
from tracevault.config import Settings
from tracevault.content import open_run
from tracevault.demo.fleet import FleetWorld, RefundRefused, scripted_model, support_agent
from tracevault.demo.services import LocalBroker, Service, broker_answers
from tracevault.errors import ServiceUnavailableError, TraceVaultError
from tracevault.heads import fingerprint, heads_partition_count, read_state
from tracevault.kafka import ensure_topics
from tracevault.producer import Publisher, Recorder
from tracevault.replayer import LogPolicy, load_run, replay, verify
from tracevault.replayer.load.source import load_archived
from tracevault.transparency import AgentKeys, Ed25519Signer, load_signer, write_private_key

__all__ = ["DemoOptions", "DemoSummary", "run_demo"]

log = logging.getLogger(__name__)
_TICKETS = [
    "Where is my order",
    "My parcel is late, what is the status of my order",
    "I was charged twice, chargeback requested for order",
    "Please check the status of order",
    "Can you tell me about my order",
    "Refund status for order",
]


@dataclass(frozen=True)
class DemoOptions:
    agents: int = 4
    runs: int = 5
    sample: int = 4
    timeout: float = 180.0
    work_dir: Path = Path(".tracevault")
    keep_broker: bool = False
    encrypt: bool = True


@dataclass
class DemoSummary:
    runs: int = 0
    failed_runs: int = 0
    events: int = 0
    events_sealed: int = 0
    events_archived: int = 0
    runs_archived: int = 0
    record_seconds: float = 0.0
    pipeline_seconds: float = 0.0
    archive: str = ""
    prefix: str = ""
    bootstrap_servers: str = ""
    verified: dict[str, int] = field(default_factory=lambda: {"archive": 0, "topic": 0})
    replayed: dict[str, int] = field(default_factory=lambda: {"archive": 0, "topic": 0})
    sampled: dict[str, list[str]] = field(default_factory=dict)
    run_ids: list[str] = field(default_factory=list)
    logs: dict[str, str] = field(default_factory=dict)
    commands: list[str] = field(default_factory=list)
    log_key_file: str = ""
    log_vkey: str = ""
    log_vkey_file: str = ""
    content: str = "in clear"

    @property
    def events_per_s(self) -> float:
        return self.events / self.record_seconds if self.record_seconds else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "failed_runs": self.failed_runs,
            "events": self.events,
            "events_sealed": self.events_sealed,
            "events_archived": self.events_archived,
            "runs_archived": self.runs_archived,
            "record_seconds": round(self.record_seconds, 3),
            "pipeline_seconds": round(self.pipeline_seconds, 3),
            "events_per_s": round(self.events_per_s, 1),
            "archive": self.archive,
            "prefix": self.prefix,
            "bootstrap_servers": self.bootstrap_servers,
            "verified": self.verified,
            "replayed": self.replayed,
            "sampled": self.sampled,
            "run_ids": self.run_ids,
            "logs": self.logs,
            "commands": self.commands,
            "log_key_file": self.log_key_file,
            "log_vkey": self.log_vkey,
            "log_vkey_file": self.log_vkey_file,
            "content": self.content,
        }


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description:<26}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


@contextlib.contextmanager
def _broker(settings: Settings, opts: DemoOptions, console: Console) -> Iterator[None]:
    if broker_answers(settings):
        yield
        return
    broker = LocalBroker.for_settings(settings)
    console.print(f"[dim]no broker at {settings.bootstrap_servers}: starting dev/kafka[/]")
    broker.start()
    try:
        yield
    finally:
        if opts.keep_broker:
            console.print(
                f"[dim]left the broker running (KAFKA_PORT={broker.port} dev/kafka stop)[/]"
            )
        else:
            broker.stop()
            console.print("[dim]stopped the broker it started; --keep-broker leaves it running[/]")


def _record_fleet(
    settings: Settings, opts: DemoOptions, progress: Progress, summary: DemoSummary
) -> None:
    world = FleetWorld()
    publisher = Publisher(settings)
    task = progress.add_task("recording runs", total=opts.agents * opts.runs)
    failed = 0

    def one_agent(agent_no: int) -> list[tuple[str, bool]]:
        done = []
        for run_no in range(opts.runs):
            n = agent_no * opts.runs + run_no
            ticket = _TICKETS[n % len(_TICKETS)]
            rec = Recorder(
                publisher=publisher,
                agent_id=_AGENT_ID.format(agent_no),
                agent_version="2.3.1",
                model=scripted_model,
                tools=world.tools(),
                harness="tracevault-demo",
                attributes={"fleet": "demo", "ticket_no": str(n)},
            )
            task_input = {"ticket": ticket, "order_id": f"A{1000 + n}", "seed": 7 * n + 1}
            ok = True
            try:
                rec.run(support_agent, task_input)
            except RefundRefused:
                ok = False  # recorded as ERROR + RUN_FINISHED: part of the demo
            done.append((rec.run_id, ok))
            progress.advance(task)
        return done

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=opts.agents, thread_name_prefix="agent") as pool:
        results = [r for batch in pool.map(one_agent, range(opts.agents)) for r in batch]
    publisher.close(timeout=30)
    summary.record_seconds = time.perf_counter() - started
    stats = publisher.stats()
    for run_id, ok in results:
        summary.run_ids.append(run_id)
        failed += 0 if ok else 1
    summary.runs = len(results)
    summary.failed_runs = failed
    summary.events = stats.published


def _sealed_to_the_end(settings: Settings, parts: range, wanted: set[str]) -> dict[str, int]:
    """Runs of ``wanted`` whose RUN_FINISHED is sealed, and how many events each has.

    A finished run's head leaves the heads topic for a chunk of finished runs (docs/fleet.md),
    so both are read: an open run's head, a finished run's entry in its chunk.
    """
    state = read_state(settings, parts)
    out = {r: h.next_seq for r, h in state.heads.items() if r in wanted and h.finished}
    by_fp = {fingerprint(r): r for r in wanted}
    for _p, chunk in state.finished.values():
        for fp, last in zip(chunk.fingerprints, chunk.last_seqs, strict=True):
            run = by_fp.get(fp)
            if run is not None:
                out[run] = last + 1
    return out


def _wait_pipeline(
    settings: Settings,
    opts: DemoOptions,
    progress: Progress,
    summary: DemoSummary,
    services: list[Service],
) -> None:
    wanted = set(summary.run_ids)
    sealed_task = progress.add_task("sealed (sequencer)", total=len(wanted))
    archived_task = progress.add_task("archived (archiver)", total=len(wanted))
    parts = range(heads_partition_count(settings))
    store = open_store(settings.archive_url, settings)
    deadline = time.monotonic() + opts.timeout
    started = time.monotonic()
    archived: dict[str, int] = {}  # run id -> events archived, once its end is archived
    try:
        while True:
            for svc in services:
                svc.check_alive()
            finished = _sealed_to_the_end(settings, parts, wanted)
            progress.update(sealed_task, completed=len(finished))
            for run_id in wanted - archived.keys():
                got = archived_run(store, run_id)  # either archive layout
                if got is not None and got[0] and _readable(store, run_id, got[1]):
                    archived[run_id] = got[1]
            progress.update(archived_task, completed=len(archived))
            if len(finished) == len(wanted) and archived.keys() == wanted:
                break
            if time.monotonic() > deadline:
                raise ServiceUnavailableError(
                    f"after {opts.timeout:.0f}s only {len(finished)}/{len(wanted)} runs are "
                    f"sealed and {len(archived)}/{len(wanted)} archived; see the service logs: "
                    + ", ".join(f"{s.name}: {s.log_path}" for s in services)
                )
            time.sleep(0.5)
        summary.pipeline_seconds = time.monotonic() - started
        summary.events_sealed = sum(finished[r] for r in wanted)
        summary.events_archived = sum(archived.values())
        summary.runs_archived = len(archived)
    finally:
        store.close()


def _check_samples(
    settings: Settings, opts: DemoOptions, progress: Progress, summary: DemoSummary
) -> None:
    sample = summary.run_ids[: max(1, min(opts.sample, len(summary.run_ids)))]
    for source in ("archive", "topic"):
        task = progress.add_task(f"verify+replay ({source})", total=len(sample))
        summary.sampled[source] = sample
        policy = LogPolicy.of(settings)  # the demo's vkey: never a keyless "verified"
        agents = AgentKeys.from_setting(settings.agent_vkeys)  # ... and its agents' vkeys
        for run_id in sample:
            run = load_run(settings, run_id, source=source, with_log=True)
            report = verify(run, log=policy, agents=agents)  # raises ChainError / LogError
            summary.verified[source] += 1
            events = open_run(settings, report.events)
            result = replay(events, support_agent)  # raises ReplayDivergence
            if result.matched:
                summary.replayed[source] += 1
            progress.advance(task)


def _cli_name() -> str:
    """``tracevault``, or its full path when this interpreter's scripts are not on PATH
    (dev/demo installs into .venv without activating it)."""
    here = Path(sys.executable).parent / "tracevault"
    found = shutil.which("tracevault")
    if here.exists() and (found is None or Path(found).resolve() != here.resolve()):
        return str(here)
    return "tracevault"


def demo_log_key(work_dir: Path) -> tuple[Path, str]:
    """The demo's log key file under its state dir (created once, mode 0600) and its vkey:
    the sequencer signs with it, the archiver and verify trust the vkey (docs/log.md).

    The vkey (public) is written beside it, to ``log.vkey``, every time: the commands the
    demo prints verify with ``--trusted-key @<work_dir>/log.vkey``, and
    ``TRACEVAULT_LOG_VKEYS=@<that file>`` makes it the default of every later command.
    """
    path = work_dir / "log.key"
    if not path.exists():
        work_dir.mkdir(parents=True, exist_ok=True)
        write_private_key(path, Ed25519Signer.generate("tracevault-demo"))
    vkey = load_signer(path).verifier.vkey
    public = demo_vkey_file(work_dir)
    held = public.read_text(encoding="utf-8").split() if public.exists() else []
    if vkey not in held:  # kept when it lists the key: `keys rotate --vkeys` wrote old ones
        public.write_text(vkey + "\n", encoding="utf-8")
    return path, vkey


def demo_trusted(settings: Settings, work_dir: Path) -> str:
    """What the demo's archiver, sequencer and verify trust (``log_vkeys``): every vkey in
    the demo's ``log.vkey`` (its key, and those a rotation kept) and every one the user
    trusts in TRACEVAULT_LOG_VKEYS, so a log signed before a key rotation still verifies
    (docs/operations.md, "Key rotation")."""
    items = demo_vkey_file(work_dir).read_text(encoding="utf-8").split()
    for item in settings.log_vkeys.split(","):
        if item.strip() and item.strip() not in items:
            items.append(item.strip())
    return ",".join(items)


#: The demo fleet's agent ids: ``support-agent-00`` .. (``--agents``).
_AGENT_ID = "support-agent-{:02d}"


def demo_agent_key(work_dir: Path) -> Path:
    """The demo's agent key under its state dir (created once, mode 0600), its vkey beside it
    (``agent.vkey``) and the deployment's list of who may record (``agent_vkeys.json``: that
    key for every agent id, ``"*"``, as a one-key deployment has it; a production list names
    each agent id): provenance is required (docs/identity.md), so the demo's agents (and the
    README's, which record with this key) sign their runs and the sequencer and verify check
    them."""
    path = work_dir / "agent.key"
    if not path.exists():
        work_dir.mkdir(parents=True, exist_ok=True)
        write_private_key(path, Ed25519Signer.generate("agents.tracevault-demo"))
    vkey = load_signer(path).verifier.vkey
    (work_dir / "agent.vkey").write_text(vkey + "\n", encoding="utf-8")
    allowed = json.dumps({"*": [vkey]})
    demo_agent_vkeys_file(work_dir).write_text(allowed + "\n", encoding="utf-8")
    return path


def demo_agent_vkeys_file(work_dir: Path) -> Path:
    """Where the demo keeps its ``agent_vkeys`` (TRACEVAULT_AGENT_VKEYS=@that file)."""
    return work_dir / "agent_vkeys.json"


def demo_vkey_file(work_dir: Path) -> Path:
    """Where the demo keeps its log's public key (what verify trusts)."""
    return work_dir / "log.vkey"


def demo_keyring(settings: Settings, opts: DemoOptions) -> Settings:
    """``settings`` with the demo's own keyring when encrypting and no provider is set."""
    if not opts.encrypt or settings.key_provider != "none":
        return settings
    path = opts.work_dir / "keyring.json"
    return settings.model_copy(update={"key_provider": "keyring", "keyring_path": str(path)})


def _content(settings: Settings) -> str:
    if settings.key_provider == "keyring":
        return f"encrypted (keyring {settings.keyring_path}, tenant {settings.tenant})"
    if settings.key_provider == "kms":
        return f"encrypted (kms, tenant {settings.tenant})"
    return "in clear"


def run_demo(settings: Settings, opts: DemoOptions, console: Console) -> DemoSummary:
    """Run the whole pipeline once on ``settings`` and return what happened."""
    settings = demo_keyring(settings, opts)
    summary = DemoSummary(
        archive=settings.archive_url,
        prefix=settings.topic_prefix,
        bootstrap_servers=settings.bootstrap_servers,
        content=_content(settings),
    )
    key_file, vkey = demo_log_key(opts.work_dir)
    summary.log_key_file, summary.log_vkey = str(key_file), vkey
    trusted = demo_trusted(settings, opts.work_dir)
    agent_key = demo_agent_key(opts.work_dir)
    settings = settings.model_copy(
        update={
            "agent_key": None,
            "agent_key_file": str(agent_key.resolve()),
            "agent_vkeys": f"@{demo_agent_vkeys_file(opts.work_dir).resolve()}",
        }
    )
    with _broker(settings, opts, console):
        ensure_topics(settings)
        services = _services(settings, opts.work_dir, key_file, trusted)
        summary.logs = {s.name: str(s.log_path) for s in services}
        try:
            for svc in services:
                svc.start()
            with _progress(console) as progress:
                _record_fleet(settings, opts, progress, summary)
                _wait_pipeline(settings, opts, progress, summary, services)
                _check_samples(
                    settings.model_copy(update={"log_vkeys": trusted}), opts, progress, summary
                )
        finally:
            codes = {svc.name: svc.stop() for svc in services}
        bad = {n: c for n, c in codes.items() if c not in (0, None)}
        if bad:
            raise ServiceUnavailableError(
                f"services did not shut down cleanly: {bad}; see {summary.logs}"
            )
    summary.log_vkey_file = str(demo_vkey_file(opts.work_dir))
    summary.commands = _commands(settings, opts.work_dir, summary.run_ids[0])
    return summary


def _services(settings: Settings, work_dir: Path, key_file: Path, vkeys: str) -> list[Service]:
    """The sequencer (signing with the demo's log key, resuming a log signed by any of
    ``vkeys``) and the archiver (trusting ``vkeys``: demo_trusted)."""
    tag = uuid.uuid4().hex[:8]
    logs = work_dir / "demo-logs"
    common = ["--bootstrap-servers", settings.bootstrap_servers, "--prefix", settings.topic_prefix]
    trusted = {"TRACEVAULT_LOG_VKEYS": vkeys}
    agents = {"TRACEVAULT_AGENT_VKEYS": settings.agent_vkeys}  # the sequencer checks notes
    return [
        Service(
            "sequencer",
            [
                *common,
                "sequencer",
                # Stable per host (the default): a demo run again reclaims the same
                # static group membership at once instead of waiting out the last one's.
                "--instance-id",
                f"demo-{socket.gethostname()}",
                "--gap-timeout",
                "10",
                "--batch-wait-ms",
                "20",
                "--log-key-file",
                str(key_file),
            ],
            logs / f"sequencer-{tag}.log",
            {**trusted, **agents},
        ),
        Service(
            "archiver",
            [
                *common,
                "archiver",
                "--archive",
                settings.archive_url,
                "--instance-id",
                f"demo-{socket.gethostname()}",
                "--segment-max-age",
                "2",
            ],
            logs / f"archiver-{tag}.log",
            trusted,
        ),
    ]


def _commands(settings: Settings, work_dir: Path, one: str) -> list[str]:
    """The "Inspect one run" commands, each verifying with the demo's vkey (``replay run``
    too: it re-runs only a run that verifies); the ones that read content name the demo's
    keyring (verify and export need no content key)."""
    pre = f"{_cli_name()} --prefix {settings.topic_prefix}"
    arch = f"--archive-url {settings.archive_url}"
    log_key = f"--trusted-key @{demo_vkey_file(work_dir)}"
    # the run's agent (the first run is support-agent-00's): provenance is checked too
    key = f"{log_key} --agent-key {_AGENT_ID.format(0)}=@{work_dir / 'agent.vkey'}"
    reader = pre
    if settings.key_provider == "keyring":
        reader = (
            f"env TRACEVAULT_KEY_PROVIDER=keyring TRACEVAULT_KEYRING_PATH={settings.keyring_path} "
            f"{pre}"
        )
    return [
        f"{pre} replay {arch} show {one} --from archive --metadata {key}",
        f"{pre} replay {arch} verify {one} --from archive {key}",
        f"{reader} replay {arch} show {one} --from archive {key}",
        f"{reader} replay {arch} run {one} --agent tracevault.demo:support_agent --from archive "
        f"{key}",
        f"{pre} replay {arch} export {one} -o evidence/{one} {log_key}",
        f"{pre} replay verify --bundle evidence/{one} {key}",
        f"{_cli_name()} archive ls --archive {settings.archive_url}",
    ]


def _readable(store: ObjectStore, run_id: str, events: int) -> bool:
    """The run reads back whole from the archive: its objects are written before the flush's
    checkpoint (which the index step's objects precede), and a reader counts only flushes
    a checkpoint covers. Waiting for the objects alone raced the checkpoint (docs/log.md)."""
    try:
        return len(load_archived(store, run_id).records) == events
    except TraceVaultError:
        return False
