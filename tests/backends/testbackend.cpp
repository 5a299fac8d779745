// A PrivateUse1 kineto plugin for CPU-only machines.
//
// It makes torch.profiler show a real device column ("Self NEURON", ...)
// without any accelerator: CPU ops that torch correlates while a PrivateUse1
// profile is running get one fake device "kernel" each on a device lane,
// linked back to the op exactly like a CUDA kernel is linked to its launching
// op. Ops that launch nothing on real hardware (views, allocation, conversion
// wrappers, composites, autograd wrappers; see launchesKernel) get none, so
// "Self" and "total" device times differ the way they do on a real
// accelerator.
//
// It also registers a minimal DeviceGuardImpl for PrivateUse1, because
// torch.accelerator.synchronize() ends in the guard's synchronizeDevice(); the
// guard counts those calls so tests can check them.
//
// The Python side (testbackend.py) builds this file with
// torch.utils.cpp_extension.load and drives it through the few functions
// exported at the bottom. The module is written against the plain CPython API
// (no pybind11) to keep the build short.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/DeviceType.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <Config.h>
#include <GenericTraceActivity.h>
#include <IActivityProfiler.h>
#include <libkineto.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#ifndef TORCH_EXTENSION_NAME
#define TORCH_EXTENSION_NAME neuronprof_testbackend
#endif

#define NPTB_CONCAT_(a, b) a##b
#define NPTB_CONCAT(a, b) NPTB_CONCAT_(a, b)
#define NPTB_STR_(a) #a
#define NPTB_STR(a) NPTB_STR_(a)

namespace nptb {

// Lane of the fake device in the trace: device (trace "pid") and stream
// (trace "tid"). 7 mirrors the CUDA default stream id.
constexpr int32_t kDeviceId = 0;
constexpr int32_t kStreamId = 7;
// Gap between the end of the launch call and the kernel's start.
constexpr int64_t kLaunchDelayNs = 1000;

// What the plugin emits for the ops of a profile (set_kernel_mode, or per
// profile by the session hook).
enum KernelMode : int {
  kKernelsNone = 0,      // no device kernels (runtime events only, if enabled)
  kKernelsLinked = 1,    // one kernel per op, linked to it (like CUDA kernels)
  kKernelsUnlinked = 2,  // one kernel per op, linked to nothing (like TorchTPU)
};

struct State {
  std::mutex mu;
  bool emit = true;
  bool runtime = true;
  int kernel_mode = kKernelsLinked;
  // Python callable hook(event, custom_config, device_requested) or nullptr;
  // see py_set_session_hook.
  PyObject* hook = nullptr;
  int64_t kernel_ns = 5000;
  // Counters for tests.
  int64_t sessions_configured = 0;
  int64_t sessions_started = 0;
  int64_t sessions_processed = 0;
  int64_t correlations_seen = 0;
  int64_t correlations_unlinked = 0;
  int64_t correlations_outside_window = 0;
  int64_t kernels_emitted = 0;
  int64_t runtime_events_emitted = 0;
  std::string last_custom_config;
  std::vector<int> last_activity_types;
  std::vector<std::string> custom_configs;
};

State& state() {
  static State* s = new State();  // never destroyed: kineto may outlive statics
  return *s;
}

std::atomic<int64_t> g_guard_sync_calls{0};

// Ops that launch nothing on a real accelerator: views and metadata,
// allocation, dtype-conversion wrappers (the copy_ inside launches) and
// composite ops (their children launch). See launchesKernel for the rest.
const std::unordered_set<std::string>& noKernelOps() {
  static const auto* ops = new std::unordered_set<std::string>{
      // views and metadata
      "aten::alias", "aten::as_strided", "aten::chunk", "aten::contiguous",
      "aten::detach", "aten::expand", "aten::expand_as", "aten::lift_fresh",
      "aten::narrow", "aten::permute", "aten::reshape", "aten::_reshape_alias",
      "aten::resolve_conj", "aten::resolve_neg", "aten::result_type",
      "aten::select", "aten::slice", "aten::split", "aten::squeeze", "aten::t",
      "aten::transpose", "aten::unbind", "aten::unflatten", "aten::flatten",
      "aten::unsqueeze", "aten::_unsafe_view", "aten::view", "aten::view_as",
      "aten::numpy_T", "aten::type_as",
      // allocation
      "aten::empty", "aten::empty_like", "aten::empty_strided",
      "aten::new_empty", "aten::new_empty_strided",
      // dtype/device conversion wrappers
      "aten::to", "aten::_to_copy",
      // composites
      "aten::linear", "aten::matmul", "aten::rms_norm", "aten::layer_norm",
      "aten::dropout", "aten::item",
  };
  return *ops;
}

bool startsWith(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

// Which correlated CPU ops get a kernel: operators ("ns::name") except the
// noKernelOps and the autograd engine's wrappers ("autograd::engine::...",
// "torch::autograd::AccumulateGrad"), whose aten children launch; plus each
// "Torch-Compiled Region: ..." (a compiled graph runs on the device as a
// whole, and there is no aten op under it). Other ranges ("MmBackward0",
// "TorchDynamo Cache Lookup", "Pregraph bytecode", "## Call CompiledFxGraph
// ... ##") are host-side bookkeeping.
bool launchesKernel(const std::string& name) {
  if (startsWith(name, "Torch-Compiled Region")) {
    return true;
  }
  return name.find("::") != std::string::npos && !startsWith(name, "autograd::") &&
      !startsWith(name, "torch::autograd::") && noKernelOps().count(name) == 0;
}

std::string backendName() {
  return c10::get_privateuse1_backend(/*lower_case=*/true);
}

// Calls the Python session hook, if any, with the GIL held. For "configure"
// the hook may return (kernel_mode, runtime_events) or (kernel_mode,
// runtime_events, max_kernels) to override the global settings for that
// profile; anything else keeps them. max_kernels > 0 caps the device kernels
// of that profile: the rest are dropped silently, as TorchTPU's plugin (at
// 1,000,000 events) and Neuron Runtime (max_events_per_nc) do. An exception in the
// hook is printed and ignored: a plugin must never break the profile.
bool callHook(const char* event, const std::string& custom, bool device_requested, int* kernel_mode, bool* runtime,
              long long* max_kernels = nullptr) {
  PyObject* hook;
  {
    std::lock_guard<std::mutex> lock(state().mu);
    hook = state().hook;
  }
  if (hook == nullptr || !Py_IsInitialized()) {
    return false;
  }
  bool overridden = false;
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* res = PyObject_CallFunction(
      hook, "ss#O", event, custom.data(), static_cast<Py_ssize_t>(custom.size()),
      device_requested ? Py_True : Py_False);
  if (res == nullptr) {
    PyErr_Print();
  } else {
    int mode = 0;
    int rt = 0;
    long long cap = 0;
    if (kernel_mode != nullptr && PyTuple_Check(res) && PyArg_ParseTuple(res, "ip|L", &mode, &rt, &cap)) {
      *kernel_mode = mode;
      *runtime = rt != 0;
      if (max_kernels != nullptr) {
        *max_kernels = cap;
      }
      overridden = true;
    }
    PyErr_Clear();
    Py_DECREF(res);
  }
  PyGILState_Release(gil);
  return overridden;
}

class TestBackendSession final : public libkineto::IActivityProfilerSession {
 public:
  // kineto configures every registered plugin for every profile; a CPU-only
  // profile asks for no device activity, so the session stays silent then.
  TestBackendSession(bool device_requested, std::string custom_config)
      : device_requested_(device_requested), custom_config_(std::move(custom_config)) {
    std::lock_guard<std::mutex> slock(state().mu);
    kernel_mode_ = state().kernel_mode;
    runtime_ = state().runtime;
  }

  void applyHook() {
    int mode = kernel_mode_;
    bool rt = runtime_;
    long long cap = 0;
    if (callHook("configure", custom_config_, device_requested_, &mode, &rt, &cap)) {
      kernel_mode_ = mode;
      runtime_ = rt;
      max_kernels_ = cap;
    }
  }

  void start() override {
    std::lock_guard<std::mutex> lock(mu_);
    correlations_.clear();
    status_ = libkineto::TraceStatus::RECORDING;
    std::lock_guard<std::mutex> slock(state().mu);
    state().sessions_started += 1;
  }

  void stop() override {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override {
    return {};
  }

  void pushCorrelationId(uint64_t id) override {
    std::lock_guard<std::mutex> lock(mu_);
    correlations_.push_back(id);
  }

  void popCorrelationId() override {}

  void processTrace(libkineto::ActivityLogger& logger) override {
    // Without the linked-activity callback there is nothing to attach
    // kernels to; kineto always uses the overload below.
    (void)logger;
  }

  void processTrace(
      libkineto::ActivityLogger& logger,
      libkineto::getLinkedActivityCallback getLinkedActivity,
      int64_t startTime,
      int64_t endTime) override {
    std::vector<uint64_t> ids;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ids.swap(correlations_);
    }
    bool emit;
    const bool runtime = runtime_;
    const int kernel_mode = kernel_mode_;
    int64_t kernel_ns;
    {
      std::lock_guard<std::mutex> slock(state().mu);
      emit = state().emit;
      kernel_ns = state().kernel_ns;
      state().sessions_processed += 1;
      state().correlations_seen += static_cast<int64_t>(ids.size());
    }

    struct Launch {
      uint64_t corr;
      const libkineto::ITraceActivity* op;
      // The op's first and last child op (-1: none), so that the launch call
      // can sit in the op's own time: a real runtime call is made by the
      // innermost op running, never from inside one of its children.
      int64_t first_child = -1;
      int64_t last_child_end = -1;
    };
    std::vector<Launch> launches;
    int64_t unlinked = 0;
    int64_t outside = 0;
    for (uint64_t corr : ids) {
      const libkineto::ITraceActivity* op =
          getLinkedActivity(static_cast<int32_t>(corr));
      if (op == nullptr) {
        unlinked += 1;
        continue;
      }
      // Only real ops launch kernels; user annotations and ProfilerStep#N
      // ranges never do on a real device either.
      if (op->type() != libkineto::ActivityType::CPU_OP) {
        continue;
      }
      // Ops recorded before the capture window (schedule warm-up steps) are
      // still linkable but kineto drops them; so do we.
      if (op->timestamp() < startTime || op->timestamp() > endTime) {
        outside += 1;
        continue;
      }
      launches.push_back({corr, op});
    }

    // Kernels run one after another on the single stream, in launch order.
    // Parents before children: by start, then longest first.
    std::sort(launches.begin(), launches.end(), [](const Launch& a, const Launch& b) {
      if (a.op->timestamp() != b.op->timestamp()) {
        return a.op->timestamp() < b.op->timestamp();
      }
      return a.op->duration() > b.op->duration();
    });
    {
      // Nest the ops of each thread and note each one's children's extent.
      std::unordered_map<int64_t, std::vector<size_t>> open;
      for (size_t i = 0; i < launches.size(); ++i) {
        const auto* op = launches[i].op;
        const int64_t start = op->timestamp();
        const int64_t end = start + op->duration();
        auto& stack = open[static_cast<int64_t>(op->getThreadId())];
        while (!stack.empty()) {
          const auto* top = launches[stack.back()].op;
          if (start >= top->timestamp() + top->duration() || end > top->timestamp() + top->duration()) {
            stack.pop_back();
          } else {
            break;
          }
        }
        if (!stack.empty()) {
          Launch& parent = launches[stack.back()];
          if (parent.first_child < 0) {
            parent.first_child = start;
          }
          parent.last_child_end = std::max(parent.last_child_end, end);
        }
        stack.push_back(i);
      }
    }

    const std::string prefix = backendName() + "_kernel[";
    const std::string launchName = backendName() + "LaunchKernel";
    int64_t runtime_emitted = 0;
    libkineto::TraceSpan span(startTime, endTime, backendName() + " test device");
    int64_t cursor = 0;
    int64_t emitted = 0;
    if (emit && device_requested_) {
      for (const auto& launch : launches) {
        if (!launchesKernel(launch.op->name())) {
          continue;
        }
        const libkineto::ITraceActivity* op = launch.op;
        const auto corr = static_cast<int32_t>(launch.corr);
        // The host-side launch call sits inside its op, on the op's thread,
        // like cudaLaunchKernel, in a stretch of the op that none of its
        // children covers (before the first, else after the last); the
        // kernel starts after it.
        int64_t own_start = op->timestamp();
        int64_t own_end = op->timestamp() + op->duration();
        if (launch.first_child >= 0) {
          if (launch.first_child - own_start >= own_end - launch.last_child_end) {
            own_end = launch.first_child;
          } else {
            own_start = launch.last_child_end;
          }
        }
        const int64_t quarter = std::max<int64_t>((own_end - own_start) / 4, 1);
        const int64_t call_start = own_start + quarter;
        const int64_t call_end = call_start + quarter;
        const bool kernel = kernel_mode != kKernelsNone;
        // A flow arrow joins the launch call and the kernel only when both
        // exist and the kernel is linked to its op.
        const bool flow = kernel && kernel_mode == kKernelsLinked;
        if (runtime) {
          libkineto::GenericTraceActivity call(
              span, libkineto::ActivityType::PRIVATEUSE1_RUNTIME, launchName);
          call.startTime = call_start;
          call.endTime = call_end;
          call.id = corr;
          call.device = static_cast<int32_t>(op->deviceId());
          call.resource = static_cast<int32_t>(op->resourceId());
          call.threadId = op->getThreadId();
          call.linked = op;
          if (flow) {
            call.flow.id = static_cast<uint32_t>(corr);
            call.flow.type = libkineto::kLinkAsyncCpuGpu;
            call.flow.start = 1;
          }
          call.addMetadata("correlation", launch.corr);
          logger.handleGenericActivity(call);
          runtime_emitted += 1;
        }
        if (!kernel || (max_kernels_ > 0 && emitted >= max_kernels_)) {
          continue;
        }
        int64_t begin = std::max(call_end + kLaunchDelayNs, cursor);
        libkineto::GenericTraceActivity act(
            span, libkineto::ActivityType::CONCURRENT_KERNEL,
            prefix + op->name() + "]");
        act.startTime = begin;
        act.endTime = begin + kernel_ns;
        act.device = kDeviceId;
        act.resource = kStreamId;
        act.threadId = kStreamId;
        if (flow) {
          act.id = corr;
          act.linked = op;
          act.flow.id = static_cast<uint32_t>(corr);
          act.flow.type = libkineto::kLinkAsyncCpuGpu;
          act.flow.start = 0;
          act.addMetadata("correlation", launch.corr);
        }
        act.addMetadata("device", kDeviceId);
        act.addMetadata("stream", kStreamId);
        act.addMetadataQuoted("backend", backendName());
        logger.handleGenericActivity(act);
        cursor = act.endTime;
        emitted += 1;
      }
    }
    callHook("stop", custom_config_, device_requested_, nullptr, nullptr);
    std::lock_guard<std::mutex> slock(state().mu);
    state().correlations_unlinked += unlinked;
    state().correlations_outside_window += outside;
    state().kernels_emitted += emitted;
    state().runtime_events_emitted += runtime_emitted;
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    std::string name = backendName();
    return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{
        kDeviceId,
        libkineto::kExceedMaxPid + kDeviceId,
        name + " " + std::to_string(kDeviceId),
        name + ":" + std::to_string(kDeviceId)});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    return {libkineto::ResourceInfo{
        kStreamId, kStreamId, kDeviceId, "stream " + std::to_string(kStreamId)}};
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return nullptr;
  }

 private:
  const bool device_requested_;
  const std::string custom_config_;
  int kernel_mode_ = kKernelsLinked;
  bool runtime_ = true;
  long long max_kernels_ = 0;  // 0: no cap (see callHook)
  std::mutex mu_;
  std::vector<uint64_t> correlations_;
};

class TestBackendProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override {
    return name_;
  }

  const std::set<libkineto::ActivityType>& availableActivities() const override {
    return activities_;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& config) override {
    {
      std::lock_guard<std::mutex> lock(state().mu);
      state().sessions_configured += 1;
      state().last_custom_config = config.getCustomConfig();
      state().custom_configs.push_back(config.getCustomConfig());
      state().last_activity_types.clear();
      for (auto t : activity_types) {
        state().last_activity_types.push_back(static_cast<int>(t));
      }
    }
    auto session = std::make_unique<TestBackendSession>(
        activity_types.count(libkineto::ActivityType::CONCURRENT_KERNEL) != 0, config.getCustomConfig());
    session->applyHook();
    return session;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*ts_ms*/,
      int64_t /*duration_ms*/,
      const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  std::string name_{"neuronprof_testbackend"};
  std::set<libkineto::ActivityType> activities_{
      libkineto::ActivityType::CONCURRENT_KERNEL,
      libkineto::ActivityType::PRIVATEUSE1_RUNTIME,
      libkineto::ActivityType::PRIVATEUSE1_DRIVER,
  };
};

REGISTER_PRIVATEUSE1_PROFILER(TestBackendProfiler);

// One device, one stream, nothing to switch: just enough for
// torch.accelerator.* to reach synchronizeDevice().
struct TestGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

  c10::DeviceType type() const override {
    return kType;
  }
  c10::Device exchangeDevice(c10::Device d) const override {
    (void)d;
    return c10::Device(kType, 0);
  }
  c10::Device getDevice() const override {
    return c10::Device(kType, 0);
  }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.index() <= 0, "the test backend has a single device (index 0), got ", d);
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    (void)d;
  }
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kType, d.index() < 0 ? 0 : d.index()));
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return getStream(d);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    return getStream(s.device());
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return 1;
  }
  bool queryStream(const c10::Stream& s) const override {
    (void)s;
    return true;
  }
  void synchronizeStream(const c10::Stream& s) const override {
    (void)s;
  }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    (void)device_index;
    g_guard_sync_calls.fetch_add(1);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TestGuardImpl);

// ---------------------------------------------------------------- Python API

PyObject* py_set_emit(PyObject*, PyObject* arg) {
  int v = PyObject_IsTrue(arg);
  if (v < 0) {
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(state().mu);
  state().emit = v != 0;
  Py_RETURN_NONE;
}

PyObject* py_get_emit(PyObject*, PyObject*) {
  std::lock_guard<std::mutex> lock(state().mu);
  return PyBool_FromLong(state().emit ? 1 : 0);
}

PyObject* py_set_runtime_events(PyObject*, PyObject* arg) {
  int v = PyObject_IsTrue(arg);
  if (v < 0) {
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(state().mu);
  state().runtime = v != 0;
  Py_RETURN_NONE;
}

PyObject* py_set_kernel_mode(PyObject*, PyObject* arg) {
  long v = PyLong_AsLong(arg);
  if (v == -1 && PyErr_Occurred()) {
    return nullptr;
  }
  if (v < kKernelsNone || v > kKernelsUnlinked) {
    PyErr_SetString(PyExc_ValueError, "kernel mode must be 0 (none), 1 (linked) or 2 (unlinked)");
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(state().mu);
  state().kernel_mode = static_cast<int>(v);
  Py_RETURN_NONE;
}

PyObject* py_set_session_hook(PyObject*, PyObject* arg) {
  if (arg != Py_None && !PyCallable_Check(arg)) {
    PyErr_SetString(PyExc_TypeError, "the session hook must be callable or None");
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(state().mu);
  Py_XDECREF(state().hook);
  state().hook = nullptr;
  if (arg != Py_None) {
    Py_INCREF(arg);
    state().hook = arg;
  }
  Py_RETURN_NONE;
}

PyObject* py_set_kernel_ns(PyObject*, PyObject* arg) {
  long long v = PyLong_AsLongLong(arg);
  if (v == -1 && PyErr_Occurred()) {
    return nullptr;
  }
  if (v <= 0) {
    PyErr_SetString(PyExc_ValueError, "kernel duration must be a positive number of nanoseconds");
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(state().mu);
  state().kernel_ns = v;
  Py_RETURN_NONE;
}

PyObject* py_guard_sync_calls(PyObject*, PyObject*) {
  return PyLong_FromLongLong(g_guard_sync_calls.load());
}

PyObject* py_stats(PyObject*, PyObject*) {
  std::lock_guard<std::mutex> lock(state().mu);
  const State& s = state();
  PyObject* types = PyList_New(0);
  if (types == nullptr) {
    return nullptr;
  }
  for (int t : s.last_activity_types) {
    PyObject* name = PyUnicode_FromString(libkineto::toString(static_cast<libkineto::ActivityType>(t)));
    if (name == nullptr || PyList_Append(types, name) < 0) {
      Py_XDECREF(name);
      Py_DECREF(types);
      return nullptr;
    }
    Py_DECREF(name);
  }
  PyObject* configs = PyList_New(0);
  if (configs == nullptr) {
    Py_DECREF(types);
    return nullptr;
  }
  for (const auto& c : s.custom_configs) {
    PyObject* item = PyUnicode_FromStringAndSize(c.data(), static_cast<Py_ssize_t>(c.size()));
    if (item == nullptr || PyList_Append(configs, item) < 0) {
      Py_XDECREF(item);
      Py_DECREF(types);
      Py_DECREF(configs);
      return nullptr;
    }
    Py_DECREF(item);
  }
  return Py_BuildValue(
      "{s:O,s:i,s:O,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:s#,s:N,s:N}",
      "emit", s.emit ? Py_True : Py_False,
      "kernel_mode", s.kernel_mode,
      "runtime_events", s.runtime ? Py_True : Py_False,
      "kernel_ns", static_cast<long long>(s.kernel_ns),
      "sessions_configured", static_cast<long long>(s.sessions_configured),
      "sessions_started", static_cast<long long>(s.sessions_started),
      "sessions_processed", static_cast<long long>(s.sessions_processed),
      "correlations_seen", static_cast<long long>(s.correlations_seen),
      "correlations_unlinked", static_cast<long long>(s.correlations_unlinked),
      "correlations_outside_window", static_cast<long long>(s.correlations_outside_window),
      "kernels_emitted", static_cast<long long>(s.kernels_emitted),
      "runtime_events_emitted", static_cast<long long>(s.runtime_events_emitted),
      "last_custom_config", s.last_custom_config.data(),
      static_cast<Py_ssize_t>(s.last_custom_config.size()),
      "last_activity_types", types,
      "custom_configs", configs);
}

PyObject* py_reset_stats(PyObject*, PyObject*) {
  {
    std::lock_guard<std::mutex> lock(state().mu);
    State& s = state();
    s.sessions_configured = 0;
    s.sessions_started = 0;
    s.sessions_processed = 0;
    s.correlations_seen = 0;
    s.correlations_unlinked = 0;
    s.correlations_outside_window = 0;
    s.kernels_emitted = 0;
    s.runtime_events_emitted = 0;
    s.last_custom_config.clear();
    s.last_activity_types.clear();
    s.custom_configs.clear();
  }
  g_guard_sync_calls.store(0);
  Py_RETURN_NONE;
}

PyObject* py_no_kernel_ops(PyObject*, PyObject*) {
  std::vector<std::string> names(noKernelOps().begin(), noKernelOps().end());
  std::sort(names.begin(), names.end());
  PyObject* out = PyTuple_New(static_cast<Py_ssize_t>(names.size()));
  if (out == nullptr) {
    return nullptr;
  }
  for (size_t i = 0; i < names.size(); ++i) {
    PyObject* item = PyUnicode_FromString(names[i].c_str());
    if (item == nullptr) {
      Py_DECREF(out);
      return nullptr;
    }
    PyTuple_SET_ITEM(out, static_cast<Py_ssize_t>(i), item);
  }
  return out;
}

PyObject* py_has_profiler_factory(PyObject*, PyObject*) {
  return PyBool_FromLong(
      torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().hasFactory() ? 1 : 0);
}

PyMethodDef kMethods[] = {
    {"set_emit", py_set_emit, METH_O, "Emit device kernels (True) or none (False)."},
    {"get_emit", py_get_emit, METH_NOARGS, "Whether device kernels are emitted."},
    {"set_runtime_events", py_set_runtime_events, METH_O,
     "Emit a host-side <name>LaunchKernel event per kernel (True) or not."},
    {"set_kernel_ns", py_set_kernel_ns, METH_O, "Duration of every fake kernel, in ns."},
    {"set_kernel_mode", py_set_kernel_mode, METH_O, "Kernels: 0 none, 1 linked to ops, 2 unlinked."},
    {"set_session_hook", py_set_session_hook, METH_O,
     "hook(event, custom_config, device_requested) called at 'configure' and 'stop'."},
    {"guard_sync_calls", py_guard_sync_calls, METH_NOARGS,
     "Calls of the PrivateUse1 guard's synchronizeDevice (torch.accelerator.synchronize)."},
    {"stats", py_stats, METH_NOARGS, "Counters and what the plugin last received."},
    {"reset_stats", py_reset_stats, METH_NOARGS, "Zero the counters."},
    {"no_kernel_ops", py_no_kernel_ops, METH_NOARGS,
     "CPU op names that never get a kernel (sorted tuple)."},
    {"has_profiler_factory", py_has_profiler_factory, METH_NOARGS,
     "Whether torch's PrivateUse1 profiler registry holds a factory."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {
    PyModuleDef_HEAD_INIT,
    NPTB_STR(TORCH_EXTENSION_NAME),
    "PrivateUse1 kineto test plugin (see testbackend.py).",
    -1,
    kMethods,
};

}  // namespace nptb

PyMODINIT_FUNC NPTB_CONCAT(PyInit_, TORCH_EXTENSION_NAME)(void) {
  PyObject* m = PyModule_Create(&nptb::kModule);
  if (m == nullptr) {
    return nullptr;
  }
  PyModule_AddIntConstant(m, "DEVICE_ID", nptb::kDeviceId);
  PyModule_AddIntConstant(m, "STREAM_ID", nptb::kStreamId);
  PyModule_AddIntConstant(m, "LAUNCH_DELAY_NS", static_cast<long>(nptb::kLaunchDelayNs));
  return m;
}
