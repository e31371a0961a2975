// PJRT C API wrappers: see pjrt.h.
#include "pjrt.h"

#include <dlfcn.h>

#include <cstdio>
#include <filesystem>
#include <mutex>
#include <utility>

namespace jaxport::pjrt {
namespace {

// The plugin's message and code of `error` (not destroyed here).
std::pair<std::string, int> ErrorText(const PJRT_Api* api, PJRT_Error* error) {
  PJRT_Error_Message_Args message{};
  message.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE;
  message.error = error;
  api->PJRT_Error_Message(&message);
  std::string text(message.message, message.message_size);
  PJRT_Error_GetCode_Args code{};
  code.struct_size = PJRT_Error_GetCode_Args_STRUCT_SIZE;
  code.error = error;
  if (PJRT_Error* failed = api->PJRT_Error_GetCode(&code)) {
    Destroy(api, failed);  // no code to add; the message is what matters
    return {text, static_cast<int>(StatusCode::kUnknown)};
  }
  return {text, static_cast<int>(code.code)};
}

// Destroy calls return errors too; a destructor can only report them.
void Report(const PJRT_Api* api, PJRT_Error* error, const char* what) noexcept {
  if (error == nullptr) return;
  try {
    std::fprintf(stderr, "jaxport: %s: %s\n", what, ErrorText(api, error).first.c_str());
  } catch (...) {
  }
  Destroy(api, error);
}

// One PJRT_*_Destroy call: its args struct with `handle` in `field`; errors reported.
template <typename Args, typename T>
void DestroyVia(const PJRT_Api* api, PJRT_Error* (*destroy)(Args*), size_t struct_size, T* Args::*field,
                T* handle, const char* what) noexcept {
  Args args{};
  args.struct_size = struct_size;
  args.*field = handle;
  Report(api, destroy(&args), what);
}

}  // namespace

void Destroy(const PJRT_Api* api, PJRT_Error* error) noexcept {
  PJRT_Error_Destroy_Args args{};
  args.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
  args.error = error;
  api->PJRT_Error_Destroy(&args);
}

void Destroy(const PJRT_Api* api, PJRT_Event* event) noexcept {
  DestroyVia(api, api->PJRT_Event_Destroy, PJRT_Event_Destroy_Args_STRUCT_SIZE, &PJRT_Event_Destroy_Args::event,
             event, "PJRT_Event_Destroy");
}

void Destroy(const PJRT_Api* api, PJRT_Buffer* buffer) noexcept {
  DestroyVia(api, api->PJRT_Buffer_Destroy, PJRT_Buffer_Destroy_Args_STRUCT_SIZE, &PJRT_Buffer_Destroy_Args::buffer,
             buffer, "PJRT_Buffer_Destroy");
}

void Destroy(const PJRT_Api* api, PJRT_Executable* executable) noexcept {
  DestroyVia(api, api->PJRT_Executable_Destroy, PJRT_Executable_Destroy_Args_STRUCT_SIZE,
             &PJRT_Executable_Destroy_Args::executable, executable, "PJRT_Executable_Destroy");
}

void Destroy(const PJRT_Api* api, PJRT_LoadedExecutable* executable) noexcept {
  DestroyVia(api, api->PJRT_LoadedExecutable_Destroy, PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE,
             &PJRT_LoadedExecutable_Destroy_Args::executable, executable, "PJRT_LoadedExecutable_Destroy");
}

void Destroy(const PJRT_Api* api, PJRT_Client* client) noexcept {
  DestroyVia(api, api->PJRT_Client_Destroy, PJRT_Client_Destroy_Args_STRUCT_SIZE, &PJRT_Client_Destroy_Args::client,
             client, "PJRT_Client_Destroy");
}

void Check(const PJRT_Api* api, PJRT_Error* error, const std::string& what) {
  if (error == nullptr) return;
  auto [text, code] = ErrorText(api, error);
  Destroy(api, error);
  throw PjrtError(what + ": " + text, code);
}

void AwaitAndDestroy(const PJRT_Api* api, PJRT_Event* event, const std::string& what) {
  if (event == nullptr) return;
  Owned<PJRT_Event> owned = Own(api, event);
  PJRT_Event_Await_Args args{};
  args.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE;
  args.event = event;
  Check(api, api->PJRT_Event_Await(&args), what);
}

Plugin Plugin::Load(const std::string& path) {
  // One load per path: PJRT_Plugin_Initialize runs once, later loads share the API.
  static std::mutex mu;
  static std::map<std::string, const PJRT_Api*>* loaded = new std::map<std::string, const PJRT_Api*>();
  std::lock_guard<std::mutex> lock(mu);
  std::error_code ec;
  const std::string key = std::filesystem::weakly_canonical(path, ec).string();  // one file, one load
  if (auto it = loaded->find(key); it != loaded->end()) return Plugin(it->second);
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw PjrtError("cannot load PJRT plugin " + path + ": " + (why ? why : "dlopen failed"));
  }
  using GetPjrtApiFn = const PJRT_Api* (*)();
  auto get_api = reinterpret_cast<GetPjrtApiFn>(dlsym(handle, "GetPjrtApi"));
  if (get_api == nullptr) {
    dlclose(handle);  // not a PJRT plugin: nothing of it was initialised
    throw PjrtError(path + " is not a PJRT plugin (no GetPjrtApi symbol)");
  }
  const PJRT_Api* api = get_api();
  if (api == nullptr) {
    dlclose(handle);
    throw PjrtError(path + ": GetPjrtApi() returned null");
  }
  Plugin plugin(api);
  // Same major version; the plugin's minor version at least the header's (a newer plugin
  // accepts the older, shorter argument structs: every struct carries its struct_size).
  if (plugin.major_version() != PJRT_API_MAJOR || plugin.minor_version() < PJRT_API_MINOR) {
    throw PjrtError(path + " implements PJRT C API " + std::to_string(plugin.major_version()) + "." +
                    std::to_string(plugin.minor_version()) + "; jaxport is built against pjrt_c_api.h " +
                    std::to_string(PJRT_API_MAJOR) + "." + std::to_string(PJRT_API_MINOR) +
                    " (needs the same major version and a minor version at least as new)");
  }
  PJRT_Plugin_Initialize_Args init{};
  init.struct_size = PJRT_Plugin_Initialize_Args_STRUCT_SIZE;
  Check(api, api->PJRT_Plugin_Initialize(&init), "PJRT_Plugin_Initialize");
  loaded->emplace(key, api);
  return plugin;
}

int Plugin::major_version() const { return api_->pjrt_api_version.major_version; }
int Plugin::minor_version() const { return api_->pjrt_api_version.minor_version; }

std::map<std::string, Attribute> Plugin::Attributes() const {
  PJRT_Plugin_Attributes_Args args{};
  args.struct_size = PJRT_Plugin_Attributes_Args_STRUCT_SIZE;
  Check(api_, api_->PJRT_Plugin_Attributes(&args), "PJRT_Plugin_Attributes");
  std::map<std::string, Attribute> out;
  for (size_t i = 0; i < args.num_attributes; ++i) {
    const PJRT_NamedValue& value = args.attributes[i];
    Attribute& attribute = out[std::string(value.name, value.name_size)];
    switch (value.type) {
      case PJRT_NamedValue_kString:
        attribute.text.assign(value.string_value, value.value_size);
        break;
      case PJRT_NamedValue_kInt64:
        attribute.ints = {value.int64_value};
        attribute.text = std::to_string(value.int64_value);
        break;
      case PJRT_NamedValue_kInt64List:
        attribute.ints.assign(value.int64_array_value, value.int64_array_value + value.value_size);
        for (size_t j = 0; j < attribute.ints.size(); ++j) {
          attribute.text += (j ? "." : "") + std::to_string(attribute.ints[j]);
        }
        break;
      case PJRT_NamedValue_kFloat:
        attribute.text = std::to_string(value.float_value);
        break;
      case PJRT_NamedValue_kBool:
        attribute.ints = {value.bool_value ? 1 : 0};
        attribute.text = value.bool_value ? "true" : "false";
        break;
    }
  }
  return out;
}

std::unique_ptr<Client> Client::Create(const PJRT_Api* api) {
  // Synchronous execution on the caller's thread (the CPU plugin's `asynchronous` option), as
  // the server's native engine creates its client: no hand-off to the plugin's thread pool per
  // call. A plugin that does not take the option is created without it.
  static const char kAsynchronous[] = "asynchronous";
  PJRT_NamedValue option{};
  option.struct_size = PJRT_NamedValue_STRUCT_SIZE;
  option.name = kAsynchronous;
  option.name_size = sizeof(kAsynchronous) - 1;
  option.type = PJRT_NamedValue_kBool;
  option.bool_value = false;
  option.value_size = 1;
  PJRT_Client_Create_Args create{};
  create.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
  create.create_options = &option;
  create.num_options = 1;
  bool synchronous = true;
  if (PJRT_Error* error = api->PJRT_Client_Create(&create)) {
    Destroy(api, error);
    create = PJRT_Client_Create_Args{};
    create.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
    Check(api, api->PJRT_Client_Create(&create), "PJRT_Client_Create");
    synchronous = false;
  }
  std::unique_ptr<Client> client(new Client(api, create.client));
  client->synchronous_ = synchronous;

  PJRT_Client_PlatformName_Args name{};
  name.struct_size = PJRT_Client_PlatformName_Args_STRUCT_SIZE;
  name.client = create.client;
  Check(api, api->PJRT_Client_PlatformName(&name), "PJRT_Client_PlatformName");
  client->platform_.assign(name.platform_name, name.platform_name_size);

  PJRT_Client_AddressableDevices_Args devices{};
  devices.struct_size = PJRT_Client_AddressableDevices_Args_STRUCT_SIZE;
  devices.client = create.client;
  Check(api, api->PJRT_Client_AddressableDevices(&devices), "PJRT_Client_AddressableDevices");
  client->devices_.assign(devices.addressable_devices, devices.addressable_devices + devices.num_addressable_devices);
  if (client->devices_.empty()) throw PjrtError("the PJRT client has no addressable device");
  return client;
}

std::unique_ptr<Executable> Client::Compile(const std::string& code, const std::string& options) const {
  static const char kFormat[] = "mlir";
  PJRT_Program program{};
  program.struct_size = PJRT_Program_STRUCT_SIZE;
  program.code = const_cast<char*>(code.data());  // read only for PJRT_Client_Compile
  program.code_size = code.size();
  program.format = kFormat;
  program.format_size = sizeof(kFormat) - 1;
  PJRT_Client_Compile_Args args{};
  args.struct_size = PJRT_Client_Compile_Args_STRUCT_SIZE;
  args.client = client_.get();
  args.program = &program;
  args.compile_options = options.data();
  args.compile_options_size = options.size();
  Check(api_, api_->PJRT_Client_Compile(&args), "PJRT_Client_Compile");
  return std::make_unique<Executable>(api_, args.executable, devices_.front());
}

void HostUpload::Release() {
  buffer.reset();
  if (done) AwaitAndDestroy(api, done.release(), "host buffer release");
}

HostUpload::~HostUpload() {
  try {
    Release();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "jaxport: %s\n", e.what());
  }
}

HostUpload Client::Upload(const void* data, DType dtype, const std::vector<int64_t>& dims, bool zero_copy) const {
  PJRT_Client_BufferFromHostBuffer_Args args{};
  args.struct_size = PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE;
  args.client = client_.get();
  args.data = data;
  args.type = BufferType(dtype);
  args.dims = dims.data();
  args.num_dims = dims.size();
  args.host_buffer_semantics = zero_copy ? PJRT_HostBufferSemantics_kImmutableZeroCopy
                                         : PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
  args.device = devices_.front();
  Check(api_, api_->PJRT_Client_BufferFromHostBuffer(&args), "PJRT_Client_BufferFromHostBuffer");
  HostUpload upload;
  upload.api = api_;
  upload.buffer = std::make_unique<Buffer>(api_, args.buffer);  // owned before waiting: freed on failure
  if (zero_copy) {
    upload.done = Own(api_, args.done_with_host_buffer);  // fires when the buffer is destroyed
  } else {
    AwaitAndDestroy(api_, args.done_with_host_buffer, "host-to-device transfer");
  }
  return upload;
}

Executable::Executable(const PJRT_Api* api, PJRT_LoadedExecutable* raw, PJRT_Device* device)
    : api_(api), executable_(Own(api, raw)), device_(device) {
  PJRT_LoadedExecutable_GetExecutable_Args get{};
  get.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE;
  get.loaded_executable = executable_.get();
  Check(api_, api_->PJRT_LoadedExecutable_GetExecutable(&get), "PJRT_LoadedExecutable_GetExecutable");
  Owned<PJRT_Executable> executable = Own(api_, get.executable);
  PJRT_Executable_NumOutputs_Args outputs{};
  outputs.struct_size = PJRT_Executable_NumOutputs_Args_STRUCT_SIZE;
  outputs.executable = executable.get();
  Check(api_, api_->PJRT_Executable_NumOutputs(&outputs), "PJRT_Executable_NumOutputs");
  num_outputs_ = outputs.num_outputs;
}

std::vector<Buffer> Executable::Execute(const std::vector<PJRT_Buffer*>& arguments) const {
  PJRT_ExecuteOptions options{};
  options.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
  std::vector<PJRT_Buffer*> outputs(num_outputs_, nullptr);
  PJRT_Buffer* const* argument_list = arguments.data();
  PJRT_Buffer** output_list = outputs.data();
  PJRT_Event* done = nullptr;
  PJRT_LoadedExecutable_Execute_Args args{};
  args.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
  args.executable = executable_.get();
  args.options = &options;
  args.argument_lists = &argument_list;
  args.num_devices = 1;
  args.num_args = arguments.size();
  args.output_lists = &output_list;
  args.device_complete_events = &done;
  args.execute_device = device_;
  PJRT_Error* error = api_->PJRT_LoadedExecutable_Execute(&args);
  // Own whatever came back before checking anything, so every path frees it.
  std::vector<Buffer> results;
  results.reserve(outputs.size());
  for (PJRT_Buffer* raw : outputs) {
    if (raw != nullptr) results.emplace_back(api_, raw);
  }
  Owned<PJRT_Event> done_owned = Own(api_, done);
  Check(api_, error, "PJRT_LoadedExecutable_Execute");
  AwaitAndDestroy(api_, done_owned.release(), "execution");
  if (results.size() != outputs.size()) {
    throw PjrtError("PJRT_LoadedExecutable_Execute returned " + std::to_string(results.size()) + " of " +
                    std::to_string(outputs.size()) + " outputs");
  }
  return results;
}

PJRT_Buffer_Type Buffer::ElementType() const {
  PJRT_Buffer_ElementType_Args args{};
  args.struct_size = PJRT_Buffer_ElementType_Args_STRUCT_SIZE;
  args.buffer = buffer_.get();
  Check(api_, api_->PJRT_Buffer_ElementType(&args), "PJRT_Buffer_ElementType");
  return args.type;
}

std::vector<int64_t> Buffer::Dimensions() const {
  PJRT_Buffer_Dimensions_Args args{};
  args.struct_size = PJRT_Buffer_Dimensions_Args_STRUCT_SIZE;
  args.buffer = buffer_.get();
  Check(api_, api_->PJRT_Buffer_Dimensions(&args), "PJRT_Buffer_Dimensions");
  return std::vector<int64_t>(args.dims, args.dims + args.num_dims);
}

void Buffer::ToHost(void* dst, size_t size) const {
  // Dense row-major: minor_to_major = [rank-1, ..., 0], no tiling.
  std::vector<int64_t> minor_to_major(Dimensions().size());
  for (size_t i = 0; i < minor_to_major.size(); ++i) {
    minor_to_major[i] = static_cast<int64_t>(minor_to_major.size() - 1 - i);
  }
  PJRT_Buffer_MemoryLayout layout{};
  layout.struct_size = PJRT_Buffer_MemoryLayout_STRUCT_SIZE;
  layout.type = PJRT_Buffer_MemoryLayout_Type_Tiled;
  layout.tiled.struct_size = PJRT_Buffer_MemoryLayout_Tiled_STRUCT_SIZE;
  layout.tiled.minor_to_major = minor_to_major.data();
  layout.tiled.minor_to_major_size = minor_to_major.size();

  PJRT_Buffer_ToHostBuffer_Args query{};  // dst null: asks for the size
  query.struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE;
  query.src = buffer_.get();
  query.host_layout = &layout;
  Check(api_, api_->PJRT_Buffer_ToHostBuffer(&query), "PJRT_Buffer_ToHostBuffer (size)");
  if (query.dst_size != size) {
    throw PjrtError("PJRT_Buffer_ToHostBuffer: the result holds " + std::to_string(query.dst_size) +
                    " bytes, expected " + std::to_string(size));
  }
  if (size == 0) return;
  PJRT_Buffer_ToHostBuffer_Args copy = query;
  copy.dst = dst;
  copy.dst_size = size;
  copy.event = nullptr;
  Check(api_, api_->PJRT_Buffer_ToHostBuffer(&copy), "PJRT_Buffer_ToHostBuffer");
  AwaitAndDestroy(api_, copy.event, "device-to-host transfer");
}

PJRT_Buffer_Type BufferType(DType dtype) {
  switch (dtype) {
    case DType::kBool: return PJRT_Buffer_Type_PRED;
    case DType::kInt8: return PJRT_Buffer_Type_S8;
    case DType::kInt16: return PJRT_Buffer_Type_S16;
    case DType::kInt32: return PJRT_Buffer_Type_S32;
    case DType::kInt64: return PJRT_Buffer_Type_S64;
    case DType::kUInt8: return PJRT_Buffer_Type_U8;
    case DType::kUInt16: return PJRT_Buffer_Type_U16;
    case DType::kUInt32: return PJRT_Buffer_Type_U32;
    case DType::kUInt64: return PJRT_Buffer_Type_U64;
    case DType::kFloat16: return PJRT_Buffer_Type_F16;
    case DType::kBFloat16: return PJRT_Buffer_Type_BF16;
    case DType::kFloat32: return PJRT_Buffer_Type_F32;
    case DType::kFloat64: return PJRT_Buffer_Type_F64;
  }
  throw PjrtError("no PJRT buffer type for dtype " + std::string(Name(dtype)));
}

}  // namespace jaxport::pjrt
