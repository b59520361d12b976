// The simulated Ethernet segment. Read sim.hpp first: it states the model
// (collect / advance / dispatch) and the fault semantics implemented here.
#include "io/sim/sim.hpp"

#include <algorithm>
#include <bit>
#include <tuple>

namespace iwcm::io {

namespace {

// Orders the pending heap as a min-heap on (arrival, sequence number): the
// sequence number makes equal arrival times deliver in send order, so the
// order never depends on the heap's internal layout.
struct ArrivesLater {
    template <class P>
    bool operator()(const P& a, const P& b) const {
        return std::tie(a.at, a.seq) > std::tie(b.at, b.seq);
    }
};

void check_faults(const LinkFaults& f) {
    IWCM_ASSERT(f.loss >= 0.0 && f.loss <= 1.0);
    IWCM_ASSERT(f.duplicate >= 0.0 && f.duplicate <= 1.0);
    IWCM_ASSERT(f.reorder >= 0.0 && f.reorder <= 1.0);
    IWCM_ASSERT(f.corrupt >= 0.0 && f.corrupt <= 1.0);
    IWCM_ASSERT(f.shut_window >= 0.0 && f.shut_window <= 1.0);
    IWCM_ASSERT(f.latency >= Duration::zero());
    IWCM_ASSERT(f.jitter >= Duration::zero());
}

std::uint16_t get16(std::span<const std::byte> b, std::size_t at) {
    return static_cast<std::uint16_t>(std::to_integer<unsigned>(b[at]) << 8 |
                                      std::to_integer<unsigned>(b[at + 1]));
}

void put16(std::span<std::byte> b, std::size_t at, std::uint16_t v) {
    b[at] = static_cast<std::byte>(v >> 8);
    b[at + 1] = static_cast<std::byte>(v & 0xFF);
}

// Where the TCP header of an IPv4 or IPv6 (no extension headers) frame, tagged or
// not, begins; nullopt for anything else or a frame too short for the header.
std::optional<std::size_t> tcp_offset(std::span<const std::byte> f) {
    std::size_t at = 12;
    if (f.size() < at + 2) return std::nullopt;
    std::uint16_t type = get16(f, at);
    if (type == 0x8100) {
        at += 4;
        if (f.size() < at + 2) return std::nullopt;
        type = get16(f, at);
    }
    const std::size_t ip = at + 2;
    std::size_t tcp = 0;
    if (type == 0x0800 && f.size() >= ip + 20) {
        if (std::to_integer<unsigned>(f[ip + 9]) != 6) return std::nullopt;
        tcp = ip + 4 * (std::to_integer<std::size_t>(f[ip]) & 0xF);
    } else if (type == 0x86DD && f.size() >= ip + 40) {
        if (std::to_integer<unsigned>(f[ip + 6]) != 6) return std::nullopt;
        tcp = ip + 40;
    } else {
        return std::nullopt;
    }
    if (f.size() < tcp + 20) return std::nullopt;
    return tcp;
}

MacAddr destination_of(std::span<const std::byte> frame) {
    IWCM_ASSERT(frame.size() >= 6);
    MacAddr mac;
    for (std::size_t i = 0; i < mac.bytes.size(); ++i)
        mac.bytes[i] = std::to_integer<std::uint8_t>(frame[i]);
    return mac;
}

// Sets `busy` for the lifetime of the guard and asserts it was clear: a host
// or observer that calls back into the network is a programming error.
class BusyGuard {
public:
    explicit BusyGuard(bool& busy) : busy_(busy) {
        IWCM_ASSERT(!busy_);
        busy_ = true;
    }
    ~BusyGuard() { busy_ = false; }
    BusyGuard(const BusyGuard&) = delete;
    BusyGuard& operator=(const BusyGuard&) = delete;

private:
    bool& busy_;
};

}  // namespace

const char* to_string(FrameFate fate) {
    switch (fate) {
        case FrameFate::kDelivered: return "delivered";
        case FrameFate::kLost: return "lost";
        case FrameFate::kDuplicated: return "duplicated";
        case FrameFate::kCorrupted: return "corrupted";
        case FrameFate::kReordered: return "reordered";
    }
    return "?";
}

SimNetwork::SimNetwork(std::uint64_t seed, Instant start) : rng_(seed), seed_(seed), now_(start) {
    IWCM_ASSERT(start >= kInstantZero);
    IWCM_ASSERT(start < kInstantNever);
    queue_.reserve(256);
}

std::size_t SimNetwork::add_host(SimHost& host) {
    IWCM_ASSERT(!busy_);
    IWCM_ASSERT(hosts_.size() < kMaxHosts);
    const std::size_t old_n = hosts_.size();
    const std::size_t new_n = old_n + 1;
    std::vector<Link> links(new_n * new_n);
    for (std::size_t from = 0; from < old_n; ++from)
        for (std::size_t to = 0; to < old_n; ++to)
            links[from * new_n + to] = links_[from * old_n + to];
    links_ = std::move(links);
    hosts_.push_back(&host);
    IWCM_ASSERT(links_.size() == hosts_.size() * hosts_.size());
    check_offload(old_n, default_faults_);
    return old_n;
}

// A host that does not verify checksums would take a corrupted frame as good: no link that
// corrupts frames may lead to one (CoreConfig::checksum_offload).
void SimNetwork::check_offload(std::size_t to, const LinkFaults& faults) const {
    IWCM_ASSERT(to < hosts_.size());
    IWCM_ASSERT(faults.corrupt == 0.0 || !hosts_[to]->checksum_offload());
}

void SimNetwork::set_faults(LinkFaults faults) {
    IWCM_ASSERT(!busy_);
    check_faults(faults);
    for (std::size_t to = 0; to < hosts_.size(); ++to) check_offload(to, faults);
    default_faults_ = faults;
    for (auto& l : links_) l.faults.reset();
}

void SimNetwork::set_faults(std::size_t from, std::size_t to, LinkFaults faults) {
    IWCM_ASSERT(!busy_);
    IWCM_ASSERT(from != to);
    check_faults(faults);
    check_offload(to, faults);
    link(from, to).faults = faults;
}

const LinkFaults& SimNetwork::faults(std::size_t from, std::size_t to) const {
    IWCM_ASSERT(from < hosts_.size() && to < hosts_.size());
    const Link& l = links_[from * hosts_.size() + to];
    return l.faults ? *l.faults : default_faults_;
}

void SimNetwork::set_max_in_flight(std::size_t limit) {
    IWCM_ASSERT(!busy_);
    IWCM_ASSERT(limit > 0);
    IWCM_ASSERT(limit <= std::numeric_limits<std::uint32_t>::max());
    max_in_flight_ = limit;
}

void SimNetwork::set_observer(std::function<void(const FrameRecord&)> observer) {
    IWCM_ASSERT(!busy_);
    observer_ = std::move(observer);
}

SimNetwork::Link& SimNetwork::link(std::size_t from, std::size_t to) {
    IWCM_ASSERT(from < hosts_.size() && to < hosts_.size());
    return links_[from * hosts_.size() + to];
}

std::optional<Instant> SimNetwork::next_event() const {
    std::optional<Instant> next;
    if (!queue_.empty()) next = queue_.front().at;
    for (const SimHost* host : hosts_) {
        const std::optional<Instant> d = host->next_deadline();
        if (!d || *d == kInstantNever) continue;
        if (!next || *d < *next) next = *d;
    }
    return next;
}

bool SimNetwork::step() {
    BusyGuard guard(busy_);
    const std::size_t sent = collect();
    const std::optional<Instant> next = next_event();
    if (!next) return sent > 0;
    // A deadline already in the past fires now: time never runs backwards.
    now_ = std::max(now_, *next);
    IWCM_ASSERT(now_ < kInstantNever);
    deliver_due();
    fire_timers();
    return true;
}

std::size_t SimNetwork::run(std::size_t limit) {
    std::size_t steps = 0;
    while (steps < limit && step()) ++steps;
    IWCM_ASSERT(steps <= limit);
    return steps;
}

std::size_t SimNetwork::run_until(Instant t, std::size_t limit) {
    IWCM_ASSERT(!busy_);
    IWCM_ASSERT(t >= now_);
    std::size_t steps = 0;
    for (;;) {
        {
            // Frames the hosts hold are sent now, so that their arrival counts.
            BusyGuard guard(busy_);
            collect();
        }
        const std::optional<Instant> next = next_event();
        if (!next || *next > t) {
            now_ = t;
            break;
        }
        if (steps == limit) break;
        step();
        ++steps;
    }
    IWCM_ASSERT(steps <= limit);
    return steps;
}

void SimNetwork::advance_to(Instant t) {
    IWCM_ASSERT(!busy_);
    IWCM_ASSERT(t >= now_);
    const std::optional<Instant> next = next_event();
    const bool nothing_due_before_t = !next || *next >= t;
    IWCM_ASSERT(nothing_due_before_t);
    now_ = t;
}

std::size_t SimNetwork::collect() {
    IWCM_ASSERT(busy_);
    std::size_t sent = 0;
    for (std::size_t from = 0; from < hosts_.size(); ++from) {
        std::size_t from_this_host = 0;
        while (const auto frame = hosts_[from]->poll_transmit()) {
            IWCM_ASSERT(++from_this_host <= kMaxFramesPerPoll);
            transmit(from, *frame);
            ++sent;
        }
    }
    return sent;
}

void SimNetwork::transmit(std::size_t from, std::span<const std::byte> frame) {
    ++counters_.sent;
    if (frame.size() < kEthernetHeaderLen) {
        ++counters_.runts;
        observe({now_, kInstantNever, from, kNoHost, FrameFate::kLost, frame});
        return;
    }
    // Recipients are decided when the frame leaves, from each host's MAC now.
    const MacAddr dst = destination_of(frame);
    recipients_.clear();
    for (std::size_t to = 0; to < hosts_.size(); ++to) {
        if (to == from) continue;  // Ethernet does not loop a frame back to its sender.
        if (dst.is_multicast() || hosts_[to]->mac() == dst) recipients_.push_back(to);
    }
    if (recipients_.empty()) {
        ++counters_.unroutable;
        observe({now_, kInstantNever, from, kNoHost, FrameFate::kLost, frame});
        return;
    }
    for (const std::size_t to : recipients_) send_copy(from, to, frame);
}

void SimNetwork::send_copy(std::size_t from, std::size_t to, std::span<const std::byte> frame) {
    const LinkFaults& f = faults(from, to);
    if (draw(f.loss)) {
        ++counters_.lost;
        observe({now_, kInstantNever, from, to, FrameFate::kLost, frame});
        return;
    }
    const bool duplicate = draw(f.duplicate);
    enqueue_copy(from, to, frame, false);
    if (duplicate) {
        ++counters_.duplicated;
        enqueue_copy(from, to, frame, true);
    }
}

void SimNetwork::enqueue_copy(std::size_t from, std::size_t to, std::span<const std::byte> frame,
                              bool duplicate) {
    if (queue_.size() >= max_in_flight_) {
        ++counters_.overflowed;
        observe({now_, kInstantNever, from, to, FrameFate::kLost, frame});
        return;
    }
    const LinkFaults f = faults(from, to);  // a copy: link() below must not alias it
    Instant at = now_ + f.latency + draw_up_to(f.jitter);
    const bool reordered = draw(f.reorder);
    Link& l = link(from, to);
    if (reordered) {
        // Held back so that later frames overtake it; it does not move the
        // link's FIFO mark, so those later frames are not held behind it.
        at += Duration{1} + draw_up_to(std::max(4 * f.latency, Duration{1}) - Duration{1});
        ++counters_.reordered;
    } else {
        at = std::max(at, l.last_arrival);
        l.last_arrival = at;
    }
    const bool corrupted = draw(f.corrupt);
    const std::uint32_t slot = acquire_slot(frame);
    std::span<std::byte> bytes(slots_[slot]);
    if (corrupted) {
        corrupt(bytes);
        ++counters_.corrupted;
    } else if (draw(f.shut_window) && shut_window(bytes)) {
        ++counters_.windows_shut;
    }
    IWCM_ASSERT(at >= now_ && at < kInstantNever);
    queue_.push_back({at, next_seq_++, slot, static_cast<std::uint32_t>(to)});
    std::push_heap(queue_.begin(), queue_.end(), ArrivesLater{});
    const FrameFate fate = duplicate   ? FrameFate::kDuplicated
                           : corrupted ? FrameFate::kCorrupted
                           : reordered ? FrameFate::kReordered
                                       : FrameFate::kDelivered;
    observe({now_, at, from, to, fate, bytes});
}

void SimNetwork::deliver_due() {
    IWCM_ASSERT(busy_);
    while (!queue_.empty() && queue_.front().at <= now_) {
        std::pop_heap(queue_.begin(), queue_.end(), ArrivesLater{});
        const Pending p = queue_.back();
        queue_.pop_back();
        IWCM_ASSERT(p.at == now_);  // advance_to() and step() never skip an arrival
        IWCM_ASSERT(p.to < hosts_.size());
        ++counters_.delivered;
        hosts_[p.to]->receive(now_, slots_[p.slot]);
        free_slots_.push_back(p.slot);
    }
}

void SimNetwork::fire_timers() {
    IWCM_ASSERT(busy_);
    // Deadlines are read after delivery: a frame may have moved or cancelled one.
    for (SimHost* host : hosts_) {
        const std::optional<Instant> d = host->next_deadline();
        if (d && *d != kInstantNever && *d <= now_) host->on_timer(now_);
    }
}

bool SimNetwork::draw(double p) {
    // Certain outcomes take no draw: a fault-free network consumes no randomness.
    if (p <= 0.0) return false;
    if (p >= 1.0) return true;
    return rng_.chance(p);
}

Duration SimNetwork::draw_up_to(Duration max) {
    IWCM_ASSERT(max >= Duration::zero());
    if (max == Duration::zero()) return max;
    const auto count = static_cast<std::uint64_t>(max.count());
    const Duration d{static_cast<Duration::rep>(rng_.below(count + 1))};
    IWCM_ASSERT(d >= Duration::zero() && d <= max);
    return d;
}

void SimNetwork::corrupt(std::span<std::byte> bytes) {
    IWCM_ASSERT(!bytes.empty());
    const std::size_t index = rng_.below(bytes.size());
    const int flips = 1 + static_cast<int>(rng_.below(3));
    unsigned mask = 0;
    while (std::popcount(mask) < flips) mask |= 1u << rng_.below(8);
    IWCM_ASSERT(mask != 0 && mask <= 0xff);
    bytes[index] ^= static_cast<std::byte>(mask);
}

// The window field to zero and the checksum mended for it (RFC 1624 eqn. 3:
// HC' = ~(~HC + ~m + m'), m' = 0), so that the frame is still good. Not for
// SYN or RST segments, nor a window already zero.
bool SimNetwork::shut_window(std::span<std::byte> bytes) {
    const auto tcp = tcp_offset(bytes);
    if (!tcp) return false;
    const unsigned flags = std::to_integer<unsigned>(bytes[*tcp + 13]);
    const std::uint16_t window = get16(bytes, *tcp + 14);
    if ((flags & 0x06) != 0 || window == 0) return false;
    std::uint32_t sum = static_cast<std::uint16_t>(~get16(bytes, *tcp + 16));
    sum += static_cast<std::uint16_t>(~window);
    sum = (sum & 0xFFFF) + (sum >> 16);
    sum = (sum & 0xFFFF) + (sum >> 16);
    put16(bytes, *tcp + 14, 0);
    put16(bytes, *tcp + 16, static_cast<std::uint16_t>(~sum));
    return true;
}

std::uint32_t SimNetwork::acquire_slot(std::span<const std::byte> frame) {
    std::uint32_t slot;
    if (free_slots_.empty()) {
        slot = static_cast<std::uint32_t>(slots_.size());
        slots_.emplace_back();
    } else {
        slot = free_slots_.back();
        free_slots_.pop_back();
    }
    IWCM_ASSERT(slot < slots_.size());
    // assign() reuses the buffer's capacity: after warm-up no frame allocates.
    slots_[slot].assign(frame.begin(), frame.end());
    IWCM_ASSERT(slots_[slot].size() == frame.size());
    return slot;
}

void SimNetwork::observe(const FrameRecord& record) const {
    if (observer_) observer_(record);
}

}  // namespace iwcm::io
