"""DescribeLogDirs and AlterReplicaLogDirs: each broker's own log directories (log.dirs).

DescribeLogDirs, per directory: the partitions whose logs live there with their size on
disk and offset lag (the high watermark minus the log end offset, never below zero, as
Kafka reports it for a current replica), and from v4 the file system's total and usable
bytes. A replica being moved to another directory (AlterReplicaLogDirs) is also listed
there as a future replica (is_future_key), its lag the current log end minus its own, as
Kafka's ReplicaManager.describeLogDirs reports it. With an authorizer it needs DESCRIBE on
the cluster: otherwise CLUSTER_AUTHORIZATION_FAILED and no directories, as Kafka answers.
v5 tells whether a directory is cordoned (KIP-1066, cordoned.log.dirs: it takes no new
replica).
"""

import os
from pathlib import Path

from minibroker.apis import RequestContext, Role, api
from minibroker.apis.authorization import cluster_allowed
from minibroker.protocol.errors import Error
from minibroker.protocol.versions import ApiKey
from minibroker.security.authorizer.acls import Operation


def _disk_space(directory: Path) -> tuple[int, int]:
    stats = os.statvfs(directory)
    return stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize


def _wanted(request) -> dict[str, set[int]] | None:
    """The partitions asked for by topic; None means every partition (a null topic list)."""
    if request.topics is None:
        return None
    wanted: dict[str, set[int]] = {}
    for topic in request.topics:
        wanted.setdefault(topic.topic, set()).update(topic.partitions)
    return wanted


def _error_response(request, error: Error) -> dict:
    return {"error_code": error, "results": ()}


@api(ApiKey.DESCRIBE_LOG_DIRS, versions=(1, 5), roles=Role.BROKER, error_response=_error_response)
async def handle_describe(ctx: RequestContext, request) -> dict:
    if not cluster_allowed(ctx, Operation.DESCRIBE):
        return {"error_code": Error.CLUSTER_AUTHORIZATION_FAILED, "results": ()}
    wanted = _wanted(request)
    by_directory: dict[Path, dict[str, list[dict]]] = {
        Path(directory): {} for directory in ctx.config.log_dirs
    }
    for partition in sorted(ctx.replica_manager.partitions(), key=lambda p: p.key):
        if wanted is not None and partition.index not in wanted.get(partition.topic, ()):
            continue
        directory, size_bytes, offset_lag = ctx.replica_manager.log_dir_of(partition)
        by_directory.setdefault(directory, {}).setdefault(partition.topic, []).append(
            {
                "partition_index": partition.index,
                "partition_size": size_bytes,
                "offset_lag": offset_lag,
                "is_future_key": False,
            }
        )
    for future, lag in ctx.replica_manager.log_dir_mover.futures():
        if wanted is not None and future.partition not in wanted.get(future.topic, ()):
            continue
        by_directory.setdefault(future.directory.parent, {}).setdefault(future.topic, []).append(
            {
                "partition_index": future.partition,
                "partition_size": future.size_bytes,
                "offset_lag": lag,
                "is_future_key": True,
            }
        )
    results = []
    for directory, topics in by_directory.items():
        try:
            total_bytes, usable_bytes = _disk_space(directory)
            error = Error.NONE
        except OSError:
            total_bytes = usable_bytes = -1
            error = Error.KAFKA_STORAGE_ERROR
        results.append(
            {
                "error_code": error,
                "log_dir": str(directory.resolve()),
                "topics": [
                    {"name": name, "partitions": partitions}
                    for name, partitions in sorted(topics.items())
                ],
                "total_bytes": total_bytes,
                "usable_bytes": usable_bytes,
                "is_cordoned": directory in ctx.replica_manager.log_manager.cordoned_log_dirs,
            }
        )
    return {"error_code": Error.NONE, "results": results}


def _alter_results(moves: dict[tuple[str, int], Error]) -> dict:
    by_topic: dict[str, list[dict]] = {}
    for (topic, index), error in moves.items():
        by_topic.setdefault(topic, []).append({"partition_index": index, "error_code": error})
    return {
        "throttle_time_ms": 0,
        "results": [
            {"topic_name": topic, "partitions": partitions}
            for topic, partitions in by_topic.items()
        ],
    }


def _requested_moves(request) -> dict[tuple[str, int], str]:
    """Each partition and the dir asked for it (a partition named twice: the last one, as
    Kafka's AlterReplicaLogDirsRequest.partitionDirs builds its map)."""
    return {
        (topic.name, index): directory.path
        for directory in request.dirs
        for topic in directory.topics
        for index in topic.partitions
    }


def _alter_error_response(request, error: Error) -> dict:
    return _alter_results({key: error for key in _requested_moves(request)})


@api(
    ApiKey.ALTER_REPLICA_LOG_DIRS,
    versions=(1, 2),
    roles=Role.BROKER,
    error_response=_alter_error_response,
)
async def handle_alter_replica_log_dirs(ctx: RequestContext, request) -> dict:
    """Kafka's KafkaApis.handleAlterReplicaLogDirsRequest: CLUSTER ALTER or every partition
    is CLUSTER_AUTHORIZATION_FAILED; then ReplicaManager.alterReplicaLogDirs
    (replication/log_dir_mover.py) answers each partition at once, the move itself running
    on afterwards. v0 is gone from Kafka 4 (KIP-896): v1-v2 as Kafka 4.4 serves them."""
    moves = _requested_moves(request)
    if not cluster_allowed(ctx, Operation.ALTER):
        return _alter_results({key: Error.CLUSTER_AUTHORIZATION_FAILED for key in moves})
    return _alter_results(await ctx.replica_manager.alter_replica_log_dirs(moves))
