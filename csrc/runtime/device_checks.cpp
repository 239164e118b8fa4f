#include "device_checks.h"

#include <algorithm>

#include "executor.h"
#include "runtime.h"

namespace tpu::runtime {

void DeviceCheck::SetFlag(pjrt::BufferPtr flag) {
  std::lock_guard<std::mutex> lock(mu_);
  flag_ = std::move(flag);
}

void DeviceCheck::Abandon() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!flag_ && state_ == State::Unknown) state_ = State::Passed;
}

DeviceCheck::State DeviceCheck::Poll(bool wait, bool flush) {
  pjrt::BufferPtr flag;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::Unknown) return state_;
    flag = flag_;
  }
  if (!flag) {
    if (!wait || !flush) return State::Unknown;
    // Its device's open fused graph computes it (only that one: another rank thread's graph is
    // left to that thread).
    Executor::Get().Sync("read of a value guarded by a device check", device_);
    std::lock_guard<std::mutex> lock(mu_);
    if (!flag_) {
      // Its graph failed before computing it: the values it guards carry that error instead.
      if (state_ == State::Unknown) state_ = State::Passed;
      return state_;
    }
    flag = flag_;
  }
  if (!wait && !flag->IsReady()) return State::Unknown;
  uint8_t failed = 0;
  try {
    flag->ToHost(&failed, 1);
  } catch (const pjrt::Error&) {
    failed = 0;  // the program itself failed: its outputs report that error
  }  // anything else (an interrupted wait) propagates: the check stays unknown
  std::lock_guard<std::mutex> lock(mu_);
  state_ = failed ? State::Failed : State::Passed;
  flag_.reset();
  return state_;
}

void CheckSet::Add(const CheckPtr& check) {
  if (std::find(checks_.begin(), checks_.end(), check) == checks_.end()) checks_.push_back(check);
}

void CheckSet::Merge(const CheckSet& other) {
  for (const CheckPtr& c : other.checks_) Add(c);
  if (checks_.size() > kMaxPending / 2) Prune();
  // Still many: wait for the oldest half (flags long since computed, in practice).
  if (checks_.size() > kMaxPending) {
    // Never runs a fused graph from here: merging happens while one is being recorded.
    for (size_t i = 0; i < checks_.size() / 2; ++i) checks_[i]->Poll(true, false);
    Prune();
  }
}

void CheckSet::Prune() {
  checks_.erase(std::remove_if(checks_.begin(), checks_.end(),
                               [](const CheckPtr& c) { return c->Poll(false) == DeviceCheck::State::Passed; }),
                checks_.end());
}

void CheckSet::Raise() const {
  for (const CheckPtr& c : checks_)
    if (c->Poll(true) == DeviceCheck::State::Failed) throw CheckFailed(c->message(), c->kind());
}

}  // namespace tpu::runtime
