package dev.strom.reference;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;
import java.util.function.Function;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.BranchedKStream;
import org.apache.kafka.streams.kstream.Branched;
import org.apache.kafka.streams.kstream.CogroupedKStream;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.EmitStrategy;
import org.apache.kafka.streams.kstream.GlobalKTable;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.Joined;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KGroupedTable;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindowedKStream;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.SlidingWindows;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindowedCogroupedKStream;
import org.apache.kafka.streams.kstream.TimeWindowedKStream;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.ValueJoinerWithKey;
import org.apache.kafka.streams.kstream.WindowedSerdes;
import org.apache.kafka.streams.state.Stores;

/**
 * Builds a case's topology with the Kafka Streams DSL, one spec step at a time.
 * The step vocabulary is tests/differential/spec.py's; the Python twin is
 * tests/differential/strom_side.py.
 */
final class Builder {
    private final StreamsBuilder builder = new StreamsBuilder();
    private final Map<String, Object> nodes = new HashMap<>();
    private final Map<String, Map<String, KStream<Object, Object>>> splits = new HashMap<>();
    final List<String> sinkTopics = new ArrayList<>();

    Topology build() {
        return builder.build();
    }


    /** String serdes, and the source's name if the case gives one
     * (Consumed.as). */
    @SuppressWarnings("unchecked")
    Consumed<Object, Object> consumed(JsonNode step) {
        Consumed<Object, Object> consumed = Consumed.with(keySerde("s"), valueSerde("s"));
        JsonNode name = step.path("args").path("name");
        return name.isMissingNode() ? consumed : consumed.withName(name.asText());
    }

    /** A split branch: its name, with the chain the case gives it (a value
     * mapper, Branched.withFunction, or a sink, withConsumer). */
    @SuppressWarnings({"unchecked", "rawtypes"})
    Branched branched(String name, JsonNode chain) {
        if (chain.has("fn")) {
            String fn = chain.get("fn").asText();
            var keyed = Fns.KEYED_MAPPERS.get(fn);
            var mapper = keyed == null ? Fns.get(Fns.MAPPERS, fn, "mapper") : null;
            Function<KStream<Object, Object>, KStream<Object, Object>> chained =
                s -> keyed != null ? s.mapValues(keyed) : s.mapValues(mapper);
            return Branched.withFunction(chained, name);
        }
        if (chain.has("topic")) {
            String topic = chain.get("topic").asText();
            sinkTopics.add(topic);
            Produced produced = Produced.with(
                keySerde(chain.get("key").asText()), valueSerde(chain.get("value").asText()));
            Consumer<KStream<Object, Object>> consumed = s -> s.to(topic, produced);
            return Branched.withConsumer(consumed, name);
        }
        return Branched.as(name);
    }
    private Object in(JsonNode step, int index) {
        String id = step.get("in").get(index).asText();
        Object node = nodes.get(id);
        if (node == null) {
            throw new IllegalArgumentException("step " + step.get("id") + ": no node " + id);
        }
        return node;
    }

    private static String arg(JsonNode step, String name) {
        JsonNode value = step.path("args").get(name);
        if (value == null || value.isNull()) {
            throw new IllegalArgumentException("step " + step.get("id") + " needs " + name);
        }
        return value.asText();
    }

    private static String optional(JsonNode step, String name) {
        JsonNode value = step.path("args").get(name);
        return value == null || value.isNull() ? null : value.asText();
    }

    private static long number(JsonNode node, String name) {
        return node.get(name).asLong();
    }

    /** Materialized.as(store), as a versioned store when the step gives its history; or null. */
    @SuppressWarnings({"rawtypes", "unchecked"})
    private static Materialized materialized(JsonNode step) {
        String store = optional(step, "store");
        if (store == null) {
            return null;
        }
        JsonNode history = step.path("args").get("versioned");
        if (history != null && !history.isNull()) {
            return Materialized.as(Stores.persistentVersionedKeyValueStore(
                store, Duration.ofMillis(history.asLong())));
        }
        return Materialized.as(store);
    }

    /** Named.as(the step's "name") for an aggregation, or null. */
    private static Named named(JsonNode step) {
        String name = optional(step, "name");
        return name == null ? null : Named.as(name);
    }

    /**
     * An aggregation's Materialized: {@link #materialized}, or Materialized.with(the step's
     * serdes) when it names serdes and no store, else null.
     */
    @SuppressWarnings({"rawtypes", "unchecked"})
    private static Materialized aggregationMaterialized(JsonNode step) {
        Materialized m = materialized(step);
        JsonNode serdes = step.path("args").get("serdes");
        if (m != null || serdes == null || serdes.isNull()) {
            return m;
        }
        return Materialized.with(keySerde(serdes.get(0).asText()), valueSerde(serdes.get(1).asText()));
    }

    /** The step's Materialized, or one with no name and no serdes (Kafka then fills them in). */
    @SuppressWarnings({"rawtypes", "unchecked"})
    private static Materialized materializedOrDefault(JsonNode step) {
        Materialized m = aggregationMaterialized(step);
        return m == null ? Materialized.with(null, null) : m;
    }

    /** {@link #materialized} with the step's serdes ("serdes": [key, value]), or null. */
    @SuppressWarnings({"rawtypes", "unchecked"})
    private static Materialized tableMaterialized(JsonNode step) {
        Materialized m = materialized(step);
        if (m == null) {
            return null;
        }
        JsonNode serdes = step.path("args").path("serdes");
        return m
            .withKeySerde(keySerde(serdes.get(0).asText()))
            .withValueSerde(valueSerde(serdes.get(1).asText()));
    }

    /**
     * Grouped.with(key, value) when the step names serdes ("serdes": [key, value]),
     * named (Grouped.as) when it names itself; else null.
     */
    @SuppressWarnings({"rawtypes", "unchecked"})
    private static Grouped grouped(JsonNode step) {
        JsonNode serdes = step.path("args").get("serdes");
        String name = optional(step, "name");
        Grouped grouped = null;
        if (serdes != null && !serdes.isNull()) {
            grouped = Grouped.with(
                keySerde(serdes.get(0).asText()), valueSerde(serdes.get(1).asText()));
        }
        if (name != null) {
            grouped = grouped == null ? Grouped.as(name) : grouped.withName(name);
        }
        return grouped;
    }

    @SuppressWarnings({"rawtypes", "unchecked"})
    static Serde<Object> keySerde(String kind) {
        if (kind.equals("s")) {
            return (Serde) Serdes.String();
        }
        if (kind.equals("sw")) {
            return (Serde) WindowedSerdes.sessionWindowedSerdeFrom(String.class);
        }
        if (kind.startsWith("tw:")) {
            long size = Long.parseLong(kind.substring(3));
            return (Serde) WindowedSerdes.timeWindowedSerdeFrom(String.class, size);
        }
        throw new IllegalArgumentException("unknown key kind " + kind);
    }

    @SuppressWarnings({"rawtypes", "unchecked"})
    static Serde<Object> valueSerde(String kind) {
        return switch (kind) {
            case "s" -> (Serde) Serdes.String();
            case "l" -> (Serde) Serdes.Long();
            default -> throw new IllegalArgumentException("unknown value kind " + kind);
        };
    }

    @SuppressWarnings({"rawtypes", "unchecked"})
    void step(JsonNode step) {
        String id = step.get("id").asText();
        String op = step.get("op").asText();
        Object result = switch (op) {
            case "stream" -> builder.stream(arg(step, "topic"), consumed(step));
            case "table" -> {
                Materialized m = materialized(step);
                yield m == null ? builder.table(arg(step, "topic"), consumed(step))
                    : builder.table(arg(step, "topic"), consumed(step), m);
            }
            case "global_table" -> builder.globalTable(arg(step, "topic"), consumed(step));
            case "split" -> {
                BranchedKStream branched = ((KStream) in(step, 0)).split(Named.as(id + "-"));
                JsonNode chains = step.path("args").path("chains");
                int index = 0;
                for (JsonNode pred : step.path("args").get("preds")) {
                    String name = String.valueOf(index++);
                    branched = branched.branch(
                        Fns.get(Fns.PREDICATES, pred.asText(), "predicate"),
                        branched(name, chains.path(name)));
                }
                Map<String, KStream<Object, Object>> branches =
                    step.path("args").path("default").asBoolean(false)
                        ? branched.defaultBranch(branched("default", chains.path("default")))
                        : branched.noDefaultBranch();
                splits.put(id, branches);
                yield branches;
            }
            case "branch" -> {
                String split = step.get("in").get(0).asText();
                String name = split + "-" + arg(step, "name");
                KStream<Object, Object> branch = splits.get(split).get(name);
                if (branch == null) {
                    throw new IllegalArgumentException("no branch " + name);
                }
                yield branch;
            }
            case "to" -> {
                String topic = arg(step, "topic");
                Produced produced = Produced.with(
                    keySerde(arg(step, "key")), valueSerde(arg(step, "value")));
                ((KStream) in(step, 0)).to(topic, produced);
                sinkTopics.add(topic);
                yield null;
            }
            case "process" -> {
                String store = arg(step, "store");
                builder.addStateStore(Stores.keyValueStoreBuilder(
                    Stores.inMemoryKeyValueStore(store), keySerde("s"), valueSerde("s")));
                String fn = arg(step, "fn");
                yield ((KStream) in(step, 0)).process(() -> Fns.processor(fn, store), store);
            }
            case "windowed_by" -> windowedBy(step);
            case "cogroup" -> cogroup(step);
            case "join", "left_join", "outer_join" -> join(step, op);
            default -> {
                Object parent = in(step, 0);
                if (parent instanceof KStream s) {
                    yield streamOp(step, op, s);
                }
                if (parent instanceof KTable t) {
                    yield tableOp(step, op, t);
                }
                if (parent instanceof KGroupedStream g) {
                    yield groupedStreamOp(step, op, g);
                }
                if (parent instanceof KGroupedTable g) {
                    yield groupedTableOp(step, op, g);
                }
                if (parent instanceof TimeWindowedKStream w) {
                    yield timeWindowedOp(step, op, w);
                }
                if (parent instanceof SessionWindowedKStream w) {
                    yield sessionWindowedOp(step, op, w);
                }
                throw new IllegalArgumentException("op " + op + " does not apply to " + parent);
            }
        };
        if (result != null) {
            nodes.put(id, result);
        }
    }

    @SuppressWarnings({"rawtypes", "unchecked"})
    private Object streamOp(JsonNode step, String op, KStream s) {
        return switch (op) {
            case "filter" -> s.filter(Fns.get(Fns.PREDICATES, arg(step, "fn"), "predicate"));
            case "filter_not" -> s.filterNot(Fns.get(Fns.PREDICATES, arg(step, "fn"), "predicate"));
            case "map_values" -> Fns.KEYED_MAPPERS.containsKey(arg(step, "fn"))
                ? s.mapValues(Fns.KEYED_MAPPERS.get(arg(step, "fn")))
                : s.mapValues(Fns.get(Fns.MAPPERS, arg(step, "fn"), "mapper"));
            case "map" -> s.map(Fns.get(Fns.KV_MAPPERS, arg(step, "fn"), "key-value mapper"));
            case "select_key" -> s.selectKey(
                Fns.get(Fns.KEY_SELECTORS, arg(step, "fn"), "key selector"));
            case "flat_map" -> s.flatMap(
                Fns.get(Fns.FLAT_MAPPERS, arg(step, "fn"), "flat mapper"));
            case "flat_map_values" -> Fns.KEYED_FLAT_VALUE_MAPPERS.containsKey(arg(step, "fn"))
                ? s.flatMapValues(Fns.KEYED_FLAT_VALUE_MAPPERS.get(arg(step, "fn")))
                : s.flatMapValues(
                    Fns.get(Fns.FLAT_VALUE_MAPPERS, arg(step, "fn"), "flat value mapper"));
            case "merge" -> s.merge((KStream) in(step, 1));
            case "repartition" -> s.repartition();
            case "to_table" -> {
                Materialized m = materialized(step);
                Named n = named(step);
                if (n != null) {
                    yield m == null ? s.toTable(n) : s.toTable(n, m);
                }
                yield m == null ? s.toTable() : s.toTable(m);
            }
            case "group_by_key" -> {
                Grouped grouped = grouped(step);
                yield grouped == null ? s.groupByKey() : s.groupByKey(grouped);
            }
            case "group_by" -> {
                var selector = Fns.get(Fns.KEY_SELECTORS, arg(step, "fn"), "key selector");
                Grouped grouped = grouped(step);
                yield grouped == null ? s.groupBy(selector) : s.groupBy(selector, grouped);
            }
            default -> throw new IllegalArgumentException("op " + op + " does not apply to a KStream");
        };
    }

    @SuppressWarnings({"rawtypes", "unchecked"})
    private Object tableOp(JsonNode step, String op, KTable t) {
        return switch (op) {
            case "filter" -> {
                var predicate = Fns.get(Fns.PREDICATES, arg(step, "fn"), "predicate");
                Materialized m = tableMaterialized(step);
                yield m == null ? t.filter(predicate) : t.filter(predicate, m);
            }
            case "filter_not" -> {
                var predicate = Fns.get(Fns.PREDICATES, arg(step, "fn"), "predicate");
                Materialized m = tableMaterialized(step);
                yield m == null ? t.filterNot(predicate) : t.filterNot(predicate, m);
            }
            case "map_values" -> {
                Materialized m = tableMaterialized(step);
                var keyed = Fns.KEYED_MAPPERS.get(arg(step, "fn"));
                if (keyed != null) {
                    yield m == null ? t.mapValues(keyed) : t.mapValues(keyed, m);
                }
                var mapper = Fns.get(Fns.MAPPERS, arg(step, "fn"), "mapper");
                yield m == null ? t.mapValues(mapper) : t.mapValues(mapper, m);
            }
            case "transform_values" -> {
                Materialized m = tableMaterialized(step);
                var supplier = Fns.transformer(arg(step, "fn"));
                yield m == null ? t.transformValues(supplier) : t.transformValues(supplier, m);
            }
            case "to_stream" -> {
                String fn = optional(step, "fn");
                yield fn == null ? t.toStream()
                    : t.toStream(Fns.get(Fns.KEY_SELECTORS, fn, "key selector"));
            }
            case "suppress" -> t.suppress(suppressed(step.path("args")));
            case "group_by" -> {
                var selector = Fns.get(Fns.KV_MAPPERS, arg(step, "fn"), "key-value mapper");
                Grouped grouped = grouped(step);
                yield grouped == null ? t.groupBy(selector) : t.groupBy(selector, grouped);
            }
            default -> throw new IllegalArgumentException("op " + op + " does not apply to a KTable");
        };
    }

    @SuppressWarnings({"rawtypes", "unchecked"})
    private static Suppressed suppressed(JsonNode args) {
        JsonNode buffer = args.get("buffer");
        String kind = buffer.get("kind").asText();
        boolean emitEarly = "emit_early".equals(buffer.path("full").asText("shut_down"));
        Suppressed.BufferConfig config = switch (kind) {
            case "unbounded" -> Suppressed.BufferConfig.unbounded();
            case "max_records" -> Suppressed.BufferConfig.maxRecords(number(buffer, "n"));
            case "max_bytes" -> Suppressed.BufferConfig.maxBytes(number(buffer, "n"));
            default -> throw new IllegalArgumentException("unknown buffer " + kind);
        };
        if (!kind.equals("unbounded")) {
            config = emitEarly ? config.emitEarlyWhenFull() : config.shutDownWhenFull();
        }
        if (args.get("kind").asText().equals("window_closes")) {
            return Suppressed.untilWindowCloses((Suppressed.StrictBufferConfig) config);
        }
        return Suppressed.untilTimeLimit(Duration.ofMillis(number(args, "limit_ms")), config);
    }

    @SuppressWarnings({"rawtypes", "unchecked"})
    private Object groupedStreamOp(JsonNode step, String op, KGroupedStream g) {
        Materialized m = aggregationMaterialized(step);
        Named n = named(step);
        if (n != null) {
            Materialized mn = materializedOrDefault(step);
            return switch (op) {
                case "count" -> m == null ? g.count(n) : g.count(n, m);
                case "reduce" -> g.reduce(Fns.get(Fns.REDUCERS, arg(step, "fn"), "reducer"), n, mn);
                case "aggregate" -> g.aggregate(
                    Fns.get(Fns.INITIALIZERS, arg(step, "init"), "initializer"),
                    Fns.get(Fns.AGGREGATORS, arg(step, "fn"), "aggregator"), n, mn);
                default -> throw new IllegalArgumentException(
                    "op " + op + " does not apply to a KGroupedStream");
            };
        }
        return switch (op) {
            case "count" -> m == null ? g.count() : g.count(m);
            case "reduce" -> {
                var reducer = Fns.get(Fns.REDUCERS, arg(step, "fn"), "reducer");
                yield m == null ? g.reduce(reducer) : g.reduce(reducer, m);
            }
            case "aggregate" -> {
                var init = Fns.get(Fns.INITIALIZERS, arg(step, "init"), "initializer");
                var agg = Fns.get(Fns.AGGREGATORS, arg(step, "fn"), "aggregator");
                yield m == null ? g.aggregate(init, agg) : g.aggregate(init, agg, m);
            }
            default -> throw new IllegalArgumentException(
                "op " + op + " does not apply to a KGroupedStream");
        };
    }

    @SuppressWarnings({"rawtypes", "unchecked"})
    private Object groupedTableOp(JsonNode step, String op, KGroupedTable g) {
        Materialized m = aggregationMaterialized(step);
        Named n = named(step);
        if (n != null) {
            Materialized mn = materializedOrDefault(step);
            return switch (op) {
                case "count" -> m == null ? g.count(n) : g.count(n, m);
                case "reduce" -> g.reduce(
                    Fns.get(Fns.REDUCERS, arg(step, "adder"), "reducer"),
                    Fns.get(Fns.REDUCERS, arg(step, "subtractor"), "reducer"), n, mn);
                case "aggregate" -> g.aggregate(
                    Fns.get(Fns.INITIALIZERS, arg(step, "init"), "initializer"),
                    Fns.get(Fns.AGGREGATORS, arg(step, "adder"), "aggregator"),
                    Fns.get(Fns.AGGREGATORS, arg(step, "subtractor"), "aggregator"), n, mn);
                default -> throw new IllegalArgumentException(
                    "op " + op + " does not apply to a KGroupedTable");
            };
        }
        return switch (op) {
            case "count" -> m == null ? g.count() : g.count(m);
            case "reduce" -> {
                var adder = Fns.get(Fns.REDUCERS, arg(step, "adder"), "reducer");
                var subtractor = Fns.get(Fns.REDUCERS, arg(step, "subtractor"), "reducer");
                yield m == null ? g.reduce(adder, subtractor) : g.reduce(adder, subtractor, m);
            }
            case "aggregate" -> {
                var init = Fns.get(Fns.INITIALIZERS, arg(step, "init"), "initializer");
                var adder = Fns.get(Fns.AGGREGATORS, arg(step, "adder"), "aggregator");
                var subtractor = Fns.get(Fns.AGGREGATORS, arg(step, "subtractor"), "aggregator");
                yield m == null ? g.aggregate(init, adder, subtractor)
                    : g.aggregate(init, adder, subtractor, m);
            }
            default -> throw new IllegalArgumentException(
                "op " + op + " does not apply to a KGroupedTable");
        };
    }

    @SuppressWarnings({"rawtypes", "unchecked"})
    private Object windowedBy(JsonNode step) {
        KGroupedStream g = (KGroupedStream) in(step, 0);
        JsonNode w = step.path("args").get("windows");
        String kind = w.get("kind").asText();
        Duration grace = Duration.ofMillis(number(w, "grace"));
        boolean onClose = "close".equals(step.path("args").path("emit").asText("update"));
        EmitStrategy emit = onClose ? EmitStrategy.onWindowClose() : EmitStrategy.onWindowUpdate();
        return switch (kind) {
            case "tumbling", "hopping" -> {
                TimeWindows windows = TimeWindows.ofSizeAndGrace(
                    Duration.ofMillis(number(w, "size")), grace);
                if (kind.equals("hopping")) {
                    windows = windows.advanceBy(Duration.ofMillis(number(w, "advance")));
                }
                yield g.windowedBy(windows).emitStrategy(emit);
            }
            case "sliding" -> g.windowedBy(SlidingWindows.ofTimeDifferenceAndGrace(
                Duration.ofMillis(number(w, "size")), grace)).emitStrategy(emit);
            case "session" -> g.windowedBy(SessionWindows.ofInactivityGapAndGrace(
                Duration.ofMillis(number(w, "size")), grace)).emitStrategy(emit);
            default -> throw new IllegalArgumentException("unknown windows " + kind);
        };
    }

    /** KGroupedStream.cogroup of the step's inputs, each with its aggregator, then aggregate. */
    @SuppressWarnings({"rawtypes", "unchecked"})
    private Object cogroup(JsonNode step) {
        JsonNode fns = step.path("args").get("fns");
        CogroupedKStream cogrouped = ((KGroupedStream) in(step, 0)).cogroup(
            Fns.get(Fns.AGGREGATORS, fns.get(0).asText(), "aggregator"));
        for (int i = 1; i < fns.size(); i++) {
            cogrouped = cogrouped.cogroup((KGroupedStream) in(step, i),
                Fns.get(Fns.AGGREGATORS, fns.get(i).asText(), "aggregator"));
        }
        var init = Fns.get(Fns.INITIALIZERS, arg(step, "init"), "initializer");
        Materialized m = materialized(step);
        JsonNode w = step.path("args").get("windows");
        if (w == null || w.isNull()) {
            return m == null ? cogrouped.aggregate(init) : cogrouped.aggregate(init, m);
        }
        String kind = w.get("kind").asText();
        Duration size = Duration.ofMillis(number(w, "size"));
        Duration grace = Duration.ofMillis(number(w, "grace"));
        if (kind.equals("session")) {
            var merger = Fns.get(Fns.MERGERS, arg(step, "merger"), "merger");
            var windowed = cogrouped.windowedBy(SessionWindows.ofInactivityGapAndGrace(size, grace));
            return m == null ? windowed.aggregate(init, merger) : windowed.aggregate(init, merger, m);
        }
        TimeWindowedCogroupedKStream windowed;
        if (kind.equals("sliding")) {
            windowed = cogrouped.windowedBy(SlidingWindows.ofTimeDifferenceAndGrace(size, grace));
        } else {
            TimeWindows windows = TimeWindows.ofSizeAndGrace(size, grace);
            if (kind.equals("hopping")) {
                windows = windows.advanceBy(Duration.ofMillis(number(w, "advance")));
            }
            windowed = cogrouped.windowedBy(windows);
        }
        return m == null ? windowed.aggregate(init) : windowed.aggregate(init, m);
    }

    @SuppressWarnings({"rawtypes", "unchecked"})
    private Object timeWindowedOp(JsonNode step, String op, TimeWindowedKStream w) {
        Materialized m = aggregationMaterialized(step);
        Named n = named(step);
        if (n != null) {
            Materialized mn = materializedOrDefault(step);
            return switch (op) {
                case "count" -> m == null ? w.count(n) : w.count(n, m);
                case "reduce" -> w.reduce(Fns.get(Fns.REDUCERS, arg(step, "fn"), "reducer"), n, mn);
                case "aggregate" -> w.aggregate(
                    Fns.get(Fns.INITIALIZERS, arg(step, "init"), "initializer"),
                    Fns.get(Fns.AGGREGATORS, arg(step, "fn"), "aggregator"), n, mn);
                default -> throw new IllegalArgumentException(
                    "op " + op + " does not apply to a TimeWindowedKStream");
            };
        }
        return switch (op) {
            case "count" -> m == null ? w.count() : w.count(m);
            case "reduce" -> {
                var reducer = Fns.get(Fns.REDUCERS, arg(step, "fn"), "reducer");
                yield m == null ? w.reduce(reducer) : w.reduce(reducer, m);
            }
            case "aggregate" -> {
                var init = Fns.get(Fns.INITIALIZERS, arg(step, "init"), "initializer");
                var agg = Fns.get(Fns.AGGREGATORS, arg(step, "fn"), "aggregator");
                yield m == null ? w.aggregate(init, agg) : w.aggregate(init, agg, m);
            }
            default -> throw new IllegalArgumentException(
                "op " + op + " does not apply to a TimeWindowedKStream");
        };
    }

    @SuppressWarnings({"rawtypes", "unchecked"})
    private Object sessionWindowedOp(JsonNode step, String op, SessionWindowedKStream w) {
        Materialized m = aggregationMaterialized(step);
        Named n = named(step);
        if (n != null) {
            Materialized mn = materializedOrDefault(step);
            return switch (op) {
                case "count" -> m == null ? w.count(n) : w.count(n, m);
                case "reduce" -> w.reduce(Fns.get(Fns.REDUCERS, arg(step, "fn"), "reducer"), n, mn);
                case "aggregate" -> w.aggregate(
                    Fns.get(Fns.INITIALIZERS, arg(step, "init"), "initializer"),
                    Fns.get(Fns.AGGREGATORS, arg(step, "fn"), "aggregator"),
                    Fns.get(Fns.MERGERS, arg(step, "merger"), "merger"), n, mn);
                default -> throw new IllegalArgumentException(
                    "op " + op + " does not apply to a SessionWindowedKStream");
            };
        }
        return switch (op) {
            case "count" -> m == null ? w.count() : w.count(m);
            case "reduce" -> {
                var reducer = Fns.get(Fns.REDUCERS, arg(step, "fn"), "reducer");
                yield m == null ? w.reduce(reducer) : w.reduce(reducer, m);
            }
            case "aggregate" -> {
                var init = Fns.get(Fns.INITIALIZERS, arg(step, "init"), "initializer");
                var agg = Fns.get(Fns.AGGREGATORS, arg(step, "fn"), "aggregator");
                var merger = Fns.get(Fns.MERGERS, arg(step, "merger"), "merger");
                yield m == null ? w.aggregate(init, agg, merger) : w.aggregate(init, agg, merger, m);
            }
            default -> throw new IllegalArgumentException(
                "op " + op + " does not apply to a SessionWindowedKStream");
        };
    }

    @SuppressWarnings({"rawtypes", "unchecked"})
    private Object join(JsonNode step, String op) {
        Object left = in(step, 0);
        Object right = in(step, 1);
        var keyed = Fns.KEYED_JOINERS.get(arg(step, "fn"));
        if (keyed != null) {
            return keyedJoin(step, op, (KStream) left, right, keyed);
        }
        var joiner = Fns.get(Fns.JOINERS, arg(step, "fn"), "joiner");
        if (left instanceof KStream s && right instanceof KStream other) {
            JoinWindows windows = joinWindows(step);
            return switch (op) {
                case "join" -> s.join(other, joiner, windows);
                case "left_join" -> s.leftJoin(other, joiner, windows);
                default -> s.outerJoin(other, joiner, windows);
            };
        }
        if (left instanceof KStream s && right instanceof KTable t) {
            Joined joined = graceJoined(step);
            if (joined != null) {
                return op.equals("join") ? s.join(t, joiner, joined) : s.leftJoin(t, joiner, joined);
            }
            return op.equals("join") ? s.join(t, joiner) : s.leftJoin(t, joiner);
        }
        if (left instanceof KStream s && right instanceof GlobalKTable g) {
            var selector = Fns.get(Fns.KEY_SELECTORS, arg(step, "key_fn"), "key selector");
            return op.equals("join") ? s.join(g, selector, joiner) : s.leftJoin(g, selector, joiner);
        }
        if (left instanceof KTable t && right instanceof KTable other) {
            String fk = optional(step, "fk");
            Materialized m = tableMaterialized(step);
            if (fk != null && Fns.KEYED_FOREIGN_KEYS.containsKey(fk)) {
                var extractor = Fns.KEYED_FOREIGN_KEYS.get(fk);
                if (m != null) {
                    return op.equals("join") ? t.join(other, extractor, joiner, m)
                        : t.leftJoin(other, extractor, joiner, m);
                }
                return op.equals("join") ? t.join(other, extractor, joiner)
                    : t.leftJoin(other, extractor, joiner);
            }
            if (fk != null) {
                var extractor = Fns.get(Fns.FOREIGN_KEYS, fk, "foreign-key extractor");
                if (m != null) {
                    return op.equals("join") ? t.join(other, extractor, joiner, m)
                        : t.leftJoin(other, extractor, joiner, m);
                }
                return op.equals("join") ? t.join(other, extractor, joiner)
                    : t.leftJoin(other, extractor, joiner);
            }
            if (m != null) {
                return switch (op) {
                    case "join" -> t.join(other, joiner, m);
                    case "left_join" -> t.leftJoin(other, joiner, m);
                    default -> t.outerJoin(other, joiner, m);
                };
            }
            return switch (op) {
                case "join" -> t.join(other, joiner);
                case "left_join" -> t.leftJoin(other, joiner);
                default -> t.outerJoin(other, joiner);
            };
        }
        throw new IllegalArgumentException("no " + op + " of " + left + " with " + right);
    }

    /** A stream join whose joiner takes the key (Kafka has these for stream joins only). */
    @SuppressWarnings({"rawtypes", "unchecked"})
    private Object keyedJoin(JsonNode step, String op, KStream s, Object right,
            ValueJoinerWithKey joiner) {
        if (right instanceof KStream other) {
            JoinWindows windows = joinWindows(step);
            return switch (op) {
                case "join" -> s.join(other, joiner, windows);
                case "left_join" -> s.leftJoin(other, joiner, windows);
                default -> s.outerJoin(other, joiner, windows);
            };
        }
        if (right instanceof KTable t) {
            Joined joined = graceJoined(step);
            if (joined != null) {
                return op.equals("join") ? s.join(t, joiner, joined) : s.leftJoin(t, joiner, joined);
            }
            return op.equals("join") ? s.join(t, joiner) : s.leftJoin(t, joiner);
        }
        var selector = Fns.get(Fns.KEY_SELECTORS, arg(step, "key_fn"), "key selector");
        GlobalKTable g = (GlobalKTable) right;
        return op.equals("join") ? s.join(g, selector, joiner) : s.leftJoin(g, selector, joiner);
    }

    /** Joined.withGracePeriod of a stream-table join whose step names a grace, else null. */
    @SuppressWarnings({"rawtypes", "unchecked"})
    private static Joined graceJoined(JsonNode step) {
        JsonNode grace = step.path("args").get("grace");
        if (grace == null || grace.isNull()) {
            return null;
        }
        return Joined.with(keySerde("s"), valueSerde("s"), valueSerde("s"))
            .withGracePeriod(Duration.ofMillis(grace.asLong()));
    }

    private static JoinWindows joinWindows(JsonNode step) {
        JsonNode w = step.path("args").get("windows");
        long before = number(w, "before");
        long after = number(w, "after");
        // before() and after() each check before + after >= 0, so start wide.
        return JoinWindows.ofTimeDifferenceAndGrace(
                Duration.ofMillis(Math.max(Math.abs(before), Math.abs(after))),
                Duration.ofMillis(number(w, "grace")))
            .before(Duration.ofMillis(before))
            .after(Duration.ofMillis(after));
    }
}
