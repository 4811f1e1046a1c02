package sluice.compat;

import static sluice.compat.Clients.*;
import static sluice.compat.Harness.TIMEOUT_MS;
import static sluice.compat.Harness.check;

import com.fasterxml.jackson.databind.JsonNode;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;

/**
 * fetch_from_follower (KIP-392), for java-client and kafka-tools: on the 3-node cluster (each node
 * in a rack of its own, the rack-aware replica selector on) a consumer whose client.rack is a
 * follower's rack reads a 1-partition topic of 100 records; each node's /metrics then shows who
 * sent them: the follower all, the leader none (it only names the follower to read from).
 */
final class FollowerFetch {
    private FollowerFetch() {}

    static final int COUNT = 100;

    /** The topic made for the row: its leader, a follower and that follower's rack. */
    record Placement(String topic, int leader, int follower, String rack, JsonNode entry) {}

    /** Creates the row's topic, fills it (acks=all, so every replica holds the records) and
     * picks a follower; n/a on a single node. */
    static Placement prepare(Harness.Context ctx, String name) throws Exception {
        if (ctx.brokers() < 2) {
            throw new Harness.NotApplicable("one node has no followers");
        }
        JsonNode entry = ctx.security().path("scenarios").path("fetch_from_follower");
        check(entry.has("racks") && entry.has("metrics"), "the --security file has no racks for fetch_from_follower: " + entry);
        String topic = createTopic(ctx, ctx.name(name), 1);
        produce(ctx, topic, sample(COUNT), "acks", "all");
        try (Admin admin = admin(ctx)) {
            TopicPartitionInfo p = admin.describeTopics(List.of(topic)).allTopicNames().get(TIMEOUT_MS, TimeUnit.MILLISECONDS)
                    .get(topic).partitions().get(0);
            int leader = p.leader().id();
            int follower = p.replicas().stream().map(Node::id).filter(id -> id != leader).findFirst()
                    .orElseThrow(() -> new Harness.Failed(topic + " has no follower: replicas " + p.replicas()));
            return new Placement(topic, leader, follower, entry.path("racks").path(String.valueOf(follower)).asText(), entry);
        }
    }

    /** Records of {@code topic} each node sent to consumers (its /metrics), by node id. */
    static Map<Integer, Long> sentByNode(JsonNode entry, String topic) throws Exception {
        Map<Integer, Long> out = new TreeMap<>();
        HttpClient http = HttpClient.newHttpClient();
        for (var it = entry.path("metrics").fields(); it.hasNext(); ) {
            var node = it.next();
            String body = http.send(HttpRequest.newBuilder(URI.create(node.getValue().asText())).timeout(Duration.ofSeconds(10)).build(),
                    HttpResponse.BodyHandlers.ofString()).body();
            long sent = 0;
            for (String line : body.lines().toList()) {
                if (line.startsWith("kafka_server_brokertopicmetrics_messagesout") && line.contains("topic=\"" + topic + "\"")) {
                    sent += (long) Double.parseDouble(line.substring(line.lastIndexOf(' ') + 1));
                }
            }
            out.put(Integer.parseInt(node.getKey()), sent);
        }
        return out;
    }

    /** Fails unless the follower sent every record and the leader none. */
    static String servedByFollower(Placement at) throws Exception {
        Map<Integer, Long> sent = sentByNode(at.entry(), at.topic());
        check(sent.getOrDefault(at.follower(), 0L) >= COUNT && sent.getOrDefault(at.leader(), 0L) == 0,
                "records sent to consumers by node " + sent + ": expected all " + COUNT + " from follower " + at.follower()
                        + " (" + at.rack() + ") and none from leader " + at.leader());
        return "client.rack=" + at.rack() + ": follower " + at.follower() + " sent the records, leader " + at.leader() + " none";
    }

    static String client(Harness.Context ctx) throws Exception {
        Placement at = prepare(ctx, "follower");
        TopicPartition tp = new TopicPartition(at.topic(), 0);
        try (KafkaConsumer<byte[], byte[]> c = consumer(ctx, null, "client.rack", at.rack())) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            List<ConsumerRecord<byte[], byte[]>> got = read(c, COUNT);
            check(offsets(got).equals(range(0, COUNT)), "offsets read " + offsets(got) + ", expected 0.." + (COUNT - 1));
        }
        return servedByFollower(at);
    }

    static String tool(Harness.Context ctx) throws Exception {
        Placement at = prepare(ctx, "tool-follower");
        ToolRunner.Result r = ToolScenarios.tool(ToolScenarios.TOOLS + "consumer.ConsoleConsumer", "--bootstrap-server", ctx.bootstrap(),
                "--topic", at.topic(), "--partition", "0", "--offset", "earliest", "--max-messages", String.valueOf(COUNT),
                "--timeout-ms", String.valueOf(TIMEOUT_MS), "--command-property", "client.rack=" + at.rack());
        long lines = r.out().lines().filter(l -> !l.isBlank()).count();
        check(lines == COUNT, "kafka-console-consumer printed " + lines + " records, expected " + COUNT + ": " + r.tail());
        return servedByFollower(at);
    }
}
