// iwcm::Runtime: a Core and an rdma::Device on a real interface, driven by a
// progress thread, usable from any thread.
//
// Read first: include/iwcm/core.hpp and include/iwcm/verbs.hpp (the sans-I/O
// contracts this wraps), docs/design.md "Runtime".
//
// One Runtime owns one interface: a TAP device it opens (its own MAC and
// address, its own ARP / ND), or an existing interface shared with the
// kernel's TCP stack over AF_XDP (`dev`: the kernel's MAC, address, routes
// and neighbours). Its progress thread sleeps in epoll_wait(2) until a frame,
// the earliest deadline of the core or of the neighbour table, or a wake-up
// from an application thread arrives: an idle runtime uses no CPU.
//
// Threads. The core, the device and the driver are guarded by one mutex. The
// progress thread holds it while it handles frames and timers, never while
// it sleeps. An application thread holds it for the length of call(f): f
// gets a Session (the core, the device and the driver's port and neighbour
// services) and `now`; when f returns, the frames it queued are sent from
// the calling thread and the progress thread is woken only if f moved the
// earliest deadline forward (so a post_send costs no context switch).
//
// Events. Whatever the core, the device and the neighbour table have to say
// is drained under the lock, after every round of the progress thread and
// after every call(): each Core event goes to Device::on_event first, and
// what it does not take, each QpEvent, each completion a CQ received, and each
// finished resolution go to the RuntimeHandler given to start(). Without one,
// they queue inside the runtime and event_fd() (an eventfd) is readable while
// any waits: poll_event() takes them, from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "iwcm/address.hpp"
#include "iwcm/core.hpp"
#include "iwcm/events.hpp"
#include "iwcm/result.hpp"
#include "iwcm/time.hpp"
#include "iwcm/verbs.hpp"

namespace iwcm {

struct RuntimeConfig {
    // TAP mode: the device (made if missing), our address ADDR/PREFIX, our MAC
    // (default 02:00 and the address's last four bytes), an off-link gateway,
    // a VLAN (-1: none).
    std::string tap;
    std::string ip;
    std::string mac;
    std::string gateway;
    int vlan = -1;
    // Shared-address mode: the interface; `ip` (optional, ADDR or ADDR/PREFIX)
    // chooses among its addresses; xdp_mode "auto", "native" or "generic".
    std::string dev;
    std::string xdp_mode = "auto";
    // Shared-address mode: the iwarp-cm program that runs the interface's
    // switch (`iwarp-cm switch`), so that several programs share it; empty:
    // this runtime takes the interface's AF_XDP socket for itself alone.
    std::string switch_program;
    // Both modes.
    bool crc = false;  // offer and require MPA CRC
    int tos = 0;       // IP TOS of our connections
    std::uint8_t mpa_revision = 2;
    std::string pcap;  // a capture of every frame, empty: none
    // How long a server may take to be ready, in milliseconds (0 to 60000), for a
    // soft-iWARP (siw) server, which needs both: MpaConfig::initiator_send_wait (our first
    // data as the initiator waits this long after ESTABLISHED) and
    // CoreConfig::connect_refused_grace (a refused connect is tried again within it).
    int settle_ms = 0;
    // The progress thread's nice value (-20 to 19), set when it starts where the process
    // may (root, or RLIMIT_NICE), else left as the process's; nullopt: left alone. -20
    // lets it preempt an application thread that busy-polls (docs/design.md "Runtime").
    std::optional<int> progress_nice = -20;
    // CoreConfig::listener_grace: SYNs to a port whose listener was destroyed this
    // recently wait (the peer retransmits) instead of being reset, so that a program
    // listening again on the same port (perftest -R) keeps a quick client.
    Duration listener_grace = std::chrono::seconds(3);
    // Keepalive on every connection's stream (StreamConfig::keepalive): after
    // keepalive_idle without a segment from the peer, a probe every keepalive_interval;
    // keepalive_probes unanswered ones end the connection (DISCONNECTED, -ETIMEDOUT, the
    // work requests flushed). A process killed over a TAP sends no FIN or reset, so its
    // idle peers learn of it only so. 0 s idle: off, as a kernel socket has it.
    Duration keepalive_idle = std::chrono::seconds(30);
    Duration keepalive_interval = std::chrono::seconds(5);
    std::uint8_t keepalive_probes = 4;
    // Busy polling, in microseconds (0: off, the default; at most 1 000 000): the
    // progress thread never sleeps but keeps its core, looking for frames and due timers
    // round after round, and over AF_XDP the socket prefers busy polling (the kernel
    // moves its frames in our system calls, for this long at most each, instead of
    // after interrupts; a switch we start does the same). It trades a core for the
    // wake-ups a frame otherwise costs; with fewer cores than busy threads the slow round
    // trips grow to a time slice (docs/design.md "Busy polling"). The thread then keeps the
    // process's nice value
    // (progress_nice is not applied): spinning at -20 it would starve the application.
    // Application threads that want the lock make it step aside.
    std::uint32_t busy_poll_us = 0;
    // TAP mode: the TAP with the virtio-net header where the kernel has it, so that the
    // kernel finishes TCP checksums and cuts segments of up to 65000 bytes at the MSS, as a
    // NIC's TSO does (CoreConfig::checksum_partial, StreamConfig::segment_offload). false:
    // every checksum computed here, every segment at most an MSS.
    bool tap_offload = true;

    // From the environment, as `iwarp-cm run` sets it (docs/applications.md): IWCM_TAP, IWCM_IP,
    // IWCM_MAC, IWCM_GATEWAY, IWCM_VLAN, IWCM_DEV, IWCM_XDP_MODE, IWCM_SWITCH, IWCM_CRC (0/1),
    // IWCM_TOS, IWCM_MPA_REV, IWCM_PCAP, IWCM_SETTLE, IWCM_BUSY_POLL, IWCM_TAP_OFFLOAD (0/1). An
    // error names the variable and what is wrong with it.
    static Expected<RuntimeConfig, std::string> from_env();
    // The checks start() makes before touching a device (one line each):
    // exactly one of tap and dev, a well-formed ip/mac/gateway/vlan/tos.
    Expected<void, std::string> validate() const;
};

// What the runtime runs on, once started.
struct RuntimeInfo {
    std::string device;   // the TAP's or the interface's name
    bool shared = false;  // shared-address (AF_XDP) mode
    MacAddr mac;
    IpAddr addr;
    unsigned prefix = 0;
    std::uint16_t vlan = kNoVlan;
    std::uint32_t mtu = 1500;
};

// Under the runtime's lock: the engine and the driver's services. Valid only
// inside the call (or handler callback) that received it.
class Session {
public:
    virtual ~Session() = default;
    virtual Instant now() const = 0;
    virtual Core& core() = 0;
    virtual rdma::Device& device() = 0;
    virtual const RuntimeInfo& info() const = 0;
    // Core::listen, with the port reserved in the kernel and steered to us in
    // shared-address mode. An unspecified local address listens on ours.
    virtual Expected<ListenHandle, std::string> listen(const ListenParams& lp) = 0;
    virtual void destroy_listen(ListenHandle listener) = 0;
    // Core::connect, with cp.local filled in (our address; a port the kernel
    // reserved in shared-address mode when cp.local.port is 0). cp.remote_mac
    // must come from resolve().
    virtual Expected<ConnHandle, std::string> connect(ConnectParams cp) = 0;
    // Starts finding the MAC of the next hop toward dst (TAP: our ARP / ND and
    // the gateway; shared: the kernel's route and neighbour). The handler's
    // on_resolved(token, ...) follows, possibly before resolve() returns to
    // the caller's caller (never from inside resolve() itself). An error here
    // (no route, not on our subnet and no gateway) means no callback follows.
    virtual Expected<void, std::string> resolve(const IpAddr& dst, std::uint64_t token,
                                                Duration timeout) = 0;
};

// The events of a runtime without a handler (see the file comment).
struct ResolvedEvent {
    std::uint64_t token = 0;
    std::optional<MacAddr> mac;  // nullopt: no answer before the timeout
    std::string error;           // why, when mac is nullopt
};
struct CompletionEvent {
    rdma::CqHandle cq;
    bool solicited = false;  // the completion is a receive of a Send with Solicited Event
};
// Core events are copied: their private_data points into `private_data`.
struct CoreEvent {
    Event event;
    std::vector<std::byte> private_data;
};
using RuntimeEvent = std::variant<CoreEvent, rdma::QpEvent, CompletionEvent, ResolvedEvent>;

// The callbacks run with the lock held, on the progress thread or on the
// thread inside call(); they may use the Session, must not block, and must
// not call Runtime::call (it would deadlock).
class RuntimeHandler {
public:
    virtual ~RuntimeHandler() = default;
    virtual void on_event(Session& s, const Event& e) = 0;  // what Device::on_event left
    virtual void on_qp_event(Session& s, const rdma::QpEvent& e) = 0;
    virtual void on_completion(Session& s, rdma::CqHandle cq, bool solicited) = 0;
    virtual void on_resolved(Session& s, std::uint64_t token, std::optional<MacAddr> mac,
                             const std::string& error) = 0;
};

class Runtime {
public:
    // Opens the device, starts the progress thread. The handler (may be null:
    // events queue, see poll_event) must outlive the runtime.
    static Expected<std::unique_ptr<Runtime>, std::string> start(const RuntimeConfig& config,
                                                                 RuntimeHandler* handler = nullptr);
    // Closes every connection still open (gracefully, for at most close_limit;
    // what is left is reset), stops the thread, closes the device.
    ~Runtime();
    Runtime(const Runtime&) = delete;
    Runtime& operator=(const Runtime&) = delete;

    // Runs f(Session&) under the lock, drains events, sends what was queued,
    // wakes the progress thread if its sleep must end sooner. Returns f's value.
    template <class F>
    decltype(auto) call(F&& f) {
        Guard guard(*this);
        return f(guard.session());
    }

    const RuntimeInfo& info() const;

    // Progress made by the calling thread, for one that polls (ibv_poll_cq on an
    // empty CQ): when the device reads without a system call (AF_XDP) and the lock
    // is free, the frames waiting are read and handled here, their events and
    // completions delivered, and what they caused sent, rather than wait for the
    // progress thread to be woken and scheduled. True if a frame was read. Never
    // blocks; not from a handler (as call()).
    bool poll_inline();

    // Without a handler: readable while an event waits (level-triggered: the
    // eventfd is read when the queue empties).
    int event_fd() const;
    std::optional<RuntimeEvent> poll_event();
    // Blocks until an event or the timeout (nullopt).
    std::optional<RuntimeEvent> wait_event(Duration timeout);

    // How long ~Runtime waits for graceful closes (default 2 s).
    void set_close_limit(Duration limit);

    // The progress thread's CPU time so far (CLOCK_THREAD_CPUTIME_ID of it),
    // for the tests that check an idle runtime sleeps.
    Duration progress_cpu_time() const;
    // The progress thread's nice value now (RuntimeConfig::progress_nice, if it took).
    int progress_nice() const;

    struct Impl;

private:
    explicit Runtime(std::unique_ptr<Impl> impl);
    class Guard {
    public:
        explicit Guard(Runtime& rt);
        ~Guard();
        Guard(const Guard&) = delete;
        Guard& operator=(const Guard&) = delete;
        Session& session();

    private:
        Runtime& rt_;
    };
    std::unique_ptr<Impl> impl_;
};

}  // namespace iwcm
