"""A real local Dask cluster for the batch-replay tests and benchmark: `dask scheduler` and
`dask worker` as subprocesses on loopback, exactly as an operator starts one.

The workers run with the repository root as working directory and on PYTHONPATH, so the
test agents (``tests.replayer.agents``) import there as any agent module must, and with no
AWS credentials of their own (and no instance metadata lookups), so a test can tell whether
credentials travelled with the job.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.kafka_harness import free_port

ROOT = Path(__file__).resolve().parents[2]
_NO_AWS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")


def worker_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _NO_AWS}
    env.update(
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        AWS_CONFIG_FILE=os.devnull,
        AWS_EC2_METADATA_DISABLED="true",  # never ask 169.254.169.254 for a role
        # a task whose worker dies is given up at once (default: after 3 more deaths), so a
        # test that kills a worker costs one restart, not four
        DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES="0",
    )
    return env


@dataclass
class LocalDaskCluster:
    """One scheduler and ``workers`` single-threaded worker processes under one nanny."""

    workers: int = 2
    log_dir: Path = field(default_factory=lambda: Path("."))
    port: int = field(default_factory=free_port)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def _spawn(self, name: str, *args: str) -> None:
        with (self.log_dir / f"dask-{name}.log").open("wb") as log:  # the child keeps its copy
            proc = subprocess.Popen(
                [sys.executable, "-m", "dask", *args],
                cwd=ROOT, env=worker_env(), stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        self.procs.append(proc)

    def start(self, timeout: float = 90.0) -> None:
        self._spawn("scheduler", "scheduler", "--host", "127.0.0.1", "--port", str(self.port),
                    "--no-dashboard")  # fmt: skip
        self._spawn("worker", "worker", self.address, "--host", "127.0.0.1",
                    "--nworkers", str(self.workers), "--nthreads", "1", "--no-dashboard",
                    "--memory-limit", "0")  # fmt: skip
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float) -> None:
        from distributed import Client

        deadline = time.monotonic() + timeout
        for proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"a dask process exited with {proc.returncode}: {self.logs()}")
        client = Client(self.address, timeout=timeout, set_as_default=False)
        try:
            client.wait_for_workers(self.workers, timeout=max(1.0, deadline - time.monotonic()))
        finally:
            client.close()

    def logs(self) -> str:
        return "\n".join(
            p.read_text(errors="replace")[-2000:] for p in sorted(self.log_dir.glob("dask-*.log"))
        )

    def stop(self) -> None:
        # workers first, so they do not spend their timeout looking for the scheduler
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                done = threading.Event()
                deadline = time.monotonic() + 20
                while proc.poll() is None and time.monotonic() < deadline:
                    done.wait(0.1)
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)
        self.procs.clear()
