"""After a divergence: where two runs differ (first, or all aligned), sub-agent trees, forks."""
