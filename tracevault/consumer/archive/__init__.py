"""The archiver: immutable Avro segments in object storage under a retention lock."""
