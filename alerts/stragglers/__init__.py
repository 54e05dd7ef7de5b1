"""Measuring NvwatchJobStraggler on a labelled corpus (`nvwatch simulate stragglers`):
`scoring.py` applies the alert's `for:` to its expression's evaluations and scores what
fired against each episode's truth. It reads the truth file only, never the simulator."""
