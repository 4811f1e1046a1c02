package sluice.compat;

import static sluice.compat.Clients.*;
import static sluice.compat.Harness.TIMEOUT_MS;
import static sluice.compat.Harness.check;
import static sluice.compat.Harness.waitFor;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The java-client's group_kip848, group_migration and share_group rows: KIP-848 consumer groups
 * (group.protocol=consumer), the offline conversion of a group between the classic and the
 * consumer protocol, and a KIP-932 share group of two KafkaShareConsumers.
 */
final class GroupProtocols {
    private GroupProtocols() {}

    static final int PARTITIONS = 3;
    static final String[] CONSUMER = {"group.protocol", "consumer"};
    static final String[] CLASSIC = {"group.protocol", "classic"};
    /** How long acknowledged records may take to show in the share group's start offset. */
    static final long ACKNOWLEDGED_WITHIN_MS = 10_000;

    /** {@code perPartition} records on each of the topic's PARTITIONS partitions, acks=all. */
    static void produceSpread(Harness.Context ctx, String topic, int perPartition) throws Exception {
        produceSpread(ctx, topic, 0, perPartition);
    }

    /** The same, values {@code <topic>-<partition>-<from + i>} (unique when {@code from} is the
     * partitions' end offset). */
    static void produceSpread(Harness.Context ctx, String topic, int from, int perPartition) throws Exception {
        try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(props(ctx, "acks", "all"), new ByteArraySerializer(),
                new ByteArraySerializer())) {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < perPartition; i++) {
                for (int part = 0; part < PARTITIONS; part++) {
                    sent.add(p.send(new ProducerRecord<>(topic, part, null, bytes(topic + "-" + part + "-" + (from + i)))));
                }
            }
            for (Future<RecordMetadata> f : sent) {
                f.get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
            }
        }
    }

    static KafkaConsumer<byte[], byte[]> member(Harness.Context ctx, String group, String[] protocol) {
        List<String> settings = new ArrayList<>(List.of("auto.offset.reset", "earliest", "enable.auto.commit", "false"));
        settings.addAll(List.of(protocol));
        return consumer(ctx, group, settings.toArray(String[]::new));
    }

    /** What group members read: the offsets of each partition, in the order read, and how many
     * records each member got. */
    static final class Reads {
        final Map<TopicPartition, List<Long>> offsets = new TreeMap<>((a, b) -> Integer.compare(a.partition(), b.partition()));
        final Map<Integer, Integer> perMember = new TreeMap<>();
        int total;

        void add(int member, ConsumerRecord<byte[], byte[]> r) throws Harness.Failed {
            List<Long> seen = offsets.computeIfAbsent(new TopicPartition(r.topic(), r.partition()), k -> new ArrayList<>());
            check(!seen.contains(r.offset()), "partition " + r.partition() + " offset " + r.offset() + " was read twice");
            seen.add(r.offset());
            perMember.merge(member, 1, Integer::sum);
            total++;
        }

        /** Fails unless each partition's offsets are exactly from..to-1, in order. */
        void expect(String topic, long from, long to) throws Harness.Failed {
            for (int p = 0; p < PARTITIONS; p++) {
                List<Long> got = offsets.getOrDefault(new TopicPartition(topic, p), List.of());
                check(got.equals(range(from, to)), "partition " + p + " read offsets " + got + ", expected " + from + ".." + (to - 1));
            }
        }
    }

    /**
     * Polls every member in turn, each committing what it read after each poll (so a partition
     * that moves to the other member carries on from there), until {@code count} records arrived,
     * then once more to see nothing else comes.
     */
    static Reads drain(List<KafkaConsumer<byte[], byte[]>> members, int count) throws Exception {
        Reads reads = new Reads();
        long deadline = System.currentTimeMillis() + TIMEOUT_MS;
        boolean last = false;
        while (true) {
            for (int m = 0; m < members.size(); m++) {
                KafkaConsumer<byte[], byte[]> c = members.get(m);
                var polled = c.poll(Duration.ofMillis(last ? 500 : 100));
                for (ConsumerRecord<byte[], byte[]> r : polled) {
                    reads.add(m, r);
                }
                if (!polled.isEmpty()) {
                    c.commitSync();
                }
            }
            if (last) {
                return reads;
            }
            last = reads.total >= count;
            check(last || System.currentTimeMillis() < deadline, "read " + reads.total + " of " + count + " records in "
                    + TIMEOUT_MS / 1000 + "s");
        }
    }

    static Map<TopicPartition, Long> committed(Admin admin, String group) throws Exception {
        Map<TopicPartition, Long> out = new TreeMap<>((a, b) -> Integer.compare(a.partition(), b.partition()));
        for (var e : admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(TIMEOUT_MS, TimeUnit.MILLISECONDS).entrySet()) {
            out.put(e.getKey(), e.getValue() == null ? null : e.getValue().offset());
        }
        return out;
    }

    static void expectCommitted(Admin admin, String group, String topic, long offset) throws Exception {
        Map<TopicPartition, Long> want = new HashMap<>();
        for (int p = 0; p < PARTITIONS; p++) {
            want.put(new TopicPartition(topic, p), offset);
        }
        Map<TopicPartition, Long> got = committed(admin, group);
        check(got.equals(want), "committed offsets " + got + ", expected " + offset + " on each partition");
    }

    static GroupType typeOf(Admin admin, String group) throws Exception {
        return admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get(TIMEOUT_MS, TimeUnit.MILLISECONDS).type();
    }

    /**
     * Two KIP-848 members split a 3-partition topic (the broker assigns), read 20 records of each
     * partition between them, each once, and commit; both close; a new member resumes at the
     * committed offsets: the 10 records of each partition produced since, nothing before.
     */
    static String kip848(Harness.Context ctx) throws Exception {
        String topic = createTopic(ctx, ctx.name("kip848"), PARTITIONS), group = ctx.name("kip848");
        String split;
        try (KafkaConsumer<byte[], byte[]> a = member(ctx, "kip848", CONSUMER); KafkaConsumer<byte[], byte[]> b = member(ctx, "kip848", CONSUMER)) {
            a.subscribe(List.of(topic));
            b.subscribe(List.of(topic));
            // The topic is empty: polls only heartbeat until the coordinator has split it.
            waitFor("the coordinator to split the 3 partitions between the two members", () -> {
                a.poll(Duration.ofMillis(100));
                b.poll(Duration.ofMillis(100));
                Set<TopicPartition> both = new HashSet<>(a.assignment());
                both.addAll(b.assignment());
                return !a.assignment().isEmpty() && !b.assignment().isEmpty() && both.size() == PARTITIONS
                        && a.assignment().size() + b.assignment().size() == PARTITIONS;
            });
            split = a.assignment().size() + "+" + b.assignment().size();
            produceSpread(ctx, topic, 20);
            Reads reads = drain(List.of(a, b), 20 * PARTITIONS);
            reads.expect(topic, 0, 20);
            check(reads.perMember.size() == 2, "one member read everything: " + reads.perMember);
            split += " partitions, records read " + reads.perMember.values();
        }
        try (Admin admin = admin(ctx)) {
            expectCommitted(admin, group, topic, 20);
            produceSpread(ctx, topic, 10);
            try (KafkaConsumer<byte[], byte[]> again = member(ctx, "kip848", CONSUMER)) {
                again.subscribe(List.of(topic));
                drain(List.of(again), 10 * PARTITIONS).expect(topic, 20, 30);
                GroupType type = typeOf(admin, group);
                check(type == GroupType.CONSUMER, "described as a " + type + " group, expected CONSUMER");
            }
            expectCommitted(admin, group, topic, 30);
        }
        return "two members: " + split;
    }

    /**
     * A classic member reads and commits, and leaves; a consumer-protocol member joins the now
     * empty group (converted to a consumer group) and resumes at its commits; then a classic one
     * again (converted back). Each reads exactly the 10 records per partition produced since.
     */
    static String migration(Harness.Context ctx) throws Exception {
        String topic = createTopic(ctx, ctx.name("migration"), PARTITIONS), group = ctx.name("migration");
        List<String> seen = new ArrayList<>();
        try (Admin admin = admin(ctx)) {
            long at = 0;
            for (String[] protocol : List.of(CLASSIC, CONSUMER, CLASSIC)) {
                produceSpread(ctx, topic, 10);
                try (KafkaConsumer<byte[], byte[]> c = member(ctx, "migration", protocol)) {
                    c.subscribe(List.of(topic));
                    drain(List.of(c), 10 * PARTITIONS).expect(topic, at, at + 10);
                    GroupType type = typeOf(admin, group);
                    GroupType want = protocol == CONSUMER ? GroupType.CONSUMER : GroupType.CLASSIC;
                    check(type == want, "with a " + protocol[1] + " member the group is described as " + type + ", expected " + want);
                    seen.add(type.toString());
                }
                at += 10;
                expectCommitted(admin, group, topic, at);
            }
        }
        return "group type " + String.join(" -> ", seen);
    }

    /** Sets the group config share.auto.offset.reset=earliest and waits until it is read back. */
    static void shareFromEarliest(Admin admin, String group) throws Exception {
        ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, group);
        admin.incrementalAlterConfigs(Map.of(res, List.of(new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"),
                AlterConfigOp.OpType.SET)))).all().get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
        // Brokers apply a config change asynchronously (Kafka too): poll for the new value.
        waitFor("describeConfigs to show the group's share.auto.offset.reset=earliest", () -> {
            ConfigEntry e = admin.describeConfigs(List.of(res)).all().get(TIMEOUT_MS, TimeUnit.MILLISECONDS).get(res)
                    .get("share.auto.offset.reset");
            return e != null && "earliest".equals(e.value());
        });
    }

    /**
     * A 1-partition topic for share group {@code group} whose leader is not the group's coordinator
     * (on a cluster): the share-partition's state then lives on another broker than the group, as
     * it mostly does in a real cluster. A share consumer subscribed to another topic first makes
     * the group, whose coordinator describeShareGroups then names (subscribed to this one, its
     * metadata request would create it).
     */
    static String shareTopic(Harness.Context ctx, Admin admin, String topic, String group) throws Exception {
        if (ctx.brokers() < 2) {
            return createTopic(ctx, topic, 1);
        }
        int coordinator;
        String probe = createTopic(ctx, topic + "-probe", 1);
        try (KafkaShareConsumer<byte[], byte[]> c = shareMember(ctx, group)) {
            c.subscribe(List.of(probe));
            coordinator = waitFor("share group " + group + " to exist", () -> {
                c.poll(Duration.ofMillis(100));
                return admin.describeShareGroups(List.of(group)).describedGroups().get(group)
                        .get(TIMEOUT_MS, TimeUnit.MILLISECONDS).coordinator().id();
            });
        }
        List<Integer> replicas = new ArrayList<>();
        for (int i = 0; i < ctx.brokers(); i++) {
            replicas.add((coordinator + i) % ctx.brokers() + 1); // node ids are 1..N; the first is not the coordinator
        }
        admin.createTopics(List.of(new NewTopic(topic, Map.of(0, replicas)))).all().get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
        waitFor("a leader of " + topic, () -> ledPartitions(admin, List.of(topic)) == 1);
        return topic;
    }

    /** The share group's start offset of partition 0 of {@code topic} (every record before it acknowledged). */
    static long shareStart(Admin admin, String group, String topic) throws Exception {
        TopicPartition tp = new TopicPartition(topic, 0);
        SharePartitionOffsetInfo info = admin.listShareGroupOffsets(Map.of(group, new ListShareGroupOffsetsSpec()))
                .partitionsToOffsetInfo(group).get(TIMEOUT_MS, TimeUnit.MILLISECONDS).get(tp);
        return info == null ? -1 : info.startOffset();
    }

    /**
     * Two KafkaShareConsumers of one share group on a 1-partition topic of 100 records: together
     * they receive every record once, acknowledging each poll's records (implicitly, by
     * commitSync), and the group's start offset reaches 100.
     */
    static String shareGroup(Harness.Context ctx) throws Exception {
        String group = ctx.name("share");
        int count = 100;
        int[] perMember = new int[2];
        try (Admin admin = admin(ctx)) {
            String topic = shareTopic(ctx, admin, ctx.name("share"), group);
            shareFromEarliest(admin, group);
            produce(ctx, topic, sample(count));
            Map<Long, Integer> by = new HashMap<>();
            try (KafkaShareConsumer<byte[], byte[]> a = shareMember(ctx, group); KafkaShareConsumer<byte[], byte[]> b = shareMember(ctx, group)) {
                List<KafkaShareConsumer<byte[], byte[]>> members = List.of(a, b);
                for (var m : members) {
                    m.subscribe(List.of(topic));
                }
                long deadline = System.currentTimeMillis() + TIMEOUT_MS;
                while (by.size() < count) {
                    check(System.currentTimeMillis() < deadline, "received " + by.size() + " of " + count + " records in " + TIMEOUT_MS / 1000 + "s");
                    for (int i = 0; i < members.size(); i++) {
                        var polled = members.get(i).poll(Duration.ofMillis(100));
                        for (ConsumerRecord<byte[], byte[]> r : polled) {
                            Integer before = by.put(r.offset(), i);
                            check(before == null, "offset " + r.offset() + " delivered twice (to members " + before + " and " + i + ")");
                            perMember[i]++;
                        }
                        if (!polled.isEmpty()) {
                            members.get(i).commitSync(Duration.ofMillis(TIMEOUT_MS));
                        }
                    }
                }
                check(by.keySet().equals(new HashSet<>(range(0, count))), "received offsets other than 0.." + (count - 1));
                waitFor("listShareGroupOffsets to show start offset " + count + " (every record acknowledged)",
                        ACKNOWLEDGED_WITHIN_MS, () -> shareStart(admin, group, topic) == count);
            }
        }
        return "records received per member: " + perMember[0] + " + " + perMember[1];
    }

    static KafkaShareConsumer<byte[], byte[]> shareMember(Harness.Context ctx, String group) {
        return new KafkaShareConsumer<>(props(ctx, "group.id", group), new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }
}
