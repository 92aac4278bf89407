// TeamTuner's bookkeeping.
#include "program/team_tuner.h"

#include <algorithm>
#include <string>

#include "config/env.h"

namespace stepjit::runtime {

TeamTuner::TeamTuner(int threads) {
  for (int t : {threads, (threads + 1) / 2, 1}) {
    if (t >= 1 && std::find(candidates_.begin(), candidates_.end(), t) ==
                      candidates_.end())
      candidates_.push_back(t);
  }
  for (int t : candidates_) c_.push_back({.team = t});
}

double TeamTuner::Median(const Candidate& c) const {
  if (c.ms.empty()) return 0;
  std::vector<double> v(c.ms.begin(), c.ms.end());
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

int TeamTuner::Next() {
  std::lock_guard<std::mutex> lock(mu_);
  if (c_.size() < 2) return c_[0].team;
  if (probe_left_ == 0 && --until_probe_ <= 0) {
    probing_ = next_probe_;
    if (probing_ == chosen_) probing_ = (probing_ + 1) % c_.size();
    next_probe_ = (probing_ + 1) % c_.size();
    // The first replay on a team is not counted: one more run.
    probe_left_ = kProbeRuns + (c_[probing_].warmed ? 0 : 1);
    ++probes_;
  }
  return probe_left_ > 0 ? c_[probing_].team : c_[chosen_].team;
}

void TeamTuner::Record(int team, double ms) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t i = 0;
  while (i < c_.size() && c_[i].team != team) ++i;
  if (i == c_.size()) return;
  Candidate& c = c_[i];
  if (!c.warmed) {
    c.warmed = true;
  } else {
    c.ms.push_back(ms);
    if (c.ms.size() > kSamples) c.ms.pop_front();
    if (c.ms.size() >= kProbeRuns) {
      const double m = Median(c);
      c.best_median = c.best_median == 0 ? m : std::min(c.best_median, m);
    }
  }
  if (probe_left_ > 0 && i == probing_) {
    if (--probe_left_ == 0) FinishProbe();
    return;
  }
  // The chosen team got slower than it has been: the load changed.
  if (i == chosen_ && probe_left_ == 0 && c.best_median > 0 &&
      ms > 1.5 * c.best_median && until_probe_ > 2) {
    until_probe_ = 2;
  }
}

void TeamTuner::FinishProbe() {
  const double probe = Median(c_[probing_]);
  const double current = Median(c_[chosen_]);
  if (probe > 0 && (current == 0 || probe < 0.9 * current)) {
    chosen_ = probing_;
    probe_wait_ = kFirstProbe;
  } else {
    probe_wait_ = std::min<int64_t>(2 * probe_wait_, kMaxProbeWait);
  }
  until_probe_ = probe_wait_;
}

int TeamTuner::chosen() const {
  std::lock_guard<std::mutex> lock(mu_);
  return c_[chosen_].team;
}

int64_t TeamTuner::probes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return probes_;
}

bool AdaptiveThreads() {
  const std::optional<std::string> v =
      config::ChoiceOrThrow(config::Env::kAdaptiveThreads);
  return !v || *v == "1" || *v == "on";
}

}  // namespace stepjit::runtime
