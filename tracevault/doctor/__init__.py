"""``tracevault doctor``: check a deployment end to end and say how to fix what is wrong."""

from tracevault.doctor._checks import Check, run_checks

__all__ = ["Check", "run_checks"]
