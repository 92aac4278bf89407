// The fusion-region emitter behind EmitRegion (cuda_emitter.h), shared by
// its source files: cuda_emitter.cc (analysis, expressions, phases,
// signatures), cuda_emitter_kernels.cc (the scalar, main and reduced
// kernels) and cuda_emitter_rows.cc (the row plan's kernels). Internal to
// codegen/cuda.
#ifndef STEPJIT_CODEGEN_CUDA_REGION_EMITTER_H_
#define STEPJIT_CODEGEN_CUDA_REGION_EMITTER_H_

#include <initializer_list>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "codegen/cuda/cuda_c.h"
#include "codegen/cuda/cuda_emitter.h"
#include "codegen/cuda/cuda_layout.h"
#include "codegen/ir_names.h"
#include "codegen/region_plan.h"
#include "ir/graph.h"

namespace stepjit::codegen::cuda::detail {

// Elements per thread and vector in pure elementwise regions.
inline constexpr int kVector = 4;

// Lowers one region body (see EmitRegion); Run fills a RegionSource.
class Emitter {
 public:
  Emitter(const ir::Graph& body, const Plan& plan, const EmitOptions& options)
      : body_(body),
        plan_(plan),
        options_(options),
        bid_(options.device_functions ? "sj_bid" : "blockIdx.x"),
        grid_(options.device_functions ? "sj_grid" : "gridDim.x"),
        sizes_(options.shape_generic) {}

  absl::Status Run(const std::string& prefix, RegionSource& out);

 private:
  using Env = absl::flat_hash_map<const Value*, std::string>;

  void Analyze(RegionSource& out);
  // A size as C text (a literal, or a run-time entry: SizeText).
  std::string Size(int64_t v) { return sizes_(v); }
  // A 0-d `full` constant's value as `t`: a size-role count reads the
  // run-time table in a shape-generic kernel.
  std::string FullValue(const Node& n, ir::DType t);
  absl::StatusOr<std::string> Expr(const Node& n, Env& env, CudaStatements& s);
  // Gives `n`'s value the expression `e`: an order-preserving view aliases
  // it, any other node declares its named register.
  void Bind(const Node& n, const std::string& e, Env& env, CudaStatements& s);
  // `suffix` names vector registers instead of pointers: p0v.v[lane].
  absl::Status EmitPhase(Domain d, Env& env, CudaStatements& s,
                         const std::string& index,
                         const std::string& suffix = "");
  bool UsedIn(Domain d, const Value* v) const;
  // The index type, and the 0-d constants and scratch slots the kernel of
  // domains `ds` reads.
  void Prologue(std::initializer_list<Domain> ds, Env& env, CudaStatements& s);
  void LoadParams(Domain d, Env& env, CudaStatements& s,
                  const std::string& index, const std::string& suffix = "");
  absl::Status EmitVectorLoop(CudaStatements& s, const Env& env);
  std::vector<std::string> Params() const;
  std::string Signature(const std::string& name) const;
  std::string Kernel(const std::string& name, const CudaStatements& s) const;
  absl::Status EmitScalar(RegionSource& out);
  absl::Status EmitMain(RegionSource& out);
  absl::Status EmitReduced(RegionSource& out);

  // Row plans (cuda_emitter_rows.cc).
  bool Rows() const { return plan_.row_phases > 0; }
  absl::Status EmitRowMain(RegionSource& out);
  absl::Status EmitRowTotals(RegionSource& out);
  void RowStart(Env& env, CudaStatements& s);
  absl::Status RowValues(int level, Env& env, CudaStatements& s);
  absl::Status RowPass(int phase, Env& env, CudaStatements& s);
  void StoreRowReturns(Domain d, const Env& env, CudaStatements& s,
                       const std::string& index);

  const ir::Graph& body_;
  const Plan& plan_;
  const EmitOptions& options_;
  // The block index and the number of blocks the grid-stride loops use.
  const char* const bid_;
  const char* const grid_;
  absl::flat_hash_map<const Value*, std::string> names_;
  absl::flat_hash_map<const Value*, int> slots_;
  absl::flat_hash_map<const Node*, int> acc_index_;
  std::vector<const Node*> accs_;  // the reductions, by accumulator index
  // The operands each node's code reads (fill_ and copy_ ignore `self`).
  absl::flat_hash_map<const Node*, absl::flat_hash_set<const Value*>> reads_;
  std::vector<const Value*> bcast_;  // broadcast operands, in first-use order
  ReductionStrategy row_strategy_ = ReductionStrategy::kNone;  // row plans
  Layout layout_;
  SizeText sizes_;
  std::string text_;
};

}  // namespace stepjit::codegen::cuda::detail

#endif  // STEPJIT_CODEGEN_CUDA_REGION_EMITTER_H_
