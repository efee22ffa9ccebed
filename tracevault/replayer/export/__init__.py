"""Evidence bundles: a verified run exported to a folder, checked, and revealed to a recipient."""
