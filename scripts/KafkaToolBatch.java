/*
 * Runs one Kafka command-line tool (its main class) for several argument
 * lists in one JVM, for tests/kafka_harness.py: starting a JVM per
 * kafka-acls call costs several times more than the call itself.
 *
 *   java -cp 'LIBS/*' scripts/KafkaToolBatch.java org.apache.kafka.tools.AclCommand < ARGS
 *
 * ARGS has one argument a line, each command's arguments ended by an empty
 * line. Before each command's output a line "@@tool-batch command N" is
 * printed; a command that fails (the tool exits, or throws) prints
 * "@@tool-batch failed N: WHY" and ends the batch with exit code 1.
 */

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import org.apache.kafka.common.utils.Exit;

public class KafkaToolBatch {
    /** A tool's call to Exit.exit, turned into an exception so the JVM lives on. */
    static final class ToolExit extends RuntimeException {
        final int code;

        ToolExit(int code, String message) {
            super("exit code " + code + (message == null ? "" : ": " + message));
            this.code = code;
        }
    }

    public static void main(String[] args) throws Exception {
        Method tool = Class.forName(args[0]).getMethod("main", String[].class);
        Exit.setExitProcedure((code, message) -> {
            throw new ToolExit(code, message);
        });
        List<List<String>> commands = new ArrayList<>();
        List<String> command = new ArrayList<>();
        BufferedReader in =
            new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null; ) {
            if (!line.isEmpty()) {
                command.add(line);
            } else if (!command.isEmpty()) {
                commands.add(command);
                command = new ArrayList<>();
            }
        }
        if (!command.isEmpty()) {
            commands.add(command);
        }
        int code = 0;
        for (int i = 0; i < commands.size(); i++) {
            System.out.println("@@tool-batch command " + i);
            try {
                tool.invoke(null, (Object) commands.get(i).toArray(new String[0]));
            } catch (InvocationTargetException e) {
                Throwable why = e.getCause();
                if (why instanceof ToolExit && ((ToolExit) why).code == 0) {
                    continue; // a tool that ends with exit(0): done
                }
                System.out.println("@@tool-batch failed " + i + ": " + why);
                code = 1;
                break;
            }
        }
        System.out.flush();
        // The tools' clients may leave non-daemon threads behind.
        System.exit(code);
    }
}
