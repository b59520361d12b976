// Shared-address mode. Read first: shared_host.hpp.
#include "io/shared/shared_host.hpp"

#include <linux/neighbour.h>

#include <algorithm>

#include "io/shared/switch.hpp"
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
    : rtnl_(std::move(rtnl)),
      core_(core),
      addr_(addr),
      ifindex_(ifindex),
      conns_(
          core, [this](const IpAddr& a, const Endpoint&) { return claim(a, 0); },
          [this](const PortReservation& r) { release(r); }),
      address_(addr, ifindex) {
    // One thread: any port suits any peer, so ports are kept for the next connections.
    conns_.keep_released(kKeptPorts);
}

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
    std::unique_ptr<SteeredDevice> device;
    if (config.switch_command.empty()) {
        auto xsk = XskDevice::open(config.dev, config.mode);
        if (!xsk) return fail(xsk.error());
        if (config.busy_poll_us > 0)
            if (auto r = (*xsk)->set_busy_poll(config.busy_poll_us); !r) return fail(r.error());
        device = std::move(*xsk);
    } else {
        auto client = SwitchClient::connect(config.dev, config.switch_command);
        if (!client) return fail(client.error());
        device = std::move(*client);
    }
    h->xsk_ = device.get();
    TapHostConfig hc;
    hc.pcap_path = config.pcap_path;
    hc.handle_signals = config.handle_signals;
    hc.kernel_neighbors = true;
    auto host = TapHost::open_device(std::move(device), hc, core, kNoVlan);
    if (!host) return fail(host.error());
    h->host_ = std::move(*host);
    h->host_->set_busy_poll(config.busy_poll_us > 0);
    SharedHost* self = h.get();
    const auto on_changes = [self](Instant now) {
        self->address_.follow(self->rtnl_);
        self->update_address(now);
    };
    if (!h->host_->watch(h->rtnl_.fd(), on_changes))
        return fail(std::string("watching the kernel's notifications: epoll_ctl failed"));
    h->host_->after_step([self](Instant now) {
        self->conns_.reap(now, false);
        if (!self->closed_listeners_.empty()) self->reap_listeners(now);
    });
    if (auto r = h->address_.read(h->rtnl_); !r) return fail(r.error());
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
    // A port whose listener went while its connections live is still ours:
    // listening on it again takes that reservation back (perftest -R does).
    auto kept =
        std::find_if(closed_listeners_.begin(), closed_listeners_.end(), [&](const Closed& c) {
            return c.port.addr() == lp.local.addr && c.port.port() == lp.local.port;
        });
    Expected<PortReservation, std::string> port = fail(std::string());
    const bool was_kept = kept != closed_listeners_.end();
    Instant kept_until{};
    if (was_kept) {
        port = std::move(kept->port);
        kept_until = kept->until;
        closed_listeners_.erase(kept);
    } else {
        port = claim(lp.local.addr, lp.local.port);
    }
    if (!port) return fail(port.error());
    auto l = core_.listen(lp);
    if (!l) {
        if (was_kept)  // its connections (or its grace) still need it
            closed_listeners_.push_back({std::move(*port), kept_until});
        else
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
    // The connections it accepted outlive it, as a kernel socket's do: their
    // segments stay ours until the last has ended, and new SYNs until the
    // listener's grace is over (reap_listeners).
    closed_listeners_.push_back({std::move(it->port), now + core_.config().listener_grace});
    listeners_.erase(it);
    reap_listeners(now);
}

void SharedHost::reap_listeners(Instant now) {
    std::erase_if(closed_listeners_, [&](const Closed& c) {
        if (now < c.until || core_.open_nodes_on({c.port.addr(), c.port.port()}) > 0) return false;
        release(c.port);
        return true;
    });
}

Expected<ConnHandle, std::string> SharedHost::connect(Instant now, ConnectParams cp) {
    return conns_.connect(now, std::move(cp));
}

// ---------------------------------------------------------------- the kernel's tables

Expected<IpAddr, std::string> kernel_next_hop(Rtnl& rtnl, int ifindex, const std::string& dev,
                                              const IpAddr& dst) {
    // An IPv6 link-local destination has a route on every link: name ours.
    const bool link_local = dst.is_v6() && dst.raw()[0] == 0xFE && (dst.raw()[1] & 0xC0) == 0x80;
    auto r = rtnl.route(dst, link_local ? ifindex : 0);
    if (!r) return fail(r.error());
    if (r->oif != ifindex) {
        auto other = rtnl.link(r->oif);
        return fail("the kernel's route to " + dst.to_string() + " leaves through " +
                    (other ? other->name : "interface " + std::to_string(r->oif)) + ", not " + dev);
    }
    return r->next_hop(dst);
}

PeerStatus kernel_peer(Rtnl& rtnl, int ifindex, const IpAddr& hop, MacAddr& mac) {
    auto n = rtnl.neighbor(ifindex, hop);
    if (!n) return PeerStatus::kFailed;
    if (n->mac && NeighborInfo::has_valid_mac(n->state)) {
        mac = *n->mac;
        return PeerStatus::kResolved;
    }
    return n->state == NUD_FAILED ? PeerStatus::kFailed : PeerStatus::kPending;
}

Expected<IpAddr, std::string> SharedHost::next_hop(const IpAddr& dst) {
    return kernel_next_hop(rtnl_, ifindex_, xsk_->name(), dst);
}

Expected<void, std::string> SharedHost::resolve(const IpAddr& hop) {
    return rtnl_.resolve(ifindex_, hop);
}

PeerStatus SharedHost::peer(const IpAddr& hop, MacAddr& mac) {
    return kernel_peer(rtnl_, ifindex_, hop, mac);
}

Expected<void, std::string> AddressState::read(Rtnl& rtnl) {
    auto link = rtnl.link(ifindex_);
    if (!link) return fail(link.error());
    auto addrs = rtnl.addresses(ifindex_);
    if (!addrs) return fail(addrs.error());
    link_up_ = link->up();
    present_ = std::any_of(addrs->begin(), addrs->end(),
                           [&](const AddrInfo& a) { return a.addr == addr_; });
    return {};
}

void AddressState::follow(Rtnl& rtnl) {
    bool reread = false;
    for (const Change& c : rtnl.poll_changes()) {
        if (c.kind == Change::Kind::kOverrun) reread = true;
        if (c.ifindex != ifindex_) continue;
        switch (c.kind) {
            case Change::Kind::kLinkUp: link_up_ = true; break;
            case Change::Kind::kLinkDown: link_up_ = false; break;
            case Change::Kind::kAddrAdded: present_ = present_ || c.addr == addr_; break;
            case Change::Kind::kAddrRemoved: present_ = present_ && c.addr != addr_; break;
            case Change::Kind::kNeighbor:
            case Change::Kind::kNeighborRemoved:
            case Change::Kind::kOverrun: break;
        }
    }
    if (reread) (void)read(rtnl);  // on an error the last known state stands
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
