#include "collective_agreement.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include <c10/util/Exception.h>
#include <torch/csrc/utils/pybind.h>

#include "../runtime/metrics.h"

namespace tpu::aten {
namespace {

struct Agreement {
  c10::intrusive_ptr<c10d::Store> store;
  std::string name;
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{0};
  bool check_each = true;
  std::map<std::string, int64_t> next;  // by channel: the number of this rank's next exchange there
  std::string broken;  // the divergence that ended the group's collectives
  std::mutex mu;       // one exchange at a time per group (the store's keys are per number)
};

std::mutex registry_mu;
std::map<std::string, std::shared_ptr<Agreement>> registry;

// Rank r's post for collective n lives under slot n % 2: a rank that posts n + 2 has read every
// rank's post of n + 1, so every rank has finished reading n and the slot is free. Posts carry
// their number, so a stale one (n - 2) reads as "not yet". Two keys per rank, overwritten, never
// deleted: the store does not grow with the number of collectives.
std::string Key(const Agreement& a, const std::string& channel, int64_t n, int rank) {
  return "torch_tpu/agree/" + a.name + "/" + channel + "/" + std::to_string(n % 2) + "/" + std::to_string(rank);
}

struct Post {
  int64_t number = -1;
  std::string description;
  std::vector<int64_t> values;
};

std::vector<uint8_t> Encode(int64_t n, const std::string& description, const std::vector<int64_t>& values) {
  std::ostringstream out;
  out << n << '\n' << description << '\n';
  for (int64_t v : values) out << v << ' ';
  const std::string s = out.str();
  return {s.begin(), s.end()};
}

Post Decode(const std::vector<uint8_t>& bytes) {
  const std::string s(bytes.begin(), bytes.end());
  Post p;
  const size_t first = s.find('\n'), second = first == std::string::npos ? first : s.find('\n', first + 1);
  if (second == std::string::npos) return p;
  p.number = std::stoll(s.substr(0, first));
  p.description = s.substr(first + 1, second - first - 1);
  std::istringstream values(s.substr(second + 1));
  for (int64_t v; values >> v;) p.values.push_back(v);
  return p;
}

std::string RankList(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

}  // namespace

void RegisterAgreement(const std::string& name, c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                       std::chrono::milliseconds timeout, bool check_each) {
  auto a = std::make_shared<Agreement>();
  a->check_each = check_each;
  a->store = std::move(store);
  a->name = name;
  a->rank = rank;
  a->size = size;
  a->timeout = timeout.count() > 0 ? timeout : std::chrono::milliseconds(1800 * 1000);
  std::lock_guard<std::mutex> lock(registry_mu);
  registry[name] = std::move(a);
}

void ForgetAgreement(const std::string& name) {
  std::lock_guard<std::mutex> lock(registry_mu);
  registry.erase(name);
}

bool ChecksEachCollective(const std::string& name) {
  std::lock_guard<std::mutex> lock(registry_mu);
  auto it = registry.find(name);
  return it != registry.end() && it->second->check_each;
}

std::vector<std::vector<int64_t>> AgreeAcrossProcesses(const std::string& group, const std::string& description,
                                                       const std::vector<int64_t>& host_values, bool only_a_check,
                                                       const std::vector<int>& members) {
  std::shared_ptr<Agreement> a;
  {
    std::lock_guard<std::mutex> lock(registry_mu);
    auto it = registry.find(group);
    TORCH_CHECK(it != registry.end(), "torch.distributed on tpu: group '", group,
                "' has no collectives across processes registered");
    a = it->second;
  }
  if (only_a_check && !a->check_each) return {};
  // The wait below may be long: the other ranks' threads of this process (and Python's) go on.
  // Released before taking the group's lock, which another thread may hold while it waits.
  std::optional<pybind11::gil_scoped_release> no_gil;
  if (Py_IsInitialized() && PyGILState_Check()) no_gil.emplace();
  std::lock_guard<std::mutex> lock(a->mu);
  TORCH_CHECK(a->broken.empty(), a->broken, " (an earlier collective; the group cannot run collectives any more)");
  std::vector<int> ranks = members;
  if (ranks.empty())
    for (int r = 0; r < a->size; ++r) ranks.push_back(r);
  std::string channel = members.empty() ? "all" : "";
  for (size_t i = 0; i < members.size(); ++i) channel += (i ? "-" : "") + std::to_string(members[i]);
  // What the errors call the exchange: the group's collectives are numbered together, a pair's
  // transfers apart.
  const auto what = [&](int64_t n) {
    return members.empty() ? "collective #" + std::to_string(n)
                           : "transfer #" + std::to_string(n) + " between ranks " + RankList(members);
  };
  const int64_t n = a->next[channel];
  std::vector<std::string> keys;
  for (int r : ranks) keys.push_back(Key(*a, channel, n, r));
  const size_t mine = std::find(ranks.begin(), ranks.end(), a->rank) - ranks.begin();
  TORCH_CHECK(mine < ranks.size(), "torch.distributed on tpu: rank ", a->rank, " takes part in an exchange of ranks ",
              RankList(ranks));

  a->store->set(keys[mine], Encode(n, description, host_values));
  // Polls rather than the store's blocking wait: a TCPStore client holds its socket for the
  // whole wait, and the PJRT client may share that store. Every key exists from number 2 on.
  const auto deadline = std::chrono::steady_clock::now() + a->timeout;
  auto pause = std::chrono::microseconds(20);
  bool present = n >= 2;
  std::vector<Post> posts;
  std::vector<int> missing;
  for (;;) {
    if (present || a->store->check(keys)) {
      present = true;
      posts.clear();
      missing.clear();
      for (const auto& bytes : a->store->multiGet(keys)) posts.push_back(Decode(bytes));
      for (size_t i = 0; i < ranks.size(); ++i)
        if (posts[i].number != n) missing.push_back(ranks[i]);
      if (missing.empty()) break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      if (!present) {  // which ones: the keys that exist may still be another number's
        missing.clear();
        for (size_t i = 0; i < ranks.size(); ++i)
          if (!a->store->check({keys[i]}) || Decode(a->store->get(keys[i])).number != n) missing.push_back(ranks[i]);
      }
      std::ostringstream why;
      why << "torch.distributed on tpu: rank(s) " << RankList(missing) << " of group '" << group
          << "' did not reach " << what(n) << " (rank " << a->rank << " runs " << description << ") within "
          << a->timeout.count() / 1000.0 << " s: every rank must issue the same collectives in the same order";
      a->broken = why.str();
      TORCH_CHECK(false, a->broken);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
  a->next[channel] = n + 1;
  runtime::GetMetrics().collective_agreements++;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (posts[i].description == description) continue;
    std::ostringstream why;
    why << "torch.distributed on tpu: the ranks of group '" << group << "' diverged at " << what(n) << ": rank "
        << a->rank << " runs " << description << ", rank " << ranks[i] << " runs " << posts[i].description
        << (members.empty() ? "; every rank must issue the same collectives in the same order"
                            : "; each send must meet a recv of its size, dtype and tag, in the same order")
        << " (none of them ran)";
    a->broken = why.str();
    TORCH_CHECK(false, a->broken);
  }
  std::vector<std::vector<int64_t>> values;
  for (Post& p : posts) values.push_back(std::move(p.values));
  return values;
}

}  // namespace tpu::aten
