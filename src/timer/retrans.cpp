// The driver's backoff arithmetic. Read retrans.hpp's opening comment first.
#include "timer/retrans.hpp"

#include "iwcm/assert.hpp"

namespace iwcm::timer {

Duration RetransPolicy::delay(int retry) const {
    IWCM_ASSERT(retry >= 0);
    IWCM_ASSERT(initial.count() > 0 && cap >= initial);
    // Doubling stops at the cap, so the loop is short and never overflows.
    Duration wait = initial;
    for (int i = 0; i < retry && wait < cap; ++i) {
        wait = wait > cap / 2 ? cap : wait * 2;
    }
    return wait < cap ? wait : cap;
}

Duration RetransPolicy::total() const {
    Duration sum{0};
    for (int retry = 0; retry <= max_retrans; ++retry) sum += delay(retry);
    return sum;
}

}  // namespace iwcm::timer
