"""Builds the Kafka Streams reference program of the differential test.

``scripts/reference build`` (and the pytest fixture in tests/differential)
call ``build()``: Maven compiles tests/reference into a jar and copies its
runtime dependencies beside it, in a directory of the cache
(``${STROM_CACHE:-~/.cache/strom}/reference-<hash>``) named by a hash of the
project's sources, so a build happens once per change of the sources.

Standard library only, like tests/kafka_harness.py, so the script runs under
any Python >= 3.10 without the dev virtualenv.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PROJECT = Path(__file__).resolve().parent
MAIN_CLASS = "dev.strom.reference.Main"
JAR = "reference.jar"


class ReferenceBuildError(RuntimeError):
    """Maven could not build the reference program."""


def cache_root() -> Path:
    """``$STROM_CACHE``, else ``~/.cache/strom`` (as tests/kafka_harness.py)."""
    env = os.environ.get("STROM_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "strom"


def sources() -> list[Path]:
    """The files the build reads: the pom and everything under src/."""
    return [PROJECT / "pom.xml", *sorted(p for p in (PROJECT / "src").rglob("*") if p.is_file())]


def source_hash() -> str:
    digest = hashlib.sha256()
    for path in sources():
        digest.update(str(path.relative_to(PROJECT)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def build_dir() -> Path:
    return cache_root() / f"reference-{source_hash()}"


def classpath(directory: Path) -> str:
    jars = [directory / JAR, *sorted((directory / "lib").glob("*.jar"))]
    return os.pathsep.join(str(j) for j in jars)


def _mvn(args: list[str], cwd: Path, verbose: bool) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ReferenceBuildError("mvn (Apache Maven) is needed to build tests/reference")
    cmd = [mvn, "-B", "-Dstyle.color=never", *([] if verbose else ["-q"]), *args]
    # Maven Central hiccups are the usual failure on CI: retry once.
    for attempt in (1, 2):
        proc = subprocess.run(
            cmd,
            cwd=cwd,
            stdout=None if verbose else subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
        if proc.returncode == 0:
            return
        if attempt == 2:
            raise ReferenceBuildError(
                f"{' '.join(cmd)} failed in {cwd}:\n{proc.stdout or ''}".rstrip()
            )


def build(*, verbose: bool = False) -> Path:
    """Builds the reference program once per source hash; returns its directory
    (``reference.jar`` and ``lib/``). A file lock serialises concurrent builds."""
    target = build_dir()
    stamp = target / ".complete"
    if stamp.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".reference-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file():
            return target  # another process built it while we waited
        with tempfile.TemporaryDirectory(prefix="reference-build.", dir=target.parent) as tmp:
            work = Path(tmp) / "project"
            # Build a copy: Maven's target/ never lands in the source tree.
            shutil.copytree(
                PROJECT, work, ignore=shutil.ignore_patterns("target", "*.py", "__pycache__")
            )
            staging = Path(tmp) / "out"
            _mvn(["package"], work, verbose)
            _mvn(
                [
                    "dependency:copy-dependencies",
                    "-DincludeScope=runtime",
                    f"-DoutputDirectory={staging / 'lib'}",
                ],
                work,
                verbose,
            )
            jars = list((work / "target").glob("kafka-streams-reference-*.jar"))
            if len(jars) != 1:
                raise ReferenceBuildError(f"mvn package left {jars!r} in {work / 'target'}")
            shutil.copy(jars[0], staging / JAR)
            if target.exists():
                shutil.rmtree(target)
            staging.rename(target)
        stamp.write_text(source_hash() + "\n")
    return target


def command(directory: Path | None = None) -> list[str]:
    """The command line that runs the reference program."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java:
        raise ReferenceBuildError("java (17 or newer) is needed to run tests/reference")
    directory = directory or build()
    # One JVM runs a whole batch: C2 pays off, a small serial-GC heap suffices.
    options = ["-Xmx512m", "-XX:+UseSerialGC"]
    # Kafka's RocksDB stores flush to files on every commit (each record in
    # the test driver): their state directories go to memory when it can.
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        options.append(f"-Djava.io.tmpdir={shm}")
    return [java, *options, "-cp", classpath(directory), MAIN_CLASS]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/reference", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    b = sub.add_parser(
        "build", help="build (or find cached) the reference jar; print its directory"
    )
    b.add_argument("-v", "--verbose", action="store_true", help="show Maven's output")
    sub.add_parser("command", help="print the java command line that runs it")
    args = parser.parse_args(argv)
    try:
        if args.verb == "build":
            print(build(verbose=args.verbose))
        else:
            print(" ".join(command()))
    except ReferenceBuildError as e:
        print(f"scripts/reference: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
