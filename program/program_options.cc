// ProgramOptions::WithDumps: the dump switches from the environment.
#include "program/program_options.h"

#include <utility>

#include "config/env.h"

namespace stepjit::runtime {

ProgramOptions ProgramOptions::WithDumps(std::string dump_dir) {
  ProgramOptions o;
  o.dump_dir = std::move(dump_dir);
  if (const std::optional<std::string> cuda =
          config::Get(config::Env::kDumpCuda)) {
    const std::string& v = *cuda;
    o.dump_cuda = v != "0";
    if (v.rfind("ptx", 0) == 0)
      o.cuda_ptx_arch = v.size() > 4 ? v.substr(4) : "sm_90";
  }
  return o;
}

}  // namespace stepjit::runtime
