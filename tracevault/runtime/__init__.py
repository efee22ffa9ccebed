"""The old home of the service runtime, kept only for the sequencer and the witness until they
move onto :mod:`tracevault.services.runtime` (``liveness`` re-exports it)."""
