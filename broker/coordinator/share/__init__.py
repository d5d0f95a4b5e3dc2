"""The share coordinator (Kafka's ShareCoordinator, KIP-932) on `__share_group_state`: so far
its record layouts (log_format.py); the service on the coordinator runtime comes with the
share APIs."""
