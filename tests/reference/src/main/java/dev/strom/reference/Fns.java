package dev.strom.reference;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.kstream.Aggregator;
import org.apache.kafka.streams.kstream.Initializer;
import org.apache.kafka.streams.kstream.KeyValueMapper;
import org.apache.kafka.streams.kstream.Merger;
import org.apache.kafka.streams.kstream.Predicate;
import org.apache.kafka.streams.kstream.Reducer;
import org.apache.kafka.streams.kstream.ValueJoiner;
import org.apache.kafka.streams.kstream.ValueJoinerWithKey;
import org.apache.kafka.streams.kstream.ValueMapper;
import org.apache.kafka.streams.kstream.ValueMapperWithKey;
import org.apache.kafka.streams.kstream.ValueTransformerWithKey;
import org.apache.kafka.streams.kstream.ValueTransformerWithKeySupplier;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * The differential test's vocabulary of user functions, by name. Each one has a
 * twin of the same name in tests/differential/functions.py that must compute the
 * same thing: a case spec names functions, never carries code.
 */
final class Fns {
    private Fns() {}

    private static final Pattern INT = Pattern.compile("-?[0-9]{1,9}");
    private static final String[] ABC = {"a", "b", "c"};

    /** A value as text: "null" for null, windowed keys as key@start/end. */
    static String s(Object x) {
        if (x == null) {
            return "null";
        }
        if (x instanceof Windowed<?> w) {
            return s(w.key()) + "@" + w.window().start() + "/" + w.window().end();
        }
        return x.toString();
    }

    /** A value as a number: its integer, or its text's length; null is 0. */
    static long n(Object x) {
        if (x == null) {
            return 0;
        }
        if (x instanceof Long l) {
            return l;
        }
        String text = s(x);
        return INT.matcher(text).matches() ? Long.parseLong(text) : text.length();
    }

    private static boolean even(Object v) {
        return Math.floorMod(n(v), 2) == 0;
    }

    private static String abc(Object v) {
        return ABC[Math.floorMod(n(v), 3)];
    }

    static final Map<String, Predicate<Object, Object>> PREDICATES = Map.of(
        "p_even", (k, v) -> v != null && even(v),
        "p_gt4", (k, v) -> v != null && n(v) > 4,
        "p_key_a", (k, v) -> "a".equals(k),
        "p_not_null", (k, v) -> v != null,
        "p_small_or_null", (k, v) -> v == null || n(v) < 3);

    static final Map<String, ValueMapper<Object, Object>> MAPPERS = Map.of(
        "m_inc", v -> v == null ? null : s(n(v) + 1),
        "m_tag", v -> "x" + s(v),
        "m_null_if_odd", v -> v == null || !even(v) ? null : s(v),
        "m_mod3", v -> v == null ? null : s(Math.floorMod(n(v), 3)));

    static final Map<String, KeyValueMapper<Object, Object, KeyValue<Object, Object>>> KV_MAPPERS =
        Map.of(
            "kv_key_from_value", (k, v) -> KeyValue.pair(
                v == null ? null : "k" + Math.floorMod(n(v), 3), s(k)),
            "kv_rekey_ab", (k, v) -> KeyValue.pair(
                v == null ? null : (even(v) ? "a" : "b"), v == null ? null : s(v)),
            "kv_swap", (k, v) -> KeyValue.pair(s(v), s(k)),
            "kv_same", (k, v) -> KeyValue.pair(k, v == null ? null : s(v)));

    static final Map<String, KeyValueMapper<Object, Object, Object>> KEY_SELECTORS = Map.of(
        "k_from_value", (k, v) -> v == null ? null : "k" + Math.floorMod(n(v), 3),
        "k_abc_from_value", (k, v) -> v == null ? null : abc(v),
        "k_const", (k, v) -> "z",
        "k_same", (k, v) -> k,
        "k_text", (k, v) -> s(k),
        "k_null_for_c", (k, v) -> "c".equals(k) ? null : k);

    static final Map<String, KeyValueMapper<Object, Object, Iterable<KeyValue<Object, Object>>>>
        FLAT_MAPPERS = Map.of(
            "fm_dup", (k, v) -> List.of(KeyValue.pair(k, s(v)), KeyValue.pair(k, s(v) + "!")),
            "fm_drop_odd", (k, v) -> v == null || !even(v)
                ? List.<KeyValue<Object, Object>>of()
                : List.of(KeyValue.pair(k, s(v))));

    /** KTable.transformValues: ValueTransformerWithKey.transform, deletes (null) included. */
    static final Map<String, ValueMapperWithKey<Object, Object, Object>> TRANSFORMERS = Map.of(
        "t_key_arrow", (k, v) -> s(k) + "->" + s(v) + "!",
        "t_keep_nulls", (k, v) -> v == null ? null : s(k) + "=" + s(v));

    /** A supplier of ValueTransformerWithKeys that compute TRANSFORMERS' function {@code name}. */
    static ValueTransformerWithKeySupplier<Object, Object, Object> transformer(String name) {
        ValueMapperWithKey<Object, Object, Object> fn = get(TRANSFORMERS, name, "transformer");
        return () -> new ValueTransformerWithKey<>() {
            @Override
            public void init(org.apache.kafka.streams.processor.ProcessorContext context) {}

            @Override
            public Object transform(Object readOnlyKey, Object value) {
                return fn.apply(readOnlyKey, value);
            }

            @Override
            public void close() {}
        };
    }

    /** Given the key too (ValueMapperWithKey). */
    static final Map<String, ValueMapperWithKey<Object, Object, Object>> KEYED_MAPPERS = Map.of(
        "mk_key_tag", (k, v) -> s(k) + ":" + s(v),
        "mk_null_unless_key_a", (k, v) -> s(k).startsWith("a") ? s(v) : null);

    static final Map<String, ValueMapperWithKey<Object, Object, Iterable<Object>>>
        KEYED_FLAT_VALUE_MAPPERS = Map.of(
            "fmk_key_and_value", (k, v) -> v == null ? List.of() : List.of(s(k), s(v)));

    static final Map<String, ValueMapper<Object, Iterable<Object>>> FLAT_VALUE_MAPPERS = Map.of(
        "fmv_split", v -> {
            List<Object> out = new ArrayList<>();
            if (v != null && even(v)) {
                out.add(s(v));
                out.add("e");
            }
            return out;
        });

    static final Map<String, Reducer<Object>> REDUCERS = Map.of(
        "r_concat", (agg, v) -> s(agg) + "|" + s(v),
        "r_sum", (agg, v) -> s(n(agg) + n(v)),
        "r_null_if_big", (agg, v) -> n(agg) + n(v) > 8 ? null : s(n(agg) + n(v)),
        "r_sub", (agg, v) -> s(n(agg) - n(v)),
        "r_sub_concat", (agg, v) -> s(agg) + "-" + s(v));

    static final Map<String, Initializer<Object>> INITIALIZERS = Map.of(
        "i_empty", () -> "",
        "i_zero", () -> "0");

    static final Map<String, Aggregator<Object, Object, Object>> AGGREGATORS = Map.of(
        "a_concat", (k, v, agg) -> s(agg) + s(v),
        "a_sum", (k, v, agg) -> s(n(agg) + n(v)),
        "a_null_if_big", (k, v, agg) -> n(agg) + n(v) > 8 ? null : s(n(agg) + n(v)),
        "a_sub", (k, v, agg) -> s(n(agg) - n(v)),
        "a_sub_concat", (k, v, agg) -> s(agg) + "-" + s(v),
        "a_sub_null", (k, v, agg) -> n(agg) - n(v) <= 0 ? null : s(n(agg) - n(v)));

    static final Map<String, Merger<Object, Object>> MERGERS = Map.of(
        "g_concat", (k, a1, a2) -> s(a1) + "+" + s(a2),
        "g_sum", (k, a1, a2) -> s(n(a1) + n(a2)));

    /** Given the key too (ValueJoinerWithKey): stream joins only, as in Kafka. */
    static final Map<String, ValueJoinerWithKey<Object, Object, Object, Object>> KEYED_JOINERS =
        Map.of("jk_key_pair", (k, v1, v2) -> s(k) + ":" + s(v1) + "," + s(v2));

    static final Map<String, ValueJoiner<Object, Object, Object>> JOINERS = Map.of(
        "j_pair", (v1, v2) -> s(v1) + "," + s(v2),
        "j_null_if_both_even", (v1, v2) ->
            v1 != null && v2 != null && even(v1) && even(v2) ? null : s(v1) + "," + s(v2));

    static final Map<String, java.util.function.Function<Object, Object>> FOREIGN_KEYS = Map.of(
        "f_abc", v -> v == null ? null : abc(v),
        "f_abc_or_null", v -> v == null || Math.floorMod(n(v), 4) == 3 ? null : abc(v));

    /** BiFunction extractors: the foreign key of (key, value). */
    static final Map<String, java.util.function.BiFunction<Object, Object, Object>>
        KEYED_FOREIGN_KEYS = Map.of(
            "fk_key_abc", (k, v) -> v == null ? null : abc(n(k) + n(v)));

    /** A running concatenation per key in a key-value store; a tombstone clears it. */
    static final class ConcatProcessor implements Processor<Object, Object, Object, Object> {
        private final String storeName;
        private ProcessorContext<Object, Object> context;
        private KeyValueStore<Object, Object> store;

        ConcatProcessor(String storeName) {
            this.storeName = storeName;
        }

        @Override
        public void init(ProcessorContext<Object, Object> context) {
            this.context = context;
            this.store = context.getStateStore(storeName);
        }

        @Override
        public void process(Record<Object, Object> record) {
            Object key = record.key();
            if (key == null) {
                context.forward(record.withValue("nokey"));
                return;
            }
            if (record.value() == null) {
                store.delete(key);
                context.forward(record);
                return;
            }
            Object previous = store.get(key);
            String next = (previous == null ? "" : s(previous)) + s(record.value());
            store.put(key, next);
            context.forward(record.withValue(next));
        }
    }

    /** Forwards a record only when its value differs from the key's last one. */
    static final class DedupeProcessor implements Processor<Object, Object, Object, Object> {
        private final String storeName;
        private ProcessorContext<Object, Object> context;
        private KeyValueStore<Object, Object> store;

        DedupeProcessor(String storeName) {
            this.storeName = storeName;
        }

        @Override
        public void init(ProcessorContext<Object, Object> context) {
            this.context = context;
            this.store = context.getStateStore(storeName);
        }

        @Override
        public void process(Record<Object, Object> record) {
            Object key = record.key();
            if (key == null || record.value() == null) {
                return;
            }
            String value = s(record.value());
            if (value.equals(store.get(key))) {
                return;
            }
            store.put(key, value);
            context.forward(record.withValue(value));
        }
    }

    static Processor<Object, Object, Object, Object> processor(String name, String store) {
        return switch (name) {
            case "proc_concat" -> new ConcatProcessor(store);
            case "proc_dedupe" -> new DedupeProcessor(store);
            default -> throw new IllegalArgumentException("unknown processor " + name);
        };
    }

    /**
     * Answers {"id", "eval": [{"kind", "name", "args"}...]} with {"id", "values":
     * [...]}: each named function applied to its arguments (JSON strings, numbers
     * as Long, nulls); key-value pairs come back as [key, value] and iterables as
     * arrays.
     */
    static ObjectNode evaluate(JsonNode request) {
        ObjectMapper json = new ObjectMapper();
        ObjectNode answer = json.createObjectNode();
        answer.set("id", request.get("id"));
        ArrayNode values = answer.putArray("values");
        for (JsonNode call : request.get("eval")) {
            String name = call.get("name").asText();
            List<Object> a = new ArrayList<>();
            for (JsonNode arg : call.get("args")) {
                a.add(arg.isNull() ? null : arg.isNumber() ? (Object) arg.asLong() : arg.asText());
            }
            Object result = switch (call.get("kind").asText()) {
                case "PREDICATES" -> get(PREDICATES, name, "predicate").test(a.get(0), a.get(1));
                case "MAPPERS" -> get(MAPPERS, name, "mapper").apply(a.get(0));
                case "KV_MAPPERS" -> get(KV_MAPPERS, name, "mapper").apply(a.get(0), a.get(1));
                case "KEY_SELECTORS" -> get(KEY_SELECTORS, name, "selector").apply(a.get(0), a.get(1));
                case "FLAT_MAPPERS" -> get(FLAT_MAPPERS, name, "mapper").apply(a.get(0), a.get(1));
                case "FLAT_VALUE_MAPPERS" -> get(FLAT_VALUE_MAPPERS, name, "mapper").apply(a.get(0));
                case "REDUCERS" -> get(REDUCERS, name, "reducer").apply(a.get(0), a.get(1));
                case "INITIALIZERS" -> get(INITIALIZERS, name, "initializer").apply();
                case "AGGREGATORS" -> get(AGGREGATORS, name, "aggregator")
                    .apply(a.get(0), a.get(1), a.get(2));
                case "MERGERS" -> get(MERGERS, name, "merger").apply(a.get(0), a.get(1), a.get(2));
                case "JOINERS" -> get(JOINERS, name, "joiner").apply(a.get(0), a.get(1));
                case "FOREIGN_KEYS" -> get(FOREIGN_KEYS, name, "extractor").apply(a.get(0));
                case "KEYED_FOREIGN_KEYS" -> get(KEYED_FOREIGN_KEYS, name, "extractor")
                    .apply(a.get(0), a.get(1));
                case "KEYED_MAPPERS" -> get(KEYED_MAPPERS, name, "mapper").apply(a.get(0), a.get(1));
                case "TRANSFORMERS" -> get(TRANSFORMERS, name, "transformer")
                    .apply(a.get(0), a.get(1));
                default -> throw new IllegalArgumentException("unknown kind " + call.get("kind"));
            };
            values.add(json.valueToTree(plain(result)));
        }
        return answer;
    }

    private static Object plain(Object result) {
        if (result instanceof KeyValue<?, ?> kv) {
            return java.util.Arrays.asList(plain(kv.key), plain(kv.value));
        }
        if (result instanceof Iterable<?> items) {
            List<Object> out = new ArrayList<>();
            items.forEach(item -> out.add(plain(item)));
            return out;
        }
        return result;
    }

    static <T> T get(Map<String, T> table, String name, String what) {
        T fn = table.get(name);
        if (fn == null) {
            throw new IllegalArgumentException("unknown " + what + " function " + name);
        }
        return fn;
    }
}
