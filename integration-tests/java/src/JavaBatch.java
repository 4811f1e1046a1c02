import java.io.FileOutputStream;
import java.io.FileReader;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeProducersResult.PartitionProducerState;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.utils.Exit;

/**
 * Runs Kafka's command-line tools, and a few Admin and producer calls the tools do not make, one
 * after another in one JVM: on two shared cores a JVM start costs seconds, a warm call
 * milliseconds.
 *
 * <pre>java -cp CLASSES:JARS JavaBatch COMMAND_FILE OUT_DIR</pre>
 *
 * Each line of COMMAND_FILE is one command, its words separated by tabs: a tool's main class and
 * its arguments, run as the tool's script runs it, or one of the calls below. A tool's first
 * Exit.exit ends it as it would end the JVM: its status is recorded and nothing the tool prints
 * after it (from the finally blocks and catch-alls the exit unwinds through) is kept. The calls
 * take a client PROPERTIES file that names bootstrap.servers:
 *
 * <ul>
 *   <li>{@code describe-topics PROPERTIES TOPIC...}: Admin describeTopics with
 *       includeAuthorizedOperations, a line per topic: {@code TOPIC OP,OP,...} or
 *       {@code TOPIC error EXCEPTION: MESSAGE};</li>
 *   <li>{@code describe-cluster PROPERTIES}: describeCluster with includeAuthorizedOperations,
 *       {@code cluster OP,OP,...} ({@code null} when not reported);</li>
 *   <li>{@code produce PROPERTIES TOPIC COUNT}: a KafkaProducer with the client's defaults
 *       (idempotent since Kafka 3.0) sends COUNT records to partition 0, a line per record:
 *       {@code acked OFFSET} or {@code failed EXCEPTION: MESSAGE};</li>
 *   <li>{@code describe-producers PROPERTIES TOPIC}: the active producers of partition 0,
 *       {@code producer ID epoch EPOCH}.</li>
 * </ul>
 *
 * Command i leaves OUT_DIR/i.out, OUT_DIR/i.err and OUT_DIR/i.exit (its exit status).
 */
public final class JavaBatch {
    /** What a tool's Exit.exit throws here instead of ending the JVM. */
    static final class ToolExit extends RuntimeException {
        ToolExit() {
            super("exit", null, false, false);
        }
    }

    private static final PrintStream DISCARD = new PrintStream(OutputStream.nullOutputStream());
    /** The status of the running command's first Exit.exit, if it called it. */
    private static Integer exitStatus;

    /** The JVM's end, for a tool: the first status counts, and the tool's output ends. */
    private static void exit(int status) {
        if (exitStatus == null) {
            exitStatus = status;
        }
        System.setOut(DISCARD);
        System.setErr(DISCARD);
        throw new ToolExit();
    }

    public static void main(String[] args) throws Exception {
        List<String> lines = Files.readAllLines(Path.of(args[0]), StandardCharsets.UTF_8);
        Path out = Path.of(args[1]);
        Exit.setExitProcedure((status, message) -> exit(status));
        Exit.setHaltProcedure((status, message) -> exit(status));
        PrintStream stdout = System.out;
        PrintStream stderr = System.err;
        for (int i = 0; i < lines.size(); i++) {
            String[] words = lines.get(i).split("\t");
            int status;
            try (PrintStream o = new PrintStream(new FileOutputStream(out.resolve(i + ".out").toFile()), true, "UTF-8");
                 PrintStream e = new PrintStream(new FileOutputStream(out.resolve(i + ".err").toFile()), true, "UTF-8")) {
                System.setOut(o);
                System.setErr(e);
                exitStatus = null;
                try {
                    status = run(words[0], Arrays.copyOfRange(words, 1, words.length));
                } catch (ToolExit exit) {
                    status = 0;
                } catch (Throwable t) {
                    t.printStackTrace();
                    status = 99;
                } finally {
                    System.setOut(stdout);
                    System.setErr(stderr);
                }
                if (exitStatus != null) {
                    status = exitStatus;
                }
            }
            Files.writeString(out.resolve(i + ".exit"), Integer.toString(status));
        }
    }

    static int run(String command, String[] args) throws Throwable {
        switch (command) {
            case "describe-topics":
                return describeTopics(properties(args[0]), Arrays.copyOfRange(args, 1, args.length));
            case "describe-cluster":
                return describeCluster(properties(args[0]));
            case "produce":
                return produce(properties(args[0]), args[1], Integer.parseInt(args[2]));
            case "describe-producers":
                return describeProducers(properties(args[0]), args[1]);
            default:
                try {
                    Class.forName(command).getMethod("main", String[].class).invoke(null, (Object) args);
                } catch (InvocationTargetException e) {
                    throw e.getCause();
                }
                return 0;
        }
    }

    static Properties properties(String path) throws IOException {
        Properties p = new Properties();
        try (FileReader reader = new FileReader(path, StandardCharsets.UTF_8)) {
            p.load(reader);
        }
        return p;
    }

    /** The operations by name, sorted; "null" for a set the broker did not report. */
    static String operations(Set<AclOperation> operations) {
        if (operations == null) {
            return "null";
        }
        TreeSet<String> names = new TreeSet<>();
        operations.forEach(op -> names.add(op.name()));
        return String.join(",", names);
    }

    static String failure(Throwable t) {
        Throwable cause = t instanceof ExecutionException && t.getCause() != null ? t.getCause() : t;
        return cause.getClass().getSimpleName() + ": " + cause.getMessage();
    }

    static int describeTopics(Properties config, String[] topics) throws InterruptedException {
        int status = 0;
        try (Admin admin = Admin.create(config)) {
            Map<String, KafkaFuture<TopicDescription>> described = admin
                .describeTopics(List.of(topics), new DescribeTopicsOptions().includeAuthorizedOperations(true))
                .topicNameValues();
            for (String topic : topics) {
                try {
                    System.out.println(topic + " " + operations(described.get(topic).get().authorizedOperations()));
                } catch (ExecutionException e) {
                    System.out.println(topic + " error " + failure(e));
                    status = 1;
                }
            }
        }
        return status;
    }

    static int describeCluster(Properties config) throws InterruptedException {
        try (Admin admin = Admin.create(config)) {
            Set<AclOperation> operations = admin
                .describeCluster(new DescribeClusterOptions().includeAuthorizedOperations(true))
                .authorizedOperations()
                .get();
            System.out.println("cluster " + operations(operations));
            return 0;
        } catch (ExecutionException e) {
            System.out.println("cluster error " + failure(e));
            return 1;
        }
    }

    static int produce(Properties config, String topic, int count) throws InterruptedException {
        config.putIfAbsent("max.block.ms", "15000");
        config.putIfAbsent("request.timeout.ms", "10000");
        config.putIfAbsent("delivery.timeout.ms", "20000");
        int status = 0;
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(config, new ByteArraySerializer(), new ByteArraySerializer())) {
            Future<?>[] sent = new Future<?>[count];
            for (int i = 0; i < count; i++) {
                byte[] value = (topic + "-" + i).getBytes(StandardCharsets.UTF_8);
                try {
                    sent[i] = producer.send(new ProducerRecord<>(topic, 0, null, value));
                } catch (Exception e) {
                    System.out.println("failed " + failure(e));
                    return 1;
                }
            }
            for (Future<?> f : sent) {
                try {
                    System.out.println("acked " + ((RecordMetadata) f.get()).offset());
                } catch (ExecutionException e) {
                    System.out.println("failed " + failure(e));
                    status = 1;
                }
            }
        }
        return status;
    }

    static int describeProducers(Properties config, String topic) throws InterruptedException, ExecutionException {
        TopicPartition partition = new TopicPartition(topic, 0);
        try (Admin admin = Admin.create(config)) {
            PartitionProducerState state = admin.describeProducers(List.of(partition)).partitionResult(partition).get();
            for (ProducerState p : state.activeProducers()) {
                System.out.println("producer " + p.producerId() + " epoch " + p.producerEpoch());
            }
        }
        return 0;
    }
}
