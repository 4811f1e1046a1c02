package sluice.compat;

import java.io.PrintStream;
import java.util.ArrayList;
import java.util.List;

/**
 * Entry point of the Java adapters: {@code Main java-client|kafka-tools --bootstrap ...}. One JVM
 * runs every scenario of one client against one cluster.
 */
public final class Main {
    static final String NOT_A_LIBRARY_FEATURE = "not a client-library feature (kafka-tools only)";
    static final String SEE_JAVA_CLIENT = "a client-library scenario (see java-client)";

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            throw new IllegalArgumentException("usage: Main java-client|kafka-tools --bootstrap ...");
        }
        List<String> scenarios = new ArrayList<>();
        Harness.Context ctx = Harness.parse(java.util.Arrays.copyOfRange(args, 1, args.length), scenarios);
        // Results go to the real stdout; the tools print to System.out, which ToolRunner captures.
        PrintStream results = System.out;
        Harness harness = new Harness(results, ctx);
        switch (args[0]) {
            case "java-client" -> harness.runAll(scenarios, ClientScenarios.TABLE,
                    s -> s.startsWith("tool_") ? NOT_A_LIBRARY_FEATURE : null, 4);
            // One at a time: a tool's output is captured by swapping the JVM-wide System.out.
            case "kafka-tools" -> harness.runAll(scenarios, ToolScenarios.TABLE,
                    s -> s.startsWith("tool_") ? null : SEE_JAVA_CLIENT, 1);
            default -> throw new IllegalArgumentException("unknown client " + args[0]);
        }
        results.flush();
        System.exit(0); // client threads a tool left behind must not keep the JVM alive
    }
}
