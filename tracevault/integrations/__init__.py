"""Provider adapters and exporters for the tools teams already run.

- ``tracevault.integrations.openai.wrap(client, edges)``: an OpenAI SDK client whose Chat
  Completions and Responses calls are recorded (extra ``tracevault[openai]``);
- ``tracevault.integrations.anthropic.wrap(client, edges)``: the same for Anthropic Messages
  (extra ``tracevault[anthropic]``);
- ``tracevault.integrations.otel``: a verified run as OpenTelemetry GenAI spans (extra
  ``tracevault[otel]``).

Nothing is imported here, so ``import tracevault`` never needs an optional SDK.
"""
