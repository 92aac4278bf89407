// Collective ops on CUDA tensors: the local, NCCL and host-staging paths.
#include "devices/cuda/kernels/collective_ops.h"

#include <atomic>
#include <vector>

#include "absl/strings/str_cat.h"
#include "devices/cuda/kernels/copy.h"
#include "devices/cuda/nccl/dist_nccl.h"
#include "dist/dist.h"
#include "dist/dist_internal.h"
#include "ir/op_attrs.h"
#include "ir/status.h"

namespace stepjit::runtime::cuda {
namespace {

using ir::AttrKey;
using ir::OpId;

std::atomic<int64_t> g_local{0}, g_nccl{0}, g_host{0};

nccl::RedOp NcclOp(dist::ReduceOp op) {
  switch (op) {
    case dist::ReduceOp::kSum:
      return nccl::kSum;
    case dist::ReduceOp::kAvg:
      return nccl::kAvg;
    case dist::ReduceOp::kMax:
      return nccl::kMax;
  }
  return nccl::kSum;
}

// The result of a world of one is the operand: a device copy, captured like
// any other.
void RunLocal(const KernelArgs& k) {
  if (k.op != OpId::kBarrier) CopySameDType(k.out, k.inputs[0]);
  ++g_local;
}

void RunNccl(Backend& b, const KernelArgs& k) {
  NcclComm& comm = DistNcclComm();
  const Stream stream = CurrentStream();
  const std::string what =
      absl::StrCat(ir::OpName(k.op), " on rank ", comm.rank());
  if (k.op == OpId::kBarrier) {
    // dist::barrier() has no operand and runs on the CPU; a barrier node
    // placed on the device (every op of the table has a device path) is a
    // one-element all_reduce: every rank's stream passes it only once all
    // have queued it.
    Tensor token =
        empty({1}, {.dtype = ir::DType::kF32, .device = Device::cuda()});
    ThrowIfError(b.Memset(token.data_ptr(), 0, 4, stream));
    ThrowIfError(comm.AllReduce(token.data_ptr(), token.data_ptr(), 1,
                                ir::DType::kF32, nccl::kSum, stream));
    ++g_nccl;
    return;
  }
  const Tensor in = ContiguousOnDevice(k.inputs[0]);
  const size_t count = static_cast<size_t>(in.numel());
  SJ_REQUIRE(k.out.is_contiguous(), what, ": the result must be contiguous");
  switch (k.op) {
    case OpId::kAllReduce: {
      const dist::ReduceOp op = dist::ParseReduceOp(
          ir::AttrString(k.op, k.attrs, ir::AttrKey::kReduceOp));
      SJ_REQUIRE(op != dist::ReduceOp::kAvg || ir::IsFloating(in.dtype()), what,
                 ": avg needs a floating dtype, found ",
                 ir::DTypeName(in.dtype()));
      ThrowIfError(comm.AllReduce(in.data_ptr(), k.out.data_ptr(), count,
                                  in.dtype(), NcclOp(op), stream));
      break;
    }
    case OpId::kBroadcast:
      ThrowIfError(comm.Broadcast(
          in.data_ptr(), k.out.data_ptr(), count, in.dtype(),
          static_cast<int>(ir::AttrInt(k.op, k.attrs, ir::AttrKey::kRoot)),
          stream));
      break;
    case OpId::kAllGather:
      SJ_REQUIRE(k.attrs.GetInt(AttrKey::kWorldSize) == comm.world(), what,
                 ": recorded for a world of ",
                 k.attrs.GetInt(AttrKey::kWorldSize),
                 " ranks, running in a world of ", comm.world());
      ThrowIfError(comm.AllGather(in.data_ptr(), k.out.data_ptr(), count,
                                  in.dtype(), stream));
      break;
    default:
      SJ_CHECK(false, "not a collective: ", ir::OpName(k.op));
  }
  // The operand's memory may be reused by the allocator only after the
  // collective that reads it ran; it is on the same stream, so stream
  // order already guarantees that.
  ++g_nccl;
}

// Operands to the host, the core's CPU collective (MPI), the result back.
// Synchronous: an async all_reduce waits here, since its host result would
// otherwise be copied back before MPI wrote it.
void RunHostStaging(const KernelArgs& k, const std::string& why_not_nccl) {
  SJ_REQUIRE(!CaptureUnderway(), ir::OpName(k.op),
             " on CUDA tensors copies through the host (", why_not_nccl,
             "), which a CUDA graph cannot capture");
  SJ_REQUIRE(dist::internal::CanRunOnHost(),
             dist::internal::HostCollectivesUnavailable(k.op),
             " (NCCL cannot run: ", why_not_nccl, ")");
  std::vector<Tensor> host;
  for (const Tensor& t : k.inputs) host.push_back(ToDevice(t, Device::cpu()));
  Tensor out = k.out.defined() ? empty(k.out.shape(), {.dtype = k.out.dtype()})
                               : Tensor();
  ir::Attrs attrs = k.attrs;
  attrs.Set(AttrKey::kAsync, false);
  dist::internal::RunHostCollective(KernelArgs{k.op, host, attrs, out});
  if (out.defined()) CopySameDType(k.out, ToDevice(out, k.out.device()));
  ++g_host;
}

bool RunCollective(Backend& b, const KernelArgs& k) {
  dist::internal::CheckUsable(k.op);
  const CollectiveChoice choice = ChooseCollectivePath();
  switch (choice.path) {
    case CollectivePath::kLocal:
      RunLocal(k);
      break;
    case CollectivePath::kNccl:
      RunNccl(b, k);
      break;
    case CollectivePath::kHostStaging:
      RunHostStaging(k, choice.why_not_nccl);
      break;
  }
  return true;
}

}  // namespace

void AddCollectivePaths(DevicePaths& paths) {
  for (OpId op :
       {OpId::kAllReduce, OpId::kBroadcast, OpId::kAllGather, OpId::kBarrier}) {
    paths[static_cast<int>(op)] = &RunCollective;
  }
}

std::string CollectiveNotCapturable(OpId op) {
  const CollectiveChoice choice = ChooseCollectivePath();
  if (choice.path != CollectivePath::kHostStaging) return "";
  return absl::StrCat(
      ir::OpName(op), " on CUDA tensors copies through the host (",
      choice.why_not_nccl, "), which a CUDA graph cannot capture");
}

CollectiveStats GetCollectiveStats() {
  return {.local = g_local.load(),
          .nccl = g_nccl.load(),
          .host_staged = g_host.load()};
}

}  // namespace stepjit::runtime::cuda
