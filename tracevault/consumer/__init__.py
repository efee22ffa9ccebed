"""tracevault.consumer (see docs/design.md)."""
