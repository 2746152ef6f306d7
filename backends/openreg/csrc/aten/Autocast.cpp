// Mechanism: autocast kernels for the AutocastPrivateUse1 dispatch key, which
// is active inside torch.autocast("openreg"). We reuse PyTorch's own op lists
// (ATen/autocast_mode.h): matmul/linear/conv-like ops run in the autocast
// dtype (float16 or bfloat16), numerically sensitive ops in float32, and
// mixed-precision ops promote to the widest input type. Every other
// operator falls through to the next key untouched.
//
// The ~150 kernels are registered on first use, not when the library loads:
// torch.autocast("openreg") always asks torch.openreg.get_amp_supported_dtype()
// first, which calls register_autocast_kernels(). Registering them at load time
// cost about 6 ms of every `import torch` (schema inference for each kernel).
#include <ATen/autocast_mode.h>
#include <torch/library.h>

#include <mutex>

namespace openreg {

// The op-list macros spell these types unqualified.
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

#define OPENREG_LOWER_PRECISION_FP(...) \
  KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define OPENREG_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define OPENREG_FP32_SET_OPT_DTYPE(...) \
  KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define OPENREG_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

void register_autocast_lists(torch::Library& m);

void register_autocast_kernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Kept alive for the life of the process: the registrations end with it.
    static auto* library = new torch::Library(
        torch::Library::IMPL, "aten", c10::DispatchKey::AutocastPrivateUse1, __FILE__, __LINE__);
    auto& m = *library;
    register_autocast_lists(m);
  });
}

void register_autocast_lists(torch::Library& m) {
  AT_FORALL_LOWER_PRECISION_FP(OPENREG_LOWER_PRECISION_FP)
  AT_FORALL_FP32(OPENREG_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(OPENREG_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(
      KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(OPENREG_PROMOTE)
}

} // namespace openreg
