"""tracevault: tamper-evident, replayable records of AI-agent runs.

Sub-packages follow the data flow: ``schemas`` (the wire format), ``producer`` (the agent-side
Recorder), ``consumer`` (sequencer and archiver), ``replayer`` (read back, verify, re-run).
"""

from tracevault.errors import TraceVaultError

__version__ = "0.1.0"

__all__ = ["TraceVaultError", "__version__"]
