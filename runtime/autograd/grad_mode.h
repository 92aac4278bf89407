// Thread-local grad mode and the NoGradGuard that turns recording off.
#ifndef STEPJIT_RUNTIME_AUTOGRAD_GRAD_MODE_H_
#define STEPJIT_RUNTIME_AUTOGRAD_GRAD_MODE_H_

namespace stepjit {

struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// RAII: disables autograd recording in its scope (torch.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace stepjit

#endif  // STEPJIT_RUNTIME_AUTOGRAD_GRAD_MODE_H_
