#!/usr/bin/env python3
"""REST runner of the conformance suite in the jaxport tree: every case file against one live
OIP REST endpoint.

    python tests/conformance/rest_runner.py --url 127.0.0.1:8000 [--cases DIR] [--features LIST]
                                            [--ca CA.pem] [--cert C.pem --key K.pem] [--token T]
                                            [--json FILE] [--junit FILE]

The runner is jaxport_conformance.rest (the jaxport-conformance package beside this file, run as
`jaxport-conformance --transport rest`); this file is its entry point in the tree and gives
tests/front/test_rest.py the REST client, with decode_infer returning plain numpy arrays (BF16
as ml_dtypes.bfloat16). Prints `conformance python-rest: N passed, M failed, K not applicable`;
exits 1 if any case failed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from jaxport.protocol import dtypes  # noqa: E402
from jaxport_conformance import cli, rest, suite  # noqa: E402
from jaxport_conformance.rest import (  # noqa: E402, F401  (this module's names, for tests)
    REST_STATUS,
    RestClient,
    encode_infer,
    model_path,
    ssl_context,
)

decode_bytes_elements = suite.split_bytes_elements


def decode_infer(headers: dict[str, str], body: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """(response JSON, {output name: numpy array in jaxport's dtype}) of a 200 infer answer."""
    doc, decoded = rest.decode_infer(headers, body)
    arrays = {}
    for name, d in decoded.items():
        if d is None or d.datatype == "BYTES":
            arrays[name] = None if d is None else d.array
        else:
            arrays[name] = d.array.astype(dtypes.by_datatype(d.datatype).numpy)
    return doc, arrays


def main(argv: list[str] | None = None) -> int:
    """`jaxport-conformance --transport rest`; 0 only if no case failed."""
    args = sys.argv[1:] if argv is None else argv
    return cli.main(["--transport", "rest", *args], prog="rest_runner.py")


if __name__ == "__main__":
    sys.exit(main())
