"""What a secured cluster's refusals become: one exception that says what
was refused and how to fix it.

A failed authentication or TLS handshake (``KafkaAuthenticationError``) and
a denied operation (``KafkaAuthorizationError``) are ``KafkaSecurityError``s:
retrying cannot mend them, so nothing retries them (they are not
``KafkaClientError``s, which an exactly_once_v2 thread answers by redoing
its transaction) and the stream thread that meets one stops, leaving the
decision to the uncaught exception handler as in Kafka Streams.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError

from strom.errors import StromError
from strom.processor.internals.internal_topics import is_internal_topic

# What docs/security.md's ACL section is, for every message that asks for an ACL.
ACL_DOC = "docs/security.md lists every ACL an application needs"


class KafkaSecurityError(StromError):
    """The cluster refused the client: authentication, TLS or authorization."""


class KafkaAuthenticationError(KafkaSecurityError):
    """SASL authentication or the TLS handshake with the cluster failed."""


class KafkaAuthorizationError(KafkaSecurityError):
    """An ACL denied ``operation`` on ``resource_type`` ``resource``."""

    def __init__(self, message: str, operation: str, resource_type: str, resource: str) -> None:
        super().__init__(message)
        self.operation = operation
        self.resource_type = resource_type
        self.resource = resource


# Client-level errors that say the cluster will not let this client in.
AUTHENTICATION = frozenset(
    {
        KafkaError._AUTHENTICATION,
        KafkaError._SSL,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.UNSUPPORTED_SASL_MECHANISM,
        KafkaError.ILLEGAL_SASL_STATE,
    }
)
AUTHORIZATION = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    }
)

# docs/security.md's ACLs on the internal topics, prefixed with "<application.id>-".
INTERNAL_TOPIC_ACL = ("Create", "Describe", "Read", "Write")


_FLAGS = {
    "topic": "--topic",
    "group": "--group",
    "transactional id": "--transactional-id",
    "cluster": "--cluster",
}


def principal_of(conf: Mapping[str, Any]) -> str:
    """The principal a client config authenticates as, as ACLs name it: the
    SASL user for PLAIN and SCRAM (the broker's default mapping), else a
    placeholder (OAUTHBEARER, mTLS: the broker's mapping decides)."""
    mechanism = str(conf.get("sasl.mechanism", conf.get("sasl.mechanisms", "GSSAPI")))
    user = conf.get("sasl.username")
    if user and (mechanism == "PLAIN" or mechanism.startswith("SCRAM-")):
        return f"User:{user}"
    return "User:<the app's principal>"


def grant_command(
    principal: str,
    operations: tuple[str, ...],
    resource_type: str,
    name: str,
    *,
    prefixed: bool = False,
) -> str:
    """The ``kafka-acls`` command (as in docs/security.md) that grants ``operations``."""
    words = ["kafka-acls --bootstrap-server $BOOTSTRAP --command-config $ADMIN_CONFIG --add"]
    words.append(f"--allow-principal {principal}")
    if prefixed:
        words.append("--resource-pattern-type prefixed")
    words += [f"--operation {op}" for op in operations]
    flag = _FLAGS[resource_type]
    words.append(flag if resource_type == "cluster" else f"{flag} {name}")
    return " ".join(words)


def authorization_error(
    operation: str,
    resource_type: str,
    name: str,
    detail: str,
    principal: str,
    *,
    grant: tuple[str, ...] | None = None,
    grant_name: str | None = None,
    hint: str = "",
) -> KafkaAuthorizationError:
    """``operation`` on ``resource_type`` ``name`` was denied (``detail``:
    what the client said). The command to grant it asks for ``grant``
    (default: ``operation``) on ``grant_name`` (a prefix; default: ``name``
    itself)."""
    command = grant_command(
        principal,
        grant or (operation,),
        resource_type,
        grant_name or name,
        prefixed=grant_name is not None,
    )
    what = "the cluster" if resource_type == "cluster" else f"{resource_type} {name!r}"
    message = (
        f"{principal} is not authorized to {operation} {what} ({detail}){hint}; an administrator "
        f"grants it with: {command} ({ACL_DOC})"
    )
    return KafkaAuthorizationError(message, operation, resource_type, name)


def topic_denied(
    operation: str,
    topic: str,
    detail: str,
    principal: str,
    application_id: str | None,
) -> KafkaAuthorizationError:
    """``operation`` on ``topic`` was denied; an internal topic of
    ``application_id`` asks for the prefixed ACLs of docs/security.md."""
    if application_id is not None and is_internal_topic(application_id, topic):
        return authorization_error(
            operation, "topic", topic, detail, principal,
            grant=INTERNAL_TOPIC_ACL, grant_name=f"{application_id}-",
        )  # fmt: skip
    return authorization_error(operation, "topic", topic, detail, principal)


def authentication_error(error: KafkaError, servers: str) -> KafkaAuthenticationError:
    """A failed authentication or TLS handshake, with what to check."""
    reason = error.str()
    if error.code() == KafkaError._SSL:
        return KafkaAuthenticationError(
            f"the TLS handshake with the Kafka cluster at {servers} failed: {reason}; check "
            "ssl.ca.location (the CA that signed the brokers' certificates) and that the "
            "certificates name the host you connect to"
        )
    if (
        error.code() == KafkaError.UNSUPPORTED_SASL_MECHANISM
        or "unsupported sasl mechanism" in reason.lower()
    ):
        check = "sasl.mechanism: it must be one the brokers enable"
    else:
        check = "sasl.username and sasl.password (and sasl.mechanism)"
    return KafkaAuthenticationError(
        f"SASL authentication with the Kafka cluster at {servers} failed: {reason}; check {check}"
    )


def is_authentication(error: KafkaError) -> bool:
    return error.code() in AUTHENTICATION
