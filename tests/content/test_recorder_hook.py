"""The Recorder's encryption hook fails closed, in the agent, before anything is published."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.services.sequencer.support import read_all
from tracevault.config import Settings
from tracevault.errors import ConfigError, ServiceUnavailableError
from tracevault.producer import Publisher, Recorder


def _recorder(settings: Settings, **kw: object) -> Recorder:
    publisher = Publisher(settings)
    try:
        return Recorder(publisher=publisher, agent_id="a", agent_version="1", **kw)  # type: ignore[arg-type]
    finally:
        publisher.close(timeout=5)


def test_a_subject_without_a_key_provider_is_refused(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory(partitions=1)
    with pytest.raises(ConfigError, match="TRACEVAULT_KEY_PROVIDER"):
        _recorder(settings, subject="customer-1")
    with pytest.raises(ConfigError, match="TRACEVAULT_KEY_PROVIDER"):
        _recorder(settings, tenant="t")


def test_a_bad_tenant_or_subject_is_refused(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = settings_factory(
        partitions=1, key_provider="keyring", keyring_path=str(tmp_path / "kr.json")
    )
    with pytest.raises(ConfigError, match=r"Recorder\(tenant=\.\.\.\)"):
        _recorder(settings, tenant="a/b")
    with pytest.raises(ConfigError, match=r"Recorder\(subject=\.\.\.\)"):
        _recorder(settings, subject="")


def test_an_unreachable_kms_stops_the_run_before_anything_is_published(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory(
        partitions=1, key_provider="kms", kms_endpoint_url="http://127.0.0.1:9"
    )
    with pytest.raises(ServiceUnavailableError, match=r"KMS at http://127\.0\.0\.1:9 "):
        _recorder(settings, run_id="never-published")
    assert read_all(settings, settings.topics.raw) == []
