package sluice.compat;

import java.io.PrintStream;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * What both Java adapters of the compatibility matrix share (the contract is compat/README.md):
 * the command line, one JSON result line per scenario on the real stdout, and catching each
 * scenario's failure so it never stops another.
 */
final class Harness {
    static final long TIMEOUT_MS = 30_000;

    /** Where the adapter was pointed: the cluster, its size, the prefix of every name it makes, and
     * the secured listeners' logins (the --security file; see Security). */
    record Context(String bootstrap, int brokers, String prefix, JsonNode security) {
        String name(String suffix) {
            return prefix + suffix;
        }

        /** The --security file's login for {@code scenario}. */
        Security.Login login(String scenario) throws Failed {
            JsonNode entry = security.path("scenarios").path(scenario);
            if (entry.isMissingNode()) {
                throw new Failed("the --security file has no login for " + scenario
                        + (security.has("error") ? ": " + security.get("error").asText() : ""));
            }
            return new Security.Login(entry);
        }

        short replication() {
            return (short) brokers;
        }
    }

    /** A scenario; returns an optional note for a pass, throws to fail. */
    interface Scenario {
        String run(Context ctx) throws Exception;
    }

    /** Thrown by a scenario the client cannot express; the message says why. */
    static final class NotApplicable extends Exception {
        NotApplicable(String why) {
            super(why);
        }
    }

    /** A check that did not hold; the message becomes the table cell. */
    static final class Failed extends Exception {
        Failed(String message) {
            super(message);
        }
    }

    static void check(boolean condition, String message) throws Failed {
        if (!condition) {
            throw new Failed(message);
        }
    }

    interface Probe<T> {
        T get() throws Exception;
    }

    /** Polls until {@code probe} returns non-null and not FALSE, or fails after the deadline. */
    static <T> T waitFor(String what, Probe<T> probe) throws Exception {
        return waitFor(what, TIMEOUT_MS, probe);
    }

    /** The same with a deadline of its own. */
    static <T> T waitFor(String what, long timeoutMs, Probe<T> probe) throws Exception {
        long deadline = System.currentTimeMillis() + timeoutMs;
        Exception last = null;
        while (true) {
            try {
                T value = probe.get();
                if (value != null && !Boolean.FALSE.equals(value)) {
                    return value;
                }
            } catch (Exception e) {
                last = e;
            }
            if (System.currentTimeMillis() > deadline) {
                throw new Failed("timed out after " + timeoutMs / 1000 + "s waiting for " + what
                        + (last == null ? "" : " (last error: " + oneLine(last) + ")"));
            }
            Thread.sleep(200);
        }
    }

    static Context parse(String[] args, List<String> scenarios) throws java.io.IOException {
        String bootstrap = null, prefix = null;
        int brokers = 0;
        JsonNode security = new ObjectMapper().createObjectNode().put("error", "no --security file given");
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--bootstrap" -> bootstrap = args[i + 1];
                case "--brokers" -> brokers = Integer.parseInt(args[i + 1]);
                case "--prefix" -> prefix = args[i + 1];
                case "--security" -> security = new ObjectMapper().readTree(new java.io.File(args[i + 1]));
                case "--scenarios" -> scenarios.addAll(List.of(args[i + 1].split(",")));
                default -> throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        if (bootstrap == null || prefix == null || brokers == 0) {
            throw new IllegalArgumentException("usage: --bootstrap H:P[,..] --brokers N --prefix P --security FILE --scenarios s1,s2");
        }
        return new Context(bootstrap, brokers, prefix, security);
    }

    private final PrintStream results;
    private final Context ctx;

    Harness(PrintStream results, Context ctx) {
        this.results = results;
        this.ctx = ctx;
    }

    /** Runs the scenarios, {@code parallel} at a time; a name missing from {@code table} is n/a
     * with the reason {@code notHere} gives, or fails when it gives none (a scenario unknown here). */
    void runAll(List<String> scenarios, Map<String, Scenario> table, Function<String, String> notHere, int parallel)
            throws InterruptedException {
        ExecutorService pool = Executors.newFixedThreadPool(parallel);
        for (String s : scenarios) {
            pool.submit(() -> runOne(s, table.get(s), notHere));
        }
        pool.shutdown();
        pool.awaitTermination(1, TimeUnit.HOURS);
    }

    private void runOne(String scenario, Scenario fn, Function<String, String> notHere) {
        long t0 = System.currentTimeMillis();
        try {
            if (fn == null) {
                String why = notHere.apply(scenario);
                emit(scenario, why == null ? "fail" : "n/a", why == null ? "this adapter does not know the scenario" : why);
                return;
            }
            String note = fn.run(ctx);
            emit(scenario, "pass", note == null ? "" : note);
        } catch (NotApplicable e) {
            emit(scenario, "n/a", e.getMessage());
        } catch (Throwable e) {
            System.err.println("[" + scenario + "] failed:");
            e.printStackTrace(System.err);
            emit(scenario, "fail", oneLine(e));
        } finally {
            System.err.printf("[%s] %.1fs%n", scenario, (System.currentTimeMillis() - t0) / 1000.0);
        }
    }

    static String oneLine(Throwable e) {
        Throwable root = e;
        while ((root instanceof java.util.concurrent.ExecutionException
                || root instanceof java.lang.reflect.InvocationTargetException) && root.getCause() != null) {
            root = root.getCause();
        }
        String text = root instanceof Failed ? root.getMessage() : root.getClass().getSimpleName() + ": " + root.getMessage();
        return text.replaceAll("\\s+", " ").trim();
    }

    synchronized void emit(String scenario, String result, String detail) {
        results.println("{\"scenario\": " + quote(scenario) + ", \"result\": " + quote(result)
                + ", \"detail\": " + quote(detail) + "}");
        results.flush();
    }

    static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                default -> {
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        return b.append('"').toString();
    }

    /** Runs each task at once on its own thread; fails naming the first that failed. */
    static void inParallel(Map<String, Probe<?>> tasks) throws Exception {
        List<Thread> threads = new ArrayList<>();
        Map<String, Throwable> errors = new java.util.concurrent.ConcurrentHashMap<>();
        tasks.forEach((name, task) -> {
            Thread t = new Thread(() -> {
                try {
                    task.get();
                } catch (Throwable e) {
                    errors.put(name, e);
                }
            });
            t.start();
            threads.add(t);
        });
        for (Thread t : threads) {
            t.join();
        }
        for (var e : errors.entrySet()) {
            throw new Failed(e.getKey() + ": " + oneLine(e.getValue()));
        }
    }
}
