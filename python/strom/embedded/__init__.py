"""The embedded log: Kafka's log design on local disk, so apps run with no broker."""
