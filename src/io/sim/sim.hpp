// A simulated Ethernet segment with a virtual clock, for deterministic tests.
//
// Read first: docs/design.md "Code style" ("Time and chance": everything
// non-deterministic injected, seeds replay bugs, a limit on everything) and
// "Parts". Several sans-I/O hosts (normally iwcm::Core through
// CoreHost, in tests small fake hosts) share one segment. The network owns the
// only clock, a virtual one, and the only randomness, an Rng seeded once; so a
// seed replays the same frames, byte for byte, at the same virtual instants.
// Nothing here reads a real clock, sleeps, or touches a socket.
//
// The model, one step() at a time:
//   1. collect: every host's poll_transmit() is drained, in host-id order.
//      Each frame is routed by its destination MAC to its recipients and each
//      copy gets its fate from the link's LinkFaults (see "Faults" below).
//   2. advance: virtual time jumps to the earliest of the next frame arrival
//      and every host's next_deadline() (never backwards).
//   3. dispatch: every frame due at that instant is delivered, ordered by
//      (arrival time, sequence number), then on_timer(now) is called, in
//      host-id order, on every host whose next_deadline() is due.
// Hosts never call the network; what they transmit while handling a frame or
// a timer is collected by the next step at the same virtual instant.
//
// Faults are decided per copy (a broadcast frame makes one copy per
// recipient), drawing from the Rng only for probabilities that are neither 0
// nor 1, so a fault-free network does not consume randomness at all:
//   loss       the copy is dropped;
//   duplicate  a second copy is queued (fate kDuplicated), itself subject to
//              the corrupt and reorder draws;
//   corrupt    1 to 3 distinct bits of one random byte are flipped;
//   shut_window  a TCP segment without SYN or RST arrives advertising a zero
//              window, its checksum mended (RFC 1624): a receiver whose buffer
//              was full when it sent it. The next segment says the window
//              again, so the sender meets a window that shuts and opens, and
//              its persist probes (RFC 9293 3.8.6.1) are lost with the rest;
//   reorder    the copy gets an extra delay in (0, 4 * latency] and may be
//              overtaken by copies sent after it;
//   latency + jitter (uniform in [0, jitter]) is the base delay. Copies that
//   are not reordered keep FIFO order on their link: jitter alone never
//   reorders, as on a real Ethernet segment.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "io/sim/rng.hpp"
#include "iwcm/address.hpp"
#include "iwcm/core.hpp"
#include "iwcm/time.hpp"
#include "wire/frame.hpp"
#include "wire/pieces.hpp"

namespace iwcm::io {

// A host's frames carried in parts on the segment, as a gathering NIC would: taken with
// Core::poll_transmit_parts (a stream's payload read where it lies, joined here into the
// network's copy) and handed over with Core::receive_parts, the payload cut into pieces of
// uneven lengths (1 to 700 bytes, odd ones among them) so that an FPDU's header, payload
// and CRC, and even its length field, land in different pieces. A frame that does not
// parse (a corrupted one, say) is handed over whole.
class PartsShuttle {
public:
    std::optional<std::span<const std::byte>> poll(Core& core) {
        auto t = core.poll_transmit_parts();
        if (!t) return std::nullopt;
        joined_.assign(t->headers.begin(), t->headers.end());
        wire::append(joined_, t->payload);
        return std::span<const std::byte>(joined_);
    }
    void receive(Core& core, Instant now, std::span<const std::byte> frame) {
        auto parsed =
            wire::parse_tcp_frame(frame, core.config().checksum_offload ? wire::Checksums::kOffload
                                                                        : wire::Checksums::kFull);
        if (!parsed || parsed->payload.empty()) {
            core.receive(now, frame);
            return;
        }
        const std::size_t at = frame.size() - parsed->payload.size();
        static constexpr std::size_t kLengths[] = {1, 16, 3, 700, 2, 57, 5, 1440, 4, 131};
        pieces_.clear();
        std::size_t off = at;
        for (std::size_t i = frame.size() % 7; off < frame.size(); ++i) {
            const std::size_t n = std::min(kLengths[i % std::size(kLengths)], frame.size() - off);
            pieces_.push_back(frame.subspan(off, n));
            off += n;
        }
        core.receive_parts(now, frame.first(at), pieces_);
    }

private:
    std::vector<std::byte> joined_;
    std::vector<std::span<const std::byte>> pieces_;
};
// One endpoint on the segment: a sans-I/O state machine that the network
// drives. All calls come from SimNetwork::step() with the virtual now.
class SimHost {
public:
    virtual ~SimHost() = default;
    virtual MacAddr mac() const = 0;
    virtual void receive(Instant now, std::span<const std::byte> frame) = 0;
    virtual void on_timer(Instant now) = 0;
    // std::nullopt or kInstantNever: no timer wanted.
    virtual std::optional<Instant> next_deadline() const = 0;
    // The next frame to send; the view is valid until the next call.
    virtual std::optional<std::span<const std::byte>> poll_transmit() = 0;
    // Whether the host takes frames without verifying their checksums
    // (CoreConfig::checksum_offload): the network refuses (asserts) a link
    // that corrupts frames into such a host.
    virtual bool checksum_offload() const { return false; }
};

// Puts an iwcm::Core on the segment. Header-only: it links against the core
// only where it is constructed. The optional `app` runs after every receive()
// and on_timer(), with the same now, to play the application: drain
// poll_event() and answer with accept / reject / disconnect. Frames that it
// makes the core send are collected by the next step.
class CoreHost final : public SimHost {
public:
    using App = std::function<void(Instant now, Core& core)>;

    // `in_parts`: the core's frames move in parts (PartsShuttle).
    explicit CoreHost(Core& core, App app = {}, bool in_parts = false)
        : core_(core), app_(std::move(app)), in_parts_(in_parts) {}

    MacAddr mac() const override { return core_.config().mac; }
    void receive(Instant now, std::span<const std::byte> frame) override {
        if (in_parts_) {
            parts_.receive(core_, now, frame);
        } else {
            core_.receive(now, frame);
        }
        if (app_) app_(now, core_);
    }
    void on_timer(Instant now) override {
        core_.on_timer(now);
        if (app_) app_(now, core_);
    }
    std::optional<Instant> next_deadline() const override { return core_.next_deadline(); }
    std::optional<std::span<const std::byte>> poll_transmit() override {
        return in_parts_ ? parts_.poll(core_) : core_.poll_transmit();
    }
    bool checksum_offload() const override { return core_.config().checksum_offload; }

    Core& core() { return core_; }
    const Core& core() const { return core_; }

private:
    Core& core_;
    App app_;
    bool in_parts_ = false;
    PartsShuttle parts_;
};

struct LinkFaults {
    double loss = 0;
    double duplicate = 0;
    double reorder = 0;
    double corrupt = 0;
    double shut_window = 0;
    Duration latency = std::chrono::microseconds(50);
    Duration jitter = Duration::zero();
};

// What became of one copy of a frame. A copy has one fate; when several
// faults hit it the first of kDuplicated, kCorrupted, kReordered names it
// (the counters count every fault).
enum class FrameFate : std::uint8_t { kDelivered, kLost, kDuplicated, kCorrupted, kReordered };
const char* to_string(FrameFate fate);

// FrameRecord::to for a frame that reached no host (shorter than an Ethernet
// header, or a unicast MAC that no host has).
inline constexpr std::size_t kNoHost = std::numeric_limits<std::size_t>::max();

// One copy of a frame, reported when it is put on the wire. `delivered` is
// the virtual instant it will arrive (kInstantNever for kLost); `bytes` are
// what the recipient will see (corrupted for kCorrupted) and are valid only
// during the observer call.
struct FrameRecord {
    Instant sent;
    Instant delivered;
    std::size_t from;
    std::size_t to;
    FrameFate fate;
    std::span<const std::byte> bytes;
};

class SimNetwork {
public:
    static constexpr std::size_t kMaxHosts = 64;
    static constexpr std::size_t kEthernetHeaderLen = 14;
    static constexpr std::size_t kDefaultMaxInFlight = std::size_t{1} << 16;
    // A host that yields more frames than this from one drain of
    // poll_transmit() is looping: the network asserts.
    static constexpr std::size_t kMaxFramesPerPoll = std::size_t{1} << 20;

    struct Counters {
        std::uint64_t sent = 0;          // frames taken from hosts' poll_transmit()
        std::uint64_t delivered = 0;     // copies handed to a host's receive()
        std::uint64_t lost = 0;          // copies dropped by LinkFaults::loss
        std::uint64_t duplicated = 0;    // extra copies made
        std::uint64_t corrupted = 0;     // copies with flipped bits
        std::uint64_t windows_shut = 0;  // segments given a zero window (LinkFaults::shut_window)
        std::uint64_t reordered = 0;     // copies given the reordering delay
        std::uint64_t runts = 0;         // frames shorter than an Ethernet header
        std::uint64_t unroutable = 0;    // unicast frames whose MAC no other host has
        std::uint64_t overflowed = 0;    // copies dropped because in_flight() hit the limit
    };

    explicit SimNetwork(std::uint64_t seed, Instant start = kInstantZero);
    SimNetwork(const SimNetwork&) = delete;
    SimNetwork& operator=(const SimNetwork&) = delete;

    // The host must outlive the network. Returns its id: 0, 1, ... A host with
    // checksum offload is refused (asserted) on a network whose links corrupt
    // frames, and so is such a link into it (set_faults) afterwards.
    std::size_t add_host(SimHost& host);
    std::size_t host_count() const { return hosts_.size(); }

    // Every direction: sets the default and clears per-direction settings.
    void set_faults(LinkFaults faults);
    // One direction, from host `from` to host `to`.
    void set_faults(std::size_t from, std::size_t to, LinkFaults faults);
    const LinkFaults& faults(std::size_t from, std::size_t to) const;

    // Copies beyond this many in flight are dropped and counted in
    // Counters::overflowed (a switch with full buffers drops; a flooding core
    // is then visible in the counters instead of exhausting memory).
    void set_max_in_flight(std::size_t limit);

    Instant now() const { return now_; }
    std::uint64_t seed() const { return seed_; }

    // One collect / advance / dispatch round (see the file comment). Returns
    // false when there was nothing to do: no frame transmitted or in flight
    // and no deadline.
    bool step();
    // Steps until idle or until `limit` steps have run; returns the steps run
    // (equal to `limit` means the network was not idle).
    std::size_t run(std::size_t limit = 1'000'000);
    // Handles every frame and timer due at or before t (including frames sent
    // at t in answer to those), then leaves now() == t. Returns the steps run;
    // when that reaches `limit`, now() may still be before t.
    std::size_t run_until(Instant t, std::size_t limit = 1'000'000);
    // Moves time forward to t with no events: nothing may be due before t
    // (asserted; use run_until to let things happen on the way). Frames that
    // hosts have queued but not yet handed over are sent at t.
    void advance_to(Instant t);

    // Called for every copy put on the wire and every frame dropped at the
    // sender (runt, unroutable, overflow: fate kLost, to == kNoHost for the
    // first two). Must not call mutating members of the network.
    void set_observer(std::function<void(const FrameRecord&)> observer);

    const Counters& counters() const { return counters_; }
    std::size_t in_flight() const { return queue_.size(); }
    // The earliest pending arrival or host deadline, if any.
    std::optional<Instant> next_event() const;

private:
    struct Link {
        std::optional<LinkFaults> faults;  // nullopt: default_faults_
        Instant last_arrival = kInstantZero;
    };
    // One copy waiting for its arrival time; its bytes live in slots_[slot].
    struct Pending {
        Instant at;
        std::uint64_t seq;
        std::uint32_t slot;
        std::uint32_t to;
    };

    std::size_t collect();
    void transmit(std::size_t from, std::span<const std::byte> frame);
    void send_copy(std::size_t from, std::size_t to, std::span<const std::byte> frame);
    void enqueue_copy(std::size_t from, std::size_t to, std::span<const std::byte> frame,
                      bool duplicate);
    void deliver_due();
    void fire_timers();
    bool draw(double p);
    Duration draw_up_to(Duration max);
    void corrupt(std::span<std::byte> bytes);
    bool shut_window(std::span<std::byte> bytes);
    void check_offload(std::size_t to, const LinkFaults& faults) const;
    std::uint32_t acquire_slot(std::span<const std::byte> frame);
    void observe(const FrameRecord& record) const;
    Link& link(std::size_t from, std::size_t to);

    Rng rng_;
    std::uint64_t seed_;
    Instant now_;
    std::vector<SimHost*> hosts_;
    LinkFaults default_faults_;
    std::vector<Link> links_;                    // hosts_.size() squared, row = sender
    std::vector<std::vector<std::byte>> slots_;  // buffers, reused: no per-frame allocation
    std::vector<std::uint32_t> free_slots_;
    std::vector<Pending> queue_;  // min-heap on (at, seq)
    std::uint64_t next_seq_ = 0;
    std::size_t max_in_flight_ = kDefaultMaxInFlight;
    Counters counters_;
    std::function<void(const FrameRecord&)> observer_;
    std::vector<std::size_t> recipients_;  // scratch for transmit()
    bool busy_ = false;                    // inside step(): hosts and observers must not re-enter
};

}  // namespace iwcm::io
