// Kafka 4.4's KafkaShareConsumer (KIP-932) in both acknowledgement modes, run unchanged against
// minibroker and against Apache Kafka 4.4 so that tests/java/test_share_consumers.py compares
// what each answered. Prints one JSON object on its last line.
//
// Explicit mode: three KafkaShareConsumers of one group share a one-partition topic of 40
// records, polled in turn in this thread, each record acknowledged by its offset:
//   offset % 4 == 0  ACCEPT
//   offset % 4 == 1  RELEASE at its first delivery, ACCEPT at its second
//   offset % 4 == 2  REJECT (archived, into the group's dead-letter queue)
//   offset % 4 == 3  RELEASE every time: a poison record, archived at the group's
//                    share.delivery.count.limit (2), into the dead-letter queue
// and committed (commitSync) after each poll. Once every record is final the consumers poll on
// for a while: any record delivered then is "late" (accepted or archived ones must never come
// back). Then the group's start offset (Admin.listShareGroupOffsets) and the dead-letter
// queue's records (a KafkaConsumer from the earliest offset).
//
// Implicit mode: two KafkaShareConsumers of another group on a topic of 30 records, in the
// record_limit acquire mode of KIP-1206 with max.poll.records 7; each poll accepts the records
// of the one before; every record must come exactly once, never more than 7 in a poll.
//
// RENEW (KIP-1222): one explicit KafkaShareConsumer of a third group on 5 records renews each
// record's acquisition lock at its first sight and accepts it at its second: the client hands a
// renewed record to the application again, with the same delivery count.
//
// Usage: java -cp <clients class path> ShareConsumerChecks <bootstrap> <name prefix>

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.*;

public class ShareConsumerChecks {
    static final int EXPLICIT_RECORDS = 40;
    static final int IMPLICIT_RECORDS = 30;
    static final int DELIVERY_LIMIT = 2;
    static final int RECORD_LIMIT = 7;
    static final int RENEW_RECORDS = 5;
    static final long DEADLINE_MS = 90_000;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String prefix = args[1];
        String explicitTopic = prefix + "-explicit";
        String implicitTopic = prefix + "-implicit";
        String dlqTopic = "dlq." + prefix;
        String explicitGroup = prefix + "-explicit-workers";
        String implicitGroup = prefix + "-implicit-workers";
        String renewTopic = prefix + "-renew";
        String renewGroup = prefix + "-renew-workers";
        long started = System.currentTimeMillis();
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            admin.createTopics(List.of(
                    new NewTopic(explicitTopic, Optional.of(1), Optional.empty()),
                    new NewTopic(implicitTopic, Optional.of(1), Optional.empty()),
                    new NewTopic(renewTopic, Optional.of(1), Optional.empty()),
                    new NewTopic(dlqTopic, Optional.of(1), Optional.empty())
                            .configs(Map.of("errors.deadletterqueue.group.enable", "true"))))
                    .all().get();
            step("topics created");
            Map<ConfigResource, Collection<AlterConfigOp>> configs = new HashMap<>();
            configs.put(new ConfigResource(ConfigResource.Type.GROUP, explicitGroup), List.of(
                    set("share.auto.offset.reset", "earliest"),
                    set("share.delivery.count.limit", Integer.toString(DELIVERY_LIMIT)),
                    set("errors.deadletterqueue.topic.name", dlqTopic),
                    set("errors.deadletterqueue.copy.record.enable", "true")));
            configs.put(new ConfigResource(ConfigResource.Type.GROUP, implicitGroup), List.of(
                    set("share.auto.offset.reset", "earliest")));
            configs.put(new ConfigResource(ConfigResource.Type.GROUP, renewGroup), List.of(
                    set("share.auto.offset.reset", "earliest")));
            admin.incrementalAlterConfigs(configs).all().get();
            step("group configs set");
        }
        produce(bootstrap, explicitTopic, EXPLICIT_RECORDS);
        produce(bootstrap, implicitTopic, IMPLICIT_RECORDS);
        produce(bootstrap, renewTopic, RENEW_RECORDS);
        StringBuilder out = new StringBuilder("{");
        long explicitStart = System.currentTimeMillis();
        out.append("\"explicit\": ").append(explicit(bootstrap, explicitTopic, explicitGroup));
        out.append(", \"explicit_offsets\": ").append(offsets(bootstrap, explicitGroup, explicitTopic));
        out.append(", \"dlq\": ").append(deadLetters(bootstrap, dlqTopic, EXPLICIT_RECORDS / 2));
        long implicitStart = System.currentTimeMillis();
        out.append(", \"implicit\": ").append(implicit(bootstrap, implicitTopic, implicitGroup));
        out.append(", \"implicit_offsets\": ").append(offsets(bootstrap, implicitGroup, implicitTopic));
        out.append(", \"renew\": ").append(renew(bootstrap, renewTopic, renewGroup));
        long now = System.currentTimeMillis();
        out.append(", \"seconds\": {\"setup\": ").append((explicitStart - started) / 1000.0)
                .append(", \"explicit\": ").append((implicitStart - explicitStart) / 1000.0)
                .append(", \"implicit\": ").append((now - implicitStart) / 1000.0).append("}}");
        System.out.println(out);
    }

    static final long T0 = System.currentTimeMillis();

    /** A step's time since the start, on stderr (what the test shows when it fails). */
    static void step(String what) {
        System.err.println("ShareConsumerChecks " + (System.currentTimeMillis() - T0) + " ms: " + what);
    }

    static AlterConfigOp set(String name, String value) {
        return new AlterConfigOp(new ConfigEntry(name, value), AlterConfigOp.OpType.SET);
    }

    static void produce(String bootstrap, String topic, int records) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("linger.ms", "5");
        try (Producer<String, String> producer =
                new KafkaProducer<>(props, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < records; i++) {
                producer.send(new ProducerRecord<>(topic, 0, "k" + i, "v" + i));
            }
            producer.flush();
        }
        step("produced " + topic);
    }

    static List<KafkaShareConsumer<String, String>> consumers(
            String bootstrap, String group, String topic, int count, String mode, Map<String, String> more) {
        List<KafkaShareConsumer<String, String>> consumers = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            Properties props = new Properties();
            props.put("bootstrap.servers", bootstrap);
            props.put("group.id", group);
            props.put("client.id", group + "-" + i);
            props.put("share.acknowledgement.mode", mode);
            props.putAll(more);
            KafkaShareConsumer<String, String> consumer =
                    new KafkaShareConsumer<>(props, new StringDeserializer(), new StringDeserializer());
            consumer.subscribe(List.of(topic));
            consumers.add(consumer);
        }
        return consumers;
    }

    /** What each delivery of each offset was (its delivery count), records delivered after
     * they were final, and the errors commitSync answered. */
    static String explicit(String bootstrap, String topic, String group) {
        Map<Long, List<Integer>> deliveries = new TreeMap<>();
        Set<Long> done = new TreeSet<>();
        List<String> late = new ArrayList<>();
        List<String> errors = new ArrayList<>();
        Map<String, Integer> byConsumer = new TreeMap<>();
        List<KafkaShareConsumer<String, String>> consumers = consumers(bootstrap, group, topic, 3, "explicit", Map.of());
        try {
            long deadline = System.currentTimeMillis() + DEADLINE_MS;
            long quietUntil = Long.MAX_VALUE;
            while (System.currentTimeMillis() < Math.min(deadline, quietUntil)) {
                for (int c = 0; c < consumers.size(); c++) {
                    KafkaShareConsumer<String, String> consumer = consumers.get(c);
                    ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(100));
                    if (records.isEmpty()) continue;
                    Set<Long> finalHere = new TreeSet<>();
                    for (ConsumerRecord<String, String> record : records) {
                        long offset = record.offset();
                        int count = record.deliveryCount().map(Short::intValue).orElse(-1);
                        if (deliveries.isEmpty()) step("explicit: first record");
                        deliveries.computeIfAbsent(offset, o -> new ArrayList<>()).add(count);
                        byConsumer.merge(group + "-" + c, 1, Integer::sum);
                        if (done.contains(offset) || !record.value().equals("v" + offset)) {
                            late.add(offset + "@" + count + "=" + record.value());
                        }
                        AcknowledgeType type;
                        switch ((int) (offset % 4)) {
                            case 0: type = AcknowledgeType.ACCEPT; break;
                            case 1: type = count == 1 ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT; break;
                            case 2: type = AcknowledgeType.REJECT; break;
                            default: type = AcknowledgeType.RELEASE;
                        }
                        consumer.acknowledge(record, type);
                        if (type != AcknowledgeType.RELEASE || count >= DELIVERY_LIMIT) finalHere.add(offset);
                    }
                    for (Map.Entry<TopicIdPartition, Optional<KafkaException>> answer : consumer.commitSync().entrySet()) {
                        answer.getValue().ifPresent(e -> errors.add(answer.getKey() + ": " + e));
                    }
                    done.addAll(finalHere);
                }
                if (done.size() == EXPLICIT_RECORDS && quietUntil == Long.MAX_VALUE) {
                    step("explicit: every record final");
                    // Every record is final: poll on for 3 s, nothing may come.
                    quietUntil = System.currentTimeMillis() + 3_000;
                }
            }
        } finally {
            for (KafkaShareConsumer<String, String> consumer : consumers) consumer.close(Duration.ofSeconds(10));
        }
        StringBuilder deliveriesJson = new StringBuilder("{");
        for (Map.Entry<Long, List<Integer>> entry : deliveries.entrySet()) {
            if (deliveriesJson.length() > 1) deliveriesJson.append(", ");
            deliveriesJson.append('"').append(entry.getKey()).append("\": ").append(entry.getValue());
        }
        deliveriesJson.append('}');
        return "{\"deliveries\": " + deliveriesJson + ", \"final\": " + done.size()
                + ", \"late\": " + strings(late) + ", \"commit_errors\": " + strings(errors)
                + ", \"consumers_with_records\": " + byConsumer.size() + "}";
    }

    /** Each offset's deliveries to the application (delivery counts), renewed at the first. */
    static String renew(String bootstrap, String topic, String group) {
        Map<Long, List<Integer>> deliveries = new TreeMap<>();
        Set<Long> accepted = new TreeSet<>();
        List<String> errors = new ArrayList<>();
        List<KafkaShareConsumer<String, String>> consumers = consumers(bootstrap, group, topic, 1, "explicit", Map.of());
        KafkaShareConsumer<String, String> consumer = consumers.get(0);
        try {
            long deadline = System.currentTimeMillis() + DEADLINE_MS;
            long quietUntil = Long.MAX_VALUE;
            while (System.currentTimeMillis() < Math.min(deadline, quietUntil)) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(100));
                for (ConsumerRecord<String, String> record : records) {
                    List<Integer> seen = deliveries.computeIfAbsent(record.offset(), o -> new ArrayList<>());
                    seen.add(record.deliveryCount().map(Short::intValue).orElse(-1));
                    if (seen.size() == 1) {
                        consumer.acknowledge(record, AcknowledgeType.RENEW);
                    } else {
                        consumer.acknowledge(record, AcknowledgeType.ACCEPT);
                        accepted.add(record.offset());
                    }
                }
                if (!records.isEmpty()) {
                    for (Map.Entry<TopicIdPartition, Optional<KafkaException>> answer : consumer.commitSync().entrySet()) {
                        answer.getValue().ifPresent(e -> errors.add(answer.getKey() + ": " + e));
                    }
                }
                if (accepted.size() == RENEW_RECORDS && quietUntil == Long.MAX_VALUE) {
                    step("renew: every record accepted");
                    quietUntil = System.currentTimeMillis() + 2_000;
                }
            }
        } finally {
            consumer.close(Duration.ofSeconds(10));
        }
        StringBuilder json = new StringBuilder("{");
        for (Map.Entry<Long, List<Integer>> entry : deliveries.entrySet()) {
            if (json.length() > 1) json.append(", ");
            json.append('"').append(entry.getKey()).append("\": ").append(entry.getValue());
        }
        return "{\"deliveries\": " + json + "}, \"commit_errors\": " + strings(errors) + "}";
    }

    /** Offsets delivered more than once and how many records came. */
    static String implicit(String bootstrap, String topic, String group) {
        Map<Long, Integer> seen = new TreeMap<>();
        Map<String, Integer> byConsumer = new TreeMap<>();
        List<String> errors = new ArrayList<>();
        List<KafkaShareConsumer<String, String>> consumers = consumers(bootstrap, group, topic, 2, "implicit",
                Map.of("share.acquire.mode", "record_limit", "max.poll.records", Integer.toString(RECORD_LIMIT)));
        int largestPoll = 0;
        try {
            long deadline = System.currentTimeMillis() + DEADLINE_MS;
            long quietUntil = Long.MAX_VALUE;
            while (System.currentTimeMillis() < Math.min(deadline, quietUntil)) {
                for (int c = 0; c < consumers.size(); c++) {
                    ConsumerRecords<String, String> records = consumers.get(c).poll(Duration.ofMillis(100));
                    largestPoll = Math.max(largestPoll, records.count());
                    for (ConsumerRecord<String, String> record : records) {
                        seen.merge(record.offset(), 1, Integer::sum);
                        byConsumer.merge(group + "-" + c, 1, Integer::sum);
                    }
                }
                if (seen.size() == IMPLICIT_RECORDS && quietUntil == Long.MAX_VALUE) {
                    step("implicit: every record delivered");
                    quietUntil = System.currentTimeMillis() + 3_000;
                }
            }
            for (KafkaShareConsumer<String, String> consumer : consumers) {
                for (Map.Entry<TopicIdPartition, Optional<KafkaException>> answer : consumer.commitSync().entrySet()) {
                    answer.getValue().ifPresent(e -> errors.add(answer.getKey() + ": " + e));
                }
            }
        } finally {
            for (KafkaShareConsumer<String, String> consumer : consumers) consumer.close(Duration.ofSeconds(10));
        }
        List<String> twice = new ArrayList<>();
        for (Map.Entry<Long, Integer> entry : seen.entrySet()) {
            if (entry.getValue() != 1) twice.add(entry.getKey() + "x" + entry.getValue());
        }
        return "{\"records\": " + seen.size() + ", \"more_than_once\": " + strings(twice)
                + ", \"commit_errors\": " + strings(errors) + ", \"within_record_limit\": "
                + (largestPoll > 0 && largestPoll <= RECORD_LIMIT) + "}";
    }

    /** The share partition's start offset and lag (Admin.listShareGroupOffsets), once the lag
     * is 0: the last acknowledgements are written as the consumers close. */
    static String offsets(String bootstrap, String group, String topic) throws Exception {
        TopicPartition partition = new TopicPartition(topic, 0);
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            long deadline = System.currentTimeMillis() + 30_000;
            SharePartitionOffsetInfo info = null;
            while (System.currentTimeMillis() < deadline) {
                info = admin.listShareGroupOffsets(
                        Map.of(group, new ListShareGroupOffsetsSpec().topicPartitions(List.of(partition))))
                        .partitionsToOffsetInfo(group).get().get(partition);
                if (info != null && info.lag().orElse(-1L) == 0) break;
                Thread.sleep(200);
            }
            step("offsets of " + group + ": " + info);
            if (info == null) return "null";
            return "{\"start_offset\": " + info.startOffset() + ", \"lag\": " + info.lag().orElse(-1L) + "}";
        }
    }

    /** The dead-letter queue's records, by the source offset each names, with their headers,
     * key and value (reading until `expected` came, or 30 s). */
    static String deadLetters(String bootstrap, String topic, int expected) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        TreeMap<Long, String> letters = new TreeMap<>();
        TopicPartition partition = new TopicPartition(topic, 0);
        try (KafkaConsumer<String, String> consumer =
                new KafkaConsumer<>(props, new StringDeserializer(), new StringDeserializer())) {
            consumer.assign(List.of(partition));
            consumer.seekToBeginning(List.of(partition));
            long deadline = System.currentTimeMillis() + 30_000;
            int read = 0;
            while (read < expected && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
                    read++;
                    TreeMap<String, String> headers = new TreeMap<>();
                    for (Header header : record.headers()) {
                        // The group's and topic's names differ by system only in the prefix.
                        headers.put(header.key(), new String(header.value(), StandardCharsets.UTF_8));
                    }
                    long source = Long.parseLong(headers.getOrDefault("__dlq.errors.offset", "-1"));
                    StringBuilder letter = new StringBuilder("{");
                    for (Map.Entry<String, String> header : headers.entrySet()) {
                        letter.append(quote(header.getKey())).append(": ").append(quote(header.getValue())).append(", ");
                    }
                    letter.append("\"key\": ").append(quote(record.key())).append(", \"value\": ")
                            .append(quote(record.value())).append('}');
                    letters.merge(source, letter.toString(), (a, b) -> a + "DUPLICATE");
                }
            }
        }
        return strings(new ArrayList<>(letters.values()), false);
    }

    static String quote(String text) {
        if (text == null) return "null";
        return '"' + text.replace("\\", "\\\\").replace("\"", "\\\"") + '"';
    }

    static String strings(List<String> items) {
        return strings(items, true);
    }

    static String strings(List<String> items, boolean quoted) {
        StringBuilder out = new StringBuilder("[");
        for (String item : items) {
            if (out.length() > 1) out.append(", ");
            out.append(quoted ? quote(item) : item);
        }
        return out.append(']').toString();
    }
}
