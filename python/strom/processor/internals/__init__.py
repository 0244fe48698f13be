"""The engine (Kafka's processor/internals): nodes, StreamTask, state manager,
topology builder, the transport-neutral Runtime. Not public API."""
