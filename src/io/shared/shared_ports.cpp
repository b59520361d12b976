// Ports of shared-address mode. Read first: shared_ports.hpp.
#include "io/shared/shared_ports.hpp"

#include <algorithm>

#include "iwcm/assert.hpp"
#include "iwcm/shard.hpp"

namespace iwcm::io {

// ---------------------------------------------------------------- ConnPorts

Expected<ConnHandle, std::string> ConnPorts::connect(Instant now, ConnectParams cp) {
    IWCM_ASSERT(cp.local.port == 0);
    for (int attempt = 0; attempt < kTries; ++attempt) {
        Expected<PortReservation, std::string> port = fail(std::string());
        const auto kept = std::find_if(kept_.begin(), kept_.end(), [&](const PortReservation& p) {
            return p.addr() == cp.local.addr;
        });
        if (kept != kept_.end()) {
            port = std::move(*kept);
            kept_.erase(kept);
        } else {
            port = source_(cp.local.addr, cp.remote);
        }
        if (!port) {
            reap(now, true);  // the kernel's range is used up: give back what lingers
            port = source_(cp.local.addr, cp.remote);
        }
        if (!port) return fail(port.error());
        cp.local.port = port->port();
        auto c = core_.connect(now, cp);
        if (c) {
            held_.push_back({*c, std::move(*port), std::nullopt});
            return *c;
        }
        if (c.error() != ApiError::kAddressInUse) {
            release_(*port);
            return fail("connect from " + cp.local.to_string() + ": " +
                        std::string(to_string(c.error())));
        }
        // A node of ours still holds this 4-tuple: keep the port a while longer.
        held_.push_back({ConnHandle{}, std::move(*port), now});
    }
    return fail("connect from " + cp.local.addr.to_string() + ": every port the kernel gave (" +
                std::to_string(kTries) + ") is still in use by a closing connection");
}

void ConnPorts::reap(Instant now, bool all) {
    if (!all && next_look_ && now < *next_look_) return;
    next_look_ = now + core_.config().close_delay / 4;
    const Duration linger = 2 * core_.config().close_delay;
    for (Held& h : held_)
        if (!h.since && !core_.state(h.conn)) h.since = now;
    std::erase_if(held_, [&](Held& h) {
        // A refused port is known to be busy: it waits out its linger in any case.
        const bool early = all && h.conn.valid();
        if (!h.since || (!early && now < *h.since + linger)) return false;
        if (!all && kept_.size() < keep_)
            kept_.push_back(std::move(h.port));
        else
            release_(h.port);
        return true;
    });
    if (all) {
        for (const PortReservation& p : kept_) release_(p);
        kept_.clear();
    }
    IWCM_ASSERT(kept_.size() <= keep_);
}

// ---------------------------------------------------------------- PortPool

PortPool::PortPool(std::uint32_t shards, std::uint64_t flow_key, Reserve reserve)
    : shards_(shards), key_(flow_key), reserve_(std::move(reserve)) {
    IWCM_ASSERT(shards >= 1);
    if (!reserve_)
        reserve_ = [](const IpAddr& a, std::uint16_t p) { return PortReservation::reserve(a, p); };
}

bool PortPool::fits(std::uint32_t shard, const PortReservation& p, const Endpoint& remote) const {
    return shard_of(flow_hash({p.addr(), p.port()}, remote, key_), shards_) == shard;
}

Expected<PortReservation, std::string> PortPool::take(std::uint32_t shard, const IpAddr& local,
                                                      const Endpoint& remote) {
    IWCM_ASSERT(shard < shards_);
    std::lock_guard lock(mu_);
    auto spare = std::find_if(spares_.begin(), spares_.end(), [&](const PortReservation& p) {
        return p.addr() == local && fits(shard, p, remote);
    });
    if (spare != spares_.end()) {
        PortReservation p = std::move(*spare);
        spares_.erase(spare);
        return p;
    }
    const std::uint64_t limit = std::uint64_t{kSearchPerShard} * shards_;
    for (std::uint64_t n = 0; n < limit; ++n) {
        auto p = reserve_(local, 0);
        if (!p) return fail(p.error());
        ++reservations_;
        if (fits(shard, *p, remote)) return p;
        // Another shard's, or (the spares full) back to the kernel as it closes.
        if (spares_.size() < kSpareLimit) spares_.push_back(std::move(*p));
    }
    return fail("no port of " + local.to_string() + " whose connection to " + remote.to_string() +
                " comes back to thread " + std::to_string(shard) + " in " + std::to_string(limit) +
                " the kernel gave");
}

std::size_t PortPool::spares() const {
    std::lock_guard lock(mu_);
    return spares_.size();
}

std::uint64_t PortPool::reservations() const {
    std::lock_guard lock(mu_);
    return reservations_;
}

}  // namespace iwcm::io
