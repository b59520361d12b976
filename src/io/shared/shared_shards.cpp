// Shared-address mode on N threads. Read first: shared_shards.hpp.
#include "io/shared/shared_shards.hpp"

#include "iwcm/assert.hpp"

namespace iwcm::io {

SharedShards::SharedShards(const SharedShardsConfig& config, Rtnl rtnl, const IpAddr& addr,
                           int ifindex)
    : rtnl_(std::move(rtnl)),
      addr_(addr),
      ifindex_(ifindex),
      dev_(config.dev),
      address_(addr, ifindex),
      pool_(config.shards, TapShards::kFlowKey),
      local_(config.shards) {}

SharedShards::~SharedShards() {
    // The program goes first (queue 0's device owns it), then the reservations.
    net_.reset();
}

Expected<std::unique_ptr<SharedShards>, std::string> SharedShards::open(
    const SharedShardsConfig& config, Rtnl rtnl, const CoreConfig& core, const IpAddr& addr) {
    if (config.shards < 1) return fail(std::string("at least one thread"));
    auto link = SharedHost::probe(rtnl, config.dev);
    if (!link) return fail(link.error());
    if (link->mac != core.mac)
        return fail(std::string("the core's MAC must be the interface's (") +
                    link->mac.to_string() + ")");
    if (auto r = rtnl.subscribe(); !r) return fail(r.error());
    std::unique_ptr<SharedShards> h(new SharedShards(config, std::move(rtnl), addr, link->index));
    if (!h->open_net(config, core)) return fail(h->open_error_);
    return h;
}

// The sockets, the cores and their loops; the address as the kernel has it;
// the notifications and each thread's ports.
bool SharedShards::open_net(const SharedShardsConfig& config, const CoreConfig& core) {
    TapShardsConfig tc;
    tc.tap = config.dev;
    tc.shards = config.shards;
    tc.announce = false;  // the kernel owns the address and answers ARP / ND
    tc.handle_signals = config.handle_signals;
    tc.open_queue =
        [this, &config](std::uint32_t q) -> Expected<std::unique_ptr<FrameDevice>, std::string> {
        if (q == 0) {
            auto d = XskDevice::open(config.dev, config.mode);
            if (!d) return fail(d.error());
            xsk_ = d->get();
            return std::unique_ptr<FrameDevice>(std::move(*d));
        }
        IWCM_ASSERT(xsk_ != nullptr);
        auto d = xsk_->open_queue(q);
        if (!d)
            return fail(d.error() + " (" + std::to_string(config.shards) + " threads need " +
                        std::to_string(config.shards) + " receive queues on " + config.dev +
                        ": `ethtool -l " + config.dev + "` shows them, `ethtool -L` sets them)");
        return std::unique_ptr<FrameDevice>(std::move(*d));
    };
    auto net = TapShards::open(tc, core, kNoVlan);
    if (!net) {
        open_error_ = net.error();
        return false;
    }
    net_ = std::move(*net);
    if (auto r = address_.read(rtnl_); !r) {
        open_error_ = r.error();
        return false;
    }
    usable_ = address_.usable();
    if (usable_.load()) {
        auto r = net_->add_address(addr_);
        IWCM_ASSERT(r.has_value());
        for (Local& l : local_) l.has_addr = true;
    }
    for (std::uint32_t s = 0; s < config.shards; ++s) {
        auto source = [this, s](const IpAddr& local,
                                const Endpoint& remote) -> Expected<PortReservation, std::string> {
            auto p = pool_.take(s, local, remote);
            if (!p) return fail(p.error());
            if (auto m = xsk_->add_port(local, p->port()); !m) return fail(m.error());
            return p;
        };
        auto release = [this](const PortReservation& r) { xsk_->remove_port(r.addr(), r.port()); };
        local_[s].ports = std::make_unique<ConnPorts>(net_->core(s), source, release);
    }
    if (!net_->watch(rtnl_.fd(), [this](Instant) { on_changes(); })) {
        open_error_ = "watching the kernel's notifications: epoll_ctl failed";
        return false;
    }
    net_->after_step([this](std::uint32_t s, Instant now) { after_step(s, now); });
    return true;
}

Expected<ListenHandle, std::string> SharedShards::listen(const ListenParams& lp) {
    auto port = PortReservation::reserve(lp.local.addr, lp.local.port);
    if (!port) return fail(port.error());
    if (auto m = xsk_->add_port(lp.local.addr, lp.local.port); !m) return fail(m.error());
    auto l = net_->listen(lp);
    if (!l) {
        xsk_->remove_port(lp.local.addr, lp.local.port);
        return fail("listen on " + lp.local.to_string() + ": " + std::string(to_string(l.error())));
    }
    listening_.push_back(std::move(*port));
    return *l;
}

Expected<ConnHandle, std::string> SharedShards::connect(std::uint32_t s, Instant now,
                                                        ConnectParams cp) {
    IWCM_ASSERT(s < local_.size());
    return local_[s].ports->connect(now, std::move(cp));
}

Expected<IpAddr, std::string> SharedShards::next_hop(const IpAddr& dst) {
    return kernel_next_hop(rtnl_, ifindex_, dev_, dst);
}

Expected<void, std::string> SharedShards::resolve(const IpAddr& hop) {
    return rtnl_.resolve(ifindex_, hop);
}

PeerStatus SharedShards::peer(const IpAddr& hop, MacAddr& mac) {
    return kernel_peer(rtnl_, ifindex_, hop, mac);
}

SharedShardsCounters SharedShards::counters() const {
    SharedShardsCounters c;
    for (const Local& l : local_) {
        c.address_down += l.counters.address_down;
        c.address_up += l.counters.address_up;
    }
    return c;
}

// Shard 0's thread: the notifications; the others learn the outcome from
// usable_ when woken.
void SharedShards::on_changes() {
    address_.follow(rtnl_);
    if (usable_.exchange(address_.usable()) != address_.usable()) net_->wake_all();
}

// Thread s: its core holds the address exactly while it is usable
// (irdma_if_notify, per core); its connections' ports go back in time.
void SharedShards::after_step(std::uint32_t s, Instant now) {
    Local& l = local_[s];
    const bool usable = usable_.load();
    if (usable != l.has_addr) {
        Core& core = net_->core(s);
        if (usable) {
            auto r = core.add_address(addr_, kNoVlan);
            IWCM_ASSERT(r.has_value());
            ++l.counters.address_up;
        } else {
            (void)core.remove_address(now, addr_);
            ++l.counters.address_down;
        }
        l.has_addr = usable;
    }
    l.ports->reap(now, false);
}

}  // namespace iwcm::io
