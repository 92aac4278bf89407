// The one dispatch function every tensor op goes through, and its observer hook.
#ifndef STEPJIT_RUNTIME_DISPATCH_H_
#define STEPJIT_RUNTIME_DISPATCH_H_

#include <optional>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "ir/attrs.h"
#include "ir/infer.h"
#include "ir/op.h"
#include "runtime/autograd/engine.h"
#include "runtime/routine_tensors.h"
#include "runtime/tensor.h"

namespace stepjit::runtime {

// Infers the output type from the op table, converts operands to the compute
// dtype, runs the device kernel (views just restride), records autograd, and
// reports the op to the observer. Throws stepjit::Error on user errors.
// Operands must share one device; with CUDA operands, 0-d CPU tensors are
// copied over (as PyTorch takes CPU scalars), and copy_ reads any device.
Tensor Dispatch(ir::OpId op, absl::Span<const Tensor> inputs,
                const ir::Attrs& attrs = {});

// Runs an op node with `num_results` results (ir::InferTypes; a matmul with
// its bias gradient) on the operands' device and returns them. Only compiled
// graphs hold such nodes: no autocast, no autograd, no observer; operands
// must already have the op's compute dtypes.
std::vector<Tensor> DispatchResults(ir::OpId op, absl::Span<const Tensor> inputs,
                                    const ir::Attrs& attrs, int num_results);

struct KernelArgs;

// One op node of a built program, resolved once when the program is built
// (program/replay.cc): its result types, the dtype each operand is
// converted to, its kernel on the program's device. Launch allocates the
// results and runs the kernel (views just restride); it infers no type,
// records no autograd and reads none of the calling thread's dispatch state
// (autocast, meta mode, observer, factory device) that Dispatch reads: a
// replay runs what the graph says.
class PreparedOp {
 public:
  // `inputs` and `results` are the node's recorded types; `device` the
  // program's (factory ops and CUDA steps' ops run there).
  PreparedOp(ir::OpId op, absl::Span<const ir::TensorType> inputs,
             absl::Span<const ir::TensorType> results, Device device);
  // Runs the op on `inputs` with `attrs` (the node's, or a random op's
  // remapped ones) and stores its results in `out` (one per result type).
  // An in-place op writes inputs[0] and returns it.
  void Launch(absl::Span<const Tensor> inputs, const ir::Attrs& attrs,
              absl::Span<Tensor> out) const;
  ir::OpId op() const { return op_; }

 private:
  ir::OpId op_;
  bool view_;
  bool inplace_;
  Device device_;
  void (*kernel_)(const KernelArgs&) = nullptr;
  absl::InlinedVector<ir::DType, 4> operand_dtypes_;
  absl::InlinedVector<ir::TensorType, 1> results_;
};

// Strides of a reshape of a tensor of `old_shape` and `old_strides` to
// `new_shape` (no -1) that aliases it (PyTorch's computeStride), or nullopt
// when the layout forbids a view.
std::optional<Shape> ViewStrides(ShapeRef old_shape, ShapeRef old_strides,
                                 ShapeRef new_shape);

// What BeginRoutine tells a routine with a result (DispatchObserver).
struct RoutineResult {
  uint64_t place = 0;
  Tensor tensor;
  bool requires_grad = false;
};

// Sees every op after it ran (the tracer attaches here; runtime never
// includes frontend). Host reads are reported so a tracer can break the graph.
class DispatchObserver {
 public:
  virtual ~DispatchObserver() = default;
  virtual void OnOp(ir::OpId op, absl::Span<const Tensor> inputs,
                    const ir::Attrs& attrs, const Tensor& output) = 0;
  virtual void OnHostRead(const Tensor& tensor, const char* what) {}
  // Meta mode only, before the op runs: the result type the observer already
  // knows this op has (a recording call matching its record: the same op,
  // attributes and operands as a recorded op, so the same type), letting
  // dispatch skip type inference; nullptr when it does not know.
  virtual const ir::TensorType* ExpectedType(ir::OpId op,
                                             absl::Span<const Tensor> inputs,
                                             const ir::Attrs& attrs) {
    return nullptr;
  }
  // A leaf's .grad binding was read or replaced (no op runs for these, yet a
  // traced step must reproduce them).
  virtual void OnGradRead(const Tensor& leaf, const Tensor& grad) {}
  // OnGradSet is called before the binding changes (leaf still holds the old one).
  virtual void OnGradSet(const Tensor& leaf, const Tensor& grad) {}
  // A host flag the step's behaviour depends on was read (a module's training
  // flag): a compiled step is only valid while it keeps the value read.
  // `what` names it for messages.
  virtual void OnFlagRead(const std::shared_ptr<const bool>& flag, const char* what) {}
  // `alias` shares `source`'s data without its autograd history (detach(),
  // and the tensors autograd saves for backward).
  virtual void OnAlias(const Tensor& source, const Tensor& alias) {}
  // A library routine (backward, an optimizer's step, a module's forward)
  // is about to dispatch ops that are decided by `key` (its options and
  // structure, as numbers) and by `tensors` (every tensor it reads or writes
  // that exists before it starts). True: the observer recorded this routine
  // before with the same key on the same tensors and has applied its effect
  // (the tensors it writes now hold its results, the .grads it binds are
  // bound); the routine then dispatches nothing. False: it runs as usual,
  // and EndRoutine follows once it is done.
  // A routine with a result (`result` non-null) learns its place in the
  // record (result->place) and, when skipped, gets its result: a shape-only
  // tensor in result->tensor, and whether it requires grad.
  virtual bool BeginRoutine(absl::Span<const uint64_t> key,
                            const RoutineTensors& tensors,
                            RoutineResult* result) {
    return false;
  }
  // `result`: the result of a routine with one (else null). Returns whether
  // the observer could record the routine as one (it then knows what its
  // key and tensors decide).
  virtual bool EndRoutine(const Tensor* result) { return false; }
  // A backward reached the node standing for a routine with a result that
  // this observer stood in for (at `place`, on `tensors`): dispatch its
  // recorded ops again on `tensors` (shape-only, grad mode on, as recorded)
  // so that they record their backward nodes, and return its result, or an
  // undefined tensor when the observer cannot.
  virtual Tensor RedoRoutine(uint64_t place, absl::Span<const Tensor> tensors) {
    return Tensor();
  }
};

// A shape-only (meta) tensor of `type` on `device`, as meta dispatch makes
// for an op's result.
Tensor MakeMetaTensor(const ir::TensorType& type, Device device);

// Brackets a library routine for the calling thread's observer (above):
// skipped() when the observer stood in for it. Without an observer it does
// nothing.
class RecordedRoutine {
 public:
  RecordedRoutine(absl::Span<const uint64_t> key,
                  const RoutineTensors& tensors);
  ~RecordedRoutine();
  RecordedRoutine(const RecordedRoutine&) = delete;
  RecordedRoutine& operator=(const RecordedRoutine&) = delete;
  bool skipped() const { return skipped_; }

 private:
  DispatchObserver* observer_;
  bool skipped_ = false;
};

// A library routine that returns one tensor (a module's forward) as one
// recorded routine: when the observer stands in for it, result() is its
// result (shape-only, with one backward node standing for the routine's:
// autograd::SetRoutineResult); else the routine runs and hands its result
// to Finish, and the nodes its ops record form one group
// (autograd::RoutineScope). Only the outermost on a thread is recorded:
// Active() is false inside one, and without an observer.
class RecordedResultRoutine {
 public:
  static bool Active();
  RecordedResultRoutine(absl::Span<const uint64_t> key,
                        const RoutineTensors& tensors);
  ~RecordedResultRoutine();
  RecordedResultRoutine(const RecordedResultRoutine&) = delete;
  RecordedResultRoutine& operator=(const RecordedResultRoutine&) = delete;
  bool skipped() const { return skipped_; }
  const Tensor& result() const { return result_.tensor; }
  Tensor Finish(Tensor result);

 private:
  DispatchObserver* observer_;
  bool skipped_ = false;
  bool finished_ = false;
  RoutineResult result_;
  std::optional<autograd::RoutineScope> scope_;
};

// Installs `observer` for the calling thread (nullptr to detach); returns the
// previous one.
DispatchObserver* SetDispatchObserver(DispatchObserver* observer);
DispatchObserver* GetDispatchObserver();

// Shape-only (meta) dispatch on this thread while alive: every op infers its
// result type, records autograd and reports to the observer as usual, but
// runs no kernel and writes nothing — results are meta tensors (no memory)
// and in-place ops leave their target untouched. A compiled step re-traces
// itself this way to check that what it replays is still what the step does.
class MetaModeGuard {
 public:
  MetaModeGuard();
  ~MetaModeGuard();
  MetaModeGuard(const MetaModeGuard&) = delete;
  MetaModeGuard& operator=(const MetaModeGuard&) = delete;

 private:
  bool previous_;
};
bool InMetaMode();

// CPU kernels: write `out` (already allocated with the inferred type) from
// `inputs` (already converted to the op's compute dtype); `more_out` holds
// the further results of a multi-result node (DispatchResults).
struct KernelArgs {
  ir::OpId op;
  absl::Span<const Tensor> inputs;
  const ir::Attrs& attrs;
  const Tensor& out;
  absl::Span<const Tensor> more_out = {};
};
using CpuKernel = void (*)(const KernelArgs&);
// A random op's Philox seed and first offset: its `seed` and `offset`
// attributes, or, when it takes a graph's random state as its last operand
// (ops.def; i64[2] on the host: the seed and a shift), that seed and its
// offset shifted.
struct PhiloxStart {
  uint64_t seed;
  uint64_t offset;
};
PhiloxStart RandomStart(const KernelArgs& k);
// The CPU kernel of `op` (null for views, which have none).
CpuKernel GetCpuKernel(ir::OpId op);

// The device ops without tensor operands (full, arange, rand, ...) create
// their result on: the CPU unless a FactoryDeviceGuard on this thread says
// otherwise. Compiled programs set it to the device they replay on.
Device FactoryDevice();
class FactoryDeviceGuard {
 public:
  explicit FactoryDeviceGuard(Device device);
  ~FactoryDeviceGuard();
  FactoryDeviceGuard(const FactoryDeviceGuard&) = delete;
  FactoryDeviceGuard& operator=(const FactoryDeviceGuard&) = delete;

 private:
  Device previous_;
};

}  // namespace stepjit::runtime

#endif  // STEPJIT_RUNTIME_DISPATCH_H_
