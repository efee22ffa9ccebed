"""KMS calls are bounded in time, and a tenant's alias is resolved again (docs/confidentiality.md,
"Key providers").

A KMS that accepts connections and never answers is a local socket that does exactly that:
``Recorder()`` (a run's start: DescribeKey, GenerateDataKey) gives up within
``kms_max_attempts x (kms_connect_timeout_s + kms_read_timeout_s)`` plus botocore's backoff
(at most 1 s before the one retry), naming the endpoint; before, botocore's 60 s read timeout
x 3 attempts held the agent for ~3 minutes. A tenant key re-created under its alias (moto's
KMS server over HTTP) is used by the next run of the same process, without a restart.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import boto3
import pytest

from tests.services.sequencer.support import read_all
from tracevault.config import Settings
from tracevault.content import KmsProvider, open_provider
from tracevault.errors import ServiceUnavailableError
from tracevault.producer import Publisher, Recorder

CONNECT, READ, ATTEMPTS = 0.5, 1.0, 2
#: the documented worst case: attempts x (connect + read) + the backoff before the retry
BOUND = ATTEMPTS * (CONNECT + READ) + 1.0


@contextlib.contextmanager
def hanging_kms() -> Iterator[str]:
    """An HTTP endpoint that accepts every connection, reads the request, never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)  # kept open, never written to

    thread = threading.Thread(target=accept, name="hanging-kms", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


def test_a_hanging_kms_fails_a_runs_start_within_the_bound(
    settings_factory: Callable[..., Settings], s3_endpoint: str
) -> None:
    del s3_endpoint  # its fixture gives boto3 the test credentials: the request is signed
    with hanging_kms() as endpoint:
        settings = settings_factory(
            partitions=1, key_provider="kms", kms_endpoint_url=endpoint,
            kms_connect_timeout_s=CONNECT, kms_read_timeout_s=READ, kms_max_attempts=ATTEMPTS,
        )  # fmt: skip
        publisher = Publisher(settings)
        started = time.monotonic()
        try:
            with pytest.raises(ServiceUnavailableError) as err:
                Recorder(publisher=publisher, agent_id="a", agent_version="1", run_id="hung")
            took = time.monotonic() - started
        finally:
            publisher.close(timeout=5)
    assert f"KMS at {endpoint} did not answer" in str(err.value), err.value
    assert "timeout" in str(err.value).lower(), err.value
    # it did wait for KMS (one read timeout at least), and gave up within the bound; the
    # margin is for a saturated CPU, far below botocore's default of 60 s per attempt
    assert READ <= took <= BOUND + 3.0, took
    assert read_all(settings, settings.topics.raw) == []


def test_the_timeouts_are_settings_with_bounded_defaults() -> None:
    s = Settings()
    assert (s.kms_connect_timeout_s, s.kms_read_timeout_s, s.kms_max_attempts) == (2.0, 5.0, 2)
    provider = open_provider(s.model_copy(update={"key_provider": "kms"}))
    assert isinstance(provider, KmsProvider)
    config = provider._client.meta.config
    assert (config.connect_timeout, config.read_timeout) == (2.0, 5.0)
    assert config.retries["total_max_attempts"] == 2


def test_a_re_created_tenant_key_is_used_without_a_restart(s3_endpoint: str) -> None:
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    provider = KmsProvider(endpoint_url=s3_endpoint)
    _, first = provider.generate(tenant, None, "run-1")
    # the operator erases the tenant's key, and later re-creates the tenant under its alias
    kms = boto3.client("kms", endpoint_url=s3_endpoint)
    kms.disable_key(KeyId=first.kek_id)
    new = kms.create_key(KeyUsage="ENCRYPT_DECRYPT")["KeyMetadata"]["KeyId"]
    kms.update_alias(AliasName=f"alias/tracevault/{tenant}", TargetKeyId=new)
    data_key, second = provider.generate(tenant, None, "run-2")
    assert second.kek_id == new != first.kek_id
    assert provider.unwrap(second, "run-2") == data_key
