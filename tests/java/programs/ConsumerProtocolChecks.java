// The Java client's consumer group protocol (KIP-848, group.protocol=consumer: kafka-clients'
// AsyncKafkaConsumer) against a cluster: two members of one group share a topic of 6
// partitions, read every record and commit; the group is described with the AdminClient.
// Prints one JSON object on the last line of stdout; tests/java/test_consumer_protocol.py
// judges it.
//
// Usage: java -cp <clients class path> ConsumerProtocolChecks <bootstrap> <prefix> <replication>

import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.serialization.*;

public class ConsumerProtocolChecks {
    static final int PARTITIONS = 6;
    static final int RECORDS = 600;
    static final long DEADLINE_MS = 90_000;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String prefix = args[1];
        short replication = Short.parseShort(args[2]);
        String topic = prefix + "-kip848";
        String group = prefix + "-kip848-group";
        Map<String, Object> out = new LinkedHashMap<>();
        Properties adminProps = new Properties();
        adminProps.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(adminProps)) {
            admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, replication))).all().get(30, TimeUnit.SECONDS);
            Properties producerProps = new Properties();
            producerProps.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            producerProps.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            producerProps.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(producerProps)) {
                for (int i = 0; i < RECORDS; i++) {
                    producer.send(new ProducerRecord<>(topic, i % PARTITIONS, "key-" + i, "value-" + i));
                }
                producer.flush();
            }
            List<KafkaConsumer<String, String>> members = new ArrayList<>();
            Map<String, Integer> reads = new HashMap<>();
            List<Set<Integer>> shared = new ArrayList<>();
            // Each member's read positions not yet committed.
            List<Map<TopicPartition, OffsetAndMetadata>> pending = new ArrayList<>();
            int staleCommits = 0;
            try {
                for (int i = 0; i < 2; i++) {
                    Properties props = new Properties();
                    props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
                    props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
                    props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
                    props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
                    props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
                    props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
                    props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
                    KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props);
                    Map<TopicPartition, OffsetAndMetadata> mine = new HashMap<>();
                    pending.add(mine);
                    // What was read of a partition is committed before it is given up, as an
                    // application committing by hand does (KIP-848: the member still holds its
                    // epoch until it has acknowledged the revocation).
                    consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                        public void onPartitionsRevoked(Collection<TopicPartition> revoked) {
                            Map<TopicPartition, OffsetAndMetadata> handed = new HashMap<>();
                            for (TopicPartition tp : revoked) {
                                OffsetAndMetadata offset = mine.remove(tp);
                                if (offset != null) handed.put(tp, offset);
                            }
                            if (!handed.isEmpty()) consumer.commitSync(handed);
                        }

                        public void onPartitionsAssigned(Collection<TopicPartition> assigned) {}
                    });
                    members.add(consumer);
                }
                // Both members poll in turn until every record was read and the partitions are
                // split between them (a member that joins later receives its share once the
                // first revoked it).
                long deadline = System.currentTimeMillis() + DEADLINE_MS;
                boolean split = false;
                while (System.currentTimeMillis() < deadline && !(reads.size() >= RECORDS && split)) {
                    for (int m = 0; m < members.size(); m++) {
                        KafkaConsumer<String, String> consumer = members.get(m);
                        Map<TopicPartition, OffsetAndMetadata> mine = pending.get(m);
                        ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(100));
                        for (ConsumerRecord<String, String> record : records) {
                            reads.merge(record.partition() + ":" + record.offset(), 1, Integer::sum);
                            mine.put(new TopicPartition(record.topic(), record.partition()),
                                new OffsetAndMetadata(record.offset() + 1));
                        }
                        if (mine.isEmpty()) continue;
                        try {
                            consumer.commitSync(mine);
                            mine.clear();
                        } catch (CommitFailedException stale) {
                            // A commit that crossed the heartbeat giving this member a new epoch
                            // is STALE_MEMBER_EPOCH, which commitSync raises as this, on Kafka
                            // too: committed again after the next poll, at the new epoch.
                            staleCommits++;
                        }
                    }
                    Set<Integer> first = partitions(members.get(0).assignment());
                    Set<Integer> second = partitions(members.get(1).assignment());
                    Set<Integer> union = new HashSet<>(first);
                    union.addAll(second);
                    split = !first.isEmpty() && !second.isEmpty() && union.size() == PARTITIONS
                        && first.size() + second.size() == PARTITIONS;
                    if (split) shared = List.of(first, second);
                }
                // What is left to commit, at the members' current epochs.
                for (int attempt = 0; attempt < 10 && pending.stream().anyMatch(p -> !p.isEmpty()); attempt++) {
                    for (int m = 0; m < members.size(); m++) {
                        if (pending.get(m).isEmpty()) continue;
                        try {
                            members.get(m).commitSync(pending.get(m));
                            pending.get(m).clear();
                        } catch (CommitFailedException stale) {
                            staleCommits++;
                            for (ConsumerRecord<String, String> record : members.get(m).poll(Duration.ofMillis(100))) {
                                reads.merge(record.partition() + ":" + record.offset(), 1, Integer::sum);
                            }
                        }
                    }
                }
                out.put("stale_commits_retried", staleCommits);
                out.put("read", reads.size());
                out.put("read_twice", reads.values().stream().filter(n -> n > 1).count());
                out.put("split", split);
                List<Integer> sizes = new ArrayList<>();
                for (Set<Integer> part : shared) sizes.add(part.size());
                out.put("assignment_sizes", sizes);
                ConsumerGroupDescription described = admin.describeConsumerGroups(List.of(group))
                    .all().get(30, TimeUnit.SECONDS).get(group);
                out.put("group_type", String.valueOf(described.type()));
                out.put("group_state", String.valueOf(described.groupState()));
                out.put("members", described.members().size());
            } finally {
                for (KafkaConsumer<String, String> consumer : members) consumer.close(Duration.ofSeconds(10));
            }
            long committed = 0;
            for (OffsetAndMetadata offset : admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS).values()) {
                if (offset != null) committed += offset.offset();
            }
            out.put("committed_sum", committed);
        } catch (Throwable error) {
            Throwable cause = error instanceof ExecutionException && error.getCause() != null ? error.getCause() : error;
            out.put("error", cause.getClass().getSimpleName() + ": " + cause.getMessage());
        }
        System.out.println(ClientChecks.Json.write(out));
        System.out.flush();
        System.exit(0);
    }

    static Set<Integer> partitions(Set<TopicPartition> assigned) {
        Set<Integer> out = new TreeSet<>();
        for (TopicPartition tp : assigned) out.add(tp.partition());
        return out;
    }
}
