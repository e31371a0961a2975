"""The Go and Java clients as a new team gets them: installed only as their READMEs say, into a
fresh Go module and a fresh Maven project in a temporary directory OUTSIDE the checkout, each
program linking Triton's stubs too (generated here by protoc from tritonclient's own
descriptors, under Triton's file names), calling the live bridge with TLS, a client
certificate and a bearer token: an inference with a deadline, a server error and, through
Triton's stubs on the client's connection, metadata, an inference and an error.

Also: the Go client's own vet + tests on the lowest Go of its go.mod (`GOTOOLCHAIN` fetches
that toolchain from the Go module proxy), the Java client's unit tests against the lowest
protobuf-java it documents (3.25.5), and an offline rebuild of the Java client once set up.

Slow (minutes: two Maven builds, a Go toolchain download on a fresh machine, module
downloads): second tier.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Mapping
from pathlib import Path

import pytest
from client_helpers import TOKEN
from google.protobuf import descriptor_pb2
from support.bridge import BridgeProcess
from support.certs import Pki

pytestmark = pytest.mark.slow  # two Maven builds, a Go toolchain download, modules: minutes

REPO = Path(__file__).resolve().parents[2]
GO_CLIENT = REPO / "clients" / "go"
JAVA_CLIENT = REPO / "clients" / "java"
#: The consumer programs (copied into the fresh module/project): outside_checkout/.
PROGRAMS = Path(__file__).resolve().parent / "outside_checkout"
#: The lowest protobuf-java the Java client documents (clients/java/README.md).
PROTOBUF_JAVA_FLOOR = "3.25.5"


def run(cmd: list[str | Path], cwd: Path, env: Mapping[str, str] | None = None,
        timeout: float = 1200) -> str:
    """Run a command; fail with its output unless it exits 0; return stdout."""
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})
    assert done.returncode == 0, (f"{' '.join(map(str, cmd))} (in {cwd}) exited "
                                  f"{done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return done.stdout


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found on PATH: this test needs it (README: Go, Java + Maven)")
    return path


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("outside-checkout")
    assert REPO not in root.parents, f"{root} is inside the checkout"
    return root


@pytest.fixture(scope="module")
def triton_descriptors(outside: Path) -> Path:
    """Triton's grpc_service.proto and model_config.proto as tritonclient ships them (a
    FileDescriptorSet: file names `grpc_service.proto`, `model_config.proto`, package
    `inference`, no go/java options): the input of an independent generation."""
    from tritonclient.grpc import model_config_pb2, service_pb2

    files = descriptor_pb2.FileDescriptorSet()
    for module in (model_config_pb2, service_pb2):
        module.DESCRIPTOR.CopyToProto(files.file.add())
    assert [f.name for f in files.file] == ["model_config.proto", "grpc_service.proto"]
    path = outside / "triton.binpb"
    path.write_bytes(files.SerializeToString())
    return path


def secure_args(bridge: BridgeProcess, pki: Pki) -> list[str]:
    return [bridge.address, str(pki.ca_cert), str(pki.client_cert), str(pki.client_key), TOKEN]


# -- Go ------------------------------------------------------------------------------------------

def go_min_version() -> str:
    """The `go` directive of clients/go/go.mod (e.g. "1.22.0")."""
    text = (GO_CLIENT / "go.mod").read_text(encoding="utf-8")
    return re.search(r"^go (\S+)$", text, re.MULTILINE)[1]


def go_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The lowest toolchain, fetched from the Go proxy; no workspace from the environment."""
    return {"GOTOOLCHAIN": f"go{go_min_version()}", "GOWORK": "off",
            "GOFLAGS": "-mod=mod -buildvcs=false", **(extra or {})}


def go_plugins(outside: Path) -> Path:
    """protoc-gen-go and protoc-gen-go-grpc at the versions proto/generate.py pins."""
    spec = importlib.util.spec_from_file_location("jaxport_proto_generate",
                                                  REPO / "proto" / "generate.py")
    generate = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = generate  # its dataclasses look their module up
    spec.loader.exec_module(generate)
    bin_dir = outside / "go-bin"
    for module in generate.GO_PLUGINS.values():
        run([tool("go"), "install", module], cwd=outside,
            env={"GOBIN": str(bin_dir), "GOTOOLCHAIN": "local", "GOFLAGS": "-buildvcs=false"})
    return bin_dir


def test_go_client_builds_and_passes_its_tests_on_the_lowest_go() -> None:
    env = go_env({"GOFLAGS": "-buildvcs=false"})
    version = run([tool("go"), "version"], cwd=GO_CLIENT, env=env)
    assert f"go{go_min_version()} " in version, version
    run([tool("go"), "vet", "./..."], cwd=GO_CLIENT, env=env)
    run([tool("go"), "test", "-count=1", "./..."], cwd=GO_CLIENT, env=env)


def test_fresh_go_module_with_tritons_stubs(outside: Path, triton_descriptors: Path,
                                            secure_bridge: BridgeProcess, pki: Pki) -> None:
    go = tool("go")
    app = outside / "go-app"
    (app / "triton").mkdir(parents=True)
    env = go_env()
    run([go, "mod", "init", "example.com/consumer"], cwd=app, env=env)
    # Triton's stubs, generated independently from Triton's own file names and descriptors.
    plugins = go_plugins(outside)
    opt = ",".join(f"M{f}=example.com/consumer/triton;triton"
                   for f in ("grpc_service.proto", "model_config.proto"))
    run([sys.executable, "-m", "grpc_tools.protoc", f"--descriptor_set_in={triton_descriptors}",
         f"--plugin=protoc-gen-go={plugins / 'protoc-gen-go'}",
         f"--plugin=protoc-gen-go-grpc={plugins / 'protoc-gen-go-grpc'}",
         f"--go_out={opt},paths=source_relative:{app / 'triton'}",
         f"--go-grpc_out={opt},paths=source_relative:{app / 'triton'}",
         "grpc_service.proto", "model_config.proto"], cwd=app)
    shutil.copy2(PROGRAMS / "go" / "main.go", app / "main.go")
    # clients/go/README.md, "Until a version is published": the replace recipe.
    run([go, "mod", "edit", "-require=github.com/jaxport/jaxport/clients/go@v0.0.0",
         f"-replace=github.com/jaxport/jaxport/clients/go={GO_CLIENT}"], cwd=app, env=env)
    run([go, "mod", "tidy"], cwd=app, env=env)
    out = run([go, "run", ".", *secure_args(secure_bridge, pki)], cwd=app, env=env)
    lines = out.splitlines()
    assert lines[0] == "jaxport infer [1.5 -2 4.25]", out
    assert lines[1].startswith("jaxport error InvalidArgument ") and "'x'" in lines[1], out
    assert lines[2] == "triton metadata echo x [3]", out
    assert lines[3] == "triton infer y true", out
    assert lines[4] == "triton error NotFound", out

    # The workspace recipe, from another fresh module (its go.mod untouched).
    work = outside / "go-work-app"
    work.mkdir()
    run([go, "mod", "init", "example.com/workspace"], cwd=work, env=env)
    shutil.copy2(PROGRAMS / "go-work" / "main.go", work / "main.go")
    run([go, "work", "init", ".", str(GO_CLIENT)], cwd=work, env=env)
    out = run([go, "run", ".", *secure_args(secure_bridge, pki)], cwd=work,
              env={**env, "GOWORK": str(work / "go.work"), "GOFLAGS": "-buildvcs=false"})
    assert out.strip() == "workspace ready true <nil>", out


# -- Java ----------------------------------------------------------------------------------------

MVN = ["-B", "-q", "-Dstyle.color=never"]




def maven_repository() -> Path:
    """The local repository `mvn install` writes to (Maven's default; the tests use it as a
    user does)."""
    return Path(os.environ.get("MAVEN_REPO_LOCAL", Path.home() / ".m2" / "repository"))


def pinned(pattern: str) -> str:
    """A version the client's POM pins (a <name>value</name> property)."""
    return re.search(rf"<{pattern}>([^<]+)</{pattern}>",
                     (JAVA_CLIENT / "pom.xml").read_text(encoding="utf-8"))[1]


def executable(artifact: Path, outside: Path) -> Path:
    """A protoc/plugin binary from the local repository, made executable in a copy."""
    assert artifact.is_file(), f"{artifact} missing: the client's build downloads it"
    copy = outside / "bin" / artifact.name
    copy.parent.mkdir(exist_ok=True)
    shutil.copy2(artifact, copy)
    copy.chmod(0o755)
    return copy


@pytest.fixture(scope="module")
def java_client_installed(outside: Path) -> Path:
    """clients/java copied alone (the files git tracks) and installed as its README says: one
    online `mvn clean install` (here with the unit tests at the lowest protobuf-java), then an
    offline rebuild."""
    mvn = tool("mvn")
    copy = outside / "jaxport-client"
    files = run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "."],
                cwd=JAVA_CLIENT).split()
    for rel in files:
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(JAVA_CLIENT / rel, copy / rel)
    # Nothing of the checkout around it (the POM's conformance profile looks for these):
    assert not (copy.parent.parent / "tests" / "conformance" / "cases").exists()
    run([mvn, *MVN, "clean", "install", f"-Dprotobuf-java.version={PROTOBUF_JAVA_FLOOR}"], cwd=copy)
    reports = "".join(p.read_text() for p in (copy / "target" / "surefire-reports").glob("*.txt"))
    assert "InProcessClientTest" in reports and "Failures: 0, Errors: 0" in reports, reports
    listed = run([mvn, *MVN, "dependency:list", "-DincludeGroupIds=com.google.protobuf",
                  f"-Dprotobuf-java.version={PROTOBUF_JAVA_FLOOR}", "-DoutputFile=/dev/stdout"],
                 cwd=copy)
    assert f"protobuf-java:jar:{PROTOBUF_JAVA_FLOOR}:" in listed, listed
    run([mvn, *MVN, "-o", "clean", "install", "-DskipTests"], cwd=copy)  # every plugin pinned
    jars = sorted(p.name for p in (copy / "target").glob("jaxport-client-*.jar"))
    assert jars == ["jaxport-client-0.1.0-javadoc.jar", "jaxport-client-0.1.0-sources.jar",
                    "jaxport-client-0.1.0.jar"], jars
    with zipfile.ZipFile(copy / "target" / "jaxport-client-0.1.0.jar") as jar:
        listing = jar.namelist()
    assert "dev/jaxport/client/InferenceClient.class" in listing
    assert not [n for n in listing if "examples" in n or "conformance" in n], listing
    return copy


def test_fresh_maven_project_with_tritons_stubs(outside: Path, triton_descriptors: Path,
                                                java_client_installed: Path,
                                                secure_bridge: BridgeProcess, pki: Pki) -> None:
    mvn = tool("mvn")
    app = outside / "java-app"
    sources = app / "src" / "main" / "java"
    sources.mkdir(parents=True)
    pom = (PROGRAMS / "java" / "pom.xml").read_text(encoding="utf-8")
    (app / "pom.xml").write_text(pom.replace("@PROTOBUF@", PROTOBUF_JAVA_FLOOR), encoding="utf-8")
    shutil.copy2(PROGRAMS / "java" / "Main.java", sources / "Main.java")
    # Triton's Java stubs, generated independently (protoc and grpc-java's generator as the
    # client's build pinned and downloaded them) from Triton's descriptors.
    repo = maven_repository()
    protoc_version, codegen = pinned("protoc.version"), pinned("grpc.codegen.version")
    protoc = executable(repo / f"com/google/protobuf/protoc/{protoc_version}/"
                        f"protoc-{protoc_version}-linux-x86_64.exe", outside)
    grpc_java = executable(repo / f"io/grpc/protoc-gen-grpc-java/{codegen}/"
                           f"protoc-gen-grpc-java-{codegen}-linux-x86_64.exe", outside)
    run([protoc, f"--descriptor_set_in={triton_descriptors}", f"--java_out={sources}",
         f"--plugin=protoc-gen-grpc-java={grpc_java}", f"--grpc-java_out={sources}",
         "grpc_service.proto", "model_config.proto"], cwd=app)
    assert (sources / "inference" / "GRPCInferenceServiceGrpc.java").is_file()

    listed = run([mvn, *MVN, "dependency:list", "-DincludeGroupIds=com.google.protobuf",
                  "-DoutputFile=/dev/stdout"], cwd=app)
    assert f"protobuf-java:jar:{PROTOBUF_JAVA_FLOOR}:" in listed, listed
    out = run([mvn, *MVN, "compile", "exec:exec",
               f"-Dapp.args={' '.join(secure_args(secure_bridge, pki))}"], cwd=app)
    # Maven's console keeps colour resets around the program's lines even when told not to.
    lines = [s for s in (re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in out.splitlines())
             if s]
    assert lines[0] == "jaxport infer [1.5, -2.0, 4.25]", out
    assert lines[1].startswith("jaxport error INVALID_ARGUMENT false ") and "'x'" in lines[1], out
    assert lines[2] == "client error INVALID_ARGUMENT true", out
    assert lines[3] == "stream s1 s2 NOT_FOUND false", out
    assert lines[4] == "triton metadata echo x [3]", out
    assert lines[5] == "triton error NOT_FOUND", out
