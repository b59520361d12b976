// Shared-address mode. Read first: shared_host.hpp.
#include "io/shared_host.hpp"

#include <linux/neighbour.h>

#include <algorithm>

#include "iwcm/assert.hpp"

namespace iwcm::io {

Expected<LinkInfo, std::string> SharedHost::probe(Rtnl& rtnl, const std::string& dev) {
    auto link = rtnl.link(dev);
    if (!link) return fail("--dev " + dev + ": " + link.error());
    if (link->mac == MacAddr{})
        return fail("--dev " + dev + ": the interface has no MAC address (not Ethernet)");
    return link;
}

SharedHost::SharedHost(Rtnl rtnl, Core& core, const IpAddr& addr, int ifindex)
    : rtnl_(std::move(rtnl)), core_(core), addr_(addr), ifindex_(ifindex) {}

SharedHost::~SharedHost() {
    // The program goes first (host_ owns the device), then the reservations.
    host_.reset();
}

Expected<std::unique_ptr<SharedHost>, std::string> SharedHost::open(const SharedHostConfig& config,
                                                                    Rtnl rtnl, Core& core,
                                                                    const IpAddr& addr) {
    auto link = probe(rtnl, config.dev);
    if (!link) return fail(link.error());
    if (link->mac != core.config().mac)
        return fail(std::string("the core's MAC must be the interface's (") +
                    link->mac.to_string() + ")");
    if (auto r = rtnl.subscribe(); !r) return fail(r.error());
    std::unique_ptr<SharedHost> h(new SharedHost(std::move(rtnl), core, addr, link->index));
    auto xsk = XskDevice::open(config.dev, config.mode);
    if (!xsk) return fail(xsk.error());
    h->xsk_ = xsk->get();
    TapHostConfig hc;
    hc.pcap_path = config.pcap_path;
    hc.handle_signals = config.handle_signals;
    hc.kernel_neighbors = true;
    auto host = TapHost::open_device(std::move(*xsk), hc, core, kNoVlan);
    if (!host) return fail(host.error());
    h->host_ = std::move(*host);
    SharedHost* self = h.get();
    if (!h->host_->watch(h->rtnl_.fd(), [self](Instant now) { self->on_changes(now); }))
        return fail(std::string("watching the kernel's notifications: epoll_ctl failed"));
    h->host_->after_step([self](Instant now) { self->reap(now, false); });
    h->link_up_ = link->up();
    auto addrs = h->rtnl_.addresses(link->index);
    if (!addrs) return fail(addrs.error());
    h->addr_present_ = std::any_of(addrs->begin(), addrs->end(),
                                   [&](const AddrInfo& a) { return a.addr == addr; });
    h->update_address(TapHost::now());
    return h;
}

// ---------------------------------------------------------------- ports

Expected<PortReservation, std::string> SharedHost::claim(const IpAddr& addr, std::uint16_t port) {
    auto r = PortReservation::reserve(addr, port);
    if (!r) return fail(r.error());
    if (auto m = xsk_->add_port(addr, r->port()); !m) return fail(m.error());
    ++counters_.ports_reserved;
    return r;
}

void SharedHost::release(const PortReservation& r) {
    xsk_->remove_port(r.addr(), r.port());
    ++counters_.ports_released;
}

Expected<ListenHandle, std::string> SharedHost::listen(const ListenParams& lp) {
    auto port = claim(lp.local.addr, lp.local.port);
    if (!port) return fail(port.error());
    auto l = core_.listen(lp);
    if (!l) {
        release(*port);
        return fail("listen on " + lp.local.to_string() + ": " + std::string(to_string(l.error())));
    }
    listeners_.push_back({*l, std::move(*port)});
    return *l;
}

void SharedHost::destroy_listen(Instant now, ListenHandle listener) {
    (void)core_.destroy_listen(now, listener);
    auto it = std::find_if(listeners_.begin(), listeners_.end(),
                           [&](const Listening& l) { return l.handle == listener; });
    if (it == listeners_.end()) return;
    release(it->port);
    listeners_.erase(it);
}

Expected<ConnHandle, std::string> SharedHost::connect(Instant now, ConnectParams cp) {
    IWCM_ASSERT(cp.local.port == 0);
    for (int attempt = 0; attempt < kConnectTries; ++attempt) {
        auto port = claim(cp.local.addr, 0);
        if (!port) {
            reap(now, true);  // the kernel's range is used up: give back what lingers
            port = claim(cp.local.addr, 0);
        }
        if (!port) return fail(port.error());
        cp.local.port = port->port();
        auto c = core_.connect(now, cp);
        if (c) {
            conns_.push_back({*c, std::move(*port), std::nullopt});
            return *c;
        }
        if (c.error() != ApiError::kAddressInUse) {
            release(*port);
            return fail("connect from " + cp.local.to_string() + ": " +
                        std::string(to_string(c.error())));
        }
        // A node of ours still holds this 4-tuple: keep the port a while longer.
        conns_.push_back({ConnHandle{}, std::move(*port), now});
    }
    return fail("connect from " + cp.local.addr.to_string() + ": every port the kernel gave (" +
                std::to_string(kConnectTries) + ") is still in use by a closing connection");
}

// A connection's port goes back twice close_delay after the application's
// handle went stale (the node's TIME_WAIT of the setup phase is over by
// then), a port the core refused as long after the refusal. With `all` (the
// kernel has no free port left) every stale connection's port goes back now.
void SharedHost::reap(Instant now, bool all) {
    const Duration linger = 2 * core_.config().close_delay;
    for (Held& h : conns_)
        if (!h.since && !core_.state(h.conn)) h.since = now;
    std::erase_if(conns_, [&](const Held& h) {
        // A refused port is known to be busy: it waits out its linger in any case.
        const bool early = all && h.conn.valid();
        if (!h.since || (!early && now < *h.since + linger)) return false;
        release(h.port);
        return true;
    });
}

// ---------------------------------------------------------------- the kernel's tables

Expected<IpAddr, std::string> SharedHost::next_hop(const IpAddr& dst) {
    // An IPv6 link-local destination has a route on every link: name ours.
    const bool link_local = dst.is_v6() && dst.raw()[0] == 0xFE && (dst.raw()[1] & 0xC0) == 0x80;
    auto r = rtnl_.route(dst, link_local ? ifindex_ : 0);
    if (!r) return fail(r.error());
    if (r->oif != ifindex_) {
        auto other = rtnl_.link(r->oif);
        return fail("the kernel's route to " + dst.to_string() + " leaves through " +
                    (other ? other->name : "interface " + std::to_string(r->oif)) + ", not " +
                    xsk_->name());
    }
    return r->next_hop(dst);
}

Expected<void, std::string> SharedHost::resolve(const IpAddr& hop) {
    return rtnl_.resolve(ifindex_, hop);
}

PeerStatus SharedHost::peer(const IpAddr& hop, MacAddr& mac) {
    auto n = rtnl_.neighbor(ifindex_, hop);
    if (!n) return PeerStatus::kFailed;
    if (n->mac && NeighborInfo::has_valid_mac(n->state)) {
        mac = *n->mac;
        return PeerStatus::kResolved;
    }
    return n->state == NUD_FAILED ? PeerStatus::kFailed : PeerStatus::kPending;
}

void SharedHost::on_changes(Instant now) {
    bool reread = false;
    for (const Change& c : rtnl_.poll_changes()) {
        if (c.kind == Change::Kind::kOverrun) reread = true;
        if (c.ifindex != ifindex_) continue;
        switch (c.kind) {
            case Change::Kind::kLinkUp: link_up_ = true; break;
            case Change::Kind::kLinkDown: link_up_ = false; break;
            case Change::Kind::kAddrAdded: addr_present_ = addr_present_ || c.addr == addr_; break;
            case Change::Kind::kAddrRemoved:
                addr_present_ = addr_present_ && c.addr != addr_;
                break;
            case Change::Kind::kNeighbor:
            case Change::Kind::kNeighborRemoved:
            case Change::Kind::kOverrun: break;
        }
    }
    if (reread) {
        auto link = rtnl_.link(ifindex_);
        auto addrs = rtnl_.addresses(ifindex_);
        if (link) link_up_ = link->up();
        if (addrs)
            addr_present_ = std::any_of(addrs->begin(), addrs->end(),
                                        [&](const AddrInfo& a) { return a.addr == addr_; });
    }
    update_address(now);
}

// The core holds the address exactly while it is usable (irdma_if_notify).
void SharedHost::update_address(Instant now) {
    const bool usable = address_usable();
    if (usable == core_has_addr_) return;
    if (usable) {
        auto r = host_->add_address(addr_);
        IWCM_ASSERT(r.has_value());
        ++counters_.address_up;
    } else {
        (void)core_.remove_address(now, addr_);
        ++counters_.address_down;
    }
    core_has_addr_ = usable;
}

}  // namespace iwcm::io
