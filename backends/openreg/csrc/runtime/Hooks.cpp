// Mechanism: at::PrivateUse1HooksInterface, registered with
// at::RegisterPrivateUse1HooksInterface. These hooks are how device-generic
// PyTorch code asks questions about PrivateUse1 without knowing openreg:
// is it available, how many devices, which generator, is this pointer pinned,
// which allocator pins host memory, how to resize a storage. They also make
// openreg the current accelerator (torch.accelerator.*).
#include "runtime/OpenRegRuntime.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/StorageImpl.h>

#include <cstring>

namespace openreg {
namespace {

struct OpenRegHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override {
    return true;
  }
  bool isAvailable() const override {
    return device_count() > 0;
  }
  bool hasPrimaryContext(c10::DeviceIndex index) const override {
    check_device_index(index);
    return true; // nothing to initialise lazily
  }

  c10::DeviceIndex deviceCount() const override {
    return device_count();
  }
  void setCurrentDevice(c10::DeviceIndex index) const override {
    set_device(index);
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return current_device();
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    auto old = current_device();
    set_device(index);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    return exchangeDevice(index);
  }

  const at::Generator& getDefaultGenerator(
      c10::DeviceIndex index) const override {
    return default_generator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return make_generator(index);
  }

  at::Device getDeviceFromPtr(void* /*data*/) const override {
    // Device memory is host memory, so a pointer alone cannot tell devices
    // apart; the current device is the best answer.
    return c10::Device(c10::DeviceType::PrivateUse1, current_device());
  }

  bool isPinnedPtr(const void* data) const override {
    return is_pinned_host_ptr(data);
  }
  c10::Allocator* getPinnedMemoryAllocator() const override {
    return pinned_host_allocator();
  }

  // Used by UntypedStorage.resize_() on an openreg storage.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize)
      const override {
    auto* impl = storage.unsafeGetStorageImpl();
    TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
    auto old_device = current_device();
    set_device(impl->device().index());
    c10::DataPtr fresh = impl->allocator()->allocate(newsize);
    set_device(old_device);
    auto keep = std::min(newsize, impl->nbytes());
    if (keep > 0) {
      std::memcpy(fresh.get(), impl->data(), keep);
    }
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(newsize);
  }
};

// Runs when the shared library is loaded; the hooks object is never freed.
const bool registered = [] {
  at::RegisterPrivateUse1HooksInterface(new OpenRegHooks());
  return true;
}();

} // namespace
} // namespace openreg
