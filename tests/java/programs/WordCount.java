import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.File;
import java.time.Duration;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.LongDeserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Kafka Streams' word count, at least once: lines from the input topic split into words,
 * re-keyed by word (through the repartition topic {@code <app>-words-repartition}), counted in
 * the state store "counts" (its changelog {@code <app>-counts-changelog}), every update to the
 * output topic.
 *
 * <p>Usage: {@code WordCount <bootstrap> <app id> <input> <output> <state dir> <expected.json>
 * <timeout s> [<processing.guarantee> [<replication factor>]]}: at_least_once by default;
 * exactly_once_v2 makes every task's output, changelog and offsets one transaction, and the
 * output and changelog are then read with isolation.level=read_committed. The JSON line also
 * lists the words whose successive counts on the output were not 1, 2, 3... ("irregular": an
 * update counted twice, or one lost; with the state store's cache off each input word makes
 * exactly one update, so exactly once allows none). Prints "RUNNING" once the application runs and "PROGRESS <n>" when the output
 * first holds n words; stops when the output's last count per word equals the expected counts
 * (or at the timeout), closes the application and prints one JSON line: the counts read from the
 * output, the counts read back from the changelog, and the application's internal topics.
 */
public class WordCount {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String appId = args[1];
        String input = args[2];
        String output = args[3];
        ObjectMapper mapper = new ObjectMapper();
        @SuppressWarnings("unchecked")
        Map<String, Integer> expectedInt = mapper.readValue(new File(args[5]), Map.class);
        Map<String, Long> expected = new TreeMap<>();
        expectedInt.forEach((word, count) -> expected.put(word, count.longValue()));
        long deadline = System.currentTimeMillis() + Long.parseLong(args[6]) * 1000;
        String guarantee = args.length > 7 ? args[7] : StreamsConfig.AT_LEAST_ONCE;
        int replication = args.length > 8 ? Integer.parseInt(args[8]) : 3;
        String isolation = guarantee.equals(StreamsConfig.AT_LEAST_ONCE)
            ? "read_uncommitted" : "read_committed";

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, replication);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");

        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(input)
            .flatMapValues(line -> Arrays.asList(line.toLowerCase().split("\\W+")))
            .filter((key, word) -> !word.isEmpty())
            .groupBy((key, word) -> word, Grouped.as("words"))
            .count(Materialized.as("counts"))
            .toStream()
            .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING) {
                System.out.println("RUNNING");
            }
        });
        streams.start();

        java.util.Set<String> irregular = new java.util.TreeSet<>();
        Map<String, Long> counts =
            readCounts(bootstrap, output, expected, deadline, true, isolation, irregular);
        streams.close(Duration.ofSeconds(30));
        Map<String, Long> changelog = readCounts(
            bootstrap, appId + "-counts-changelog", null, 0, false, isolation, null);
        List<String> internal;
        Properties adminProps = new Properties();
        adminProps.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(adminProps)) {
            internal = admin.listTopics().names().get().stream()
                .filter(name -> name.startsWith(appId + "-"))
                .sorted()
                .collect(Collectors.toList());
        }
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("counts", counts);
        result.put("changelog", changelog);
        result.put("internal_topics", internal);
        result.put("final_state", streams.state().toString());
        result.put("guarantee", guarantee);
        result.put("irregular", irregular);
        System.out.println(mapper.writeValueAsString(result));
        System.exit(0);
    }

    /**
     * The last count per word in a topic of (word, long) records. With `expected`, read until the
     * counts equal it or the deadline passes; without, read to the end offsets.
     */
    static Map<String, Long> readCounts(String bootstrap, String topic, Map<String, Long> expected,
                                        long deadline, boolean progress, String isolation,
                                        java.util.Set<String> irregular) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        Map<String, Long> counts = new TreeMap<>();
        try (KafkaConsumer<String, Long> consumer =
                 new KafkaConsumer<>(props, new StringDeserializer(), new LongDeserializer())) {
            List<TopicPartition> partitions = waitForPartitions(consumer, topic);
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Map<TopicPartition, Long> end = expected == null ? consumer.endOffsets(partitions) : null;
            boolean reported = false;
            while (true) {
                for (ConsumerRecord<String, Long> record : consumer.poll(Duration.ofMillis(200))) {
                    Long before = counts.put(record.key(), record.value());
                    if (irregular != null && record.value() != (before == null ? 0 : before) + 1) {
                        irregular.add(record.key());
                    }
                }
                if (progress && !reported && !counts.isEmpty()) {
                    System.out.println("PROGRESS " + counts.size());
                    reported = true;
                }
                if (expected != null) {
                    if (counts.equals(expected) || System.currentTimeMillis() > deadline) {
                        return counts;
                    }
                } else {
                    Map<TopicPartition, Long> positions = new HashMap<>();
                    partitions.forEach(tp -> positions.put(tp, consumer.position(tp)));
                    if (positions.equals(end)) {
                        return counts;
                    }
                }
            }
        }
    }

    static List<TopicPartition> waitForPartitions(KafkaConsumer<?, ?> consumer, String topic) {
        while (true) {
            var infos = consumer.partitionsFor(topic);
            if (infos != null && !infos.isEmpty()) {
                return infos.stream()
                    .map(info -> new TopicPartition(topic, info.partition()))
                    .collect(Collectors.toList());
            }
            try {
                Thread.sleep(200);
            } catch (InterruptedException e) {
                throw new RuntimeException(e);
            }
        }
    }
}
