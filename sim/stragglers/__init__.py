"""A labelled straggler corpus: synchronous jobs with one slow rank, or none, and the
truth of each (`nvwatch simulate stragglers`), for measuring how well the mixin's
NvwatchJobStraggler names the rank that holds a job back (`nvwatch alerts
evaluate-stragglers`). `episodes.py` plans the episodes, `corpus.py` simulates and
writes them."""
