package io.sluice.streams;

import java.time.Duration;
import java.util.Arrays;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * A Kafka Streams word count with exactly_once_v2, for integration-tests/python/test_kafka_streams.py.
 *
 * <p>Each input value is a line of space-separated words. The words are re-keyed through a
 * repartition topic, counted in a RocksDB store backed by a changelog topic, and every update
 * goes to the output topic as word -> count (a big-endian long). The record cache is off, so
 * each input word yields exactly one update: under exactly-once, the counts a read_committed
 * reader sees for a word are 1, 2, ..., N with no gap and no repeat, however often the
 * application or its brokers are killed.
 *
 * <p>Usage: WordCount BOOTSTRAP APPLICATION_ID INPUT_TOPIC OUTPUT_TOPIC STATE_DIR. It prints
 * "STATE RUNNING" (and its other state changes) to stdout, logs through slf4j-simple
 * (-Dorg.slf4j.simpleLogger.logFile=...), and exits 1 if a stream thread dies.
 */
public final class WordCount {
    private WordCount() {}

    public static void main(String[] args) throws InterruptedException {
        if (args.length != 5) {
            System.err.println("usage: WordCount BOOTSTRAP APPLICATION_ID INPUT_TOPIC OUTPUT_TOPIC STATE_DIR");
            System.exit(2);
        }
        String bootstrap = args[0], applicationId = args[1], input = args[2], output = args[3], stateDir = args[4];

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
            .flatMapValues(line -> Arrays.asList(line.split(" ")))
            .groupBy((key, word) -> word, Grouped.with("words", Serdes.String(), Serdes.String()))
            .count(Materialized.as("counts"))
            .toStream()
            .to(output, Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), config(bootstrap, applicationId, stateDir));
        CountDownLatch stopped = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println("STATE " + now);
            System.out.flush();
            if (now == KafkaStreams.State.NOT_RUNNING || now == KafkaStreams.State.ERROR) {
                stopped.countDown();
            }
        });
        // A dead stream thread is a failure the test must see, not one to paper over.
        streams.setUncaughtExceptionHandler(e -> {
            System.out.println("FATAL " + e);
            System.out.flush();
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> streams.close(Duration.ofSeconds(10))));
        streams.start();
        stopped.await();
        System.exit(streams.state() == KafkaStreams.State.ERROR ? 1 : 0);
    }

    static Properties config(String bootstrap, String applicationId, String stateDir) {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, "classic");
        // Internal topics (the repartition and changelog topics) on all three brokers.
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 3);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        // A transaction every 100 ms: output is visible soon, and a kill aborts little work.
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        // Records are sent as they are produced, not held for Streams' default linger of 100 ms
        // until the commit: a kill finds them in the log inside an open transaction, which is
        // what exactly-once has to abort (under at_least_once they would be counted twice).
        p.put(StreamsConfig.producerPrefix(ProducerConfig.LINGER_MS_CONFIG), 0);
        // No record cache: every count update is forwarded, so the output is 1, 2, ..., N per word.
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        // A killed instance leaves the group after 6 s (the broker's minimum), not 45 s.
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1500);
        return p;
    }
}
