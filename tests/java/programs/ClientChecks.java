// The Java client (kafka-clients) against a cluster: producer, consumer group and AdminClient
// checks in one JVM, printed as one JSON object on the last line of stdout. The pytest tests in
// tests/java judge the answers; the same program runs against Apache Kafka for comparison.
//
// Usage: java -cp <clients class path> ClientChecks.java <bootstrap> <prefix> <replication>
//        [<client properties file>]
// The optional properties file (security.protocol, sasl.*, ssl.* for a secured listener, say)
// is added to every client's configuration: the admin client, producers and consumers.
// Every step catches its own failure and reports it as {"error": "<exception class>: message"},
// so that one failing step does not hide the others' answers.

import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.acl.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.resource.*;
import org.apache.kafka.common.serialization.*;

public class ClientChecks {
    static String bootstrap;
    static String prefix;
    static short replication;
    static final Properties extra = new Properties();
    static final Duration POLL = Duration.ofMillis(100);
    static final long DEADLINE_MS = 30_000;

    interface Step {
        Object run() throws Exception;
    }

    static final Map<String, Long> timings = new LinkedHashMap<>();

    static Object timed(String name, Step step) {
        long start = System.nanoTime();
        try {
            return step(step);
        } finally {
            timings.put(name, (System.nanoTime() - start) / 1_000_000);
        }
    }

    static Object step(Step step) {
        try {
            return step.run();
        } catch (Throwable error) {
            Throwable cause = error instanceof ExecutionException && error.getCause() != null ? error.getCause() : error;
            return Map.of("error", cause.getClass().getSimpleName() + ": " + cause.getMessage());
        }
    }

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        prefix = args[1];
        replication = Short.parseShort(args[2]);
        if (args.length > 3) {
            try (java.io.Reader reader = new java.io.FileReader(args[3])) {
                extra.load(reader);
            }
        }
        Map<String, Object> out = new LinkedHashMap<>();
        Properties adminProps = new Properties();
        adminProps.putAll(extra);
        adminProps.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(adminProps)) {
            out.put("producer", timed("producer", () -> producer(admin)));
            out.put("consumer", timed("consumer", () -> consumer(admin)));
            out.put("admin", admin(admin));
            out.put("timings_ms", timings);
        }
        System.out.println(Json.write(out));
        System.out.flush();
        System.exit(0);
    }

    static Properties producerProps(String compression) {
        Properties props = new Properties();
        props.putAll(extra);
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, compression);
        return props; // otherwise the client's defaults: idempotent, acks=all
    }

    static Properties consumerProps(String group) {
        Properties props = new Properties();
        props.putAll(extra);
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        if (group != null) {
            props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
        }
        return props;
    }

    static void createTopic(Admin admin, String topic, int partitions) throws Exception {
        admin.createTopics(List.of(new NewTopic(topic, partitions, replication))).all().get(30, TimeUnit.SECONDS);
    }

    /** Every codec: 300 keyed records with the client's defaults, then read back by assignment. */
    static Object producer(Admin admin) throws Exception {
        Map<String, Object> result = new LinkedHashMap<>();
        for (String codec : List.of("none", "gzip", "snappy", "lz4", "zstd")) {
            result.put(codec, timed("codec " + codec, () -> {
                String topic = prefix + "-codec-" + codec;
                createTopic(admin, topic, 3);
                Map<String, Object> answer = new LinkedHashMap<>();
                Map<String, String> sent = new HashMap<>();
                List<Future<RecordMetadata>> futures = new ArrayList<>();
                try (KafkaProducer<String, String> producer = new KafkaProducer<>(producerProps(codec))) {
                    for (int i = 0; i < 300; i++) {
                        String key = "key-" + i;
                        String value = codec + "-value-" + i + "-" + "x".repeat(i % 50);
                        sent.put(key, value);
                        futures.add(producer.send(new ProducerRecord<>(topic, key, value)));
                    }
                    producer.flush();
                    Set<String> positions = new HashSet<>();
                    for (Future<RecordMetadata> future : futures) {
                        RecordMetadata metadata = future.get(30, TimeUnit.SECONDS);
                        positions.add(metadata.partition() + ":" + metadata.offset());
                    }
                    answer.put("acked", futures.size());
                    answer.put("distinct_positions", positions.size());
                }
                Map<String, String> read = new HashMap<>();
                try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerProps(null))) {
                    List<TopicPartition> partitions = new ArrayList<>();
                    for (int p = 0; p < 3; p++) partitions.add(new TopicPartition(topic, p));
                    consumer.assign(partitions);
                    consumer.seekToBeginning(partitions);
                    long deadline = System.currentTimeMillis() + DEADLINE_MS;
                    while (read.size() < sent.size() && System.currentTimeMillis() < deadline) {
                        for (ConsumerRecord<String, String> record : consumer.poll(POLL)) {
                            read.put(record.key(), record.value());
                        }
                    }
                }
                answer.put("read", read.size());
                answer.put("read_equals_sent", read.equals(sent));
                return answer;
            }));
        }
        return result;
    }

    static long drain(KafkaConsumer<String, String> consumer, Map<TopicPartition, Long> next, int rounds) {
        long count = 0;
        for (int i = 0; i < rounds; i++) {
            for (ConsumerRecord<String, String> record : consumer.poll(POLL)) {
                count++;
                next.put(new TopicPartition(record.topic(), record.partition()), record.offset() + 1);
            }
        }
        return count;
    }

    /** Subscribe, poll, commitSync, a second member and the rebalance, commitAsync, seek,
     * offsetsForTimes, endOffsets; the group stays behind for the AdminClient checks. */
    static Object consumer(Admin admin) throws Exception {
        String topic = prefix + "-group";
        String group = prefix + "-group";
        createTopic(admin, topic, 2);
        long before = System.currentTimeMillis();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(producerProps("none"))) {
            for (int i = 0; i < 100; i++) {
                producer.send(new ProducerRecord<>(topic, i % 2, before + i, "k" + i, "v" + i));
            }
            producer.flush();
        }
        Map<String, Object> answer = new LinkedHashMap<>();
        try (KafkaConsumer<String, String> first = new KafkaConsumer<>(consumerProps(group));
             KafkaConsumer<String, String> second = new KafkaConsumer<>(consumerProps(group))) {
            first.subscribe(List.of(topic));
            Map<TopicPartition, Long> next = new HashMap<>();
            long deadline = System.currentTimeMillis() + DEADLINE_MS;
            long consumed = 0;
            while (consumed < 100 && System.currentTimeMillis() < deadline) {
                consumed += drain(first, next, 1);
            }
            answer.put("first_assignment", first.assignment().size());
            answer.put("first_consumed", consumed);
            Map<TopicPartition, OffsetAndMetadata> commit = new HashMap<>();
            next.forEach((tp, offset) -> commit.put(tp, new OffsetAndMetadata(offset)));
            first.commitSync(commit);
            Map<TopicPartition, OffsetAndMetadata> committed = first.committed(new HashSet<>(commit.keySet()));
            long committedSum = 0;
            for (OffsetAndMetadata offset : committed.values()) committedSum += offset == null ? -1 : offset.offset();
            answer.put("committed_sum", committedSum);

            second.subscribe(List.of(topic));
            deadline = System.currentTimeMillis() + DEADLINE_MS;
            while ((first.assignment().size() != 1 || second.assignment().size() != 1)
                    && System.currentTimeMillis() < deadline) {
                first.poll(POLL);
                second.poll(POLL);
            }
            answer.put("rebalanced_sizes", List.of(first.assignment().size(), second.assignment().size()));
            Set<TopicPartition> union = new HashSet<>(first.assignment());
            union.addAll(second.assignment());
            answer.put("rebalanced_union", union.size());
            // Each member resumes from the committed offset: nothing left to read.
            answer.put("after_rebalance_records", drain(first, new HashMap<>(), 3) + drain(second, new HashMap<>(), 3));

            CompletableFuture<String> async = new CompletableFuture<>();
            TopicPartition own = first.assignment().iterator().next();
            first.commitAsync(Map.of(own, new OffsetAndMetadata(40)), (offsets, error) ->
                    async.complete(error == null ? "ok" : error.getClass().getSimpleName()));
            deadline = System.currentTimeMillis() + DEADLINE_MS;
            while (!async.isDone() && System.currentTimeMillis() < deadline) first.poll(POLL);
            answer.put("commit_async", async.getNow("timeout"));
            answer.put("commit_async_committed", first.committed(Set.of(own)).get(own).offset());

            first.seek(own, 7);
            List<Long> offsets = new ArrayList<>();
            deadline = System.currentTimeMillis() + DEADLINE_MS;
            while (offsets.isEmpty() && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> record : first.poll(POLL)) offsets.add(record.offset());
            }
            answer.put("seek_first_offset", offsets.isEmpty() ? -1 : offsets.get(0));

            TopicPartition p0 = new TopicPartition(topic, 0);
            TopicPartition p1 = new TopicPartition(topic, 1);
            // Partition 0 has the even records (timestamps before+0, +2, ...): before+10 is offset 5.
            Map<TopicPartition, OffsetAndTimestamp> times = first.offsetsForTimes(Map.of(p0, before + 10, p1, before + 1000));
            answer.put("offsets_for_times_p0", times.get(p0) == null ? null : times.get(p0).offset());
            answer.put("offsets_for_times_p0_timestamp", times.get(p0) == null ? null : times.get(p0).timestamp() - before);
            answer.put("offsets_for_times_p1_after_last", times.get(p1) == null ? "null" : "" + times.get(p1).offset());
            Map<TopicPartition, Long> ends = first.endOffsets(List.of(p0, p1));
            answer.put("end_offsets", List.of(ends.get(p0), ends.get(p1)));
            Map<TopicPartition, Long> begins = first.beginningOffsets(List.of(p0, p1));
            answer.put("beginning_offsets", List.of(begins.get(p0), begins.get(p1)));
            // The group must be empty for alterConsumerGroupOffsets and deleteConsumerGroups.
            first.unsubscribe();
            second.unsubscribe();
        }
        return answer;
    }

    static Map<String, Object> admin(Admin admin) {
        Map<String, Object> out = new LinkedHashMap<>();
        String topic = prefix + "-admin";
        String group = prefix + "-group";
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        out.put("create_topic", timed("create_topic", () -> {
            admin.createTopics(List.of(new NewTopic(topic, 2, replication).configs(Map.of("retention.ms", "3600000"))))
                    .all().get(30, TimeUnit.SECONDS);
            return "ok";
        }));
        out.put("create_existing", timed("create_existing", () -> {
            admin.createTopics(List.of(new NewTopic(topic, 2, replication))).all().get(30, TimeUnit.SECONDS);
            return "ok";
        }));
        out.put("list_topics", timed("list_topics", () -> admin.listTopics().names().get().contains(topic)));
        out.put("describe_topics", timed("describe_topics", () -> {
            TopicDescription description = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            List<Object> partitions = new ArrayList<>();
            for (TopicPartitionInfo info : description.partitions()) {
                partitions.add(Map.of("partition", info.partition(), "replicas", info.replicas().size(),
                        "isr", info.isr().size(), "has_leader", info.leader() != null));
            }
            return Map.of("partitions", partitions, "has_topic_id", description.topicId() != null
                    && !description.topicId().equals(Uuid.ZERO_UUID));
        }));
        out.put("create_partitions", timed("create_partitions", () -> {
            admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(4))).all().get(30, TimeUnit.SECONDS);
            long deadline = System.currentTimeMillis() + DEADLINE_MS;
            int count = 0;
            while (System.currentTimeMillis() < deadline) {
                count = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size();
                if (count == 4) break;
                Thread.sleep(100);
            }
            return count;
        }));
        out.put("describe_cluster", timed("describe_cluster", () -> {
            DescribeClusterResult cluster = admin.describeCluster();
            return Map.of("nodes", cluster.nodes().get().size(), "has_controller", cluster.controller().get() != null,
                    "has_cluster_id", cluster.clusterId().get() != null);
        }));
        out.put("describe_configs", timed("describe_configs", () -> {
            Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
            return Map.of("retention.ms", config.get("retention.ms").value(),
                    "retention.ms.source", config.get("retention.ms").source().name(),
                    "cleanup.policy", config.get("cleanup.policy").value(),
                    "cleanup.policy.default", config.get("cleanup.policy").isDefault());
        }));
        out.put("incremental_alter_configs", timed("incremental_alter_configs", () -> {
            admin.incrementalAlterConfigs(Map.of(resource, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.SET))))
                    .all().get(30, TimeUnit.SECONDS);
            // Kafka applies the change through its metadata log: a describe right after the
            // answer may still see the old values on another broker, so poll for a while.
            long deadline = System.currentTimeMillis() + DEADLINE_MS;
            Config config;
            do {
                config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
                if (config.get("cleanup.policy").value().equals("compact")) break;
                Thread.sleep(100);
            } while (System.currentTimeMillis() < deadline);
            return Map.of("retention.ms", config.get("retention.ms").value(),
                    "cleanup.policy", config.get("cleanup.policy").value());
        }));
        out.put("describe_broker_config", timed("describe_broker_config", () -> {
            String id = String.valueOf(admin.describeCluster().nodes().get().iterator().next().id());
            ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, id);
            Config config = admin.describeConfigs(List.of(broker)).all().get().get(broker);
            ConfigEntry entry = config.get("log.retention.hours");
            return Map.of("has_entries", config.entries().size() > 0, "log.retention.hours", entry == null ? "absent" : entry.value());
        }));
        String groupTopic = prefix + "-group";
        TopicPartition g0 = new TopicPartition(groupTopic, 0);
        TopicPartition g1 = new TopicPartition(groupTopic, 1);
        out.put("list_groups", timed("list_groups", () -> {
            for (ConsumerGroupListing listing : admin.listConsumerGroups().all().get()) {
                if (listing.groupId().equals(group)) return Map.of("listed", true, "state", String.valueOf(listing.groupState().orElse(null)));
            }
            return Map.of("listed", false);
        }));
        out.put("describe_group", timed("describe_group", () -> {
            ConsumerGroupDescription description = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            return Map.of("state", description.groupState().toString(), "members", description.members().size(),
                    "protocol", description.partitionAssignor(), "type", description.type().toString());
        }));
        out.put("list_group_offsets", timed("list_group_offsets", () -> {
            Map<TopicPartition, OffsetAndMetadata> offsets = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            List<Long> answer = new ArrayList<>();
            for (TopicPartition tp : List.of(g0, g1)) answer.add(offsets.containsKey(tp) ? offsets.get(tp).offset() : -1L);
            return answer;
        }));
        out.put("alter_group_offsets", timed("alter_group_offsets", () -> {
            admin.alterConsumerGroupOffsets(group, Map.of(g0, new OffsetAndMetadata(3), g1, new OffsetAndMetadata(4)))
                    .all().get(30, TimeUnit.SECONDS);
            Map<TopicPartition, OffsetAndMetadata> offsets = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            return List.of(offsets.get(g0).offset(), offsets.get(g1).offset());
        }));
        out.put("delete_group_offsets", timed("delete_group_offsets", () -> {
            admin.deleteConsumerGroupOffsets(group, Set.of(g1)).all().get(30, TimeUnit.SECONDS);
            return admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get().containsKey(g1);
        }));
        out.put("list_offsets", timed("list_offsets", () -> {
            Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> earliest =
                    admin.listOffsets(Map.of(g0, OffsetSpec.earliest())).all().get();
            Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> latest =
                    admin.listOffsets(Map.of(g0, OffsetSpec.latest())).all().get();
            Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> maxTimestamp =
                    admin.listOffsets(Map.of(g0, OffsetSpec.maxTimestamp())).all().get();
            return Map.of("earliest", earliest.get(g0).offset(), "latest", latest.get(g0).offset(),
                    "max_timestamp_offset", maxTimestamp.get(g0).offset());
        }));
        out.put("delete_records", timed("delete_records", () -> {
            long low = admin.deleteRecords(Map.of(g0, RecordsToDelete.beforeOffset(10))).lowWatermarks()
                    .get(g0).get(30, TimeUnit.SECONDS).lowWatermark();
            long earliest = admin.listOffsets(Map.of(g0, OffsetSpec.earliest())).all().get().get(g0).offset();
            return Map.of("low_watermark", low, "earliest_after", earliest);
        }));
        out.put("delete_group", timed("delete_group", () -> {
            admin.deleteConsumerGroups(List.of(group)).all().get(30, TimeUnit.SECONDS);
            for (ConsumerGroupListing listing : admin.listConsumerGroups().all().get()) {
                if (listing.groupId().equals(group)) return "still listed";
            }
            return "ok";
        }));
        out.put("describe_acls", timed("describe_acls", () -> admin.describeAcls(AclBindingFilter.ANY).values().get().size()));
        out.put("scram", timed("scram", () -> {
            String user = prefix + "-user";
            admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(user,
                    new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), "secret"))).all().get(30, TimeUnit.SECONDS);
            UserScramCredentialsDescription description = admin.describeUserScramCredentials(List.of(user)).all().get().get(user);
            ScramCredentialInfo info = description.credentialInfos().get(0);
            admin.alterUserScramCredentials(List.of(new UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)))
                    .all().get(30, TimeUnit.SECONDS);
            return Map.of("mechanism", info.mechanism().mechanismName(), "iterations", info.iterations());
        }));
        out.put("delete_topic", timed("delete_topic", () -> {
            admin.deleteTopics(List.of(topic)).all().get(30, TimeUnit.SECONDS);
            long deadline = System.currentTimeMillis() + DEADLINE_MS;
            while (System.currentTimeMillis() < deadline) {
                if (!admin.listTopics().names().get().contains(topic)) return "ok";
                Thread.sleep(100);
            }
            return "still listed";
        }));
        return out;
    }

    /** Just enough JSON for maps, lists, strings, numbers, booleans and null. */
    static class Json {
        static String write(Object value) {
            StringBuilder out = new StringBuilder();
            write(out, value);
            return out.toString();
        }

        static void write(StringBuilder out, Object value) {
            if (value == null) {
                out.append("null");
            } else if (value instanceof Map<?, ?> map) {
                out.append('{');
                boolean first = true;
                for (Map.Entry<?, ?> entry : map.entrySet()) {
                    if (!first) out.append(',');
                    first = false;
                    write(out, String.valueOf(entry.getKey()));
                    out.append(':');
                    write(out, entry.getValue());
                }
                out.append('}');
            } else if (value instanceof Collection<?> list) {
                out.append('[');
                boolean first = true;
                for (Object item : list) {
                    if (!first) out.append(',');
                    first = false;
                    write(out, item);
                }
                out.append(']');
            } else if (value instanceof Number || value instanceof Boolean) {
                out.append(value);
            } else {
                out.append('"');
                for (char c : value.toString().toCharArray()) {
                    if (c == '"' || c == '\\') out.append('\\').append(c);
                    else if (c < 0x20) out.append(String.format("\\u%04x", (int) c));
                    else out.append(c);
                }
                out.append('"');
            }
        }
    }
}
