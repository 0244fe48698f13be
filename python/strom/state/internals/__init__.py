"""The layers behind the public store types (Kafka's state/internals): the
typed base over native window and session stores, the record cache. Not
public API."""
