// State dicts and checkpoints: PyTorch's names, exact round trips through
// safetensors files, resumed training equal to uninterrupted training, and
// loads that fail with a message and change nothing. Also from_blob and
// item<T>.
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "frontend/stepjit.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/train_step.h"
#include "training/io/safetensors.h"

namespace stepjit {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

std::vector<float> Values(const Tensor& t) {
  return t.contiguous().to(DType::kF32).to_vector<float>();
}

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("stepjit_ckpt_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// A safetensors file by hand: the header's length (under 256) in 8 bytes,
// the header, then the data.
std::string SafetensorsBytes(const std::string& header,
                             const std::string& data) {
  std::string file(8, '\0');
  file[0] = static_cast<char>(header.size());
  return file + header + data;
}

std::vector<std::string> Names(const NamedTensors& sd) {
  std::vector<std::string> out;
  for (const auto& [n, t] : sd) out.push_back(n);
  return out;
}

nn::Sequential Mlp(uint64_t seed) {
  manual_seed(seed);
  return nn::Sequential(nn::Linear(6, 8), nn::ReLU(), nn::Linear(8, 3));
}

using test::Batch;
std::vector<Batch> Batches(int n) {
  return test::RandomBatches(n, /*seed=*/11, /*rows=*/5, /*features=*/6,
                             /*classes=*/3);
}

// Everything a run's future depends on, flattened.
std::vector<std::vector<float>> Snapshot(const nn::Sequential& model) {
  std::vector<std::vector<float>> out;
  for (const Tensor& p : model.parameters()) out.push_back(Values(p));
  return out;
}

template <typename Opt>
float Step(nn::Sequential& model, Opt& opt, const Batch& b) {
  opt.zero_grad();
  Tensor loss = cross_entropy(model(b.x), b.y);
  loss.backward();
  opt.step();
  return static_cast<float>(loss.item());
}

// Trains `model` two AdamW steps, then saves it with that optimizer and a
// default grad scaler to `path`.
absl::Status TrainAndSave(nn::Sequential& model, const std::string& path) {
  optim::AdamW opt(model.parameters(), {.lr = 1e-2});
  amp::GradScaler scaler;
  for (const Batch& b : Batches(2)) Step(model, opt, b);
  return SaveCheckpoint(
      path, {.model = model.ptr(), .optimizer = &opt, .scaler = &scaler});
}

TEST(StateDictTest, NamesFollowPyTorch) {
  nn::Sequential model = Mlp(1);
  EXPECT_THAT(Names(model.state_dict()),
              ElementsAre("0.weight", "0.bias", "2.weight", "2.bias"));
  EXPECT_EQ(model.state_dict()[0].second.shape(), (Shape{8, 6}));  // [out, in]

  nn::TransformerBlock block(8, 2);
  EXPECT_THAT(Names(block.state_dict()),
              ElementsAre("ln1.weight", "ln1.bias", "attn.in_proj_weight",
                          "attn.in_proj_bias", "attn.out_proj.weight",
                          "attn.out_proj.bias", "ln2.weight", "ln2.bias",
                          "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"));
}

TEST(StateDictTest, TiedWeightsAppearUnderEachName) {
  nn::GPT gpt(nn::GPTOptions{.vocab = 5,
                             .context = 4,
                             .d_model = 8,
                             .heads = 2,
                             .layers = 1,
                             .tie_weights = true});
  const std::vector<std::string> names = Names(gpt.state_dict());
  EXPECT_EQ(names.front(), "tok.weight");
  EXPECT_EQ(names.back(), "head.weight");
  EXPECT_THAT(names, ::testing::Contains("h0.attn.out_proj.weight"));
  EXPECT_EQ(names.size(), gpt.named_parameters().size() + 1);
  // Loading both names copies twice into one tensor: fine when they agree.
  EXPECT_TRUE(gpt.load_state_dict(gpt.state_dict()).ok());
}

TEST(StateDictTest, StateDictSharesStorageAndLoadCopiesInPlace) {
  nn::Sequential a = Mlp(1), b = Mlp(2);
  const Tensor w = b.parameters()[0];
  const void* storage = w.data_ptr();
  ASSERT_TRUE(b.load_state_dict(a.state_dict()).ok());
  EXPECT_EQ(Snapshot(a), Snapshot(b));
  EXPECT_EQ(b.parameters()[0].data_ptr(), storage) << "same storage";
  EXPECT_TRUE(b.parameters()[0].is_same(w)) << "same identity";
  EXPECT_TRUE(b.parameters()[0].requires_grad());
  EXPECT_EQ(a.state_dict()[0].second.data_ptr(), a.parameters()[0].data_ptr());
  EXPECT_FALSE(a.state_dict()[0].second.requires_grad());
}

TEST(StateDictTest, MismatchedStateDictNamesEverythingAndChangesNothing) {
  nn::Sequential model = Mlp(1);
  const auto before = Snapshot(model);
  NamedTensors sd = Mlp(2).state_dict();
  sd.erase(sd.begin() + 1);                 // 0.bias missing
  sd[0].second = zeros({6, 8});             // 0.weight transposed
  sd.emplace_back("3.weight", zeros({1}));  // unexpected
  sd.emplace_back("2.bias", zeros({3}));    // given twice
  const absl::Status s = model.load_state_dict(sd);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("missing 1 ('0.bias')"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("unexpected 1 ('3.weight')"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("given twice: '2.bias'"));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("0.weight: expected f32[8, 6], found f32[6, 8]"));
  EXPECT_EQ(Snapshot(model), before);

  NamedTensors ints = Mlp(2).state_dict();
  ints[1].second = zeros({8}, {.dtype = DType::kI64});
  EXPECT_THAT(std::string(model.load_state_dict(ints).message()),
              HasSubstr("0.bias: expected f32[8], found i64[8]"));
  EXPECT_EQ(Snapshot(model), before);
}

TEST(StateDictTest, FloatingDTypesConvert) {
  nn::Sequential a = Mlp(1), b = Mlp(2);
  NamedTensors sd = a.state_dict();
  for (auto& [n, t] : sd) t = t.to(DType::kF64);
  ASSERT_TRUE(b.load_state_dict(sd).ok());
  EXPECT_EQ(Snapshot(a), Snapshot(b));
  EXPECT_EQ(b.parameters()[0].dtype(), DType::kF32);
}

TEST(SafetensorsFileTest, EveryDTypeRoundTripsExactly) {
  StateDict sd;
  sd.tensors = {
      {"f32",
       from_vector(std::vector<float>{1.5f, -0.0f, 3e38f, 1e-40f}, {2, 2})},
      {"f64", from_vector(std::vector<double>{0.1, -2.5e300}, {2})},
      {"f16", from_vector(std::vector<float>{0.5f, -65504.0f, 1e-7f}, {3},
                          {.dtype = DType::kF16})},
      {"bf16", from_vector(std::vector<float>{1.0f, -3.0e38f}, {2},
                           {.dtype = DType::kBF16})},
      {"i64",
       from_vector(
           std::vector<int64_t>{std::numeric_limits<int64_t>::max(), -1}, {2})},
      {"i32", from_vector(std::vector<int64_t>{-7, 1 << 30}, {2},
                          {.dtype = DType::kI32})},
      {"bool",
       from_vector(std::vector<float>{1, 0, 1}, {3}, {.dtype = DType::kBool})},
      {"scalar", scalar_tensor(4.25)},
      {"empty", zeros({0, 3})},
      {"strided", arange(0, 12, 1, {.dtype = DType::kF32}).view({3, 4}).t()},
  };
  sd.metadata = {{"note", "ünïcode"}};
  const std::string path = TempPath("dtypes.safetensors");
  ASSERT_TRUE(SaveSafetensors(path, sd).ok());
  absl::StatusOr<StateDict> back = LoadSafetensors(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->metadata, sd.metadata);
  ASSERT_EQ(back->tensors.size(), sd.tensors.size());
  for (size_t i = 0; i < sd.tensors.size(); ++i) {
    const auto& [name, want] = sd.tensors[i];
    SCOPED_TRACE(name);
    EXPECT_EQ(back->tensors[i].first, name) << "file order is save order";
    const Tensor& got = back->tensors[i].second;
    EXPECT_EQ(got.dtype(), want.dtype());
    EXPECT_EQ(got.shape(), want.shape());
    if (want.dtype() == DType::kI64) {
      EXPECT_EQ(got.to_vector<int64_t>(),
                want.contiguous().to_vector<int64_t>());
    } else {
      const std::vector<double> a =
          got.to(DType::kF64).contiguous().to_vector<double>();
      const std::vector<double> b =
          want.to(DType::kF64).contiguous().to_vector<double>();
      EXPECT_EQ(a, b);
    }
  }
  std::remove(path.c_str());
}

TEST(SafetensorsFileTest, UnsupportedDTypeAndBadBoolAreErrors) {
  const std::string path = TempPath("u8.safetensors");
  // A U8 tensor written by hand: the format allows it, stepjit has no U8.
  const std::string header =
      R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})";
  ASSERT_TRUE(
      io::WriteFileAtomically(path, SafetensorsBytes(header, "ab")).ok());
  EXPECT_THAT(
      std::string(LoadSafetensors(path).status().message()),
      HasSubstr("tensor 'x' has dtype U8, which stepjit has no dtype for"));
  const std::string bool_header =
      R"({"x":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})";
  ASSERT_TRUE(
      io::WriteFileAtomically(path, SafetensorsBytes(bool_header, "ab")).ok());
  EXPECT_THAT(std::string(LoadSafetensors(path).status().message()),
              HasSubstr("(BOOL) holds byte 97 at element 0; expected 0 or 1"));
  std::remove(path.c_str());
}

// A sparse file whose header names a terabyte of tensors is refused from
// its header, before any tensor is allocated or any data read.
TEST(SafetensorsFileTest, TensorsLargerThanMemoryAreRefusedFromTheHeader) {
  const std::string path = TempPath("sparse_tib.safetensors");
  const int64_t tib = int64_t{1} << 40;
  const std::string header =
      absl::StrCat(R"({"w":{"dtype":"F32","shape":[)", tib / 4,
                   R"(],"data_offsets":[0,)", tib, "]}}");
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i)
    head[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  ASSERT_TRUE(io::WriteFileAtomically(path, head + header).ok());
  ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(8 + header.size() + tib)),
            0);
  const absl::Status st = LoadSafetensors(path).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("its 1 tensors hold 1099511627776 bytes (1.02e+03 "
                        "GiB); this machine has"));
  std::remove(path.c_str());
}

// The atomic write replaces a regular file and follows a symlink to one;
// anything else at the path (a FIFO here, as /dev/null or /dev/full would
// be) is refused and left as it was.
TEST(SafetensorsFileTest, WritesReplaceOnlyRegularFiles) {
  const std::string dir = TempPath("atomic_write_dir");
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(std::filesystem::create_directory(dir));
  const std::string file = dir + "/a.bin", fifo = dir + "/fifo",
                    link = dir + "/link", fifo_link = dir + "/fifo_link";
  ASSERT_TRUE(io::WriteFileAtomically(file, "one").ok());
  ASSERT_TRUE(io::WriteFileAtomically(file, "two").ok());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::filesystem::create_symlink(file, link);
  std::filesystem::create_symlink(fifo, fifo_link);

  const absl::Status to_fifo = io::WriteFileAtomically(fifo, "x");
  EXPECT_EQ(to_fifo.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(to_fifo.message()),
              HasSubstr("refusing to write '" + fifo +
                        "': it is a FIFO, not a regular file"));
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
  const absl::Status to_dir = io::WriteFileAtomically(dir, "x");
  EXPECT_THAT(std::string(to_dir.message()), HasSubstr("it is a directory"));
  EXPECT_TRUE(std::filesystem::is_directory(dir));
  const absl::Status via_link = io::WriteFileAtomically(fifo_link, "x");
  EXPECT_THAT(std::string(via_link.message()),
              HasSubstr("(a symlink to '" + fifo + "'): it is a FIFO"));
  EXPECT_TRUE(std::filesystem::is_symlink(fifo_link));

  // Through a symlink to a regular file: the target changes, the link stays.
  ASSERT_TRUE(io::WriteFileAtomically(link, "three").ok());
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  std::ifstream in(file, std::ios::binary);
  const std::string got((std::istreambuf_iterator<char>(in)),
                        std::istreambuf_iterator<char>());
  EXPECT_EQ(got, "three");
  // No temporary file is left behind by the refusals or the writes.
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 4);
  std::filesystem::remove_all(dir);
}

// Training 3 steps, saving, loading into fresh objects and training 3 more
// equals training 6 steps straight through, bit for bit.
template <typename Opt, typename Options>
void ExpectResumeIsExact(Options options) {
  const std::vector<Batch> batches = Batches(6);
  nn::Sequential straight = Mlp(1);
  Opt straight_opt(straight.parameters(), options);
  std::vector<float> straight_losses;
  for (const Batch& b : batches)
    straight_losses.push_back(Step(straight, straight_opt, b));

  nn::Sequential first = Mlp(1);
  Opt first_opt(first.parameters(), options);
  std::vector<float> losses;
  for (int i = 0; i < 3; ++i)
    losses.push_back(Step(first, first_opt, batches[i]));
  const std::string path = TempPath("resume.safetensors");
  ASSERT_TRUE(
      SaveCheckpoint(path, {.model = first.ptr(), .optimizer = &first_opt})
          .ok());

  nn::Sequential resumed = Mlp(99);
  Opt resumed_opt(resumed.parameters(), options);
  const absl::Status s =
      LoadCheckpoint(path, {.model = resumed.ptr(), .optimizer = &resumed_opt});
  ASSERT_TRUE(s.ok()) << s;
  for (int i = 3; i < 6; ++i)
    losses.push_back(Step(resumed, resumed_opt, batches[i]));
  EXPECT_EQ(losses, straight_losses);
  EXPECT_EQ(Snapshot(resumed), Snapshot(straight));
  std::remove(path.c_str());
}

TEST(CheckpointTest, AdamWResumeIsExact) {
  ExpectResumeIsExact<optim::AdamW>(optim::AdamWOptions{.lr = 1e-2});
}

TEST(CheckpointTest, SGDMomentumResumeIsExact) {
  ExpectResumeIsExact<optim::SGD>(
      optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.1});
}

TEST(CheckpointTest, OptimizerStateDictFollowsPyTorch) {
  nn::Sequential model = Mlp(1);
  optim::AdamW opt(optim::DecayGroups(*model, 0.05), {.lr = 2e-3});
  for (const Batch& b : Batches(2)) Step(model, opt, b);
  const StateDict sd = opt.state_dict();
  EXPECT_EQ(sd.metadata.at("type"), "AdamW");
  // DecayGroups: the weights decay, the biases do not. Indices count the
  // optimizer's parameters group by group (as PyTorch's do): 0, 1 are the
  // weights, 2, 3 the biases.
  EXPECT_EQ(
      sd.metadata.at("param_groups"),
      "[{\"lr\":0.0020000000949949026,\"weight_decay\":0.050000000000000003,"
      "\"betas\":[0.90000000000000002,0.999],\"eps\":1e-08,\"amsgrad\":false,"
      "\"maximize\":false,\"params\":[0,1]},{\"lr\":0.0020000000949949026,"
      "\"weight_decay\":0,\"betas\":[0.90000000000000002,0.999],\"eps\":1e-08,"
      "\"amsgrad\":false,\"maximize\":false,\"params\":[2,3]}]");
  EXPECT_THAT(
      Names(sd.tensors),
      ElementsAre("state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq",
                  "state.1.step", "state.1.exp_avg", "state.1.exp_avg_sq",
                  "state.2.step", "state.2.exp_avg", "state.2.exp_avg_sq",
                  "state.3.step", "state.3.exp_avg", "state.3.exp_avg_sq"));
  EXPECT_EQ(sd.find("state.2.step")->item<float>(), 2.0f);
  EXPECT_EQ(Values(*sd.find("state.2.exp_avg")), Values(opt.state(2).exp_avg));
}

TEST(CheckpointTest, OptimizerLoadErrorsChangeNothing) {
  nn::Sequential model = Mlp(1);
  optim::AdamW opt(model.parameters(), {.lr = 1e-2});
  for (const Batch& b : Batches(2)) Step(model, opt, b);
  const StateDict good = opt.state_dict();
  // Cloned: `good` shares the optimizer's storage.
  StateDict saved;
  saved.metadata = good.metadata;
  for (const auto& [n, t] : good.tensors)
    saved.tensors.emplace_back(n, t.clone());

  nn::Sequential other = Mlp(2);
  optim::AdamW fresh(other.parameters(), {.lr = 1e-2, .beta1 = 0.8});
  EXPECT_THAT(std::string(fresh.load_state_dict(saved).message()),
              HasSubstr("param group 0: betas is [0.90000000000000002,0.999] "
                        "in the state dict but "
                        "[0.80000000000000004,0.999] in this optimizer"));

  optim::AdamW opt2(other.parameters(), {.lr = 1e-2});
  StateDict bad = saved;
  bad.tensors.pop_back();  // state.3.exp_avg_sq
  EXPECT_THAT(std::string(opt2.load_state_dict(bad).message()),
              HasSubstr("'state.3.exp_avg_sq' is missing"));
  bad = saved;
  bad.tensors.emplace_back("state.9.exp_avg", zeros({1}));
  EXPECT_THAT(std::string(opt2.load_state_dict(bad).message()),
              HasSubstr("unexpected tensors 'state.9.exp_avg'"));
  bad = saved;
  bad.tensors[1].second = zeros({6, 8});
  EXPECT_THAT(
      std::string(opt2.load_state_dict(bad).message()),
      HasSubstr("'state.0.exp_avg': expected f32[8, 6], found f32[6, 8]"));
  bad = saved;
  bad.tensors[3].second = scalar_tensor(5.0);
  EXPECT_THAT(std::string(opt2.load_state_dict(bad).message()),
              HasSubstr("'state.1.step' is 5 but an earlier parameter's is 2"));
  bad = saved;
  bad.metadata["param_groups"] = "[]";
  EXPECT_THAT(
      std::string(opt2.load_state_dict(bad).message()),
      HasSubstr("expected 'param_groups' as a list of 1 groups, found []"));
  // Nested 100,000 deep inside a metadata string: refused before the
  // (recursive) JSON parser sees it, not a stack overflow.
  bad = saved;
  bad.metadata["param_groups"] =
      std::string(100000, '[') + std::string(100000, ']');
  EXPECT_THAT(std::string(opt2.load_state_dict(bad).message()),
              HasSubstr("metadata 'param_groups' nests deeper than 64 levels"));
  bad = saved;
  bad.metadata["param_groups"] = "[\"" + std::string(100000, '[') + "\"]";
  EXPECT_THAT(std::string(opt2.load_state_dict(bad).message()),
              Not(HasSubstr("nests deeper")));
  bad = saved;
  bad.metadata["type"] = "SGD";
  EXPECT_THAT(
      std::string(opt2.load_state_dict(bad).message()),
      HasSubstr("the state dict is of a SGD optimizer, this one is AdamW"));
  for (size_t i = 0; i < 4; ++i)
    EXPECT_FALSE(opt2.state(i).exp_avg.defined()) << "nothing created";
  EXPECT_EQ(opt2.step_count().item<float>(), 0.0f);

  // An optimizer that has state refuses a file without it (it cannot drop
  // state a compiled step may hold).
  StateDict empty = saved;
  empty.tensors.clear();
  EXPECT_THAT(std::string(opt.load_state_dict(empty).message()),
              HasSubstr("parameter 0 has state in this optimizer but none in "
                        "the state dict"));
}

TEST(CheckpointTest, LrIsLoadedAndHyperparametersFromPythonIntsMatch) {
  nn::Sequential model = Mlp(1);
  optim::SGD opt(model.parameters(), {.lr = 0.1});
  StateDict sd;
  // As PyTorch writes an SGD with default (int) momentum and dampening.
  sd.metadata["param_groups"] =
      R"([{"lr": 0.25, "momentum": 0, "dampening": 0, "weight_decay": 0, "nesterov": false,)"
      R"( "maximize": false, "foreach": null, "differentiable": false, "fused": null,)"
      R"( "params": [0, 1, 2, 3]}])";
  const absl::Status s = opt.load_state_dict(sd);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(opt.lr(), 0.25);
}

TEST(CheckpointTest, ScalerStateRoundTripsAndChecksOptions) {
  amp::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 3});
  Tensor(scaler.scale_tensor()).fill_(256.0);
  Tensor(scaler.growth_tracker_tensor()).fill_(2.0);
  const std::string path = TempPath("scaler.safetensors");
  ASSERT_TRUE(SaveCheckpoint(path, {.scaler = &scaler}).ok());
  absl::StatusOr<StateDict> file = LoadSafetensors(path);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->metadata.at("scaler.growth_interval"), "3");
  EXPECT_EQ(file->metadata.at("scaler.growth_factor"), "2");
  EXPECT_EQ(file->find("scaler.scale")->item<double>(), 256.0);

  amp::GradScaler loaded({.init_scale = 1024.0, .growth_interval = 3});
  ASSERT_TRUE(LoadCheckpoint(path, {.scaler = &loaded}).ok());
  EXPECT_EQ(loaded.get_scale(), 256.0);
  EXPECT_EQ(loaded.growth_tracker(), 2);

  amp::GradScaler other({.growth_interval = 2000});
  EXPECT_THAT(
      std::string(LoadCheckpoint(path, {.scaler = &other}).message()),
      HasSubstr(
          "growth_interval is '3' in the state dict but 2000 in this scaler"));
  EXPECT_EQ(other.get_scale(), 65536.0);
  std::remove(path.c_str());
}

// Values that pass as doubles but poison training in the dtype they are
// used in: each refused with the value and the range named, nothing loaded.
TEST(CheckpointTest, ValuesAreCheckedInTheDTypeTheyAreUsedIn) {
  nn::Sequential model = Mlp(1);
  optim::AdamW opt(model.parameters(), {.lr = 1e-2});
  Tensor x = randn({4, 6});
  opt.zero_grad();
  sum(model(x)).backward();
  opt.step();
  const StateDict saved = opt.state_dict();
  auto with_lr = [&](const std::string& lr) {
    StateDict bad = saved;
    std::string& groups = bad.metadata.at("param_groups");
    const size_t at = groups.find("\"lr\":");
    const size_t end = groups.find_first_of(",}", at);
    groups.replace(at, end - at, "\"lr\":" + lr);
    return std::string(opt.load_state_dict(bad).message());
  };
  EXPECT_THAT(with_lr("1e300"),
              HasSubstr("expected a learning rate 'lr' >= 0 and finite as "
                        "f32, found 1e+300"));
  EXPECT_THAT(with_lr("0.5"), Not(HasSubstr("learning rate")));
  auto with_step = [&](double v) {
    StateDict bad = saved;
    for (auto& [name, t] : bad.tensors) {
      if (name.size() > 5 && name.substr(name.size() - 5) == ".step")
        t = scalar_tensor(v);
    }
    return std::string(opt.load_state_dict(bad).message());
  };
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_THAT(with_step(inf),
              HasSubstr("is inf, not a step count (a whole number from 0 to "
                        "1.67772e+07, the most f32 counts exactly)"));
  EXPECT_THAT(with_step(1e30), HasSubstr("is 1e+30, not a step count"));
  EXPECT_EQ(with_step(7), "");
  EXPECT_EQ(opt.step_count().item(), 7.0);

  amp::GradScaler scaler;
  auto scaler_with = [&](const char* name, double v) {
    amp::GradScaler source;
    StateDict sd = source.state_dict();
    for (auto& [n, t] : sd.tensors) {
      // f64, as a hostile file may store it: the check is in f32.
      if (n == name) t = scalar_tensor(v, {.dtype = DType::kF64});
    }
    return std::string(scaler.load_state_dict(sd).message());
  };
  EXPECT_THAT(scaler_with("scale", 1.4e-45),
              HasSubstr("'scale' is 1.4e-45, not a positive scale whose value "
                        "and inverse are finite in f32"));
  EXPECT_THAT(scaler_with("scale", 1e39), HasSubstr("'scale' is 1e+39"));
  EXPECT_THAT(scaler_with("_growth_tracker", inf),
              HasSubstr("'_growth_tracker' is inf, not a count of steps (0 to "
                        "2147483647)"));
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler_with("scale", 1e-30), "");
  EXPECT_EQ(scaler.get_scale(), static_cast<float>(1e-30));
}

// NaN/inf weights and a negative second moment load (as PyTorch does) with
// a warning naming each tensor.
TEST(CheckpointTest, SuspectValuesLoadWithAWarningNamingTheTensor) {
  nn::Sequential model = Mlp(1);
  optim::AdamW opt(model.parameters(), {.lr = 1e-2});
  opt.zero_grad();
  sum(model(randn({4, 6}))).backward();
  opt.step();
  NoGradGuard no_grad;
  Tensor w = model.parameters()[0];
  Tensor(w).fill_(std::numeric_limits<double>::quiet_NaN());
  const StateDict sd = opt.state_dict();
  Tensor(sd.find("state.1.exp_avg_sq") ? *sd.find("state.1.exp_avg_sq")
                                       : Tensor())
      .fill_(-1.0);
  const std::string path = TempPath("suspect.safetensors");
  ASSERT_TRUE(
      SaveCheckpoint(path, {.model = model.ptr(), .optimizer = &opt}).ok());
  nn::Sequential other = Mlp(2);
  optim::AdamW other_opt(other.parameters(), {.lr = 1e-2});
  ::testing::internal::CaptureStderr();
  const absl::Status s =
      LoadCheckpoint(path, {.model = other.ptr(), .optimizer = &other_opt});
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_THAT(err, HasSubstr("tensor 'model.0.weight' holds " +
                             std::to_string(w.numel()) + " NaN or inf values"));
  EXPECT_THAT(err, HasSubstr("tensor 'optimizer.state.1.exp_avg_sq' holds"));
  EXPECT_THAT(err, HasSubstr("negative value"));
  EXPECT_TRUE(std::isnan(other.parameters()[0].to_vector<float>()[0]));
  std::remove(path.c_str());
}

// Value-level mutations of a valid checkpoint (the structure stays valid,
// so every file gets past the reader): hostile numbers in the metadata
// (inf, nan, 1e300, -1, 2^63, 1.4e-45, text) and special bit patterns in
// the tensors. 600 mutated files, seeded: each load either succeeds, and
// then training goes on with finite values from finite ones, or fails
// with a message and changes nothing. Never a crash.
TEST(CheckpointTest, ValueMutationsLoadCleanlyOrChangeNothing) {
  nn::Sequential model = Mlp(1);
  const std::string path = TempPath("mutated.safetensors");
  ASSERT_TRUE(TrainAndSave(model, path).ok());
  std::string original;
  {
    std::ifstream in(path, std::ios::binary);
    original.assign(std::istreambuf_iterator<char>(in), {});
  }
  absl::StatusOr<io::SafetensorsFile> file =
      io::SafetensorsFile::Parse(original);
  ASSERT_TRUE(file.ok()) << file.status();
  const std::vector<std::string> numbers = {"inf",
                                            "-inf",
                                            "nan",
                                            "1e300",
                                            "-1",
                                            "0",
                                            "9223372036854775808",
                                            "1.4e-45",
                                            "1e-320",
                                            "\"x\"",
                                            "[]",
                                            "{}",
                                            "null",
                                            "true",
                                            "-0",
                                            "4294967297",
                                            "1e30"};
  const std::vector<uint32_t> bits = {0x7f800000u, 0xff800000u, 0x7fc00000u,
                                      0x00000001u, 0x80000000u, 0x7f7fffffu,
                                      0xff7fffffu};
  std::mt19937_64 rng(20261205);
  int loaded = 0, refused = 0;
  for (int iter = 0; iter < 600; ++iter) {
    std::map<std::string, std::string> metadata = file->metadata();
    std::vector<std::string> data;
    std::vector<io::SafetensorsTensorView> views;
    for (const io::SafetensorsEntry& e : file->entries())
      data.emplace_back(file->Data(e), static_cast<size_t>(e.end - e.begin));
    const int mutations = 1 + static_cast<int>(rng() % 3);
    for (int m = 0; m < mutations; ++m) {
      if (rng() % 2 == 0 && !metadata.empty()) {
        // A number inside a metadata value replaced by a hostile one.
        auto it = std::next(metadata.begin(),
                            static_cast<long>(rng() % metadata.size()));
        std::string& v = it->second;
        std::vector<std::pair<size_t, size_t>> spans;
        for (size_t i = 0; i < v.size();) {
          if (std::isdigit(static_cast<unsigned char>(v[i])) || v[i] == '-') {
            size_t j = i + 1;
            while (j < v.size() &&
                   (std::isalnum(static_cast<unsigned char>(v[j])) ||
                    v[j] == '.' || v[j] == '-' || v[j] == '+'))
              ++j;
            spans.push_back({i, j - i});
            i = j;
          } else {
            ++i;
          }
        }
        const std::string& hostile = numbers[rng() % numbers.size()];
        if (spans.empty()) {
          v = hostile;
        } else {
          const auto [at, len] = spans[rng() % spans.size()];
          v.replace(at, len, hostile);
        }
      } else {
        const size_t t = rng() % data.size();
        const io::SafetensorsEntry& e = file->entries()[t];
        if (e.dtype.ir == DType::kF32 && !data[t].empty()) {
          const size_t n = data[t].size() / 4;
          const uint32_t b = bits[rng() % bits.size()];
          std::memcpy(data[t].data() + 4 * (rng() % n), &b, 4);
        } else if (!data[t].empty()) {
          data[t][rng() % data[t].size()] = static_cast<char>(rng());
        }
      }
    }
    for (size_t i = 0; i < data.size(); ++i) {
      const io::SafetensorsEntry& e = file->entries()[i];
      views.push_back({e.name, *e.dtype.ir, e.shape, data[i]});
    }
    absl::StatusOr<std::string> bytes =
        io::SerializeSafetensors(views, metadata);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    ASSERT_TRUE(io::WriteFileAtomically(path, *bytes).ok());

    nn::Sequential target = Mlp(5);
    optim::AdamW target_opt(target.parameters(), {.lr = 1e-2});
    amp::GradScaler target_scaler({.init_scale = 8.0});
    const auto before = Snapshot(target);
    ::testing::internal::CaptureStderr();  // suspect-value warnings
    const absl::Status st = LoadCheckpoint(path, {.model = target.ptr(),
                                                  .optimizer = &target_opt,
                                                  .scaler = &target_scaler});
    ::testing::internal::GetCapturedStderr();
    if (!st.ok()) {
      ++refused;
      EXPECT_FALSE(st.message().empty());
      EXPECT_EQ(Snapshot(target), before) << "iteration " << iter << ": " << st;
      EXPECT_EQ(target_scaler.get_scale(), 8.0) << "iteration " << iter;
      EXPECT_EQ(target_opt.lr(), static_cast<float>(1e-2))
          << "iteration " << iter;
      continue;
    }
    ++loaded;
    // What loaded is usable: the hyperparameters are finite where the
    // optimizer and scaler use them.
    EXPECT_TRUE(std::isfinite(target_opt.lr())) << "iteration " << iter;
    EXPECT_TRUE(std::isfinite(target_scaler.get_scale()) &&
                target_scaler.get_scale() > 0)
        << "iteration " << iter;
  }
  EXPECT_GT(loaded, 0);
  EXPECT_GT(refused, 0);
  std::remove(path.c_str());
}

TEST(CheckpointTest, AFailedLoadChangesNothingAnywhere) {
  nn::Sequential model = Mlp(1);
  const std::string path = TempPath("all.safetensors");
  ASSERT_TRUE(TrainAndSave(model, path).ok());

  // The model and scaler would load; the optimizer's options differ.
  nn::Sequential target = Mlp(5);
  for (const Batch& b : Batches(1)) {
    optim::SGD warm(target.parameters(), {.lr = 0.1});
    Step(target, warm, b);
  }
  optim::AdamW wrong(target.parameters(), {.lr = 1e-2, .eps = 1e-6});
  amp::GradScaler target_scaler({.init_scale = 8.0});
  const auto before = Snapshot(target);
  const absl::Status s = LoadCheckpoint(
      path,
      {.model = target.ptr(), .optimizer = &wrong, .scaler = &target_scaler});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(path + ": AdamW load_state_dict: param group 0: eps"));
  EXPECT_EQ(Snapshot(target), before);
  EXPECT_EQ(target_scaler.get_scale(), 8.0);
  EXPECT_EQ(wrong.lr(), static_cast<float>(1e-2));

  // Parts of the file nobody asked for, and a missing part.
  EXPECT_THAT(
      std::string(LoadCheckpoint(path, {.model = target.ptr()}).message()),
      HasSubstr("the file holds optimizer state (12 tensors under "
                "'optimizer.') but no "
                "optimizer was given"));
  EXPECT_EQ(Snapshot(target), before);
  ASSERT_TRUE(SaveCheckpoint(path, {.model = model.ptr()}).ok());
  optim::AdamW right(target.parameters(), {.lr = 1e-2});
  EXPECT_THAT(std::string(LoadCheckpoint(path, {.model = target.ptr(),
                                                .optimizer = &right})
                              .message()),
              HasSubstr("metadata 'param_groups' is missing"));
  EXPECT_EQ(Snapshot(target), before);

  // A damaged file: nothing changes either.
  {
    std::FILE* f = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, 0, SEEK_END);
    const long size = std::ftell(f);
    std::fclose(f);
    std::filesystem::resize_file(path, size - 1);
  }
  EXPECT_THAT(
      std::string(LoadCheckpoint(path, {.model = target.ptr()}).message()),
      HasSubstr("lie outside the data buffer"));
  EXPECT_EQ(Snapshot(target), before);
  std::remove(path.c_str());
}

TEST(TensorConveniencesTest, FromBlobCopies) {
  std::vector<float> host = {1, 2, 3, 4, 5, 6};
  Tensor t = from_blob(host.data(), {2, 3});
  host[0] = 100;  // a copy: the tensor does not see it
  EXPECT_EQ(Values(t), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  const int32_t ints[] = {-1, 7};
  EXPECT_EQ(from_blob(ints, {2}, {.dtype = DType::kI32}).to_vector<int32_t>(),
            (std::vector<int32_t>{-1, 7}));
  EXPECT_TRUE(
      from_blob(host.data(), {3}, {.requires_grad = true}).requires_grad());
  EXPECT_EQ(from_blob(nullptr, {0, 4}).numel(), 0);
  EXPECT_THROW(
      {
        try {
          from_blob(nullptr, {2});
        } catch (const Error& e) {
          EXPECT_THAT(e.what(),
                      HasSubstr("data is null but shape [2] has 2 elements"));
          throw;
        }
      },
      Error);
  const uint8_t bools[] = {1, 2};
  EXPECT_THROW(from_blob(bools, {2}, {.dtype = DType::kBool}), Error);
}

TEST(TensorConveniencesTest, ItemConvertsOnlyExactly) {
  EXPECT_EQ(scalar_tensor(2.5).item<float>(), 2.5f);
  EXPECT_EQ(scalar_tensor(2.5).item<double>(), 2.5);
  EXPECT_EQ(scalar_tensor(-3.0).item<int64_t>(), -3);
  EXPECT_EQ(full({1, 1}, 7.0, {.dtype = DType::kI32}).item<int32_t>(), 7);
  EXPECT_EQ(scalar_tensor(1.0, {.dtype = DType::kBool}).item<bool>(), true);
  EXPECT_EQ(scalar_tensor(0.0).item<bool>(), false);
  // An i64 beyond 2^53 is read exactly, never through a double.
  const int64_t big = (int64_t{1} << 62) + 1;
  EXPECT_EQ(from_vector(std::vector<int64_t>{big}, {}).item<int64_t>(), big);
  EXPECT_EQ(scalar_tensor(1.0, {.dtype = DType::kBF16}).item<float>(), 1.0f);

  const auto message = [](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(
      message([] { zeros({2}).item<float>(); }),
      HasSubstr("item<float>() needs a tensor with one element, got f32[2]"));
  EXPECT_THAT(message([] { scalar_tensor(2.5).item<int64_t>(); }),
              HasSubstr("item<int64_t>(): the f32 value 2.5 is not an integer "
                        "in the range of int64_t"));
  EXPECT_THAT(message([] {
                scalar_tensor(1e20, {.dtype = DType::kF64}).item<int64_t>();
              }),
              HasSubstr("is not an integer in the range of int64_t"));
  EXPECT_THAT(
      message([] {
        from_vector(std::vector<int64_t>{int64_t{1} << 40}, {}).item<int32_t>();
      }),
      HasSubstr("item<int32_t>(): the i64 value 1099511627776 is out of the "
                "range of int32_t"));
  EXPECT_THAT(message([] { scalar_tensor(2.0).item<bool>(); }),
              HasSubstr("item<bool>(): the f32 value 2 is neither 0 nor 1"));
}

}  // namespace
}  // namespace stepjit
