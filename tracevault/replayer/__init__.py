"""tracevault.replayer (see DESIGN.md)."""
