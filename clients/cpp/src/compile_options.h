// The serialized xla.CompileOptionsProto jaxport compiles every program with: a real message of
// XLA's schema (compile_options.proto, the copy in the pinned gopjrt module), written field by
// field with the protobuf wire format, so the library needs no protobuf runtime. The fields are
// the server's native engine's (gopjrt's defaults) plus JAX's CPU semantics:
//
//   executable_build_options { device_ordinal: -1  num_replicas: 1  num_partitions: 1 }
//   compile_portable_executable: true
//   env_option_overrides { key: "xla_cpu_enable_fast_min_max" value { bool_field: false } }
//
// env_option_overrides is how JAX itself passes XLA options per compilation
// (jax_compiler_options): the plugin applies them over its flag defaults, so a NaN propagates
// through min/max as in JAX (the CPU plugin's default is fast min/max, which drops it). A
// DebugOptions message is NOT set: it would replace XLA's defaults as a whole.
// tests/cpp/test_library.py parses these bytes with XLA's own CompileOptions (jaxlib).
#ifndef JAXPORT_SRC_COMPILE_OPTIONS_H_
#define JAXPORT_SRC_COMPILE_OPTIONS_H_

#include <string>

namespace jaxport::internal {

// `fast_min_max`: leave the plugin's default (no override): only to show the difference.
std::string CompileOptions(bool fast_min_max = false);

}  // namespace jaxport::internal

#endif  // JAXPORT_SRC_COMPILE_OPTIONS_H_
