// Mechanism: kernels for convolution_overrideable and its backward.
// at::convolution sends devices it does not know to these two ops, whose
// default (CompositeExplicitAutograd) kernels only throw, so the boxed
// fallback never sees them: a backend has to register its own. Ours runs
// the CPU convolution over CPU twins of the same memory; autograd's formula
// for convolution_overrideable then calls the backward below.
#include "aten/HostAlias.h"

#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <torch/library.h>

namespace openreg {
namespace {

at::Tensor convolution(
    const at::Tensor& input,
    const at::Tensor& weight,
    const std::optional<at::Tensor>& bias,
    c10::IntArrayRef stride,
    c10::IntArrayRef padding,
    c10::IntArrayRef dilation,
    bool transposed,
    c10::IntArrayRef output_padding,
    int64_t groups) {
  HostAliases aliases;
  std::optional<at::Tensor> host_bias;
  if (bias.has_value()) {
    host_bias = aliases.to_cpu(*bias);
  }
  auto out = at::convolution(
      aliases.to_cpu(input), aliases.to_cpu(weight), host_bias, stride, padding,
      dilation, transposed, output_padding, groups);
  return aliases.to_openreg(out, input.device().index());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output,
    const at::Tensor& input,
    const at::Tensor& weight,
    c10::IntArrayRef stride,
    c10::IntArrayRef padding,
    c10::IntArrayRef dilation,
    bool transposed,
    c10::IntArrayRef output_padding,
    int64_t groups,
    std::array<bool, 3> output_mask) {
  HostAliases aliases;
  std::optional<at::IntArrayRef> bias_sizes;
  int64_t bias_size = transposed ? weight.size(1) * groups : weight.size(0);
  if (output_mask[2]) {
    bias_sizes = at::IntArrayRef(&bias_size, 1);
  }
  auto [gi, gw, gb] = at::convolution_backward(
      aliases.to_cpu(grad_output), aliases.to_cpu(input), aliases.to_cpu(weight),
      bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
      output_mask);
  auto device = input.device().index();
  return {aliases.to_openreg(gi, device), aliases.to_openreg(gw, device),
          aliases.to_openreg(gb, device)};
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", convolution);
  m.impl("convolution_backward_overrideable", convolution_backward);
}

} // namespace openreg
