// Mechanism: custom operators (TORCH_LIBRARY(openreg, m)) as the bridge from
// Python to the runtime. torch_openreg calls torch.ops.openreg.* for what
// PyTorch has no device-generic API for (per-device memory statistics, RNG
// state of a given device, ...). This keeps the extension free of pybind11
// and Python.h: the shared library is loaded with torch.ops.load_library.
#include "runtime/OpenRegRuntime.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/Generator.h>
#include <torch/library.h>

#include <mutex>

namespace openreg {

const char* fallback_kind(); // Fallback.cpp
void register_autocast_kernels(); // Autocast.cpp

namespace {

using c10::CachingAllocator::StatType;

c10::DeviceIndex index_of(int64_t device) {
  auto index = static_cast<c10::DeviceIndex>(device == -1 ? current_device() : device);
  check_device_index(index);
  return index;
}

// [allocated, max allocated, reserved, max reserved, number of live blocks]
std::vector<int64_t> memory_stats(int64_t device) {
  auto stats = device_allocator()->getDeviceStats(index_of(device));
  auto agg = static_cast<size_t>(StatType::AGGREGATE);
  return {stats.allocated_bytes[agg].current, stats.allocated_bytes[agg].peak,
          stats.reserved_bytes[agg].current, stats.reserved_bytes[agg].peak,
          stats.allocation[agg].current};
}

void reset_peak_memory_stats(int64_t device) {
  device_allocator()->resetPeakStats(index_of(device));
}

void empty_cache() {
  device_allocator()->emptyCache();
}

int64_t exchange_device(int64_t device) {
  auto old = current_device();
  if (device >= 0) {
    set_device(static_cast<c10::DeviceIndex>(device));
  }
  return old;
}

void manual_seed(int64_t device, int64_t seed) {
  auto gen = default_generator(index_of(device));
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_current_seed(static_cast<uint64_t>(seed));
}

int64_t seed(int64_t device) {
  auto gen = default_generator(index_of(device));
  std::lock_guard<std::mutex> lock(gen.mutex());
  return static_cast<int64_t>(gen.seed());
}

int64_t initial_seed(int64_t device) {
  auto gen = default_generator(index_of(device));
  std::lock_guard<std::mutex> lock(gen.mutex());
  return static_cast<int64_t>(gen.current_seed());
}

at::Tensor get_rng_state(int64_t device) {
  auto gen = default_generator(index_of(device));
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_rng_state(int64_t device, const at::Tensor& state) {
  auto gen = default_generator(index_of(device));
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

} // namespace

TORCH_LIBRARY(openreg, m) {
  m.def("device_count() -> int", [] { return static_cast<int64_t>(device_count()); });
  m.def("current_device() -> int", [] { return static_cast<int64_t>(current_device()); });
  m.def("set_device(int device) -> ()", [](int64_t d) { set_device(index_of(d)); });
  m.def("exchange_device(int device) -> int", exchange_device);
  m.def("synchronize(int device) -> ()", [](int64_t d) { synchronize_device(index_of(d)); });
  m.def("memory_stats(int device) -> int[]", memory_stats);
  m.def("reset_peak_memory_stats(int device) -> ()", reset_peak_memory_stats);
  m.def("empty_cache() -> ()", empty_cache);
  m.def("manual_seed(int device, int seed) -> ()", manual_seed);
  m.def("seed(int device) -> int", seed);
  m.def("initial_seed(int device) -> int", initial_seed);
  m.def("get_rng_state(int device) -> Tensor", get_rng_state);
  m.def("set_rng_state(int device, Tensor state) -> ()", set_rng_state);
  m.def("autograd_workers_started() -> bool", autograd_workers_started);
  m.def("fallback_kind() -> str", [] { return std::string(fallback_kind()); });
  m.def("register_autocast_kernels() -> ()", register_autocast_kernels);
}

} // namespace openreg
