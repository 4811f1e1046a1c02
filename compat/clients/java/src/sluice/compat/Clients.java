package sluice.compat;

import static sluice.compat.Harness.TIMEOUT_MS;
import static sluice.compat.Harness.check;
import static sluice.compat.Harness.waitFor;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/** The Java client with its default settings, as the scenarios and the tool set-ups use it. */
final class Clients {
    private Clients() {}

    /** A record as sent and as read back; equal when key, value, headers and timestamp are. */
    record Rec(byte[] key, byte[] value, List<Header> headers, long timestamp) {
        boolean same(Rec o) {
            return Arrays.equals(key, o.key) && Arrays.equals(value, o.value) && timestamp == o.timestamp
                    && headers.size() == o.headers.size() && sameHeaders(o.headers);
        }

        private boolean sameHeaders(List<Header> other) {
            for (int i = 0; i < headers.size(); i++) {
                Header a = headers.get(i), b = other.get(i);
                if (!a.key().equals(b.key()) || !Arrays.equals(a.value(), b.value())) {
                    return false;
                }
            }
            return true;
        }

        String describe() {
            StringBuilder h = new StringBuilder();
            for (Header x : headers) {
                h.append(x.key()).append('=').append(Arrays.toString(x.value())).append(' ');
            }
            return "key=" + text(key) + " value=" + text(value) + " headers=[" + h.toString().trim() + "] ts=" + timestamp;
        }
    }

    static String text(byte[] b) {
        return b == null ? "null" : new String(b, StandardCharsets.UTF_8);
    }

    static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    /** {@code count} records with keys, two headers (the second binary) and CreateTime t0+i. */
    static List<Rec> sample(int count) {
        long t0 = System.currentTimeMillis() - 60_000;
        List<Rec> out = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            List<Header> headers = List.of(new RecordHeader("trace", bytes("t-" + i)),
                    new RecordHeader("bin", new byte[] {0, (byte) 0xff, (byte) 0x80, 1, (byte) (i % 97 + 2)}));
            out.add(new Rec(bytes("key-" + i), bytes(("value-" + i + "-").repeat(3)), headers, t0 + i));
        }
        return out;
    }

    static void compare(List<Rec> sent, List<Rec> got) throws Harness.Failed {
        for (int i = 0; i < Math.min(sent.size(), got.size()); i++) {
            check(sent.get(i).same(got.get(i)), "record " + i + " read back as " + got.get(i).describe()
                    + ", sent " + sent.get(i).describe());
        }
        check(sent.size() == got.size(), "read back " + got.size() + " records, sent " + sent.size());
    }

    static Properties props(Harness.Context ctx, String... kv) {
        Properties p = new Properties();
        p.put("bootstrap.servers", ctx.bootstrap());
        for (int i = 0; i + 1 < kv.length; i += 2) {
            p.put(kv[i], kv[i + 1]);
        }
        return p;
    }

    static Admin admin(Harness.Context ctx) {
        return Admin.create(props(ctx));
    }

    static String createTopic(Harness.Context ctx, String name, int partitions) throws Exception {
        return createTopic(ctx, name, partitions, ctx.replication());
    }

    static String createTopic(Harness.Context ctx, String name, int partitions, short replication) throws Exception {
        try (Admin admin = admin(ctx)) {
            admin.createTopics(List.of(new NewTopic(name, partitions, replication))).all()
                    .get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
            waitFor("leaders of " + name, () -> ledPartitions(admin, List.of(name)) == partitions);
        }
        return name;
    }

    /** Partitions with a leader across {@code names}, from one DescribeTopics (Metadata) call. */
    static int ledPartitions(Admin admin, List<String> names) throws Exception {
        Map<String, TopicDescription> d = admin.describeTopics(names).allTopicNames().get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
        return (int) d.values().stream().flatMap(t -> t.partitions().stream()).filter(p -> p.leader() != null).count();
    }

    static void produce(Harness.Context ctx, String topic, List<Rec> records, String... settings) throws Exception {
        Properties p = props(ctx, settings);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (Rec r : records) {
                sent.add(producer.send(new ProducerRecord<>(topic, null, r.timestamp(), r.key(), r.value(), r.headers())));
            }
            producer.flush();
            for (int i = 0; i < sent.size(); i++) {
                try {
                    sent.get(i).get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
                } catch (Exception e) {
                    throw new Harness.Failed("record " + i + " not delivered: " + Harness.oneLine(e));
                }
            }
        }
    }

    static KafkaConsumer<byte[], byte[]> consumer(Harness.Context ctx, String group, String... settings) {
        Properties p = props(ctx, settings);
        if (group != null) {
            p.put("group.id", ctx.name(group));
        }
        return new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    /** Polls until {@code count} records arrived (no more are kept), failing at the deadline. */
    static List<ConsumerRecord<byte[], byte[]>> read(KafkaConsumer<byte[], byte[]> c, int count) throws Exception {
        List<ConsumerRecord<byte[], byte[]>> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + TIMEOUT_MS;
        while (got.size() < count && System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) {
                got.add(r);
            }
        }
        check(got.size() >= count, "read " + got.size() + " of " + count + " records in " + TIMEOUT_MS / 1000 + "s");
        return got.subList(0, count);
    }

    static List<ConsumerRecord<byte[], byte[]>> readFromBeginning(Harness.Context ctx, String topic, int count) throws Exception {
        try (KafkaConsumer<byte[], byte[]> c = consumer(ctx, null)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            return read(c, count);
        }
    }

    static Rec asRec(ConsumerRecord<byte[], byte[]> m) throws Harness.Failed {
        check(m.timestampType() == TimestampType.CREATE_TIME, "offset " + m.offset() + ": " + m.timestampType());
        return new Rec(m.key(), m.value(), Arrays.asList(m.headers().toArray()), m.timestamp());
    }

    static List<Long> offsets(List<ConsumerRecord<byte[], byte[]>> records) {
        return records.stream().map(ConsumerRecord::offset).toList();
    }

    static List<Long> range(long from, long to) {
        List<Long> out = new ArrayList<>();
        for (long i = from; i < to; i++) {
            out.add(i);
        }
        return out;
    }
}
