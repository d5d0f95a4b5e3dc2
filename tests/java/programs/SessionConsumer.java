// A KafkaConsumer (kafka-clients 4.x, incremental fetch sessions by default, KIP-227) reading
// a multi-partition topic, then fetching on while nothing new arrives: the idle fetches are
// the incremental ones that carry no partition. Prints one JSON object on its last line.
//
// Usage: java -cp <clients class path> SessionConsumer <bootstrap> <topic> <partitions>
//            [<replication factor> [<records per partition>]]   (defaults: 1 and 10)

import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.serialization.*;

public class SessionConsumer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        short replicationFactor = args.length > 3 ? Short.parseShort(args[3]) : 1;
        int perPartition = args.length > 4 ? Integer.parseInt(args[4]) : 10;
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, replicationFactor)))
                    .all().get();
        }
        Properties producerProps = new Properties();
        producerProps.put("bootstrap.servers", bootstrap);
        try (Producer<byte[], byte[]> producer =
                new KafkaProducer<>(producerProps, new ByteArraySerializer(), new ByteArraySerializer())) {
            for (int p = 0; p < partitions; p++) {
                for (int i = 0; i < perPartition; i++) {
                    producer.send(new ProducerRecord<>(topic, p, null, ("v" + i).getBytes()));
                }
            }
            producer.flush();
        }
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("fetch.max.wait.ms", "50");
        List<TopicPartition> assigned = new ArrayList<>();
        for (int p = 0; p < partitions; p++) assigned.add(new TopicPartition(topic, p));
        int read = 0;
        int idlePolls = 0;
        long deadline = System.currentTimeMillis() + 60_000;
        try (Consumer<byte[], byte[]> consumer =
                new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.assign(assigned);
            consumer.seekToBeginning(assigned);
            while (read < partitions * perPartition && System.currentTimeMillis() < deadline) {
                read += consumer.poll(Duration.ofMillis(200)).count();
            }
            // Fetches with nothing new: incremental, empty both ways.
            for (int i = 0; i < 10; i++) {
                idlePolls += consumer.poll(Duration.ofMillis(100)).isEmpty() ? 1 : 0;
            }
        }
        System.out.println("{\"read\": " + read + ", \"expected\": " + partitions * perPartition
                + ", \"idle_polls\": " + idlePolls + "}");
    }
}
