"""Kafka's config model, as DescribeConfigs shows it and the AlterConfigs family changes it.

Pure: plain dicts in, plain dicts out, no I/O. A topic config's value comes from the first of
these that sets it: the topic's own override (DYNAMIC_TOPIC_CONFIG), then each of its broker
synonyms (``retention.ms`` <- ``log.retention.ms``, ``log.retention.minutes``,
``log.retention.hours``) set dynamically for this broker (DYNAMIC_BROKER_CONFIG), dynamically
for the cluster (DYNAMIC_DEFAULT_BROKER_CONFIG, the resource named ""), in the broker's
properties (STATIC_BROKER_CONFIG), and last Kafka's defaults (DEFAULT_CONFIG). With
include_synonyms the answer lists every one of those that is set, in that order, as Kafka's
ConfigHelper does.

One difference from Kafka: Kafka drops the synonyms listed before the first broker synonym
(``dropWhile``), so a topic whose retention comes from ``log.retention.hours`` alone is
reported as DEFAULT_CONFIG with no synonyms; here it is STATIC_BROKER_CONFIG with
``log.retention.hours`` as its synonym, which is where the value really comes from.
"""

from collections.abc import Iterable
from dataclasses import dataclass

from minibroker.protocol.errors import Error, KafkaError
from minibroker.storage.log import LogConfig, validate_topic_config

# DescribeConfigsResponse.ConfigSource
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
DYNAMIC_BROKER_LOGGER_CONFIG = 6

# DescribeConfigsResponse.ConfigType
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = 1, 2, 3, 4, 5, 6, 7, 8, 9

# ConfigResource.Type
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
BROKER_LOGGER_RESOURCE = 8

# IncrementalAlterConfigs operations (AlterConfigOp.OpType)
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OPERATION_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}

LONG_MAX = str(2**63 - 1)
HOUR_MS = 3_600_000
MINUTE_MS = 60_000


@dataclass(frozen=True)
class Synonym:
    """A broker property that sets a topic config's default; its value times ``scale`` is
    the topic config's value (log.retention.hours is in hours, retention.ms in ms)."""

    name: str
    scale: int = 1


@dataclass(frozen=True)
class TopicConfigDef:
    name: str
    type: int
    default: str
    synonyms: tuple[Synonym, ...] = ()


def _same(name: str) -> tuple[Synonym, ...]:
    return (Synonym(name),)


def _log(name: str) -> tuple[Synonym, ...]:
    return (Synonym(f"log.{name}"),)


# Every topic config of Kafka 3.9 (LogConfig), in Kafka's order, with its broker synonyms in
# precedence order (ServerTopicConfigSynonyms).
TOPIC_CONFIG_DEFS: dict[str, TopicConfigDef] = {
    d.name: d
    for d in (
        TopicConfigDef("segment.bytes", INT, "1073741824", _log("segment.bytes")),
        TopicConfigDef(
            "segment.ms",
            LONG,
            "604800000",
            (Synonym("log.roll.ms"), Synonym("log.roll.hours", HOUR_MS)),
        ),
        TopicConfigDef(
            "segment.jitter.ms",
            LONG,
            "0",
            (Synonym("log.roll.jitter.ms"), Synonym("log.roll.jitter.hours", HOUR_MS)),
        ),
        TopicConfigDef("segment.index.bytes", INT, "10485760", _log("index.size.max.bytes")),
        TopicConfigDef("flush.messages", LONG, LONG_MAX, _log("flush.interval.messages")),
        TopicConfigDef(
            "flush.ms",
            LONG,
            LONG_MAX,
            (Synonym("log.flush.interval.ms"), Synonym("log.flush.scheduler.interval.ms")),
        ),
        TopicConfigDef("retention.bytes", LONG, "-1", _log("retention.bytes")),
        TopicConfigDef(
            "retention.ms",
            LONG,
            "604800000",
            (
                Synonym("log.retention.ms"),
                Synonym("log.retention.minutes", MINUTE_MS),
                Synonym("log.retention.hours", HOUR_MS),
            ),
        ),
        TopicConfigDef("max.message.bytes", INT, "1048588", _same("message.max.bytes")),
        TopicConfigDef("index.interval.bytes", INT, "4096", _log("index.interval.bytes")),
        TopicConfigDef(
            "delete.retention.ms", LONG, "86400000", _log("cleaner.delete.retention.ms")
        ),
        TopicConfigDef("min.compaction.lag.ms", LONG, "0", _log("cleaner.min.compaction.lag.ms")),
        TopicConfigDef(
            "max.compaction.lag.ms", LONG, LONG_MAX, _log("cleaner.max.compaction.lag.ms")
        ),
        TopicConfigDef("file.delete.delay.ms", LONG, "60000", _log("segment.delete.delay.ms")),
        TopicConfigDef(
            "min.cleanable.dirty.ratio", DOUBLE, "0.5", _log("cleaner.min.cleanable.ratio")
        ),
        TopicConfigDef("cleanup.policy", LIST, "delete", _log("cleanup.policy")),
        TopicConfigDef(
            "unclean.leader.election.enable",
            BOOLEAN,
            "false",
            _same("unclean.leader.election.enable"),
        ),
        TopicConfigDef("min.insync.replicas", INT, "1", _same("min.insync.replicas")),
        TopicConfigDef("compression.type", STRING, "producer", _same("compression.type")),
        TopicConfigDef("compression.gzip.level", INT, "-1", _same("compression.gzip.level")),
        TopicConfigDef("compression.lz4.level", INT, "9", _same("compression.lz4.level")),
        TopicConfigDef("compression.zstd.level", INT, "3", _same("compression.zstd.level")),
        TopicConfigDef("preallocate", BOOLEAN, "false", _log("preallocate")),
        TopicConfigDef("message.format.version", STRING, "3.0-IV1", _log("message.format.version")),
        TopicConfigDef(
            "message.timestamp.type", STRING, "CreateTime", _log("message.timestamp.type")
        ),
        TopicConfigDef(
            "message.timestamp.difference.max.ms",
            LONG,
            LONG_MAX,
            _log("message.timestamp.difference.max.ms"),
        ),
        TopicConfigDef(
            "message.timestamp.before.max.ms",
            LONG,
            LONG_MAX,
            _log("message.timestamp.before.max.ms"),
        ),
        TopicConfigDef(
            "message.timestamp.after.max.ms", LONG, LONG_MAX, _log("message.timestamp.after.max.ms")
        ),
        TopicConfigDef("leader.replication.throttled.replicas", LIST, ""),
        TopicConfigDef("follower.replication.throttled.replicas", LIST, ""),
        TopicConfigDef(
            "message.downconversion.enable", BOOLEAN, "true", _log("message.downconversion.enable")
        ),
        TopicConfigDef("remote.storage.enable", BOOLEAN, "false"),
        TopicConfigDef("local.retention.ms", LONG, "-2", _log("local.retention.ms")),
        TopicConfigDef("local.retention.bytes", LONG, "-2", _log("local.retention.bytes")),
        TopicConfigDef("remote.log.copy.disable", BOOLEAN, "false"),
        TopicConfigDef("remote.log.delete.on.disable", BOOLEAN, "false"),
        TopicConfigDef("errors.deadletterqueue.group.enable", BOOLEAN, "false"),
        # Confluent Server's (not Kafka's): schema validation on produce.
        TopicConfigDef("confluent.value.schema.validation", BOOLEAN, "false"),
        TopicConfigDef("confluent.key.schema.validation", BOOLEAN, "false"),
        # Redpanda's Iceberg topics, without its prefix (docs/iceberg-topics.md).
        TopicConfigDef("iceberg.mode", STRING, "disabled"),
        TopicConfigDef("iceberg.target.lag.ms", LONG, "60000"),
        TopicConfigDef("iceberg.partition.spec", STRING, "(hour(timestamp))"),
        TopicConfigDef("iceberg.delete", BOOLEAN, "true"),
        TopicConfigDef("iceberg.compaction.interval.ms", LONG, "3600000"),
        TopicConfigDef("iceberg.snapshot.expiry.interval.ms", LONG, "3600000"),
    )
}

# The one replica selector (KIP-392's replica.selector.class) minibroker has: Kafka's.
RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"

# Broker properties as DescribeConfigs shows them: name -> (type, Kafka's default or None).
# These are the properties minibroker reads, and the broker synonyms of every topic config.
BROKER_CONFIG_DEFS: dict[str, tuple[int, str | None]] = {
    "advertised.listeners": (STRING, None),
    "authorizer.class.name": (STRING, ""),
    "auto.create.topics.enable": (BOOLEAN, "true"),
    "auto.leader.rebalance.enable": (BOOLEAN, "true"),
    "broker.heartbeat.interval.ms": (INT, "2000"),
    "broker.id": (INT, "-1"),
    "broker.session.timeout.ms": (INT, "9000"),
    "compression.gzip.level": (INT, "-1"),
    "compression.lz4.level": (INT, "9"),
    "compression.type": (STRING, "producer"),
    "compression.zstd.level": (INT, "3"),
    "connections.max.idle.ms": (LONG, "600000"),
    "controlled.shutdown.enable": (BOOLEAN, "true"),
    "controller.listener.names": (STRING, None),
    "controller.quorum.bootstrap.servers": (LIST, ""),
    "controller.quorum.voters": (LIST, ""),
    "default.replication.factor": (INT, "1"),
    "delete.topic.enable": (BOOLEAN, "true"),
    "fetch.max.bytes": (INT, "57671680"),
    "group.initial.rebalance.delay.ms": (INT, "3000"),
    "group.consumer.assignors": (
        LIST,
        "org.apache.kafka.coordinator.group.assignor.UniformAssignor,"
        "org.apache.kafka.coordinator.group.assignor.RangeAssignor",
    ),
    "group.consumer.heartbeat.interval.ms": (INT, "5000"),
    "group.consumer.max.heartbeat.interval.ms": (INT, "15000"),
    "group.consumer.max.session.timeout.ms": (INT, "60000"),
    "group.consumer.max.size": (INT, "2147483647"),
    "group.consumer.migration.policy": (STRING, "bidirectional"),
    "group.consumer.min.heartbeat.interval.ms": (INT, "5000"),
    "group.consumer.min.session.timeout.ms": (INT, "45000"),
    "group.consumer.session.timeout.ms": (INT, "45000"),
    "group.max.session.timeout.ms": (INT, "1800000"),
    "group.share.delivery.count.limit": (INT, "5"),
    # Share groups' dead-letter queues (KIP-1191), Kafka 4.4's GroupCoordinatorConfig.
    "errors.deadletterqueue.auto.create.topics.enable": (BOOLEAN, "false"),
    "errors.deadletterqueue.topic.name.prefix": (STRING, "dlq."),
    "group.share.max.record.lock.duration.ms": (INT, "60000"),
    "group.share.max.share.sessions": (INT, "2000"),
    "group.share.min.record.lock.duration.ms": (INT, "15000"),
    "group.share.partition.max.record.locks": (INT, "2000"),
    "group.share.record.lock.duration.ms": (INT, "30000"),
    # Share groups' membership (KIP-932), Kafka 4.4's GroupCoordinatorConfig defaults.
    "group.share.heartbeat.interval.ms": (INT, "5000"),
    "group.share.max.heartbeat.interval.ms": (INT, "15000"),
    "group.share.max.session.timeout.ms": (INT, "60000"),
    "group.share.max.size": (INT, "200"),
    "group.share.min.heartbeat.interval.ms": (INT, "5000"),
    "group.share.min.session.timeout.ms": (INT, "45000"),
    "group.share.session.timeout.ms": (INT, "45000"),
    "group.max.size": (INT, "2147483647"),
    # Streams groups (KIP-1071), Kafka 4.4's GroupCoordinatorConfig defaults.
    "group.streams.heartbeat.interval.ms": (INT, "5000"),
    "group.streams.initial.rebalance.delay.ms": (INT, "3000"),
    "group.streams.max.heartbeat.interval.ms": (INT, "15000"),
    "group.streams.max.session.timeout.ms": (INT, "60000"),
    "group.streams.max.size": (INT, "2147483647"),
    "group.streams.max.standby.replicas": (INT, "2"),
    "group.streams.min.heartbeat.interval.ms": (INT, "5000"),
    "group.streams.min.session.timeout.ms": (INT, "45000"),
    "group.streams.num.standby.replicas": (INT, "0"),
    "group.streams.session.timeout.ms": (INT, "45000"),
    "group.min.session.timeout.ms": (INT, "6000"),
    "inter.broker.listener.name": (STRING, None),
    "leader.imbalance.check.interval.seconds": (LONG, "300"),
    "listener.security.protocol.map": (
        STRING,
        "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
    ),
    "listeners": (STRING, "PLAINTEXT://:9092"),
    "log.cleaner.backoff.ms": (LONG, "15000"),
    "log.cleaner.dedupe.buffer.size": (LONG, "134217728"),
    "log.cleaner.delete.retention.ms": (LONG, "86400000"),
    "log.cleaner.enable": (BOOLEAN, "true"),
    "log.cleaner.max.compaction.lag.ms": (LONG, LONG_MAX),
    "log.cleaner.min.cleanable.ratio": (DOUBLE, "0.5"),
    "log.cleaner.min.compaction.lag.ms": (LONG, "0"),
    "log.cleanup.policy": (LIST, "delete"),
    "log.dir": (STRING, "/tmp/kafka-logs"),
    "log.dirs": (STRING, None),
    # Not Kafka's: minibroker's own settings that a tool needs to find from the wire alone
    # (``minibroker iceberg``: where the Iceberg topics' catalog is, and the metrics endpoint
    # where the writers' last errors are), described as Redpanda describes its cluster
    # config iceberg_catalog_type and friends. The REST catalog's credential and token are
    # not described (they are secrets).
    "iceberg.catalog.type": (STRING, "sql"),
    "iceberg.catalog.name": (STRING, "minibroker"),
    "iceberg.catalog.uri": (STRING, ""),
    "iceberg.catalog.warehouse": (STRING, ""),
    "iceberg.catalog.namespace": (STRING, "minibroker"),
    "iceberg.rest.catalog.uri": (STRING, None),
    "iceberg.rest.catalog.warehouse": (STRING, None),
    "iceberg.rest.catalog.prefix": (STRING, None),
    "iceberg.catalog.s3.endpoint": (STRING, None),
    "iceberg.catalog.s3.region": (STRING, None),
    "metrics.port": (INT, None),
    "cordoned.log.dirs": (LIST, ""),
    "log.flush.interval.messages": (LONG, LONG_MAX),
    "log.flush.interval.ms": (LONG, None),
    "log.flush.offset.checkpoint.interval.ms": (INT, "60000"),
    "log.flush.scheduler.interval.ms": (LONG, LONG_MAX),
    "log.index.interval.bytes": (INT, "4096"),
    "log.index.size.max.bytes": (INT, "10485760"),
    "log.local.retention.bytes": (LONG, "-2"),
    "log.local.retention.ms": (LONG, "-2"),
    "log.message.downconversion.enable": (BOOLEAN, "true"),
    "log.message.format.version": (STRING, "3.0-IV1"),
    "log.message.timestamp.after.max.ms": (LONG, LONG_MAX),
    "log.message.timestamp.before.max.ms": (LONG, LONG_MAX),
    "log.message.timestamp.difference.max.ms": (LONG, LONG_MAX),
    "log.message.timestamp.type": (STRING, "CreateTime"),
    "log.preallocate": (BOOLEAN, "false"),
    "log.retention.bytes": (LONG, "-1"),
    "log.retention.check.interval.ms": (LONG, "300000"),
    "log.retention.hours": (INT, "168"),
    "log.retention.minutes": (INT, None),
    "log.retention.ms": (LONG, None),
    "log.roll.hours": (INT, "168"),
    "log.roll.jitter.hours": (INT, "0"),
    "log.roll.jitter.ms": (LONG, None),
    "log.roll.ms": (LONG, None),
    "log.segment.bytes": (INT, "1073741824"),
    "log.segment.delete.delay.ms": (LONG, "60000"),
    "message.max.bytes": (INT, "1048588"),
    "max.connection.creation.rate": (INT, "2147483647"),
    "max.connections": (INT, "2147483647"),
    "max.connections.per.ip": (INT, "2147483647"),
    "max.connections.per.ip.overrides": (STRING, ""),
    "max.incremental.fetch.session.cache.slots": (INT, "1000"),
    "max.request.partition.size.limit": (INT, "2000"),
    "min.insync.replicas": (INT, "1"),
    "node.id": (INT, "-1"),
    "num.partitions": (INT, "1"),
    "num.replica.fetchers": (INT, "1"),
    "offset.metadata.max.bytes": (INT, "4096"),
    "offsets.commit.timeout.ms": (INT, "5000"),
    "offsets.retention.check.interval.ms": (LONG, "600000"),
    "offsets.retention.minutes": (INT, "10080"),
    "offsets.topic.num.partitions": (INT, "50"),
    "offsets.topic.replication.factor": (SHORT, "3"),
    "offsets.topic.segment.bytes": (INT, "104857600"),
    "process.roles": (LIST, ""),
    "producer.id.expiration.check.interval.ms": (INT, "600000"),
    "producer.id.expiration.ms": (INT, "86400000"),
    "queued.max.request.bytes": (LONG, "-1"),
    "quota.window.num": (INT, "11"),
    "quota.window.size.seconds": (INT, "1"),
    "alter.log.dirs.replication.quota.window.num": (INT, "11"),
    "alter.log.dirs.replication.quota.window.size.seconds": (INT, "1"),
    "replica.alter.log.dirs.io.max.bytes.per.second": (LONG, str(2**63 - 1)),
    "replica.fetch.backoff.ms": (INT, "1000"),
    "replica.fetch.max.bytes": (INT, "1048576"),
    "replica.fetch.min.bytes": (INT, "1"),
    "replica.fetch.wait.max.ms": (INT, "500"),
    "replica.high.watermark.checkpoint.interval.ms": (LONG, "5000"),
    "replica.lag.time.max.ms": (LONG, "30000"),
    "replica.selector.class": (STRING, None),
    "replication.quota.window.num": (INT, "11"),
    "replication.quota.window.size.seconds": (INT, "1"),
    "share.coordinator.snapshot.update.records.per.snapshot": (INT, "500"),
    "share.coordinator.state.topic.min.isr": (SHORT, "2"),
    "share.coordinator.state.topic.num.partitions": (INT, "50"),
    "share.coordinator.state.topic.replication.factor": (SHORT, "3"),
    "share.coordinator.state.topic.segment.bytes": (INT, "104857600"),
    "socket.request.max.bytes": (INT, "104857600"),
    "telemetry.max.bytes": (INT, "1048576"),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (INT, "10000"),
    "transaction.max.timeout.ms": (INT, "900000"),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (INT, "3600000"),
    "transaction.state.log.min.isr": (INT, "2"),
    "transaction.state.log.num.partitions": (INT, "50"),
    "transaction.state.log.replication.factor": (SHORT, "3"),
    "transaction.state.log.segment.bytes": (INT, "104857600"),
    "transactional.id.expiration.ms": (INT, "604800000"),
    "unclean.leader.election.enable": (BOOLEAN, "false"),
}

# The broker's security settings, as Kafka 4.4's DescribeConfigs of a broker lists them (name ->
# type, Kafka's default), those minibroker has a use or a place for: what its listeners read
# at start (broker/security/listeners.py), connections.max.reauth.ms included (librdkafka's
# re-authentication test 0142 reads it from here), and the SASL settings Kafka reconfigures.
# A PASSWORD is sensitive: described with a null value and is_sensitive, as Kafka does. Left
# out: the OAUTHBEARER, callback-handler and JVM-only (ssl.provider, key/trust manager
# algorithms) settings, which nothing here reads. Listener-prefixed settings
# (listener.name.<l>.<key>) are not listed, as Kafka does not list them.
SECURITY_CONFIG_DEFS: dict[str, tuple[int, str | None]] = {
    "connections.max.reauth.ms": (LONG, "0"),
    "principal.builder.class": (
        CLASS,
        "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",
    ),
    "sasl.enabled.mechanisms": (LIST, "GSSAPI"),
    "sasl.jaas.config": (PASSWORD, None),
    "sasl.kerberos.kinit.cmd": (STRING, "/usr/bin/kinit"),
    "sasl.kerberos.min.time.before.relogin": (LONG, "60000"),
    "sasl.kerberos.principal.to.local.rules": (LIST, "DEFAULT"),
    "sasl.kerberos.service.name": (STRING, None),
    "sasl.kerberos.ticket.renew.jitter": (DOUBLE, "0.05"),
    "sasl.kerberos.ticket.renew.window.factor": (DOUBLE, "0.8"),
    "sasl.login.refresh.buffer.seconds": (SHORT, "300"),
    "sasl.login.refresh.min.period.seconds": (SHORT, "60"),
    "sasl.login.refresh.window.factor": (DOUBLE, "0.8"),
    "sasl.login.refresh.window.jitter": (DOUBLE, "0.05"),
    "sasl.mechanism.controller.protocol": (STRING, "GSSAPI"),
    "sasl.mechanism.inter.broker.protocol": (STRING, "GSSAPI"),
    "sasl.server.max.receive.size": (INT, "524288"),
    "security.inter.broker.protocol": (STRING, "PLAINTEXT"),
    "ssl.cipher.suites": (LIST, ""),
    "ssl.client.auth": (STRING, "none"),
    "ssl.enabled.protocols": (LIST, "TLSv1.2,TLSv1.3"),
    "ssl.endpoint.identification.algorithm": (STRING, "https"),
    "ssl.key.password": (PASSWORD, None),
    "ssl.keystore.certificate.chain": (PASSWORD, None),
    "ssl.keystore.key": (PASSWORD, None),
    "ssl.keystore.location": (STRING, None),
    "ssl.keystore.password": (PASSWORD, None),
    "ssl.keystore.type": (STRING, "JKS"),
    "ssl.principal.mapping.rules": (STRING, "DEFAULT"),
    "ssl.protocol": (STRING, "TLSv1.3"),
    "ssl.truststore.certificates": (PASSWORD, None),
    "ssl.truststore.location": (STRING, None),
    "ssl.truststore.password": (PASSWORD, None),
    "ssl.truststore.type": (STRING, "JKS"),
}


def _broker_def(name: str) -> tuple[int, str | None]:
    """A broker property's (type, Kafka's default); (STRING, None) when not described."""
    return (
        BROKER_CONFIG_DEFS.get(name)
        or SECURITY_CONFIG_DEFS.get(name)
        or ((LONG, None) if name in REPLICATION_THROTTLE_RATES else None)
        or (STRING, None)
    )


# Kafka's groups of broker properties that set one value (DynamicBrokerConfig
# .brokerConfigSynonyms), most precise first.
_BROKER_SYNONYM_GROUPS = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)

# The broker properties that can be changed dynamically here: the first broker synonym of
# every topic config (Kafka's DynamicLogConfig.ReconfigurableConfigs, message.format.version
# excepted), mapped to the topic config each one sets.
DYNAMIC_BROKER_CONFIGS: dict[str, str] = {
    d.synonyms[0].name: d.name
    for d in TOPIC_CONFIG_DEFS.values()
    if d.synonyms and d.name != "message.format.version"
}

# Properties Kafka changes dynamically but minibroker does not (thread pools, listeners,
# the cleaner's buffers): refused with a message saying so, and not read-only in describes.
# advertised.listeners is not among them: Kafka 4 (KRaft) reports it read-only and refuses it
# as it refuses any static property.
UNSUPPORTED_DYNAMIC_CONFIGS = frozenset(
    {
        "background.threads",
        "listener.security.protocol.map",
        "listeners",
        "log.cleaner.backoff.ms",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.io.buffer.load.factor",
        "log.cleaner.io.buffer.size",
        "log.cleaner.io.max.bytes.per.second",
        "log.cleaner.threads",
        "max.connection.creation.rate",
        "max.connections",
        "max.connections.per.ip",
        "max.connections.per.ip.overrides",
        "metric.reporters",
        "num.io.threads",
        "num.network.threads",
        "num.recovery.threads.per.data.dir",
        "num.replica.fetchers",
        # Security settings Kafka reconfigures (DynamicListenerConfig.ReconfigurableConfigs,
        # and the key and trust stores with a listener prefix) that minibroker's listeners
        # read at start only: refused rather than stored without taking effect.
        "principal.builder.class",
        "sasl.enabled.mechanisms",
        "sasl.jaas.config",
        "sasl.mechanism.inter.broker.protocol",
        "ssl.cipher.suites",
        "ssl.client.auth",
        "ssl.enabled.protocols",
        "ssl.endpoint.identification.algorithm",
        "ssl.key.password",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.keystore.type",
        "ssl.protocol",
        "ssl.truststore.certificates",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.truststore.type",
    }
)

# Kafka's per-broker SASL reconfigurables (DynamicListenerConfig.ReconfigurableConfigs, in
# DynamicBrokerConfig.PerBrokerConfigs) that minibroker accepts, stores and describes but does
# not act on, with their types (Kafka's ConfigDef check of the value): the Kerberos settings
# (minibroker has no GSSAPI) and the refresh settings of a broker's own OAUTHBEARER or GSSAPI
# login (minibroker's nodes log in to each other with PLAIN or SCRAM, which do not refresh).
# As Kafka, they are set per broker only: the cluster default ("") refuses them.
KEPT_DYNAMIC_BROKER_CONFIGS: dict[str, int] = {
    name: SECURITY_CONFIG_DEFS[name][0]
    for name in (
        "sasl.kerberos.kinit.cmd",
        "sasl.kerberos.min.time.before.relogin",
        "sasl.kerberos.principal.to.local.rules",
        "sasl.kerberos.service.name",
        "sasl.kerberos.ticket.renew.jitter",
        "sasl.kerberos.ticket.renew.window.factor",
        "sasl.login.refresh.buffer.seconds",
        "sasl.login.refresh.min.period.seconds",
        "sasl.login.refresh.window.factor",
        "sasl.login.refresh.window.jitter",
    )
}

# The cluster-wide default Kafka 4.1+ reports for every broker (KIP-966): a new cluster with
# eligible leader replicas writes min.insync.replicas at the cluster level when it is
# formatted, so DescribeConfigs shows it as DYNAMIC_DEFAULT_BROKER_CONFIG, on the cluster
# default ("") and as the source of every broker's and topic's value. Departure: minibroker
# writes no such record; when the cluster default does not set min.insync.replicas, each node
# reports its own static value (or Kafka's default, 1) there, which is the value it enforces.
# Nodes started with different static values report different cluster values (Kafka has one).
# Kafka's refusals of a broker-level value and of deleting the cluster one ("... while ELR is
# enabled") are made by the controller (controller/configs.py, _check_min_isr_transition),
# whose ELR reads the same cluster default (controller/state.py, effective_min_isr).
CLUSTER_MIN_ISR = "min.insync.replicas"

# KIP-1066's cordoned.log.dirs (Kafka 4.4): a per-broker dynamic property (Kafka's
# DynamicBrokerConfig.PerBrokerConfigs), so the cluster default refuses it; the broker it names
# checks its entries against its own log.dirs (apis/configs.py) and its log manager acts on it.
PER_BROKER_LOG_DIR_CONFIGS: dict[str, int] = {"cordoned.log.dirs": LIST}

# Broker properties that can be changed dynamically here and set no topic config, with the
# least value Kafka's ConfigDef allows (INT, atLeast): producer.id.expiration.ms is Kafka's
# DynamicProducerStateManagerConfig; the log manager reads the value at each check.
DYNAMIC_BROKER_ONLY_CONFIGS: dict[str, int] = {"producer.id.expiration.ms": 1}

# KIP-73's broker-level replication throttles (Kafka's QuotaConfig, DynamicConfig.Broker): bytes
# a second, a LONG of at least 0, set per broker or at the cluster default; unset is unbounded
# (Long.MAX_VALUE). They are dynamic only (no static property, no DescribeConfigs entry until
# set), as in Kafka. A value that is not such a number is refused with INVALID_REQUEST and
# Kafka's message, as a running Kafka 4.4 refuses it (replication/replication_quota.py applies
# them).
# Kafka's QuotaConfig broker rates (LONG, at least 0, unbounded by default), dynamic per
# broker and as the cluster default: the leader's and the follower's (KIP-73), and the copy of
# a replica moving between this broker's log dirs (ReplicaAlterLogDirsThread's quota).
REPLICATION_THROTTLE_RATES = (
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
)


def validate_throttle_rate(name: str, text: str | None) -> int:
    """Kafka's ConfigDef check of a throttle rate (LONG, atLeast(0)): its value, or
    ValueError with Kafka's message."""
    stripped = (text or "").strip()
    try:
        value = int(stripped)
    except ValueError:
        value = None
    if value is None or not -(2**63) <= value < 2**63:
        raise ValueError(
            f"Invalid value {text} for configuration {name}: Not a number of type LONG"
        )
    if value < 0:
        raise ValueError(
            f"Invalid value {value} for configuration {name}: Value must be at least 0"
        )
    return value


class ConfigChangeError(KafkaError):
    """A refused change: the error code and message Kafka answers with (Kafka:
    ``InvalidConfigurationException`` or ``InvalidRequestException``, by ``error``)."""

    def __init__(self, error: Error, message: str) -> None:
        super().__init__(message, error)


@dataclass(frozen=True)
class BrokerLayers:
    """A broker's config sources above Kafka's defaults, highest precedence last."""

    static: dict[str, str]
    dynamic_default: dict[str, str]
    dynamic_broker: dict[str, str]

    def by_precedence(self) -> tuple[tuple[dict[str, str], int], ...]:
        return (
            (self.dynamic_broker, DYNAMIC_BROKER_CONFIG),
            (self.reported_default(), DYNAMIC_DEFAULT_BROKER_CONFIG),
            (self.static, STATIC_BROKER_CONFIG),
        )

    def reported_default(self) -> dict[str, str]:
        """The cluster default as Kafka 4.1+ reports it: with min.insync.replicas
        (CLUSTER_MIN_ISR), this node's static value when the cluster default does not set
        it."""
        if CLUSTER_MIN_ISR in self.dynamic_default:
            return self.dynamic_default
        static = self.static.get(CLUSTER_MIN_ISR)
        value = static.strip() if static is not None else BROKER_CONFIG_DEFS[CLUSTER_MIN_ISR][1]
        assert value is not None
        return {**self.dynamic_default, CLUSTER_MIN_ISR: value}


def _synonym(name: str, value: str | None, source: int) -> dict:
    return {"name": name, "value": value, "source": source}


def _entry(
    name: str,
    value: str | None,
    source: int,
    synonyms: list[dict],
    config_type: int,
    *,
    read_only: bool,
    include_synonyms: bool,
) -> dict:
    # A PASSWORD is never shown, nor are its synonyms' values (Kafka's ConfigHelper).
    sensitive = config_type == PASSWORD
    if sensitive:
        synonyms = [{**synonym, "value": None} for synonym in synonyms]
    return {
        "name": name,
        "value": None if sensitive else value,
        "read_only": read_only,
        "config_source": source,
        "is_default": source == DEFAULT_CONFIG,
        "is_sensitive": sensitive,
        "synonyms": synonyms if include_synonyms else [],
        "config_type": config_type,
        "documentation": None,
    }


def _wanted(name: str, keys: Iterable[str] | None) -> bool:
    return not keys or name in keys


def topic_synonyms(definition: TopicConfigDef, layers: BrokerLayers) -> list[dict]:
    """Every broker-side source of a topic config's default, in Kafka's order: each dynamic
    per-broker synonym, each dynamic cluster-default one, each static one, then the
    synonyms' Kafka defaults. Values are as set (log.retention.hours in hours)."""
    chain = [
        _synonym(synonym.name, layer[synonym.name], source)
        for layer, source in layers.by_precedence()
        for synonym in definition.synonyms
        if synonym.name in layer
    ]
    for synonym in definition.synonyms:
        default = BROKER_CONFIG_DEFS.get(synonym.name, (STRING, None))[1]
        if default is not None:
            chain.append(_synonym(synonym.name, default, DEFAULT_CONFIG))
    return chain


def _scaled(definition: TopicConfigDef, synonym_name: str, text: str) -> str:
    scale = next(s.scale for s in definition.synonyms if s.name == synonym_name)
    if scale == 1:
        return text
    return str(int(text.strip()) * scale)


def describe_topic(
    overrides: dict[str, str],
    layers: BrokerLayers,
    *,
    include_synonyms: bool,
    keys: Iterable[str] | None = None,
) -> list[dict]:
    """DescribeConfigs entries of a topic with these overrides, on a broker with these
    layers: every topic config (or those of ``keys``) with its value, source and synonyms."""
    entries = []
    for name, definition in TOPIC_CONFIG_DEFS.items():
        if not _wanted(name, keys):
            continue
        chain = topic_synonyms(definition, layers)
        if name in overrides:
            chain.insert(0, _synonym(name, overrides[name], DYNAMIC_TOPIC_CONFIG))
            value = overrides[name]
        elif chain:
            value = _scaled(definition, chain[0]["name"], chain[0]["value"])
        else:
            value = definition.default
        source = chain[0]["source"] if chain else DEFAULT_CONFIG
        entries.append(
            _entry(
                name,
                value,
                source,
                chain,
                definition.type,
                read_only=False,
                include_synonyms=include_synonyms,
            )
        )
    return entries


def _broker_synonym_names(name: str) -> tuple[str, ...]:
    for group in _BROKER_SYNONYM_GROUPS:
        if name in group:
            return group
    return (name,)


def describe_broker(
    layers: BrokerLayers,
    *,
    include_synonyms: bool,
    keys: Iterable[str] | None = None,
    cluster_default: bool = False,
) -> list[dict]:
    """DescribeConfigs entries of a broker resource: this broker's configs (its id), its
    security settings among them (SECURITY_CONFIG_DEFS), or with ``cluster_default`` the
    dynamic cluster defaults only (the resource named ""), min.insync.replicas always
    (CLUSTER_MIN_ISR)."""
    reported_default = layers.reported_default()
    names = (
        set(BROKER_CONFIG_DEFS)
        | set(SECURITY_CONFIG_DEFS)
        | set(layers.dynamic_broker)
        | set(reported_default)
    )
    if cluster_default:
        names = set(reported_default)
    entries = []
    for name in sorted(names):
        if not _wanted(name, keys):
            continue
        group = _broker_synonym_names(name)
        chain = [
            _synonym(synonym, layer[synonym], source)
            for layer, source in layers.by_precedence()
            for synonym in group
            if synonym in layer
        ]
        chain += [
            _synonym(synonym, _broker_def(synonym)[1], DEFAULT_CONFIG)
            for synonym in group
            if _broker_def(synonym)[1] is not None
        ]
        if cluster_default:
            chain = [s for s in chain if s["source"] == DYNAMIC_DEFAULT_BROKER_CONFIG]
        # As Kafka: the more precise synonyms before this name are not this name's sources.
        while chain and chain[0]["name"] != name:
            chain.pop(0)
        value = chain[0]["value"] if chain else None
        source = chain[0]["source"] if chain else DEFAULT_CONFIG
        read_only = (
            name not in DYNAMIC_BROKER_CONFIGS
            and name not in DYNAMIC_BROKER_ONLY_CONFIGS
            and name not in REPLICATION_THROTTLE_RATES
            and name not in UNSUPPORTED_DYNAMIC_CONFIGS
            and name not in KEPT_DYNAMIC_BROKER_CONFIGS
            and name not in PER_BROKER_LOG_DIR_CONFIGS
        )
        config_type = _broker_def(name)[0]
        entries.append(
            _entry(
                name,
                value,
                source,
                chain,
                config_type,
                read_only=read_only,
                include_synonyms=include_synonyms,
            )
        )
    return entries


# -- changes ------------------------------------------------------------------------------


def _check_no_duplicates(names: list[str]) -> None:
    if len(set(names)) != len(names):
        raise ConfigChangeError(Error.INVALID_REQUEST, "Error due to duplicate config keys")


def replaced_configs(configs: list[tuple[str, str | None]]) -> dict[str, str]:
    """A legacy AlterConfigs resource's new configs: the ones given, all others removed."""
    _check_no_duplicates([name for name, _ in configs])
    nulls = [name for name, value in configs if value is None]
    if nulls:
        raise ConfigChangeError(
            Error.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls)
        )
    return {name: value for name, value in configs if value is not None}


def is_list_config(name: str) -> bool:
    definition = TOPIC_CONFIG_DEFS.get(name)
    if definition is not None:
        return definition.type == LIST
    return _broker_def(name)[0] == LIST


def _default_text(name: str) -> str | None:
    definition = TOPIC_CONFIG_DEFS.get(name)
    if definition is not None:
        return definition.default
    return _broker_def(name)[1]


def incrementally_altered(
    current: dict[str, str],
    operations: list[tuple[str, int, str | None]],
    *,
    list_config=is_list_config,
) -> dict[str, str]:
    """``current`` after IncrementalAlterConfigs operations (name, operation, value), as
    Kafka's controller applies them: APPEND and SUBTRACT only on LIST configs, starting from
    the config's default when it is not set."""
    _check_no_duplicates([name for name, _, _ in operations])
    nulls = [name for name, operation, value in operations if operation != DELETE and value is None]
    if nulls:
        raise ConfigChangeError(
            Error.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls)
        )
    result = dict(current)
    for name, operation, value in operations:
        if operation == DELETE:
            result.pop(name, None)
            continue
        assert value is not None  # refused above: only DELETE may have a null value
        if operation == SET:
            result[name] = value
        elif operation in (APPEND, SUBTRACT):
            if not list_config(name):
                raise ConfigChangeError(
                    Error.INVALID_CONFIG,
                    f"Can't {_OPERATION_NAMES[operation]} to key {name} because its type is "
                    "not LIST.",
                )
            base = result.get(name, _default_text(name)) or ""
            parts = [part for part in base.split(",") if part]
            for item in value.split(","):
                if operation == APPEND and item not in parts:
                    parts.append(item)
                elif operation == SUBTRACT and item in parts:
                    parts.remove(item)
            result[name] = ",".join(parts)
        else:
            raise ConfigChangeError(Error.INVALID_REQUEST, f"Unknown operations type {operation}")
    return result


def validate_topic_overrides(configs: dict[str, str]) -> None:
    """Kafka's checks of a topic's complete set of overrides (INVALID_CONFIG)."""
    try:
        LogConfig.from_topic_configs(LogConfig(), configs)
    except ValueError as error:
        raise ConfigChangeError(Error.INVALID_CONFIG, str(error)) from None


def validate_broker_overrides(configs: dict[str, str], cluster_default: bool = False) -> None:
    """Kafka's checks of dynamic broker configs (DynamicBrokerConfig.validateConfigs, in its
    order: static properties, then each value's type, then per-broker properties at the
    cluster default); like Kafka (KAFKA-13609), a refusal is INVALID_REQUEST (a replication
    throttle rate's too: Kafka 4.4 measured). Properties
    Kafka cannot change dynamically are named together. ``cluster_default``: the resource
    named "", which refuses Kafka's per-broker properties (KEPT_DYNAMIC_BROKER_CONFIGS)."""
    unsupported = sorted(name for name in configs if name in UNSUPPORTED_DYNAMIC_CONFIGS)
    if unsupported:
        raise ConfigChangeError(
            Error.INVALID_REQUEST,
            f"minibroker does not support changing these configs dynamically: {unsupported}",
        )
    static_only = sorted(
        name
        for name in configs
        if name not in DYNAMIC_BROKER_CONFIGS
        and name not in DYNAMIC_BROKER_ONLY_CONFIGS
        and name not in KEPT_DYNAMIC_BROKER_CONFIGS
        and name not in PER_BROKER_LOG_DIR_CONFIGS
        and name not in REPLICATION_THROTTLE_RATES
    )
    if static_only:
        raise ConfigChangeError(
            Error.INVALID_REQUEST,
            f"Cannot update these configs dynamically: Set({', '.join(static_only)})",
        )
    for name, text in configs.items():
        try:
            if name in REPLICATION_THROTTLE_RATES:
                validate_throttle_rate(name, text)
            elif name in DYNAMIC_BROKER_ONLY_CONFIGS:
                _validate_int(name, text, DYNAMIC_BROKER_ONLY_CONFIGS[name])
            elif name in KEPT_DYNAMIC_BROKER_CONFIGS:
                _validate_type(name, text, KEPT_DYNAMIC_BROKER_CONFIGS[name])
            elif name in PER_BROKER_LOG_DIR_CONFIGS:
                parse_cordoned_log_dirs(text)
            else:
                validate_topic_config(DYNAMIC_BROKER_CONFIGS[name], text, shown_as=name)
        except ValueError as error:
            raise ConfigChangeError(Error.INVALID_REQUEST, str(error)) from None
    per_broker = sorted(
        name
        for name in configs
        if name in KEPT_DYNAMIC_BROKER_CONFIGS or name in PER_BROKER_LOG_DIR_CONFIGS
    )
    if cluster_default and per_broker:
        raise ConfigChangeError(
            Error.INVALID_REQUEST,
            "Cannot update these configs at default cluster level, broker id must be "
            f"specified: [{', '.join(per_broker)}]",
        )


_TYPE_NAMES = {SHORT: "SHORT", LONG: "LONG", DOUBLE: "DOUBLE"}
_INTEGER_BOUNDS = {SHORT: 2**15, LONG: 2**63}


def _validate_type(name: str, text: str, config_type: int) -> None:
    """Kafka's ConfigDef parse of a SHORT, LONG or DOUBLE value, with its message (other
    types take any text)."""
    if config_type not in _TYPE_NAMES:
        return
    stripped = (text or "").strip()
    try:
        if config_type == DOUBLE:
            float(stripped)
            return
        value = int(stripped)
        if -_INTEGER_BOUNDS[config_type] <= value < _INTEGER_BOUNDS[config_type]:
            return
    except ValueError:
        pass
    raise ValueError(
        f"Invalid value {text} for configuration {name}: Not a number of type "
        f"{_TYPE_NAMES[config_type]}"
    )


def _validate_int(name: str, text: str, lowest: int) -> int:
    """Kafka's ConfigDef check of an INT with atLeast(lowest), with its messages."""
    stripped = (text or "").strip()
    try:
        value = int(stripped)
    except ValueError:
        value = None
    if value is None or not -(2**31) <= value < 2**31:
        raise ValueError(f"Invalid value {text} for configuration {name}: Not a number of type INT")
    if value < lowest:
        raise ValueError(
            f"Invalid value {value} for configuration {name}: Value must be at least {lowest}"
        )
    return value


def dynamic_topic_defaults(
    dynamic_default: dict[str, str], dynamic_broker: dict[str, str]
) -> dict[str, str]:
    """The topic-config defaults that a broker's dynamic configs set, by topic config name
    (log.retention.ms -> retention.ms; every dynamic property is a topic config's first
    synonym, in the topic config's own unit). Per-broker values win over cluster ones."""
    merged = {**dynamic_default, **dynamic_broker}
    return {
        DYNAMIC_BROKER_CONFIGS[name]: value
        for name, value in merged.items()
        if name in DYNAMIC_BROKER_CONFIGS
    }


class DynamicBrokerConfigs:
    """What a broker knows of the dynamic broker configs (pushed by the controller): the
    cluster default ("") and its own, and the topic defaults they make of its static ones."""

    def __init__(self, node_id: int, static_defaults: LogConfig) -> None:
        self.node_id = node_id
        self.static_defaults = static_defaults
        self.by_resource: dict[str, dict[str, str]] = {}

    def layers(self, static: dict[str, str]) -> BrokerLayers:
        return BrokerLayers(
            static,
            self.by_resource.get("", {}),
            self.by_resource.get(str(self.node_id), {}),
        )

    def concerns_this_broker(self, resource_name: str) -> bool:
        return resource_name in ("", str(self.node_id))

    def replace(self, resource_name: str, configs: dict[str, str]) -> LogConfig:
        """Take a resource's new dynamic configs; returns the topic defaults they make."""
        self.by_resource[resource_name] = dict(configs)
        return self.topic_defaults()

    def broker_value(self, name: str, static: int) -> int:
        """A dynamic broker-only property's value (DYNAMIC_BROKER_ONLY_CONFIGS): this
        broker's dynamic value, else the cluster default's, else ``static``."""
        for resource_name in (str(self.node_id), ""):
            text = self.by_resource.get(resource_name, {}).get(name)
            if text is not None:
                return _validate_int(name, text, DYNAMIC_BROKER_ONLY_CONFIGS[name])
        return static

    def topic_defaults(self) -> LogConfig:
        dynamic = dynamic_topic_defaults(
            self.by_resource.get("", {}), self.by_resource.get(str(self.node_id), {})
        )
        return LogConfig.from_topic_configs(self.static_defaults, dynamic)


CORDON_ALL = "*"


def parse_cordoned_log_dirs(text: str | None) -> tuple[str, ...]:
    """cordoned.log.dirs as Kafka reads it (a LIST; `*` alone cordons every log dir):
    ValueError with Kafka's message for `*` among other entries."""
    entries = tuple(part.strip() for part in (text or "").split(",") if part.strip())
    if CORDON_ALL in entries and len(entries) > 1:
        raise ValueError("When cordoned.log.dirs is set to *, it must not contain other values")
    return entries


def check_cordoned_log_dirs(entries: tuple[str, ...], log_dirs) -> None:
    """Kafka's DynamicLogConfig check: each entry is one of the broker's log dirs (as
    configured), or the list is `*`; ValueError with Kafka's message."""
    configured = {str(directory) for directory in log_dirs}
    for entry in entries:
        if entry != CORDON_ALL and entry not in configured:
            raise ValueError(
                f"Invalid entry in cordoned.log.dirs: {entry}. All cordoned log dirs must be"
                " entries of log.dirs or log.dir."
            )
