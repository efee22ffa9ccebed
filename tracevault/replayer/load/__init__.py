"""Loading a recorded run (topic, archive) and verifying it: record checks, log, identity."""
