// Mechanism: explicit kernels for random operators whose schema has no
// Generator argument. The fallback hands openreg's generator to every op
// that takes one; a CPU kernel that draws random numbers without taking one
// would silently use the CPU's default generator. native_dropout (what
// F.dropout uses on accelerators) is such an op, so openreg builds it from
// bernoulli_, which does take a generator.
#include <ATen/core/Tensor.h>
#include <ATen/ops/bernoulli.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/ones_like.h>
#include <torch/library.h>

namespace openreg {
namespace {

std::tuple<at::Tensor, at::Tensor> native_dropout(
    const at::Tensor& input,
    double p,
    std::optional<bool> train) {
  if (input.numel() == 0 || !train.value_or(true)) {
    return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  }
  double keep = 1.0 - p;
  double scale = keep == 0.0 ? 0.0 : 1.0 / keep;
  auto mask = at::empty_like(input).bernoulli_(keep);
  auto output = input.mul(mask).mul_(scale);
  return {output, mask.to(at::kBool)};
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("native_dropout", native_dropout);
}

} // namespace openreg
