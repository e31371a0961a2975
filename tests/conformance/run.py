#!/usr/bin/env python3
"""`make conformance`: export the suite models, start real servers, run the Python, Go and Java
runners over every case, stop each server by PID; exit 1 if any runner or case failed.

    .venv/bin/python tests/conformance/run.py [--tier fast|all] [--only python,go,java]
                                              [--keep] [--front-workers N]

Each server is `jaxport serve` (the native front, with `--front-workers` Python execution
workers for the models it leaves to them). The programs are the ones tests/tiers.py built for
the run and handed over (tests/support/binaries.py: the front, the Go runner and example, the
Java classes and their classpath); run alone, this builds them first the same way. Nothing is
built per configuration: the Go runner is a binary, the Java runner `java -cp` of the classes
one Maven call compiled (the Java client's JUnit tests ran in that call; `go vet` and the Go
unit tests are tests/tiers.py's go phase). The suite models come from the shared export cache
(tests/support/exports.py). Four server configurations:

1. the shipped one (no engine flag): the front's native engine executes every model it can
   through the PJRT C API (docs/native-engine.md), the workers the rest; every runner (Python
   sync and asyncio, Go, Java, the Python REST runner) over every case, plus each language's
   example;
2. `--pjrt-plugin none`: every model on the Python workers (`--engine exported`), the engine
   the native one must agree with;
3. `--engine pjrt` on the workers (the raw `model.mlirbc` bound from the manifest by jaxlib);
4. mutual TLS (a CA, server and client certificates made for the run) with a bearer token,
   against a server that requires both; then each runner runs once more WITHOUT a client
   certificate and must be refused (its one case fails with UNAVAILABLE).

`--tier all` (`make test-all`) runs every runner over every case against 2 to 4 as well.
`--tier fast` (`make test`, the default) runs one runner (Python, gRPC) over every case against
2 to 4, and the refusal without a client certificate in every language.

Go and Java toolchains are required: when one is missing this says which and fails (it never
skips a language silently).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
GO_DIR = REPO / "clients" / "go"
JAVA_DIR = REPO / "clients" / "java"
PY_EXAMPLE = REPO / "clients" / "python" / "examples" / "basic.py"
CASES = HERE / "cases"
LANGUAGES = ("python", "go", "java")
#: Longest one step may take: the first Maven run on a fresh machine downloads its plugins.
STEP_TIMEOUT_S = 900.0
ANSI = re.compile(r"\x1b\[[0-9;]*m")
SUMMARY = re.compile(r"^conformance ([\w-]+): (\d+) passed, (\d+) failed", re.MULTILINE)
#: The case each runner runs without a client certificate, and how its refusal must read
#: (Python/Java print the status name, Go the grpc-go error text "code = Unavailable").
REFUSAL_CASE = "health_server_live"
REFUSED = re.compile(rf"^FAIL {REFUSAL_CASE}: .*\b(UNAVAILABLE|code = Unavailable)\b",
                     re.MULTILINE)

sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

#: Cases jaxport's server in main answers against the suite's rule until a server change the
#: suite asks for is merged (docs/conformance-report.md, "jaxport and Triton"): case -> (a
#: substring of the FAIL line jaxport gives today, the change). The runners judging jaxport get
#: every other case (`suite_cases`); `check_pending` runs these alone and requires that they
#: still fail as documented. Once the change lands a pending case passes and run.py fails,
#: saying to delete its entry here: the lead's check after the merge.
PENDING_SERVER_CHANGES: dict[str, tuple[str, str]] = {}
_SUITE_CASES: list[Path] = []


def suite_cases() -> Path:
    """The case directory the runners judging jaxport read: cases/ without
    PENDING_SERVER_CHANGES (a copy, with features.json beside it, made once per process and
    removed at exit); cases/ itself when nothing is pending."""
    if not PENDING_SERVER_CHANGES:
        return CASES
    if not _SUITE_CASES:
        root = Path(tempfile.mkdtemp(prefix="jaxport-suite-cases-"))
        atexit.register(shutil.rmtree, root, True)
        shutil.copytree(CASES, root / "cases", ignore=lambda _, names: [
            n for n in names if n.removesuffix(".json") in PENDING_SERVER_CHANGES])
        shutil.copy2(HERE / "features.json", root / "features.json")
        _SUITE_CASES.append(root / "cases")
    return _SUITE_CASES[0]


def check_pending(url: str, failed_steps: list[str], env: dict[str, str | None] | None = None
                  ) -> None:
    """Each pending case alone (Python runner, every case file): it must still FAIL as
    documented; a pass means the server change landed (delete the entry), another failure is
    a regression."""
    for name, (today, change) in PENDING_SERVER_CHANGES.items():
        log: list[str] = []
        run_step(f"pending server change ({name})", [
            sys.executable, str(HERE / "runner.py"), "--url", url, "--cases", str(CASES),
            "--run", name], REPO, log, env)
        out = "".join(log)
        if f"PASS {name}" in out:
            failed_steps.append(f"{name} now passes on jaxport: the server change landed "
                                f"({change}); delete it from PENDING_SERVER_CHANGES in "
                                "tests/conformance/run.py")
        elif not any(line.startswith(f"FAIL {name}: ") and today in line
                     for line in out.splitlines()):
            failed_steps.append(f"{name}: expected the documented failure ({today!r}) until "
                                f"{change}; got: {out.strip()[-400:]}")
        else:
            print(f"conformance: {name} fails as documented until the server change lands: "
                  f"{change}", flush=True)


def missing_toolchains(languages: list[str]) -> list[str]:
    """One line per required tool that is not on PATH, saying how to get it."""
    problems = []
    if "go" in languages and shutil.which("go") is None:
        problems.append("Go toolchain not found (`go` on PATH): install Go >= 1.26 to run the "
                        "Go runner")
    if "java" in languages:
        if shutil.which("java") is None:
            problems.append("Java not found (`java` on PATH): install a JDK 17+ to run the "
                            "Java runner")
        if shutil.which("mvn") is None:
            problems.append("Maven not found (`mvn` on PATH): install Maven 3.8+ to run the "
                            "Java runner")
    return problems


def run_step(label: str, cmd: list[str], cwd: Path, log: list[str],
             env: dict[str, str | None] | None = None) -> int:
    """Run one command, echoing its output live and keeping it for the summary. `env` overrides
    the inherited environment; a None value removes that variable.

    The step runs in its own process group, which is killed (by that group's id) if it
    outlives STEP_TIMEOUT_S, so a hung runner cannot hold `make test` forever.
    """
    print(f"\n=== {label}: {' '.join(cmd)}", flush=True)
    start = time.perf_counter()
    merged = {**os.environ, "MAVEN_OPTS": os.environ.get("MAVEN_OPTS", "-Xmx1g"), **(env or {})}
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True,
                            env={k: v for k, v in merged.items() if v is not None})
    timed_out = threading.Event()

    def kill_group() -> None:
        timed_out.set()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)

    watchdog = threading.Timer(STEP_TIMEOUT_S, kill_group)
    watchdog.daemon = True  # an interrupted run (Ctrl-C) must not wait for it
    watchdog.start()
    assert proc.stdout is not None
    for line in proc.stdout:
        line = ANSI.sub("", line)  # Maven 3.8 emits colour resets even in batch mode
        if not line.strip():
            continue
        print(line, end="", flush=True)
        log.append(line)
    rc = proc.wait()
    watchdog.cancel()
    if timed_out.is_set():
        print(f"=== {label}: killed after {STEP_TIMEOUT_S:.0f} s (timeout)", flush=True)
        return rc or 1
    print(f"=== {label}: exit {rc} in {time.perf_counter() - start:.1f} s", flush=True)
    return rc


def java_command(main_class: str, *args: str) -> list[str]:
    """`java -cp CLASSPATH MAIN ARGS` over the classes the build compiled (its classpath file)."""
    from tests.support.binaries import path

    classpath = path("java-classpath").read_text().strip()
    return ["java", "-cp", classpath, main_class, *args]


def language_steps(lang: str, url: str, full: bool) -> list[tuple[str, list[str], Path]]:
    """The commands of one language: its conformance runner over every case (whose summary line
    ends the step's output), with `full` also its example (and Python's asyncio runner)."""
    from tests.support.binaries import path

    cases = str(suite_cases())
    if lang == "python":
        runner = ("python runner", [sys.executable, str(HERE / "runner.py"), "--url", url,
                                    "--cases", cases], REPO)
        if not full:
            return [runner]
        # The same cases through AsyncInferenceClient (its summary is "python-async").
        return [runner, ("python async runner", [*runner[1], "--async"], REPO),
                ("python example", [sys.executable, str(PY_EXAMPLE), url, "cf_multi"], REPO)]
    if lang == "go":
        runner = ("go runner", [str(path("go-conformance")), "--url", url, "--cases", cases],
                  GO_DIR)
        if not full:
            return [runner]
        return [runner, ("go example", [str(path("go-example")), "--url", url,
                                        "--model", "cf_multi"], GO_DIR)]
    runner = ("java runner", java_command("dev.jaxport.conformance.ConformanceRunner",
                                          "--url", url, "--cases", cases), JAVA_DIR)
    if not full:
        return [runner]
    return [runner, ("java example", java_command("dev.jaxport.client.examples.InferExample",
                                                  url, "cf_multi"), JAVA_DIR)]


def refusal_step(lang: str, url: str) -> tuple[str, list[str], Path]:
    """The runner of one language over REFUSAL_CASE only (run without a client certificate)."""
    from tests.support.binaries import path

    run = ["--url", url, "--cases", str(suite_cases()), "--run", REFUSAL_CASE]
    if lang == "python":
        return ("python runner", [sys.executable, str(HERE / "runner.py"), *run], REPO)
    if lang == "go":
        return ("go runner", [str(path("go-conformance")), *run], GO_DIR)
    return ("java runner", java_command("dev.jaxport.conformance.ConformanceRunner", *run),
            JAVA_DIR)


def check_refused(lang: str, rc: int, output: str) -> str | None:
    """None if the runner was refused as it must be, else what went wrong. It cannot pass
    vacuously: exactly one case must have run and failed, with the status UNAVAILABLE."""
    found = SUMMARY.findall(output)
    if rc == 0:
        return f"{lang} without a client certificate: runner exited 0 (mTLS not enforced?)"
    if not found or (found[-1][1], found[-1][2]) != ("0", "1"):
        return f"{lang} without a client certificate: expected '0 passed, 1 failed', got {found}"
    if not REFUSED.search(output):
        return f"{lang} without a client certificate: {REFUSAL_CASE} did not fail UNAVAILABLE"
    return None


def run_against_bridge(name: str, bridge_args: list[str], repository: Path, work: Path,
                       languages: list[str], full: bool,
                       results: dict[str, tuple[int, int]], failed_steps: list[str],
                       env: dict[str, str | None] | None = None,
                       ca_pem: Path | None = None,
                       client_pair: tuple[Path, Path] | None = None,
                       pending: bool = False, refusals: list[str] | None = None) -> None:
    """Serve `repository` with one configuration of `jaxport serve` and run each language
    (and, with `full`, the REST runner) against it; `full` as for language_steps. With
    `client_pair` (mutual TLS), each language then runs once without it and must be refused."""
    from tests.support.bridge import BridgeProcess

    bridge = BridgeProcess(repository, *bridge_args,
                           workdir=work / f"bridge-{re.sub(r'[^a-z0-9]+', '-', name)}")
    try:
        try:
            credentials = None
            if ca_pem is not None:
                import grpc

                cert, key = client_pair or (None, None)
                credentials = grpc.ssl_channel_credentials(
                    root_certificates=ca_pem.read_bytes(),
                    private_key=key.read_bytes() if key else None,
                    certificate_chain=cert.read_bytes() if cert else None)
            bridge.start(credentials=credentials)
        except Exception as exc:  # reported as a failed step, the other bridges still run
            print(f"conformance: bridge ({name}) did not start: {exc}", flush=True)
            failed_steps.append(f"bridge ({name}) did not start")
            return
        print(f"\nconformance: bridge ({name}) pid {bridge.pid} serving on "
              f"{bridge.address}", flush=True)
        for lang in languages:
            key = f"{lang} ({name})"
            for label, cmd, cwd in language_steps(lang, bridge.address, full):
                log: list[str] = []
                rc = run_step(f"{label} ({name})", cmd, cwd, log, env)
                found = SUMMARY.findall("".join(log))
                if found:  # "python-async" is counted beside "python"
                    results[key.replace(lang, found[-1][0], 1)] = (int(found[-1][1]),
                                                                   int(found[-1][2]))
                if rc != 0:
                    failed_steps.append(f"{label} ({name})")
                    break
            if key not in results:
                failed_steps.append(f"{key}: runner produced no summary")
        if "python" in languages and full:
            run_rest(name, bridge, results, failed_steps, env)
        if pending:
            check_pending(bridge.address, failed_steps, env)
        if client_pair is not None:
            no_cert = {**(env or {}), "JAXPORT_CONFORMANCE_CERT": None,
                       "JAXPORT_CONFORMANCE_KEY": None}
            for lang in refusals or languages:
                label, cmd, cwd = refusal_step(lang, bridge.address)
                log = []
                rc = run_step(f"{label} ({name}, no client certificate: must be refused)",
                              cmd, cwd, log, no_cert)
                problem = check_refused(lang, rc, "".join(log))
                results[f"{lang} ({name}, no client certificate refused)"] = (
                    (0, 1) if problem else (1, 0))
                if problem:
                    failed_steps.append(problem)
        if not bridge.alive():
            failed_steps.append(f"bridge ({name}) died during the run")
    finally:
        rc = bridge.stop()
        print(f"conformance: bridge ({name}) stopped by pid (exit {rc})", flush=True)


def run_rest(name: str, bridge, results: dict[str, tuple[int, int]],
             failed_steps: list[str], env: dict[str, str | None] | None) -> None:
    """The Python REST runner against the front's --http-port (the same TLS/token settings
    come through JAXPORT_CONFORMANCE_* in `env`)."""
    ports = json.loads(bridge.port_file.read_text())
    if int(ports.get("http_port", -1)) < 0:
        failed_steps.append(f"python-rest ({name}): the front reported no http_port")
        return
    label = f"python REST runner ({name})"
    log: list[str] = []
    rc = run_step(label, [sys.executable, str(HERE / "rest_runner.py"), "--url",
                          f"127.0.0.1:{ports['http_port']}", "--cases", str(suite_cases())],
                  REPO, log, env)
    found = SUMMARY.findall("".join(log))
    if found:
        results[f"{found[-1][0]} ({name})"] = (int(found[-1][1]), int(found[-1][2]))
    else:
        failed_steps.append(f"python-rest ({name}): runner produced no summary")
    if rc != 0:
        failed_steps.append(label)


def front_flags(workers: int) -> list[str]:
    """The `jaxport serve` flags every configuration starts with: the handed-over front (the
    tree under test's) and its workers. --system-shared-memory: the suite's REST shared-memory
    case (rest_system_shm_infer) needs the extension on; the bridge then claims it
    (ServerMetadata.extensions)."""
    from tests.support.binaries import path

    return ["--front-binary", str(path("front")), "--workers", str(workers),
            "--system-shared-memory"]


def handed_over(tier: str) -> list[str]:
    """Set the programs' variables, building them first when this runs outside
    tests/tiers.py (make conformance); the build failures, one line each."""
    from tests.support import binaries

    wanted = binaries.environment(tier)
    if all(os.environ.get(k) == v and Path(v).exists() for k, v in wanted.items()):
        return []
    failures = binaries.build_all(tier, log=lambda line: print(line, flush=True))
    os.environ.update(wanted)
    return failures


def run_sequence(tier: str, front: list[str], repository: Path, work: Path,
                 languages: list[str], results: dict[str, tuple[int, int]],
                 failed_steps: list[str]) -> None:
    """The shipped configuration (every language over every case, and the examples), then the
    workers alone, engine pjrt, and mTLS + token with the refusal without a client certificate
    in every language; those three with every runner (tier all) or the Python one (tier fast)
    over every case."""
    others = languages if tier == "all" else [x for x in languages if x == "python"]
    run_against_bridge("shipped (native engine)", front, repository, work,
                       languages, True, results, failed_steps, pending=True)
    run_against_bridge("workers only", ["--pjrt-plugin", "none", *front], repository, work,
                       others, False, results, failed_steps)
    run_against_bridge("engine pjrt", ["--engine", "pjrt", *front], repository, work,
                       others, False, results, failed_steps)
    from tests.support.certs import make_pki

    pki = make_pki(work / "pki")
    token_file = work / "token"
    token_file.write_text("conformance-secret\n", encoding="utf-8")
    run_against_bridge(
        "mtls + token",
        ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key),
         "--tls-client-ca", str(pki.ca_cert), "--auth-token-file", str(token_file), *front],
        repository, work, others, False, results, failed_steps,
        env={"JAXPORT_CONFORMANCE_CA": str(pki.ca_cert),
             "JAXPORT_CONFORMANCE_CERT": str(pki.client_cert),
             "JAXPORT_CONFORMANCE_KEY": str(pki.client_key),
             "JAXPORT_CONFORMANCE_TOKEN": "conformance-secret"},
        ca_pem=pki.ca_cert, client_pair=(pki.client_cert, pki.client_key),
        refusals=languages)


def main(argv: list[str] | None = None) -> int:
    """Export, serve, run every runner, stop; 0 only when every case passed in every language."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--tier", choices=("fast", "all"), default="fast",
                        help="'fast' (make test, default): every runner over every case against "
                             "the shipped configuration, the Python runner over every case "
                             "against the others; 'all' (make test-all): every runner over "
                             "every case everywhere")
    parser.add_argument("--only", default=",".join(LANGUAGES),
                        help="comma-separated languages to run (default: all three)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the work directory (server logs, certificates)")
    parser.add_argument("--front-workers", type=int, default=2,
                        help="Python execution workers behind the front (default 2)")
    args = parser.parse_args(argv)
    languages = [x.strip() for x in args.only.split(",") if x.strip()]
    unknown = sorted(set(languages) - set(LANGUAGES))
    if unknown:
        parser.error(f"unknown language(s) {unknown}; choose from {', '.join(LANGUAGES)}")
    problems = missing_toolchains(languages)
    if problems:
        for p in problems:
            print(f"conformance: error: {p}", file=sys.stderr)
        print("conformance: FAILED (a required toolchain is missing; no language is skipped)",
              file=sys.stderr)
        return 1
    start = time.perf_counter()
    problems = handed_over(args.tier)
    if problems:
        for p in problems:
            print(f"conformance: error: {p}", file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="jaxport-conformance-"))
    results: dict[str, tuple[int, int]] = {}
    failed_steps: list[str] = []
    try:
        t0 = time.perf_counter()
        from tests.support.exports import conformance_suite

        repository = conformance_suite()
        print(f"conformance: {len(list(repository.iterdir()))} suite models in {repository} "
              f"({time.perf_counter() - t0:.1f} s, shared export cache)", flush=True)
        run_sequence(args.tier, front_flags(args.front_workers), repository, work, languages,
                     results, failed_steps)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    print("\n=== conformance summary")
    total_pass = total_fail = 0
    for key, (p, f) in results.items():
        total_pass, total_fail = total_pass + p, total_fail + f
        print(f"conformance {key}: {p} passed, {f} failed")
    for step in dict.fromkeys(failed_steps):
        print(f"conformance: failed step: {step}")
    ok = not failed_steps and total_fail == 0
    print(f"conformance: took {time.perf_counter() - start:.0f} s")
    print(f"conformance: {total_pass} passed, {total_fail} failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
