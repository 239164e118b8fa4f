#include "p2p_rendezvous.h"

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "collective_rendezvous.h"
#include "metrics.h"
#include "runtime.h"
#include "tpu_target.h"

namespace tpu::runtime {

struct P2PTransfer {
  std::optional<P2PArrival> send, recv;
  int64_t seq = 0;
  bool done = false;
  std::string error;
  pjrt::BufferPtr received;
};

namespace {

using ChannelKey = std::tuple<std::string, int, int, int64_t>;  // group, src, dst, tag

struct Channel {
  int64_t sends = 0, recvs = 0;  // posted so far
  std::map<int64_t, std::shared_ptr<P2PTransfer>> waiting;  // by sequence number: one side posted
};

std::mutex mu;
std::condition_variable done_cv;
std::map<ChannelKey, Channel> channels;

std::string Name(const P2PArrival& a) {
  return "send/recv #" + std::to_string(a.src) + "->" + std::to_string(a.dst) + " (tag " + std::to_string(a.tag) +
         ") of group '" + a.group + "'";
}

// Empty when the two sides agree and sit on distinct devices.
std::string Mismatch(const P2PArrival& send, const P2PArrival& recv) {
  if (send.description != recv.description)
    return "torch.distributed on tpu: rank " + std::to_string(send.src) + " sent " + send.description + " to rank " +
           std::to_string(send.dst) + ", which receives " + recv.description + " from it (tag " +
           std::to_string(send.tag) + "): shapes and dtypes must match";
  if (send.device == recv.device)
    return "torch.distributed on tpu: " + Name(send) + ": both ranks are on device tpu:" + std::to_string(send.device) +
           "; ranks of one process need a device each (torch.tpu.set_device(rank))";
  return "";
}

// Runs the permute from the sender's device to the receiver's (unlocked); the received value.
pjrt::BufferPtr Run(const P2PArrival& send, const P2PArrival& recv) {
  Runtime& rt = Runtime::Get();
  std::vector<int64_t> ids = {rt.client().device_id(send.device), rt.client().device_id(recv.device)};
  std::string what = "send/recv " + send.description;
  pjrt::ExecutablePtr exe = CollectiveExecutable(send.module_text, ids, what);
  auto outputs = exe->ExecuteReplicated({{send.operand->raw()}, {recv.operand->raw()}});
  CountTpuTargetRun(exe.get());
  GetMetrics().executions++;
  return outputs.at(1).at(0);
}

}  // namespace

PostedTransfer PostTransfer(const P2PArrival& arrival) {
  std::unique_lock<std::mutex> lock(mu);
  Channel& channel = channels[{arrival.group, arrival.src, arrival.dst, arrival.tag}];
  int64_t seq = arrival.is_send ? channel.sends++ : channel.recvs++;
  std::shared_ptr<P2PTransfer>& entry = channel.waiting[seq];
  if (!entry) {
    entry = std::make_shared<P2PTransfer>();
    entry->seq = seq;
  }
  std::shared_ptr<P2PTransfer> t = entry;
  (arrival.is_send ? t->send : t->recv) = arrival;
  if (!t->send || !t->recv) return {t, arrival.is_send};
  channel.waiting.erase(seq);  // both sides are here: nobody else looks it up
  std::string error = Mismatch(*t->send, *t->recv);
  pjrt::BufferPtr received;
  if (error.empty()) {
    lock.unlock();
    try {
      received = Run(*t->send, *t->recv);
    } catch (const std::exception& e) {
      error = "torch.distributed on tpu: " + Name(arrival) + " (" + arrival.description + ") failed: " + e.what();
    }
    lock.lock();
    GetMetrics().collectives_on_device++;
  }
  t->error = error;
  t->received = std::move(received);
  t->send->operand.reset();
  t->recv->operand.reset();
  t->done = true;
  done_cv.notify_all();
  return {t, arrival.is_send};
}

pjrt::BufferPtr AwaitTransfer(const PostedTransfer& posted, double timeout_seconds) {
  std::unique_lock<std::mutex> lock(mu);
  P2PTransfer& t = *posted.transfer;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                          std::chrono::duration<double>(timeout_seconds));
  while (!t.done) {
    if (done_cv.wait_until(lock, deadline) != std::cv_status::timeout || t.done) continue;
    const P2PArrival& mine = posted.is_send ? *t.send : *t.recv;
    if (posted.is_send ? t.recv.has_value() : t.send.has_value()) continue;  // running now
    t.error = "torch.distributed on tpu: " + Name(mine) + ": rank " +
              std::to_string(posted.is_send ? mine.dst : mine.src) + " posted no matching " +
              (posted.is_send ? "recv" : "send") + " within the process group's timeout of " +
              std::to_string(static_cast<int64_t>(timeout_seconds)) + " s";
    (posted.is_send ? t.send : t.recv)->operand.reset();
    auto it = channels.find({mine.group, mine.src, mine.dst, mine.tag});
    if (it != channels.end()) {
      auto w = it->second.waiting.find(t.seq);
      if (w != it->second.waiting.end() && w->second == posted.transfer) it->second.waiting.erase(w);
    }
    t.done = true;
    done_cv.notify_all();
  }
  if (!t.error.empty()) throw std::runtime_error(t.error);
  return posted.is_send ? nullptr : t.received;
}

void ForgetTransfers(const std::string& group) {
  std::lock_guard<std::mutex> lock(mu);
  for (auto it = channels.begin(); it != channels.end();)
    it = std::get<0>(it->first) == group ? channels.erase(it) : std::next(it);
}

}  // namespace tpu::runtime
