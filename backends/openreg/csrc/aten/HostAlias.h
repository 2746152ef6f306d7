// openreg memory is host memory, so an openreg tensor and a CPU tensor can
// share the same bytes. HostAliases builds those CPU twins for the duration
// of one operator call and maps what a CPU kernel returns back to openreg,
// without copying data in either direction. The operator fallback, copies
// and convolution all go through it.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

namespace openreg {

class HostAliases {
 public:
  // An openreg tensor -> a CPU tensor over the same storage bytes, with the
  // same sizes, strides, offset and conj/neg bits. Two openreg tensors that
  // share a storage get CPU twins that share one CPU storage, so the CPU
  // kernel's aliasing and overlap checks see the truth. Anything else (CPU
  // tensors, undefined tensors) passes through unchanged.
  at::Tensor to_cpu(const at::Tensor& t);

  // A CPU tensor returned by a CPU kernel -> an openreg tensor on `device`.
  // A view of a twin becomes a view of the original openreg storage; new
  // memory is adopted as openreg memory (no copy).
  at::Tensor to_openreg(const at::Tensor& cpu, c10::DeviceIndex device);

  // `host` is the twin of `dev` and the CPU kernel may have resized or
  // re-strided it (out= and in-place arguments): make `dev` match.
  void sync_back(const at::Tensor& dev, const at::Tensor& host);

 private:
  struct Pair {
    c10::Storage device; // the openreg storage
    c10::Storage host; // its CPU twin
    const void* data; // the twin's bytes when created, to detect reallocation
    size_t nbytes;
  };
  Pair* find_host(const c10::StorageImpl* host);
  c10::Storage device_storage_for(const c10::Storage& host, c10::DeviceIndex device);

  c10::SmallVector<Pair, 4> pairs_;
};

// Wraps CPU memory as an openreg storage that keeps the CPU storage alive,
// and accounts it in the openreg allocator's statistics.
c10::Storage adopt_host_storage(const c10::Storage& host, c10::DeviceIndex device);

} // namespace openreg
