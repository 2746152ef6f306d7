#include "aten/HostAlias.h"

#include "runtime/OpenRegRuntime.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>

namespace openreg {
namespace {

at::Tensor make_like(
    c10::Storage storage,
    c10::DispatchKey key,
    const at::Tensor& like) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(key), like.dtype());
  impl->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  if (like.is_conj()) {
    impl->_set_conj(true);
  }
  if (like.is_neg()) {
    impl->_set_neg(true);
  }
  return at::Tensor(std::move(impl));
}

struct Adopted {
  c10::Storage host;
  c10::DeviceIndex device;
  size_t nbytes;
};

void release_adopted(void* ctx) {
  auto* adopted = static_cast<Adopted*>(ctx);
  account_adopted(adopted->device, adopted->nbytes, false);
  delete adopted;
}

} // namespace

c10::Storage adopt_host_storage(const c10::Storage& host, c10::DeviceIndex device) {
  auto nbytes = host.nbytes();
  void* data = host.mutable_data();
  account_adopted(device, nbytes, true);
  c10::DataPtr ptr(
      data, new Adopted{host, device, nbytes}, &release_adopted,
      c10::Device(c10::DeviceType::PrivateUse1, device));
  // Resizable, with the openreg allocator: a later resize_ moves the data
  // into openreg-allocated memory and drops the CPU storage.
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), nbytes, std::move(ptr),
      device_allocator(), /*resizable=*/true));
}

at::Tensor HostAliases::to_cpu(const at::Tensor& t) {
  if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1) {
    return t;
  }
  const auto& storage = t.storage();
  auto* key = storage.unsafeGetStorageImpl();
  Pair* pair = nullptr;
  for (auto& p : pairs_) {
    if (p.device.unsafeGetStorageImpl() == key) {
      pair = &p;
      break;
    }
  }
  if (pair == nullptr) {
    void* data = storage.mutable_data();
    auto nbytes = storage.nbytes();
    // Non-owning: the openreg storage owns the bytes and outlives the call.
    // Resizable with the CPU allocator, so an out= kernel may grow it; then
    // sync_back() adopts the new memory.
    c10::Storage host(c10::make_intrusive<c10::StorageImpl>(
        c10::StorageImpl::use_byte_size_t(), nbytes,
        c10::DataPtr(data, c10::Device(c10::DeviceType::CPU)),
        c10::GetCPUAllocator(), /*resizable=*/true));
    pairs_.push_back(Pair{storage, std::move(host), data, nbytes});
    pair = &pairs_.back();
  }
  return make_like(pair->host, c10::DispatchKey::CPU, t);
}

HostAliases::Pair* HostAliases::find_host(const c10::StorageImpl* host) {
  for (auto& p : pairs_) {
    if (p.host.unsafeGetStorageImpl() == host) {
      return &p;
    }
  }
  return nullptr;
}

c10::Storage HostAliases::device_storage_for(
    const c10::Storage& host,
    c10::DeviceIndex device) {
  if (auto* pair = find_host(host.unsafeGetStorageImpl())) {
    return pair->device;
  }
  // New memory from the CPU kernel. Remember it, so several outputs viewing
  // one new buffer (split, unbind, ...) keep sharing it on openreg.
  auto adopted = adopt_host_storage(host, device);
  pairs_.push_back(Pair{adopted, host, host.data(), host.nbytes()});
  return adopted;
}

at::Tensor HostAliases::to_openreg(const at::Tensor& cpu, c10::DeviceIndex device) {
  if (!cpu.defined() || cpu.device().type() != c10::DeviceType::CPU) {
    return cpu;
  }
  TORCH_CHECK_NOT_IMPLEMENTED(
      cpu.layout() == c10::kStrided,
      "the openreg device supports only strided tensors, got a result with layout ",
      cpu.layout());
  return make_like(
      device_storage_for(cpu.storage(), device), c10::DispatchKey::PrivateUse1, cpu);
}

void HostAliases::sync_back(const at::Tensor& dev, const at::Tensor& host) {
  auto* dimpl = dev.unsafeGetTensorImpl();
  const auto& hstorage = host.storage();
  auto* pair = find_host(hstorage.unsafeGetStorageImpl());
  if (pair == nullptr) {
    // The kernel gave the twin a different storage (set_ and friends).
    dimpl->set_storage_keep_dtype(device_storage_for(hstorage, dev.device().index()));
  } else {
    if (pair->host.data() != pair->data || pair->host.nbytes() != pair->nbytes) {
      // The kernel grew the twin's storage, which moved it to new CPU
      // memory; the openreg storage (and all its views) adopts that memory.
      auto adopted = adopt_host_storage(pair->host, dev.device().index());
      auto* dstorage = pair->device.unsafeGetStorageImpl();
      dstorage->set_data_ptr_noswap(
          adopted.unsafeGetStorageImpl()->set_data_ptr(
              c10::DataPtr(nullptr, adopted.device())));
      dstorage->set_nbytes(pair->host.nbytes());
      pair->data = pair->host.data();
      pair->nbytes = pair->host.nbytes();
    }
    if (dimpl->storage().unsafeGetStorageImpl() !=
        pair->device.unsafeGetStorageImpl()) {
      dimpl->set_storage_keep_dtype(pair->device);
    }
  }
  if (dev.sizes() != host.sizes() || dev.strides() != host.strides() ||
      dev.storage_offset() != host.storage_offset()) {
    dimpl->set_sizes_and_strides(host.sizes(), host.strides(), host.storage_offset());
  }
}

} // namespace openreg
