"""The long-running services: one runtime (``runtime``) and the steps it runs (``archiver``;
the sequencer and the witness move here next, see docs/design.md)."""
