// The adaptive thread count of compiled CPU replays (program/team_tuner.h)
// and the TeamScope it runs them under (runtime/thread_pool.h).
#include "program/team_tuner.h"

#include <omp.h>

#include <cstdlib>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "frontend/stepjit.h"
#include "gtest/gtest.h"
#include "runtime/thread_pool.h"

namespace stepjit::runtime {
namespace {

// Replays `n` times on the tuner's choice, each taking ms_of(team, replay).
// Returns the teams used, in order.
std::vector<int> Drive(TeamTuner& t, int n,
                       const std::function<double(int, int)>& ms_of,
                       int first = 0) {
  std::vector<int> used;
  for (int i = first; i < first + n; ++i) {
    const int team = t.Next();
    used.push_back(team);
    t.Record(team, ms_of(team, i));
  }
  return used;
}

TEST(TeamTunerTest, CandidatesAreAllHalfAndOneThread) {
  EXPECT_EQ(TeamTuner(2).candidates(), (std::vector<int>{2, 1}));
  EXPECT_EQ(TeamTuner(8).candidates(), (std::vector<int>{8, 4, 1}));
  EXPECT_EQ(TeamTuner(3).candidates(), (std::vector<int>{3, 2, 1}));
  EXPECT_EQ(TeamTuner(1).candidates(), (std::vector<int>{1}));
}

TEST(TeamTunerTest, StaysOnAllThreadsWhenTheyAreFasterAndProbesLessAndLess) {
  TeamTuner t(2);
  // Two threads take 3 ms, one 5.5 ms; the first replay on each team pays
  // for kernel preparation (50 ms) and must not count.
  std::set<int> seen;
  auto ms = [&seen](int team, int) {
    const double base = team == 2 ? 3.0 : 5.5;
    return seen.insert(team).second ? 50.0 : base;
  };
  const std::vector<int> used = Drive(t, 4000, ms);
  EXPECT_EQ(t.chosen(), 2);
  int on_one = 0;
  for (int team : used) on_one += team == 1;
  // Probes back off to one per 512 replays: 16, 32, ..., 512, 512, ...
  EXPECT_LE(t.probes(), 12) << on_one;
  EXPECT_LE(on_one, 4 * t.probes());
  EXPECT_LT(on_one, 4000 / 50);  // under 2% of the replays
}

TEST(TeamTunerTest, MovesToOneThreadUnderLoadAndBackWhenItEnds) {
  TeamTuner t(2);
  // Replays 0..299 unloaded, 300..899 beside a busy process (two threads
  // 7.5 ms, one 5.5 ms: the thread sharing a core holds every phase up),
  // then unloaded again.
  auto ms = [](int team, int i) {
    const bool loaded = i >= 300 && i < 900;
    if (team == 2) return loaded ? 7.5 : 3.0;
    return loaded ? 5.5 : 5.4;
  };
  Drive(t, 300, ms, 0);
  EXPECT_EQ(t.chosen(), 2);
  // The slowdown on the chosen team schedules a probe at once.
  const std::vector<int> loaded = Drive(t, 40, ms, 300);
  EXPECT_EQ(t.chosen(), 1) << "after 40 loaded replays";
  Drive(t, 560, ms, 340);
  EXPECT_EQ(t.chosen(), 1);
  // Back to two threads within a probe interval (at most 512 + probe runs).
  Drive(t, 600, ms, 900);
  EXPECT_EQ(t.chosen(), 2);
}

TEST(TeamTunerTest, ANoisyProbeDoesNotMoveIt) {
  TeamTuner t(2);
  // One thread is 5% faster at times: within the 10% margin, no move.
  auto ms = [](int team, int i) {
    return team == 2 ? 3.0 + (i % 7 == 0) : 2.9;
  };
  Drive(t, 1000, ms);
  EXPECT_EQ(t.chosen(), 2);
}

TEST(TeamScopeTest, NarrowsParallelForAndTheLibraryThreadsAndRestores) {
  if (NumThreads() < 2) GTEST_SKIP() << "one thread";
  const int before = omp_get_max_threads();
  EXPECT_EQ(TeamSize(), NumThreads());
  {
    TeamScope one(1);
    EXPECT_EQ(TeamSize(), 1);
    EXPECT_EQ(omp_get_max_threads(), 1);
    {
      TeamScope all(100);  // clamped
      EXPECT_EQ(TeamSize(), NumThreads());
    }
    EXPECT_EQ(TeamSize(), 1);
  }
  EXPECT_EQ(TeamSize(), NumThreads());
  EXPECT_EQ(omp_get_max_threads(), before);
}

// The chunks (and so any per-chunk partial result) are the same on every
// team; on a team of one they all run on the calling thread.
TEST(TeamScopeTest, ParallelForKeepsItsChunksOnAnyTeam) {
  if (NumThreads() < 2) GTEST_SKIP() << "one thread";
  auto chunks = [](std::set<std::pair<int64_t, int64_t>>* out,
                   std::set<int>* threads) {
    std::mutex mu;
    ParallelFor(1000, 10, [&](int64_t b, int64_t e) {
      std::lock_guard<std::mutex> lock(mu);
      out->insert({b, e});
      threads->insert(omp_get_thread_num());
    });
  };
  std::set<std::pair<int64_t, int64_t>> all, one;
  std::set<int> all_threads, one_threads;
  chunks(&all, &all_threads);
  {
    TeamScope scope(1);
    chunks(&one, &one_threads);
  }
  EXPECT_EQ(all, one);
  EXPECT_EQ(all.size(), static_cast<size_t>(NumThreads()));
  EXPECT_EQ(one_threads, (std::set<int>{0}));
}

TEST(AdaptiveThreadsTest, ReadsTheVariableAndRefusesOtherValues) {
  unsetenv("STEPJIT_ADAPTIVE_THREADS");
  EXPECT_TRUE(AdaptiveThreads());
  for (const char* off : {"0", "off"}) {
    setenv("STEPJIT_ADAPTIVE_THREADS", off, 1);
    EXPECT_FALSE(AdaptiveThreads()) << off;
  }
  setenv("STEPJIT_ADAPTIVE_THREADS", "on", 1);
  EXPECT_TRUE(AdaptiveThreads());
  setenv("STEPJIT_ADAPTIVE_THREADS", "2", 1);
  try {
    AdaptiveThreads();
    ADD_FAILURE() << "no error for 2";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "STEPJIT_ADAPTIVE_THREADS: expected 1, on, 0 or off, got '2'");
  }
  unsetenv("STEPJIT_ADAPTIVE_THREADS");
}

// A compiled step whose replays move between teams computes what it
// computes on all threads: the MLP's losses and parameters agree with a
// run that never leaves them.
TEST(AdaptiveReplayTest, ReplaysOnEveryTeamMatchAllThreads) {
  if (NumThreads() < 2) GTEST_SKIP() << "one thread";
  auto make = [] {
    manual_seed(3);
    auto model = std::make_shared<nn::Sequential>();
    model->push_back(nn::Linear(64, 96));
    model->push_back(nn::ReLU());
    model->push_back(nn::Linear(96, 5));
    return model;
  };
  auto run = [&](bool adaptive) {
    if (!adaptive) setenv("STEPJIT_ADAPTIVE_THREADS", "0", 1);
    auto model = make();
    optim::AdamW opt(model->parameters(), {.lr = 1e-2});
    auto step = compile([&](const Tensor& x, const Tensor& y) {
      opt.zero_grad();
      Tensor loss = cross_entropy((*model)(x), y);
      loss.backward();
      opt.step();
      return loss;
    });
    Generator g(4);
    std::vector<double> losses;
    for (int i = 0; i < 120; ++i) {
      losses.push_back(step(randn({32, 64}, {}, &g),
                            randint(0, 5, {32}, {.dtype = DType::kI64}, &g))
                           .item());
    }
    unsetenv("STEPJIT_ADAPTIVE_THREADS");
    const CompileStats stats = step.stats();
    if (adaptive) {
      // At least the first probe (after 16 replays) ran on one thread.
      EXPECT_GE(stats.thread_probes, 1) << stats;
      EXPECT_GE(stats.replay_threads, 1) << stats;
    } else {
      EXPECT_EQ(stats.replay_threads, 0) << stats;
    }
    return std::pair{losses, model->parameters()};
  };
  const auto [adaptive_losses, adaptive_params] = run(true);
  const auto [fixed_losses, fixed_params] = run(false);
  for (size_t i = 0; i < fixed_losses.size(); ++i) {
    EXPECT_NEAR(adaptive_losses[i], fixed_losses[i],
                1e-5 * std::abs(fixed_losses[i]))
        << "step " << i;
  }
  for (size_t k = 0; k < fixed_params.size(); ++k) {
    EXPECT_LE(amax(abs(adaptive_params[k] - fixed_params[k])).item(), 1e-5)
        << "param " << k;
  }
}

}  // namespace
}  // namespace stepjit::runtime
