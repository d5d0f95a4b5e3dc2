"""Benchmarks of minibroker against librdkafka's mock cluster: `python -m bench`."""
