"""Re-running agent code against a record: the replay edges, interleaving, keep-going, until."""
