"""A stage worker for the tests: `python -m pipeline.<stage>` in a forked child of one warm
interpreter, so torch, MLflow and the stage modules are imported once per test session
instead of once per stage (2-3 s each on 2 cores; a tiny `dvc repro` runs seven stages).

``python -m tests.programs.stage_server SOCKET`` imports everything a stage needs, then
serves requests on the UNIX socket SOCKET one at a time until it is killed. A request comes
from the ``python`` shim (``shim_source``) that the tests put first on PATH for `dvc`: its
argv, working directory and environment as JSON, and its standard input, output and error
as file descriptors. The server forks; the child takes the cwd, environment and descriptors,
runs the module as ``python -m`` would, and exits; the server sends back its exit status.

Only the stage modules run here. Anything else (another module, ``-c``, a repository copy
whose code differs from the code imported here) gets ``fallback`` and the shim execs the
real interpreter, as do the tests whose subject is a process boundary (SIGKILL, torchrun's
ranks; those start ``sys.executable`` themselves). Nothing here computes with torch before
forking, so the child's OpenMP starts fresh (the same rule as resume_worker.py).
"""

from __future__ import annotations

import array
import atexit
import hashlib
import importlib
import json
import os
import runpy
import socket
import struct
import sys
from pathlib import Path

#: The pipeline modules served: the stages, the audit and its training replay, and the
#: user commands the tests run (tracking's replay, predict, compare, copy_run).
STAGES = ("validate", "fetch", "prepare", "tokenizer", "baseline", "train", "decode",
          "evaluate", "audit", "audit.replay", "tracking", "predict", "compare", "copy_run")
#: Read by torch when it is imported (the replay's CPU kernels): a request that sets another
#: value than the server's needs a fresh interpreter.
IMPORT_TIME_ENV = ("ATEN_CPU_CAPABILITY", "MKL_CBWR")
#: Task pieces the stages load by name (seqcore.tasks), what the audit imports when it runs,
#: and what the stages import lazily: a torch optimizer's constructor imports torch._dynamo
#: (sympy, the Inductor's config: 1.1 s), evaluate MLflow's SQL store and ruamel. Imported
#: ahead like the stages (a child that imports a module pays for it on every fork).
WARM = ("torch", "torch._dynamo", "mlflow", "mlflow.store.tracking.sqlalchemy_store",
        "sqlalchemy.dialects.sqlite", "alembic.command", "ruamel.yaml", "sentencepiece",
        "sacrebleu", "matplotlib.backends.backend_agg", "dvc.repo",
        "seqcore.tasks.parallel.decode", "seqcore.tasks.parallel.evaluate",
        "seqcore.tasks.lm.decode", "seqcore.tasks.lm.evaluate", "pipeline.audit.cli")
CODE = ("pipeline", "seqcore")
REPO = Path(__file__).resolve().parents[2]


def code_digest(root: Path) -> str | None:
    """sha256 over the stage code (pipeline/, seqcore/) under ``root``; None without it."""
    files = sorted(p for d in CODE for p in (root / d).rglob("*.py")
                   if "__pycache__" not in p.parts)
    if not files:
        return None
    h = hashlib.sha256()
    for path in files:
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def shim_source(real_python: str, address: str) -> str:
    """The ``python`` a test puts first on PATH: it asks the server at ``address`` to run
    ``-m pipeline.<stage>``, and execs ``real_python`` for anything else or on refusal."""
    return f'''#!{real_python} -S
import array, json, os, socket, struct, sys
REAL = {real_python!r}
argv = sys.argv[1:]
module = argv[1:] if argv[:1] == ["-P"] else argv  # -P: the audit's replay
if len(module) >= 2 and module[0] == "-m" and module[1].startswith("pipeline."):
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect({address!r})
        body = json.dumps({{"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}}).encode()
        s.sendmsg([struct.pack("!I", len(body)) + body],
                  [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
        if s.recv(1) == b"R":
            status = b""
            while len(status) < 4:
                chunk = s.recv(4 - len(status))
                if not chunk:
                    sys.exit("stage server: connection lost")
                status += chunk
            os._exit(struct.unpack("!i", status)[0])
    except OSError:
        pass
os.execv(REAL, [REAL, *argv])
'''


def _module(argv: list[str]) -> str:
    return argv[argv.index("-m") + 1]


def runs_served_code(request: dict, digest: str | None) -> bool:
    """Whether ``python ARGV`` in the request's folder and environment would import the
    code this server imported: from the folder (``python -m`` puts it first on sys.path), or
    from PYTHONPATH where the folder holds no code or ``-P`` leaves it out."""
    argv, env = request["argv"], request["env"]
    if _module(argv).removeprefix("pipeline.") not in STAGES or any(
            env.get(name) != os.environ.get(name) for name in IMPORT_TIME_ENV):
        return False
    here = None if argv[0] == "-P" else code_digest(Path(request["cwd"]))
    if here is not None:
        return here == digest
    first = (env.get("PYTHONPATH") or "").split(os.pathsep)[0]
    return bool(first) and Path(first).resolve() == REPO


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    fds = array.array("i")
    data, ancillary, _, _ = conn.recvmsg(1 << 20, socket.CMSG_LEN(3 * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    size = struct.unpack("!I", data[:4])[0]
    body = data[4:]
    while len(body) < size:
        body += conn.recv(size - len(body))
    return json.loads(body), list(fds)


def _run_child(request: dict, fds: list[int]) -> None:
    """In the forked child: become the requested `python -m` process, then exit."""
    code = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        argv = request["argv"]
        at = argv.index("-m")
        module = argv[at + 1]
        sys.argv = [module, *argv[at + 2:]]
        # run as __main__ from a fresh import, as `python -m` does (runpy warns otherwise)
        sys.modules.pop(module, None)
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as stop:
            if stop.code is None or isinstance(stop.code, int):
                code = stop.code or 0
            else:
                print(stop.code, file=sys.stderr)
        atexit._run_exitfuncs()  # what the interpreter does at a normal exit
    except BaseException:  # noqa: BLE001 (an uncaught error: status 1, as python)
        sys.excepthook(*sys.exc_info())  # the stage's own hook: one line for a OneLineError
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001,S110 (a closed pipe: nothing left to say)
                pass
        os._exit(code)


def warm_caches() -> None:
    """What every evaluate computes once per process, computed here before forking: the
    installed package set of the producing environment (0.4 s) and MLflow's map from modules
    to packages, which logging the registered model builds to check the model's requirements
    (``importlib.metadata.packages_distributions``: 1.9 s per forked evaluate without it)."""
    from mlflow.utils.requirements_utils import _init_modules_to_packages_map  # noqa: PLC0415

    from seqcore.environment import producing_environment  # noqa: PLC0415

    producing_environment()
    _init_modules_to_packages_map()


def serve(address: str) -> None:
    for name in (*WARM, *(f"pipeline.{s}" for s in STAGES)):
        importlib.import_module(name)
    warm_caches()
    digest = code_digest(REPO)
    server = socket.socket(socket.AF_UNIX)
    server.bind(address)
    server.listen(4)
    server.settimeout(5)
    parent = os.getppid()
    print("ready", flush=True)
    while os.getppid() == parent:  # a test session that died leaves no server behind
        try:
            conn, _ = server.accept()
        except TimeoutError:
            continue
        conn.settimeout(None)
        with conn:
            request, fds = _receive(conn)
            if not runs_served_code(request, digest):
                conn.sendall(b"F")
                for fd in fds:
                    os.close(fd)
                continue
            conn.sendall(b"R")
            print(f"served {_module(request['argv'])} in {request['cwd']}", file=sys.stderr,
                  flush=True)
            pid = os.fork()
            if pid == 0:
                server.close()
                conn.close()
                _run_child(request, fds)
            for fd in fds:
                os.close(fd)
            _, status = os.waitpid(pid, 0)
            code = os.waitstatus_to_exitcode(status)
            conn.sendall(struct.pack("!i", code if code >= 0 else 128 - code))


if __name__ == "__main__":
    serve(sys.argv[1])
