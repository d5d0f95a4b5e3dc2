import com.fasterxml.jackson.databind.ObjectMapper;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java client's transactional producer as applications use it: initTransactions, a
 * committed and an aborted transaction, then a consume-transform-produce loop (a read_committed
 * consumer in a group, sendOffsetsToTransaction with its group metadata, the first transaction
 * aborted and its batch read again), then a zombie fenced by a second producer with the same
 * transactional id.
 *
 * <p>Usage: {@code TxnClient <bootstrap> <input> <output> <group> <count>}; prints one JSON
 * line: what read_committed and read_uncommitted consumers read of each topic, the group's
 * committed offsets and the exception the zombie's commit raised.
 */
public class TxnClient {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String input = args[1];
        String output = args[2];
        String group = args[3];
        int count = Integer.parseInt(args[4]);
        String suffix = Long.toString(System.nanoTime(), 36);
        Map<String, Object> result = new LinkedHashMap<>();

        // 1. A committed and an aborted transaction on the input topic.
        try (KafkaProducer<String, String> producer = producer(bootstrap, "java-txn-" + suffix)) {
            producer.initTransactions();
            producer.beginTransaction();
            for (int i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(input, "k" + i, "committed-" + i));
            }
            producer.commitTransaction();
            producer.beginTransaction();
            for (int i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(input, "k" + i, "aborted-" + i));
            }
            producer.flush();
            producer.abortTransaction();
        }

        // 2. Consume-transform-produce, exactly once: the first transaction aborted.
        Properties consumerProps = consumerProps(bootstrap, "read_committed");
        consumerProps.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        consumerProps.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        int processed = 0;
        int aborted = 0;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerProps);
             KafkaProducer<String, String> producer = producer(bootstrap, "java-ctp-" + suffix)) {
            producer.initTransactions();
            consumer.subscribe(List.of(input), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {}
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {}
            });
            long deadline = System.currentTimeMillis() + 60_000;
            while (processed < count && System.currentTimeMillis() < deadline) {
                var records = consumer.poll(Duration.ofMillis(200));
                if (records.isEmpty()) {
                    continue;
                }
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                Map<TopicPartition, Long> starts = new HashMap<>();
                for (ConsumerRecord<String, String> record : records) {
                    producer.send(new ProducerRecord<>(output, record.key(), "out-" + record.value()));
                    TopicPartition tp = new TopicPartition(record.topic(), record.partition());
                    offsets.put(tp, new OffsetAndMetadata(record.offset() + 1));
                    starts.putIfAbsent(tp, record.offset());
                }
                producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                if (aborted == 0) {
                    producer.abortTransaction();
                    aborted++;
                    starts.forEach(consumer::seek);
                    continue;
                }
                producer.commitTransaction();
                processed += records.count();
            }
        }
        result.put("processed", processed);

        // 3. A zombie: a second producer with the same transactional id fences the first.
        String zombieId = "java-zombie-" + suffix;
        KafkaProducer<String, String> zombie = producer(bootstrap, zombieId);
        zombie.initTransactions();
        zombie.beginTransaction();
        zombie.send(new ProducerRecord<>(output, "zombie", "zombie")).get();
        try (KafkaProducer<String, String> successor = producer(bootstrap, zombieId)) {
            successor.initTransactions();
        }
        String fenced = "none";
        try {
            zombie.commitTransaction();
        } catch (Exception e) {
            fenced = e.getClass().getSimpleName();
        } finally {
            zombie.close(Duration.ofSeconds(5));
        }
        result.put("fenced", fenced);

        result.put("input_committed", readAll(bootstrap, input, "read_committed"));
        result.put("input_uncommitted", readAll(bootstrap, input, "read_uncommitted").size());
        result.put("output_committed", readAll(bootstrap, output, "read_committed"));
        try (KafkaConsumer<String, String> reader =
                 new KafkaConsumer<>(withGroup(consumerProps(bootstrap, "read_committed"), group))) {
            var partitions = reader.partitionsFor(input).stream()
                .map(info -> new TopicPartition(input, info.partition()))
                .collect(Collectors.toSet());
            Map<String, Long> committed = new TreeMap<>();
            reader.committed(partitions).forEach((tp, offset) ->
                committed.put(Integer.toString(tp.partition()), offset == null ? -1 : offset.offset()));
            result.put("group_offsets", committed);
        }
        System.out.println(new ObjectMapper().writeValueAsString(result));
        System.exit(0);
    }

    static KafkaProducer<String, String> producer(String bootstrap, String transactionalId) {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
        return new KafkaProducer<>(props);
    }

    static Properties consumerProps(String bootstrap, String isolation) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
        return props;
    }

    static Properties withGroup(Properties props, String group) {
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        return props;
    }

    /** Every value of a topic, read from the beginning to the end offsets (the LSO for
     * read_committed: every transaction here has ended, so it is the high watermark). */
    static List<String> readAll(String bootstrap, String topic, String isolation) {
        List<String> values = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer =
                 new KafkaConsumer<>(consumerProps(bootstrap, isolation))) {
            List<TopicPartition> partitions = consumer.partitionsFor(topic).stream()
                .map(info -> new TopicPartition(topic, info.partition()))
                .collect(Collectors.toList());
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Map<TopicPartition, Long> end = consumer.endOffsets(partitions);
            long deadline = System.currentTimeMillis() + 60_000;
            while (System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
                    values.add(record.value());
                }
                boolean done = partitions.stream().allMatch(tp -> consumer.position(tp) >= end.get(tp));
                if (done) {
                    break;
                }
            }
        }
        values.sort(null);
        return values;
    }
}
