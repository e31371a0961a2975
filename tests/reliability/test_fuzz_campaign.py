"""The smoke of `make fuzz` (issue 18): the same campaign (`fuzz_campaign.py`) with a few hundred
cases, on a fresh `jaxport serve` (the native front of the tree under test and two workers;
issue 12: the front never crashes on bad input), ending with SIGTERM. The seed is printed;
`JAXPORT_FUZZ_SEED=S` replays one (so does
`.venv/bin/python tests/reliability/fuzz_campaign.py --seed S ...`)."""

from __future__ import annotations

import os
import random

from fuzz_campaign import (
    DEFAULT_RSS_BOUND_MIB,
    Violation,
    fuzz_bridge,
    make_fuzz_repository,
    run_campaign,
)

SMOKE_CASES = 400
SMOKE_THREADS = 3


def test_fuzz_campaign_smoke(tmp_path, artifacts, front_binary) -> None:
    seed = int(os.environ.get("JAXPORT_FUZZ_SEED") or random.SystemRandom().randrange(10**6))
    print(f"\nfuzz smoke: seed {seed} (replay: JAXPORT_FUZZ_SEED={seed})")
    repo = make_fuzz_repository(tmp_path / "repo", artifacts)
    with fuzz_bridge(repo, front_binary=front_binary) as bridge:
        assert "jaxport front: listening" in bridge.stdout_text()
        try:
            report = run_campaign(bridge, SMOKE_CASES, SMOKE_THREADS, seed,
                                  DEFAULT_RSS_BOUND_MIB, warmup=40)
        except Violation as exc:
            raise AssertionError(f"{exc}\nserver log: {bridge.log_path}") from None
    assert report.stats.cases == SMOKE_CASES
    assert report.exit_status == 0  # the server (the front) never crashed: it drained
    kinds = report.stats.kinds
    assert all(kinds[k] for k in ("structured", "raw_unary", "raw_stream", "names", "stream",
                                  "shm", "repository")), kinds
