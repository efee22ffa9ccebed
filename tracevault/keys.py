"""``tracevault keys``: make the log's, the witnesses' and bundle recipients' keys; print
their public forms.

The private key never leaves the file it is generated into (mode 0600, never overwritten);
what is printed is only the public key: the log's or a witness's verifier key (vkey), the one
thing an archiver, a verifier or a witness needs to be given (docs/log.md, "Keys"), or a
recipient's X25519 key, what an exporter needs for ``replay export --reveal-to``
(docs/confidentiality.md, "Bundles for one reader"). Above both the log and content, whose
key formats it writes.
"""

from __future__ import annotations

import base64
import binascii
import os
import sys
from pathlib import Path

import click

from tracevault._clitools import echo_json
from tracevault.content import Recipient, RecipientKey
from tracevault.errors import ConfigError
from tracevault.transparency import (
    ALG_COSIGNATURE_V1,
    ALG_ED25519,
    CosignatureSigner,
    CosignatureVerifier,
    Ed25519Signer,
    Ed25519Verifier,
    parse_vkey,
    parse_witness_vkey,
    write_private_key,
)

__all__ = ["keys"]

_TYPES = {
    "agent": "Ed25519 (0x01), signs an agent's runs",
    "log": "Ed25519 (0x01), signs checkpoints",
    "operator": "Ed25519 (0x01), signs erasure records (tracevault erase)",
    "witness": "cosignature/v1 (0x04)",
    "recipient": "X25519, reads bundles revealed to it (HPKE)",
}


#: ``keys show``'s type of an Ed25519 key: a log's and an agent's look alike
ED25519 = "ed25519"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def keys() -> None:
    """Make the log's and witnesses' signing keys and recipients' keys; print public keys.

    \b
    Five kinds of key, one role each (docs/log.md "Keys", docs/identity.md):
      log        the sequencer signs every checkpoint with it
      witness    a witness cosigns checkpoints it checked (cosignature/v1)
      agent      an agent's Recorder signs its runs' chains with it
      operator   tracevault erase signs its erasure records with it
      recipient  an auditor reads bundles exported --reveal-to its public key

    \b
    Where the printed vkey goes:
      archiver, witness   TRACEVAULT_LOG_VKEYS=<log vkey>[,<old vkey>]
      replay verify       --trusted-key <log vkey>
                          --witness-key <witness vkey> --min-witnesses 1
      replay export       --reveal-to <recipient key>
    The sequencer reads its private file: TRACEVAULT_LOG_KEY_FILE=<file>;
    a witness its own: tracevault witness run --key-file <file>; a recipient
    its own: tracevault replay show --bundle DIR --recipient-key <file>.
    An agent reads TRACEVAULT_AGENT_KEY_FILE=<file> (or TRACEVAULT_AGENT_KEY);
    the sequencer and verify list its vkey for its agent_id:
      TRACEVAULT_AGENT_VKEYS='{"<agent_id>": ["<agent vkey>"]}'
      replay verify --agent-key <agent_id>=<agent vkey>
    erase reads TRACEVAULT_OPERATOR_KEY_FILE=<file>; verify trusts
      TRACEVAULT_OPERATOR_VKEYS=<operator vkey>[,<old vkey>]

    \b
    Rotation (docs/operations.md, "Key rotation"): `tracevault keys rotate
    log.key --vkeys log.vkey` makes a new key in log.key, keeps the old one
    beside it (log.key.retired-<key id>) and lists BOTH vkeys in log.vkey;
    restart the sequencer and it signs with the new key while the archiver,
    witnesses and verify trust both. Drop the old vkey only once nothing you
    must still verify was signed with it.
    """


@keys.command()
@click.option(
    "--name",
    required=True,
    help="Key name, signed into every signature line (e.g. tv.example/log).",
)
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Private key file to create (mode 0600; an existing file is refused).",
)
@click.option(
    "--type",
    "kind",
    type=click.Choice(sorted(_TYPES)),
    default="log",
    show_default=True,
    help="log: signs checkpoints. witness: cosigns them (cosignature/v1). "
    "agent: signs an agent's runs (docs/identity.md). operator: signs erasure records "
    "(tracevault erase). recipient: reads bundles exported "
    "--reveal-to it (X25519).",
)
@click.option("--json", "as_json", is_flag=True, help="Print name, key id, vkey as JSON.")
def generate(name: str, out: Path, kind: str, as_json: bool) -> None:
    """Create a new private key file and print its public vkey.

    \b
    Example:
      tracevault keys generate --name tv.example/log --out log.key
      tracevault keys generate --type witness --name w1.example \\
          --out witness.key
      tracevault keys generate --type agent --name triage-bot.example \\
          --out agent.key
      tracevault keys generate --type operator --name dpo.example \\
          --out operator.key
      tracevault keys generate --type recipient --name auditor.example \\
          --out auditor.key
    """
    if kind == "recipient":
        key = RecipientKey.generate(name)
        write_private_key(out, key)
        _print_recipient(key.recipient, as_json, source=str(out))
        return
    signer: Ed25519Signer | CosignatureSigner
    signer = (CosignatureSigner if kind == "witness" else Ed25519Signer).generate(name)
    write_private_key(out, signer)
    _print(kind, signer.verifier, as_json, source=str(out))


@keys.command()
@click.argument("source", metavar="FILE|-")
@click.option("--json", "as_json", is_flag=True, help="Print name, key id, vkey as JSON.")
def show(source: str, as_json: bool) -> None:
    """Print the vkey of a key file ('-': read the key from stdin).

    \b
    Example:
      tracevault keys show log.key
      echo "$TRACEVAULT_LOG_KEY" | tracevault keys show -
    """
    if source == "-":
        text = sys.stdin.read()
    else:
        try:
            text = Path(source).read_text()
        except OSError as e:
            raise ConfigError(f"cannot read key file {source}: {e.strerror}") from None
    if text.strip().startswith(("RECIPIENT+", "PRIVATE+RECIPIENT+")):
        private = text.strip().startswith("PRIVATE+")
        r = RecipientKey.parse(text, source).recipient if private else Recipient.parse(text, source)
        _print_recipient(r, as_json, source=source)
        return
    kind, verifier = _parse_any(text.strip(), source)
    _print(kind, verifier, as_json, source=source)


@keys.command()
@click.argument("key_file", metavar="KEY_FILE", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--vkeys",
    "vkeys_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The trusted-vkeys file (what TRACEVAULT_LOG_VKEYS=@FILE names) to list the new "
    "vkey in, first, keeping every vkey it held and adding the old one.",
)
@click.option("--name", default=None, help="The new key's name (default: the old key's).")
@click.option("--json", "as_json", is_flag=True, help="Print the old and new keys as JSON.")
def rotate(key_file: Path, vkeys_file: Path | None, name: str | None, as_json: bool) -> None:
    """Replace a log, agent or witness key with a new one; the old stays trusted.

    A new key of the same type (and name) is generated into KEY_FILE; the old
    private key is kept beside it as KEY_FILE.retired-<old key id> (mode
    0600, never overwritten: delete it once you are sure). With --vkeys the
    trusted-vkeys file lists the new vkey first and keeps the old one, so
    what was signed before the rotation still verifies.

    \b
    Then (docs/operations.md, "Key rotation"):
      1. give every archiver, witness and verifier both vkeys
         (TRACEVAULT_LOG_VKEYS=@log.vkey, or new,old inline);
      2. restart the sequencer: it signs with the new key and resumes
         the log it signed with the old one;
      3. drop the old vkey only when nothing you must still verify
         (archive retention) was signed with it.

    \b
    Example:
      tracevault keys rotate .tracevault/log.key --vkeys .tracevault/log.vkey
    """
    try:
        text = key_file.read_text().strip()
    except OSError as e:
        raise ConfigError(f"cannot read key file {key_file}: {e.strerror}") from None
    if not text.startswith("PRIVATE+KEY+"):
        raise ConfigError(f"{key_file} holds no private log, agent or witness key to rotate")
    kind, old = _parse_any(text, str(key_file))
    cls = CosignatureSigner if kind == "witness" else Ed25519Signer
    new = cls.generate(name or old.name)
    retired = key_file.with_name(f"{key_file.name}.retired-{old.key_id.hex()}")
    staged = key_file.with_name(f"{key_file.name}.new")
    write_private_key(staged, new)  # refuses to overwrite, mode 0600
    if retired.exists():
        staged.unlink()
        raise ConfigError(f"{retired} exists; a private key is never overwritten")
    os.replace(key_file, retired)
    os.replace(staged, key_file)
    if vkeys_file is not None:
        _trust_both(vkeys_file, new.verifier.vkey, old.vkey)
    if as_json:
        echo_json(
            {
                "type": kind,
                "key_file": str(key_file),
                "retired_file": str(retired),
                "vkeys_file": str(vkeys_file) if vkeys_file is not None else None,
                "old": {"name": old.name, "key_id": old.key_id.hex(), "vkey": old.vkey},
                "new": {
                    "name": new.verifier.name,
                    "key_id": new.verifier.key_id.hex(),
                    "vkey": new.verifier.vkey,
                },
            }
        )
        return
    click.echo(new.verifier.vkey)
    click.echo(
        f"# new {kind} key {new.verifier.name} id {new.verifier.key_id.hex()} in {key_file}; "
        f"the old one (id {old.key_id.hex()}) is kept as {retired}. Trust both vkeys "
        f"(TRACEVAULT_LOG_VKEYS={new.verifier.vkey},{old.vkey}), then restart the signer.",
        err=True,
    )


def _trust_both(path: Path, new: str, old: str) -> None:
    """``path`` lists ``new`` first, then every vkey it held, then ``old`` if it was not
    there (written to a temporary file and renamed: a reader never sees half a file)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    except OSError as e:
        raise ConfigError(f"cannot read verifier keys from {path}: {e.strerror}") from None
    kept = [x.strip() for x in lines if x.strip() and x.strip() != new]
    if old not in kept:
        kept.append(old)
    tmp = path.with_name(f"{path.name}.tmp")
    tmp.write_text("\n".join([new, *kept]) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _print_recipient(r: Recipient, as_json: bool, source: str) -> None:
    if as_json:
        echo_json({"name": r.name, "key_id": r.key_id, "type": "recipient", "key": r.key})
        return
    click.echo(r.key)
    click.echo(f"# recipient key {r.name} id {r.key_id} from {source}", err=True)


def _parse_any(text: str, source: str) -> tuple[str, Ed25519Verifier | CosignatureVerifier]:
    """A private key or a vkey of either type, told apart by its type byte."""
    private = text.startswith("PRIVATE+KEY+")
    blob = text.split("+", 4 if private else 2)[-1]
    try:
        alg = base64.b64decode(blob, validate=True)[:1]
    except binascii.Error:
        raise ConfigError(f"{source} holds no key: its last field is not base64") from None
    if alg == bytes([ALG_COSIGNATURE_V1]):
        if private:
            return "witness", CosignatureSigner.from_skey(text).verifier
        return "witness", parse_witness_vkey(text)
    if alg == bytes([ALG_ED25519]):
        # A log key and an agent key are the same kind of Ed25519 key: the bytes do not say
        # which role a deployment gave it, so neither is named (docs/log.md, "Keys").
        if private:
            return ED25519, Ed25519Signer.from_skey(text).verifier
        return ED25519, parse_vkey(text)
    raise ConfigError(f"{source} holds no Ed25519 log (0x01) or witness (0x04) key")


def _print(
    kind: str, verifier: Ed25519Verifier | CosignatureVerifier, as_json: bool, source: str
) -> None:
    if as_json:
        echo_json(
            {
                "name": verifier.name,
                "key_id": verifier.key_id.hex(),
                "type": kind,
                "vkey": verifier.vkey,
            }
        )
        return
    click.echo(verifier.vkey)
    what = f"{kind} key" if kind != ED25519 else "Ed25519 key (a log, agent or operator key)"
    click.echo(f"# {what} {verifier.name} id {verifier.key_id.hex()} from {source}", err=True)
