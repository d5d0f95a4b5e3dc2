"""The group coordinator (Kafka's GroupCoordinator, classic and consumer groups) on
`__consumer_offsets`."""
