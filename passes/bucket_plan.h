// bucket-plan: schedules the gradient buckets of data-parallel training and
// records the plan in the IR.
//
// nn::DistributedDataParallel reduces gradients in buckets: a bucket's
// gradients are flattened (views and a `cat`) and averaged over the ranks by
// `all_reduce {async = true}`, whose result is copied back into the .grad
// tensors at the end of backward. The replay loop starts an async
// all_reduce where it stands and waits for it at its first reader, so the
// kernels between the two overlap the communication. After fusion and
// sinking have moved kernels around, this pass
//  - hoists each async all_reduce, with the views and `cat` that feed only
//    it, to right after the last of its operands is produced, so that the
//    reduction starts as soon as the bucket's gradients exist;
//  - sinks each node that reads an async result (with the views of it that
//    only such nodes read) to just before the first node that needs what it
//    produces, so that the wait comes as late as possible;
//  - numbers the buckets in launch order (`bucket`) and writes
//    `bucket_plan`: the gradients and bytes in the bucket, and how many
//    kernels run between the launch and the first wait.
// Collectives keep their relative order: every rank must issue them alike.
#ifndef STEPJIT_PASSES_BUCKET_PLAN_H_
#define STEPJIT_PASSES_BUCKET_PLAN_H_

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "passes/pass_manager.h"

namespace stepjit::passes {

// Counters: "buckets", "kernels overlapped" (summed over buckets).
absl::StatusOr<bool> PlanBuckets(ir::Graph& graph, PassStats& stats);

}  // namespace stepjit::passes

#endif  // STEPJIT_PASSES_BUCKET_PLAN_H_
