"""The KServe manifests (bridge/deploy/kserve/*.yaml) against KServe's own CRD schemas
(config/crd/full, copied with their source commit into ../shared/reference/kserve/ beside this
repository). Run by `make test-scale`; without that folder every test here fails naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
KSERVE = REPO / "bridge" / "deploy" / "kserve"
CRDS = REPO.parent / "shared" / "reference" / "kserve"
MANIFESTS = sorted(KSERVE.glob("*.yaml"))


def _load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def _crd_schemas() -> dict[str, tuple[str, dict[str, Any]]]:
    """kind -> (apiVersion served, openAPIV3Schema) from KServe's CRDs."""
    assert CRDS.is_dir(), f"KServe CRD schemas not found at {CRDS} (../shared/reference/kserve)"
    out = {}
    for path in sorted(CRDS.glob("serving.kserve.io_*.yaml")):
        crd = _load(path)
        for version in crd["spec"]["versions"]:
            if version.get("served", True):
                out[crd["spec"]["names"]["kind"]] = (
                    f"{crd['spec']['group']}/{version['name']}",
                    version["schema"]["openAPIV3Schema"])
    return out


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_valid_against_kserve_crd(path: Path) -> None:
    """Each manifest validates against the schema of its kind in KServe's CRD."""
    import jsonschema

    schemas = _crd_schemas()
    doc = _load(path)
    api_version, schema = schemas[doc["kind"]]
    assert doc["apiVersion"] == api_version
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(doc), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_crd_validation_catches_a_bad_manifest() -> None:
    """The check has teeth: a misspelt field type is refused by the same validation."""
    import jsonschema

    doc = _load(KSERVE / "servingruntime.yaml")
    doc["spec"]["supportedModelFormats"][0]["autoSelect"] = "yes"
    doc["spec"]["containers"][0]["ports"][0]["containerPort"] = "8001"
    _, schema = _crd_schemas()["ServingRuntime"]
    errors = list(jsonschema.Draft7Validator(schema).iter_errors(doc))
    assert len(errors) == 2
