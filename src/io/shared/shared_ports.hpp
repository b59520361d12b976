// The ports of the CM's connections in shared-address mode: each reserved in
// the kernel (ports.hpp) and steered to the CM (the XDP program's port map)
// while a connection of ours may still use it.
//
// Read first: ports.hpp (why a bound socket holds a port), shared_host.hpp
// (the one-thread host these serve), include/iwcm/shard.hpp (ports that hash
// back to a shard).
//
// ConnPorts keeps one core's connection ports: connect() takes a port from
// its source, connects from it, and gives it back (release) twice the core's
// close_delay after the application's handle went stale, so that the node's
// TIME_WAIT of the setup phase is over by then. Where any port suits any peer
// (one thread: keep_released), a port whose linger is over is kept instead,
// still reserved and steered, and the next connection takes it: a port from
// the source costs six system calls (socket, bind, getsockname, a BPF map
// update; the map update and close that give it back), a kept one none.
// One thread's object.
//
// PortPool is the source of N cores on N threads (shared_shards.hpp). A
// core's port must be one whose 4-tuple hashes back to its own shard, or
// the replies would reach another thread. Two ways to get one: choose it as
// the core's own pick_port does (candidates in 49152..65535 until one hashes
// to the shard) and bind that port; or let the kernel pick from its
// ephemeral range (bind to port 0) and keep the ports that hash to the
// shard. The second is taken: the kernel's choice honours
// ip_local_port_range and ip_local_reserved_ports, and skips ports its own
// sockets use, as with one thread (a port chosen by us could be one an
// administrator kept out of the range for a service that binds it later).
// About one port in N hashes to a given shard, so a search reserves N on
// average; the others are not given back but kept as spares, and the next
// shard that needs a port looks there first: nearly every reservation is
// used. The spares are few (kSpareLimit) and go back to the kernel with the
// pool. Shared by the threads under a mutex, touched once per connection.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "io/shared/ports.hpp"
#include "iwcm/core.hpp"

namespace iwcm::io {

class ConnPorts {
public:
    // A port reserved (and steered to the CM) for a connection from `local` to `remote`.
    using Source =
        std::function<Expected<PortReservation, std::string>(const IpAddr&, const Endpoint&)>;
    // A port goes back: no longer steered to the CM (the reservation closes after).
    using Release = std::function<void(const PortReservation&)>;

    ConnPorts(Core& core, Source source, Release release)
        : core_(core), source_(std::move(source)), release_(std::move(release)) {}
    // What is still held closes with it, unreleased: the caller's XDP program
    // (and its port map) is gone by then, or goes with the process.
    ~ConnPorts() = default;
    ConnPorts(const ConnPorts&) = delete;
    ConnPorts& operator=(const ConnPorts&) = delete;

    // Takes a port, sets cp.local.port to it, connects. When the core still
    // holds the 4-tuple (a closing node of ours: kAddressInUse), the port is
    // kept a while and another taken, kTries times at most. When the source
    // has none, the ports that linger go back at once and it is asked again.
    Expected<ConnHandle, std::string> connect(Instant now, ConnectParams cp);
    // Gives back the ports whose time is over; with `all` (the kernel's range
    // is used up) every stale connection's port at once. The loops call it
    // after every step: without `all` it looks at most once per
    // close_delay / 4 (each look asks the core about every port held), so a
    // port goes back up to that much later than its linger.
    void reap(Instant now, bool all);
    // Keeps up to `n` ports whose linger is over for the next connections, rather
    // than giving them back (0, the default: every one goes back). `reap(now,
    // true)` gives the kept ones back too.
    void keep_released(std::size_t n) { keep_ = n; }
    std::size_t held() const { return held_.size(); }
    std::size_t kept() const { return kept_.size(); }

    static constexpr int kTries = 64;

private:
    struct Held {
        ConnHandle conn;
        PortReservation port;
        // The handle went stale (or, without a handle, the core refused the port) then.
        std::optional<Instant> since;
    };

    Core& core_;
    Source source_;
    Release release_;
    std::vector<Held> held_;
    std::vector<PortReservation> kept_;  // linger over, reserved and steered: used first
    std::size_t keep_ = 0;
    std::optional<Instant> next_look_;
};

class PortPool {
public:
    // How a port is reserved: PortReservation::reserve unless a test says otherwise.
    using Reserve =
        std::function<Expected<PortReservation, std::string>(const IpAddr&, std::uint16_t)>;
    static constexpr std::size_t kSpareLimit = 256;
    // How many reservations one take() makes at most, per shard, before it
    // gives up (a search fails with odds of about e^-64).
    static constexpr int kSearchPerShard = 64;

    PortPool(std::uint32_t shards, std::uint64_t flow_key, Reserve reserve = {});

    // A port of `local` reserved in the kernel whose 4-tuple with `remote`
    // hashes to `shard` (include/iwcm/shard.hpp): a spare, or one the kernel picks.
    Expected<PortReservation, std::string> take(std::uint32_t shard, const IpAddr& local,
                                                const Endpoint& remote);
    std::size_t spares() const;
    std::uint64_t reservations() const;  // made in the kernel, spares included

private:
    bool fits(std::uint32_t shard, const PortReservation& p, const Endpoint& remote) const;

    std::uint32_t shards_;
    std::uint64_t key_;
    Reserve reserve_;
    mutable std::mutex mu_;
    std::vector<PortReservation> spares_;  // under mu_
    std::uint64_t reservations_ = 0;       // under mu_
};

}  // namespace iwcm::io
