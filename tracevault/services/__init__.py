"""The long-running services: one runtime (``runtime``) and the steps it runs (``archiver``,
``witness``; the sequencer moves here next, see docs/design.md)."""
