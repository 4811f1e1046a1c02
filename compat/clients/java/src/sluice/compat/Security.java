package sluice.compat;

import static sluice.compat.Harness.TIMEOUT_MS;
import static sluice.compat.Harness.check;
import static sluice.compat.Harness.waitFor;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The security rows of the java-client column: the Java client logs in to a secured listener as
 * the --security file says (compat/README.md), with Kafka's own settings: a PKCS12 truststore (and
 * keystore for mutual TLS), SCRAM and PLAIN through their JAAS login modules, OAUTHBEARER through
 * Kafka's OAuthBearerLoginCallbackHandler reading the signed token from a file URL.
 */
final class Security {
    private Security() {}

    static final List<String> ROUND_TRIPS =
            List.of("sasl_ssl_scram512", "sasl_ssl_plain", "sasl_plaintext_scram256", "ssl_mtls", "oauthbearer");
    static final int RECORDS = 50;
    static final String AUTHENTICATION_FAILED = "Authentication failed";
    static final Map<String, String> JAAS_MODULES = Map.of(
            "PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule",
            "SCRAM-SHA-256", "org.apache.kafka.common.security.scram.ScramLoginModule",
            "SCRAM-SHA-512", "org.apache.kafka.common.security.scram.ScramLoginModule");

    /** One --security entry: bootstrap, security_protocol and what that login needs. */
    record Login(JsonNode entry) {
        String bootstrap() {
            return entry.get("bootstrap").asText();
        }

        String text(String field) {
            return entry.path(field).asText(null);
        }

        /** The same login as another user (a user the scenario created). */
        Login as(String username, String password) {
            var copy = ((com.fasterxml.jackson.databind.node.ObjectNode) entry.deepCopy());
            copy.put("username", username).put("password", password);
            return new Login(copy);
        }

        /** The client settings, as a properties file would hold them (without bootstrap.servers). */
        Properties properties() {
            Properties p = new Properties();
            p.put("security.protocol", text("security_protocol"));
            if (text("truststore") != null) {
                p.put("ssl.truststore.location", text("truststore"));
                p.put("ssl.truststore.type", "PKCS12");
                p.put("ssl.truststore.password", text("truststore_password"));
            }
            if (text("keystore") != null) {
                p.put("ssl.keystore.location", text("keystore"));
                p.put("ssl.keystore.type", "PKCS12");
                p.put("ssl.keystore.password", text("keystore_password"));
                p.put("ssl.key.password", text("keystore_password"));
            }
            String mechanism = text("sasl_mechanism");
            if ("OAUTHBEARER".equals(mechanism)) {
                allowTokenFile(text("token_file"));
                p.put("sasl.mechanism", mechanism);
                p.put("sasl.login.callback.handler.class",
                        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler");
                p.put("sasl.oauthbearer.token.endpoint.url", Path.of(text("token_file")).toUri().toString());
                p.put("sasl.jaas.config", "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ;");
            } else if (mechanism != null) {
                p.put("sasl.mechanism", mechanism);
                p.put("sasl.jaas.config", JAAS_MODULES.get(mechanism) + " required username=\"" + text("username")
                        + "\" password=\"" + text("password") + "\";");
            }
            return p;
        }

        Properties client(String... kv) {
            Properties p = properties();
            p.put("bootstrap.servers", bootstrap());
            for (int i = 0; i + 1 < kv.length; i += 2) {
                p.put(kv[i], kv[i + 1]);
            }
            return p;
        }

        /** The settings in a temporary properties file, for a tool's --command-config. */
        Path file() throws IOException {
            Path f = Files.createTempFile("sluice-compat-login", ".properties");
            f.toFile().deleteOnExit();
            try (var out = Files.newOutputStream(f)) {
                properties().store(out, null);
            }
            return f;
        }
    }

    /**
     * Kafka 4 reads an OAuth token endpoint URL (here a file: its FileJwtRetriever) only when the
     * JVM allows that URL (org.apache.kafka.sasl.oauthbearer.allowed.urls); it reads the property
     * at each login, so setting it here, before the client logs in, is enough.
     */
    static synchronized void allowTokenFile(String tokenFile) {
        System.setProperty("org.apache.kafka.sasl.oauthbearer.allowed.urls", Path.of(tokenFile).toUri().toString());
        System.setProperty("org.apache.kafka.sasl.oauthbearer.allowed.files", tokenFile);
    }

    static List<String> values(String topic) {
        List<String> out = new ArrayList<>();
        for (int i = 0; i < RECORDS; i++) {
            out.add(topic + "-" + i);
        }
        return out;
    }

    /** Create a topic (Admin), produce RECORDS values with acks=all, read them all in a group,
     * commit, and read the committed offset back: every step over the scenario's login. */
    static String roundTrip(Harness.Context ctx, String scenario) throws Exception {
        Login login = ctx.login(scenario);
        String topic = ctx.name(scenario.replace('_', '-'));
        try (Admin admin = Admin.create(login.client())) {
            admin.createTopics(List.of(new NewTopic(topic, 1, ctx.replication()))).all().get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
            waitFor("leaders of " + topic, () -> Clients.ledPartitions(admin, List.of(topic)) == 1);
        }
        List<String> values = values(topic);
        try (KafkaProducer<String, String> p = new KafkaProducer<>(login.client("acks", "all"), new StringSerializer(),
                new StringSerializer())) {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (String v : values) {
                sent.add(p.send(new ProducerRecord<>(topic, v)));
            }
            p.flush();
            for (int i = 0; i < sent.size(); i++) {
                try {
                    sent.get(i).get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
                } catch (Exception e) {
                    throw new Harness.Failed("record " + i + " not delivered: " + Harness.oneLine(e));
                }
            }
        }
        TopicPartition tp = new TopicPartition(topic, 0);
        Properties conf = login.client("group.id", ctx.name(scenario + "-group"), "auto.offset.reset", "earliest",
                "enable.auto.commit", "false");
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(conf, new StringDeserializer(), new StringDeserializer())) {
            c.subscribe(List.of(topic));
            List<String> got = new ArrayList<>();
            long deadline = System.currentTimeMillis() + TIMEOUT_MS;
            while (got.size() < values.size() && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    got.add(r.value());
                }
            }
            for (int i = 0; i < Math.min(values.size(), got.size()); i++) {
                check(values.get(i).equals(got.get(i)), "record " + i + " read back as " + got.get(i) + ", sent " + values.get(i));
            }
            check(got.size() == values.size(), "read back " + got.size() + " records, sent " + values.size());
            c.commitSync();
            OffsetAndMetadata committed = c.committed(Set.of(tp), Duration.ofMillis(TIMEOUT_MS)).get(tp);
            check(committed != null && committed.offset() == RECORDS, "committed offset " + committed + ", expected " + RECORDS);
        }
        return null;
    }

    /** A wrong SCRAM-SHA-512 password: the Admin's first call fails with SaslAuthenticationException. */
    static String wrongPassword(Harness.Context ctx) throws Exception {
        Login login = ctx.login("sasl_wrong_password");
        try (Admin admin = Admin.create(login.client())) {
            admin.describeCluster().clusterId().get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
            throw new Harness.Failed("describeCluster succeeded with a wrong password");
        } catch (ExecutionException e) {
            Throwable cause = e.getCause();
            check(cause instanceof SaslAuthenticationException && cause.getMessage().contains(AUTHENTICATION_FAILED),
                    "expected a SaslAuthenticationException (" + AUTHENTICATION_FAILED + "), got " + Harness.oneLine(cause));
            return cause.getClass().getSimpleName() + ": " + cause.getMessage();
        }
    }
}
