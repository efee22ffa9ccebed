"""tracevault.producer (see DESIGN.md)."""
