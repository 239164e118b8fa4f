// Point-to-point transfers (send/recv) between ranks that are threads of this process, one
// device each: only the two ranks meet. The k-th send from s to d with a tag pairs with the
// k-th recv on d from s with that tag; whichever of the two is posted second runs a
// collective_permute over the two devices (collective_programs.h). Posting never waits for
// the partner, so a ring where every rank sends before it receives cannot deadlock; waiting
// does, up to the timeout. No torch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "../pjrt/pjrt.h"

namespace tpu::runtime {

struct P2PArrival {
  std::string group;  // the same on both ranks, distinct between groups
  int src = 0;        // group ranks
  int dst = 0;
  int64_t tag = 0;
  bool is_send = true;
  int device = 0;           // this side's device index
  std::string description;  // what both sides must agree on: "f32[2,3]"
  std::string module_text;  // the transfer's program (CollectiveKind::kSendRecv)
  pjrt::BufferPtr operand;  // the sent value; the receiving tensor's buffer on the recv side
};

struct P2PTransfer;
// One side of a transfer, posted: AwaitTransfer finishes it.
struct PostedTransfer {
  std::shared_ptr<P2PTransfer> transfer;
  bool is_send = true;
};

// Posts this side; runs the transfer if the partner was posted already (then a mismatch of
// shape or dtype is recorded, naming both sides, and raised by AwaitTransfer on each).
PostedTransfer PostTransfer(const P2PArrival& arrival);
// Blocks until the transfer has run: the received value on the recv side, null on the send
// side. Throws std::runtime_error on a mismatch, a failure, or a partner that is not posted
// within `timeout_seconds`.
pjrt::BufferPtr AwaitTransfer(const PostedTransfer& posted, double timeout_seconds);
// Forgets the transfers counted for `group`.
void ForgetTransfers(const std::string& group);

}  // namespace tpu::runtime
