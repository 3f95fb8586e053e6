"""A model's tuning: its tasks share one trial and/or time budget through the task scheduler."""
