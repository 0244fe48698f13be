"""The DSL's processor nodes and the graph builders behind the DSL (Kafka's
kstream/internals). Not public API."""
