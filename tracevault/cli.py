"""The ``tracevault`` command: one click group that mounts each component's commands.

Component commands live beside their component (``tracevault/<component>/commands.py``) and
are imported only when invoked, so ``tracevault --help`` stays fast and a missing optional
dependency of one command cannot break the others. Errors: the CLI catches only
:class:`TraceVaultError` and exits with its ``exit_code``; the codes are listed in
``tracevault/errors.py`` and docs/design.md ("Service boundaries and errors").
"""

from __future__ import annotations

import difflib
import faulthandler
import importlib
import logging
import signal
import sys
from typing import Any, NoReturn

import click

from tracevault import __version__
from tracevault.errors import TraceVaultError

__all__ = ["main", "tracevault"]

# name -> "module:attribute" of a click command or group, loaded on first use.
_COMMANDS: dict[str, tuple[str, str]] = {
    "topics": ("tracevault.kafka.commands:topics", "create and describe the four Kafka topics"),
    "spool": (
        "tracevault.producer.commands:spool",
        "see and drain events spooled while Kafka was away",
    ),
    "sequencer": (
        "tracevault.services.sequencer.commands:sequencer",
        "seal raw events into per-run hash chains, exactly once (service)",
    ),
    "archiver": ("tracevault.services.archiver.commands:archiver", "archive sealed runs (service)"),
    "archive": ("tracevault.index.commands:archive", "list, hold, purge archived runs"),
    "index": (
        "tracevault.index.commands:index",
        "build and catch up the investigator's index of archived runs",
    ),
    "search": (
        "tracevault.replayer.search:search_cmd",
        "find archived runs by agent, time, tool, status; SQL; --verify",
    ),
    "replay": ("tracevault.replayer.commands:replay", "show, verify, re-run, diff, export runs"),
    "demo": ("tracevault.demo.commands:demo", "record, seal, archive, replay a demo fleet"),
    "erase": (
        "tracevault.replayer.erase:erase",
        "destroy the keys of a run's, subject's or tenant's content; record it",
    ),
    "report": (
        "tracevault.desk.commands:report",
        "runs as one HTML file that re-verifies itself in a browser",
    ),
    "incident": (
        "tracevault.desk.incident_commands:incident",
        "package runs' reports and bundles for a serious-incident report, signed",
    ),
    "ui": ("tracevault.desk.serve:ui", "the investigator's desk: runs, a run, a diff (web, local)"),
    "doctor": ("tracevault.doctor.commands:doctor", "check broker, topics, archive, lag"),
    "keys": ("tracevault.keys:keys", "make log, witness and recipient keys; print public keys"),
    "witness": (
        "tracevault.services.witness.commands:witness",
        "check and cosign each partition log's checkpoints (service)",
    ),
}


#: Subcommands people type at the top level, and the command that has them: an unknown
#: command names it (``tracevault export`` -> ``tracevault replay export``).
_NESTED: dict[str, tuple[str, ...]] = {
    **{c: ("replay",) for c in ("show", "verify", "run", "diff", "export", "batch")},
    **{c: ("archive",) for c in ("ls", "hold", "release", "purge", "retention-report")},
    **{c: ("topics",) for c in ("create", "describe", "acls")},
    **{c: ("keys",) for c in ("generate", "rotate")},
    "drain": ("spool",),
    "status": ("spool", "witness"),
    "push": ("witness",),
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in _COMMANDS:
            parents = _NESTED.get(name)
            if parents:
                means = " or ".join(f"'tracevault {p} {name}'" for p in parents)
                ctx.fail(f"No such command {name!r}. Did you mean {means}?")
            close = difflib.get_close_matches(name, list(_COMMANDS), n=2)
            if close:
                ctx.fail(f"No such command {name!r}. Did you mean {' or '.join(close)}?")
        return super().resolve_command(ctx, args)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, _, attr = target[0].partition(":")
        cmd = getattr(importlib.import_module(module), attr)
        if not isinstance(cmd, click.Command):
            raise TypeError(f"{target[0]} is not a click command")
        return cmd

    def invoke(self, ctx: click.Context) -> Any:
        # Mapping errors here (not only in main) makes click's CliRunner see real exit codes.
        try:
            return super().invoke(ctx)
        except TraceVaultError as exc:
            click.secho(f"error: {exc}", fg="red", err=True)
            raise click.exceptions.Exit(exc.exit_code) from exc

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Short help from the table above, so --help does not import every component.
        rows = [(name, _COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--bootstrap-servers",
    envvar="TRACEVAULT_BOOTSTRAP_SERVERS",
    help="Kafka bootstrap servers [env TRACEVAULT_BOOTSTRAP_SERVERS; default 127.0.0.1:9092].",
)
@click.option(
    "--prefix",
    "topic_prefix",
    envvar="TRACEVAULT_TOPIC_PREFIX",
    help="Topic prefix: topics are <prefix>.raw/.sealed/.heads/.dlq [default agent-traces].",
)
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.version_option(__version__, prog_name="tracevault")
@click.pass_context
def tracevault(
    ctx: click.Context, bootstrap_servers: str | None, topic_prefix: str | None, verbose: int
) -> None:
    """Record AI-agent runs as a tamper-evident log on Kafka, archive them for at least six
    months, and replay any run deterministically.

    \b
    Typical session:
      dev/kafka start                      # a local broker, if you have none
      tracevault topics create             # the four topics
      tracevault keys generate --name log.example --out log.key
      export TRACEVAULT_LOG_KEY_FILE=$PWD/log.key      # the sequencer signs
      export TRACEVAULT_LOG_VKEYS=$(tracevault keys show log.key)  # others check
      tracevault keys generate --type agent --name agents.example --out agent.key
      export TRACEVAULT_AGENT_KEY_FILE=$PWD/agent.key  # agents sign their runs
      printf '{"*": ["%s"]}' "$(tracevault keys show agent.key)" >agents.json
      export TRACEVAULT_AGENT_VKEYS=@$PWD/agents.json  # who may record
      tracevault sequencer &               # chain and sign runs, exactly once
      tracevault archiver &                # the signed log as tiles, locked
      tracevault replay verify RUN_ID --from archive

    Settings can also come from TRACEVAULT_<SETTING> variables (--prefix is
    TRACEVAULT_TOPIC_PREFIX); a flag wins over the variable.

    \b
    Exit codes (every command):
      0  ok
      1  verification failure or divergence (chain, receipts, re-run, checks)
      2  usage error: bad flags, settings or input
      3  not found, or Kafka / the object store did not answer
      4  archive inconsistent or unwritable: an operator must repair it
      5  fenced: another instance with the same --instance-id took over
      6  refused by retention: a lock or legal hold protects the objects
      7  no content key: the run's tenant key is not granted here, or was erased
    """
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ctx.ensure_object(dict)
    ctx.obj["settings_overrides"] = {
        "bootstrap_servers": bootstrap_servers,
        "topic_prefix": topic_prefix,
    }


def main(argv: list[str] | None = None) -> NoReturn:
    """Console-script and ``python -m tracevault`` entry point: always exits with the code.

    With ``standalone_mode=False`` click *returns* the code of an explicit exit (``ctx.exit(1)``,
    and every TraceVaultError mapped in ``_LazyGroup.invoke``) instead of exiting; a caller that
    dropped the return value, as ``python -m tracevault`` did, exited 0 on every failure.
    """
    # SIGUSR1 prints every thread's stack to stderr, from C, even with the GIL held: how an
    # operator (or a test) sees where a service that does not stop is waiting
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        rv = tracevault.main(args=argv, prog_name="tracevault", standalone_mode=False)
    except TraceVaultError as exc:
        click.secho(f"error: {exc}", fg="red", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    sys.exit(rv if isinstance(rv, int) else 0)
