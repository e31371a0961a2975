"""docs/exporter.md describes what exists: its flag table is `jaxport export`'s parser, and
its search figures are what the search does on tests/models/checked.py."""

from __future__ import annotations

import re

import jax
import numpy as np
from exporter_helpers import REPO, model_module
from jaxport.artifact.checks import format_failure
from jaxport.exporter import check_search
from jaxport.exporter import checks as C
from jaxport.exporter.cli import _export_parser

DOC = (REPO / "docs" / "exporter.md").read_text()


def test_flag_table_is_the_parser() -> None:
    parser_flags = {s for a in _export_parser()._actions for s in a.option_strings
                    if s.startswith("--") and s != "--help"}
    table = set(re.findall(r"^\| `(--[a-z-]+)", DOC, re.M))
    assert table == parser_flags


def test_search_figures() -> None:
    assert f"at most {check_search.SEARCH_BUDGET} runs of the" in DOC
    checked = model_module("checked")
    params = checked.init(jax.random.key(0))
    specs = {k: jax.ShapeDtypeStruct(s, d) for k, (d, s) in checked.INPUTS.items()}
    inst = C.instrument(checked.predict, C.KINDS, [params, *specs.values()])
    run = jax.jit(inst.fn)
    runs = []

    def kind_of(values):
        runs.append(1)
        failure = format_failure(inst.table, [np.asarray(v) for v in
                                              run(params, *values)[inst.n_outputs:]])
        return failure[0] if failure else ""

    shapes = {k: (tuple(v.shape), np.dtype(v.dtype)) for k, v in specs.items()}
    found = check_search.search_inputs(kind_of, shapes, ["", *C.KINDS], seed=0)
    assert sorted(found) == sorted(["", *C.KINDS])
    assert f"a passing case and all four kinds in {len(runs)} program runs" in DOC
    runs.clear()
    check_search.search_inputs(kind_of, shapes, ["user", "index", "nan"], seed=0)
    assert f"the user, index and nan kinds alone take {len(runs)}" in DOC
