import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.StreamsGroupDescription;
import org.apache.kafka.clients.admin.StreamsGroupMemberAssignment;
import org.apache.kafka.clients.admin.StreamsGroupMemberDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * One instance of Kafka Streams' word count with {@code group.protocol=streams} (KIP-1071): the
 * broker assigns the tasks (or with {@code group.protocol=classic}, when asked: the leader
 * client assigns them, through JoinGroup and SyncGroup). The topology is WordCount's (a repartition topic
 * {@code <app>-words-repartition}, a state store "counts" with its changelog).
 *
 * <p>{@code StreamsGroupInstance run <bootstrap> <app id> <input> <output> <state dir>
 * [<processing guarantee> [<group protocol>]]} (at_least_once unless given, e.g.
 * exactly_once_v2; the group protocol streams unless given, e.g. classic): prints
 * "CLIENT <its stream thread's consumer client id>" once started,
 * "RUNNING" when the application runs and "STATE <state>" at each change; runs until its
 * standard input ends (or says "stop"), then closes the application (Kafka Streams' default
 * close: with the classic protocol the member stays in the group until its session times
 * out), or until it says "leave", then closes it leaving the group whatever the protocol
 * (CloseOptions' LEAVE_GROUP); prints "CLOSED <state>".
 *
 * <p>{@code StreamsGroupInstance describe <bootstrap> <app id>}: the group as
 * Admin.describeStreamsGroups (StreamsGroupDescribe) answers it, one JSON line: its state, its
 * epoch, and each member's process, active and standby tasks ("subtopology_partition").
 */
public class StreamsGroupInstance {
    public static void main(String[] args) throws Exception {
        if (args[0].equals("describe")) {
            describe(args[1], args[2]);
            return;
        }
        String bootstrap = args[1];
        String appId = args[2];
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, args.length > 7 ? args[7] : "streams");
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[5]);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 3);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        if (args.length > 6) {
            props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, args[6]);
        }

        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(args[3])
            .flatMapValues(line -> Arrays.asList(line.toLowerCase().split("\\W+")))
            .filter((key, word) -> !word.isEmpty())
            .groupBy((key, word) -> word, Grouped.as("words"))
            .count(Materialized.as("counts"))
            .toStream()
            .to(args[4], Produced.with(Serdes.String(), Serdes.Long()));
        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.setStateListener((now, before) -> {
            System.out.println(now == KafkaStreams.State.RUNNING ? "RUNNING" : "STATE " + now);
            System.out.flush();
        });
        streams.setUncaughtExceptionHandler(error -> {
            System.out.println("ERROR " + error);
            System.out.flush();
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.start();
        // The process id the broker sees (StreamsGroupDescribe's ProcessId) is in the client
        // ids: "<app id>-<process id>-StreamThread-1-consumer".
        System.out.println("CLIENT " + streams.metadataForLocalThreads().iterator().next().consumerClientId());
        System.out.flush();
        BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = stdin.readLine()) != null && !line.trim().equals("stop")
                && !line.trim().equals("leave")) {
            // wait
        }
        if (line != null && line.trim().equals("leave")) {
            // The member leaves the group whatever its protocol (with the classic one Kafka
            // Streams' default close stays in the group until its session times out).
            streams.close(CloseOptions.groupMembershipOperation(
                CloseOptions.GroupMembershipOperation.LEAVE_GROUP).withTimeout(Duration.ofSeconds(30)));
        } else {
            streams.close(Duration.ofSeconds(30));
        }
        System.out.println("CLOSED " + streams.state());
        System.out.flush();
        System.exit(0);
    }

    static void describe(String bootstrap, String appId) throws Exception {
        Properties adminProps = new Properties();
        adminProps.put("bootstrap.servers", bootstrap);
        Map<String, Object> result = new LinkedHashMap<>();
        try (Admin admin = Admin.create(adminProps)) {
            StreamsGroupDescription group =
                admin.describeStreamsGroups(List.of(appId)).all().get().get(appId);
            result.put("state", group.groupState().toString());
            result.put("group_epoch", group.groupEpoch());
            List<Map<String, Object>> members = new ArrayList<>();
            for (StreamsGroupMemberDescription member : group.members()) {
                Map<String, Object> described = new LinkedHashMap<>();
                described.put("member_id", member.memberId());
                described.put("process_id", member.processId());
                described.put("member_epoch", member.memberEpoch());
                described.put("active", tasks(member.assignment().activeTasks()));
                described.put("standby", tasks(member.assignment().standbyTasks()));
                members.add(described);
            }
            result.put("members", members);
        }
        System.out.println(new ObjectMapper().writeValueAsString(result));
    }

    static TreeSet<String> tasks(List<StreamsGroupMemberAssignment.TaskIds> taskIds) {
        TreeSet<String> names = new TreeSet<>();
        for (StreamsGroupMemberAssignment.TaskIds tasks : taskIds) {
            for (int partition : tasks.partitions()) {
                names.add(tasks.subtopologyId() + "_" + partition);
            }
        }
        return names;
    }
}
