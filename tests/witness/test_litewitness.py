"""Interop with an independent C2SP tlog-witness: litewitness (Go module filippo.io/torchwood).

A witness we did not write cosigns our live log and our verifier accepts its cosignature:

- litewitness v0.6.1 and witnessctl are built with the Go toolchain from the module proxy
  (``go install``), once per version into a temporary directory (Go's build cache makes a
  rebuild cheap); Go missing is a failure, not a skip;
- its key is an Ed25519 key held by a dedicated ssh-agent, its state an SQLite database
  where ``witnessctl`` registers our partition log's origin and our log vkey;
- the real Recorder, Sequencer (shared broker) and archiver make the log;
  ``tracevault witness push`` submits the newest archived checkpoint over
  ``add-checkpoint``, the second time with a consistency proof from the size litewitness
  answered with (409), and keeps its cosignature in a witness store;
- ``replay verify --witness-key <the vkey litewitness printed> --min-witnesses 1`` passes,
  and fails with another witness key.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.kafka_harness import free_port
from tests.replayer import agents
from tests.replayer.pipeline import fresh_settings, record_live, sequencer_running, wait_sealed
from tests.transparency.signed_sealed import cli_env
from tracevault.archive import open_store
from tracevault.cli import tracevault as main
from tracevault.config import Settings
from tracevault.errors import NotFoundError
from tracevault.kafka import sealed_generation
from tracevault.transparency import (
    EMPTY_ROOT,
    Checkpoint,
    CosignatureSigner,
    Ed25519Signer,
    log_origin,
    sign_note,
)
from tracevault.witness import cosigned_sizes
from tracevault.witness._client import WitnessClient

VERSION = "v0.6.1"
NAME = "lw.test/witness"


def _go() -> str:
    go = shutil.which("go") or (
        "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None
    )
    if go is None:
        pytest.fail("the Go toolchain is not installed: the litewitness test needs `go` on PATH")
    return go


@pytest.fixture(scope="module")
def litewitness_bin() -> Path:
    """``litewitness`` and ``witnessctl`` of torchwood VERSION, built once per version."""
    out = Path(tempfile.gettempdir()) / f"tracevault-litewitness-{VERSION}"
    bins = out / "bin"
    if not ((bins / "litewitness").exists() and (bins / "witnessctl").exists()):
        tmp = out / f"bin.{os.getpid()}"
        env = {**os.environ, "GOBIN": str(tmp), "GOFLAGS": "-buildvcs=false"}
        subprocess.run(
            [_go(), "install", *(f"filippo.io/torchwood/cmd/{c}@{VERSION}"
                                 for c in ("litewitness", "witnessctl"))],
            env=env, check=True, timeout=1200, cwd=tempfile.gettempdir(),
        )  # fmt: skip
        out.mkdir(parents=True, exist_ok=True)
        if bins.exists():
            shutil.rmtree(tmp)  # another build won the race
        else:
            tmp.replace(bins)
    return bins


def _wait(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    tick = threading.Event()
    while not cond():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        tick.wait(0.1)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class Litewitness:
    """litewitness on a free port, its key in a dedicated ssh-agent, its db in ``base``."""

    def __init__(self, bins: Path, base: Path) -> None:
        self.bins, self.base = bins, base
        self.db = base / "litewitness.db"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.vkey = ""
        self._procs: list[subprocess.Popen[bytes]] = []

    def ctl(self, *args: str) -> str:
        res = subprocess.run([str(self.bins / "witnessctl"), *args], capture_output=True,
                             text=True, timeout=30, check=False)  # fmt: skip
        assert res.returncode == 0, res.stderr
        return res.stdout

    def add_log(self, origin: str, log_vkey: str) -> None:
        self.ctl("add-log", "-db", str(self.db), "-origin", origin)
        self.ctl("add-key", "-db", str(self.db), "-origin", origin, "-key", log_vkey)

    def start(self) -> None:
        key = self.base / "witness_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                       check=True, timeout=30)  # fmt: skip
        shown = subprocess.run(["ssh-keygen", "-l", "-f", str(key) + ".pub"], check=True,
                               capture_output=True, text=True, timeout=30)  # fmt: skip
        fp = shown.stdout.split()[1]  # SHA256:...
        sock = Path(tempfile.mkdtemp(prefix="lw")) / "s"  # a socket path is short
        agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        self._procs.append(agent)
        _wait(sock.exists, 10, "ssh-agent's socket")
        subprocess.run(["ssh-add", str(key)], env={**os.environ, "SSH_AUTH_SOCK": str(sock)},
                       check=True, capture_output=True, timeout=30)  # fmt: skip
        self.log_file = (self.base / "litewitness.log").open("wb")
        proc = subprocess.Popen(
            [str(self.bins / "litewitness"), "-db", str(self.db), "-name", NAME, "-key", fp,
             "-ssh-agent", str(sock), "-listen", f"127.0.0.1:{self.port}"],
            stdout=self.log_file, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self._procs.append(proc)

        def up() -> bool:
            assert proc.poll() is None, f"litewitness exited: {self.output()}"
            found = re.search(r"vkey=(\S+)", self.output())
            if found and _listening(self.port):
                self.vkey = found.group(1).strip('"')
                return True
            return False

        _wait(up, 30, "litewitness to listen")

    def output(self) -> str:
        return (self.base / "litewitness.log").read_text(errors="replace")

    def stop(self) -> None:
        for p in reversed(self._procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(10)
        if hasattr(self, "log_file"):
            self.log_file.close()


@pytest.fixture
def litewitness(litewitness_bin: Path, tmp_path: Path) -> Iterator[Litewitness]:
    lw = Litewitness(litewitness_bin, tmp_path)
    try:
        yield lw
    finally:
        lw.stop()


def _cli(settings: Settings, *args: str) -> Any:
    return CliRunner().invoke(main, list(args), env=cli_env(settings))


def test_litewitness_cosigns_our_live_log_and_verify_accepts_it(
    kafka_bootstrap: str, tmp_path: Path, log_signer: Ed25519Signer, litewitness: Litewitness
) -> None:
    settings = fresh_settings(kafka_bootstrap, tmp_path, "litew", partitions=1)
    vkey = log_signer.verifier.vkey
    gen = sealed_generation(settings)
    origin = log_origin(settings.log_origin, settings.topic_prefix, 0, gen)
    litewitness.add_log(origin, vkey)
    litewitness.start()
    store_url = f"file://{tmp_path / 'lw-store'}"
    push = ["--prefix", settings.topic_prefix, "witness", "push", "--archive",
            settings.archive_url, "--witness-url", litewitness.url, "--witness-key",
            litewitness.vkey, "--store", store_url, "--log-vkey", vkey, "--partition", "0",
            "--generation", gen]  # fmt: skip
    archive = ["--bootstrap-servers", settings.bootstrap_servers, "--prefix",
               settings.topic_prefix, "archiver", "--archive", settings.archive_url,
               "--until-idle", "2", "--trusted-key", vkey]  # fmt: skip
    store = open_store(store_url, settings)

    with sequencer_running(settings):
        for run_id in ("lw-a", "lw-b"):
            record_live(settings, agents.research_agent, agents.INPUT, run_id)
            wait_sealed(settings, run_id)
            res = _cli(settings, *archive)
            assert res.exit_code == 0, res.output
            # a fresh client each time: litewitness answers 409 with its size, the client
            # proves from there (the second push), litewitness checks it and cosigns
            res = _cli(settings, *push)
            assert res.exit_code == 0, f"{res.output}\n{litewitness.output()}"
    sizes = cosigned_sizes(store, origin)
    assert len(sizes) == 2 and sizes[0] < sizes[1], sizes
    listed = litewitness.ctl("list-logs", "-db", str(litewitness.db))
    logs = [json.loads(line) for line in listed.splitlines()]
    assert [(d["origin"], d["size"]) for d in logs] == [(origin, sizes[1])]

    def verify(run_id: str, witness_key: str) -> Any:
        return _cli(settings, "replay", "--archive-url", settings.archive_url, "verify", run_id,
                    "--from", "archive", "--json", "--trusted-key", vkey, "--witness-key",
                    witness_key, "--witness-store", store_url, "--min-witnesses", "1")  # fmt: skip

    for run_id in ("lw-a", "lw-b"):
        res = verify(run_id, litewitness.vkey)
        assert res.exit_code == 0, res.output
        out = json.loads(res.output)
        assert out["log_checked"] is True and out["checkpoint"].startswith(origin)
    # the cosignature is what passed: another witness key finds none it trusts
    res = verify("lw-a", CosignatureSigner.generate(NAME).verifier.vkey)
    assert res.exit_code == 1 and "0 trusted witness cosignature" in res.output, res.output

    # a partition with nothing archived is skipped, said so, not an error
    i = push.index("--partition")
    res = _cli(settings, *push[:i], "--partition", "1", *push[i + 2 :])
    assert res.exit_code == 0 and "nothing archived" in res.output, res.output
    # a log litewitness does not know (another deployment's origin): 403 or 404, told so
    other = log_origin(settings.log_origin, settings.topic_prefix + "x", 0, gen)
    note = sign_note(Checkpoint(other, 0, EMPTY_ROOT).body(), [log_signer])
    with pytest.raises(NotFoundError, match="does not witness"):
        WitnessClient(litewitness.url).cosign(note, lambda old: [])
