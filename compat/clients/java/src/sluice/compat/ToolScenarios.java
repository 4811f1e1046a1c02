package sluice.compat;

import static sluice.compat.Clients.*;
import static sluice.compat.Harness.TIMEOUT_MS;
import static sluice.compat.Harness.check;
import static sluice.compat.Harness.waitFor;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;

/**
 * The kafka-tools column: Apache Kafka's own CLI tool classes (kafka-tools 4.4, kafka-configs
 * among them), each run in-process by ToolRunner. A row passes only when the tool exits 0 and
 * its output (or the cluster afterwards) shows the operation happened.
 */
final class ToolScenarios {
    private ToolScenarios() {}

    static final String TOOLS = "org.apache.kafka.tools.";
    static final Map<String, Harness.Scenario> TABLE = new LinkedHashMap<>();

    static {
        TABLE.put("tool_topics", ToolScenarios::topics);
        TABLE.put("tool_configs", ToolScenarios::configs);
        TABLE.put("tool_console", ToolScenarios::console);
        TABLE.put("tool_consumer_groups", ToolScenarios::consumerGroups);
        TABLE.put("tool_delete_records", ToolScenarios::deleteRecords);
        TABLE.put("tool_log_dirs", ToolScenarios::logDirs);
        TABLE.put("tool_leader_election", ToolScenarios::leaderElection);
        TABLE.put("tool_reassign_partitions", ToolScenarios::reassignPartitions);
        TABLE.put("tool_metadata_quorum", ToolScenarios::metadataQuorum);
        TABLE.put("tool_perf", ToolScenarios::perf);
        TABLE.put("tool_verifiable", ToolScenarios::verifiable);
        TABLE.put("tool_client_compatibility", ToolScenarios::clientCompatibility);
        TABLE.put("tool_scram_users", ToolScenarios::scramUsers);
        TABLE.put("tool_transactions", Transactions::tool);
        TABLE.put("group_kip848", ToolGroupProtocols::kip848);
        TABLE.put("group_migration", ToolGroupProtocols::migration);
        TABLE.put("share_group", ToolGroupProtocols::shareGroup);
        TABLE.put("fetch_from_follower", FollowerFetch::tool);
    }

    /** Runs a tool with stdin; fails with its output unless it exits 0. */
    static ToolRunner.Result toolWithInput(String stdin, String mainClass, String... args) throws Exception {
        return exitedZero(ToolRunner.run(mainClass, stdin, args), mainClass, args);
    }

    static ToolRunner.Result exitedZero(ToolRunner.Result r, String mainClass, String... args) throws Exception {
        check(r.exitCode() == 0, label(mainClass, args) + " exited " + r.exitCode() + ": " + r.tail());
        return r;
    }

    /** The tool's class and its first arguments, without the bootstrap list and file paths. */
    static String label(String mainClass, String... args) {
        List<String> shown = new ArrayList<>();
        for (int i = 0; i < args.length && shown.size() < 4; i++) {
            if (args[i].equals("--bootstrap-server") || args[i].endsWith("-json-file")) {
                i++;
            } else {
                shown.add(args[i]);
            }
        }
        return mainClass.substring(mainClass.lastIndexOf('.') + 1) + " " + String.join(" ", shown);
    }

    static ToolRunner.Result tool(String mainClass, String... args) throws Exception {
        return toolWithInput(null, mainClass, args);
    }

    static void shows(ToolRunner.Result r, String expected, String what) throws Harness.Failed {
        check(r.both().contains(expected), what + ": the output lacks \"" + expected + "\": " + r.tail());
    }

    static String topics(Harness.Context ctx) throws Exception {
        String t = ctx.name("tool-topics"), b = ctx.bootstrap();
        String topicCommand = TOOLS + "TopicCommand";
        shows(tool(topicCommand, "--bootstrap-server", b, "--create", "--topic", t, "--partitions", "3",
                "--replication-factor", String.valueOf(ctx.brokers())), "Created topic " + t, "kafka-topics --create");
        ToolRunner.Result d = tool(topicCommand, "--bootstrap-server", b, "--describe", "--topic", t);
        shows(d, "PartitionCount: 3", "kafka-topics --describe");
        shows(d, "ReplicationFactor: " + ctx.brokers(), "kafka-topics --describe");
        tool(topicCommand, "--bootstrap-server", b, "--alter", "--topic", t, "--partitions", "5");
        waitFor("kafka-topics --describe to show 5 partitions",
                () -> tool(topicCommand, "--bootstrap-server", b, "--describe", "--topic", t).out().contains("PartitionCount: 5"));
        tool(topicCommand, "--bootstrap-server", b, "--delete", "--topic", t);
        waitFor(t + " gone from kafka-topics --list",
                () -> !tool(topicCommand, "--bootstrap-server", b, "--list").out().lines().toList().contains(t));
        return null;
    }

    static String configs(Harness.Context ctx) throws Exception {
        String t = createTopic(ctx, ctx.name("tool-configs"), 1), b = ctx.bootstrap();
        String configCommand = "org.apache.kafka.tools.ConfigCommand";
        tool(configCommand, "--bootstrap-server", b, "--alter", "--entity-type", "topics", "--entity-name", t,
                "--add-config", "retention.ms=3600000");
        // Brokers apply a config change asynchronously (Kafka too): poll the describe.
        waitFor("kafka-configs --describe to show the topic's retention.ms=3600000", () -> tool(configCommand,
                "--bootstrap-server", b, "--describe", "--entity-type", "topics", "--entity-name", t).out().contains("retention.ms=3600000"));
        // A broker setting whose new value equals Kafka's default (7 days): visible, harmless.
        tool(configCommand, "--bootstrap-server", b, "--alter", "--entity-type", "brokers", "--entity-name", "1",
                "--add-config", "log.retention.ms=604800000");
        waitFor("kafka-configs --describe to show broker 1's log.retention.ms=604800000", () -> tool(configCommand,
                "--bootstrap-server", b, "--describe", "--entity-type", "brokers", "--entity-name", "1").out().contains("log.retention.ms=604800000"));
        shows(tool(configCommand, "--bootstrap-server", b, "--describe", "--entity-type", "brokers", "--entity-name", "1", "--all"),
                "num.partitions=", "kafka-configs --describe --all broker 1");
        return null;
    }

    static String console(Harness.Context ctx) throws Exception {
        String t = ctx.name("tool-console"), b = ctx.bootstrap();
        List<String> lines = new ArrayList<>();
        for (int i = 0; i < 100; i++) {
            lines.add("key-" + i + ":line-" + i);
        }
        toolWithInput(String.join("\n", lines) + "\n", TOOLS + "ConsoleProducer", "--bootstrap-server", b, "--topic", t,
                "--reader-property", "parse.key=true", "--reader-property", "key.separator=:");
        ToolRunner.Result r = tool(TOOLS + "consumer.ConsoleConsumer", "--bootstrap-server", b, "--topic", t,
                "--from-beginning", "--max-messages", "100", "--timeout-ms", String.valueOf(TIMEOUT_MS),
                "--group", ctx.name("tool-console"), "--formatter-property", "print.key=true",
                "--formatter-property", "key.separator=:");
        List<String> got = r.out().lines().filter(l -> !l.isBlank()).toList();
        check(got.equals(lines), "console consumer printed " + got.size() + " lines, first " + got.stream().limit(2).toList()
                + ", expected the 100 produced");
        return null;
    }

    static String consumerGroups(Harness.Context ctx) throws Exception {
        String t = createTopic(ctx, ctx.name("tool-groups"), 1), b = ctx.bootstrap(), group = ctx.name("tool-groups");
        produce(ctx, t, sample(100));
        try (KafkaConsumer<byte[], byte[]> c = consumer(ctx, "tool-groups", "auto.offset.reset", "earliest", "enable.auto.commit", "false")) {
            c.subscribe(List.of(t));
            read(c, 100);
            c.commitSync();
        }
        String command = TOOLS + "consumer.group.ConsumerGroupCommand";
        check(tool(command, "--bootstrap-server", b, "--list").out().lines().toList().contains(group),
                "kafka-consumer-groups --list lacks " + group);
        check(describedOffsets(b, group, t).equals(List.of("100", "100", "0")),
                "--describe (current, log end, lag) " + describedOffsets(b, group, t) + ", expected [100, 100, 0]");
        ToolRunner.Result reset = tool(command, "--bootstrap-server", b, "--reset-offsets", "--group", group, "--topic", t,
                "--to-offset", "30", "--execute");
        check(reset.out().lines().anyMatch(l -> l.trim().matches(".*" + t + "\\s+0\\s+30$")), "--reset-offsets output: " + reset.tail());
        check(describedOffsets(b, group, t).equals(List.of("30", "100", "70")),
                "--describe after the reset " + describedOffsets(b, group, t) + ", expected [30, 100, 70]");
        return null;
    }

    /** CURRENT-OFFSET, LOG-END-OFFSET and LAG of partition 0 in kafka-consumer-groups --describe. */
    static List<String> describedOffsets(String b, String group, String topic) throws Exception {
        return describedOffsets(b, group, topic, 0);
    }

    /** The same of partition {@code partition}. */
    static List<String> describedOffsets(String b, String group, String topic, int partition) throws Exception {
        ToolRunner.Result d = tool(TOOLS + "consumer.group.ConsumerGroupCommand", "--bootstrap-server", b, "--describe", "--group", group);
        for (String line : d.out().lines().toList()) {
            String[] f = line.trim().split("\\s+");
            if (f.length >= 6 && f[0].equals(group) && f[1].equals(topic) && f[2].equals(String.valueOf(partition))) {
                return List.of(f[3], f[4], f[5]);
            }
        }
        throw new Harness.Failed("kafka-consumer-groups --describe shows no row for " + topic + "-" + partition + ": " + d.tail());
    }

    static String deleteRecords(Harness.Context ctx) throws Exception {
        String t = createTopic(ctx, ctx.name("tool-delrec"), 1);
        produce(ctx, t, sample(100));
        Path json = Files.createTempFile("sluice-compat-delete-records", ".json");
        Files.writeString(json, "{\"partitions\":[{\"topic\":\"" + t + "\",\"partition\":0,\"offset\":30}],\"version\":1}");
        ToolRunner.Result r = tool(TOOLS + "DeleteRecordsCommand", "--bootstrap-server", ctx.bootstrap(), "--offset-json-file", json.toString());
        Files.deleteIfExists(json);
        shows(r, "low_watermark: 30", "kafka-delete-records");
        check(!r.both().contains("error"), "kafka-delete-records reported an error: " + r.tail());
        check(earliest(ctx, t) == 30, "earliest offset " + earliest(ctx, t) + " after kafka-delete-records, expected 30");
        return null;
    }

    static long earliest(Harness.Context ctx, String topic) throws Exception {
        TopicPartition tp = new TopicPartition(topic, 0);
        try (Admin admin = admin(ctx)) {
            return admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).partitionResult(tp).get(TIMEOUT_MS, TimeUnit.MILLISECONDS).offset();
        }
    }

    static String logDirs(Harness.Context ctx) throws Exception {
        String t = createTopic(ctx, ctx.name("tool-logdirs"), 1);
        produce(ctx, t, sample(10));
        ToolRunner.Result r = tool(TOOLS + "LogDirsCommand", "--bootstrap-server", ctx.bootstrap(), "--describe", "--topic-list", t);
        shows(r, "\"partition\":\"" + t + "-0\"", "kafka-log-dirs --describe");
        check(!r.out().contains("\"size\":0,"), "kafka-log-dirs reports size 0 for a partition holding 10 records: " + r.tail());
        return null;
    }

    static String leaderElection(Harness.Context ctx) throws Exception {
        String t = createTopic(ctx, ctx.name("tool-elect"), 1);
        ToolRunner.Result r = tool(TOOLS + "LeaderElectionCommand", "--bootstrap-server", ctx.bootstrap(),
                "--election-type", "PREFERRED", "--topic", t, "--partition", "0");
        // The preferred replica leads a fresh partition already; Kafka answers ELECTION_NOT_NEEDED.
        check(r.out().contains("Valid replica already elected for partitions " + t + "-0")
                || r.out().contains("Successfully completed leader election (PREFERRED) for partitions " + t + "-0"),
                "kafka-leader-election output: " + r.tail());
        return null;
    }

    static String reassignPartitions(Harness.Context ctx) throws Exception {
        if (ctx.brokers() < 2) {
            throw new Harness.NotApplicable("moving a replica needs more than one broker");
        }
        // Replication factor 2 (not N) so that one broker holds no replica and one can move there.
        String t = createTopic(ctx, ctx.name("tool-reassign"), 1, (short) 2), b = ctx.bootstrap();
        String command = TOOLS + "reassign.ReassignPartitionsCommand";
        Path topics = Files.createTempFile("sluice-compat-topics", ".json");
        Path plan = Files.createTempFile("sluice-compat-reassign", ".json");
        try (Admin admin = admin(ctx)) {
            Files.writeString(topics, "{\"topics\":[{\"topic\":\"" + t + "\"}],\"version\":1}");
            shows(tool(command, "--bootstrap-server", b, "--topics-to-move-json-file", topics.toString(), "--broker-list",
                    brokerList(ctx.brokers()), "--generate"), "Proposed partition reassignment configuration", "--generate");
            List<Integer> now = replicas(admin, t);
            int free = java.util.stream.IntStream.rangeClosed(1, ctx.brokers()).filter(id -> !now.contains(id)).findFirst().orElseThrow();
            List<Integer> target = List.of(now.get(0), free);
            Files.writeString(plan, "{\"version\":1,\"partitions\":[{\"topic\":\"" + t + "\",\"partition\":0,\"replicas\":"
                    + target + ",\"log_dirs\":[\"any\",\"any\"]}]}");
            shows(tool(command, "--bootstrap-server", b, "--reassignment-json-file", plan.toString(), "--execute"),
                    "Successfully started partition reassignment", "--execute");
            waitFor("--verify to report the reassignment of " + t + "-0 complete", () -> tool(command, "--bootstrap-server", b,
                    "--reassignment-json-file", plan.toString(), "--verify").out().contains("Reassignment of partition " + t + "-0 is completed"));
            check(replicas(admin, t).equals(target), "replicas after the reassignment " + replicas(admin, t) + ", expected " + target);
            return "moved " + t + "-0 from replicas " + now + " to " + target;
        } finally {
            Files.deleteIfExists(topics);
            Files.deleteIfExists(plan);
        }
    }

    static String brokerList(int n) {
        return java.util.stream.IntStream.rangeClosed(1, n).mapToObj(String::valueOf).collect(Collectors.joining(","));
    }

    static List<Integer> replicas(Admin admin, String topic) throws Exception {
        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get(TIMEOUT_MS, TimeUnit.MILLISECONDS).get(topic);
        return d.partitions().get(0).replicas().stream().map(Node::id).toList();
    }

    static String metadataQuorum(Harness.Context ctx) throws Exception {
        String command = TOOLS + "MetadataQuorumCommand", b = ctx.bootstrap();
        ToolRunner.Result status = tool(command, "--bootstrap-server", b, "describe", "--status");
        Map<String, String> fields = new LinkedHashMap<>();
        status.out().lines().filter(l -> l.contains(":")).forEach(l -> fields.put(l.split(":", 2)[0].trim(), l.split(":", 2)[1].trim()));
        check(fields.containsKey("LeaderId") && Integer.parseInt(fields.get("LeaderId")) >= 1, "--status LeaderId: " + status.tail());
        check(Long.parseLong(fields.getOrDefault("HighWatermark", "-1")) > 0, "--status HighWatermark: " + status.tail());
        check(fields.getOrDefault("CurrentVoters", "").split("\"id\"", -1).length - 1 == ctx.brokers(),
                "--status CurrentVoters lists other than " + ctx.brokers() + " voters: " + fields.get("CurrentVoters"));
        ToolRunner.Result replication = tool(command, "--bootstrap-server", b, "describe", "--replication");
        long leaders = replication.out().lines().filter(l -> l.trim().endsWith("Leader")).count();
        long followers = replication.out().lines().filter(l -> l.trim().endsWith("Follower")).count();
        check(leaders == 1 && followers == ctx.brokers() - 1, "--replication shows " + leaders + " leader(s) and " + followers
                + " follower(s), expected 1 and " + (ctx.brokers() - 1) + ": " + replication.tail());
        return null;
    }

    static String perf(Harness.Context ctx) throws Exception {
        String t = createTopic(ctx, ctx.name("tool-perf"), 1), b = ctx.bootstrap();
        shows(tool(TOOLS + "ProducerPerformance", "--topic", t, "--num-records", "2000", "--record-size", "100",
                "--throughput", "-1", "--bootstrap-server", b), "2000 records sent", "producer-perf-test");
        ToolRunner.Result c = tool(TOOLS + "ConsumerPerformance", "--bootstrap-server", b, "--topic", t, "--num-records", "2000",
                "--group", ctx.name("tool-perf"), "--timeout", String.valueOf(TIMEOUT_MS));
        // Header "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, ..." then one row.
        List<String> rows = c.out().lines().filter(l -> !l.isBlank()).toList();
        int column = List.of(rows.get(0).split(",\\s*")).indexOf("data.consumed.in.nMsg");
        check(column >= 0 && rows.size() >= 2, "consumer-perf-test output: " + c.tail());
        String consumed = rows.get(1).split(",\\s*")[column].trim();
        check(consumed.equals("2000"), "consumer-perf-test consumed " + consumed + " records, expected 2000");
        return null;
    }

    static String verifiable(Harness.Context ctx) throws Exception {
        String t = createTopic(ctx, ctx.name("tool-verifiable"), 1), b = ctx.bootstrap();
        String producer = TOOLS + "VerifiableProducer", consumer = TOOLS + "VerifiableConsumer";
        String[] producerArgs = {"--bootstrap-server", b, "--topic", t, "--max-messages", "200"};
        ToolRunner.Result p = exitedZero(ToolRunner.runInOwnJvm(producer, producerArgs), producer, producerArgs);
        long acked = p.out().lines().filter(l -> l.contains("\"name\":\"producer_send_success\"")).count();
        check(acked == 200, "verifiable producer: " + acked + " of 200 sends acknowledged: " + p.tail());
        String[] consumerArgs = {"--bootstrap-server", b, "--topic", t, "--group-id", ctx.name("tool-verifiable"),
            "--max-messages", "200", "--reset-policy", "earliest"};
        ToolRunner.Result c = exitedZero(ToolRunner.runInOwnJvm(consumer, consumerArgs), consumer, consumerArgs);
        long consumed = c.out().lines().filter(l -> l.contains("\"name\":\"records_consumed\""))
                .mapToLong(l -> Long.parseLong(l.replaceAll(".*\"count\":(\\d+).*", "$1"))).sum();
        check(consumed == 200, "verifiable consumer consumed " + consumed + " of the 200 acknowledged records: " + c.tail());
        return "each tool in its own JVM: they call System.exit and report from JVM shutdown hooks";
    }

    /**
     * kafka-configs, logged in as the administrator over SASL_SSL, creates a SCRAM-SHA-512 user and
     * lists it; that user then produces with kafka-console-producer over SASL_SSL, and the records
     * are read back.
     */
    static String scramUsers(Harness.Context ctx) throws Exception {
        Security.Login admin = ctx.login("tool_scram_users");
        String b = admin.bootstrap(), user = ctx.name("user"), password = "pw-" + Long.toHexString(System.nanoTime());
        String configCommand = "org.apache.kafka.tools.ConfigCommand", adminConfig = admin.file().toString();
        shows(tool(configCommand, "--bootstrap-server", b, "--command-config", adminConfig, "--alter", "--add-config",
                "SCRAM-SHA-512=[password=" + password + "]", "--entity-type", "users", "--entity-name", user),
                "Completed updating config for user " + user + ".", "kafka-configs --alter --add-config SCRAM-SHA-512");
        shows(tool(configCommand, "--bootstrap-server", b, "--command-config", adminConfig, "--describe", "--entity-type", "users"),
                "SCRAM credential configs for user-principal '" + user + "' are SCRAM-SHA-512=iterations=", "kafka-configs --describe");
        Security.Login login = admin.as(user, password);
        // Each broker learns of the user when it applies the quorum's record (Kafka's too): wait
        // until every one lets the user in (an Admin's first connection is to its one bootstrap).
        for (String broker : b.split(",")) {
            Properties one = login.client();
            one.put("bootstrap.servers", broker);
            waitFor(user + " logging in at " + broker, () -> {
                try (Admin a = Admin.create(one)) {
                    return a.describeCluster().clusterId().get(TIMEOUT_MS, TimeUnit.MILLISECONDS) != null;
                }
            });
        }
        String t = createTopic(ctx, ctx.name("tool-scram-users"), 1);
        List<String> lines = new ArrayList<>();
        for (int i = 0; i < 20; i++) {
            lines.add(user + "-" + i);
        }
        toolWithInput(String.join("\n", lines) + "\n", TOOLS + "ConsoleProducer", "--bootstrap-server", b, "--topic", t,
                "--command-config", login.file().toString(), "--command-property", "acks=all");
        List<String> got = readFromBeginning(ctx, t, lines.size()).stream().map(r -> text(r.value())).toList();
        check(got.equals(lines), "read back " + got.size() + " records, first " + got.stream().limit(2).toList()
                + ", expected the " + lines.size() + " " + user + " produced");
        return null;
    }

    static String clientCompatibility(Harness.Context ctx) throws Exception {
        String t = ctx.name("tool-compat");
        // The flags say what Kafka 4.4 supports: the tool checks the broker does the same.
        tool(TOOLS + "ClientCompatibilityTest", "--bootstrap-server", ctx.bootstrap(), "--topic", t,
                "--offsets-for-times-supported", "true", "--cluster-id-supported", "true",
                "--expect-record-too-large-exception", "false", "--num-cluster-nodes", String.valueOf(ctx.brokers()),
                "--create-topics-supported", "true", "--describe-acls-supported", "true",
                "--describe-configs-supported", "true", "--idempotent-producer-supported", "true");
        TopicPartition tp = new TopicPartition(t, 0);
        try (Admin admin = admin(ctx)) {
            long end = admin.listOffsets(Map.of(tp, OffsetSpec.latest())).partitionResult(tp).get(TIMEOUT_MS, TimeUnit.MILLISECONDS).offset();
            check(end > 0, "ClientCompatibilityTest exited 0 but " + t + " holds no records");
            return "checked afterwards: " + t + " holds " + end + " records";
        }
    }
}
