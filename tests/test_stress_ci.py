"""dev/stress-ci's process handling, with a dummy CI command (STRESS_CI_COMMAND) in place of
.ci/run: the burners run while CI runs, die when it ends however it ends, and the exit code is
CI's (docs/design.md, "Real services in tests")."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "dev" / "stress-ci"


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie is dead: its burning is over)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _wait(cond: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    tick = threading.Event()
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        tick.wait(0.05)


def _burners(out: str) -> list[int]:
    m = re.search(r"pids ([0-9 ]+)\)", out)
    assert m, out
    return [int(p) for p in m.group(1).split()]


def _run(command: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STRESS_CI_COMMAND": command, "STRESS_CI_BURNERS": "2"}
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_script_parses() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_burners_run_beside_ci_and_die_with_it_and_the_exit_code_is_cis() -> None:
    # the dummy CI fails (exit 99) unless every burner is running while it runs
    check = 'for p in $STRESS_CI_BURNER_PIDS; do kill -0 "$p" || exit 99; done; echo "args:$*"'
    done = _run(check + "; exit 7", "-x", "tests/a b.py")
    assert done.returncode == 7, done.stdout + done.stderr
    assert "args:-x tests/a b.py" in done.stdout  # arguments reach CI whole
    pids = _burners(done.stdout)
    assert len(pids) == 2
    assert not [p for p in pids if _alive(p)], "a burner outlived CI"
    assert re.search(r"CI exited 7 after \d+m\d\ds; load average [0-9.]+ ", done.stdout)
    assert _run(check).returncode == 0


def test_stopping_the_script_stops_ci_and_the_burners(tmp_path: Path) -> None:
    pidfile = tmp_path / "ci.pid"
    env = {
        **os.environ,
        "STRESS_CI_COMMAND": f"echo $$ > {pidfile}; exec sleep 300",
        "STRESS_CI_BURNERS": "2",
    }
    proc = subprocess.Popen(
        ["bash", str(SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        _wait(lambda: pidfile.is_file() and pidfile.read_text().strip() != "", "CI to start")
        ci = int(pidfile.read_text())
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, out
    _wait(lambda: not _alive(ci), "the CI command to be stopped")
    pids = _burners(out)
    assert not [p for p in pids if _alive(p)], "a burner outlived stress-ci"


AUTOGROUP = Path("/proc/sys/kernel/sched_autogroup_enabled")


def test_autogroup_is_off_while_ci_runs_and_restored_after() -> None:
    # With autogroup on, setsid gives CI a scheduling group of its own and nice no longer
    # ranks it against the burners as an equal: the script turns it off for the run
    assert AUTOGROUP.exists(), "this kernel has no sched_autogroup: the test cannot run here"
    assert os.geteuid() == 0, "the script turns autogroup off as root; run this as root"
    was = AUTOGROUP.read_text().strip()
    try:
        AUTOGROUP.write_text("1")
        done = _run(f'test "$(cat {AUTOGROUP})" = 0 || exit 98')
        assert done.returncode == 0, done.stdout + done.stderr
        assert "sched_autogroup turned off for this run" in done.stdout
        assert AUTOGROUP.read_text().strip() == "1", "autogroup was not restored at exit"
    finally:
        AUTOGROUP.write_text(was)
