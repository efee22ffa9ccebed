"""Provider adapters and exporters for the tools teams already run.

- ``tracevault.integrations.openai.wrap(client, edges)``: an OpenAI SDK client whose every
  provider call is recorded, or refused by name (extra ``tracevault[openai]``);
- ``tracevault.integrations.anthropic.wrap(client, edges)``: the same for the Anthropic SDK
  (extra ``tracevault[anthropic]``); both hold the SDK's HTTP client (``_door``);
- ``tracevault.integrations.langgraph``: ``chat_model(model, edges)``, ``tools([...], edges)``
  and ``checkpointer(saver, edges)`` record a LangGraph / LangChain agent at the framework's
  seams (extra ``tracevault[langgraph]``, docs/langgraph.md);
- ``tracevault.integrations.openai_agents.run(agent, input, edges, client=)``: an OpenAI Agents
  SDK ``Runner.run`` recorded, handoffs as sub-agents (extra ``tracevault[agents]``);
- ``tracevault.integrations.mcp_client.RecordedSession``: an MCP client session whose calls are
  recorded, replayed with no server (extra ``tracevault[mcp]``);
- ``tracevault.integrations.otel``: a verified run as OpenTelemetry GenAI spans (extra
  ``tracevault[otel]``).

Nothing is imported here, so ``import tracevault`` never needs an optional SDK.
"""
