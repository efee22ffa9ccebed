"""Attacks on a bundle revealed to one recipient: the sealed data key moved, retargeted or
forged. Each must be refused (exit 7) and show no content (docs/confidentiality.md,
"Bundles for one reader")."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.content import agents
from tests.content.reveal_stack import (
    TENANT,
    Pipeline,
    cli,
    env,
    export,
    pipeline_of,
    recipient,
    rehash,
)
from tracevault.content import (
    Recipient,
    RevealedRun,
    data_key_of,
    open_key_store,
    open_provider,
    seal_for,
)
from tracevault.replayer import load_run
from tracevault.schemas import decode_event


@pytest.fixture(scope="module")
def pipeline(
    kafka_bootstrap: str, s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pipeline]:
    yield from pipeline_of(kafka_bootstrap, s3_endpoint, tmp_path_factory)


def _show(p: Pipeline, bundle: Path, key: Path) -> object:
    res = cli(env(p, key=False), "replay", "show", "--bundle", str(bundle), "--recipient-key",
              str(key), "--json")  # fmt: skip
    return res


def _refused(res: object) -> None:
    code, output = res.exit_code, res.output  # type: ignore[attr-defined]
    assert code == 7, output
    assert not any(s in output for s in agents.SECRETS), output


def test_a_sealed_key_moved_to_another_runs_bundle_does_not_open(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    key, _, a, doc = _revealed(pipeline, tmp_path)
    b = tmp_path / "b"
    export(pipeline, pipeline.runs[1], b)  # ciphertext only: no key for run 2 was revealed
    assert _show(pipeline, a, key).exit_code == 0  # type: ignore[attr-defined]
    _put(b, doc)  # moved as it is: it holds no key for run 2
    _refused(_show(pipeline, b, key))
    doc["keys"][0]["run_id"] = pipeline.runs[1]  # and relabelled as run 2's key
    _put(b, doc)
    _refused(_show(pipeline, b, key))


def _revealed(p: Pipeline, tmp: Path) -> tuple[Path, str, Path, dict[str, Any]]:
    """Run 1 exported revealed to a fresh recipient: its key file, public key, the bundle
    and its reveal.json."""
    key, public = recipient(tmp, "auditor.example")
    bundle = tmp / "a"
    export(p, p.runs[0], bundle, "--reveal-to", public)
    return key, public, bundle, json.loads((bundle / "reveal.json").read_bytes())


def _put(bundle: Path, doc: dict[str, Any]) -> None:
    (bundle / "reveal.json").write_text(json.dumps(doc))
    rehash(bundle, "reveal.json")


def _real_data_key(p: Pipeline) -> bytes:
    """Run 1's true data key, unwrapped through the tenant's KMS grant as an exporter does."""
    rows = load_run(p.settings, p.runs[0], source="archive").records.rows
    events = [decode_event(r["raw"]) for r in rows]
    key = data_key_of(events, open_provider(p.settings), TENANT, open_key_store(p.settings))
    assert key is not None
    return key


def test_the_true_key_sealed_for_another_chain_does_not_open(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    """The run's real data key, sealed for the recipient but bound to another head and last
    seq (another export of the run, or a longer chain): refused. Bound to this bundle's own
    chain, the same key opens: what is checked is the binding, nothing else."""
    key, public, bundle, doc = _revealed(pipeline, tmp_path)
    entry, r, true_key = doc["keys"][0], Recipient.parse(public), _real_data_key(pipeline)
    for head, last_seq in (("00" * 32, entry["last_seq"]), (entry["head"], 99)):
        other = RevealedRun(pipeline.runs[0], pipeline.runs[0], head, last_seq)
        entry["sealed"] = base64.b64encode(seal_for(r, true_key, other)).decode()
        entry["head"], entry["last_seq"] = head, last_seq  # and reveal.json says so
        _put(bundle, doc)
        _refused(_show(pipeline, bundle, key))
    right = RevealedRun(pipeline.runs[0], pipeline.runs[0], *_identity(bundle))
    entry["sealed"] = base64.b64encode(seal_for(r, true_key, right)).decode()
    _put(bundle, doc)
    assert _show(pipeline, bundle, key).exit_code == 0  # type: ignore[attr-defined]


def _identity(bundle: Path) -> tuple[str, int]:
    manifest = json.loads((bundle / "manifest.json").read_bytes())
    return str(manifest["head"]), int(manifest["last_seq"])


def test_a_key_forged_for_the_recipient_does_not_open_the_content(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    """Anyone can seal to a public key: a forger's data key, bound to the right bundle, still
    opens no field, since the ciphertext was made under the run's own key."""
    key, public, bundle, doc = _revealed(pipeline, tmp_path)
    right = RevealedRun(pipeline.runs[0], pipeline.runs[0], *_identity(bundle))
    forged = seal_for(Recipient.parse(public), os.urandom(32), right)
    doc["keys"][0]["sealed"] = base64.b64encode(forged).decode()
    _put(bundle, doc)
    res = _show(pipeline, bundle, key)
    _refused(res)
    assert "does not decrypt" in res.output  # type: ignore[attr-defined]


def test_a_reveal_retargeted_to_another_recipient_does_not_open(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    """reveal.json edited to name Eve: her key id matches, HPKE still refuses her key."""
    _, _, bundle, doc = _revealed(pipeline, tmp_path)
    eve, eve_public = recipient(tmp_path, "eve")
    r = Recipient.parse(eve_public)
    doc["recipient"] = {"name": r.name, "key_id": r.key_id, "key": r.key}
    _put(bundle, doc)
    _refused(_show(pipeline, bundle, eve))


def test_an_edited_reveal_fails_verify_bundle(pipeline: Pipeline, tmp_path: Path) -> None:
    """reveal.json is a bundle file like any: changed without the manifest, B1 fails."""
    _, _, a, _ = _revealed(pipeline, tmp_path)
    (a / "reveal.json").write_text((a / "reveal.json").read_text().replace("auditor", "audit0r"))
    res = cli(env(pipeline, key=False), "replay", "verify", "--bundle", str(a))
    assert res.exit_code == 1 and "reveal.json" in res.output, res.output
