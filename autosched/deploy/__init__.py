"""Deployment: build a model with its tuned schedules, shape buckets, serving, profiling, reference runtimes."""
