"""Real servers for the team tests, each listening on 127.0.0.1 only and stopped on exit:
PostgreSQL (a throw-away cluster), an S3-compatible store (moto's standalone server) and an
MLflow tracking server that keeps runs in the one and artifacts in the other.

A machine without a server's parts skips the tests that need it, saying what to install;
under ``SEQCORE_REQUIRE_SERVERS=1`` (set by ``.ci/run``) that is a failure instead.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

REQUIRE = "SEQCORE_REQUIRE_SERVERS"
HOST = "127.0.0.1"
#: moto accepts any key pair; these are the test store's, not anybody's credentials.
S3_KEY_ID, S3_SECRET = "seqcore-test-key", "seqcore-test-secret"
PG_USER = "seqcore"


def unavailable(what: str, install: str) -> NoReturn:
    """Skip (a developer machine) or fail (CI: SEQCORE_REQUIRE_SERVERS=1) for a missing part."""
    message = f"{what} is not available; install it: {install}"
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{message} ({REQUIRE}=1: CI never skips a server test)")
    pytest.skip(message)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_until(ready: Callable[[], bool], what: str, proc: subprocess.Popen | None, log: Path,
               seconds: float = 150.0) -> None:
    """Poll ``ready()`` until it is true; fail with the log's tail if the process dies or time
    runs out (a loaded CI machine needs tens of seconds for an MLflow server)."""
    deadline = time.monotonic() + seconds
    while not ready():
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode}:\n{tail}")
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not ready after {seconds:.0f} s:\n{tail}")
        time.sleep(0.3)


@dataclass(frozen=True)
class S3Store:
    """An S3-compatible endpoint and the key pair it accepts."""

    endpoint: str

    def env(self) -> dict[str, str]:
        """The standard variables through which boto3, s3fs (dvc-s3) and MLflow find it."""
        return {"AWS_ACCESS_KEY_ID": S3_KEY_ID, "AWS_SECRET_ACCESS_KEY": S3_SECRET,
                "AWS_DEFAULT_REGION": "us-east-1"}

    def client(self) -> object:
        import boto3  # noqa: PLC0415 (only with the server)

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=S3_KEY_ID,
                            aws_secret_access_key=S3_SECRET, region_name="us-east-1")


@contextlib.contextmanager
def s3_server(buckets: tuple[str, ...]) -> Iterator[S3Store]:
    """moto's standalone S3 server in a thread of this process, with ``buckets`` created.
    Production uses real S3 or MinIO (docs/team.md); moto stands in for them in tests."""
    try:
        from moto.server import ThreadedMotoServer  # noqa: PLC0415
    except ImportError:
        unavailable("moto (S3-compatible test server)",
                    "pip install -r requirements.lock (moto[s3]), or `make test`")
    server = ThreadedMotoServer(ip_address=HOST, port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        store = S3Store(f"http://{host}:{port}")
        for bucket in buckets:
            store.client().create_bucket(Bucket=bucket)
        yield store
    finally:
        server.stop()


def postgres_binary(name: str) -> str | None:
    """A PostgreSQL server program: on PATH, else Debian's versioned folder (newest)."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"),
                        key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0)
    return str(candidates[-1]) if candidates else None


def as_unprivileged() -> tuple[list[str], int | None]:
    """Command prefix and uid under which PostgreSQL may run: it refuses to run as root (CI
    runs as root), so there it runs as ``nobody``."""
    if os.geteuid() != 0:
        return [], None
    runuser = shutil.which("runuser")
    if runuser is None:
        unavailable("runuser (to start PostgreSQL as a non-root user)", "apt-get install util-linux")
    return [runuser, "-u", "nobody", "--"], pwd.getpwnam("nobody").pw_uid


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """A fresh PostgreSQL cluster on 127.0.0.1 (no Unix socket) with an empty database
    ``mlflow``; yields its SQLAlchemy URI. Trust authentication: test-only, loopback-only."""
    initdb, pg_ctl = postgres_binary("initdb"), postgres_binary("pg_ctl")
    if not (initdb and pg_ctl):
        unavailable("PostgreSQL server (initdb, pg_ctl)",
                    "apt-get install postgresql (Debian/Ubuntu) or brew install postgresql")
    try:
        import psycopg  # noqa: PLC0415
    except ImportError:
        unavailable("psycopg (the PostgreSQL driver SQLAlchemy uses for MLflow)",
                    "pip install -r requirements.lock (psycopg[binary])")
    prefix, uid = as_unprivileged()
    root = Path(tempfile.mkdtemp(prefix="seqcore-pg-"))
    if uid is not None:
        os.chown(root, uid, -1)
    data, log, port = root / "data", root / "server.log", free_port()
    subprocess.run([*prefix, initdb, "-D", str(data), "-U", PG_USER, "--auth=trust", "-E",
                    "UTF8", "--no-locale", "--no-sync"], check=True, capture_output=True)
    with open(data / "postgresql.conf", "a", encoding="utf-8") as conf:
        conf.write(f"listen_addresses = '{HOST}'\nport = {port}\n"
                   "unix_socket_directories = ''\nfsync = off\n")
    started = subprocess.run([*prefix, pg_ctl, "-D", str(data), "-l", str(log), "-w", "-t", "60",
                              "start"], capture_output=True, text=True)
    try:
        if started.returncode != 0:
            pytest.fail(f"PostgreSQL did not start: {started.stdout}{started.stderr}"
                        f"{log.read_text(errors='replace') if log.exists() else ''}")
        with psycopg.connect(host=HOST, port=port, user=PG_USER, dbname="postgres",
                             autocommit=True) as conn:
            conn.execute("CREATE DATABASE mlflow")
        yield f"postgresql://{PG_USER}@{HOST}:{port}/mlflow"
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"],
                       capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


#: The team server's command line, as docs/team.md shows it.
MLFLOW_SERVER = ("mlflow server --host {host} --port {port} --backend-store-uri {backend} "
                 "--artifacts-destination {artifacts}")


@contextlib.contextmanager
def mlflow_server(backend: str, artifacts: str, s3: S3Store, log: Path) -> Iterator[str]:
    """``mlflow server`` with runs in ``backend`` and artifacts proxied to ``artifacts`` (an
    s3:// URI on ``s3``); yields its URL. Its whole process group is stopped on exit."""
    env = dict(os.environ, **s3.env(), MLFLOW_S3_ENDPOINT_URL=s3.endpoint)
    with _server(lambda port: MLFLOW_SERVER.format(host=HOST, port=port, backend=backend,
                                                   artifacts=artifacts).split()[1:],
                 env, log) as url:
        yield url


@contextlib.contextmanager
def _server(args: Callable[[int], list[str]], env: dict[str, str], log: Path) -> Iterator[str]:
    """``mlflow ARGS(port)`` on a free port of HOST, one worker, its output in ``log``;
    yields its URL once it answers, and stops its whole process group on exit."""
    port = free_port()
    # Without MLflow's job runner (GenAI jobs, unused here): it starts seven more processes
    # that each import MLflow, which took 2/3 of the server's 14 s start on 2 cores.
    env = dict(env, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    env.pop("MLFLOW_TRACKING_URI", None)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(Path(sys.executable).with_name("mlflow")), *args(port), "--workers", "1"],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://{HOST}:{port}"
    try:
        wait_until(lambda: _healthy(url), "mlflow server", proc, log)
        yield url
    finally:
        stop_group(proc)


def stop_group(proc: subprocess.Popen) -> None:
    """Stop a process started with start_new_session=True and every child it started."""
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):  # children that outlived their parent
        os.killpg(proc.pid, signal.SIGKILL)


# --- the team stack: S3, PostgreSQL and an MLflow server on both ----------------------------

DVC_BUCKET, MLFLOW_BUCKET = "seqcore-dvc", "seqcore-mlflow"
ARTIFACTS = f"s3://{MLFLOW_BUCKET}/artifacts"


@dataclass(frozen=True)
class Team:
    s3: S3Store
    mlflow: str

    def values(self) -> dict[str, str]:
        return {"s3": self.s3.endpoint, "mlflow": self.mlflow, "key_id": S3_KEY_ID,
                "secret": S3_SECRET}


def listening(port: int) -> list[str]:
    """Addresses with a listening TCP socket on ``port`` (any process)."""
    import psutil  # noqa: PLC0415

    return [c.laddr.ip for c in psutil.net_connections("inet")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port]


@contextlib.contextmanager
def team_stack(log: Path) -> Iterator[Team]:
    """S3 (moto), PostgreSQL and an MLflow server on both; afterwards nothing listens on
    their ports any more (asserted)."""
    with contextlib.ExitStack() as stack:
        s3 = stack.enter_context(s3_server((DVC_BUCKET, MLFLOW_BUCKET)))
        backend = stack.enter_context(postgres_server())
        url = stack.enter_context(mlflow_server(backend, ARTIFACTS, s3, log))
        ports = [int(u.rsplit(":", 1)[1].split("/")[0]) for u in (s3.endpoint, backend, url)]
        yield Team(s3, url)
    deadline = time.monotonic() + 10
    while any(listening(p) for p in ports) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in ports if listening(p)], "a test server outlived its fixture"


# --- the MLflow UI as users open it: a local server and a headless browser ------------------

#: Debian's chromium, headless, with nothing that reaches out of the machine (issue 55).
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync")


@contextlib.contextmanager
def local_ui(store: str, log: Path) -> Iterator[str]:
    """``mlflow server`` on the store ``store`` (what ``mlflow ui`` runs); yields its URL."""
    with _server(lambda port: ["server", "--backend-store-uri", store, "-h", HOST, "-p",
                               str(port)], dict(os.environ), log) as url:
        yield url


def browse(url: str, profile: Path, *, screenshot: Path | None = None,
           size: str = "1600,900") -> str:
    """The page at ``url`` as headless chromium renders it after its scripts ran (15 s of
    virtual time): its DOM, or with ``screenshot`` a PNG written there (returns "")."""
    chromium = shutil.which("chromium")
    if chromium is None:
        unavailable("chromium (a headless browser)", "apt-get install chromium")
    what = [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
    res = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                          f"--window-size={size}", "--virtual-time-budget=15000", *what, url],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout
