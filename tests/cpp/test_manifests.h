// Manifest JSON documents for the parser and binder tests (nlohmann/json, kept out of
// test_util.h so that only the tests that build manifests compile it).
#ifndef JAXPORT_TESTS_CPP_TEST_MANIFESTS_H_
#define JAXPORT_TESTS_CPP_TEST_MANIFESTS_H_

#include <nlohmann/json.hpp>

namespace jaxport::testing {

// Manifests as the exporter writes them (proto3 JSON), for the parser and binder tests:
// "mlp" with x: float32[B, 16] -> probs: float32[B, 3] at batch sizes 1 and 4, one parameter;
// "seq" with tokens: int32[B, T], mask: bool[B, T] -> pooled: float32[B, 8],
// per_token: float32[B, T, 8], dimensions B=1..4, T=8..64:8, buckets B in {1, 2}, T in {16, 64},
// padding T=mask, a polymorphic program first.
nlohmann::json BatchedManifest();
nlohmann::json BucketManifest();

}  // namespace jaxport::testing

#endif  // JAXPORT_TESTS_CPP_TEST_MANIFESTS_H_
