// Shared-address mode: the CM on an existing interface, on one of the
// addresses the kernel's TCP stack uses, as the irdma driver shares its
// netdev's address.
//
// Read first: xsk.hpp (the AF_XDP device and its XDP program), ports.hpp
// (port reservation), netlink.hpp (the kernel's tables), event_loop.hpp (the
// loop this wraps). What this class adds to the loop:
//  * every port the CM uses is reserved in the kernel (a bound socket) and
//    put in the XDP program's port map: listen() the listening port,
//    connect() an ephemeral port the kernel picks (ConnectParams::local.port);
//    the port is released (socket closed, map entry removed) when the
//    listener is destroyed, or twice the core's close_delay after the
//    application's handle of the connection went stale (its terminal event
//    was polled): the node's TIME_WAIT of the setup phase is over by then (a
//    stream's longer TIME_WAIT is not waited for: late segments then reach
//    the kernel). When the kernel's ephemeral range is used up, lingering
//    ports go back at once; should the kernel then hand out a port whose
//    4-tuple a closing node of ours still holds, the core refuses it
//    (kAddressInUse) and connect() keeps it reserved a while and takes another;
//  * neighbours and routes come from the kernel (RTM_GETNEIGH, RTM_GETROUTE;
//    an unknown neighbour is resolved by the kernel, RTM_NEWNEIGH NTF_USE); the
//    CM never answers or sends ARP / ND here;
//  * the kernel's notifications drive the core's address: the address removed
//    or the link down -> Core::remove_address (the address's connections are
//    reset, its listeners stay and hear kAddressDown); the address back with
//    the link up -> Core::add_address (the listeners serve again).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/loop/event_loop.hpp"
#include "io/net/netlink.hpp"
#include "io/shared/ports.hpp"
#include "io/shared/shared_ports.hpp"
#include "io/shared/xsk.hpp"
#include "iwcm/core.hpp"

namespace iwcm::io {

struct SharedHostConfig {
    std::string dev;        // the interface
    std::string pcap_path;  // empty: no capture
    bool handle_signals = true;
    XskDevice::Mode mode = XskDevice::Mode::kAuto;
    // Not empty: share the interface with other programs through its switch
    // (switch.hpp), started with this argv when none runs; empty: own the
    // interface's AF_XDP socket alone.
    std::vector<std::string> switch_command;
    // Not 0: busy polling (TapHost::set_busy_poll; our own AF_XDP socket's
    // XskDevice::set_busy_poll for this many microseconds; a switch of our starting
    // polls its own socket when switch_command asks for it).
    std::uint32_t busy_poll_us = 0;
};

struct SharedHostCounters {
    std::uint64_t ports_reserved = 0;
    std::uint64_t ports_released = 0;
    std::uint64_t address_down = 0;  // the core's address removed (address gone or link down)
    std::uint64_t address_up = 0;    // ... and added back
};

enum class PeerStatus : std::uint8_t { kPending, kResolved, kFailed };

// Whether the shared address is usable: present on the interface and the link
// up, from the kernel's tables once, then from its notifications. Shared by
// the one-thread host and the N-thread one (shared_shards.hpp).
class AddressState {
public:
    AddressState(const IpAddr& addr, int ifindex) : addr_(addr), ifindex_(ifindex) {}
    // Reads the link and its addresses (after Rtnl::subscribe: no change is lost between).
    Expected<void, std::string> read(Rtnl& rtnl);
    // Applies the notifications queued on rtnl's socket; after an overrun
    // (some were lost) reads the tables again.
    void follow(Rtnl& rtnl);
    bool usable() const { return present_ && link_up_; }

private:
    IpAddr addr_;
    int ifindex_;
    bool present_ = true;
    bool link_up_ = true;
};

// The kernel's tables, for the host on one thread and on N (shared_shards.hpp).
// The route to dst must leave through ifindex (named dev): its next hop.
Expected<IpAddr, std::string> kernel_next_hop(Rtnl& rtnl, int ifindex, const std::string& dev,
                                              const IpAddr& dst);
// The kernel's entry for hop on ifindex: its MAC once valid.
PeerStatus kernel_peer(Rtnl& rtnl, int ifindex, const IpAddr& hop, MacAddr& mac);

class SharedHost {
public:
    // The interface, its MAC (CoreConfig::mac must be it) and addresses.
    static Expected<LinkInfo, std::string> probe(Rtnl& rtnl, const std::string& dev);
    // Attaches to config.dev; `addr` must be one of its addresses. The core
    // must outlive the host; its MAC must be the interface's.
    static Expected<std::unique_ptr<SharedHost>, std::string> open(const SharedHostConfig& config,
                                                                   Rtnl rtnl, Core& core,
                                                                   const IpAddr& addr);
    ~SharedHost();
    SharedHost(const SharedHost&) = delete;
    SharedHost& operator=(const SharedHost&) = delete;

    // Reserves lp.local's port, steers it to the CM, listens.
    Expected<ListenHandle, std::string> listen(const ListenParams& lp);
    void destroy_listen(Instant now, ListenHandle listener);
    // Reserves an ephemeral port, sets cp.local.port to it, connects.
    Expected<ConnHandle, std::string> connect(Instant now, ConnectParams cp);

    // The route to dst must leave through our interface; its next hop.
    Expected<IpAddr, std::string> next_hop(const IpAddr& dst);
    // Asks the kernel to resolve hop (it sends the ARP request / solicitation).
    Expected<void, std::string> resolve(const IpAddr& hop);
    // The kernel's entry for hop: its MAC once valid.
    PeerStatus peer(const IpAddr& hop, MacAddr& mac);

    TapHost& host() { return *host_; }
    SteeredDevice& xsk() { return *xsk_; }
    const SharedHostCounters& counters() const { return counters_; }
    std::size_t reserved_ports() const {
        return listeners_.size() + closed_listeners_.size() + conns_.held();
    }
    // The address is usable: present on the interface and the link up.
    bool address_usable() const { return address_.usable(); }

private:
    SharedHost(Rtnl rtnl, Core& core, const IpAddr& addr, int ifindex);
    Expected<PortReservation, std::string> claim(const IpAddr& addr, std::uint16_t port);
    void release(const PortReservation& r);
    void update_address(Instant now);
    void reap_listeners(Instant now);

    struct Listening {
        ListenHandle handle;
        PortReservation port;
    };
    // A destroyed listener's port stays ours while its accepted connections are open and
    // for the core's listener_grace after it went (its SYNs wait, they reach no kernel
    // that would reset them).
    struct Closed {
        PortReservation port;
        Instant until;
    };

    Rtnl rtnl_;
    Core& core_;
    IpAddr addr_;
    int ifindex_;
    SteeredDevice* xsk_ = nullptr;  // owned by host_
    std::unique_ptr<TapHost> host_;
    std::vector<Listening> listeners_;
    // Ports of destroyed listeners still held (Closed).
    std::vector<Closed> closed_listeners_;
    // Ports whose linger is over kept reserved for the next connections (ConnPorts):
    // as many as a connector has in flight by default (its --parallel), each a socket.
    static constexpr std::size_t kKeptPorts = 1024;
    ConnPorts conns_;
    AddressState address_;
    bool core_has_addr_ = false;
    SharedHostCounters counters_;
};

}  // namespace iwcm::io
