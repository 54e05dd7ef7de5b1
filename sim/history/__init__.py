"""A simulated fleet's past: days or months of its nodes, its BMCs and its Slurm queue
stepped on one manual clock and written as the timestamped samples Prometheus would
have scraped (OpenMetrics, for promtool to backfill), with the ground truth a test checks
the dashboards and the report against."""
