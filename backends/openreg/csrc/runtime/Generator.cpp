// Mechanism: a c10::GeneratorImpl for PrivateUse1. The hooks (Hooks.cpp)
// return one default generator per device, and torch.Generator("openreg")
// gets fresh ones from make_generator().
//
// openreg runs CPU kernels, and CPU random kernels only accept a
// CPUGeneratorImpl. So an openreg generator owns a private CPU generator that
// holds the actual Mersenne-Twister state; the operator fallback passes that
// one to the CPU kernel. Seeding, state save/restore and cloning all act on
// it, which keeps the openreg stream of random numbers separate from the
// CPU's torch.default_generator.
//
// Version guard: torch 2.14 added the virtual GeneratorImpl::philox_state
// (torch.Generator.philox_state), which only Philox generators implement. The
// sources build against 2.13 and later, so the override that says why openreg
// has no Philox stream exists only where the base class declares it.
#include "runtime/OpenRegRuntime.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>
#include <c10/util/irange.h>
#include <torch/version.h>

#define OPENREG_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||          \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#include <mutex>
#include <vector>

namespace openreg {
namespace {

class OpenRegGenerator final : public c10::GeneratorImpl {
 public:
  OpenRegGenerator(c10::DeviceIndex device, uint64_t seed)
      : c10::GeneratorImpl(
            c10::Device(c10::DeviceType::PrivateUse1, device),
            c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        host_(at::make_generator<at::CPUGeneratorImpl>(seed)) {}

  void set_current_seed(uint64_t seed) override {
    host_.set_current_seed(seed);
  }
  uint64_t current_seed() const override {
    return host_.current_seed();
  }
  uint64_t seed() override {
    return host_.seed();
  }
  void set_offset(uint64_t offset) override {
    host_.set_offset(offset);
  }
  uint64_t get_offset() const override {
    return host_.get_offset();
  }
  void set_state(const c10::TensorImpl& state) override {
    host_.unsafeGetGeneratorImpl()->set_state(state);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    return host_.unsafeGetGeneratorImpl()->get_state();
  }

#if OPENREG_TORCH_AT_LEAST(2, 14)
  void philox_state(
      uint64_t /*increment*/,
      at::Tensor& /*seed*/,
      at::Tensor& /*offset*/,
      at::Tensor& /*intragraph_offset*/) override {
    TORCH_CHECK(
        false,
        "philox_state: the openreg generator is not Philox-based (it draws "
        "from a CPU Mersenne-Twister generator), so it has no Philox stream "
        "to reserve");
  }
#endif

  const at::Generator& host() const {
    return host_;
  }

 private:
  OpenRegGenerator* clone_impl() const override {
    auto* copy = new OpenRegGenerator(device().index(), 0);
    copy->host_ = host_.clone();
    return copy;
  }

  at::Generator host_;
};

} // namespace

const at::Generator& default_generator(c10::DeviceIndex device) {
  // Built once, never destroyed (see Allocator.cpp for why).
  static std::vector<at::Generator>* generators = [] {
    auto* v = new std::vector<at::Generator>();
    for (auto i : c10::irange(kDeviceCount)) {
      v->push_back(at::make_generator<OpenRegGenerator>(
          static_cast<c10::DeviceIndex>(i), c10::default_rng_seed_val));
    }
    return v;
  }();
  if (device == -1) {
    device = current_device();
  }
  check_device_index(device);
  return (*generators)[device];
}

at::Generator make_generator(c10::DeviceIndex device) {
  if (device == -1) {
    device = current_device();
  }
  check_device_index(device);
  return at::make_generator<OpenRegGenerator>(device, c10::default_rng_seed_val);
}

at::Generator host_generator(const at::Generator& generator) {
  auto* impl = dynamic_cast<OpenRegGenerator*>(generator.unsafeGetGeneratorImpl());
  TORCH_CHECK(impl != nullptr, "expected an openreg generator, got one for ",
              generator.device());
  return impl->host();
}

} // namespace openreg
