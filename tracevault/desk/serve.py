"""``tracevault ui``: the desk served locally, on loopback unless a token guards it."""

from __future__ import annotations

import ipaddress

import click

from tracevault._clitools import settings_from, stderr
from tracevault.desk.access import AccessLog
from tracevault.desk.app import DeskConfig, make_app
from tracevault.desk.commands import AGENT_KEY, OFFLINE
from tracevault.errors import ConfigError
from tracevault.producer import Publisher
from tracevault.replayer import Trust

__all__ = ["is_loopback", "ui"]


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1); a name is not resolved."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@click.command("ui")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind. Any non-loopback address needs --token.",
)
@click.option("--port", default=8700, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--token",
    envvar="TRACEVAULT_UI_TOKEN",
    help="A secret every request must carry (Authorization: Bearer TOKEN, or the "
    "login form's cookie) [env TRACEVAULT_UI_TOKEN].",
)
@click.option(
    "--archive-url",
    envvar="TRACEVAULT_ARCHIVE_URL",
    help="file://PATH or s3://BUCKET/PREFIX [env TRACEVAULT_ARCHIVE_URL].",
)
@click.option(
    "--s3-endpoint-url",
    envvar="TRACEVAULT_S3_ENDPOINT_URL",
    help="S3 endpoint for MinIO or another S3-compatible store.",
)
@click.option(
    "--trusted-key",
    "trusted_keys",
    multiple=True,
    metavar="VKEY|@FILE",
    help="A log key to trust (repeatable; adds to TRACEVAULT_LOG_VKEYS).",
)
@click.option(
    "--allow-unfinished",
    is_flag=True,
    help="Accept runs still in progress (no RUN_FINISHED yet) as verified.",
)
@AGENT_KEY
@OFFLINE
@click.pass_context
def ui(
    ctx: click.Context,
    /,
    *,
    host: str,
    port: int,
    token: str | None,
    archive_url: str | None,
    s3_endpoint_url: str | None,
    trusted_keys: tuple[str, ...],
    allow_unfinished: bool,
    agent_key_pairs: tuple[str, ...],
    offline: bool,
) -> None:
    """Serve the investigator's desk: runs, a run's timeline, a diff of two runs.

    Every run is verified as `replay verify` does (freshness, signed log, chain, then who
    wrote it: provenance with --agent-key or TRACEVAULT_AGENT_VKEYS) before it is shown, and
    its status sits at the top of its page in words. Binds to 127.0.0.1; any other address is
    refused (exit 2) unless --token or TRACEVAULT_UI_TOKEN is set, which every request
    must then carry. To put it behind a team's SSO, run it on loopback behind the
    proxy, or give the proxy the token to send (docs/desk.md, "Behind an SSO proxy").
    Every opening of content (a payload, a diff's values) is recorded as an access
    event in the signed log, published to Kafka like any run (spooled when it is away).

    \b
    Examples:
      tracevault ui --trusted-key @log.vkey          # http://127.0.0.1:8700
      TRACEVAULT_UI_TOKEN=$(openssl rand -hex 32) tracevault ui --host 0.0.0.0
    """
    settings = settings_from(ctx, archive_url=archive_url, s3_endpoint_url=s3_endpoint_url)
    if token is None and settings.ui_token is not None:
        token = settings.ui_token.get_secret_value()
    if not is_loopback(host) and not token:
        raise ConfigError(
            f"--host {host} is not a loopback address: refusing to serve evidence on it "
            "without authentication; give --token (or TRACEVAULT_UI_TOKEN), or bind 127.0.0.1"
        )
    if token is not None and len(token) < 16:
        raise ConfigError("--token is shorter than 16 characters: use a long random secret")
    trust = Trust.of(
        settings,
        trusted_keys=trusted_keys,
        agent_key_pairs=agent_key_pairs,
        allow_unfinished=allow_unfinished,
        offline=offline,
    )
    if trust.policy is None:
        stderr.print("[yellow]no trusted log key: every run will show UNVERIFIED[/]")
    if not trust.agents:
        stderr.print("[yellow]no trusted agent vkey: every run will show UNVERIFIED[/]")
    import uvicorn  # noqa: PLC0415 - only the server needs it

    # Every opening of content is an access event, published like any run's events
    # (spooled when Kafka is away); what is left is delivered or spooled on the way out.
    publisher = Publisher(settings)
    try:
        access = AccessLog(publisher)
        app = make_app(DeskConfig(settings, trust, token, access=access))
        stderr.print(f"tracevault desk on http://{host}:{port}/")
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        publisher.close()
