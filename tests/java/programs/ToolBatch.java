import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.common.utils.internals.Exit;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Runs Kafka's command-line tools one after another in one JVM, each through the main class its
 * bin/*.sh script starts (kafka-topics.sh: org.apache.kafka.tools.TopicCommand, ...), with the
 * arguments a user would type. A JVM start costs seconds on a busy 2-core machine; the tools
 * cost milliseconds once it runs.
 *
 * <p>Usage: {@code ToolBatch <batch.json> <answers.json>}. The batch is a list of {"name", "main",
 * "args", "stdin"?, "until"?, "timeout_s"?}; the answers are the same list with "exit" (the
 * code the tool first passed to Kafka's Exit.exit, 0 when main returned), "stdout", "stderr",
 * "ms", "attempts" and, when main threw, "exception". Kafka's tools end through Exit.exit, whose
 * procedure is replaced here by one that throws, so that the next tool can run; the shutdown
 * hooks they register through Exit run when they end; System.out, System.err and System.in are
 * swapped per tool. Before each tool a line "minibroker-tool <name>" goes to the NetworkClient's logger, so
 * that the request log (tests/java/log4j2.properties) can be split by tool.
 */
public class ToolBatch {
    static final class ExitTrapped extends RuntimeException {
        final int code;

        ExitTrapped(int code) {
            super("exit " + code, null, false, false);
            this.code = code;
        }
    }

    static volatile Integer firstExit;
    static final List<Thread> HOOKS = new ArrayList<>();

    static void runShutdownHooks() throws InterruptedException {
        for (Thread hook : HOOKS) {
            hook.start();
        }
        for (Thread hook : HOOKS) {
            hook.join(10_000);
        }
        HOOKS.clear();
    }

    public static void main(String[] argv) throws Exception {
        ObjectMapper mapper = new ObjectMapper();
        JsonNode batch = mapper.readTree(new File(argv[0]));
        Logger marker = LoggerFactory.getLogger("org.apache.kafka.clients.NetworkClient");
        PrintStream realErr = System.err;
        Exit.Procedure trap = (code, message) -> {
            // The first exit ends the tool, as it ends the JVM of bin/*.sh: a tool that catches
            // what this throws (TopicCommand catches Throwable) and exits again keeps the first
            // code, and what it prints afterwards is dropped.
            if (firstExit == null) {
                firstExit = code;
                System.setOut(new PrintStream(OutputStream.nullOutputStream()));
                System.setErr(new PrintStream(OutputStream.nullOutputStream()));
            }
            throw new ExitTrapped(code);
        };
        Exit.setExitProcedure(trap);
        Exit.setHaltProcedure(trap);
        // Shutdown hooks a tool registers through Exit (ConsoleProducer's closes its producer,
        // flushing what it buffered) run when the tool ends, as they would when its JVM exits.
        Exit.setShutdownHookAdder((hookName, hook) -> HOOKS.add(new Thread(hook, hookName)));
        ArrayNode answers = mapper.createArrayNode();
        for (JsonNode step : batch) {
            String name = step.get("name").asText();
            List<String> args = new ArrayList<>();
            step.get("args").forEach(arg -> args.add(arg.asText()));
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            String stdin = step.has("stdin") ? step.get("stdin").asText() : "";
            ObjectNode answer = answers.addObject();
            answer.put("name", name);
            marker.debug("minibroker-tool {}", name);
            long started = System.nanoTime();
            int code;
            // "until": run the tool again, up to "timeout_s", until its output holds this text
            // (kafka-reassign-partitions --verify while replicas catch up).
            String until = step.has("until") ? step.get("until").asText() : null;
            long deadline = started + (long) (step.path("timeout_s").asDouble(30) * 1e9);
            int attempts = 0;
            while (true) {
                attempts++;
                out.reset();
                err.reset();
                firstExit = null;
                code = runOnce(step, args, stdin, out, err, answer);
                if (until == null || out.toString(StandardCharsets.UTF_8).contains(until)
                        || System.nanoTime() > deadline) {
                    break;
                }
                Thread.sleep(300);
            }
            runShutdownHooks();
            answer.put("attempts", attempts);
            answer.put("exit", code);
            answer.put("ms", (System.nanoTime() - started) / 1_000_000);
            answer.put("stdout", out.toString(StandardCharsets.UTF_8));
            answer.put("stderr", err.toString(StandardCharsets.UTF_8));
            realErr.println("tool " + name + " exit " + code + " in " + answer.get("ms") + " ms");
        }
        mapper.writerWithDefaultPrettyPrinter().writeValue(new File(argv[1]), answers);
        // Tools may leave non-daemon threads behind (a console consumer's fetcher, say).
        Runtime.getRuntime().halt(0);
    }

    /** One run of the step's tool; returns its exit code. */
    static int runOnce(JsonNode step, List<String> args, String stdin, ByteArrayOutputStream out,
                       ByteArrayOutputStream err, ObjectNode answer) throws Exception {
        PrintStream realOut = System.out;
        PrintStream realErr = System.err;
        InputStream realIn = System.in;
        int code = 0;
        PrintStream capturedOut = new PrintStream(out, true, StandardCharsets.UTF_8);
        PrintStream capturedErr = new PrintStream(err, true, StandardCharsets.UTF_8);
        System.setOut(capturedOut);
        System.setErr(capturedErr);
        System.setIn(new ByteArrayInputStream(stdin.getBytes(StandardCharsets.UTF_8)));
        answer.remove("exception");
        try {
            Method mainMethod = Class.forName(step.get("main").asText())
                .getMethod("main", String[].class);
            mainMethod.invoke(null, (Object) args.toArray(new String[0]));
        } catch (InvocationTargetException e) {
            Throwable cause = e.getCause();
            if (cause instanceof ExitTrapped) {
                code = ((ExitTrapped) cause).code;
            } else {
                code = -1;
                answer.put("exception", String.valueOf(cause));
            }
        } catch (ExitTrapped e) {
            code = e.code;
        } finally {
            capturedOut.flush();
            capturedErr.flush();
            System.setOut(realOut);
            System.setErr(realErr);
            System.setIn(realIn);
        }
        if (firstExit != null) {
            code = firstExit;
            answer.remove("exception");
        }
        return code;
    }
}
