"""podman for the image tests (test_images.py): an engine configured for this machine, base
images made from Debian packages, image builds, containers started and stopped by name.

This machine (measured): Debian's podman 4.3.1 runs containers with `runc` (crun fails on the
hybrid cgroups here), `cgroup_manager = "cgroupfs"` and `default_ulimits = []`, from a
CONTAINERS_CONF file of our own; its storage lives in build/containers (kept between runs:
bases and build layers are reused). No image registry is reachable, so the bases the
Containerfiles take as build arguments are made here: `mmdebstrap` root file systems imported
with `podman import`, and an image holding this machine's Go at /usr/local/go (the official Go
image's layout). TLS from the build's RUN steps (pip, the Go module proxy) goes through this
machine's CA bundle, mounted for the build only (nothing of it reaches the image).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STATE = REPO / "build" / "containers"
SUITE = "trixie"
#: A Python base like docker.io/library/python:3.13-slim: Debian's Python 3.13, venv, CAs.
PYTHON_BASE = ("apt", ("python3", "python3-venv", "ca-certificates"))
#: A C/C++ runtime base like gcr.io/distroless/cc-debian12: glibc, libgcc, libstdc++, and
#: base-files (the merged-/usr links: /lib64/ld-linux-x86-64.so.2 is every binary's loader).
NATIVE_BASE = ("extract", ("base-files", "libc6", "libgcc-s1", "libstdc++6"))


class PodmanError(RuntimeError):
    """A podman step failed; the message carries its output."""


def environment() -> dict[str, str]:
    """This process's environment plus the podman configuration files (written once)."""
    STATE.mkdir(parents=True, exist_ok=True)
    conf = STATE / "containers.conf"
    conf.write_text('[containers]\ndefault_ulimits = []\n[engine]\ncgroup_manager = "cgroupfs"\n'
                    'events_logger = "file"\nruntime = "runc"\n')
    storage = STATE / "storage.conf"
    storage.write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{STATE / "storage"}"\n'
                       f'runroot = "{STATE / "run"}"\n')
    return {**os.environ, "CONTAINERS_CONF": str(conf), "CONTAINERS_STORAGE_CONF": str(storage)}


def podman(*args: str | Path, timeout: float = 600, check: bool = True,
           stdin: int | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["podman", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=environment(), stdin=stdin)
    if check and proc.returncode != 0:
        raise PodmanError(f"podman {' '.join(map(str, args))[:300]} failed "
                          f"({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return proc


def ensure_tools() -> None:
    """`make image-tools`: podman, runc, mmdebstrap (apt, when missing and root)."""
    done = subprocess.run(["make", "-s", "-C", REPO, "image-tools"], capture_output=True,
                          text=True, timeout=900)
    if done.returncode != 0:
        raise PodmanError(done.stdout + done.stderr)


def image_exists(tag: str) -> bool:
    return podman("image", "exists", tag, check=False).returncode == 0


def debian_base(name: str, spec: tuple[str, tuple[str, ...]]) -> str:
    """A base image of Debian `SUITE` with `spec`'s packages (mmdebstrap variant, packages),
    built once; its tag names its content."""
    variant, packages = spec
    key = hashlib.sha256(json.dumps([SUITE, variant, packages]).encode()).hexdigest()[:12]
    tag = f"localhost/jaxport-test/{name}:{key}"
    if image_exists(tag):
        return tag
    with tempfile.TemporaryDirectory(prefix="jaxport-rootfs-", dir=STATE) as tmp:
        rootfs = Path(tmp) / "rootfs.tar"
        done = subprocess.run(["mmdebstrap", f"--variant={variant}",
                               f"--include={','.join(packages)}", SUITE, str(rootfs)],
                              capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise PodmanError(f"mmdebstrap {SUITE} ({variant}: {', '.join(packages)}) failed:\n"
                              f"{done.stderr[-3000:]}")
        podman("import", rootfs, tag)
    return tag


def go_image() -> str:
    """An image holding this machine's Go at /usr/local/go (the official image's layout)."""
    go = shutil.which("go")
    if go is None:
        raise PodmanError("the images build the front with Go >= 1.26: go is not on PATH")
    goroot, version = subprocess.run([go, "env", "GOROOT", "GOVERSION"], capture_output=True,
                                     text=True, check=True).stdout.split()
    tag = f"localhost/jaxport-test/go:{version}"
    if image_exists(tag):
        return tag
    tar = subprocess.Popen(["tar", "-C", goroot, "--transform", "s,^\\.,usr/local/go,",
                            "-cf", "-", "."], stdout=subprocess.PIPE)
    try:
        podman("import", "-", tag, stdin=tar.stdout.fileno() if tar.stdout else None)
    finally:
        tar.wait()
    return tag


def ca_mounts() -> list[str]:
    """The build's view of this machine's trusted CAs: the bundle, and a pip configuration
    pointing pip at it (pip trusts only its own bundle otherwise)."""
    bundle = Path(os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE")
                  or "/etc/ssl/certs/ca-certificates.crt")
    if not bundle.is_file():
        return []
    pip_conf = STATE / "pip.conf"
    pip_conf.write_text("[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n")
    return ["-v", f"{bundle}:/etc/ssl/certs/ca-certificates.crt:ro",
            "-v", f"{pip_conf}:/etc/pip.conf:ro"]


def build(containerfile: str, tag: str, build_args: dict[str, str]) -> float:
    """`podman build` of `containerfile` (relative to the repository) from the repository
    root; the seconds it took."""
    args = [f"--build-arg={k}={v}" for k, v in build_args.items()]
    start = time.perf_counter()
    podman("build", "--network", "host", *ca_mounts(), "-f", REPO / containerfile, *args,
           "-t", tag, REPO, timeout=3600)
    seconds = time.perf_counter() - start
    # The images a rebuild left untagged (the previous build's layers): dropped, so
    # build/containers stays bounded; the Go, zig and pip caches are cache mounts, kept.
    podman("image", "prune", "-f")
    return seconds


def image_size(tag: str) -> int:
    return int(podman("image", "inspect", "--format", "{{.Size}}", tag).stdout.strip())


class Container:
    """One detached container of `image` on the host network, named by this test, its
    command's `--port-file` in a directory of ours; stopped by name (SIGTERM, then the
    engine's timeout)."""

    def __init__(self, image: str, args: Sequence[str], mounts: dict[Path, str],
                 work: Path, entrypoint: str | None = None) -> None:
        self.image, self.args, self.mounts, self.work = image, list(args), mounts, work
        self.entrypoint = entrypoint
        self.name = f"jaxport-test-{uuid.uuid4().hex[:12]}"
        self.ports_dir = work / "ports"
        self.ports: dict[str, int] = {}
        self.exit_code: int | None = None

    def start(self, timeout: float = 300) -> None:
        self.ports_dir.mkdir(parents=True, exist_ok=True)
        self.ports_dir.chmod(0o777)  # the container's non-root user writes the port file
        volumes = [f"-v={src}:{dst}:ro" for src, dst in self.mounts.items()]
        volumes.append(f"-v={self.ports_dir}:/run/ports")
        entry = [f"--entrypoint={self.entrypoint}"] if self.entrypoint else []
        podman("run", "-d", "--name", self.name, "--network", "host", *volumes, *entry,
               self.image, *self.args, "--port-file=/run/ports/ports.json")
        port_file = self.ports_dir / "ports.json"
        deadline = time.monotonic() + timeout
        try:
            while not port_file.exists():  # written once the server listens
                if not self.running():
                    raise PodmanError(f"container {self.name} exited before listening:\n"
                                      f"{self.logs()[-6000:]}")
                if time.monotonic() > deadline:
                    raise PodmanError(f"container {self.name}: no port file after {timeout} s:"
                                      f"\n{self.logs()[-6000:]}")
                time.sleep(0.2)
            self.ports = json.loads(port_file.read_text())
        except BaseException:
            self.stop()
            raise

    def running(self) -> bool:
        state = podman("inspect", "--format", "{{.State.Running}}", self.name, check=False)
        return state.stdout.strip() == "true"

    def host_pid(self) -> int:
        return int(podman("inspect", "--format", "{{.State.Pid}}", self.name).stdout.strip())

    def logs(self) -> str:
        done = podman("logs", self.name, check=False)
        return done.stdout + done.stderr

    def stop(self) -> int:
        """SIGTERM (podman stop, 30 s grace), the exit code; the container removed."""
        podman("stop", "-t", "30", self.name, check=False, timeout=120)
        code = podman("inspect", "--format", "{{.State.ExitCode}}", self.name, check=False)
        podman("rm", "-f", self.name, check=False)
        return int(code.stdout.strip() or -1)

    def __enter__(self) -> Container:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.exit_code = self.stop()
