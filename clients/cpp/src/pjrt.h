// A thin C++17 layer over the PJRT C API (pjrt_c_api.h), internal to the library: a plugin
// loaded with dlopen, and RAII owners for every handle it gives out (client, loaded executable,
// executable, buffer, event, error). Every PJRT_Error is checked: a failed call throws
// jaxport::PjrtError carrying the plugin's message and code, and the error object is destroyed
// first, so nothing leaks on an error path.
//
// The calls, in the order the library makes them (docs/cpp.md, "The C API calls"):
//   LoadPlugin             dlopen, GetPjrtApi, API version check, PJRT_Plugin_Initialize (once
//                          per plugin per process)
//   Plugin::Attributes     PJRT_Plugin_Attributes (stablehlo_minimum/current_version)
//   Client::Create         PJRT_Client_Create (asynchronous=false when the plugin takes it),
//                          PJRT_Client_PlatformName, PJRT_Client_AddressableDevices
//   Client::Compile        PJRT_Client_Compile ("mlir" program = the portable bytecode)
//   Client::Upload         PJRT_Client_BufferFromHostBuffer
//   Executable::Execute    PJRT_LoadedExecutable_Execute (+ PJRT_Event_Await)
//   Buffer::ToHost         PJRT_Buffer_ToHostBuffer (+ PJRT_Event_Await)
//
// Thread safety: PJRT clients, loaded executables and buffers may be used from several
// threads at once (the C API's contract); these wrappers add no state of their own.
#ifndef JAXPORT_SRC_PJRT_H_
#define JAXPORT_SRC_PJRT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "jaxport/error.h"
#include "jaxport/tensor.h"
#include "pjrt_c_api.h"

namespace jaxport::pjrt {

// Destroys one kind of handle (errors of the destroy call itself are printed, not thrown:
// destructors run during unwinding).
void Destroy(const PJRT_Api* api, PJRT_Error* error) noexcept;
void Destroy(const PJRT_Api* api, PJRT_Event* event) noexcept;
void Destroy(const PJRT_Api* api, PJRT_Buffer* buffer) noexcept;
void Destroy(const PJRT_Api* api, PJRT_Executable* executable) noexcept;
void Destroy(const PJRT_Api* api, PJRT_LoadedExecutable* executable) noexcept;
void Destroy(const PJRT_Api* api, PJRT_Client* client) noexcept;

template <typename T>
struct Deleter {
  const PJRT_Api* api = nullptr;
  void operator()(T* handle) const noexcept {
    if (handle != nullptr) Destroy(api, handle);
  }
};

// Sole owner of one PJRT handle.
template <typename T>
using Owned = std::unique_ptr<T, Deleter<T>>;

template <typename T>
Owned<T> Own(const PJRT_Api* api, T* handle) {
  return Owned<T>(handle, Deleter<T>{api});
}

// Throws PjrtError("<what>: <message>") when `error` is not null (destroying it first).
void Check(const PJRT_Api* api, PJRT_Error* error, const std::string& what);

// Waits for `event` and destroys it; throws when it completed with an error.
void AwaitAndDestroy(const PJRT_Api* api, PJRT_Event* event, const std::string& what);

// One plugin attribute (PJRT_Plugin_Attributes): a string, an int64 (also bool), a float, or
// an int64 list (versions such as stablehlo_current_version = [1, 20, 0]).
struct Attribute {
  std::string text;
  std::vector<int64_t> ints;
};

class Plugin {
 public:
  // dlopen(path) (RTLD_NOW | RTLD_LOCAL), GetPjrtApi(), refuse a major version other than the
  // header's or a minor version older than it, then PJRT_Plugin_Initialize. Loaded once per
  // path per process (later calls return the same API), and never unloaded: XLA plugins own
  // threads and static state and do not support dlclose.
  static Plugin Load(const std::string& path);

  const PJRT_Api* api() const { return api_; }
  int major_version() const;
  int minor_version() const;
  std::map<std::string, Attribute> Attributes() const;

 private:
  explicit Plugin(const PJRT_Api* api) : api_(api) {}
  const PJRT_Api* api_;
};

class Buffer {
 public:
  Buffer(const PJRT_Api* api, PJRT_Buffer* raw) : api_(api), buffer_(Own(api, raw)) {}
  PJRT_Buffer* get() const { return buffer_.get(); }
  PJRT_Buffer_Type ElementType() const;
  std::vector<int64_t> Dimensions() const;
  // Copies the buffer's bytes into `dst` (exactly `size` bytes) in dense row-major order.
  void ToHost(void* dst, size_t size) const;

 private:
  const PJRT_Api* api_;
  Owned<PJRT_Buffer> buffer_;
};

// A device buffer made from host memory, and the event PJRT fires once that memory may go.
// With zero-copy semantics the event fires when the buffer is destroyed: destroy `buffer`
// first, then Release() waits for the event.
struct HostUpload {
  std::unique_ptr<Buffer> buffer;
  Owned<PJRT_Event> done;
  const PJRT_Api* api = nullptr;
  // Destroys the buffer, then waits until PJRT no longer reads the host memory.
  void Release();
  HostUpload() = default;
  HostUpload(HostUpload&&) noexcept = default;
  HostUpload& operator=(HostUpload&&) noexcept = default;
  ~HostUpload();
};

class Executable {
 public:
  // `device`: where Execute runs it (a portable executable, compiled for no device in
  // particular: compile_portable_executable).
  Executable(const PJRT_Api* api, PJRT_LoadedExecutable* raw, PJRT_Device* device);
  // Results of @main (PJRT_Executable_NumOutputs), read once.
  size_t num_outputs() const { return num_outputs_; }
  // Runs once on one device with `arguments` in @main order; waits for completion.
  std::vector<Buffer> Execute(const std::vector<PJRT_Buffer*>& arguments) const;

 private:
  const PJRT_Api* api_;
  Owned<PJRT_LoadedExecutable> executable_;
  PJRT_Device* device_;
  size_t num_outputs_ = 0;
};

class Client {
 public:
  static std::unique_ptr<Client> Create(const PJRT_Api* api);
  const std::string& platform() const { return platform_; }
  size_t num_devices() const { return devices_.size(); }
  bool synchronous() const { return synchronous_; }
  // Compiles `code` ("mlir": StableHLO bytecode or text) with serialized CompileOptionsProto
  // `options`.
  std::unique_ptr<Executable> Compile(const std::string& code, const std::string& options) const;
  // A device buffer on the first addressable device from dense row-major host bytes. With
  // `zero_copy` (kImmutableZeroCopy) the buffer may alias `data`, which must then stay alive and
  // unchanged until Upload::Release; otherwise the transfer has completed when this returns
  // (kImmutableUntilTransferCompletes, then awaited).
  HostUpload Upload(const void* data, DType dtype, const std::vector<int64_t>& dims, bool zero_copy) const;

 private:
  Client(const PJRT_Api* api, PJRT_Client* raw) : api_(api), client_(Own(api, raw)) {}
  const PJRT_Api* api_;
  Owned<PJRT_Client> client_;
  std::string platform_;
  std::vector<PJRT_Device*> devices_;
  bool synchronous_ = false;
};

// The PJRT element type of a dtype.
PJRT_Buffer_Type BufferType(DType dtype);

}  // namespace jaxport::pjrt

#endif  // JAXPORT_SRC_PJRT_H_
