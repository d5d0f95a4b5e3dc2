"""ACLs enforced on real clients' requests: produce, fetch, metadata, topic administration.

Every client under test connects as User:ANONYMOUS on PLAINTEXT (see authz.py); the ACLs name
it, or User:* for everyone. The tests share brokers (tests/integration/conftest.py's
``secured``): one per broker configuration, started by the first test that asks and kept for
the module. Each broker also has a SASL_PLAINTEXT listener where User:admin, a super user,
grants a test's ACLs before it starts (waiting until the broker's own copy holds them) and
deletes them, by filters naming exactly those bindings, when it ends; so each test sees only
the node's CLUSTER_ACTION and its own ACLs, and uses topics, groups and users of its own.
"""

import pytest
from confluent_kafka import (
    Consumer,
    ElectionType,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
)
from confluent_kafka.admin import ResourceType as AdminResourceType
from kio.schema.alter_replica_log_dirs.v2.request import (
    AlterReplicaLogDir,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirTopic,
)
from kio.schema.describe_cluster.v0.request import DescribeClusterRequest
from kio.schema.describe_log_dirs.v3.request import (
    DescribeLogDirsRequest as DescribeLogDirsRequestV3,
)
from kio.schema.describe_user_scram_credentials.v0.request import (
    DescribeUserScramCredentialsRequest,
    UserName,
)
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from minibroker.security.authorizer import acls as model
from minibroker.security.authorizer.acls import Operation, PatternType, Permission, ResourceType
from tests.conftest import exchange, wait_for
from tests.integration.authz import (
    binding,
    on_cluster,
)

READ, WRITE, DESCRIBE = Operation.READ, Operation.WRITE, Operation.DESCRIBE
DENY = Permission.DENY
# Topics are made by the test's admin client: CREATE on the cluster.
MAY_CREATE = on_cluster(Operation.CREATE)


def create(bootstrap: str, *topics: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(15)


def produce_error(bootstrap: str, topic: str) -> int:
    """Produce one record; the delivery report's error code (0 for delivered)."""
    reports = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000})
    producer.produce(topic, b"value", on_delivery=lambda error, _: reports.append(error))
    producer.flush(15)
    assert len(reports) == 1
    return 0 if reports[0] is None else reports[0].code()


def end_offset(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def test_produce_without_write_is_refused_and_appends_nothing(secured):
    broker = secured([MAY_CREATE, binding("guarded", READ)])
    create(broker.bootstrap, "guarded")
    assert produce_error(broker.bootstrap, "guarded") == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert end_offset(broker.bootstrap, "guarded") == 0


def test_produce_and_consume_with_the_acls_for_them(secured):
    broker = secured([MAY_CREATE, binding("open", WRITE), binding("open", READ)])
    create(broker.bootstrap, "open")
    assert produce_error(broker.bootstrap, "open") == 0
    assert end_offset(broker.bootstrap, "open") == 1


def test_deny_wins_over_an_allow_for_everyone(secured):
    broker = secured(
        [
            MAY_CREATE,
            binding("mixed", Operation.ALL, principal="User:*"),
            binding("mixed", WRITE, DENY),
        ]
    )
    create(broker.bootstrap, "mixed")
    assert produce_error(broker.bootstrap, "mixed") == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert end_offset(broker.bootstrap, "mixed") == 0  # DESCRIBE still allowed by ALL


def test_prefixed_acls_cover_the_topics_they_start(secured):
    broker = secured(
        [
            MAY_CREATE,
            binding("team-", WRITE, pattern=PatternType.PREFIXED),
            binding("*", DESCRIBE),
        ]
    )
    create(broker.bootstrap, "team-a", "other-a")
    assert produce_error(broker.bootstrap, "team-a") == 0
    assert produce_error(broker.bootstrap, "other-a") == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert end_offset(broker.bootstrap, "other-a") == 0


def test_fetch_without_read_is_refused(secured):
    broker = secured([MAY_CREATE, binding("unread", WRITE)])
    create(broker.bootstrap, "unread")
    assert produce_error(broker.bootstrap, "unread") == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unread-g"})
    try:
        consumer.assign([TopicPartition("unread", 0, 0)])

        def refused():
            message = consumer.poll(0.5)
            error = message.error() if message is not None else None
            # librdkafka also looks up the consumer's group, which no ACL here allows: that
            # refusal may come first, and is not the one under test.
            if error is None or error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                return None
            return error

        error = wait_for(refused, 15, "the fetch to be refused")
        assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        consumer.close()


def test_metadata_hides_topics_without_describe(secured):
    broker = secured([MAY_CREATE, binding("visible", DESCRIBE)])
    create(broker.bootstrap, "visible", "hidden")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert set(admin.list_topics(timeout=10).topics) == {"visible"}
    named = admin.list_topics(topic="hidden", timeout=10).topics["hidden"]
    assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_auto_creation_needs_create(secured):
    broker = secured([binding("*", DESCRIBE)])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    named = admin.list_topics(topic="wanted", timeout=10).topics["wanted"]
    assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert "wanted" not in admin.list_topics(timeout=10).topics


def test_topic_administration_needs_create_delete_and_alter(secured):
    broker = secured([binding("kept", Operation.CREATE), binding("kept", DESCRIBE)])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic("kept", 1, 1), NewTopic("refused", 1, 1)])
    futures["kept"].result(15)
    with pytest.raises(KafkaException) as refused:
        futures["refused"].result(15)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as refused:
        admin.delete_topics(["kept"])["kept"].result(15)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as refused:
        admin.create_partitions([NewPartitions("kept", 2)])["kept"].result(15)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert len(admin.list_topics(timeout=10).topics["kept"].partitions) == 1


def test_super_users_need_no_acls(secured):
    broker = secured(node_acls=(), overrides={"super.users": "User:admin;User:ANONYMOUS"})
    create(broker.bootstrap, "anything")
    assert produce_error(broker.bootstrap, "anything") == 0
    assert end_offset(broker.bootstrap, "anything") == 1


def test_allow_everyone_if_no_acl_found(secured):
    broker = secured(
        [MAY_CREATE, binding("closed", READ, principal="User:someone-else")],
        overrides={"allow.everyone.if.no.acl.found": "true"},
    )
    create(broker.bootstrap, "free", "closed")
    # No ACL names "free": everyone may; one names "closed", for someone else only.
    assert produce_error(broker.bootstrap, "free") == 0
    assert produce_error(broker.bootstrap, "closed") == KafkaError.TOPIC_AUTHORIZATION_FAILED


GROUP = ResourceType.GROUP


def group_acl(name: str, operation: Operation, permission=Permission.ALLOW):
    return binding(name, operation, permission, resource_type=GROUP)


def consumer_of(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )


def test_joining_a_group_needs_read_on_it(secured):
    broker = secured([MAY_CREATE, binding("joined", READ), group_acl("readers", DESCRIBE)])
    create(broker.bootstrap, "joined")
    consumer = consumer_of(broker.bootstrap, "readers")
    try:
        consumer.subscribe(["joined"])

        def refused():
            message = consumer.poll(0.5)
            return message is not None and message.error() is not None and message.error()

        error = wait_for(refused, 20, "the join to be refused")
        assert error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()


def test_commits_need_read_on_the_group_and_the_topic(secured):
    broker = secured(
        [
            MAY_CREATE,
            binding("allowed", READ),
            binding("forbidden", DESCRIBE),
            group_acl("committer", READ),
        ]
    )
    create(broker.bootstrap, "allowed", "forbidden")
    consumer = consumer_of(broker.bootstrap, "committer")
    try:
        # librdkafka raises the first partition error of a synchronous commit.
        with pytest.raises(KafkaException) as refused:
            consumer.commit(
                offsets=[TopicPartition("allowed", 0, 0), TopicPartition("forbidden", 0, 0)],
                asynchronous=False,
            )
        assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        committed = consumer.committed([TopicPartition("allowed", 0)], timeout=10)
        assert committed[0].offset == 0
    finally:
        consumer.close()


def test_groups_are_listed_described_and_deleted_only_as_the_acls_say(secured):
    broker = secured(
        [
            MAY_CREATE,
            # ALTER (to delete ACLs below) implies DESCRIBE on the cluster, which would show
            # every group: denied here.
            on_cluster(Operation.ALTER),
            binding(
                model.CLUSTER_NAME, DESCRIBE, Permission.DENY, resource_type=ResourceType.CLUSTER
            ),
            binding("listed", READ),
            group_acl("mine", READ),
            group_acl("theirs", READ),
        ]
    )
    create(broker.bootstrap, "listed")
    for group in ("mine", "theirs"):
        consumer = consumer_of(broker.bootstrap, group)
        try:
            consumer.commit(offsets=[TopicPartition("listed", 0, 0)], asynchronous=False)
        finally:
            consumer.close()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    theirs = AclBindingFilter(
        AdminResourceType.GROUP,
        "theirs",
        ResourcePatternType.LITERAL,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    admin.delete_acls([theirs])[theirs].result(15)
    listed = admin.list_consumer_groups().result(15)
    assert {group.group_id for group in listed.valid} == {"mine"}
    [described] = admin.describe_consumer_groups(["theirs"]).values()
    with pytest.raises(KafkaException) as refused:
        described.result(15)
    assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    [deleted] = admin.delete_consumer_groups(["mine"]).values()
    with pytest.raises(KafkaException) as refused:
        deleted.result(15)
    assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_configs_need_describe_configs_and_alter_configs(secured):
    broker = secured(
        [
            MAY_CREATE,
            binding("tuned", Operation.DESCRIBE_CONFIGS),
            binding("tuned-g", Operation.DESCRIBE_CONFIGS, resource_type=ResourceType.GROUP),
        ]
    )
    create(broker.bootstrap, "tuned")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = ConfigResource(ConfigResource.Type.TOPIC, "tuned")
    assert "retention.ms" in admin.describe_configs([topic])[topic].result(15)
    node = ConfigResource(ConfigResource.Type.BROKER, str(broker.node_id))
    with pytest.raises(KafkaException) as refused:
        admin.describe_configs([node])[node].result(15)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    change = ConfigResource(
        ConfigResource.Type.TOPIC,
        "tuned",
        incremental_configs=[
            ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([change])[change].result(15)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    entries = admin.describe_configs([topic])[topic].result(15)
    assert entries["retention.ms"].value == "604800000"
    # Group configs: DESCRIBE_CONFIGS and ALTER_CONFIGS on the group (Kafka's rule).
    group = ConfigResource(AdminResourceType.GROUP, "tuned-g")
    assert "consumer.session.timeout.ms" in admin.describe_configs([group])[group].result(15)
    other = ConfigResource(AdminResourceType.GROUP, "other-g")
    with pytest.raises(KafkaException) as refused:
        admin.describe_configs([other])[other].result(15)
    assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    group_change = ConfigResource(
        AdminResourceType.GROUP,
        "tuned-g",
        incremental_configs=[
            ConfigEntry(
                "consumer.session.timeout.ms", "50000", incremental_operation=AlterConfigOpType.SET
            )
        ],
    )
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([group_change])[group_change].result(15)
    assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_cluster_descriptions_are_open_and_record_deletion_needs_delete(secured):
    broker = secured([MAY_CREATE, binding("trimmed", WRITE)])
    create(broker.bootstrap, "trimmed")
    assert produce_error(broker.bootstrap, "trimmed") == 0
    # Anyone may describe the cluster, as in Kafka; without DESCRIBE on it, the authorized
    # operations asked for are none. (librdkafka's describe_cluster sends Metadata: the raw
    # DescribeCluster.)
    described = exchange(
        broker.bootstrap, DescribeClusterRequest(include_cluster_authorized_operations=True)
    )
    assert described.error_code == ErrorCode.none
    assert len(described.brokers) == 1
    assert described.cluster_authorized_operations == 0
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    [deleted] = admin.delete_records([TopicPartition("trimmed", 0, 1)]).values()
    with pytest.raises(KafkaException) as refused:
        deleted.result(15)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_idempotent_producers_need_write_on_some_topic(secured):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as KafkaPythonError

    broker = secured([MAY_CREATE, binding("written", WRITE), binding("read-only", READ)])
    create(broker.bootstrap, "written", "read-only")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    try:
        producer.send("written", b"value").get(timeout=15)
    finally:
        producer.close()
    assert end_offset(broker.bootstrap, "written") == 1

    # Now READ on "read-only" and CREATE on the cluster only: WRITE on no topic.
    secured.revoke(broker, [binding("written", WRITE)])
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    try:
        # kafka-python wraps the InitProducerId answer in a fatal error naming it.
        with pytest.raises(KafkaPythonError, match="ClusterAuthorizationFailedError"):
            producer.send("read-only", b"value").get(timeout=15)
    finally:
        producer.close(timeout=5)
    assert end_offset(broker.bootstrap, "read-only") == 0


def test_log_dirs_and_elections_need_describe_and_alter_on_the_cluster(secured):
    broker = secured([MAY_CREATE, binding("elected", DESCRIBE)])
    create(broker.bootstrap, "elected")
    # DescribeLogDirs v3 is the first with a top-level error code.
    described = exchange(broker.bootstrap, DescribeLogDirsRequestV3(topics=None))
    assert described.error_code == ErrorCode.cluster_authorization_failed
    assert described.results == ()
    # AlterReplicaLogDirs needs ALTER on the cluster: every partition refused, none moved.
    moved = exchange(
        broker.bootstrap,
        AlterReplicaLogDirsRequest(
            dirs=(
                AlterReplicaLogDir(
                    path="/elsewhere",
                    topics=(AlterReplicaLogDirTopic(name="elected", partitions=(i32(0),)),),
                ),
            )
        ),
    )
    assert [
        (result.topic_name, partition.partition_index, partition.error_code)
        for result in moved.results
        for partition in result.partitions
    ] == [("elected", 0, ErrorCode.cluster_authorization_failed)]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with pytest.raises(KafkaException) as refused:
        admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("elected", 0)]).result(15)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_scram_users_need_alter_and_describe_on_the_cluster(secured):
    """As in Kafka: AlterUserScramCredentials needs ALTER on the cluster and
    DescribeUserScramCredentials DESCRIBE; a refused one creates no user."""
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    broker = secured()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    [created] = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("mallory", info, b"secret")]
    ).values()
    with pytest.raises(KafkaException) as refused:
        created.result(15)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # (confluent-kafka 2.16's describe_user_scram_credentials died with SIGSEGV here on the
    # answer's top-level error, so that answer is read raw.)
    hidden = exchange(
        broker.bootstrap,
        DescribeUserScramCredentialsRequest(users=(UserName(name="mallory"),)),
    )
    assert hidden.error_code == ErrorCode.cluster_authorization_failed
    assert hidden.results == ()

    secured.grant(broker, [on_cluster(Operation.ALTER), on_cluster(Operation.DESCRIBE)])
    [created] = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("alice", info, b"secret")]
    ).values()
    created.result(15)
    described = admin.describe_user_scram_credentials(["alice"])["alice"].result(15)
    assert [item.iterations for item in described.scram_credential_infos] == [8192]


def test_authorized_operations_are_the_principals_when_asked(secured):
    """KIP-430: confluent-kafka's describe_topics and describe_cluster with
    include_authorized_operations get the principal's operations (Metadata's topic field,
    the cluster's through Metadata v8-10 as librdkafka asks), not none."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation

    broker = secured(
        [MAY_CREATE, binding("seen", Operation.DESCRIBE), on_cluster(Operation.DESCRIBE)]
    )
    create(broker.bootstrap, "seen")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    [future] = admin.describe_topics(
        TopicCollection(["seen"]), include_authorized_operations=True
    ).values()
    assert future.result(15).authorized_operations == [AclOperation.DESCRIBE]
    cluster = admin.describe_cluster(include_authorized_operations=True).result(15)
    assert set(cluster.authorized_operations) == {
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE,
    }
    described = exchange(
        broker.bootstrap, DescribeClusterRequest(include_cluster_authorized_operations=True)
    )
    assert described.cluster_authorized_operations == (
        1 << Operation.CREATE | 1 << Operation.CLUSTER_ACTION | 1 << Operation.DESCRIBE
    )
