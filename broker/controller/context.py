"""What the controller's managers see of the controller: its state, its clock and the means
to make a decision durable and tell the brokers.

BrokerLifecycleManager and ReplicationControlManager hold the ControllerService that owns
them, typed as this protocol rather than as the service, so that neither imports the service
module that imports them (Kafka's QuorumController hands its managers the pieces they need
in the same way, rather than itself).
"""

from collections.abc import Callable, Iterable, Sequence
from random import Random
from typing import Any, Protocol

import trio

from minibroker.common.config import BrokerConfig
from minibroker.common.config_model import BrokerLayers
from minibroker.controller.channel_manager import ControllerChannelManager
from minibroker.controller.state import ControllerState, PartitionChange, TopicState


class ControllerContext(Protocol):
    cluster_id: str
    config: BrokerConfig
    state: ControllerState
    rng: Random
    clock_ms: Callable[[], int]
    channels: ControllerChannelManager

    @property
    def node_id(self) -> int: ...

    async def save(self) -> None: ...

    def propagate(
        self,
        changes: list[PartitionChange],
        stopped: Sequence[TopicState] = (),
        also_tell: int | None = None,
    ) -> list[trio.Event]: ...

    def send_full_metadata(self, node_id: int) -> None: ...

    async def await_delivery(self, events: list[trio.Event], timeout_s: float) -> bool: ...

    def push_configs(
        self, resources: Iterable[Any], only_to: int | None = None
    ) -> list[trio.Event]: ...

    def push_acls(self, only_to: int | None = None) -> list[trio.Event]: ...

    def push_scram_credentials(
        self, pairs: Iterable[Any] | None, only_to: int | None = None
    ) -> list[trio.Event]: ...

    def push_client_quotas(
        self, entities: Iterable[Any] | None, only_to: int | None = None
    ) -> list[trio.Event]: ...

    def push_features(self, only_to: int | None = None) -> list[trio.Event]: ...

    def config_layers(self) -> BrokerLayers: ...
