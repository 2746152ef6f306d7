// The runtime of the openreg device: what a real vendor would implement on
// top of its driver. "Device memory" is ordinary host memory, which is what
// lets csrc/aten reuse CPU kernels without copies.
//
// Everything here is reachable from other translation units only through this
// header; the operator side (csrc/aten) never touches runtime internals.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Device.h>

namespace openreg {

// Two devices, so that multi-device code paths (guards, index checks,
// cross-device copies) are exercised by the tests.
constexpr c10::DeviceIndex kDeviceCount = 2;

c10::DeviceIndex device_count() noexcept;
// Raises the same kind of error CUDA raises for a bad ordinal.
void check_device_index(c10::DeviceIndex index);
c10::DeviceIndex current_device() noexcept;
void set_device(c10::DeviceIndex index);
// Every command runs synchronously on the host: nothing to wait for.
void synchronize_device(c10::DeviceIndex index);
// Whether the autograd engine has started its openreg worker threads.
bool autograd_workers_started();

// Device memory (Allocator.cpp).
c10::DeviceAllocator* device_allocator();
// Memory produced by a CPU kernel and adopted as openreg memory without a
// copy is accounted here so that memory_allocated() stays truthful.
void account_adopted(c10::DeviceIndex device, size_t bytes, bool allocated);

// Pinned host memory (Allocator.cpp).
c10::Allocator* pinned_host_allocator();
bool is_pinned_host_ptr(const void* ptr);

// Random numbers (Generator.cpp).
const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator make_generator(c10::DeviceIndex device);
// The CPU generator whose state an openreg generator owns; the operator
// fallback hands it to CPU kernels so they draw from openreg's RNG stream.
at::Generator host_generator(const at::Generator& openreg_generator);

} // namespace openreg
