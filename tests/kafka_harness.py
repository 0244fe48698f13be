"""Real Apache Kafka brokers for strom's tests and for development.

One implementation behind both faces: ``scripts/kafka`` (the CLI, ``main``
below) and the pytest fixtures in ``tests/integration/conftest.py``
(``KafkaCluster``).

The broker is stock Apache Kafka, run from jars that Maven resolves from
Maven Central (``scripts/kafka-pom.xml``) into a cache directory. Each node is
a combined KRaft broker+controller listening on 127.0.0.1 only; a cluster of
N nodes has every node in a static controller quorum, so any one node of a
three-node cluster can be stopped and the rest keep a quorum.

Only the standard library is used here, so ``scripts/kafka`` runs under any
Python >= 3.10 without the dev virtualenv. Readiness is checked by speaking
Kafka's Metadata request directly over TCP.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import NamedTuple

KAFKA_VERSION = "4.3.0"
"""Default Apache Kafka version; keep in step with ``kafka.version`` in the pom."""

REPO_ROOT = Path(__file__).resolve().parent.parent
POM = REPO_ROOT / "scripts" / "kafka-pom.xml"
LOG4J2_CONFIG = REPO_ROOT / "scripts" / "kafka-log4j2.properties"
TOOLS_LOG4J2_CONFIG = REPO_ROOT / "scripts" / "kafka-tools-log4j2.properties"
TOOL_BATCH = REPO_ROOT / "scripts" / "KafkaToolBatch.java"

DEFAULT_HEAP = "512m"
DEFAULT_START_TIMEOUT = 120.0
STOP_TIMEOUT = 30.0
HOST = "127.0.0.1"
STATE_FILE = "cluster.json"

# Small, fast-starting JVMs: two cores are shared by up to four brokers and the
# tests. Serial GC and C1-only JIT cut startup CPU; peak speed does not matter
# for tests (benchmarks can pass their own via STROM_KAFKA_JVM_OPTS or jvm_opts).
JVM_OPTS = (
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)


class KafkaHarnessError(RuntimeError):
    """The harness could not fetch, start or stop Kafka."""


class KafkaStartError(KafkaHarnessError):
    """A broker did not come up; the message carries the tail of its log."""


class _PortConflict(KafkaHarnessError):
    """A node lost a port race (another process bound it first)."""


# --------------------------------------------------------------------------
# Jars


def cache_root() -> Path:
    """``$STROM_CACHE``, else ``~/.cache/strom``."""
    env = os.environ.get("STROM_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "strom"


def _pom_digest() -> str:
    return hashlib.sha256(POM.read_bytes()).hexdigest()[:12]


def libs_dir(version: str = KAFKA_VERSION) -> Path:
    # One directory per pom: checkouts whose poms differ (branches, worktrees)
    # share the cache without replacing each other's jars under a running broker.
    return cache_root() / f"kafka-{version}" / f"libs-{_pom_digest()}"


def _fetch_stamp(version: str) -> str:
    return f"kafka {version} pom {_pom_digest()}\n"


def fetch(version: str = KAFKA_VERSION, *, verbose: bool = False) -> Path:
    """Resolves the broker jars into the cache (once) and returns their directory.

    Idempotent and fast when cached: a stamp file written after a complete copy
    marks the directory as usable. A file lock serialises concurrent fetches.
    """
    libs = libs_dir(version)
    stamp = libs / ".complete"
    expected = _fetch_stamp(version)
    if stamp.is_file() and stamp.read_text() == expected:
        return libs
    libs.parent.mkdir(parents=True, exist_ok=True)
    with open(libs.parent / ".fetch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file() and stamp.read_text() == expected:
            return libs  # another process fetched while we waited
        mvn = shutil.which("mvn")
        if mvn is None:
            raise KafkaHarnessError("mvn (Apache Maven) is needed to fetch the Kafka jars")
        staging = Path(tempfile.mkdtemp(prefix="libs.", dir=libs.parent))
        cmd = [
            mvn,
            "-B",
            "-Dstyle.color=never",
            "-f",
            str(POM),
            f"-Dkafka.version={version}",
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={staging}",
        ]
        if not verbose:
            cmd.insert(1, "-q")
        try:
            # Maven Central hiccups are the usual failure on CI: retry once.
            for attempt in (1, 2):
                proc = subprocess.run(
                    cmd,
                    cwd=libs.parent,
                    stdout=None if verbose else subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    check=False,
                )
                if proc.returncode == 0:
                    break
                if attempt == 2:
                    raise KafkaHarnessError(
                        f"mvn failed to fetch Kafka {version} jars:\n{proc.stdout or ''}"
                    )
                time.sleep(2)
            if not list(staging.glob("kafka_2.13-*.jar")):
                raise KafkaHarnessError(f"mvn ran but copied no Kafka jars into {staging}")
            if libs.exists():
                shutil.rmtree(libs)
            staging.rename(libs)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        stamp.write_text(expected)
    return libs


# --------------------------------------------------------------------------
# Small helpers


def java_executable() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise KafkaHarnessError("java (17 or newer) is needed to run Kafka")
    return java


def random_cluster_id() -> str:
    """A Kafka Uuid string: 16 random bytes, URL-safe base64 without padding."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        # Kafka avoids ids starting with '-' since command lines would read them as flags.
        if not cid.startswith("-"):
            return cid


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports: bind to port 0 and keep all open until done."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def tail(path: Path, lines: int = 80) -> str:
    """The last ``lines`` lines of a text file ('' when it does not exist)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * 1024))
            data = f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped) still answers kill(0).
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _pid_runs(pid: int, marker: str) -> bool:
    """Whether ``pid`` is alive and its command line mentions ``marker``.

    Guards against pid reuse: a stale pid file must never make us signal an
    unrelated process.
    """
    if not pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace")
        if not cmdline:
            # The java launcher shows an empty command line for a moment
            # after it starts (measured: half the reads right after Popen);
            # so does a zombie, which is not running.
            stat = Path(f"/proc/{pid}/stat").read_text()
            return stat.rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return True  # no /proc: trust the pid
    return marker in cmdline


# --------------------------------------------------------------------------
# Kafka wire protocol: just enough of Metadata v4 to see which brokers are up.

_METADATA_KEY = 3
_METADATA_VERSION = 4  # non-flexible; supported by every Kafka 4.x broker


def _read_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return bytes(buf)


class ClusterMetadata(NamedTuple):
    """What a broker's Metadata response says of its cluster."""

    brokers: set[int]  # alive: KRaft lists only registered, unfenced brokers
    controller: int  # -1 when it knows none
    cluster_id: str | None


def metadata_brokers(port: int, timeout: float = 2.0) -> ClusterMetadata:
    """Asks the broker on ``port`` for cluster metadata.

    Raises OSError when the broker does not answer.
    """
    client_id = b"strom-harness"
    body = struct.pack(">hhih", _METADATA_KEY, _METADATA_VERSION, 1, len(client_id))
    body += client_id
    body += struct.pack(">ib", 0, 0)  # no topics, no auto-creation
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", _read_exact(sock, 4))
        resp = _read_exact(sock, size)
    pos = 8  # correlation id, throttle time
    (count,) = struct.unpack_from(">i", resp, pos)
    pos += 4
    brokers = set()
    for _ in range(count):
        node_id, host_len = struct.unpack_from(">ih", resp, pos)
        pos += 6 + host_len + 4  # node id, host, port
        (rack_len,) = struct.unpack_from(">h", resp, pos)
        pos += 2 + max(rack_len, 0)
        brokers.add(node_id)
    (cid_len,) = struct.unpack_from(">h", resp, pos)
    pos += 2
    cluster_id = resp[pos : pos + cid_len].decode() if cid_len >= 0 else None
    pos += max(cid_len, 0)
    (controller,) = struct.unpack_from(">i", resp, pos)
    return ClusterMetadata(brokers, controller, cluster_id)


# --------------------------------------------------------------------------
# Security: TLS material (the JDK's keytool), SCRAM users, client settings

SASL_SSL = "SASL_SSL"
SASL_PLAINTEXT = "SASL_PLAINTEXT"
SECURITY_PROTOCOLS = (SASL_SSL, SASL_PLAINTEXT)
SCRAM_MECHANISM = "SCRAM-SHA-512"
ADMIN_USER = "admin"
# The users a secured cluster has from the start: the super user the harness
# and tests' setup act as, an application's principal, and a reader (e.g. a
# Spark replay that only reads input topics).
DEFAULT_USERS = (ADMIN_USER, "app", "reader")
# Between nodes and to the controllers: PLAINTEXT on 127.0.0.1, whose
# principal (User:ANONYMOUS) is a super user. Clients never use these.
INTERNAL_LISTENER = "INTERNAL"
CONTROLLER_LISTENER = "CONTROLLER"
TLS_DIR = "tls"
CLIENTS_DIR = "clients"


def _keytool(*args: str) -> None:
    # The one beside the java that runs the brokers, else any on the PATH.
    beside = Path(java_executable()).with_name("keytool")
    keytool = str(beside) if beside.is_file() else shutil.which("keytool")
    if keytool is None:
        raise KafkaHarnessError("keytool (from the JDK) is needed for a TLS listener")
    proc = subprocess.run(
        [keytool, *args], stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise KafkaHarnessError(f"keytool {args[0]} failed:\n{proc.stdout}{proc.stderr}")


@dataclass(frozen=True)
class CertificateAuthority:
    """A self-signed CA: its PKCS12 keystore and its certificate as PEM (what
    librdkafka's ``ssl.ca.location`` and Java's PEM truststore take)."""

    keystore: Path
    pem: Path
    password: str


def generate_ca(directory: Path | str, name: str = "strom-test-ca") -> CertificateAuthority:
    """A new self-signed CA in ``directory`` (``<name>.p12``, ``<name>.pem``)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority(directory / f"{name}.p12", directory / f"{name}.pem", _secret(name))
    store = ("-keystore", str(ca.keystore), "-storetype", "PKCS12", "-storepass", ca.password)
    _keytool(
        "-genkeypair", "-alias", "ca", "-dname", f"CN={name}", "-keyalg", "RSA",
        "-keysize", "2048", "-validity", "3650", "-ext", "bc:c", *store,
    )  # fmt: skip
    _keytool("-exportcert", "-rfc", "-alias", "ca", "-file", str(ca.pem), *store)
    return ca


@dataclass(frozen=True)
class BrokerTls:
    """The CA and a broker keystore it signed (SAN: 127.0.0.1 and localhost,
    so clients that verify the host name accept it)."""

    ca: CertificateAuthority
    keystore: Path
    password: str


def generate_broker_tls(directory: Path) -> BrokerTls:
    ca = generate_ca(directory)
    keystore = directory / "broker.p12"
    password = _secret("broker")
    store = ("-keystore", str(keystore), "-storetype", "PKCS12", "-storepass", password)
    ca_store = ("-keystore", str(ca.keystore), "-storetype", "PKCS12", "-storepass", ca.password)
    csr, crt = directory / "broker.csr", directory / "broker.crt"
    _keytool(
        "-genkeypair", "-alias", "broker", "-dname", "CN=localhost", "-keyalg", "RSA",
        "-keysize", "2048", "-validity", "3650", *store,
    )  # fmt: skip
    _keytool("-certreq", "-alias", "broker", "-file", str(csr), *store)
    _keytool(
        "-gencert", "-alias", "ca", "-infile", str(csr), "-outfile", str(crt), "-rfc",
        "-validity", "3650", "-ext", "san=ip:127.0.0.1,dns:localhost",
        "-ext", "eku=serverAuth", *ca_store,
    )  # fmt: skip
    # The chain: the CA first, then its reply is matched to the broker's key.
    _keytool("-importcert", "-noprompt", "-alias", "ca", "-file", str(ca.pem), *store)
    _keytool("-importcert", "-alias", "broker", "-file", str(crt), *store)
    return BrokerTls(ca, keystore, password)


def _secret(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:12]}"


def _write_private(path: Path, text: str) -> None:
    """Writes ``text`` to ``path`` (atomically) readable by this user only: it holds secrets."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    tmp.replace(path)


def _quote_jaas(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def java_properties(props: Mapping[str, str]) -> str:
    """``props`` as a Java .properties file (values escaped as Properties.load reads them)."""

    def value(text: str) -> str:
        return text.replace("\\", "\\\\").replace("\n", "\\n")

    def key(text: str) -> str:
        # A key ends at the first unescaped '=', ':' or space; values need no such care.
        return value(text).replace("=", "\\=").replace(":", "\\:").replace(" ", "\\ ")

    return "".join(f"{key(k)}={value(v)}\n" for k, v in props.items())


# --------------------------------------------------------------------------
# Nodes and clusters


@dataclass
class KafkaNode:
    """One combined broker+controller process. ``node_id`` is also its index.

    ``ports`` maps each listener name to its port: ``PLAINTEXT`` and
    ``CONTROLLER``, or on a secured cluster ``SASL_SSL``, ``SASL_PLAINTEXT``,
    ``INTERNAL`` and ``CONTROLLER``; ``client_listener`` is the one
    ``address`` (and the cluster's ``bootstrap_servers``) names."""

    node_id: int
    ports: dict[str, int]
    dir: Path
    client_listener: str = "PLAINTEXT"
    pid: int | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def port(self) -> int:
        return self.ports[self.client_listener]

    @property
    def controller_port(self) -> int:
        return self.ports[CONTROLLER_LISTENER]

    @property
    def probe_port(self) -> int:
        """A listener that answers unauthenticated Metadata requests (readiness)."""
        return self.ports.get(INTERNAL_LISTENER, self.port)

    @property
    def config_path(self) -> Path:
        return self.dir / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.dir / "server.log"

    @property
    def pid_path(self) -> Path:
        return self.dir / "kafka.pid"

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def address_of(self, listener: str) -> str:
        return f"{HOST}:{self.ports[listener]}"

    def is_running(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        return self.pid is not None and _pid_runs(self.pid, str(self.config_path))


def _listener_properties(node: KafkaNode) -> dict[str, str]:
    advertised = [name for name in node.ports if name != CONTROLLER_LISTENER]
    # A listener named after a protocol speaks it; the internal ones are PLAINTEXT.
    protocols = {name: name if name in SECURITY_PROTOCOLS else "PLAINTEXT" for name in node.ports}
    return {
        "listeners": ",".join(f"{name}://{node.address_of(name)}" for name in node.ports),
        "advertised.listeners": ",".join(
            f"{name}://{node.address_of(name)}" for name in advertised
        ),
        "listener.security.protocol.map": ",".join(f"{k}:{v}" for k, v in protocols.items()),
        "controller.listener.names": CONTROLLER_LISTENER,
        "inter.broker.listener.name": (
            INTERNAL_LISTENER if INTERNAL_LISTENER in node.ports else "PLAINTEXT"
        ),
    }


def _security_properties(tls: BrokerTls, users: Mapping[str, str]) -> dict[str, str]:
    """SASL (SCRAM-SHA-512 and PLAIN) on both client listeners, TLS on
    SASL_SSL, and ACLs enforced: nothing is allowed that no ACL grants."""
    plain_users = " ".join(f"user_{name}={_quote_jaas(secret)}" for name, secret in users.items())
    props = {
        "sasl.enabled.mechanisms": f"{SCRAM_MECHANISM},PLAIN",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        # The nodes reach each other as User:ANONYMOUS on their PLAINTEXT listeners.
        "super.users": f"User:{ADMIN_USER};User:ANONYMOUS",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(tls.keystore),
        "ssl.keystore.password": tls.password,
        "ssl.key.password": tls.password,
    }
    for listener in SECURITY_PROTOCOLS:
        prefix = f"listener.name.{listener.lower()}."
        props[f"{prefix}{SCRAM_MECHANISM.lower()}.sasl.jaas.config"] = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        )
        props[f"{prefix}plain.sasl.jaas.config"] = (
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};"
        )
    return props


def _server_properties(
    node: KafkaNode, nodes: Sequence[KafkaNode], overrides: Mapping[str, str]
) -> str:
    n = len(nodes)
    voters = ",".join(f"{x.node_id}@{HOST}:{x.controller_port}" for x in nodes)
    # With three nodes the internal topics are fully replicated with min ISR 2,
    # so transactions and group commits survive one broker being down.
    internal_rf = str(min(n, 3))
    internal_isr = "1" if n == 1 else "2"
    props: dict[str, str] = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        # A static quorum: formatting needs no directory ids and nodes restart freely.
        "controller.quorum.voters": voters,
        **_listener_properties(node),
        "log.dirs": str(node.data_dir),
        "num.partitions": "1",
        "offsets.topic.replication.factor": internal_rf,
        "transaction.state.log.replication.factor": internal_rf,
        "transaction.state.log.min.isr": internal_isr,
        "share.coordinator.state.topic.replication.factor": internal_rf,
        "share.coordinator.state.topic.min.isr": internal_isr,
        # Fewer internal partitions: creating 50 of each is slow on a test box.
        "offsets.topic.num.partitions": "5",
        "transaction.state.log.num.partitions": "5",
        "share.coordinator.state.topic.num.partitions": "5",
        # Tests should not wait for rebalances that wait for more members.
        "group.initial.rebalance.delay.ms": "0",
        "group.streams.initial.rebalance.delay.ms": "0",
        # Fewer threads: up to four nodes share two cores with the tests.
        "num.network.threads": "2",
        "num.io.threads": "4",
        "background.threads": "4",
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
    }
    props.update(overrides)
    lines = ["# Written by tests/kafka_harness.py; regenerated on every start."]
    lines += [f"{k}={v}" for k, v in props.items()]
    return "\n".join(lines) + "\n"


class KafkaCluster:
    """N combined KRaft nodes on 127.0.0.1, started from the cached jars.

    >>> with KafkaCluster(tmp_dir).start(brokers=3) as cluster:
    ...     admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})

    ``detach=True`` (the CLI) leaves the JVMs running after this process exits;
    otherwise they get SIGTERM when the Python thread that started them dies,
    so a killed test run leaves no brokers behind.

    ``security="SASL_SSL"`` (or ``"SASL_PLAINTEXT"``) starts a secured
    cluster: clients connect with SASL (SCRAM-SHA-512 or PLAIN) over both a
    SASL_SSL and a SASL_PLAINTEXT listener (``security`` picks the one
    ``bootstrap_servers`` names), the TLS certificate comes from a CA made
    with keytool at start (``ca_pem``), and every request needs an ACL
    (StandardAuthorizer, no allow-all). The SCRAM ``users`` (name to
    password; DEFAULT_USERS get random passwords) exist from the start;
    ``admin`` is a super user. ``client_config(user)`` gives confluent-kafka
    settings, ``command_config(user)`` a properties file for Kafka's own
    tools, ``kafka_acls(...)`` runs the ``kafka-acls`` tool.
    """

    def __init__(
        self,
        base_dir: Path | str,
        *,
        version: str = KAFKA_VERSION,
        heap: str = DEFAULT_HEAP,
        broker_config: Mapping[str, str] | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        detach: bool = False,
        jvm_opts: Sequence[str] | None = None,
        security: str | None = None,
        users: Mapping[str, str] | None = None,
    ) -> None:
        if jvm_opts is None:
            env = os.environ.get("STROM_KAFKA_JVM_OPTS")
            jvm_opts = shlex.split(env) if env is not None else JVM_OPTS
        self.jvm_opts = list(jvm_opts)
        self.base_dir = Path(base_dir).resolve()
        self.version = version
        self.heap = heap
        self.broker_config = dict(broker_config or {})
        self.start_timeout = start_timeout
        self.detach = detach
        self.cluster_id = ""
        self.nodes: list[KafkaNode] = []
        if security is not None:
            security = security.upper()
            if security not in SECURITY_PROTOCOLS:
                raise ValueError(f"security must be one of {SECURITY_PROTOCOLS}, got {security!r}")
        elif users:
            raise ValueError("users need a secured cluster (security=...)")
        self.security = security
        self.users: dict[str, str] = {}
        if security is not None:
            self.users = {name: _secret(name) for name in DEFAULT_USERS} | dict(users or {})
        self.tls: BrokerTls | None = None

    def __repr__(self) -> str:
        return f"KafkaCluster({self.bootstrap_servers!r}, running={self.running()})"

    # -- public face -------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` of every node, comma separated (stopped nodes included)."""
        return ",".join(n.address for n in self.nodes)

    @property
    def log_paths(self) -> list[Path]:
        return [n.log_path for n in self.nodes]

    def bootstrap_for(self, listener: str) -> str:
        """The bootstrap servers of one listener (e.g. ``SASL_PLAINTEXT``)."""
        return ",".join(n.address_of(listener.upper()) for n in self.nodes)

    @property
    def ca_pem(self) -> Path:
        """The CA certificate that signed the brokers' (what ``ssl.ca.location`` takes)."""
        return self._tls().ca.pem

    def client_config(
        self,
        user: str = ADMIN_USER,
        *,
        protocol: str | None = None,
        mechanism: str = SCRAM_MECHANISM,
        password: str | None = None,
    ) -> dict[str, str]:
        """confluent-kafka (librdkafka) settings to connect as ``user``:
        ``bootstrap.servers`` and, on a secured cluster, the SASL and TLS
        keys (``protocol`` overrides the cluster's, ``password`` the user's)."""
        if self.security is None:
            return {"bootstrap.servers": self.bootstrap_servers}
        protocol = (protocol or self.security).upper()
        config = {
            "bootstrap.servers": self.bootstrap_for(protocol),
            "security.protocol": protocol,
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": self._password(user) if password is None else password,
        }
        if protocol == SASL_SSL:
            config["ssl.ca.location"] = str(self.ca_pem)
        return config

    def java_client_config(self, user: str = ADMIN_USER) -> dict[str, str]:
        """The same for Kafka's Java clients and tools (SCRAM, the CA as a PEM truststore)."""
        protocol = self._secured()
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f"username={_quote_jaas(user)} password={_quote_jaas(self._password(user))};"
        )
        config = {
            "security.protocol": protocol,
            "sasl.mechanism": SCRAM_MECHANISM,
            "sasl.jaas.config": jaas,
        }
        if protocol == SASL_SSL:
            config |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca_pem)}
        return config

    def command_config(self, user: str = ADMIN_USER) -> Path:
        """A properties file with ``java_client_config(user)``: the
        ``--command-config`` of Kafka's tools (kafka-acls, kafka-configs, …)."""
        path = self.base_dir / CLIENTS_DIR / f"{user}-java.properties"
        _write_private(path, java_properties(self.java_client_config(user)))
        return path

    def run_tool(
        self, main_class: str, commands: Sequence[Sequence[str]], timeout: float = 120.0
    ) -> list[str]:
        """Runs one of Kafka's command-line tools (its main class, from the
        cached jars) once per argument list in ``commands``, all in one JVM
        (scripts/KafkaToolBatch.java); returns each run's stdout. The first
        that fails raises KafkaHarnessError with its output."""
        lines = []
        for args in commands:
            if not args or any(not a or "\n" in a for a in args):
                raise ValueError(f"tool arguments must be non-empty single lines: {args!r}")
            lines += [*args, ""]
        cmd = [
            java_executable(),
            "-Xmx256m",
            *self.jvm_opts,
            f"-Dlog4j2.configurationFile={TOOLS_LOG4J2_CONFIG}",
            "-cp",
            f"{fetch(self.version)}/*",
            str(TOOL_BATCH),
            main_class,
        ]
        what = f"{main_class.rsplit('.', 1)[-1]} ({len(commands)} command(s))"
        try:
            proc = subprocess.run(
                cmd,
                input="\n".join(lines) + "\n",
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as e:
            raise KafkaHarnessError(f"{what} timed out after {timeout:.0f} s") from e
        outputs = re.split(r"^@@tool-batch command \d+\n", proc.stdout, flags=re.M)[1:]
        failed = re.search(r"^@@tool-batch failed (\d+): (.*)$", proc.stdout, re.M)
        if proc.returncode != 0 or failed or len(outputs) != len(commands):
            which = "" if failed is None else shlex.join(commands[int(failed.group(1))])
            raise KafkaHarnessError(
                f"{what} failed (exit {proc.returncode}) {which}:\n{proc.stdout}{proc.stderr}"
            )
        return outputs

    def kafka_acls(self, *commands: Sequence[str]) -> list[str]:
        """Runs ``kafka-acls`` (org.apache.kafka.tools.AclCommand) once per
        argument list, each exactly as given: pass ``--bootstrap-server`` and
        ``--command-config`` like any user of the tool (``bootstrap_servers``,
        ``command_config()``). Returns each run's output."""
        self._secured()
        return self.run_tool("org.apache.kafka.tools.AclCommand", commands)

    def add_user(self, name: str, password: str | None = None) -> str:
        """Creates (or updates) SCRAM user ``name`` with ``kafka-configs``
        (as the admin); returns its password. Users added this way have no
        PLAIN password (PLAIN's users are fixed in the broker config)."""
        self._secured()
        password = _secret(name) if password is None else password
        self.run_tool(
            "kafka.admin.ConfigCommand",
            [
                [
                    "--bootstrap-server",
                    self.bootstrap_servers,
                    "--command-config",
                    str(self.command_config()),
                    "--alter",
                    "--add-config",
                    f"{SCRAM_MECHANISM}=[password={password}]",
                    "--entity-type",
                    "users",
                    "--entity-name",
                    name,
                ]
            ],
        )
        self.users[name] = password
        self._write_state()
        self._write_client_files()
        return password

    def start(self, brokers: int = 1) -> KafkaCluster:
        """Formats fresh storage and starts ``brokers`` nodes; returns when all
        answer metadata requests listing every node. Raises KafkaStartError."""
        if brokers < 1:
            raise ValueError("brokers must be >= 1")
        if any(n.is_running() for n in self.nodes):
            raise KafkaHarnessError("cluster already started")
        libs = fetch(self.version)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if self.security is not None:
            tls_dir = self.base_dir / TLS_DIR
            shutil.rmtree(tls_dir, ignore_errors=True)
            self.tls = generate_broker_tls(tls_dir)
        # Free ports are probed, then bound by the JVMs a moment later: another
        # process can win that race, so a port conflict means "pick again".
        for _ in range(3):
            if self._try_start(brokers, libs):
                return self
        raise KafkaStartError(f"ports kept being taken by other processes\n{self.log_tail()}")

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM to every node (a clean shutdown), then SIGKILL after ``timeout``."""
        running = [n for n in self.nodes if n.is_running()]
        for node in running:
            self._signal(node, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for node in running:
            self._wait_exit(node, deadline)
        for node in self.nodes:
            node.pid_path.unlink(missing_ok=True)
            node.process = None
            node.pid = None
        self._write_state()

    def stop_broker(self, i: int, timeout: float = STOP_TIMEOUT) -> None:
        """Stops node ``i`` cleanly (controlled shutdown moves its leaderships away)."""
        node = self.nodes[i]
        if node.is_running():
            self._signal(node, signal.SIGTERM)
            self._wait_exit(node, time.monotonic() + timeout)
        node.pid_path.unlink(missing_ok=True)
        node.process = None
        node.pid = None
        self._write_state()

    def start_broker(self, i: int, timeout: float | None = None) -> None:
        """Restarts node ``i`` on its old ports and data; returns once every
        running node lists it as an alive broker."""
        node = self.nodes[i]
        if node.is_running():
            return
        self._launch(node, fetch(self.version))
        self._write_state()
        self.wait_ready(timeout, expected=set(self.running()) | {i})

    def ensure_running(self, timeout: float | None = None) -> None:
        """Restarts any stopped node (a test may have left one down)."""
        stopped = [i for i, n in enumerate(self.nodes) if not n.is_running()]
        for i in stopped:
            self.start_broker(i, timeout)

    def running(self) -> list[int]:
        return [n.node_id for n in self.nodes if n.is_running()]

    def wait_ready(self, timeout: float | None = None, expected: set[int] | None = None) -> None:
        """Waits until every node of ``expected`` (the running ones by
        default) reports all of them as alive. A start names the nodes it
        launched: judged by the nodes found running at that moment, a node
        not yet seen as running would leave nothing to wait for."""
        timeout = self.start_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        expected = set(self.running()) if expected is None else expected
        while True:
            self._check_alive(expected)
            if self._ready(expected):
                # A node that answered and then died (e.g. a listener it could
                # not bind after all) is a failed start, not a ready cluster.
                self._check_alive(expected)
                return
            if time.monotonic() > deadline:
                raise KafkaStartError(
                    f"Kafka did not become ready within {timeout:.0f}s "
                    f"(nodes {sorted(expected)})\n{self.log_tail()}"
                )
            time.sleep(0.2)

    def is_ready(self) -> bool:
        return self._ready(set(self.running()))

    def log_tail(self, lines: int = 60) -> str:
        """The last lines of every node's log, each under a header."""
        parts = []
        for node in self.nodes:
            parts.append(f"----- kafka node {node.node_id}: {node.log_path} -----")
            parts.append(tail(node.log_path, lines) or "(empty)")
        return "\n".join(parts)

    def __enter__(self) -> KafkaCluster:
        if not self.nodes:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- state file, for `scripts/kafka stop|status` in another process -----

    @classmethod
    def attach(cls, base_dir: Path | str) -> KafkaCluster:
        """The cluster a previous ``start`` (maybe another process) left in ``base_dir``."""
        base = Path(base_dir).resolve()
        try:
            state = json.loads((base / STATE_FILE).read_text())
        except FileNotFoundError:
            raise KafkaHarnessError(f"no Kafka cluster was started in {base}") from None
        cluster = cls(base, version=state["version"], heap=state["heap"], detach=True)
        cluster.cluster_id = state["cluster_id"]
        cluster.broker_config = state.get("broker_config", {})
        security = state.get("security")
        if security is not None:
            cluster.security = security["protocol"]
            cluster.users = security["users"]
            cluster.tls = BrokerTls(
                CertificateAuthority(
                    Path(security["ca_keystore"]), Path(security["ca_pem"]), security["ca_password"]
                ),
                Path(security["keystore"]),
                security["keystore_password"],
            )
        for n in state["nodes"]:
            ports = n.get("ports") or {
                "PLAINTEXT": n["port"],
                CONTROLLER_LISTENER: n["controller_port"],
            }
            listener = n.get("client_listener", "PLAINTEXT")
            node = KafkaNode(n["node_id"], ports, Path(n["dir"]), listener)
            with contextlib.suppress(FileNotFoundError, ValueError):
                node.pid = int(node.pid_path.read_text().strip())
            cluster.nodes.append(node)
        return cluster

    def _write_state(self) -> None:
        state = {
            "version": self.version,
            "heap": self.heap,
            "cluster_id": self.cluster_id,
            "broker_config": self.broker_config,
            "bootstrap_servers": self.bootstrap_servers,
            "security": None
            if self.security is None or self.tls is None
            else {
                "protocol": self.security,
                "users": self.users,
                "ca_keystore": str(self.tls.ca.keystore),
                "ca_pem": str(self.tls.ca.pem),
                "ca_password": self.tls.ca.password,
                "keystore": str(self.tls.keystore),
                "keystore_password": self.tls.password,
            },
            "nodes": [
                {
                    "node_id": n.node_id,
                    "ports": n.ports,
                    "client_listener": n.client_listener,
                    "dir": str(n.dir),
                    "log": str(n.log_path),
                    "pid_file": str(n.pid_path),
                }
                for n in self.nodes
            ],
        }
        # It holds the users' passwords: readable by this user only.
        _write_private(self.base_dir / STATE_FILE, json.dumps(state, indent=2) + "\n")

    def _write_client_files(self) -> None:
        """Per user, ``clients/<user>.properties`` (confluent-kafka keys) and
        ``clients/<user>-java.properties`` (Kafka's Java tools)."""
        for user in self.users:
            path = self.base_dir / CLIENTS_DIR / f"{user}.properties"
            _write_private(path, java_properties(self.client_config(user)))
            self.command_config(user)

    def _secured(self) -> str:
        if self.security is None:
            raise KafkaHarnessError("this cluster is not secured (start it with security=...)")
        return self.security

    def _password(self, user: str) -> str:
        self._secured()
        try:
            return self.users[user]
        except KeyError:
            raise KafkaHarnessError(
                f"no user {user!r} on this cluster (users: {sorted(self.users)}; add_user adds one)"
            ) from None

    def _tls(self) -> BrokerTls:
        self._secured()
        if self.tls is None:
            raise KafkaHarnessError("the cluster's TLS material is made by start()")
        return self.tls

    # -- internals ---------------------------------------------------------

    def _try_start(self, brokers: int, libs: Path) -> bool:
        """One start attempt; False after a port conflict, raises otherwise."""
        try:
            self._start_once(brokers, libs)
        except _PortConflict:
            self._kill_all()
            return False
        except BaseException:
            self._kill_all()
            raise
        return True

    def _start_once(self, brokers: int, libs: Path) -> None:
        if self.security is None:
            listeners: tuple[str, ...] = ("PLAINTEXT", CONTROLLER_LISTENER)
            overrides = self.broker_config
        else:
            listeners = (*SECURITY_PROTOCOLS, INTERNAL_LISTENER, CONTROLLER_LISTENER)
            overrides = _security_properties(self._tls(), self.users) | self.broker_config
        per_node = len(listeners)
        ports = free_ports(per_node * brokers)
        self.cluster_id = random_cluster_id()
        self.nodes = []
        for i in range(brokers):
            node_dir = self.base_dir / f"node-{i}"
            shutil.rmtree(node_dir, ignore_errors=True)  # every start is a fresh cluster
            node_dir.mkdir(parents=True)
            node_ports = dict(zip(listeners, ports[per_node * i : per_node * (i + 1)], strict=True))
            self.nodes.append(KafkaNode(i, node_ports, node_dir, self.security or "PLAINTEXT"))
        for node in self.nodes:
            node.config_path.write_text(_server_properties(node, self.nodes, overrides))
        self._write_state()
        if self.security is not None:
            self._write_client_files()
        self._format(libs)
        for node in self.nodes:
            self._launch(node, libs)
        self._write_state()
        self.wait_ready(expected={node.node_id for node in self.nodes})

    def _java(self, libs: Path, main: str, *args: str) -> list[str]:
        return [
            java_executable(),
            f"-Xmx{self.heap}",
            "-Xms64m",
            *self.jvm_opts,
            f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}",
            "-cp",
            f"{libs}/*",
            main,
            *args,
        ]

    def _format(self, libs: Path) -> None:
        # The formatters run in parallel: each is a JVM start (~1 s of CPU).
        procs = []
        for node in self.nodes:
            cmd = self._java(
                libs,
                "kafka.tools.StorageTool",
                "format",
                "--cluster-id",
                self.cluster_id,
                "--config",
                str(node.config_path),
                # SCRAM credentials go into the bootstrap metadata: the users
                # exist before any broker accepts a connection.
                *(
                    arg
                    for name, secret in self.users.items()
                    for arg in ("--add-scram", f"{SCRAM_MECHANISM}=[name={name},password={secret}]")
                ),
            )
            with open(node.log_path, "ab") as log:
                procs.append(
                    subprocess.Popen(
                        cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
                    )
                )
        codes = [p.wait() for p in procs]
        failed = [n.node_id for n, code in zip(self.nodes, codes, strict=True) if code != 0]
        if failed:
            raise KafkaStartError(
                f"formatting storage failed for nodes {failed}\n{self.log_tail()}"
            )

    def _launch(self, node: KafkaNode, libs: Path) -> None:
        cmd = self._java(libs, "kafka.Kafka", str(node.config_path))
        setpriv = shutil.which("setpriv")
        if not self.detach and setpriv is not None:
            # Parent-death signal: the JVM gets SIGTERM if the test process dies.
            cmd = [setpriv, "--pdeathsig", "TERM", *cmd]
        with open(node.log_path, "ab") as log:
            log.write(f"\n===== {time.strftime('%F %T')} starting node {node.node_id}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=node.dir,
                # Own session: a Ctrl-C in the terminal reaches pytest, which
                # then stops the brokers in order, rather than the JVMs directly.
                start_new_session=True,
            )
        node.pid = proc.pid
        node.process = None if self.detach else proc
        node.pid_path.write_text(f"{proc.pid}\n")

    def _ready(self, expected: set[int]) -> bool:
        if not expected:
            return False
        for node in self.nodes:
            if node.node_id not in expected:
                continue
            try:
                meta = metadata_brokers(node.probe_port)
                # Every listener must be bound by this node, not only the probe's.
                for port in node.ports.values():
                    socket.create_connection((HOST, port), timeout=2.0).close()
            except (OSError, struct.error):
                return False
            # Another cluster's broker on a port we were given is not ours.
            if meta.cluster_id != self.cluster_id:
                return False
            if not expected <= meta.brokers or meta.controller < 0:
                return False
        return True

    def _check_alive(self, expected: set[int]) -> None:
        for node in self.nodes:
            if node.node_id in expected and not node.is_running():
                log = tail(node.log_path, 400)
                if "Address already in use" in log:
                    raise _PortConflict(str(node.node_id))
                raise KafkaStartError(
                    f"Kafka node {node.node_id} exited during startup\n{self.log_tail()}"
                )

    def _signal(self, node: KafkaNode, sig: signal.Signals) -> None:
        if node.pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(node.pid, sig)

    def _wait_exit(self, node: KafkaNode, deadline: float) -> None:
        while node.is_running():
            if time.monotonic() > deadline:
                self._signal(node, signal.SIGKILL)
                break
            time.sleep(0.05)
        if node.process is not None:
            node.process.wait()  # reap, and no ResourceWarning from Popen.__del__

    def _kill_all(self) -> None:
        for node in self.nodes:
            if node.is_running():
                self._signal(node, signal.SIGKILL)
            if node.process is not None:
                node.process.wait()
                node.process = None
            node.pid = None
            node.pid_path.unlink(missing_ok=True)


# --------------------------------------------------------------------------
# CLI: scripts/kafka


def default_run_dir() -> Path:
    return cache_root() / "kafka-run"


def _cmd_fetch(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    libs = fetch(args.version, verbose=args.verbose)
    jars = len(list(libs.glob("*.jar")))
    print(f"Kafka {args.version}: {jars} jars in {libs} ({time.monotonic() - t0:.1f}s)")
    return 0


def _cmd_start(args: argparse.Namespace) -> int:
    base = Path(args.dir)
    with contextlib.suppress(KafkaHarnessError):
        old = KafkaCluster.attach(base)
        if old.running():
            print(
                f"Kafka is already running in {base} (nodes {old.running()}); "
                "run `scripts/kafka stop` first",
                file=sys.stderr,
            )
            return 1
    cluster = KafkaCluster(
        base,
        version=args.version,
        heap=args.heap,
        start_timeout=args.timeout,
        detach=True,
        security=args.security,
    )
    t0 = time.monotonic()
    try:
        cluster.start(brokers=args.brokers)
    except KafkaHarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    elapsed = time.monotonic() - t0
    err = sys.stderr
    print(
        f"Kafka {cluster.version} started in {elapsed:.1f}s (cluster {cluster.cluster_id})",
        file=err,
    )
    for node in cluster.nodes:
        print(
            f"  node {node.node_id}: {node.address} pid {node.pid} "
            f"(pid file {node.pid_path}) log {node.log_path}",
            file=err,
        )
    if cluster.security is not None:
        clients = cluster.base_dir / CLIENTS_DIR
        print(
            f"  secured: SASL_SSL at {cluster.bootstrap_for(SASL_SSL)}, SASL_PLAINTEXT at "
            f"{cluster.bootstrap_for(SASL_PLAINTEXT)}; SCRAM-SHA-512 users "
            f"{', '.join(sorted(cluster.users))} ({ADMIN_USER} is a super user); "
            f"CA {cluster.ca_pem}",
            file=err,
        )
        print(
            f"  client settings per user: {clients}/<user>.properties (confluent-kafka), "
            f"{clients}/<user>-java.properties (Kafka's tools' --command-config)",
            file=err,
        )
        print(f"  ACLs: scripts/kafka acls --dir {cluster.base_dir} -- --add ...", file=err)
    print(f"  stop with: scripts/kafka stop --dir {cluster.base_dir}", file=err)
    # stdout carries only the bootstrap servers, for BOOTSTRAP=$(scripts/kafka start).
    print(cluster.bootstrap_servers)
    return 0


def _cmd_stop(args: argparse.Namespace) -> int:
    try:
        cluster = KafkaCluster.attach(args.dir)
    except KafkaHarnessError as e:
        print(str(e), file=sys.stderr)
        return 0  # nothing to stop
    running = cluster.running()
    t0 = time.monotonic()
    cluster.stop(timeout=args.timeout)
    print(f"stopped nodes {running} in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    try:
        cluster = KafkaCluster.attach(args.dir)
    except KafkaHarnessError as e:
        print(str(e))
        return 1
    running = set(cluster.running())
    for node in cluster.nodes:
        if node.node_id in running:
            try:
                brokers = metadata_brokers(node.probe_port).brokers
                state = f"running, sees brokers {sorted(brokers)}"
            except (OSError, struct.error) as e:
                state = f"running, not answering ({e})"
        else:
            state = "stopped"
        print(f"node {node.node_id} {node.address} pid {node.pid}: {state}; log {node.log_path}")
    ready = cluster.is_ready() and len(running) == len(cluster.nodes)
    print(f"bootstrap servers: {cluster.bootstrap_servers} ({'up' if ready else 'NOT up'})")
    return 0 if ready else 1


def _cmd_acls(args: argparse.Namespace) -> int:
    cluster = KafkaCluster.attach(args.dir)
    tool_args = list(args.args)
    if tool_args[:1] == ["--"]:
        tool_args = tool_args[1:]
    connect = ["--bootstrap-server", cluster.bootstrap_servers]
    connect += ["--command-config", str(cluster.command_config())]
    print(cluster.kafka_acls([*connect, *tool_args])[0], end="")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/kafka",
        description="Fetch, start and stop a local Apache Kafka (KRaft) for strom.",
    )
    parser.add_argument("--version", default=KAFKA_VERSION, help="Kafka version (%(default)s)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("fetch", help="download the broker jars into the cache (once)")
    p.add_argument("-v", "--verbose", action="store_true", help="show Maven's output")
    p.set_defaults(func=_cmd_fetch)

    run_dir = str(default_run_dir())
    p = sub.add_parser("start", help="format storage and start broker(s) in the background")
    p.add_argument("--brokers", type=int, choices=(1, 3), default=1)
    p.add_argument("--dir", default=run_dir, help="state directory (%(default)s)")
    p.add_argument("--heap", default=DEFAULT_HEAP, help="JVM -Xmx per node (%(default)s)")
    p.add_argument("--timeout", type=float, default=DEFAULT_START_TIMEOUT)
    p.add_argument(
        "--security",
        type=str.upper,
        choices=SECURITY_PROTOCOLS,
        help="a secured cluster (SASL users, TLS, ACLs enforced); its bootstrap servers "
        "are this listener's",
    )
    p.set_defaults(func=_cmd_start)

    p = sub.add_parser("stop", help="stop the brokers started in --dir")
    p.add_argument("--dir", default=run_dir)
    p.add_argument("--timeout", type=float, default=STOP_TIMEOUT)
    p.set_defaults(func=_cmd_stop)

    p = sub.add_parser("status", help="show the nodes in --dir; exit 0 if all are up")
    p.add_argument("--dir", default=run_dir)
    p.set_defaults(func=_cmd_status)

    p = sub.add_parser(
        "acls", help="run kafka-acls as the admin of the secured cluster in --dir: acls -- ARGS"
    )
    p.add_argument("--dir", default=run_dir)
    p.add_argument("args", nargs=argparse.REMAINDER, help="kafka-acls arguments (after --)")
    p.set_defaults(func=_cmd_acls)

    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except KafkaHarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
