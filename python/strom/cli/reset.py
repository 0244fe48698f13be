"""``strom reset``: Kafka's application reset tool, on Kafka or on the
embedded log (``--bootstrap-servers embedded:PATH``, no broker)."""

from __future__ import annotations

from pathlib import Path

import click

from strom.cli.cluster import embedded_path
from strom.cli.common import (
    BadInput,
    CommandError,
    check_bootstrap,
    merged_settings,
    reports_errors,
    settings_options,
)
from strom.cli.output import Output, output_options
from strom.embedded.reset import reset_application as reset_embedded
from strom.processor.internals.internal_topics import ResetResult


@click.command()
@click.option("--application-id", required=True, help="the app's application.id")
@click.option(
    "--bootstrap-servers",
    "--bootstrap-server",
    required=True,
    help="host:port,… of the Kafka cluster, or embedded:PATH",
)
@click.option("--input-topics", default="", help="comma-separated input topics to reset too")
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="the app's state.dir (default: the app's default)",
)
@settings_options("the Kafka clients' settings (security.protocol, sasl.*, ssl.*, …)")
@output_options
@reports_errors
def reset(
    application_id: str,
    bootstrap_servers: str,
    input_topics: str,
    state_dir: Path | None,
    settings: dict[str, str],
    config_file: Path | None,
    output: Output,
) -> int:
    """Reset an app so that it reprocesses its input from scratch.

    As Kafka's kafka-streams-application-reset: refuses while an instance of the
    app runs; moves the group's committed offsets of its input topics (and of
    --input-topics) to the earliest; deletes the app's internal topics
    (repartition, changelog); removes its local state (STATE_DIR/APPLICATION_ID).
    """
    inputs = [t.strip() for t in input_topics.split(",") if t.strip()]
    result: ResetResult
    path = embedded_path(bootstrap_servers)
    if path is not None:
        if settings or config_file is not None:
            raise BadInput(
                "--config-file and --set are Kafka client settings; the embedded log takes none"
            )
        result = reset_embedded(application_id, path, input_topics=inputs, state_dir=state_dir)
    else:
        client_config = merged_settings(config_file, settings)
        check_bootstrap(bootstrap_servers)
        # confluent-kafka is an optional dependency: imported for Kafka only.
        from confluent_kafka import KafkaException  # noqa: PLC0415

        from strom.kafka import reset_application  # noqa: PLC0415

        try:
            result = reset_application(
                application_id,
                bootstrap_servers,
                input_topics=inputs,
                state_dir=state_dir,
                client_config=client_config,
            )
        except KafkaException as exc:  # e.g. a client setting librdkafka rejects
            reason = exc.args[0] if exc.args else exc
            raise CommandError(f"resetting {application_id!r} failed: {reason}") from exc
    _report(application_id, result, output)
    return 0


def _report(application_id: str, result: ResetResult, output: Output) -> None:
    lines = [
        f"reset offsets of {topic} ({len(partitions)} partition(s)) to the earliest"
        for topic, partitions in sorted(result.offsets_reset.items())
    ]
    lines += [f"deleted internal topic {topic}" for topic in result.topics_deleted]
    if result.state_removed is not None:
        lines.append(f"removed local state {result.state_removed}")
    lines.append(f"application {application_id} reset")
    output.summary(
        {
            "application_id": application_id,
            "offsets_reset": {t: sorted(ps) for t, ps in sorted(result.offsets_reset.items())},
            "topics_deleted": list(result.topics_deleted),
            "state_removed": None if result.state_removed is None else str(result.state_removed),
        },
        lines,
    )
