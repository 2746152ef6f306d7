// Mechanism: _copy_from, the hook aten::copy_ calls when one side is on a
// device ATen does not know. It serves every transfer: .to("openreg"),
// .cpu(), openreg:0 <-> openreg:1 and dtype-converting copies.
//
// Both sides are host memory, so the copy is the CPU copy_ between CPU twins
// (HostAliases), which already handles dtype conversion, broadcasting,
// strides and the conjugate/negative bits.
#include "aten/HostAlias.h"

#include <ATen/ops/copy_ops.h>
#include <ATen/ops/resize_ops.h>
#include <torch/library.h>

namespace openreg {
namespace {

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  HostAliases aliases;
  auto host_dst = aliases.to_cpu(dst);
  auto host_src = aliases.to_cpu(self);
  at::_ops::copy_::call(host_dst, host_src, non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::_ops::resize_::call(dst, self.sym_sizes(), std::nullopt);
  return copy_from(self, dst, false);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
}

// A conjugate (or negative) view reaching _copy_from would make the
// Conjugate fallback materialise it, which itself copies, which calls
// _copy_from again: infinite recursion. Falling through lets our kernel see
// the bit and the CPU copy_ resolve it.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
}

} // namespace openreg
