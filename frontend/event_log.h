// EventLog: why a compiled step retraced or ran eagerly — counts per cause and
// the last few events.
//
// A step that retraces on every call must not grow memory on every call: the
// log keeps one counter per cause and only the most recent messages.
#ifndef STEPJIT_FRONTEND_EVENT_LOG_H_
#define STEPJIT_FRONTEND_EVENT_LOG_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>

namespace stepjit::frontend {

class EventLog {
 public:
  static constexpr size_t kRecent = 8;

  // `cause` is a short fixed phrase ("new signature", "state guard", ...);
  // `what` the full message.
  void Add(const std::string& cause, std::string what);

  bool empty() const { return total_ == 0; }
  int64_t total() const { return total_; }
  int64_t count(const std::string& cause) const;
  // "- cause: N" lines, then the recent events, oldest first.
  std::string ToString() const;

 private:
  std::map<std::string, int64_t> counts_;
  std::deque<std::string> recent_;
  int64_t total_ = 0;
};

}  // namespace stepjit::frontend

#endif  // STEPJIT_FRONTEND_EVENT_LOG_H_
