// Mechanism: explicit PrivateUse1 kernels (TORCH_LIBRARY_IMPL(aten,
// PrivateUse1, m)) for the operators that create or re-point storage. These
// are the ops every backend must own, because they decide which allocator
// and which device a storage lives on: empty, empty_strided, resize_, set_.
// Pure view ops are registered too; they only rewrite metadata, and the
// device-generic at::native implementations are cheaper than the fallback.
#include "runtime/OpenRegRuntime.h"

#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace openreg {
namespace {

const c10::DispatchKeySet kOpenRegKeys(c10::DispatchKey::PrivateUse1);

void check_layout(std::optional<c10::Layout> layout) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      layout.value_or(c10::kStrided) == c10::kStrided,
      "The openreg device supports only strided tensors, got layout ", *layout);
}

at::Tensor empty_memory_format(
    c10::IntArrayRef size,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> /*pin_memory*/,
    std::optional<c10::MemoryFormat> memory_format) {
  check_layout(layout);
  // The allocator serves the current device; the guard makes that the
  // requested one (and rejects a bad ordinal like CUDA does).
  c10::OptionalDeviceGuard guard(device);
  return at::detail::empty_generic(
      size, device_allocator(), kOpenRegKeys, c10::dtype_or_default(dtype),
      memory_format);
}

at::Tensor empty_strided(
    c10::IntArrayRef size,
    c10::IntArrayRef stride,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> /*pin_memory*/) {
  check_layout(layout);
  c10::OptionalDeviceGuard guard(device);
  return at::detail::empty_strided_generic(
      size, stride, device_allocator(), kOpenRegKeys,
      c10::dtype_or_default(dtype));
}

// The CPU versions of these are device-agnostic except for where new bytes
// come from: the storage's own allocator (ours), on the current device.
const at::Tensor& resize_(
    const at::Tensor& self,
    c10::IntArrayRef size,
    std::optional<c10::MemoryFormat> memory_format) {
  c10::DeviceGuard guard(self.device());
  return at::native::resize_(self, size, memory_format);
}

at::Tensor& set_storage(
    at::Tensor& self,
    c10::Storage source,
    int64_t storage_offset,
    c10::IntArrayRef size,
    c10::IntArrayRef stride) {
  c10::DeviceGuard guard(self.device());
  return at::native::set_storage_cpu_(self, std::move(source), storage_offset, size, stride);
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::DeviceGuard guard(self.device());
  c10::Storage empty(
      c10::Storage::use_byte_size_t(), 0, device_allocator(), /*resizable=*/true);
  return at::native::set_storage_cpu_(self, std::move(empty), 0, {0}, {});
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage_storage_offset", set_storage);
  m.impl("set_.source_Storage", at::native::set_);
  m.impl("set_.source_Tensor", at::native::set_tensor_);
  m.impl("set_", set_empty);
  m.impl("view", at::native::view);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("unfold", at::native::unfold);
}

} // namespace openreg
