package sluice.compat;

import static sluice.compat.Clients.*;
import static sluice.compat.Harness.TIMEOUT_MS;
import static sluice.compat.Harness.check;
import static sluice.compat.Harness.waitFor;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;

/** The java-client column: Apache Kafka's Producer, Consumer and Admin (kafka-clients). */
final class ClientScenarios {
    private ClientScenarios() {}

    static final Map<String, Harness.Scenario> TABLE = new LinkedHashMap<>();

    static {
        TABLE.put("metadata", ClientScenarios::metadata);
        TABLE.put("admin_topics", ClientScenarios::adminTopics);
        TABLE.put("produce_acks0", ctx -> roundTrip(ctx, "acks0", 100, "acks", "0"));
        TABLE.put("produce_acks1", ctx -> roundTrip(ctx, "acks1", 100, "acks", "1"));
        TABLE.put("produce_acksall", ctx -> roundTrip(ctx, "acksall", 100, "acks", "all"));
        for (String codec : List.of("gzip", "snappy", "lz4", "zstd")) {
            TABLE.put("compression_" + codec, ctx -> roundTrip(ctx, codec, 100, "acks", "all", "compression.type", codec));
        }
        TABLE.put("idempotent_produce", ctx -> roundTrip(ctx, "idempotent", 1000, "acks", "all", "enable.idempotence", "true"));
        TABLE.put("group_resume", ClientScenarios::groupResume);
        TABLE.put("two_groups", ClientScenarios::twoGroups);
        TABLE.put("groups_describe_lag", ClientScenarios::groupsDescribeLag);
        TABLE.put("offsets_for_times", ClientScenarios::offsetsForTimes);
        TABLE.put("delete_records", ClientScenarios::deleteRecords);
        TABLE.put("empty_topic", ClientScenarios::emptyTopic);
        TABLE.put("many_topics", ClientScenarios::manyTopics);
        TABLE.put("regex_subscribe", ClientScenarios::regexSubscribe);
        TABLE.put("transactions_commit_abort", Transactions::commitAbort);
        TABLE.put("read_committed", Transactions::readCommitted);
        TABLE.put("consume_transform_produce", Transactions::consumeTransformProduce);
        TABLE.put("group_kip848", GroupProtocols::kip848);
        TABLE.put("group_migration", GroupProtocols::migration);
        TABLE.put("share_group", GroupProtocols::shareGroup);
        TABLE.put("fetch_from_follower", FollowerFetch::client);
        for (String scenario : Security.ROUND_TRIPS) {
            TABLE.put(scenario, ctx -> Security.roundTrip(ctx, scenario));
        }
        TABLE.put("sasl_wrong_password", Security::wrongPassword);
    }

    static String roundTrip(Harness.Context ctx, String name, int count, String... settings) throws Exception {
        String topic = createTopic(ctx, ctx.name(name), 1);
        List<Rec> sent = sample(count);
        produce(ctx, topic, sent, settings);
        List<ConsumerRecord<byte[], byte[]>> got = readFromBeginning(ctx, topic, count);
        check(offsets(got).equals(range(0, count)), "offsets are not 0..n-1 in order");
        List<Rec> back = new ArrayList<>();
        for (ConsumerRecord<byte[], byte[]> m : got) {
            back.add(asRec(m));
        }
        compare(sent, back);
        return null;
    }

    static String metadata(Harness.Context ctx) throws Exception {
        String topic = createTopic(ctx, ctx.name("metadata"), 1);
        try (Admin admin = admin(ctx)) {
            Collection<Node> nodes = admin.describeCluster().nodes().get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
            List<String> brokers = nodes.stream().map(n -> n.host() + ":" + n.port()).sorted().toList();
            List<String> expected = List.of(ctx.bootstrap().split(",")).stream().sorted().toList();
            check(brokers.equals(expected), "brokers " + brokers + ", expected " + expected);
        }
        int[] requests = {0};
        try (KafkaConsumer<byte[], byte[]> c = consumer(ctx, null)) {
            // Brokers learn of a new topic one after another, as in Kafka: poll.
            var listed = waitFor(topic + " in an all-topics metadata request", () -> {
                requests[0]++;
                var all = c.listTopics(Duration.ofMillis(TIMEOUT_MS)); // one Metadata request for all topics
                return all.containsKey(topic) ? all : null;
            });
            check(listed.get(topic).size() == 1, "topic " + topic + " listed as " + listed.get(topic));
        }
        return requests[0] > 1 ? "the topic appeared in metadata request " + requests[0] : null;
    }

    static String adminTopics(Harness.Context ctx) throws Exception {
        String topic = createTopic(ctx, ctx.name("admin"), 3);
        try (Admin admin = admin(ctx)) {
            // Another broker may not know the topic yet (as with Kafka): poll.
            waitFor("describeTopics to show 3 partitions", () -> partitions(admin, topic) == 3);
            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            admin.incrementalAlterConfigs(Map.of(res, List.of(new AlterConfigOp(new ConfigEntry("retention.ms", "3600000"),
                    AlterConfigOp.OpType.SET)))).all().get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
            // Brokers apply a config change asynchronously (Kafka too): poll for the new value.
            waitFor("describeConfigs to show retention.ms=3600000", () -> "3600000".equals(admin.describeConfigs(List.of(res))
                    .all().get(TIMEOUT_MS, TimeUnit.MILLISECONDS).get(res).get("retention.ms").value()));
            admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(5))).all().get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
            waitFor("5 partitions after createPartitions", () -> partitions(admin, topic) == 5);
            admin.deleteTopics(List.of(topic)).all().get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
            waitFor(topic + " to be gone", () -> !admin.listTopics().names().get().contains(topic));
        }
        return null;
    }

    static int partitions(Admin admin, String topic) throws Exception {
        return admin.describeTopics(List.of(topic)).allTopicNames().get(TIMEOUT_MS, TimeUnit.MILLISECONDS)
                .get(topic).partitions().size();
    }

    static String groupResume(Harness.Context ctx) throws Exception {
        String topic = createTopic(ctx, ctx.name("resume"), 1);
        produce(ctx, topic, sample(100));
        TopicPartition tp = new TopicPartition(topic, 0);
        String[] conf = {"auto.offset.reset", "earliest", "enable.auto.commit", "false"};
        try (KafkaConsumer<byte[], byte[]> first = consumer(ctx, "resume", conf)) {
            first.subscribe(List.of(topic));
            check(offsets(read(first, 50)).equals(range(0, 50)), "first consumer did not read offsets 0..49");
            first.commitSync(Map.of(tp, new OffsetAndMetadata(50)));
        }
        try (KafkaConsumer<byte[], byte[]> second = consumer(ctx, "resume", conf)) {
            second.subscribe(List.of(topic));
            List<ConsumerRecord<byte[], byte[]>> all = new ArrayList<>(read(second, 50));
            second.poll(Duration.ofSeconds(1)).forEach(all::add);
            check(offsets(all).equals(range(50, 100)), "second consumer read offsets " + offsets(all) + ", expected 50..99");
        }
        return null;
    }

    static String twoGroups(Harness.Context ctx) throws Exception {
        String topic = createTopic(ctx, ctx.name("twogroups"), 1);
        produce(ctx, topic, sample(100));
        Map<String, Harness.Probe<?>> drains = new LinkedHashMap<>();
        for (String group : List.of("group-a", "group-b")) {
            drains.put(group, () -> {
                try (KafkaConsumer<byte[], byte[]> c = consumer(ctx, group, "auto.offset.reset", "earliest")) {
                    c.subscribe(List.of(topic));
                    check(offsets(read(c, 100)).equals(range(0, 100)), "offsets not 0..99");
                }
                return null;
            });
        }
        Harness.inParallel(drains);
        return null;
    }

    static String groupsDescribeLag(Harness.Context ctx) throws Exception {
        String topic = createTopic(ctx, ctx.name("lag"), 1);
        produce(ctx, topic, sample(100));
        String group = ctx.name("lag");
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<byte[], byte[]> c = consumer(ctx, "lag", "auto.offset.reset", "earliest", "enable.auto.commit", "false");
             Admin admin = admin(ctx)) {
            c.subscribe(List.of(topic));
            read(c, 60);
            c.commitSync(Map.of(tp, new OffsetAndMetadata(60)));
            var listed = admin.listConsumerGroups().all().get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
            check(listed.stream().anyMatch(g -> g.groupId().equals(group)), "listConsumerGroups lacks " + group);
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).describedGroups().get(group)
                    .get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
            check(d.groupState() == GroupState.STABLE, "group state " + d.groupState() + ", expected Stable");
            check(d.members().size() == 1, d.members().size() + " members, expected 1");
            var assigned = d.members().iterator().next().assignment().topicPartitions();
            check(assigned.equals(java.util.Set.of(tp)), "member assignment " + assigned);
            OffsetAndMetadata committed = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()
                    .get(TIMEOUT_MS, TimeUnit.MILLISECONDS).get(tp);
            check(committed != null && committed.offset() == 60, "committed offset " + committed);
            long end = admin.listOffsets(Map.of(tp, OffsetSpec.latest())).partitionResult(tp)
                    .get(TIMEOUT_MS, TimeUnit.MILLISECONDS).offset();
            check(end - committed.offset() == 40, "lag " + (end - committed.offset()) + ", expected 40");
        }
        return null;
    }

    static String offsetsForTimes(Harness.Context ctx) throws Exception {
        String topic = createTopic(ctx, ctx.name("times"), 1);
        long t0 = System.currentTimeMillis() - 60_000;
        List<Rec> records = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            records.add(new Rec(bytes("k"), bytes("v" + i), List.of(), t0 + i * 1000L));
        }
        produce(ctx, topic, records);
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<byte[], byte[]> c = consumer(ctx, null)) {
            List<Long> got = new ArrayList<>();
            for (long ts : new long[] {t0 + 500, t0 + 2000, t0 + 3000}) {
                OffsetAndTimestamp found = c.offsetsForTimes(Map.of(tp, ts), Duration.ofMillis(TIMEOUT_MS)).get(tp);
                got.add(found == null ? null : found.offset());
            }
            check(got.equals(java.util.Arrays.asList(1L, 2L, null)),
                    "offsets for t0+500, t0+2000, t0+3000: " + got + ", expected [1, 2, null]");
        }
        return null;
    }

    static String deleteRecords(Harness.Context ctx) throws Exception {
        String topic = createTopic(ctx, ctx.name("delrec"), 1);
        produce(ctx, topic, sample(100));
        TopicPartition tp = new TopicPartition(topic, 0);
        try (Admin admin = admin(ctx)) {
            long low = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(30))).lowWatermarks().get(tp)
                    .get(TIMEOUT_MS, TimeUnit.MILLISECONDS).lowWatermark();
            check(low == 30, "deleteRecords answered low watermark " + low);
            long earliest = admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).partitionResult(tp)
                    .get(TIMEOUT_MS, TimeUnit.MILLISECONDS).offset();
            check(earliest == 30, "earliest offset " + earliest + " after deleteRecords");
        }
        long first = readFromBeginning(ctx, topic, 70).get(0).offset();
        check(first == 30, "consuming from the beginning starts at " + first);
        return null;
    }

    static String emptyTopic(Harness.Context ctx) throws Exception {
        String topic = createTopic(ctx, ctx.name("empty"), 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<byte[], byte[]> fromStart = consumer(ctx, null); KafkaConsumer<byte[], byte[]> fromEnd = consumer(ctx, null)) {
            Map<String, KafkaConsumer<byte[], byte[]>> readers = Map.of("beginning", fromStart, "end", fromEnd);
            fromStart.assign(List.of(tp));
            fromStart.seekToBeginning(List.of(tp));
            fromEnd.assign(List.of(tp));
            fromEnd.seekToEnd(List.of(tp));
            for (var e : readers.entrySet()) {
                int n = e.getValue().poll(Duration.ofSeconds(1)).count();
                check(n == 0, "the consumer from the " + e.getKey() + " got " + n + " records from an empty topic");
                // position() resolves a pending reset with ListOffsets: the consumer now sits at 0.
                long at = e.getValue().position(tp, Duration.ofMillis(TIMEOUT_MS));
                check(at == 0, "the consumer from the " + e.getKey() + " is at " + at + ", not 0");
            }
            produce(ctx, topic, List.of(new Rec(bytes("k"), bytes("only"), List.of(), System.currentTimeMillis())));
            for (var e : readers.entrySet()) {
                String v = text(read(e.getValue(), 1).get(0).value());
                check(v.equals("only"), "the consumer from the " + e.getKey() + " read " + v);
            }
        }
        return null;
    }

    static String manyTopics(Harness.Context ctx) throws Exception {
        List<String> names = new ArrayList<>();
        for (int i = 0; i < 200; i++) {
            names.add(ctx.name(String.format("many-%03d", i)));
        }
        try (Admin admin = admin(ctx)) {
            admin.createTopics(names.stream().map(n -> new NewTopic(n, 1, ctx.replication())).toList()).all()
                    .get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
            waitFor("all 200 topics with leaders in one metadata request", () -> ledPartitions(admin, names) == 200);
            admin.deleteTopics(names).all().get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
        }
        return null;
    }

    static String regexSubscribe(Harness.Context ctx) throws Exception {
        String topic = ctx.name("regex-late");
        try (KafkaConsumer<byte[], byte[]> c = consumer(ctx, "regex", "auto.offset.reset", "earliest", "metadata.max.age.ms", "2000")) {
            c.subscribe(Pattern.compile("^" + Pattern.quote(ctx.prefix()) + "regex-.*"));
            int early = c.poll(Duration.ofSeconds(1)).count();
            check(early == 0, early + " records before any matching topic exists");
            createTopic(ctx, topic, 1);
            produce(ctx, topic, List.of(new Rec(bytes("k"), bytes("late"), List.of(), System.currentTimeMillis())));
            ConsumerRecord<byte[], byte[]> m = read(c, 1).get(0);
            check(m.topic().equals(topic) && text(m.value()).equals("late"), "read " + m.topic() + " " + text(m.value()));
        }
        return null;
    }
}
