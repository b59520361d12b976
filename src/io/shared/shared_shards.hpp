// Shared-address mode on N threads: the CM on an existing interface beside
// the kernel's TCP (shared_host.hpp says what that takes), with an AF_XDP
// socket on each of the interface's first N receive queues, a core and a
// loop per thread (tap_shards.hpp runs them and hands a frame that arrived
// on the wrong queue to the thread that owns its 4-tuple).
//
// Read first: shared_host.hpp (the same on one thread), tap_shards.hpp,
// shared_ports.hpp (where a thread's connection ports come from).
//
// What this adds to TapShards, as SharedHost adds it to TapHost:
//  * the sockets: queue 0's device loads the XDP program, the others share
//    its program and port map (XskDevice::open_queue). An interface with
//    fewer receive queues than threads fails on the first missing one, and
//    the error says so;
//  * ports: listen() reserves the listening port and steers it (every core
//    listens); connect(s, ...) takes a port from the shared PortPool whose
//    4-tuple hashes back to thread s, steers it, and thread s's ConnPorts
//    gives it back once the connection is over;
//  * the kernel's tables (routes, neighbours) through one rtnetlink socket,
//    used by shard 0's thread only (or before the threads start);
//  * the kernel's notifications: shard 0's loop watches them and publishes
//    whether the address is usable (an atomic) and wakes every thread; each
//    thread then removes the address from its own core (its connections are
//    reset, its listeners hear kAddressDown) or adds it back (kAddressUp), as
//    SharedHost does for its one core. A core is only ever touched by its
//    own thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/net/netlink.hpp"
#include "io/shared/shared_host.hpp"
#include "io/shared/shared_ports.hpp"
#include "io/shared/xsk.hpp"
#include "io/tap/tap_shards.hpp"

namespace iwcm::io {

struct SharedShardsConfig {
    std::string dev;
    XskDevice::Mode mode = XskDevice::Mode::kAuto;
    std::uint32_t shards = 2;
    bool handle_signals = true;
};

struct SharedShardsCounters {
    std::uint64_t address_down = 0;  // a core's address removed (summed over the cores)
    std::uint64_t address_up = 0;    // ... and added back
};

class SharedShards {
public:
    // Attaches to config.dev with config.shards sockets; `addr` must be one
    // of its addresses and core.mac the interface's.
    static Expected<std::unique_ptr<SharedShards>, std::string> open(
        const SharedShardsConfig& config, Rtnl rtnl, const CoreConfig& core, const IpAddr& addr);
    ~SharedShards();
    SharedShards(const SharedShards&) = delete;
    SharedShards& operator=(const SharedShards&) = delete;

    TapShards& net() { return *net_; }
    XskDevice& xsk() { return *xsk_; }

    // ---- before the threads start ----
    // Reserves lp.local's port, steers it to the CM, listens on every core.
    Expected<ListenHandle, std::string> listen(const ListenParams& lp);

    // ---- from shard s's thread ----
    // A port of cp.local.addr that comes back to thread s, then connect.
    Expected<ConnHandle, std::string> connect(std::uint32_t s, Instant now, ConnectParams cp);

    // ---- from shard 0's thread (or before the threads start) ----
    Expected<IpAddr, std::string> next_hop(const IpAddr& dst);
    Expected<void, std::string> resolve(const IpAddr& hop);
    PeerStatus peer(const IpAddr& hop, MacAddr& mac);

    // ---- after the threads ----
    const PortPool& pool() const { return pool_; }
    SharedShardsCounters counters() const;

private:
    SharedShards(const SharedShardsConfig& config, Rtnl rtnl, const IpAddr& addr, int ifindex);
    bool open_net(const SharedShardsConfig& config, const CoreConfig& core);
    void on_changes();
    void after_step(std::uint32_t s, Instant now);

    // Per thread; touched by that thread only once they run.
    struct alignas(64) Local {
        std::unique_ptr<ConnPorts> ports;
        bool has_addr = false;
        SharedShardsCounters counters;
    };

    Rtnl rtnl_;
    IpAddr addr_;
    int ifindex_;
    std::string dev_;
    AddressState address_;
    std::atomic<bool> usable_{false};  // written by shard 0's thread, read by all
    PortPool pool_;
    std::vector<PortReservation> listening_;
    std::vector<Local> local_;
    XskDevice* xsk_ = nullptr;  // queue 0's, owned by net_
    std::string open_error_;
    std::unique_ptr<TapShards> net_;
};

}  // namespace iwcm::io
