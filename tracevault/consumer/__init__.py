"""The Kafka-consuming services: the sequencer (raw to sealed) and the archiver (sealed to storage).

See docs/design.md for the pipeline both sit in.
"""
