"""tracevault.consumer (see DESIGN.md)."""
