"""Differential test: the same topology and input on strom's TopologyTestDriver
and on Kafka Streams' own (tests/reference), compared record for record."""
