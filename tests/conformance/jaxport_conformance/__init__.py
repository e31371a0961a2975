"""jaxport-conformance: the Open Inference Protocol conformance suite as an installable tool.

The one implementation of the suite's Python runners (gRPC: `grpc_runner`, REST: `rest`), its
case files and feature table (`suite`), and its reports (`report`: text, JSON, JUnit XML). It
needs grpcio, protobuf and numpy only (no JAX, no jaxport): `make conformance-dist` builds the
wheel (tests/conformance/build_dist.py) with the cases, their data, the feature table and the
generated gRPC stubs inside; in the jaxport tree, tests/conformance/runner.py and rest_runner.py
run this same code (runner.py adds jaxport.client on top). Entry point: `cli.main`.
"""

__version__ = "0.1.0"
