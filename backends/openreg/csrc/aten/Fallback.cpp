// Mechanism: a boxed fallback for the PrivateUse1 dispatch key
// (TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(...); }). Every aten
// operator without an explicit openreg kernel lands here.
//
// Because openreg memory is host memory, the fallback does not copy: it
// rewrites the boxed arguments into CPU twins over the same bytes
// (HostAliases), redispatches straight to the CPU kernel, and maps the
// results back. Device arguments become CPU, and random operators get the
// CPU generator owned by the openreg generator, so they draw from openreg's
// random stream.
//
// TORCH_OPENREG_COPYING_FALLBACK=1 (read when the library loads) registers
// PyTorch's stock at::native::cpu_fallback instead, which copies every
// argument to the CPU and every result back: the baseline that
// bench/openreg_ops.py compares against.
#include "aten/HostAlias.h"
#include "runtime/OpenRegRuntime.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/CPUFallback.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#include <cstdlib>
#include <cstring>
#include <optional>

namespace openreg {
namespace {

bool is_openreg(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

bool is_optional_generator(const c10::Argument& arg) {
  const auto& type = arg.type();
  return type->kind() == c10::TypeKind::OptionalType &&
      type->containedType(0)->kind() == c10::TypeKind::GeneratorType;
}

struct Twin {
  at::Tensor device;
  at::Tensor host;
  bool written;
};

class CallState {
 public:
  explicit CallState(const c10::OperatorHandle& op) : op_(op) {}

  at::Tensor to_cpu(const at::Tensor& t, bool written) {
    if (!is_openreg(t)) {
      return t;
    }
    auto index = t.device().index();
    if (!tensor_device_) {
      tensor_device_ = index;
    } else if (*tensor_device_ != index) {
      TORCH_CHECK(false,
          "Expected all tensors to be on the same device, but found at least "
          "two devices, openreg:", static_cast<int>(*tensor_device_),
          " and openreg:", static_cast<int>(index), "! (when running ",
          op_.operator_name(), ")");
    }
    auto host = aliases_.to_cpu(t);
    twins_.push_back(Twin{t, host, written});
    return host;
  }

  c10::IValue to_cpu(const c10::IValue& v, bool written) {
    if (v.isTensor()) {
      return to_cpu(v.toTensor(), written);
    }
    if (v.isTensorList()) {
      // c10::List has reference semantics: build a new list rather than
      // rewriting the caller's.
      auto list = v.toTensorList();
      c10::List<at::Tensor> out;
      out.reserve(list.size());
      for (const at::Tensor& t : list) {
        out.push_back(to_cpu(t, written));
      }
      return out;
    }
    if (v.isList()) { // e.g. Tensor?[] indices
      auto list = v.toList();
      c10::impl::GenericList out(list.elementType());
      out.reserve(list.size());
      for (const c10::IValue& e : list) {
        out.push_back(to_cpu(e, written));
      }
      return out;
    }
    if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
      auto d = v.toDevice();
      auto index = d.has_index() ? d.index() : current_device();
      check_device_index(index);
      device_arg_ = index;
      return c10::Device(c10::DeviceType::CPU);
    }
    if (v.isGenerator()) {
      const auto& g = v.toGenerator();
      if (g.device().type() == c10::DeviceType::PrivateUse1) {
        return host_generator(g);
      }
    }
    return v;
  }

  c10::IValue to_openreg(const c10::IValue& v) {
    if (v.isTensor()) {
      const auto& t = v.toTensor();
      // In-place and out= kernels return their argument: hand back the
      // caller's openreg tensor itself, not a new alias of it.
      for (const auto& twin : twins_) {
        if (twin.host.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) {
          return twin.device;
        }
      }
      TORCH_CHECK_NOT_IMPLEMENTED(
          !t.defined() || t.layout() == c10::kStrided,
          "The operator '", op_.operator_name(), "' is not implemented for "
          "the openreg device: it produces a ", t.layout(), " tensor and "
          "openreg supports only dense (strided) tensors.");
      return aliases_.to_openreg(t, result_device());
    }
    if (v.isTensorList()) {
      auto list = v.toTensorList();
      c10::List<at::Tensor> out;
      out.reserve(list.size());
      for (const at::Tensor& t : list) {
        out.push_back(to_openreg(t).toTensor());
      }
      return out;
    }
    if (v.isList()) {
      auto list = v.toList();
      c10::impl::GenericList out(list.elementType());
      out.reserve(list.size());
      for (const c10::IValue& e : list) {
        out.push_back(to_openreg(e));
      }
      return out;
    }
    return v;
  }

  void sync_written() {
    for (const auto& twin : twins_) {
      if (twin.written) {
        aliases_.sync_back(twin.device, twin.host);
      }
    }
  }

  c10::DeviceIndex result_device() const {
    if (device_arg_) {
      return *device_arg_;
    }
    return tensor_device_ ? *tensor_device_ : current_device();
  }

 private:
  const c10::OperatorHandle& op_;
  HostAliases aliases_;
  c10::SmallVector<Twin, 4> twins_;
  std::optional<c10::DeviceIndex> tensor_device_;
  std::optional<c10::DeviceIndex> device_arg_;
};

void zero_copy_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU),
      "The operator '", op.operator_name(),
      "' is not implemented for the openreg device: openreg runs CPU kernels "
      "and this operator has none.");
  const auto& schema = op.schema();
  const auto& arguments = schema.arguments();
  const auto num_args = arguments.size();
  const auto first = stack->size() - num_args;

  CallState state(op);
  c10::SmallVector<size_t, 2> default_generators;
  for (const auto i : c10::irange(num_args)) {
    auto& slot = (*stack)[first + i];
    const auto* alias = arguments[i].alias_info();
    bool written = alias != nullptr && alias->isWrite();
    if (slot.isNone()) {
      if (is_optional_generator(arguments[i])) {
        default_generators.push_back(first + i);
      }
      continue;
    }
    slot = state.to_cpu(slot, written);
  }
  for (auto pos : default_generators) {
    (*stack)[pos] = host_generator(default_generator(state.result_device()));
  }

  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);

  state.sync_written();
  const auto num_returns = schema.returns().size();
  const auto first_return = stack->size() - num_returns;
  for (const auto i : c10::irange(num_returns)) {
    auto& slot = (*stack)[first_return + i];
    slot = state.to_openreg(slot);
  }
}

void copying_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  at::native::cpu_fallback(op, stack);
}

// Sparse openreg tensors would dispatch to SparsePrivateUse1; say clearly
// that openreg does not do them instead of the dispatcher's generic "could
// not run ... with arguments from the 'SparsePrivateUse1' backend". (Every
// fallback costs a few milliseconds of load time, as it touches every
// operator's dispatch table, so the rarer sparse-CSR and quantized keys keep
// the dispatcher's message.)
void unsupported_layout(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, "The operator '", op.operator_name(),
      "' is not implemented for the openreg device: openreg supports only "
      "dense (strided) tensors, not sparse ones.");
}

bool copying_fallback_requested() {
  const char* v = std::getenv("TORCH_OPENREG_COPYING_FALLBACK");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

} // namespace

const char* fallback_kind() {
  static const bool copying = copying_fallback_requested();
  return copying ? "copying" : "zero_copy";
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  if (copying_fallback_requested()) {
    m.fallback(torch::CppFunction::makeFromBoxedFunction<&copying_fallback>());
  } else {
    m.fallback(torch::CppFunction::makeFromBoxedFunction<&zero_copy_fallback>());
  }
}

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&unsupported_layout>());
}

} // namespace openreg
