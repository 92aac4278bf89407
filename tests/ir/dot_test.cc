// Tests the Graphviz text of graphs (ir/dot.h): every node and parameter is
// drawn once, every region is a cluster holding its body, every use is one
// edge, GEMMs and state writes are marked, labels are escaped, and Graphviz
// itself accepts the text when it is installed.
#include "ir/dot.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/parser.h"
#include "tests/util/count.h"

namespace stepjit::ir {
namespace {

// A step with each kind of node: a GEMM, a region with an in-place update,
// a state write-back, an op with a string attribute and two results.
constexpr const char* kStep =
    R"(graph @step(%x: f32[4,8] input, %w: f32[8,8] state, %m: f32[8,8] state) {
  %0 = matmul %x, %w : f32[4,8]
  %1 = fusion @fused_0(%0, %m, %w) : (f32[4,8], f32[8,8]) {
    graph @fused_0(%p0: f32[4,8] input, %p1: f32[8,8] input, %p2: f32[8,8] input) {
      %0 = relu %p0 : f32[4,8]
      %1 = add_ %p1, %p2 {alpha = -0.1} : f32[8,8]
      return %0, %1
    }
  }
  assign %m, %1#1
  %2 = matmul %1#0, %x {transpose_a = true, epilogue = "bgrad"} : (f32[8,8], f32[8])
  %3 = sum %1#0 : f32[]
  return %3, %2#0, %2#1
}
)";

std::unique_ptr<Graph> Parse(const std::string& text) {
  auto graph = ParseGraph(text, "dot_test.ir");
  EXPECT_TRUE(graph.ok()) << graph.status();
  return graph.ok() ? *std::move(graph) : nullptr;
}

// The ids of the node statements (`id [label=...]`) of dot text.
std::multiset<std::string> NodeIds(const std::string& dot) {
  static const std::regex kNode(R"(^\s*(\w+) \[label=)");
  std::multiset<std::string> ids;
  std::istringstream in(dot);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, kNode)) ids.insert(m[1]);
  }
  return ids;
}

// The statement of node `id`.
std::string NodeLine(const std::string& dot, const std::string& id) {
  std::istringstream in(dot);
  for (std::string line; std::getline(in, line);) {
    if (line.find(absl::StrCat(id, " [label=")) != std::string::npos &&
        line.find(" -> ") == std::string::npos) {
      return line;
    }
  }
  return "";
}

using ::stepjit::test::Count;

// The ids ir/dot.h promises, computed from the graph: p<i>, n<k>, and inside
// node k's region n<k>_p<i> and n<k>_<j>.
void ExpectedIds(const Graph& g, const std::string& prefix,
                 std::multiset<std::string>& ids, int& regions, int& uses) {
  for (size_t k = 0; k < g.nodes().size(); ++k) {
    const Node& n = *g.nodes()[k];
    const std::string id = absl::StrCat(prefix, k);
    uses += static_cast<int>(n.inputs().size());
    if (n.kind() == NodeKind::kFusion) {
      ++regions;
      for (size_t i = 0; i < n.body()->params().size(); ++i) {
        ids.insert(absl::StrCat(id, "_p", i));
      }
      ExpectedIds(*n.body(), id + "_", ids, regions, uses);
    } else {
      ids.insert(id);
    }
  }
}

TEST(DotTest, DrawsEveryNodeOnceAndOneEdgePerUse) {
  std::unique_ptr<Graph> g = Parse(kStep);
  ASSERT_NE(g, nullptr);
  const std::string dot = PrintDot(*g);
  std::multiset<std::string> expected = {"p0", "p1", "p2", "ret"};
  int regions = 0, uses = static_cast<int>(g->returns().size());
  ExpectedIds(*g, "n", expected, regions, uses);
  EXPECT_EQ(NodeIds(dot), expected) << dot;
  // 2 + 3 + 2 + 2 + 1 inputs, the region's 2 ops 1 + 2, 3 returned values.
  EXPECT_EQ(uses, 16);
  EXPECT_EQ(Count(dot, " -> "), uses) << dot;
  EXPECT_EQ(regions, 1);
  EXPECT_EQ(Count(dot, "subgraph \"cluster_"), regions) << dot;
  EXPECT_EQ(dot.rfind("digraph \"@step\" {\n", 0), 0u) << dot;
  EXPECT_EQ(dot.substr(dot.size() - 2), "}\n");
}

TEST(DotTest, ARegionIsAClusterHoldingItsBody) {
  std::unique_ptr<Graph> g = Parse(kStep);
  ASSERT_NE(g, nullptr);
  const std::string dot = PrintDot(*g);
  const size_t open = dot.find("subgraph \"cluster_n1\" {");
  ASSERT_NE(open, std::string::npos) << dot;
  const size_t close = dot.find("\n  }\n", open);
  ASSERT_NE(close, std::string::npos) << dot;
  const std::string cluster = dot.substr(open, close - open);
  EXPECT_NE(cluster.find("label=\"%1 = fusion @fused_0\""), std::string::npos)
      << cluster;
  EXPECT_EQ(NodeIds(cluster), (std::multiset<std::string>{
                                  "n1_p0", "n1_p1", "n1_p2", "n1_0", "n1_1"}))
      << cluster;
  // Region inputs come from the outer producers, by edges outside the
  // cluster (an edge inside would draw its producer inside); a use of a
  // region result comes from the body node computing it (relu for %1#0,
  // add_ for %1#1).
  EXPECT_EQ(Count(cluster, " -> "), 3) << cluster;  // into relu and add_
  EXPECT_NE(dot.find("\n  n0 -> n1_p0 [label=\"f32[4,8]\"]"),
            std::string::npos);
  EXPECT_NE(dot.find("\n  p2 -> n1_p1 [label=\"f32[8,8]\"]"),
            std::string::npos);
  EXPECT_NE(dot.find("\n  p1 -> n1_p2 [label=\"f32[8,8]\"]"),
            std::string::npos);
  EXPECT_NE(dot.find("n1_0 -> n4 [label=\"f32[4,8]\"]"), std::string::npos)
      << dot;
  EXPECT_NE(dot.find("n1_1 -> n2 [label=\"f32[8,8]\"]"), std::string::npos)
      << dot;
}

TEST(DotTest, MarksGemmsStateWritesAndParameterKinds) {
  std::unique_ptr<Graph> g = Parse(kStep);
  ASSERT_NE(g, nullptr);
  const std::string dot = PrintDot(*g);
  EXPECT_NE(NodeLine(dot, "p0").find("shape=invhouse"), std::string::npos);
  EXPECT_NE(NodeLine(dot, "p0").find("\\ninput\""), std::string::npos);
  EXPECT_NE(NodeLine(dot, "p1").find("shape=cylinder"), std::string::npos);
  EXPECT_NE(NodeLine(dot, "p1").find("\\nstate\""), std::string::npos);
  // Both matmuls are GEMM boxes, with their attributes and result types
  // (node 3 prints as %2: an assign takes no number).
  EXPECT_NE(NodeLine(dot, "n0").find("shape=box3d"), std::string::npos);
  const std::string bgrad = NodeLine(dot, "n3");
  EXPECT_NE(bgrad.find("shape=box3d"), std::string::npos) << bgrad;
  EXPECT_NE(bgrad.find("label=\"%2 = matmul\\n{transpose_a = true, epilogue "
                       "= \\\"bgrad\\\"}\\n(f32[8,8], f32[8])\""),
            std::string::npos)
      << bgrad;
  // The in-place update in the region and the assign write state.
  EXPECT_NE(NodeLine(dot, "n1_1").find("shape=hexagon"), std::string::npos);
  EXPECT_NE(NodeLine(dot, "n2").find("shape=hexagon"), std::string::npos);
  EXPECT_NE(NodeLine(dot, "n2").find("label=\"assign %m\""), std::string::npos);
  EXPECT_NE(dot.find("p2 -> n2 [label=\"f32[8,8]\", style=dashed"),
            std::string::npos)
      << dot;
  EXPECT_NE(NodeLine(dot, "n1_0").find("shape=box,"), std::string::npos);
  EXPECT_NE(NodeLine(dot, "ret").find("label=\"return\\n3 values\""),
            std::string::npos);
}

TEST(DotTest, QuotesLabelsLiterally) {
  EXPECT_EQ(DotQuote("plain"), "\"plain\"");
  EXPECT_EQ(DotQuote("a\"b\\c\nd\te\x7f"), "\"a\\\"b\\\\c\\nd?e?\"");
  // A backslash before a letter would be a dot escape (\l, \N): doubled.
  EXPECT_EQ(DotQuote("\\N\\l"), "\"\\\\N\\\\l\"");
}

// A graph whose name and string attribute hold quotes, backslashes, a
// newline and dot's own escape letters (names built through the API may
// hold anything).
std::unique_ptr<Graph> OddGraph() {
  auto g = std::make_unique<Graph>("we\"ird\\N name\n}");
  TensorType t;
  t.shape = {2};
  Value* x = g->AddParam("x.y_0", t, ParamKind::kInput);
  Attrs attrs;
  attrs.Set(AttrKey::kEpilogue, std::string("q\"u\\o}te{|<>\n"));
  Node* n = g->AddOp(OpId::kRelu, {x}, std::move(attrs), t);
  g->SetReturns({n->output()});
  return g;
}

TEST(DotTest, OddNamesStayInsideTheirQuotes) {
  const std::string dot = PrintDot(*OddGraph());
  EXPECT_EQ(dot.rfind("digraph \"@we\\\"ird\\\\N name\\n}\" {\n", 0), 0u)
      << dot;
  // The attribute string as the text form prints it ("q\"u\\o}te{|<>\n"),
  // then escaped once more for dot.
  EXPECT_NE(dot.find("{epilogue = \\\"q\\\\\\\"u\\\\\\\\o}te{|<>\\\\n\\\"}"),
            std::string::npos)
      << dot;
  EXPECT_NE(NodeLine(dot, "p0").find("label=\"%x.y_0\\nf32[2]\\ninput\""),
            std::string::npos)
      << dot;
  EXPECT_EQ(Count(dot, "\n"), 10) << dot;  // no raw newline inside a label
}

TEST(DotTest, LongAttributeListsTakeALinePerAttribute) {
  Graph g("g");
  TensorType a, b, bias, out;
  a.shape = {4, 8};
  b.shape = {16, 8};
  bias.shape = {16};
  out.shape = {4, 16};
  Value* x = g.AddParam("x", a, ParamKind::kInput);
  Value* w = g.AddParam("w", b, ParamKind::kState);
  Value* c = g.AddParam("c", bias, ParamKind::kState);
  Node* mm = g.AddOp(OpId::kMatmul, {x, w, c},
                     {{AttrKey::kTransposeA, false},
                      {AttrKey::kTransposeB, true},
                      {AttrKey::kEpilogue, std::string("bias,relu")}},
                     out);
  Node* r = g.AddOp(OpId::kReshape, {mm->output()},
                    {{AttrKey::kShape, std::vector<int64_t>(30, 1)}}, out);
  g.SetReturns({r->output()});
  const std::string dot = PrintDot(g);
  // Nothing is cut from a list that needs a line per attribute ...
  EXPECT_NE(NodeLine(dot, "n0").find(
                "label=\"%0 = matmul\\n{transpose_a = false,\\ntranspose_b "
                "= true,\\nepilogue = \\\"bias,relu\\\"}\\nf32[4,16]\""),
            std::string::npos)
      << dot;
  // ... but a value longer than 40 characters is.
  EXPECT_NE(
      NodeLine(dot, "n1").find(
          "label=\"%1 = reshape\\n{shape = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, "
          "1, 1, 1, ...}\\nf32[4,16]\""),
      std::string::npos)
      << dot;
}

// Runs Graphviz on `dot` text; "" when it accepts it, else why not.
std::string RunGraphviz(const std::string& dot, const std::string& name) {
  const std::filesystem::path dir = ::testing::TempDir();
  const std::string in = (dir / (name + ".dot")).string();
  const std::string out = (dir / (name + ".svg")).string();
  std::ofstream(in) << dot;
  const std::string command =
      absl::StrCat("dot -Tsvg -o '", out, "' '", in, "' 2>&1");
  if (std::system(command.c_str()) != 0) return "failed: " + command;
  std::ifstream svg(out);
  std::stringstream text;
  text << svg.rdbuf();
  if (text.str().find("<svg") == std::string::npos) return "no <svg> in output";
  return "";
}

TEST(DotTest, GraphvizAcceptsTheText) {
  if (std::system("command -v dot >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "Graphviz is not installed (no `dot` on PATH)";
  }
  std::unique_ptr<Graph> g = Parse(kStep);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(RunGraphviz(PrintDot(*g), "dot_test_step"), "");
  EXPECT_EQ(RunGraphviz(PrintDot(*OddGraph()), "dot_test_odd"), "");
}

}  // namespace
}  // namespace stepjit::ir
