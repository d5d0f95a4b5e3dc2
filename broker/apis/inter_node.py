"""The requests only nodes of the cluster send one another, and who may send them.

LeaderAndIsr, StopReplica and UpdateMetadata (controller to broker), AlterPartition,
BrokerRegistration, BrokerHeartbeat and AllocateProducerIds (broker to controller): the APIs
declared ``senders=Senders.NODES`` (see apis.Api; dispatch puts their handlers behind these
rules). The node forms of the APIs declared ``Senders.CLIENTS_AND_NODES``: a follower's Fetch,
ListOffsets and OffsetForLeaderEpoch (replica id >= 0), and the controller's config, ACL and
SCRAM credential pushes (AlterConfigs, CreateAcls and AlterUserScramCredentials on the
controller's connection), whose handlers apply these rules. All of them change what a node
serves. They are accepted only

* on an inter-node listener: the inter-broker listener (``inter.broker.listener.name``, by
  default the first listener) and the ``controller.listener.names`` among the node's
  listeners. Its other listeners are client listeners: they do not advertise these APIs in
  ApiVersions and answer them with CLUSTER_AUTHORIZATION_FAILED. A node with one listener (a
  dev or test cluster) carries everything on it;
* and, when an authorizer is configured, from a principal with CLUSTER_ACTION on the cluster
  (Kafka's rule for these requests).
"""

from minibroker.apis import RequestContext
from minibroker.apis.authorization import cluster_allowed, on_inter_node_listener
from minibroker.common.names import CONTROLLER_CLIENT_ID
from minibroker.security.authorizer.acls import Operation


def inter_node_allowed(ctx: RequestContext) -> bool:
    """Whether this connection may send the cluster's own requests (see the module)."""
    return on_inter_node_listener(ctx) and cluster_allowed(ctx, Operation.CLUSTER_ACTION)


def is_controller_push(ctx: RequestContext) -> bool:
    """A request the broker applies as the controller's word (configs, ACLs) rather than
    deciding it: sent on the controller's connection, recognised by its client id. Whether
    the sender may say so is :func:`inter_node_allowed`'s question."""
    return ctx.header.client_id == CONTROLLER_CLIENT_ID and ctx.replicas is not None
