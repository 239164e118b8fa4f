// Deferred device checks: how a value check that only the device can make (an index in range,
// a loss target valid, an integer divisor non-zero) becomes an error, in every execution mode.
//
// A program that validates its input computes, besides its results, one scalar i1 flag per
// check ("this input was invalid"), as CUDA kernels raise device-side asserts. Reading the
// flag means waiting for the program, so nothing waits at the op (except in debug mode).
// Instead the error belongs to the values the program computes:
//
//   * Every storage carries a CheckSet: the checks that guard its current value.
//   * Running (strict), recording (fused) or launching a compiled program gives each value it
//     writes (new tensors and in-place/out= targets) the union of the check sets of the
//     storages it reads plus the program's own new checks. So a check follows everything
//     computed from the guarded output, and a program whose inputs carry a failed check leaves
//     its writes guarded by it too (an optimizer step into a parameter included). A storage
//     that is overwritten whole (not read) starts from the checks of what overwrote it.
//   * Reading a value on the host (.cpu(), .item(), printing, a copy to another device,
//     pickling) first resolves its checks, waiting for their flags, and raises the first
//     failure as the exception the CPU raises (IndexError, RuntimeError, ...), naming the op
//     and its argument shapes. A failed check stays failed: every later read raises again.
//   * Nothing is process-wide: a sync point, another tensor or another thread never sees
//     someone else's failure, and a failure is never "used up" by an unrelated read.
//   * Debug mode resolves an op's new checks right after it runs and raises at the op.
//
// Checks known to pass are dropped as sets merge (a flag already computed is read without
// waiting), so sets stay small; a set that grows past kMaxPending waits for its oldest flags.
// In fused mode a check's flag is an output of the graph that has not run yet: it is set when
// the graph runs (SetFlag); resolving it before then runs the open graph.
// Torch-free: csrc/aten turns CheckFailed into the Python exception of its kind.
#pragma once

#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "../pjrt/pjrt.h"

namespace tpu::runtime {

// The Python exception the CPU raises for the same invalid input.
enum class CheckKind { Index, Runtime, Value };

// Thrown when a value guarded by a failed check is read.
class CheckFailed : public std::runtime_error {
 public:
  CheckFailed(const std::string& message, CheckKind kind) : std::runtime_error(message), kind_(kind) {}
  CheckKind kind() const { return kind_; }

 private:
  CheckKind kind_;
};

// One check of one execution of one program.
class DeviceCheck {
 public:
  enum class State { Unknown, Passed, Failed };
  // `device`: the device whose program computes the flag.
  DeviceCheck(std::string message, CheckKind kind, int device)
      : message_(std::move(message)), kind_(kind), device_(device) {}
  // The flag (a scalar i1 buffer, true = failed), once the program computing it runs.
  void SetFlag(pjrt::BufferPtr flag);
  // The program that was to compute the flag did not run (its error is reported on its outputs).
  void Abandon();
  // Reads the flag when it is computed; with `wait`, waits for it, and with `flush` too runs
  // its device's open fused graph first when the flag is still to be computed there.
  State Poll(bool wait, bool flush = true);
  const std::string& message() const { return message_; }
  CheckKind kind() const { return kind_; }

 private:
  std::mutex mu_;
  std::string message_;
  CheckKind kind_;
  int device_;
  pjrt::BufferPtr flag_;
  State state_ = State::Unknown;
};
using CheckPtr = std::shared_ptr<DeviceCheck>;

// The checks that guard one value. Not synchronised: the owner (a storage) locks around it.
class CheckSet {
 public:
  static constexpr size_t kMaxPending = 32;
  bool empty() const { return checks_.empty(); }
  size_t size() const { return checks_.size(); }
  void Add(const CheckPtr& check);
  void Merge(const CheckSet& other);
  // Drops the checks whose flags are computed and passed (never waits).
  void Prune();
  // Waits for every check; throws CheckFailed for the first that failed (in the order added).
  void Raise() const;
  const std::vector<CheckPtr>& checks() const { return checks_; }

 private:
  std::vector<CheckPtr> checks_;
};

}  // namespace tpu::runtime
