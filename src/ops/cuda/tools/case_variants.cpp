#include "ops/cuda/tools/case_variants.h"

#include <fmt/format.h>

#include "ops/cuda/cuda_ops.h"

namespace tessera::ops::cuda {

std::vector<CaseVariant> case_variants(const conformance::OpCase& c, const DeviceCaps& caps,
                                       std::vector<std::string>& skipped) {
  std::vector<CaseVariant> v;
  if (c.kernels == conformance::KernelFamily::kMla) {
    const MlaShape shape{c.mla.heads, c.mla.latent, c.mla.rope, c.mla.nope, c.mla.v, c.mla.fp8_cache};
    auto runs = [](const MlaPlan& p) { return p.decode_row.available && p.prefill_row.available; };
    for (MlaKernel k : {MlaKernel::kWgmma, MlaKernel::kKvMajor, MlaKernel::kTensorCore, MlaKernel::kCudaCore}) {
      KernelOverrides forced;
      forced.mla = k;
      const MlaPlan p = plan_mla(caps, shape, forced);
      const std::string name{kernel_flag_name(k)};
      if (runs(p))
        v.push_back({"mla=" + name, name});
      else
        skipped.push_back(name + ": " + (p.decode_row.available ? p.prefill_row.reason : p.decode_row.reason));
    }
    const MlaPlan p = plan_mla(caps, shape, {});
    if (runs(p)) v.push_back({"mla=auto", fmt::format("auto ({})", kernel_flag_name(p.decode))});
  } else if (c.kernels == conformance::KernelFamily::kMoe) {
    const MoeShape shape{c.moe.experts, c.moe.hidden, c.moe.inter};
    for (MoeKernel k : {MoeKernel::kGrouped, MoeKernel::kPerExpert}) {
      KernelOverrides forced;
      forced.moe = k;
      const MoePlan p = plan_moe(caps, shape, forced);
      const std::string name{kernel_flag_name(k)};
      if (p.row.available)
        v.push_back({"moe=" + name, name});
      else
        skipped.push_back(name + ": " + p.row.reason);
    }
    const MoePlan p = plan_moe(caps, shape, {});
    if (p.row.available) v.push_back({"moe=auto", fmt::format("auto ({})", kernel_flag_name(p.kernel))});
  } else {
    v.push_back({"", "default"});
  }
  return v;
}

conformance::Target cuda_target(Ops& ops) {
  return {&ops, [](const core::Tensor& t) { return device_bytes(t); }};
}

}  // namespace tessera::ops::cuda
