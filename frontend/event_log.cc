// EventLog: bounded counts and recent messages.
#include "frontend/event_log.h"

#include "absl/strings/str_cat.h"

namespace stepjit::frontend {

void EventLog::Add(const std::string& cause, std::string what) {
  ++counts_[cause];
  ++total_;
  recent_.push_back(std::move(what));
  if (recent_.size() > kRecent) recent_.pop_front();
}

int64_t EventLog::count(const std::string& cause) const {
  auto it = counts_.find(cause);
  return it == counts_.end() ? 0 : it->second;
}

std::string EventLog::ToString() const {
  if (total_ == 0) return "no recompiles or fallbacks\n";
  std::string out = "recompiles and fallbacks by cause:\n";
  for (const auto& [cause, n] : counts_)
    absl::StrAppend(&out, "  ", cause, ": ", n, "\n");
  if (total_ > static_cast<int64_t>(recent_.size())) {
    absl::StrAppend(&out, "the last ", recent_.size(), " events:\n");
  } else {
    absl::StrAppend(&out, "events:\n");
  }
  for (const std::string& e : recent_) absl::StrAppend(&out, "- ", e, "\n");
  return out;
}

}  // namespace stepjit::frontend
