"""The schema registry: Confluent Schema Registry's REST API (v1) served by the broker.

``schemas`` and ``state`` are the pure core (parsing, compatibility, the registry as a state
machine over `_schemas` records), ``log_format`` the records' layout, ``service`` the trio
shell that reads and writes `_schemas` through the replica manager, and ``http`` the ASGI app
on its own listener.
"""
