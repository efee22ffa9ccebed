"""C2SP tlog-witness ``POST /add-checkpoint``, over real HTTP, against the spec's text.

Each status the spec (c2sp.org/tlog-witness, "add-checkpoint") names is asked for, with the
sentence that asks for it beside the assertion: 404 for an unknown origin, 403 when no
signature verifies against a trusted key, 400 for an old size above the checkpoint's, 409
``text/x.tlog.size`` with the witness's size when the old size does not match (and for
another root at the witness's size), 422 for a proof that does not verify, 200 with
cosignature lines starting with U+2014.
"""

from __future__ import annotations

import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.kafka_harness import free_port
from tests.services.sequencer.support import wait_until
from tests.witness.topiclog import post_add_checkpoint as _post
from tests.witness.topiclog import witness_process
from tracevault.archive import open_store
from tracevault.config import Settings
from tracevault.errors import NotFoundError
from tracevault.transparency import (
    Checkpoint,
    CosignatureSigner,
    Ed25519Signer,
    consistency_proof,
    leaf_hash,
    list_source,
    open_note,
    sign_note,
    tree_root,
    write_private_key,
)
from tracevault.witness._client import WitnessClient
from tracevault.witness._core import Witness, deployment_origins
from tracevault.witness._http import MAX_BODY, serve_add_checkpoint

ORIGIN = "tv.test/http/0"
LEAVES = [leaf_hash("r", i, bytes([i]) * 32) for i in range(20)]
SRC = list_source(LEAVES)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Witness, Ed25519Signer]]:
    key = Ed25519Signer.generate("tv.test/log")
    store = open_store(f"file://{tmp_path}", Settings())
    w = Witness(
        store,
        CosignatureSigner.generate("w.test"),
        [key.verifier],
        retention=timedelta(1),
        origins=deployment_origins("tv.test", "http"),  # ORIGIN is partition 0's log
    )
    server = serve_add_checkpoint(w, 0, host="127.0.0.1")
    try:
        yield f"http://127.0.0.1:{server.server_port}/add-checkpoint", w, key
    finally:
        server.shutdown()
        server.server_close()


def _note(key: Ed25519Signer, size: int, root: bytes | None = None) -> str:
    return sign_note(Checkpoint(ORIGIN, size, root or tree_root(size, SRC)).body(), [key])


def test_cosigns_over_http_and_answers_per_spec(
    served: tuple[str, Witness, Ed25519Signer],
) -> None:
    url, w, key = served
    first = _note(key, 5)
    # "The response body MUST be a sequence of one or more note signature lines, each
    # starting with the — character (U+2014) and ending with a newline character"
    code, _, body = _post(url, 0, [], first)
    assert code == 200 and body.startswith("\u2014 w.test ") and body.endswith("\n")
    # the client appends the lines to its checkpoint and opens it with the witness key
    _, good = open_note(first + body, [w.signer.verifier])
    assert good == [w.signer.verifier]

    second = _note(key, 12)
    # "If it doesn't match, the witness MUST respond with a "409 Conflict" HTTP status code.
    # The response body MUST consist of the tree size of the latest cosigned checkpoint in
    # decimal, followed by a newline (U+000A). The response MUST have a Content-Type of
    # text/x.tlog.size."
    code, ctype, body = _post(url, 3, consistency_proof(3, 12, SRC), second)
    assert (code, ctype, body) == (409, "text/x.tlog.size", "5\n")
    code, _, body = _post(url, 5, consistency_proof(5, 12, SRC), second)
    assert code == 200 and w.latest(ORIGIN) == (12, tree_root(12, SRC))

    # "If the Merkle Consistency Proof doesn't verify, the witness MUST respond with a "422
    # Unprocessable Entity" HTTP status code."
    bad = consistency_proof(12, 20, SRC)
    bad[0] = bytes(32)
    code, _, body = _post(url, 12, bad, _note(key, 20))
    assert code == 422 and "not consistent" in body
    # "If the old size matches the checkpoint size, the witness MUST check that the root
    # hashes are also identical. If they don't match, the witness MUST respond with a "409
    # Conflict"": another root for the size it cosigned; and an older size: 409, its size
    assert _post(url, 12, [], _note(key, 12, bytes(32)))[:3:2] == (409, "12\n")
    assert _post(url, 0, [], _note(key, 7))[:3:2] == (409, "12\n")
    # an old checkpoint it cosigned, with the witness's size as the old size: still 400
    assert _post(url, 12, [], first)[0] == 400
    # the same checkpoint again from its size: its cosignature again
    code, _, body = _post(url, 12, [], second)
    assert code == 200 and body.startswith("\u2014 w.test ")


def _status(req: urllib.request.Request | str) -> int:
    try:
        with urllib.request.urlopen(req, timeout=10) as res:
            return int(res.status)
    except urllib.error.HTTPError as e:
        with e:
            return e.code


def test_refuses_bad_requests(served: tuple[str, Witness, Ed25519Signer]) -> None:
    url, _w, key = served
    stranger = Ed25519Signer.generate("tv.test/log")
    # "If none of the signatures verify against a trusted public key, the witness MUST
    # respond with a "403 Forbidden" HTTP status code."
    assert _post(url, 0, [], _note(stranger, 5))[0] == 403
    # "If the checkpoint origin is unknown, the witness MUST respond with a "404 Not Found""
    # (another deployment's log, even signed by a trusted key, and before any signature)
    for origin in ("tv.test/other/0", "tv.test/http/x", "elsewhere.example/log"):
        for signer in (key, stranger):
            other = sign_note(Checkpoint(origin, 5, tree_root(5, SRC)).body(), [signer])
            assert _post(url, 0, [], other)[0] == 404
    # our client takes a 404 (ours, the spec's) as it takes litewitness's 403: an unknown log
    client = WitnessClient(url.removesuffix("/add-checkpoint"))
    with pytest.raises(NotFoundError, match="404"):
        client.cosign(other, lambda old: [])
    # "The old size MUST be equal to or lower than the checkpoint size. Otherwise, the
    # witness MUST respond with a "400 Bad Request" HTTP status code."
    assert _post(url, 9, [], _note(key, 5))[0] == 400
    for raw in (b"old x\n\n" + _note(key, 5).encode(), b"old 0\n", b"\xff\xfe\n\n"):
        assert _status(urllib.request.Request(url, data=raw, method="POST")) == 400
    big = urllib.request.Request(url, data=b"x" * (MAX_BODY + 1), method="POST")
    assert _status(big) == 413
    assert _status(url) == 405


def test_the_service_serves_add_checkpoint_and_stops_on_sigterm(tmp_path: Path) -> None:
    """``tracevault witness run --no-follow --listen-port P``: no Kafka, only the endpoint."""
    key = Ed25519Signer.generate("tv.test/log")
    wkey = CosignatureSigner.generate("w.test")
    write_private_key(tmp_path / "w.key", wkey)
    port = free_port()
    args = ["witness", "run", "--no-follow", "--listen-port", str(port)]
    args += ["--key-file", str(tmp_path / "w.key"), "--store", f"file://{tmp_path / 's'}"]
    url = f"http://127.0.0.1:{port}/add-checkpoint"
    env = {"TRACEVAULT_LOG_ORIGIN": "tv.test", "TRACEVAULT_TOPIC_PREFIX": "http"}
    with witness_process(args, TRACEVAULT_LOG_VKEYS=key.verifier.vkey, **env) as proc:
        wait_until(lambda: _up(url, proc), timeout=30, what="the witness to listen")
        note = _note(key, 4)
        code, _, body = _post(url, 0, [], note)
        assert code == 200
        _, good = open_note(note + body, [wkey.verifier])
        assert good == [wkey.verifier]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
        assert proc.returncode == 0, err


def _up(url: str, proc: subprocess.Popen[str]) -> bool:
    if proc.poll() is not None:
        raise AssertionError(f"the witness exited: {proc.communicate()[1]}")
    try:
        return _status(url) == 405
    except OSError:
        return False
