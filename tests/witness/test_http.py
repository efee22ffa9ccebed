"""C2SP tlog-witness ``POST /add-checkpoint``, over real HTTP, against the witness's rules."""

from __future__ import annotations

import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.consumer.sequencer.support import wait_until
from tests.kafka_harness import free_port
from tests.witness.topiclog import post_add_checkpoint as _post
from tests.witness.topiclog import witness_process
from tracevault.archive import open_store
from tracevault.config import Settings
from tracevault.log import (
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
from tracevault.witness._core import Witness
from tracevault.witness._http import MAX_BODY, serve_add_checkpoint

ORIGIN = "tv.test/http/0"
LEAVES = [leaf_hash("r", i, bytes([i]) * 32) for i in range(20)]
SRC = list_source(LEAVES)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Witness, Ed25519Signer]]:
    key = Ed25519Signer.generate("tv.test/log")
    store = open_store(f"file://{tmp_path}", Settings())
    w = Witness(store, CosignatureSigner.generate("w.test"), [key.verifier], retention=timedelta(1))
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
    code, _, body = _post(url, 0, [], first)
    assert code == 200 and body.startswith("\u2014 w.test ")
    # the client appends the lines to its checkpoint and opens it with the witness key
    _, good = open_note(first + body, [w.signer.verifier])
    assert good == [w.signer.verifier]

    second = _note(key, 12)
    code, ctype, body = _post(url, 3, consistency_proof(3, 12, SRC), second)
    assert (code, ctype, body) == (409, "text/x.tlog.size", "5\n")
    code, _, body = _post(url, 5, consistency_proof(5, 12, SRC), second)
    assert code == 200 and w.latest(ORIGIN) == (12, tree_root(12, SRC))

    bad = consistency_proof(12, 20, SRC)
    bad[0] = bytes(32)
    code, _, body = _post(url, 12, bad, _note(key, 20))
    assert code == 422 and "not consistent" in body
    # another root for the size it cosigned, and an older size: 409 with its size
    assert _post(url, 12, [], _note(key, 12, bytes(32)))[:3:2] == (409, "12\n")
    assert _post(url, 0, [], _note(key, 7))[:3:2] == (409, "12\n")
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
    assert _post(url, 0, [], _note(stranger, 5))[0] == 403
    assert _post(url, 9, [], _note(key, 5))[0] == 400  # old size above the checkpoint's
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
    with witness_process(args, TRACEVAULT_LOG_VKEYS=key.verifier.vkey) as proc:
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
