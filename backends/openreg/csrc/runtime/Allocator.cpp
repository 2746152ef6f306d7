// Mechanism: c10::DeviceAllocator registered for PrivateUse1 with
// REGISTER_ALLOCATOR. Every openreg storage is carved from here (empty,
// empty_strided, storage resize, torch.UntypedStorage(device="openreg")), and
// its per-device DeviceStats feed torch.openreg.memory_allocated() and
// torch.accelerator's memory API.
//
// A second, plain c10::Allocator provides "pinned" host memory; the hooks
// (Hooks.cpp) hand it to pin_memory() and recognise its pointers.
#include "runtime/OpenRegRuntime.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>
#include <c10/core/impl/alloc_cpu.h>

#include <array>
#include <mutex>
#include <unordered_set>

namespace openreg {
namespace {

using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingAllocator::StatType;

// What the deleter needs to undo the accounting of one allocation.
struct Block {
  void* ptr;
  size_t size;
  c10::DeviceIndex device;
};

class HostMemoryDeviceAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    auto device = current_device();
    void* ptr = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    account(device, nbytes, true);
    auto* block = new Block{ptr, nbytes, device};
    return {ptr, block, &HostMemoryDeviceAllocator::release,
            c10::Device(c10::DeviceType::PrivateUse1, device)};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return nullptr; // every DataPtr carries its Block as context
  }

  void copy_data(void* dest, const void* src, std::size_t count)
      const override {
    default_copy_data(dest, src, count);
  }

  bool initialized() override {
    return true;
  }

  // Nothing is cached: freed blocks go straight back to the C heap, so the
  // cache is always empty and reserved == allocated.
  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {}

  void recordStream(const c10::DataPtr&, c10::Stream) override {}

  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    check_device_index(device);
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_[device];
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    check_device_index(device);
    std::lock_guard<std::mutex> lock(mutex_);
    auto& s = stats_[device];
    for_each_stat(s, [](auto& stat) { stat.reset_accumulated(); });
    s.num_device_alloc = 0;
    s.num_device_free = 0;
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    check_device_index(device);
    std::lock_guard<std::mutex> lock(mutex_);
    for_each_stat(stats_[device], [](auto& stat) { stat.reset_peak(); });
  }

  template <typename F>
  static void for_each_stat(DeviceStats& s, F&& f) {
    for (auto* arr : {&s.allocation, &s.segment, &s.active, &s.allocated_bytes,
                      &s.reserved_bytes, &s.active_bytes, &s.requested_bytes}) {
      for (auto& stat : *arr) {
        f(stat);
      }
    }
  }

  void account(c10::DeviceIndex device, size_t nbytes, bool allocated) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& s = stats_[device];
    auto agg = static_cast<size_t>(StatType::AGGREGATE);
    // Every block is one allocation, one segment and one active block, all of nbytes.
    auto update = [allocated](auto& stat, size_t amount) {
      allocated ? stat.increase(amount) : stat.decrease(amount);
    };
    for (auto* counted : {&s.allocation, &s.segment, &s.active}) {
      update((*counted)[agg], 1);
    }
    for (auto* sized : {&s.allocated_bytes, &s.reserved_bytes, &s.active_bytes, &s.requested_bytes}) {
      update((*sized)[agg], nbytes);
    }
    ++(allocated ? s.num_device_alloc : s.num_device_free);
  }

 private:
  static void release(void* ctx) {
    auto* block = static_cast<Block*>(ctx);
    c10::free_cpu(block->ptr);
    static_cast<HostMemoryDeviceAllocator*>(device_allocator())
        ->account(block->device, block->size, false);
    delete block;
  }

  std::mutex mutex_;
  std::array<DeviceStats, kDeviceCount> stats_;
};

// Heap-allocated and never freed: storages (and the autograd engine's
// threads) may release memory after static destructors have started to run.
HostMemoryDeviceAllocator* const g_device_allocator =
    new HostMemoryDeviceAllocator();

// Pinned memory is ordinary host memory that the allocator remembers, so
// is_pinned() can tell it apart from pageable memory. A real backend would
// page-lock it with its driver here.
class PinnedHostAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (ptr != nullptr) {
      std::lock_guard<std::mutex> lock(mutex_);
      pinned_.insert(ptr);
    }
    return {ptr, ptr, &PinnedHostAllocator::release,
            c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &PinnedHostAllocator::release;
  }

  void copy_data(void* dest, const void* src, std::size_t count)
      const override {
    default_copy_data(dest, src, count);
  }

  bool contains(const void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    return pinned_.count(const_cast<void*>(ptr)) != 0;
  }

 private:
  static void release(void* ptr);
  std::mutex mutex_;
  std::unordered_set<void*> pinned_;
};

PinnedHostAllocator* const g_pinned_allocator = new PinnedHostAllocator();

void PinnedHostAllocator::release(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(g_pinned_allocator->mutex_);
    g_pinned_allocator->pinned_.erase(ptr);
  }
  c10::free_cpu(ptr);
}

} // namespace

c10::DeviceAllocator* device_allocator() {
  return g_device_allocator;
}

void account_adopted(c10::DeviceIndex device, size_t bytes, bool allocated) {
  g_device_allocator->account(device, bytes, allocated);
}

c10::Allocator* pinned_host_allocator() {
  return g_pinned_allocator;
}

bool is_pinned_host_ptr(const void* ptr) {
  return ptr != nullptr && g_pinned_allocator->contains(ptr);
}

// c10::GetAllocator(PrivateUse1) and c10::getDeviceAllocator(PrivateUse1)
// now find us.
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, g_device_allocator);

} // namespace openreg
