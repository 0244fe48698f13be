"""The systems under test and how each is installed and started.

- ``strom``: the dev virtualenv's interpreter runs ``strom_app.py`` (lambdas);
  ``strom-native`` runs ``strom_native_app.py`` (``strom.col`` expressions).
- ``kstreams``: Kafka Streams 4.3.0 on the JVM (Java 17), the Maven project in
  ``benches/jvm``; built once per source digest into the cache.
- ``quix``, ``bytewax``, ``faust``: each in its own virtualenv, created once
  per pinned requirement set under the cache (``$STROM_CACHE`` or
  ``~/.cache/strom``, as the Kafka harness's jars), from PyPI.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHES = ROOT / "benches"
JVM_PROJECT = BENCHES / "jvm"


def cache_root() -> Path:
    env = os.environ.get("STROM_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "strom"


class SetupError(RuntimeError):
    """A system could not be installed or built."""


@dataclass(frozen=True)
class System:
    name: str
    label: str  # as shown in the report
    version: str
    # For peers: the pinned requirements of its virtualenv.
    requirements: tuple[str, ...] = ()
    driver: str = ""  # the driver script, relative to benches/
    # Whether the group's committed offsets mark progress (else the driver says "done").
    commits: bool = True
    # At most this many records (Nexmark events, ...): a system two orders of magnitude
    # slower than the rest would take the whole time budget; it runs on a prefix.
    records_cap: int | None = None
    # Whether its output is flushed once the input offsets are committed (then the
    # runner may kill it at the end of a run instead of waiting for a clean shutdown).
    flushes_before_commit: bool = True

    def records(self, asked: int) -> int:
        return asked if self.records_cap is None else min(asked, self.records_cap)

    def command(self, args: list[str]) -> list[str]:
        if self.name == "kstreams":
            return [*jvm_command(), *args]
        local = self.name in ("strom", "strom-native")
        python = sys.executable if local else str(venv(self) / "bin" / "python")
        return [python, str(BENCHES / self.driver), *args]

    def setup(self) -> None:
        if self.name == "kstreams":
            jvm_classpath()
        elif self.requirements:
            venv(self)


SYSTEMS: dict[str, System] = {
    s.name: s
    for s in [
        System("strom", "strom (lambdas)", "main", driver="sidebyside/strom_app.py"),
        System(
            "strom-native",
            "strom (expressions)",
            "main",
            driver="sidebyside/strom_native_app.py",
        ),
        System("kstreams", "Kafka Streams (JVM)", "4.3.0"),
        System(
            "quix",
            "Quix Streams",
            "3.28.1",
            requirements=("quixstreams==3.28.1",),
            driver="peers/quix_app.py",
        ),
        System(
            "bytewax",
            "Bytewax",
            "0.21.1",
            requirements=("bytewax[kafka]==0.21.1",),
            driver="peers/bytewax_app.py",
            commits=False,
        ),
        System(
            "faust",
            "Faust",
            "0.15.3",
            requirements=("faust-streaming==0.15.3",),
            driver="peers/faust_app.py",
            records_cap=10_000,
            flushes_before_commit=False,  # not documented for its sends: shut down cleanly
        ),
    ]
}


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part)
    return h.hexdigest()[:16]


def _locked(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def venv(system: System) -> Path:
    """The system's virtualenv, created with pip on first use (then cached)."""
    tag = _digest(sys.version.encode(), "\n".join(system.requirements).encode())
    target = cache_root() / "bench-venvs" / f"{system.name}-{tag}"
    stamp = target / ".complete"
    if stamp.is_file():
        return target
    fd = _locked(target.parent / f".{system.name}.lock")
    try:
        if stamp.is_file():
            return target
        shutil.rmtree(target, ignore_errors=True)
        print(f"[setup] creating the {system.name} virtualenv in {target} …", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(target)], check=True)
        proc = subprocess.run(
            [str(target / "bin" / "pip"), "install", "-q", *system.requirements],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise SetupError(f"pip install {' '.join(system.requirements)} failed:\n{proc.stderr}")
        stamp.write_text("\n".join(system.requirements) + "\n")
    finally:
        os.close(fd)
    return target


def _jvm_sources() -> list[Path]:
    return [JVM_PROJECT / "pom.xml", *sorted((JVM_PROJECT / "src").rglob("*.java"))]


def jvm_classpath() -> str:
    """Builds benches/jvm with Maven once per source digest; returns the classpath."""
    tag = _digest(*(f.read_bytes() for f in _jvm_sources()))
    target = cache_root() / "bench-jvm" / tag
    classpath_file = target / "classpath.txt"
    if classpath_file.is_file():
        return classpath_file.read_text().strip()
    fd = _locked(target.parent / ".build.lock")
    try:
        if classpath_file.is_file():
            return classpath_file.read_text().strip()
        mvn = shutil.which("mvn")
        if mvn is None:
            raise SetupError("mvn (Apache Maven) is needed to build benches/jvm")
        print("[setup] building benches/jvm (Kafka Streams 4.3.0) with Maven …", flush=True)
        proc = subprocess.run(
            [
                mvn,
                "-q",
                "-B",
                "-f",
                str(JVM_PROJECT / "pom.xml"),
                "package",
                "-DskipTests",
                "dependency:build-classpath",
                f"-Dmdep.outputFile={target / 'deps.txt'}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise SetupError(f"mvn package of benches/jvm failed:\n{proc.stdout}\n{proc.stderr}")
        jar = target / "kafka-streams-bench.jar"
        shutil.copy(JVM_PROJECT / "target" / "kafka-streams-bench-1.jar", jar)
        deps = (target / "deps.txt").read_text().strip()
        classpath_file.write_text(f"{jar}:{deps}\n")
    finally:
        os.close(fd)
    return classpath_file.read_text().strip()


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise SetupError("java (17 or newer) is needed for the Kafka Streams side")
    return found


def jvm_command() -> list[str]:
    # The JVM's defaults (G1, heap a quarter of RAM), as a user would run it.
    return [
        java(),
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-cp",
        jvm_classpath(),
        "dev.strom.bench.Driver",
    ]
