package sluice.compat;

import static sluice.compat.Clients.*;
import static sluice.compat.GroupProtocols.PARTITIONS;
import static sluice.compat.GroupProtocols.produceSpread;
import static sluice.compat.Harness.TIMEOUT_MS;
import static sluice.compat.Harness.check;
import static sluice.compat.Harness.waitFor;
import static sluice.compat.ToolScenarios.TOOLS;
import static sluice.compat.ToolScenarios.tool;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

/**
 * The kafka-tools column of group_kip848, group_migration and share_group: kafka-console-consumer
 * with --consumer-property group.protocol=..., kafka-consumer-groups, kafka-configs on a group,
 * kafka-console-share-consumer and kafka-share-groups (one tool at a time, see ToolRunner).
 */
final class ToolGroupProtocols {
    private ToolGroupProtocols() {}

    static final String GROUPS = TOOLS + "consumer.group.ConsumerGroupCommand";

    /** The values produceSpread wrote for offsets from..to-1 of each partition. */
    static Set<String> spread(String topic, int from, int to) {
        Set<String> out = new HashSet<>();
        for (int p = 0; p < PARTITIONS; p++) {
            for (int i = from; i < to; i++) {
                out.add(topic + "-" + p + "-" + i);
            }
        }
        return out;
    }

    /** kafka-console-consumer in {@code group} with {@code protocol}, reading {@code count} records;
     * fails unless it printed exactly {@code expected}, each once. */
    static void consoleMember(String b, String topic, String group, String protocol, Set<String> expected, boolean fromBeginning)
            throws Exception {
        List<String> args = new ArrayList<>(List.of("--bootstrap-server", b, "--topic", topic, "--group", group,
                "--max-messages", String.valueOf(expected.size()), "--timeout-ms", String.valueOf(TIMEOUT_MS),
                "--command-property", "group.protocol=" + protocol));
        if (fromBeginning) {
            args.add("--from-beginning");
        }
        ToolRunner.Result r = tool(TOOLS + "consumer.ConsoleConsumer", args.toArray(String[]::new));
        List<String> got = r.out().lines().filter(l -> !l.isBlank()).toList();
        check(got.size() == expected.size() && new HashSet<>(got).equals(expected), "kafka-console-consumer (group.protocol="
                + protocol + ") printed " + got.size() + " records, first " + got.stream().limit(2).toList() + ", expected the "
                + expected.size() + " produced since the last commit, each once");
    }

    /** kafka-consumer-groups --describe: CURRENT-OFFSET and LAG of every partition must be {@code offset} and 0. */
    static void describedAt(String b, String group, String topic, long offset) throws Exception {
        for (int p = 0; p < PARTITIONS; p++) {
            List<String> row = ToolScenarios.describedOffsets(b, group, topic, p);
            check(row.equals(List.of(String.valueOf(offset), String.valueOf(offset), "0")), "kafka-consumer-groups --describe partition "
                    + p + " (current, log end, lag) " + row + ", expected [" + offset + ", " + offset + ", 0]");
        }
    }

    /** The TYPE kafka-consumer-groups --list --type gives {@code group} (Classic or Consumer). */
    static String listedType(String b, String group) throws Exception {
        ToolRunner.Result r = tool(GROUPS, "--bootstrap-server", b, "--list", "--type");
        for (String line : r.out().lines().toList()) {
            String[] f = line.trim().split("\\s+");
            if (f.length >= 2 && f[0].equals(group)) {
                return f[1];
            }
        }
        throw new Harness.Failed("kafka-consumer-groups --list --type lacks " + group + ": " + r.tail());
    }

    /** A KIP-848 member reads and commits 20 records of each partition; --describe shows the
     * commits and --list --type a Consumer group; the next member resumes there. */
    static String kip848(Harness.Context ctx) throws Exception {
        String topic = createTopic(ctx, ctx.name("tool-kip848"), PARTITIONS), group = ctx.name("tool-kip848"), b = ctx.bootstrap();
        produceSpread(ctx, topic, 0, 20);
        consoleMember(b, topic, group, "consumer", spread(topic, 0, 20), true);
        describedAt(b, group, topic, 20);
        String type = listedType(b, group);
        check(type.equalsIgnoreCase("consumer"), "kafka-consumer-groups --list --type shows " + group + " as " + type + ", expected Consumer");
        produceSpread(ctx, topic, 20, 10);
        consoleMember(b, topic, group, "consumer", spread(topic, 20, 30), false);
        describedAt(b, group, topic, 30);
        return null;
    }

    /** Console consumers of one group in turn: classic, consumer, classic; each resumes at the
     * previous one's commits, and --list --type follows the conversions. */
    static String migration(Harness.Context ctx) throws Exception {
        String topic = createTopic(ctx, ctx.name("tool-migration"), PARTITIONS), group = ctx.name("tool-migration"), b = ctx.bootstrap();
        List<String> types = new ArrayList<>();
        int at = 0;
        for (String protocol : List.of("classic", "consumer", "classic")) {
            produceSpread(ctx, topic, at, 10);
            consoleMember(b, topic, group, protocol, spread(topic, at, at + 10), at == 0);
            at += 10;
            describedAt(b, group, topic, at);
            String type = listedType(b, group);
            check(type.equalsIgnoreCase(protocol), "after a " + protocol + " member, --list --type shows " + group + " as " + type);
            types.add(type);
        }
        return "--list --type: " + String.join(" -> ", types);
    }

    /** kafka-configs sets the group's share.auto.offset.reset, kafka-console-share-consumer
     * receives (and accepts) all 100 records, kafka-share-groups lists and describes the group. */
    static String shareGroup(Harness.Context ctx) throws Exception {
        String group = ctx.name("tool-share"), b = ctx.bootstrap(), topic;
        try (var admin = admin(ctx)) {
            topic = GroupProtocols.shareTopic(ctx, admin, ctx.name("tool-share"), group);
        }
        String configs = TOOLS + "ConfigCommand", shareGroups = TOOLS + "consumer.group.ShareGroupCommand";
        tool(configs, "--bootstrap-server", b, "--alter", "--entity-type", "groups", "--entity-name", group,
                "--add-config", "share.auto.offset.reset=earliest");
        waitFor("kafka-configs --describe to show the group's share.auto.offset.reset=earliest", () -> tool(configs,
                "--bootstrap-server", b, "--describe", "--entity-type", "groups", "--entity-name", group).out()
                .contains("share.auto.offset.reset=earliest"));
        List<String> values = new ArrayList<>();
        List<Rec> records = new ArrayList<>();
        for (int i = 0; i < 100; i++) {
            values.add(topic + "-" + i);
            records.add(new Rec(null, bytes(topic + "-" + i), List.of(), System.currentTimeMillis()));
        }
        produce(ctx, topic, records);
        ToolRunner.Result r = tool(TOOLS + "consumer.ConsoleShareConsumer", "--bootstrap-server", b, "--topic", topic,
                "--group", group, "--max-messages", "100", "--timeout-ms", String.valueOf(TIMEOUT_MS));
        List<String> got = r.out().lines().filter(l -> !l.isBlank()).toList();
        check(got.size() == values.size() && new HashSet<>(got).equals(new HashSet<>(values)), "kafka-console-share-consumer printed "
                + got.size() + " records, first " + got.stream().limit(2).toList() + ", expected the 100 produced, each once");
        check(tool(shareGroups, "--bootstrap-server", b, "--list").out().lines().map(String::trim).toList().contains(group),
                "kafka-share-groups --list lacks " + group);
        // The console consumer acknowledged every record: the start offset moves to 100.
        waitFor("kafka-share-groups --describe to show " + topic + " partition 0 at start offset 100",
                GroupProtocols.ACKNOWLEDGED_WITHIN_MS, () -> {
            for (String line : tool(shareGroups, "--bootstrap-server", b, "--describe", "--group", group).out().lines().toList()) {
                List<String> f = List.of(line.trim().split("\\s+"));
                if (f.size() >= 4 && f.get(0).equals(group) && f.get(1).equals(topic) && f.get(2).equals("0")) {
                    return f.contains("100");
                }
            }
            return false;
        });
        return null;
    }
}
