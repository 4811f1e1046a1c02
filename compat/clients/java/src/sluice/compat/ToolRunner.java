package sluice.compat;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.common.utils.internals.Exit;

/**
 * Runs a Kafka CLI tool's {@code main} inside this JVM (one JVM start for all tools) as if it were
 * its own process: the first {@code Exit.exit} is the exit code (an exception then unwinds the
 * tool, as the process would have ended there), the shutdown hooks the tool registered run when
 * it ends (VerifiableProducer reports its acknowledgements from one), and System.in/out/err are
 * swapped for buffers meanwhile. One tool at a time: those streams are JVM-wide.
 */
final class ToolRunner {
    private ToolRunner() {}

    record Result(int exitCode, String out, String err) {
        String both() {
            return out + "\n" + err;
        }

        /** The tool's last words for a failure message: the root cause of a stack trace when it
         * printed one, else the end of its output without stack frames. */
        String tail() {
            List<String> lines = both().lines().filter(l -> !l.matches("\\s+(at |\\.\\.\\. \\d+ more).*")).toList();
            for (int i = lines.size() - 1; i >= 0; i--) {
                if (lines.get(i).startsWith("Caused by: ")) {
                    return lines.get(i).substring("Caused by: ".length()).replace("org.apache.kafka.common.errors.", "").strip();
                }
            }
            String s = String.join(" ", lines).strip().replaceAll("\\s+", " ");
            return s.length() > 300 ? "..." + s.substring(s.length() - 300) : s;
        }
    }

    private static final class ToolExited extends RuntimeException {
        final int code;

        ToolExited(int code, String message) {
            super("exit " + code + (message == null ? "" : ": " + message), null, false, false);
            this.code = code;
        }
    }

    static synchronized Result run(String mainClass, String stdin, String... args) throws Exception {
        ByteArrayOutputStream out = new ByteArrayOutputStream(), err = new ByteArrayOutputStream();
        PrintStream oldOut = System.out, oldErr = System.err;
        InputStream oldIn = System.in;
        java.util.concurrent.atomic.AtomicReference<Integer> exited = new java.util.concurrent.atomic.AtomicReference<>();
        Exit.Procedure exit = (code, message) -> {
            exited.compareAndSet(null, code);
            throw new ToolExited(code, message);
        };
        Exit.setExitProcedure(exit);
        Exit.setHaltProcedure(exit);
        List<Runnable> hooks = new ArrayList<>();
        Exit.setShutdownHookAdder((name, hook) -> hooks.add(hook));
        int code = 0;
        try (PrintStream o = new PrintStream(out, true, StandardCharsets.UTF_8);
             PrintStream e = new PrintStream(err, true, StandardCharsets.UTF_8)) {
            System.setOut(o);
            System.setErr(e);
            System.setIn(new ByteArrayInputStream((stdin == null ? "" : stdin).getBytes(StandardCharsets.UTF_8)));
            try {
                Class.forName(mainClass).getMethod("main", String[].class).invoke(null, (Object) args);
            } catch (InvocationTargetException ite) {
                code = exitCodeOf(ite.getCause(), e);
            }
            hooks.forEach(Runnable::run);
            if (exited.get() != null) {
                code = exited.get();
            }
        } finally {
            System.setOut(oldOut);
            System.setErr(oldErr);
            System.setIn(oldIn);
            Exit.resetExitProcedure();
            Exit.resetHaltProcedure();
            Exit.resetShutdownHookAdder();
        }
        Result r = new Result(code, out.toString(StandardCharsets.UTF_8), err.toString(StandardCharsets.UTF_8));
        oldErr.println("=== " + mainClass + " " + String.join(" ", args) + " -> exit " + code + "\n" + r.both().strip());
        return r;
    }

    /**
     * Runs a tool in a JVM of its own, for the tools that call {@code System.exit} and register
     * JVM shutdown hooks directly (VerifiableProducer, VerifiableConsumer): in this JVM those would
     * end every other scenario, and their results are printed by the shutdown hook.
     */
    static Result runInOwnJvm(String mainClass, String... args) throws Exception {
        List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-cp", System.getProperty("java.class.path"), mainClass));
        cmd.addAll(List.of(args));
        Path out = Files.createTempFile("sluice-compat-tool", ".out"), err = Files.createTempFile("sluice-compat-tool", ".err");
        try {
            Process p = new ProcessBuilder(cmd).redirectOutput(out.toFile()).redirectError(err.toFile()).start();
            if (!p.waitFor(Harness.TIMEOUT_MS * 2, TimeUnit.MILLISECONDS)) {
                p.destroyForcibly().waitFor();
            }
            Result r = new Result(p.exitValue(), Files.readString(out), Files.readString(err));
            System.err.println("=== " + mainClass + " " + String.join(" ", args) + " (own JVM) -> exit " + r.exitCode()
                    + "\n" + r.both().strip());
            return r;
        } finally {
            Files.deleteIfExists(out);
            Files.deleteIfExists(err);
        }
    }

    private static int exitCodeOf(Throwable thrown, PrintStream err) {
        for (Throwable t = thrown; t != null; t = t.getCause()) {
            if (t instanceof ToolExited exited) {
                return exited.code;
            }
        }
        thrown.printStackTrace(err);
        return 1; // an exception out of main: what the JVM would exit with
    }
}
