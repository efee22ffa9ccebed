"""The witness service: cosigns checkpoints it checked, refuses forks and rollbacks."""
