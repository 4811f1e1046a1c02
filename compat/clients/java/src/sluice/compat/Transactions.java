package sluice.compat;

import static sluice.compat.Clients.*;
import static sluice.compat.Harness.TIMEOUT_MS;
import static sluice.compat.Harness.check;

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsOptions;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The transaction rows (compat/README.md): transactions_commit_abort, read_committed and
 * consume_transform_produce for the java-client column, tool_transactions (kafka-transactions)
 * for the kafka-tools column.
 */
final class Transactions {
    private Transactions() {}

    static final int COMMITTED_1 = 10, ABORTED = 10, COMMITTED_2 = 5;
    static final long OPEN_TX_WATCH_MS = 3_000;
    static final int CTP_INPUTS = 20, CTP_TX_SIZE = 10, CTP_ABORTED = 5;

    static List<String> values(String tag, int count) {
        List<String> out = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            out.add(tag + "-" + i);
        }
        return out;
    }

    static KafkaProducer<byte[], byte[]> txProducer(Harness.Context ctx, String name) {
        Properties p = props(ctx, "transactional.id", ctx.name(name));
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
        producer.initTransactions();
        return producer;
    }

    /** Sends {@code values} in the open transaction and waits for every acknowledgement (the
     * rows need an aborted transaction's records in the log). */
    static void txSend(KafkaProducer<byte[], byte[]> p, String topic, List<String> values) throws Exception {
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        for (String v : values) {
            sent.add(p.send(new ProducerRecord<>(topic, bytes(v))));
        }
        p.flush();
        for (int i = 0; i < sent.size(); i++) {
            try {
                sent.get(i).get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
            } catch (Exception e) {
                throw new Harness.Failed("transactional record " + i + " not delivered: " + Harness.oneLine(e));
            }
        }
    }

    static KafkaConsumer<byte[], byte[]> isolatedReader(Harness.Context ctx, String topic, String isolation) {
        KafkaConsumer<byte[], byte[]> c = consumer(ctx, null, "isolation.level", isolation);
        TopicPartition tp = new TopicPartition(topic, 0);
        c.assign(List.of(tp));
        c.seekToBeginning(List.of(tp));
        return c;
    }

    static List<String> texts(List<ConsumerRecord<byte[], byte[]>> records) {
        return records.stream().map(r -> text(r.value())).toList();
    }

    /** The values an {@code isolation} consumer reads from the beginning: exactly {@code count},
     * then nothing more until its position reaches its end offset (past the markers). */
    static List<String> readIsolated(Harness.Context ctx, String topic, String isolation, int count) throws Exception {
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<byte[], byte[]> c = isolatedReader(ctx, topic, isolation)) {
            List<String> got = count == 0 ? List.of() : texts(read(c, count));
            long end = c.endOffsets(List.of(tp), Duration.ofMillis(TIMEOUT_MS)).get(tp);
            long deadline = System.currentTimeMillis() + TIMEOUT_MS;
            while (c.position(tp, Duration.ofMillis(TIMEOUT_MS)) < end) {
                check(System.currentTimeMillis() < deadline, isolation + ": position did not reach the end offset " + end);
                int extra = c.poll(Duration.ofMillis(200)).count();
                check(extra == 0, isolation + ": " + extra + " extra records after " + count);
            }
            return got;
        }
    }

    static void same(List<String> expected, List<String> got, String what) throws Harness.Failed {
        check(expected.equals(got), what + ": read " + got + ", expected " + expected);
    }

    static String commitAbort(Harness.Context ctx) throws Exception {
        String topic = createTopic(ctx, ctx.name("tx-commit-abort"), 1);
        List<String> first = values("c1", COMMITTED_1), aborted = values("a", ABORTED), second = values("c2", COMMITTED_2);
        try (KafkaProducer<byte[], byte[]> p = txProducer(ctx, "tx-commit-abort")) {
            for (List<String> batch : List.of(first, aborted, second)) {
                p.beginTransaction();
                txSend(p, topic, batch);
                if (batch == aborted) {
                    p.abortTransaction();
                } else {
                    p.commitTransaction();
                }
            }
        }
        List<String> committed = new ArrayList<>(first);
        committed.addAll(second);
        same(committed, readIsolated(ctx, topic, "read_committed", committed.size()), "read_committed");
        List<String> all = new ArrayList<>(first);
        all.addAll(aborted);
        all.addAll(second);
        same(all, readIsolated(ctx, topic, "read_uncommitted", all.size()), "read_uncommitted");
        return null;
    }

    static String readCommitted(Harness.Context ctx) throws Exception {
        String topic = createTopic(ctx, ctx.name("read-committed"), 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        List<String> before = values("before", 5), open = values("open", 5);
        try (KafkaProducer<byte[], byte[]> p = txProducer(ctx, "read-committed")) {
            p.beginTransaction();
            txSend(p, topic, before);
            p.commitTransaction();
            p.beginTransaction();
            txSend(p, topic, open);
            try (KafkaConsumer<byte[], byte[]> c = isolatedReader(ctx, topic, "read_committed")) {
                same(before, texts(read(c, before.size())), "before the open transaction");
                long lso = c.endOffsets(List.of(tp), Duration.ofMillis(TIMEOUT_MS)).get(tp);
                check(lso == before.size() + 1, "read_committed end offset " + lso + " with a transaction open, expected "
                        + (before.size() + 1) + " (the last stable offset)");
                long watchUntil = System.currentTimeMillis() + OPEN_TX_WATCH_MS;
                while (System.currentTimeMillis() < watchUntil) {
                    int early = c.poll(Duration.ofMillis(200)).count();
                    check(early == 0, "delivered " + early + " records of the open transaction");
                }
                p.commitTransaction();
                same(open, texts(read(c, open.size())), "after the commit");
            }
        }
        return null;
    }

    static String consumeTransformProduce(Harness.Context ctx) throws Exception {
        String source = createTopic(ctx, ctx.name("ctp-in"), 1), sink = createTopic(ctx, ctx.name("ctp-out"), 1);
        TopicPartition tp = new TopicPartition(source, 0);
        List<String> inputs = values("in", CTP_INPUTS + CTP_ABORTED);
        produceValues(ctx, source, inputs.subList(0, CTP_INPUTS));
        try (KafkaConsumer<byte[], byte[]> c = consumer(ctx, "ctp", "auto.offset.reset", "earliest",
                     "enable.auto.commit", "false", "isolation.level", "read_committed",
                     "max.poll.records", String.valueOf(CTP_TX_SIZE)); // read() keeps no more than a round
             KafkaProducer<byte[], byte[]> p = txProducer(ctx, "ctp");
             Admin admin = admin(ctx)) {
            c.subscribe(List.of(source));
            for (int round = 0; round < CTP_INPUTS / CTP_TX_SIZE + 1; round++) {
                boolean commit = round < CTP_INPUTS / CTP_TX_SIZE;
                if (!commit) {
                    produceValues(ctx, source, inputs.subList(CTP_INPUTS, inputs.size()));
                }
                List<ConsumerRecord<byte[], byte[]>> got = read(c, commit ? CTP_TX_SIZE : CTP_ABORTED);
                p.beginTransaction();
                txSend(p, sink, got.stream().map(r -> "out-" + text(r.value())).toList());
                p.sendOffsetsToTransaction(Map.of(tp, new OffsetAndMetadata(got.get(got.size() - 1).offset() + 1)), c.groupMetadata());
                if (commit) {
                    p.commitTransaction();
                } else {
                    p.abortTransaction();
                }
                // require_stable: the broker answers UNSTABLE_OFFSET_COMMIT for the partition
                // until the transaction's markers are written, and the admin client then leaves
                // the partition out of its result: ask until it is there.
                OffsetAndMetadata committed = Harness.waitFor("a stable committed offset of " + tp, () ->
                        admin.listConsumerGroupOffsets(ctx.name("ctp"), new ListConsumerGroupOffsetsOptions().requireStable(true))
                                .partitionsToOffsetAndMetadata().get(TIMEOUT_MS, TimeUnit.MILLISECONDS).get(tp));
                long expected = commit ? (round + 1L) * CTP_TX_SIZE : CTP_INPUTS;
                check(committed != null && committed.offset() == expected, "committed offset " + committed + " after "
                        + (commit ? "committed" : "aborted") + " transaction " + (round + 1) + ", expected " + expected);
            }
        }
        same(inputs.subList(0, CTP_INPUTS).stream().map(v -> "out-" + v).toList(),
                readIsolated(ctx, sink, "read_committed", CTP_INPUTS), "the output, read_committed");
        return null;
    }

    static void produceValues(Harness.Context ctx, String topic, List<String> values) throws Exception {
        List<Rec> records = new ArrayList<>();
        for (String v : values) {
            records.add(new Rec(null, bytes(v), List.of(), System.currentTimeMillis()));
        }
        produce(ctx, topic, records, "acks", "all");
    }

    // --- kafka-transactions ----------------------------------------------------------------------

    /** The tool's whitespace-separated table: a header line, then one map per row. */
    static List<Map<String, String>> rows(ToolRunner.Result r) throws Harness.Failed {
        List<String[]> lines = r.out().lines().filter(l -> !l.isBlank()).map(l -> l.trim().split("\\s+")).toList();
        check(!lines.isEmpty(), "no output: " + r.tail());
        List<Map<String, String>> out = new ArrayList<>();
        for (String[] row : lines.subList(1, lines.size())) {
            Map<String, String> m = new LinkedHashMap<>();
            for (int i = 0; i < Math.min(row.length, lines.get(0).length); i++) {
                m.put(lines.get(0)[i], row[i]);
            }
            out.add(m);
        }
        return out;
    }

    static List<Map<String, String>> transactionsTool(Harness.Context ctx, String... args) throws Exception {
        return rows(transactionsToolRun(ctx, args));
    }

    static ToolRunner.Result transactionsToolRun(Harness.Context ctx, String... args) throws Exception {
        String[] full = new String[args.length + 2];
        full[0] = "--bootstrap-server";
        full[1] = ctx.bootstrap();
        System.arraycopy(args, 0, full, 2, args.length);
        return ToolScenarios.tool(ToolScenarios.TOOLS + "TransactionsCommand", full);
    }

    static String tool(Harness.Context ctx) throws Exception {
        String topic = createTopic(ctx, ctx.name("tool-tx"), 1);
        String tid = ctx.name("tool-tx");
        try (KafkaProducer<byte[], byte[]> p = txProducer(ctx, "tool-tx"); Admin admin = admin(ctx)) {
            p.beginTransaction();
            txSend(p, topic, values("open", 3)); // offsets 0-2, left open

            var listed = transactionsTool(ctx, "list").stream().filter(r -> tid.equals(r.get("TransactionalId"))).toList();
            check(listed.size() == 1 && "Ongoing".equals(listed.get(0).get("TransactionState")), "list: " + listed);
            var described = transactionsTool(ctx, "describe", "--transactional-id", tid);
            check(described.size() == 1 && "Ongoing".equals(described.get(0).get("TransactionState"))
                    && (topic + "-0").equals(described.get(0).get("TopicPartitions")), "describe: " + described);
            String producerId = described.get(0).get("ProducerId");
            var producers = transactionsTool(ctx, "describe-producers", "--topic", topic, "--partition", "0").stream()
                    .filter(r -> producerId.equals(r.get("ProducerId"))).toList();
            check(producers.size() == 1 && "0".equals(producers.get(0).get("CurrentTransactionStartOffset")),
                    "describe-producers: " + producers);

            int leader = admin.describeTopics(List.of(topic)).allTopicNames().get(TIMEOUT_MS, TimeUnit.MILLISECONDS)
                    .get(topic).partitions().get(0).leader().id();
            // Open for seconds, under the 15-minute maximum transaction timeout: not hanging. Limited
            // to this row's partition: with --broker-id alone the tool describes every partition
            // the broker hosts, and fails whole (or times out finding a leader) when one of the
            // topics the other adapters delete beside this one goes meanwhile.
            var hanging = transactionsTool(ctx, "find-hanging", "--broker-id", String.valueOf(leader), "--topic",
                    topic, "--partition", "0").stream().filter(r -> topic.equals(r.get("Topic"))).toList();
            check(hanging.isEmpty(), "find-hanging lists a young transaction: " + hanging);

            Map<String, String> mine = producers.get(0);
            transactionsToolRun(ctx, "abort", "--topic", topic, "--partition", "0", "--producer-id", producerId,
                    "--producer-epoch", mine.get("ProducerEpoch"), "--coordinator-epoch", mine.get("LatestCoordinatorEpoch"));
            // The abort marker ends the transaction at the partition: read_committed passes it.
            same(List.of(), readIsolated(ctx, topic, "read_committed", 0), "read_committed after the abort");
            same(values("open", 3), readIsolated(ctx, topic, "read_uncommitted", 3), "read_uncommitted after the abort");
            var after = transactionsTool(ctx, "describe-producers", "--topic", topic, "--partition", "0");
            check(after.stream().allMatch(r -> "None".equals(r.get("CurrentTransactionStartOffset"))),
                    "describe-producers after the abort: " + after);
        }
        return null;
    }
}
