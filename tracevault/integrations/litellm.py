"""Record and replay LiteLLM calls: ``litellm.completion(...)`` becomes
``completion(edges, ...)`` (and ``acompletion``), the same keyword arguments.

LiteLLM sends a call to an OpenAI-compatible model (``openai/...``, ``gpt-...``, an
``api_base`` of your own) through the ``openai`` SDK's client, and takes one as ``client=``.
So each call is given a client wrapped by :func:`tracevault.integrations.openai.wrap` (the
``client=`` you pass, else one built from ``api_base``/``api_key``): every request LiteLLM
makes is one MODEL_CALL at the wrapped client's door, and under replay the recorded answer
is served with no socket (LiteLLM parses it as it did live). LiteLLM's own retries
(``num_retries``) are each one recorded call. A model LiteLLM would send through another
path (its own HTTP handlers for ``anthropic/...``, Bedrock, Vertex) is refused with a
``ConfigError`` before anything is sent: it would not pass the door.

LiteLLM fetches its model price map from the network when imported unless
``LITELLM_LOCAL_MODEL_COST_MAP`` is set; this module sets it (unless you did) so that
importing it opens no socket. Needs the ``litellm`` extra: ``pip install 'tracevault[litellm]'``.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from typing import Any

from tracevault.errors import ConfigError, missing_extra

try:
    import litellm
    import openai
except ImportError as exc:  # the extra is not installed: say which one
    raise missing_extra("litellm", exc) from exc

from tracevault.callsite import add_harness_module
from tracevault.edges import Edges
from tracevault.integrations import openai as openai_adapter

__all__ = ["acompletion", "completion"]

add_harness_module("litellm")


def _client(edges: Edges, kwargs: dict[str, Any], is_async: bool) -> Any:
    """The wrapped OpenAI client LiteLLM is to send this call through."""
    model = kwargs.get("model")
    if not isinstance(model, str):
        raise ConfigError("completion(edges, model=..., messages=...) needs a model name")
    _, provider, _, _ = litellm.get_llm_provider(
        model,
        custom_llm_provider=kwargs.get("custom_llm_provider"),
        api_base=kwargs.get("api_base"),
    )
    if provider != "openai":
        raise ConfigError(
            f"litellm sends model {model!r} through its {provider!r} handler, not the openai "
            "client tracevault records: use an OpenAI-compatible model (openai/<name> with "
            "api_base) or that provider's SDK wrapped (tracevault.integrations.anthropic)"
        )
    given = kwargs.pop("client", None)
    kind = openai.AsyncOpenAI if is_async else openai.OpenAI
    if given is None:
        given = kind(
            base_url=kwargs.get("api_base") or os.environ.get("OPENAI_BASE_URL"),
            api_key=kwargs.get("api_key") or os.environ.get("OPENAI_API_KEY") or "unset",
            max_retries=0,  # litellm's num_retries retries; each attempt is recorded
        )
    elif not isinstance(given, kind):
        raise ConfigError(f"client= must be an {kind.__module__}.{kind.__name__}, got {given!r}")
    return openai_adapter.wrap(given, edges)


def completion(edges: Edges, /, **kwargs: Any) -> Any:
    """``litellm.completion(**kwargs)``, recorded live and served from the record on replay."""
    client = _client(edges, kwargs, is_async=False)
    return litellm.completion(client=client, **kwargs)


async def acompletion(edges: Edges, /, **kwargs: Any) -> Any:
    """``litellm.acompletion(**kwargs)``, recorded live and served from the record on replay."""
    client = _client(edges, kwargs, is_async=True)
    return await litellm.acompletion(client=client, **kwargs)
