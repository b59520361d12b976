// The driver's retransmission schedule for connection-setup frames: irdma_schedule_cm_timer's
// backoff arithmetic, and nothing else.
//
// Read first: docs/design.md "Timers"; then, in the Linux irdma driver
// (drivers/infiniband/hw/irdma/cm.c), irdma_schedule_cm_timer and irdma_cm_timer_tick; then
// wheel.hpp for the timing wheel. The per-node send, close and phase entries that use this
// schedule belong to the engine (src/cm/node_timers.hpp), which also owns the policy for what
// a node does when its retries run out.
//
// The driver arms a send entry at jiffies + IRDMA_RETRY_TIMEOUT (HZ) with retranscount =
// IRDMA_DEFAULT_RETRANS (8). When the tick finds it due with retranscount != 0 it resends,
// decrements retranscount and re-arms at jiffies + min(HZ << (8 - retranscount),
// IRDMA_MAX_TIMEOUT = 12 HZ). When it finds it due with retranscount == 0 it frees the entry
// and calls irdma_retrans_expired. The waits are thus 1, 2, 4, 8, 12, 12, 12, 12 s before
// retransmissions 1..8 and a last 12 s before the verdict: retransmissions at t = 1, 3, 7, 15,
// 27, 39, 51, 63 s after the first send and exhaustion at t = 75 s. RetransPolicy::delay(k)
// is the wait after retransmission k, min(initial * 2^k, cap); delay(0) is the wait after the
// original send. (Later kernels raised IRDMA_DEFAULT_RETRANS to 32 and then 20; 8 is the
// design's default.)
#pragma once

#include <chrono>
#include <cstdint>

#include "iwcm/time.hpp"

namespace iwcm::timer {

// How often and how patiently an unacknowledged frame is re-sent; the driver's values are the
// defaults (IRDMA_DEFAULT_RETRANS, IRDMA_RETRY_TIMEOUT, IRDMA_MAX_TIMEOUT).
struct RetransPolicy {
    std::uint8_t max_retrans = 8;
    Duration initial = std::chrono::seconds(1);
    Duration cap = std::chrono::seconds(12);

    // The wait after transmission number `retry` (0 = the original send) before the next
    // one, or before giving up once retry == max_retrans: min(initial * 2^retry, cap).
    Duration delay(int retry) const;
    // The time from the original send to the exhaustion verdict (75 s with the defaults).
    Duration total() const;
};

}  // namespace iwcm::timer
