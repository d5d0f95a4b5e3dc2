"""Names that several layers agree on."""

# The client id of the controller's own connections to brokers (its channel for
# LeaderAndIsr, UpdateMetadata, StopReplica and the config, ACL and SCRAM pushes). A broker
# applies a push on such a connection instead of forwarding it (apis/inter_node.py).
CONTROLLER_CLIENT_ID = "controller"

# The group coordinator's topic: only the coordinator appends to it (Kafka's internal topic).
OFFSETS_TOPIC = "__consumer_offsets"

# The transaction coordinator's topic: only the coordinator appends to it.
TRANSACTION_STATE_TOPIC = "__transaction_state"

# The share coordinator's topic (KIP-932's ShareSnapshot and ShareUpdate records).
SHARE_GROUP_STATE_TOPIC = "__share_group_state"

# The registry of internal topics (Kafka's Topic.INTERNAL_TOPICS): only a coordinator writes
# to them (ReplicaManager.append_records refuses any other origin), Metadata calls them
# internal, and regex subscriptions never match them. Every other module imports this set.
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_GROUP_STATE_TOPIC})

# The schema registry's topic (Confluent's kafkastore.topic default), in Confluent's layout.
SCHEMAS_TOPIC = "_schemas"

# The name under which a broker registers its schema registry's HTTP address with the
# controller, beside its Kafka listeners, so that the other brokers can forward writes to the
# registry's writer. No client connects to it over Kafka's protocol.
SCHEMA_REGISTRY_ENDPOINT = "SCHEMA_REGISTRY_HTTP"
# The same, when that listener is https (schema.registry.listeners=https://...).
SCHEMA_REGISTRY_TLS_ENDPOINT = "SCHEMA_REGISTRY_HTTPS"
