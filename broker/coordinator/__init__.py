"""Coordination: the coordinator runtime (runtime.py, Kafka's CoordinatorRuntime, with its pure
part runtime_state.py) and one package per coordinator on it: group/ (classic and consumer
groups on `__consumer_offsets`), transaction/ (transactions on `__transaction_state`)."""
