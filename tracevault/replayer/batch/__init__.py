"""Batch replay: every archived run of a window, on local processes or Dask, and its report."""
