// Files PyTorch wrote (tests/data/checkpoint, made by
// make_torch_checkpoints.py) load without PyTorch and give PyTorch's
// numbers: every dtype's values, an MLP's logits, and one more AdamW step
// from PyTorch's optimizer state.
#include <algorithm>
#include <array>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"

namespace stepjit {
namespace {

std::string DataPath(const std::string& name) {
  return std::string(STEPJIT_TEST_DATA_DIR) + "/checkpoint/" + name;
}

// expected.txt: "name v1 v2 ..." per line (Python's repr, so doubles parse
// back exactly), "#" comments.
std::map<std::string, std::vector<std::string>> Expected() {
  std::ifstream in(DataPath("expected.txt"));
  EXPECT_TRUE(in.good()) << "cannot read " << DataPath("expected.txt");
  std::map<std::string, std::vector<std::string>> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name, v;
    fields >> name;
    while (fields >> v) out[name].push_back(v);
  }
  return out;
}

std::vector<double> Doubles(const std::vector<std::string>& text) {
  std::vector<double> out;
  for (const std::string& v : text) out.push_back(std::stod(v));
  return out;
}

std::vector<double> Values(const Tensor& t) {
  return t.to(DType::kF64).contiguous().to_vector<double>();
}

TEST(TorchCheckpointTest, EveryDTypeReadsAsTorchWroteIt) {
  absl::StatusOr<StateDict> sd =
      LoadSafetensors(DataPath("torch_dtypes.safetensors"));
  ASSERT_TRUE(sd.ok()) << sd.status();
  EXPECT_EQ(sd->metadata.at("made_by"), "torch");
  auto expected = Expected();
  ASSERT_EQ(sd->tensors.size(), 8u);
  const std::vector<std::pair<std::string, DType>> want = {
      {"f32", DType::kF32},   {"f64", DType::kF64},   {"f16", DType::kF16},
      {"bf16", DType::kBF16}, {"i64", DType::kI64},   {"i32", DType::kI32},
      {"bool", DType::kBool}, {"scalar", DType::kF32}};
  for (const auto& [name, dtype] : want) {
    SCOPED_TRACE(name);
    const Tensor* t = sd->find(name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->dtype(), dtype);
    const std::vector<std::string>& e = expected["dtype." + name];
    if (!ir::IsFloating(dtype)) {
      // Parsed as integers: an i64 beyond 2^53 has no exact double.
      std::vector<int64_t> values;
      for (const std::string& v : e) values.push_back(std::stoll(v));
      std::vector<int64_t> got;
      const Tensor flat = t->reshape({-1});
      for (int64_t i = 0; i < flat.numel(); ++i)
        got.push_back(flat.slice(0, i, i + 1).item<int64_t>());
      EXPECT_EQ(got, values);
    } else {
      EXPECT_EQ(Values(*t), Doubles(e));  // exact: same bits widened
    }
  }
  EXPECT_EQ(sd->find("scalar")->dim(), 0);
  EXPECT_EQ(sd->find("i32")->shape(), (Shape{2, 1}));
}

nn::Sequential TorchMlp() {
  return nn::Sequential(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 3));
}

TEST(TorchCheckpointTest, MlpGivesTorchsLogitsAndNextStep) {
  auto expected = Expected();
  nn::Sequential model = TorchMlp();
  optim::AdamW opt(model.parameters(), {.lr = 0.05, .weight_decay = 0.01});
  const absl::Status s =
      LoadCheckpoint(DataPath("torch_mlp.safetensors"),
                     {.model = model.ptr(), .optimizer = &opt});
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(opt.step_count().item<int64_t>(), 3);
  EXPECT_EQ(opt.lr(), static_cast<float>(0.05));

  // Same parameters, a different GEMM: within f32 rounding of the sums.
  const Tensor eval_x =
      from_vector(Doubles(expected["eval_x"]), {2, 4}).to(DType::kF32);
  const std::vector<double> logits = Values(model(eval_x));
  const std::vector<double> want_logits = Doubles(expected["logits"]);
  ASSERT_EQ(logits.size(), want_logits.size());
  for (size_t i = 0; i < logits.size(); ++i)
    EXPECT_NEAR(logits[i], want_logits[i], 1e-6) << i;

  // One more AdamW step from torch's moments and step count lands on
  // torch's parameters: 1e-6 absolute (lr 0.05 times f32 rounding of
  // m/sqrt(v)).
  const Tensor x =
      from_vector(Doubles(expected["next_x"]), {4, 4}).to(DType::kF32);
  std::vector<int64_t> labels;
  for (const std::string& v : expected["next_y"])
    labels.push_back(std::stoll(v));
  const Tensor y = from_vector(labels, {4});
  opt.zero_grad();
  Tensor loss = cross_entropy(model(x), y);
  loss.backward();
  opt.step();
  EXPECT_NEAR(loss.item<double>(), std::stod(expected["next_loss"].at(0)),
              1e-6);
  for (const auto& [name, t] : model.state_dict()) {
    SCOPED_TRACE(name);
    const std::vector<double> got = Values(t),
                              want = Doubles(expected["after." + name]);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-6) << i;
  }
}

// make_torch_checkpoints.py's CNN with batch norm, by the same names.
nn::Sequential TorchCnn() {
  const nn::Conv2dModuleOptions no_bias{.padding = {1, 1}, .bias = false};
  return nn::Sequential(
      nn::Conv2d(1, 4, 3, no_bias), nn::BatchNorm2d(4), nn::ReLU(),
      nn::MaxPool2d(2),
      nn::Conv2d(4, 6, 3,
                 nn::Conv2dModuleOptions{
                     .stride = {2, 2}, .padding = {1, 1}, .bias = false}),
      nn::BatchNorm2d(6), nn::ReLU(), nn::Conv2d(6, 5, 1),
      nn::AdaptiveAvgPool2d(std::array<int64_t, 2>{1, 1}), nn::Flatten(),
      nn::Linear(5, 3));
}

// The buffers come across too: eval with PyTorch's running statistics gives
// its logits, and one more training step moves parameters and running
// statistics (and num_batches_tracked, 3 -> 4) where PyTorch moved them.
TEST(TorchCheckpointTest, CnnWithBatchNormCarriesItsBuffers) {
  auto expected = Expected();
  nn::Sequential model = TorchCnn();
  optim::AdamW opt(model.parameters(), {.lr = 0.05, .weight_decay = 0.01});
  const absl::Status s =
      LoadCheckpoint(DataPath("torch_cnn.safetensors"),
                     {.model = model.ptr(), .optimizer = &opt});
  ASSERT_TRUE(s.ok()) << s;
  const auto state = model.state_dict();
  for (const char* name : {"1.num_batches_tracked", "5.num_batches_tracked"}) {
    const auto it =
        std::find_if(state.begin(), state.end(),
                     [&](const auto& kv) { return kv.first == name; });
    ASSERT_NE(it, state.end()) << name;
    EXPECT_EQ(it->second.dtype(), DType::kI64) << name;
    EXPECT_EQ(it->second.item<int64_t>(), 3) << name;
  }

  model->eval();
  const Tensor eval_x =
      from_vector(Doubles(expected["cnn.eval_x"]), {2, 1, 8, 8})
          .to(DType::kF32);
  std::vector<double> logits;
  {
    NoGradGuard no_grad;
    logits = Values(model(eval_x));
  }
  const std::vector<double> want_logits = Doubles(expected["cnn.logits"]);
  ASSERT_EQ(logits.size(), want_logits.size());
  for (size_t i = 0; i < logits.size(); ++i)
    EXPECT_NEAR(logits[i], want_logits[i], 1e-5) << i;

  // Training mode: batch statistics, running statistics updated. 1e-5
  // absolute: batch-norm statistics and convolutions sum in other orders.
  model->train();
  const Tensor x = from_vector(Doubles(expected["cnn.next_x"]), {4, 1, 8, 8})
                       .to(DType::kF32);
  std::vector<int64_t> labels;
  for (const std::string& v : expected["cnn.next_y"])
    labels.push_back(std::stoll(v));
  opt.zero_grad();
  Tensor loss = cross_entropy(model(x), from_vector(labels, {4}));
  loss.backward();
  opt.step();
  EXPECT_NEAR(loss.item<double>(), std::stod(expected["cnn.next_loss"].at(0)),
              1e-5);
  size_t compared = 0;
  for (const auto& [name, t] : model.state_dict()) {
    SCOPED_TRACE(name);
    const std::vector<double> got = Values(t),
                              want = Doubles(expected["cnn.after." + name]);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-5) << i;
    ++compared;
  }
  EXPECT_EQ(compared, 16u);  // 10 parameters and 6 buffers
}

TEST(TorchCheckpointTest, MismatchedModelIsRefusedWithNames) {
  nn::Sequential wide(nn::Linear(4, 16), nn::ReLU(), nn::Linear(16, 3));
  optim::AdamW opt(wide.parameters(), {.lr = 0.05, .weight_decay = 0.01});
  const absl::Status s =
      LoadCheckpoint(DataPath("torch_mlp.safetensors"),
                     {.model = wide.ptr(), .optimizer = &opt});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("0.weight: expected f32[16, 4], found f32[8, 4]"),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace stepjit
