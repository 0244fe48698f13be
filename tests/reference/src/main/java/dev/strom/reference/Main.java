package dev.strom.reference;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.StringWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.TopologyTestDriver;
import org.apache.kafka.streams.state.BuiltInDslStoreSuppliers;
import org.apache.kafka.streams.test.TestRecord;

/**
 * Reads case specs as JSON lines on stdin and, for each, prints one JSON line:
 * what every output topic of the case's topology received on Kafka Streams'
 * TopologyTestDriver, record by record ({"id", "outputs": {topic: [[key hex,
 * value hex, timestamp, headers]...]}, "topology": its description}), or
 * {"id", "error"} when building or running it threw (with "topology" when
 * building did not). One JVM serves a whole batch of cases.
 *
 * <p>A line with "eval" instead asks for the vocabulary's functions applied to
 * given arguments (see Fns.evaluate), to check them against their Python twins.
 */
public final class Main {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final HexFormat HEX = HexFormat.of();

    private Main() {}

    public static void main(String[] args) throws Exception {
        // The protocol owns stdout; anything else printing there would corrupt it.
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        System.setOut(System.err);
        Path stateRoot = Files.createTempDirectory("strom-reference-");
        try (BufferedReader in = new BufferedReader(
                new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            String line;
            while ((line = in.readLine()) != null) {
                if (line.isBlank()) {
                    continue;
                }
                JsonNode request = JSON.readTree(line);
                ObjectNode answer = request.has("eval") ? Fns.evaluate(request) : run(request, stateRoot);
                out.println(JSON.writeValueAsString(answer));
                out.flush();
            }
        } finally {
            deleteTree(stateRoot);
        }
    }

    static ObjectNode run(JsonNode spec, Path stateRoot) {
        ObjectNode result = JSON.createObjectNode();
        result.set("id", spec.get("id"));
        try {
            Builder builder = new Builder();
            for (JsonNode step : spec.get("steps")) {
                builder.step(step);
            }
            Topology topology = builder.build();
            result.put("topology", topology.describe().toString());
            Path stateDir = Files.createTempDirectory(stateRoot, "case-");
            try (TopologyTestDriver driver =
                     new TopologyTestDriver(topology, config(spec, stateDir))) {
                pipe(driver, spec.get("inputs"));
                result.set("outputs", outputs(driver, builder.sinkTopics));
            } finally {
                deleteTree(stateDir);
            }
        } catch (Throwable e) {
            result.put("error", describe(e));
        }
        return result;
    }

    static Properties config(JsonNode spec, Path stateDir) {
        Properties props = new Properties();
        // strom's TopologyTestDriver's application.id: internal topic names (and so the
        // suppression buffer's byte sizes, which count them) come out the same.
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, "topology-test-driver");
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "reference:9092");
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        boolean cache = spec.path("cache").asBoolean(false);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, cache ? 10L * 1024 * 1024 : 0L);
        if (!"rocksdb".equals(spec.path("stores").asText("in_memory"))) {
            props.put(StreamsConfig.DSL_STORE_SUPPLIERS_CLASS_CONFIG,
                BuiltInDslStoreSuppliers.InMemoryDslStoreSuppliers.class);
        }
        JsonNode extra = spec.path("config");
        extra.properties().forEach(e -> props.put(e.getKey(), e.getValue().asText()));
        return props;
    }

    static void pipe(TopologyTestDriver driver, JsonNode inputs) {
        Map<String, TestInputTopic<String, String>> topics = new LinkedHashMap<>();
        StringSerializer strings = new StringSerializer();
        for (JsonNode record : inputs) {
            String topic = record.get("topic").asText();
            TestInputTopic<String, String> input = topics.computeIfAbsent(
                topic, t -> driver.createInputTopic(t, strings, strings));
            RecordHeaders headers = new RecordHeaders();
            for (JsonNode h : record.path("headers")) {
                headers.add(h.get(0).asText(), h.get(1).asText().getBytes(StandardCharsets.UTF_8));
            }
            input.pipeInput(new TestRecord<>(text(record.get("key")), text(record.get("value")),
                headers, record.get("timestamp").asLong()));
        }
    }

    static ObjectNode outputs(TopologyTestDriver driver, List<String> sinkTopics) {
        ObjectNode outputs = JSON.createObjectNode();
        ByteArrayDeserializer bytes = new ByteArrayDeserializer();
        for (String topic : sinkTopics) {
            if (outputs.has(topic)) {
                continue;
            }
            TestOutputTopic<byte[], byte[]> output = driver.createOutputTopic(topic, bytes, bytes);
            ArrayNode records = outputs.putArray(topic);
            for (TestRecord<byte[], byte[]> r : output.readRecordsToList()) {
                ArrayNode row = records.addArray();
                row.add(hex(r.key()));
                row.add(hex(r.value()));
                row.add(r.timestamp());
                ArrayNode headers = row.addArray();
                for (Header h : r.headers()) {
                    headers.addArray().add(h.key()).add(hex(h.value()));
                }
            }
        }
        return outputs;
    }

    private static String text(JsonNode node) {
        return node == null || node.isNull() ? null : node.asText();
    }

    private static String hex(byte[] data) {
        return data == null ? null : HEX.formatHex(data);
    }

    private static String describe(Throwable e) {
        StringWriter trace = new StringWriter();
        e.printStackTrace(new PrintWriter(trace));
        String text = trace.toString();
        return text.length() > 4000 ? text.substring(0, 4000) : text;
    }

    private static void deleteTree(Path root) {
        try (var paths = Files.walk(root)) {
            paths.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (java.io.IOException ignored) {
            // A temp directory left behind is harmless; the answer is what matters.
        }
    }
}
