// Mechanism: c10::impl::DeviceGuardImplInterface, registered with
// C10_REGISTER_GUARD_IMPL. PyTorch consults it whenever it needs to switch
// the current device (DeviceGuard, the autograd engine's per-device worker
// threads, torch.accelerator), to create streams (torch.Stream) and to
// record or wait on events (torch.Event).
//
// Execution on openreg is synchronous on the host, so a stream is an ordering
// token and an event is a timestamp taken when it is recorded. This is the
// smallest model that still gives every Stream/Event API a real answer.
#include "runtime/OpenRegRuntime.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <pthread.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>

namespace openreg {
namespace {

// Current device and current stream are per thread, as in CUDA. Plain
// thread_locals with trivial destructors: autograd worker threads may still
// run while the process exits, and must never observe a destroyed object.
thread_local c10::DeviceIndex tls_device = 0;
thread_local std::array<c10::StreamId, kDeviceCount> tls_stream{};

// Stream ids handed out by getNewStream; 0 is the default stream. An atomic
// is trivially destructible, so it outlives every thread safely.
std::atomic<c10::StreamId> next_stream_id{1};
constexpr c10::StreamId kPoolSize = 32;

// Set once an autograd device worker ("pt_autograd_N") has bound itself to
// an openreg device. torch_openreg drains those workers at exit (see
// torch_openreg/_register.py), and only needs to when they exist.
std::atomic<bool> autograd_workers_seen{false};

void note_autograd_worker() {
  if (autograd_workers_seen.load(std::memory_order_relaxed)) {
    return;
  }
  char name[16] = {0};
  if (pthread_getname_np(pthread_self(), name, sizeof(name)) == 0 &&
      std::strncmp(name, "pt_autograd", 11) == 0) {
    autograd_workers_seen = true;
  }
}

struct EventState {
  c10::DeviceIndex device;
  bool timing;
  bool recorded = false;
  std::chrono::steady_clock::time_point when{};
};

struct OpenRegGuardImpl final : c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType static_type = c10::DeviceType::PrivateUse1;

  c10::DeviceType type() const override {
    return static_type;
  }

  c10::Device exchangeDevice(c10::Device d) const override {
    auto old = getDevice();
    if (d.index() != old.index()) {
      set_device(d.index());
    }
    return old;
  }

  c10::Device getDevice() const override {
    return c10::Device(static_type, current_device());
  }

  // Called directly (not via exchangeDevice) by the autograd engine when a
  // device worker thread starts.
  void setDevice(c10::Device d) const override {
    TORCH_INTERNAL_ASSERT(d.type() == static_type);
    set_device(d.index());
    note_autograd_worker();
  }

  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < kDeviceCount) {
      tls_device = d.index();
    }
  }

  c10::Stream getStream(c10::Device d) const override {
    auto index = resolve(d);
    return c10::Stream(c10::Stream::UNSAFE, device_of(index), tls_stream[index]);
  }

  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::UNSAFE, device_of(resolve(d)), 0);
  }

  c10::Stream getStreamFromGlobalPool(c10::Device d, bool /*high_priority*/)
      const override {
    auto id = 1 + (next_stream_id++ % kPoolSize);
    return c10::Stream(c10::Stream::UNSAFE, device_of(resolve(d)), id);
  }

  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override {
    return c10::Stream(
        c10::Stream::UNSAFE, device_of(resolve(d)), next_stream_id++);
  }

  c10::Stream exchangeStream(c10::Stream s) const override {
    auto index = resolve(s.device());
    auto old = c10::Stream(c10::Stream::UNSAFE, device_of(index), tls_stream[index]);
    tls_stream[index] = s.id();
    return old;
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return device_count();
  }

  // Events -----------------------------------------------------------------

  void record(
      void** event,
      const c10::Stream& stream,
      const c10::DeviceIndex device_index,
      const c10::EventFlag flag) const override {
    TORCH_CHECK(
        device_index == -1 || device_index == stream.device_index(),
        "Event device index ", device_index,
        " does not match recording stream's device index ",
        stream.device_index(), ".");
    auto* state = static_cast<EventState*>(*event);
    if (state == nullptr) {
      state = new EventState{
          stream.device_index(), flag == c10::EventFlag::BACKEND_DEFAULT};
      *event = state;
    }
    // All work queued on the stream has already run: now is when it ends.
    state->recorded = true;
    state->when = std::chrono::steady_clock::now();
  }

  void block(void* event, const c10::Stream& /*stream*/) const override {
    // Waiting on an event that already happened (or was never recorded) is a
    // no-op, exactly as on CUDA.
    (void)event;
  }

  bool queryEvent(void* /*event*/) const override {
    return true;
  }

  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/)
      const noexcept override {
    delete static_cast<EventState*>(event);
  }

  void synchronizeEvent(void* /*event*/) const override {}

  double elapsedTime(
      void* start,
      void* end,
      const c10::DeviceIndex /*device_index*/) const override {
    auto* a = static_cast<EventState*>(start);
    auto* b = static_cast<EventState*>(end);
    TORCH_CHECK(
        a != nullptr && b != nullptr && a->recorded && b->recorded,
        "Both events must be recorded before calculating elapsed time.");
    TORCH_CHECK(
        a->timing && b->timing,
        "Both events must be created with argument 'enable_timing=True'.");
    return std::chrono::duration<double, std::milli>(b->when - a->when)
        .count();
  }

  // Streams ----------------------------------------------------------------

  bool queryStream(const c10::Stream& /*stream*/) const override {
    return true;
  }

  void synchronizeStream(const c10::Stream& /*stream*/) const override {}

  void synchronizeDevice(const c10::DeviceIndex index) const override {
    synchronize_device(index);
  }

  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&)
      const override {}

 private:
  static c10::DeviceIndex resolve(c10::Device d) {
    auto index = d.has_index() ? d.index() : current_device();
    check_device_index(index);
    return index;
  }
  static c10::Device device_of(c10::DeviceIndex index) {
    return c10::Device(static_type, index);
  }
};

} // namespace

c10::DeviceIndex device_count() noexcept {
  return kDeviceCount;
}

void check_device_index(c10::DeviceIndex index) {
  TORCH_CHECK(
      index >= 0 && index < kDeviceCount,
      "openreg error: invalid device ordinal ", static_cast<int>(index),
      " (openreg has ", static_cast<int>(kDeviceCount), " devices)");
}

c10::DeviceIndex current_device() noexcept {
  return tls_device;
}

void set_device(c10::DeviceIndex index) {
  check_device_index(index);
  tls_device = index;
}

void synchronize_device(c10::DeviceIndex index) {
  check_device_index(index);
}

bool autograd_workers_started() {
  return autograd_workers_seen.load();
}

// The registrar leaks the guard on purpose (see DeviceGuardImplInterface):
// autograd threads may call it during interpreter shutdown.
C10_REGISTER_GUARD_IMPL(PrivateUse1, OpenRegGuardImpl);

} // namespace openreg
