"""strom's internals: DSL graph nodes, topology compiler, run loop. Not public API."""
