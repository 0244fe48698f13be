package dev.strom.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.file.Files;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.TimeWindows;

/**
 * The Kafka Streams side of strom's side-by-side suite: the workloads of
 * benches/sidebyside/strom_app.py, written once more with Kafka Streams' DSL,
 * as a Java user would (JSON values as Jackson trees).
 *
 * <p>The runner protocol (benches/peers/protocol.py): print {"event":"ready"} right
 * before starting, run until SIGTERM, then close.
 */
public final class Driver {
  static final long WINDOW_MS = 10_000;
  static final long HOP_MS = 5_000;
  static final long GRACE_MS = 60_000;
  static final Set<String> LOCAL_STATES = Set.of("OR", "ID", "CA");
  static final long Q2_MODULUS = 123;

  static final ObjectMapper MAPPER = new ObjectMapper();
  static final Serde<String> S = Serdes.String();
  static final Serde<Long> L = Serdes.Long();
  static final Serde<JsonNode> J = Serdes.serdeFrom(new JsonSerializer(), new JsonDeserializer());

  static final class JsonSerializer implements Serializer<JsonNode> {
    @Override
    public byte[] serialize(String topic, JsonNode data) {
      if (data == null) {
        return null;
      }
      try {
        return MAPPER.writeValueAsBytes(data);
      } catch (IOException e) {
        throw new IllegalStateException(e);
      }
    }
  }

  static final class JsonDeserializer implements Deserializer<JsonNode> {
    @Override
    public JsonNode deserialize(String topic, byte[] data) {
      if (data == null) {
        return null;
      }
      try {
        return MAPPER.readTree(data);
      } catch (IOException e) {
        throw new IllegalStateException(e);
      }
    }
  }

  private Driver() {}

  static long windowStart(long ts) {
    return ts - ts % WINDOW_MS;
  }

  static KStream<String, JsonNode> json(StreamsBuilder b, String topic) {
    return b.stream(topic, Consumed.with(S, J));
  }

  static void q0(StreamsBuilder b, Map<String, String> in, String out) {
    json(b, in.get("bid")).to(out, Produced.with(S, J));
  }

  static void q1(StreamsBuilder b, Map<String, String> in, String out) {
    json(b, in.get("bid"))
        .mapValues(
            bid -> (JsonNode) ((ObjectNode) bid.deepCopy()).put("price", bid.get("price").asLong() * 89 / 100))
        .to(out, Produced.with(S, J));
  }

  static void q2(StreamsBuilder b, Map<String, String> in, String out) {
    json(b, in.get("bid"))
        .filter((k, bid) -> bid.get("auction").asLong() % Q2_MODULUS == 0)
        .mapValues(
            bid ->
                (JsonNode)
                    MAPPER.createObjectNode().put("auction", bid.get("auction").asLong()).put("price", bid.get("price").asLong()))
        .to(out, Produced.with(S, J));
  }

  static void q3(StreamsBuilder b, Map<String, String> in, String out) {
    KTable<String, JsonNode> persons =
        json(b, in.get("person"))
            .filter((k, person) -> LOCAL_STATES.contains(person.get("state").asText()))
            .toTable(Materialized.with(S, J));
    json(b, in.get("auction"))
        .filter((k, auction) -> auction.get("category").asLong() == 10)
        .toTable(Materialized.with(S, J))
        .join(
            persons,
            (String key, JsonNode auction) -> auction.get("seller").asText(),
            (auction, person) ->
                (JsonNode)
                    MAPPER
                        .createObjectNode()
                        .put("name", person.get("name").asText())
                        .put("city", person.get("city").asText())
                        .put("state", person.get("state").asText())
                        .put("id", auction.get("id").asLong()),
            Materialized.with(S, J))
        .toStream()
        .to(out, Produced.with(S, J));
  }

  static JsonNode hottest(String window, JsonNode update, JsonNode top) {
    long count = update.get("count").asLong();
    long best = top.get("count").asLong();
    long auction = update.get("auction").asLong();
    if (count > best) {
      ObjectNode next = MAPPER.createObjectNode().put("count", count);
      next.putArray("auctions").add(auction);
      return next;
    }
    if (count == best) {
      TreeSet<Long> auctions = new TreeSet<>();
      top.get("auctions").forEach(a -> auctions.add(a.asLong()));
      if (auctions.add(auction)) {
        ObjectNode next = MAPPER.createObjectNode().put("count", best);
        ArrayNode list = next.putArray("auctions");
        auctions.forEach(list::add);
        return next;
      }
    }
    return top;
  }

  static void q5(StreamsBuilder b, Map<String, String> in, String out) {
    json(b, in.get("bid"))
        .groupByKey(Grouped.with(S, J))
        .windowedBy(
            TimeWindows.ofSizeAndGrace(Duration.ofMillis(WINDOW_MS), Duration.ofMillis(GRACE_MS))
                .advanceBy(Duration.ofMillis(HOP_MS)))
        .count()
        .toStream()
        .map(
            (w, n) ->
                KeyValue.pair(
                    Long.toString(w.window().start()),
                    (JsonNode) MAPPER.createObjectNode().put("auction", Long.parseLong(w.key())).put("count", n)))
        .groupByKey(Grouped.with(S, J))
        .aggregate(
            () -> (JsonNode) MAPPER.createObjectNode().put("count", 0).set("auctions", MAPPER.createArrayNode()),
            Driver::hottest,
            Materialized.with(S, J))
        .toStream()
        .map(
            (start, top) ->
                KeyValue.pair(
                    start,
                    (JsonNode) MAPPER.createObjectNode().put("start", Long.parseLong(start)).setAll((ObjectNode) top)))
        .to(out, Produced.with(S, J));
  }

  static boolean ranksAbove(JsonNode a, JsonNode b) {
    for (String field : new String[] {"price", "dateTime", "auction", "bidder"}) {
      int c = Long.compare(a.get(field).asLong(), b.get(field).asLong());
      if (c != 0) {
        return c > 0;
      }
    }
    return true;
  }

  static void q7(StreamsBuilder b, Map<String, String> in, String out) {
    json(b, in.get("bid"))
        .mapValues(
            bid ->
                (JsonNode)
                    MAPPER
                        .createObjectNode()
                        .put("auction", bid.get("auction").asLong())
                        .put("bidder", bid.get("bidder").asLong())
                        .put("price", bid.get("price").asLong())
                        .put("dateTime", bid.get("dateTime").asLong()))
        .groupBy((k, bid) -> "all", Grouped.with(S, J))
        .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(WINDOW_MS), Duration.ofMillis(GRACE_MS)))
        .reduce((a, c) -> ranksAbove(a, c) ? a : c, Materialized.with(S, J))
        .toStream()
        .map(
            (w, bid) ->
                KeyValue.pair(
                    Long.toString(w.window().start()),
                    (JsonNode) MAPPER.createObjectNode().put("start", w.window().start()).setAll((ObjectNode) bid)))
        .to(out, Produced.with(S, J));
  }

  static void q8(StreamsBuilder b, Map<String, String> in, String out) {
    KTable<String, JsonNode> newPersons =
        json(b, in.get("person"))
            .selectKey((k, person) -> person.get("id").asLong() + "@" + windowStart(person.get("dateTime").asLong()))
            .toTable(Materialized.with(S, J));
    json(b, in.get("auction"))
        .toTable(Materialized.with(S, J))
        .join(
            newPersons,
            (String key, JsonNode auction) ->
                auction.get("seller").asLong() + "@" + windowStart(auction.get("dateTime").asLong()),
            (auction, person) ->
                (JsonNode)
                    MAPPER
                        .createObjectNode()
                        .put("id", person.get("id").asLong())
                        .put("name", person.get("name").asText())
                        .put("reserve", auction.get("reserve").asLong())
                        .put("auction", auction.get("id").asLong())
                        .put("start", windowStart(person.get("dateTime").asLong())),
            Materialized.with(S, J))
        .toStream()
        .to(out, Produced.with(S, J));
  }

  static void q11(StreamsBuilder b, Map<String, String> in, String out) {
    json(b, in.get("bid"))
        .groupBy((k, bid) -> bid.get("bidder").asText(), Grouped.with(S, J))
        .windowedBy(
            SessionWindows.ofInactivityGapAndGrace(Duration.ofMillis(WINDOW_MS), Duration.ofMillis(GRACE_MS)))
        .count()
        .toStream()
        .map(
            (w, n) ->
                KeyValue.pair(
                    w.key() + "@" + w.window().start(),
                    n == null
                        ? null
                        : (JsonNode)
                            MAPPER
                                .createObjectNode()
                                .put("bidder", Long.parseLong(w.key()))
                                .put("start", w.window().start())
                                .put("count", n)))
        .to(out, Produced.with(S, J));
  }

  static void wordCount(StreamsBuilder b, Map<String, String> in, String out) {
    b.stream(in.get("lines"), Consumed.with(S, S))
        .flatMapValues(line -> java.util.Arrays.asList(line.toLowerCase(java.util.Locale.ROOT).split("\\s+")))
        .filter((k, word) -> !word.isEmpty())
        .groupBy((k, word) -> word, Grouped.with(S, S))
        .count()
        .toStream()
        .to(out, Produced.with(S, L));
  }

  static void filterMap(StreamsBuilder b, Map<String, String> in, String out) {
    b.stream(in.get("input"), Consumed.with(S, S))
        .filter((k, v) -> !v.startsWith("0"))
        .mapValues(v -> v.toUpperCase(java.util.Locale.ROOT))
        .to(out, Produced.with(S, S));
  }

  static void windowedCount(StreamsBuilder b, Map<String, String> in, String out) {
    b.stream(in.get("input"), Consumed.with(S, S))
        .groupByKey()
        .windowedBy(TimeWindows.ofSizeWithNoGrace(Duration.ofMillis(WINDOW_MS)))
        .count(Materialized.as("counts"))
        .toStream()
        .map((w, n) -> KeyValue.pair(w.key() + "@" + w.window().start(), n))
        .to(out, Produced.with(S, L));
  }

  interface Workload {
    void build(StreamsBuilder b, Map<String, String> inputs, String output);
  }

  static final Map<String, Workload> WORKLOADS =
      Map.ofEntries(
          Map.entry("q0", Driver::q0),
          Map.entry("q1", Driver::q1),
          Map.entry("q2", Driver::q2),
          Map.entry("q3", Driver::q3),
          Map.entry("q5", Driver::q5),
          Map.entry("q7", Driver::q7),
          Map.entry("q8", Driver::q8),
          Map.entry("q11", Driver::q11),
          Map.entry("word_count", Driver::wordCount),
          Map.entry("filter_map", Driver::filterMap),
          Map.entry("windowed_count", Driver::windowedCount));

  public static void main(String[] argv) throws Exception {
    Map<String, String> args = new HashMap<>();
    for (int i = 0; i + 1 < argv.length; i += 2) {
      args.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
    }
    Map<String, String> inputs = new HashMap<>();
    MAPPER.readTree(args.get("inputs")).fields().forEachRemaining(e -> inputs.put(e.getKey(), e.getValue().asText()));
    Workload workload = WORKLOADS.get(args.get("workload"));
    if (workload == null) {
      throw new IllegalArgumentException("unknown workload " + args.get("workload"));
    }
    StreamsBuilder builder = new StreamsBuilder();
    workload.build(builder, inputs, args.get("output"));

    Properties props = new Properties();
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, args.get("app-id"));
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, args.getOrDefault("guarantee", "at_least_once"));
    props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, args.getOrDefault("commit-interval-ms", "100"));
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, args.getOrDefault("threads", "1"));
    props.put(
        StreamsConfig.STATE_DIR_CONFIG,
        Files.createTempDirectory(java.nio.file.Path.of(args.getOrDefault("state-dir", "/tmp")), "kstreams-").toString());

    KafkaStreams streams = new KafkaStreams(builder.build(), props);
    CountDownLatch closed = new CountDownLatch(1);
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  streams.close(Duration.ofSeconds(30));
                  closed.countDown();
                }));
    System.out.println("{\"event\": \"ready\", \"t\": " + System.currentTimeMillis() / 1000.0 + "}");
    System.out.flush();
    streams.start();
    closed.await();
  }
}
