// Several independent regions' kernels as one launch per phase.
#include "codegen/cuda/multi_region.h"

#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/cuda/cuda_c.h"
#include "codegen/sha256.h"
#include "ir/status.h"

namespace stepjit::codegen::cuda {

namespace {

constexpr const char* kPhases[] = {"_scalar", "_main", "_reduced"};

// "const float* p0" -> "const float* m3_p0".
std::string Renamed(const std::string& decl, size_t member) {
  const size_t at = decl.find_last_of(" *") + 1;
  return absl::StrCat(decl.substr(0, at), "m", member, "_", decl.substr(at));
}

// The argument name of a declaration ("const float* m3_p0" -> "m3_p0").
std::string NameOf(const std::string& decl) {
  return decl.substr(decl.find_last_of(" *") + 1);
}

}  // namespace

absl::StatusOr<MultiRegionSource> EmitMultiRegion(
    absl::Span<const ir::Graph* const> bodies, const EmitOptions& options) {
  if (bodies.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a multi-region kernel needs at least 2 regions, got ", bodies.size()));
  }
  EmitOptions member_options = options;
  member_options.device_functions = true;
  MultiRegionSource out;
  int64_t arg_bytes = 0;
  std::vector<std::string> names;
  for (const ir::Graph* body : bodies) {
    ASSIGN_OR_RETURN(RegionSource r, EmitRegion(*body, member_options));
    arg_bytes += MultiArgBytes(r);
    names.push_back(r.name);
    out.members.push_back(std::move(r));
  }
  if (arg_bytes > kMaxMultiArgBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", bodies.size(), " regions take ", arg_bytes,
        " bytes of kernel arguments; a multi-region kernel takes at most ",
        kMaxMultiArgBytes));
  }
  RegionSource& c = out.combined;
  c.name = absl::StrCat(
      "multi_", ToHex(Sha256Of(absl::StrJoin(names, ","))).substr(0, 12));
  std::vector<std::string> args;
  std::vector<std::vector<std::string>> member_args;
  for (size_t m = 0; m < out.members.size(); ++m) {
    member_args.emplace_back();
    for (const std::string& decl : out.members[m].params) {
      args.push_back(Renamed(decl, m));
      member_args.back().push_back(NameOf(args.back()));
    }
  }
  c.params = args;
  std::string text;
  absl::flat_hash_set<std::string> defined;
  for (const RegionSource& r : out.members) {
    c.helpers |= r.helpers;
    if (defined.insert(r.name).second) absl::StrAppend(&text, r.kernels_text);
  }
  for (const char* phase : kPhases) {
    // The members with a kernel of this phase, with its grid.
    struct Part {
      size_t member;
      std::string function;
      int64_t grid;
    };
    std::vector<Part> parts;
    int block = 0;
    for (size_t m = 0; m < out.members.size(); ++m) {
      for (const KernelLaunch& k : out.members[m].kernels) {
        if (!absl::EndsWith(k.name, phase)) continue;
        if (block != 0 && k.block != block) {
          return absl::InternalError(absl::StrCat(
              "multi-region phase ", phase, " mixes blocks of ", block,
              " and ", k.block, " threads"));
        }
        block = k.block;
        parts.push_back({m, k.name, k.grid});
      }
    }
    if (parts.empty()) continue;
    int64_t total = 0;
    for (const Part& p : parts) total += p.grid;
    const std::string name = absl::StrCat(c.name, phase);
    std::string body = absl::StrCat(
        "extern \"C\" __global__ void ", name, "(", absl::StrJoin(args, ", "),
        ") {\n  for (unsigned sj_b = blockIdx.x; sj_b < ", total,
        "u; sj_b += gridDim.x) {\n");
    int64_t first = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      const Part& p = parts[i];
      const std::string call = absl::StrCat(
          p.function, "(", absl::StrJoin(member_args[p.member], ", "), ", sj_b",
          first == 0 ? "" : absl::StrCat(" - ", first, "u"), ", ", p.grid,
          "u);");
      first += p.grid;
      absl::StrAppend(&body, i + 1 < parts.size()
                                 ? absl::StrCat("    if (sj_b < ", first,
                                                "u) { ", call, " continue; }\n")
                                 : absl::StrCat("    ", call, "\n"));
    }
    absl::StrAppend(&body, "  }\n}\n");
    absl::StrAppend(&text, body);
    c.kernels.push_back({name, total, block});
  }
  std::vector<std::string> kernel_names;
  for (const KernelLaunch& k : c.kernels) kernel_names.push_back(k.name);
  c.kernels_text = text;
  c.source = absl::StrCat("// stepjit multi-region ", c.name, " (",
                          absl::StrJoin(names, ", "), "): ",
                          absl::StrJoin(kernel_names, ", "), "\n",
                          Preamble(c.helpers), text);
  return out;
}

}  // namespace stepjit::codegen::cuda
