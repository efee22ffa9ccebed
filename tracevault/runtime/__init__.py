"""What every long-running service shares, beneath them all: the sequencer, the archiver and
the witness run their Kafka sessions under one supervisor (``liveness``, docs/liveness.md),
so a fix for a broker fault reaches all three at once."""
