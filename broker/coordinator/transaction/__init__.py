"""The transaction coordinator (Kafka's TransactionCoordinator) on `__transaction_state`."""
