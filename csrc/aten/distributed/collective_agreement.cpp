#include "collective_agreement.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <c10/util/Exception.h>
#include <torch/csrc/utils/pybind.h>

#include "../../runtime/metrics.h"

namespace tpu::aten {
namespace {

using Clock = std::chrono::steady_clock;

// A rank reads back every post numbered n - kBehindWindow or lower before it posts n (at once, or
// behind). So before it posts n it read every rank's n - W, and each of them, before posting
// n - W, read every post of n - 2W: post n may take the slot of n - 2W. Two slots suffice when
// every collective is read back before the next (kBefore); the window needs 2W.
constexpr size_t kBehindWindow = 8;
constexpr int64_t kSlots = 2 * kBehindWindow;

struct Posted {
  int64_t number = 0;
  std::string description;
  bool behind = false;  // checked after it ran
  Clock::time_point at;
};

struct Agreement {
  c10::intrusive_ptr<c10d::Store> store;
  std::string name;
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{0};
  CollectiveChecks checks = CollectiveChecks::kBehind;
  std::map<std::string, int64_t> next;  // by channel: the number of this rank's next exchange there
  std::deque<Posted> behind;            // the group's collectives posted and run, not read back yet
  std::set<std::string> repeating;      // descriptions with the values every rank once posted alike
  std::string broken;                   // the divergence that ended the group's collectives
  std::mutex mu;                        // one exchange at a time per group (the store's keys are per number)
};

std::mutex registry_mu;
std::map<std::string, std::shared_ptr<Agreement>> registry;

// Posts behind in every group: a host read's settle is one atomic load without collectives.
std::atomic<int64_t> posts_behind{0};
// A divergence found after the collectives ran: like CUDA's sticky device error, every later
// host read and synchronize raises it (the devices may wait in those collectives, or hold what
// mismatched programs wrote).
std::atomic<bool> diverged_behind{false};
std::mutex diverged_mu;
std::string diverged_message;

// Rank r's post for number n of a channel lives in slot n % kSlots. Posts carry their number, so
// an older one in the slot reads as "not yet". kSlots keys per rank and channel, overwritten,
// never deleted: the store does not grow with the number of collectives.
std::string Key(const Agreement& a, const std::string& channel, int64_t n, int rank) {
  return "torch_tpu/agree/" + a.name + "/" + channel + "/" + std::to_string(n % kSlots) + "/" + std::to_string(rank);
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

// Forgets the group's posts behind (caller holds a.mu): read back, or never to be.
void DropPostsBehind(Agreement& a) {
  posts_behind -= static_cast<int64_t>(a.behind.size());
  a.behind.clear();
}

// Ends the group's collectives with `why` and raises it. The posts behind are dropped: a
// divergence among them makes every host read raise from now on.
[[noreturn]] void Break(Agreement& a, const std::string& why, bool found_behind) {
  a.broken = why;
  DropPostsBehind(a);
  if (found_behind) {
    std::lock_guard<std::mutex> lock(diverged_mu);
    if (diverged_message.empty()) diverged_message = why;
    diverged_behind = true;
  }
  TORCH_CHECK(false, why);
}

// Reads every rank's posts of `awaited` (ascending numbers of `channel`, caller holds a.mu) and
// compares each with this rank's. Returns how many leading ones every rank posted and matched:
// all of them when `wait`, else those already posted. Raises on a divergence, and on a rank that
// has not posted once the oldest awaited post's timeout has passed. `values`: every rank's host
// values of the last awaited post, when it was read.
size_t ReadBack(Agreement& a, const std::string& channel, const std::vector<int>& ranks,
                const std::vector<Posted>& awaited, bool wait, std::vector<std::vector<int64_t>>* values) {
  const auto what = [&](int64_t n) {
    return channel == "all" ? "collective #" + std::to_string(n)
                            : "transfer #" + std::to_string(n) + " between ranks " + RankList(ranks);
  };
  const auto keys_of = [&](size_t i) {
    std::vector<std::string> keys;
    for (int r : ranks) keys.push_back(Key(a, channel, awaited[i].number, r));
    return keys;
  };
  // Polls rather than the store's blocking wait: a TCPStore client holds its socket for the
  // whole wait, and the PJRT client may share that store.
  const auto deadline = awaited.front().at + a.timeout;
  auto pause = std::chrono::microseconds(20);
  size_t matched = 0;
  for (;;) {
    // Every slot key exists once its rank has posted kSlots times; before, ask the store.
    size_t present = matched;
    while (present < awaited.size() && (awaited[present].number >= kSlots || a.store->check(keys_of(present))))
      ++present;
    if (present > matched) {
      std::vector<std::string> keys;
      for (size_t i = matched; i < present; ++i) {
        auto k = keys_of(i);
        keys.insert(keys.end(), k.begin(), k.end());
      }
      const std::vector<std::vector<uint8_t>> got = a.store->multiGet(keys);
      const size_t from = matched;
      for (size_t i = from; i < present; ++i) {
        std::vector<Post> posts;
        for (size_t j = 0; j < ranks.size(); ++j) posts.push_back(Decode(got[(i - from) * ranks.size() + j]));
        if (std::any_of(posts.begin(), posts.end(), [&](const Post& p) { return p.number != awaited[i].number; }))
          break;  // some rank has not posted it yet
        const Posted& mine = awaited[i];
        for (size_t j = 0; j < ranks.size(); ++j) {
          if (posts[j].description == mine.description) continue;
          std::ostringstream why;
          why << "torch.distributed on tpu: the ranks of group '" << a.name << "' diverged at " << what(mine.number)
              << ": rank " << a.rank << " runs " << mine.description << ", rank " << ranks[j] << " runs "
              << posts[j].description
              << (channel == "all" ? "; every rank must issue the same collectives in the same order"
                                   : "; each send must meet a recv of its size, dtype and tag, in the same order");
          if (mine.behind)
            why << " (found after it ran: collectives are checked behind them; the devices may wait in it or hold "
                   "wrong values, so every later read of a device value raises this. "
                   "TORCH_TPU_COLLECTIVE_CHECKS=before checks each collective before it runs)";
          else
            why << " (none of them ran)";
          Break(a, why.str(), mine.behind);
        }
        if (i + 1 == awaited.size() && values != nullptr)
          for (Post& p : posts) values->push_back(std::move(p.values));
        ++matched;
      }
      if (matched == awaited.size()) return matched;
    }
    if (Clock::now() >= deadline) {
      const Posted& first = awaited[matched];
      std::vector<int> missing;
      const auto keys = keys_of(matched);
      for (size_t j = 0; j < ranks.size(); ++j)
        if (!a.store->check({keys[j]}) || Decode(a.store->get(keys[j])).number != first.number)
          missing.push_back(ranks[j]);
      std::ostringstream why;
      why << "torch.distributed on tpu: rank(s) " << RankList(missing) << " of group '" << a.name
          << "' did not reach " << what(first.number) << " (rank " << a.rank << " runs " << first.description
          << ") within " << a.timeout.count() / 1000.0 << " s: every rank must issue the same collectives in the "
          << "same order";
      Break(a, why.str(), first.behind);
    }
    if (!wait) return matched;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
}

std::shared_ptr<Agreement> Find(const std::string& group) {
  std::lock_guard<std::mutex> lock(registry_mu);
  auto it = registry.find(group);
  TORCH_CHECK(it != registry.end(), "torch.distributed on tpu: group '", group,
              "' has no collectives across processes registered");
  return it->second;
}

std::vector<int> AllRanks(const Agreement& a) {
  std::vector<int> ranks;
  for (int r = 0; r < a.size; ++r) ranks.push_back(r);
  return ranks;
}

// Reads back the group's oldest `count` posts behind (caller holds a.mu).
void ReadBackBehind(Agreement& a, size_t count, bool wait) {
  if (count == 0) return;
  const std::vector<Posted> awaited(a.behind.begin(), a.behind.begin() + count);
  const size_t matched = ReadBack(a, "all", AllRanks(a), awaited, wait, nullptr);
  a.behind.erase(a.behind.begin(), a.behind.begin() + matched);
  posts_behind -= static_cast<int64_t>(matched);
}

void RaiseIfDivergedBehind() {
  if (!diverged_behind.load()) return;
  std::lock_guard<std::mutex> lock(diverged_mu);
  TORCH_CHECK(false, diverged_message);
}

}  // namespace

CollectiveChecks ParseCollectiveChecks(const std::string& setting) {
  if (setting == "off") return CollectiveChecks::kOff;
  if (setting == "behind") return CollectiveChecks::kBehind;
  if (setting == "before") return CollectiveChecks::kBefore;
  TORCH_CHECK_VALUE(false, "torch.distributed on tpu: collective checks '", setting,
                    "': use 'behind', 'before' or 'off'");
}

void RegisterAgreement(const std::string& name, c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                       std::chrono::milliseconds timeout, CollectiveChecks checks) {
  auto a = std::make_shared<Agreement>();
  a->checks = checks;
  a->store = std::move(store);
  a->name = name;
  a->rank = rank;
  a->size = size;
  a->timeout = timeout.count() > 0 ? timeout : std::chrono::milliseconds(1800 * 1000);
  std::lock_guard<std::mutex> lock(registry_mu);
  auto& slot = registry[name];
  if (slot) {  // a group of the same name forgets the last one's posts behind
    std::lock_guard<std::mutex> old(slot->mu);
    DropPostsBehind(*slot);
  }
  slot = std::move(a);
}

void ForgetAgreement(const std::string& name) {
  std::lock_guard<std::mutex> lock(registry_mu);
  auto it = registry.find(name);
  if (it == registry.end()) return;
  {
    std::lock_guard<std::mutex> old(it->second->mu);
    DropPostsBehind(*it->second);
  }
  registry.erase(it);
}

CollectiveChecks ChecksOf(const std::string& name) {
  std::lock_guard<std::mutex> lock(registry_mu);
  auto it = registry.find(name);
  return it == registry.end() ? CollectiveChecks::kOff : it->second->checks;
}

std::vector<std::vector<int64_t>> AgreeAcrossProcesses(const std::string& group, const std::string& description,
                                                       const std::vector<int64_t>& host_values, bool only_a_check,
                                                       const std::vector<int>& members, bool values_repeat) {
  std::shared_ptr<Agreement> a = Find(group);
  if (only_a_check && a->checks == CollectiveChecks::kOff) return {};
  // The wait below may be long: the other ranks' threads of this process (and Python's) go on.
  // Released before taking the group's lock, which another thread may hold while it waits.
  std::optional<pybind11::gil_scoped_release> no_gil;
  if (Py_IsInitialized() && PyGILState_Check()) no_gil.emplace();
  std::lock_guard<std::mutex> lock(a->mu);
  TORCH_CHECK(a->broken.empty(), a->broken, " (an earlier collective; the group cannot run collectives any more)");
  std::vector<int> ranks = members.empty() ? AllRanks(*a) : members;
  std::string channel = members.empty() ? "all" : "";
  for (size_t i = 0; i < members.size(); ++i) channel += (i ? "-" : "") + std::to_string(members[i]);
  TORCH_CHECK(std::find(ranks.begin(), ranks.end(), a->rank) != ranks.end(), "torch.distributed on tpu: rank ",
              a->rank, " takes part in an exchange of ranks ", RankList(ranks));
  const bool may_run_behind = members.empty() && a->checks == CollectiveChecks::kBehind;
  bool behind = only_a_check && may_run_behind;
  // Values every rank once posted alike are taken to hold again: posted in the description, so
  // the check behind compares them.
  std::string with_values;
  if (values_repeat && may_run_behind) {
    with_values = description + " with [";
    for (size_t i = 0; i < host_values.size(); ++i) with_values += (i ? "," : "") + std::to_string(host_values[i]);
    with_values += "]";
    behind = behind || a->repeating.count(with_values) > 0;
  }
  const int64_t n = a->next[channel]++;
  const Posted posted{n, behind && !with_values.empty() ? with_values : description, behind, Clock::now()};
  a->store->set(Key(*a, channel, n, a->rank),
                Encode(n, posted.description, behind ? std::vector<int64_t>{} : host_values));
  runtime::GetMetrics().collective_agreements++;
  if (behind) {
    // Runs at once; read back with later ones, at the latest kBehindWindow collectives on or
    // at the next host read. The older half is surely posted by the time the window fills.
    a->behind.push_back(posted);
    ++posts_behind;
    runtime::GetMetrics().collective_checks_behind++;
    if (a->behind.size() >= kBehindWindow) ReadBackBehind(*a, kBehindWindow / 2, /*wait=*/true);
    if (!values_repeat) return {};
    return std::vector<std::vector<int64_t>>(a->size, host_values);
  }
  // Read back now, in one store round trip with the posts behind.
  std::vector<Posted> awaited;
  if (members.empty()) awaited.assign(a->behind.begin(), a->behind.end());
  awaited.push_back(posted);
  std::vector<std::vector<int64_t>> values;
  ReadBack(*a, channel, ranks, awaited, /*wait=*/true, &values);
  if (members.empty()) DropPostsBehind(*a);
  const auto alike = [&](const std::vector<int64_t>& v) { return v == host_values; };
  if (!with_values.empty() && std::all_of(values.begin(), values.end(), alike)) a->repeating.insert(with_values);
  return values;
}

void SettleCollectiveChecks(bool wait) {
  RaiseIfDivergedBehind();
  if (posts_behind.load() == 0) return;
  std::vector<std::shared_ptr<Agreement>> groups;
  {
    std::lock_guard<std::mutex> lock(registry_mu);
    for (const auto& [name, a] : registry) groups.push_back(a);
  }
  std::optional<pybind11::gil_scoped_release> no_gil;
  if (wait && Py_IsInitialized() && PyGILState_Check()) no_gil.emplace();
  for (const auto& a : groups) {
    // A long device wait does not queue behind another thread's exchange: it looks again later.
    std::unique_lock<std::mutex> lock(a->mu, std::defer_lock);
    if (wait)
      lock.lock();
    else if (!lock.try_lock())
      continue;
    if (a->broken.empty()) ReadBackBehind(*a, a->behind.size(), wait);
  }
}

}  // namespace tpu::aten
