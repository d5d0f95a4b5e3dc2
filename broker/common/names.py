"""Names that several layers agree on."""

# The client id of the controller's own connections to brokers (its channel for
# LeaderAndIsr, UpdateMetadata, StopReplica and the config, ACL and SCRAM pushes). A broker
# applies a push on such a connection instead of forwarding it (apis/inter_node.py).
CONTROLLER_CLIENT_ID = "controller"

# The group coordinator's topic: only the coordinator appends to it (Kafka's internal topic).
OFFSETS_TOPIC = "__consumer_offsets"

# The transaction coordinator's topic: only the coordinator appends to it.
TRANSACTION_STATE_TOPIC = "__transaction_state"
